"""The run directory shared by the warm-up and RL, and the nested RL config's flat view."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from catsim.errors import CatsimError, CatsimWarning
from catsim.llm import rundir
from catsim.llm.rl import FLAT, RLConfig


def test_a_second_run_on_a_locked_directory_stops_with_one_line(tmp_path):
    run = rundir.RunDir(tmp_path, state_dir="s", log_file="log.jsonl", fingerprint="x")
    with run.locked():
        # another process: the lock is per open file, so a second process must be refused
        code = textwrap.dedent(f"""
            from catsim.llm import rundir
            from catsim.errors import CatsimError, CatsimWarning
            try:
                with rundir.RunDir({str(tmp_path)!r}, state_dir="s", log_file="l", fingerprint="y").locked():
                    print("entered")
            except CatsimError as err:
                print("refused:", err)
        """)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        assert out.startswith("refused:") and "in use by another run" in out and out.count("\n") == 1
    with run.locked():  # released at exit: the same directory can be used again
        pass


def test_state_round_trip_resume_and_log_truncation(tmp_path):
    run = rundir.RunDir(tmp_path, state_dir="s", log_file="log.jsonl", fingerprint="abc")
    tree = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "n": np.asarray(3, np.int32)}
    assert run.resume(tree) == (tree, 0)
    run.log_path.write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)) + '{"step": 4, "cut')
    run.save_state({"w": tree["w"] + 1, "n": tree["n"]}, 2)
    run.wait()
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))
    with pytest.warns(CatsimWarning, match="line 4 was cut"):  # the repair is said
        loaded, step = run.resume(tree)
    assert step == 2 and np.array_equal(loaded["w"], tree["w"] + 1)
    assert [r["step"] for r in run.history()] == [1, 2]  # steps after the saved one dropped
    other = rundir.RunDir(tmp_path, state_dir="s", log_file="log.jsonl", fingerprint="zzz")
    with pytest.raises(CatsimError, match="different settings"):
        other.resume(tree)
    wrong = {"w": np.zeros((3, 2), np.float32), "n": tree["n"]}
    with pytest.raises(CatsimError, match="does not match this model"):
        run.resume(wrong)
    run.close()


def _adam_state():
    import jax
    import jax.numpy as jnp
    import optax

    params = {"w": jax.random.normal(jax.random.key(0), (4, 5)),
              "b": jnp.linspace(-1, 1, 5).astype(jnp.bfloat16)}
    opt = optax.adamw(1e-2)
    state = opt.init(params)
    grads = jax.tree.map(lambda p: jnp.cos(p.astype(jnp.float32)).astype(p.dtype), params)
    updates, state = opt.update(grads, state, params)
    return optax.apply_updates(params, updates), state


def test_orbax_state_is_bit_identical_and_keeps_the_newest(tmp_path):
    import jax

    params, opt_state = _adam_state()
    run = rundir.RunDir(tmp_path, state_dir="state", log_file="log.jsonl", fingerprint="f", keep=2)
    with run.locked():
        for step in (1, 2, 3):
            moved = jax.tree.map(lambda x, s=step: x + s if x.dtype != np.int32 else x, params)
            run.save_state((moved, opt_state), step)
    assert sorted(p.name for p in (tmp_path / "state").iterdir() if p.name.isdigit()) == ["2", "3"]
    template = jax.tree.map(np.zeros_like, (params, opt_state))
    template = jax.tree.map(jax.numpy.asarray, template)
    fresh = rundir.RunDir(tmp_path, state_dir="state", log_file="log.jsonl", fingerprint="f")
    (got_params, got_opt), step = fresh.resume(template)
    assert step == 3
    want = (jax.tree.map(lambda x: x + 3, params), opt_state)
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves((got_params, got_opt)), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    assert jax.tree.structure(got_opt) == jax.tree.structure(opt_state)
    fresh.close()


def test_a_crash_before_a_checkpoint_is_finalized_leaves_the_previous_one(tmp_path):
    # the child saves step 1, then dies while step 2 is being finalized (all files written, the
    # rename into place not done): the resume reads step 1
    code = textwrap.dedent(f"""
        import os
        import numpy as np
        from orbax.checkpoint._src.path import async_path
        from catsim.llm import rundir

        run = rundir.RunDir({str(tmp_path)!r}, state_dir="state", log_file="log.jsonl", fingerprint="f")
        run.save_state({{"w": np.full(1000, 1.0, np.float32)}}, 1)
        run.wait()

        async def die(*args, **kwargs):
            os._exit(9)

        async_path.rename = die
        run.save_state({{"w": np.full(1000, 2.0, np.float32)}}, 2)
        run.wait()
        print("not reached")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 9 and "not reached" not in proc.stdout, proc.stderr[-2000:]
    assert [p.name for p in (tmp_path / "state").iterdir() if not p.name.isdigit()], "no unfinished save"
    run = rundir.RunDir(tmp_path, state_dir="state", log_file="log.jsonl", fingerprint="f")
    tree, step = run.resume({"w": np.zeros(1000, np.float32)})
    assert step == 1 and np.all(np.asarray(tree["w"]) == 1.0)
    run.close()


def test_a_state_of_the_one_file_format_is_still_read(tmp_path):
    from safetensors.numpy import save_file

    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    save_file({"leaf_00000": w, "leaf_00001": np.asarray([4], np.int32)}, str(tmp_path / "s.safetensors"),
              metadata={"step": "4", "fingerprint": "abc", "leaves": "2"})
    run = rundir.RunDir(tmp_path, state_dir="s", log_file="log.jsonl", fingerprint="abc")
    (got_w, got_n), step = run.resume((np.zeros_like(w), np.asarray(0, np.int32)))
    assert step == 4 and np.array_equal(got_w, w) and int(got_n) == 4
    with pytest.raises(CatsimError, match="different settings"):
        rundir.RunDir(tmp_path, state_dir="s", log_file="l", fingerprint="zz").resume((w, np.asarray(0)))


def test_the_step_log_keeps_every_record_and_names_what_it_cannot(tmp_path):
    path = tmp_path / "log.jsonl"
    lines = [json.dumps({"step": s, "loss": s / 10}) for s in (1, 2, 3)]
    path.write_text("\n".join(lines[:2]) + "\n" + lines[2][:9])  # step 3's record cut, state saved at 3
    note = rundir.truncate_log(path, 3)
    assert "line 3 was cut" in note and "no record of step(s) 3 of the 3 saved" in note and "\n" not in note
    assert path.read_text() == "\n".join(lines[:2]) + "\n"
    assert rundir.truncate_log(path, 2) is None  # nothing to say
    path.write_text(lines[0] + "\n[1, 2]\n" + lines[2] + "\n")  # a damaged line before the last
    for read in (lambda: rundir.read_log(path), lambda: rundir.truncate_log(path, 3)):
        with pytest.raises(CatsimError, match=r"log\.jsonl, line 2: damaged"):
            read()
    assert path.read_text() == lines[0] + "\n[1, 2]\n" + lines[2] + "\n"  # refused: untouched
    run = rundir.RunDir(tmp_path, state_dir="s", log_file="log.jsonl", fingerprint="f")
    with pytest.raises(CatsimError, match="line 2"):
        run.resume({"w": np.zeros(3, np.float32)})


def test_a_refusal_of_other_settings_names_them(tmp_path):
    settings = {"rl": {"learning_rate": 0.01, "seed": 0, "group_size": 8}, "base": "/b"}
    run = rundir.RunDir(tmp_path, state_dir="s", log_file="log.jsonl", fingerprint=rundir.fingerprint(settings),
                        settings=settings)
    tree = {"w": np.zeros(3, np.float32)}
    with run.locked():
        run.save_state(tree, 1)
    other = {"rl": {"learning_rate": 0.5, "seed": 0, "group_size": 8, "new": True}, "base": "/b"}
    with pytest.raises(CatsimError, match=r"different settings \(rl\.learning_rate 0\.01 there, 0\.5 here; "
                                          r"rl\.new unset there, true here\)"):
        rundir.RunDir(tmp_path, state_dir="s", log_file="log.jsonl", fingerprint=rundir.fingerprint(other),
                      settings=other).resume(tree)


def test_task_file_has_one_reader(tmp_path):
    with pytest.raises(CatsimError, match="catsim_task.json"):
        rundir.read_task_file(tmp_path)
    rundir.write_json(tmp_path / rundir.TASK_FILE, {"task": "maze", "config": {"size": 5}, "data_seed": 3})
    task, seed = rundir.task_for_model(tmp_path, None, {})
    assert (task.name, task.config.size, seed) == ("maze", 5, 3)
    task, seed = rundir.task_for_model(tmp_path, "maze", {"size": 7}, data_seed=1)
    assert (task.config.size, seed) == (7, 1)
    (tmp_path / rundir.TASK_FILE).write_text("{not json")
    with pytest.raises(CatsimError, match="not valid JSON"):
        rundir.read_task_file(tmp_path)


def test_flat_options_round_trip_through_the_nested_config():
    cfg = RLConfig.from_flat(method="dapo", gamma=0.5, gamma_schedule="warmup", gamma_warmup_steps=3,
                             group_size=4, learning_rate=3e-4, asym_mixed=True, mixed_delta=1.0, seed=7)
    assert cfg.gamma.kind == "warmup" and cfg.gamma.warmup_steps == 3 and cfg.gamma.gamma == 0.5
    assert cfg.rollout.group_size == 4 and cfg.optimizer.learning_rate == 3e-4 and cfg.run.seed == 7
    assert cfg.use("mixed") and cfg.asym.delta == 1.0
    assert set(cfg.flat()) == set(FLAT)
    assert RLConfig.from_flat(**cfg.flat()) == cfg
    assert cfg.replace(seed=8).run.seed == 8 and cfg.run.seed == 7
    with pytest.raises(CatsimError, match="unknown RL option"):
        RLConfig.from_flat(gama=0.5)
    with pytest.raises(CatsimError, match="gamma"):
        RLConfig.from_flat(gamma=-1.0)
