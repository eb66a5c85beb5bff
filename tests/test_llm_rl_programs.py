"""Update programs compiled ahead for the other completion widths: which widths, what shapes, and
the same numbers as the jitted update; a run with them logs what a run without them logs."""

from __future__ import annotations

import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_llm_rl_speed import _batch, _cfg, _groups, _sharing_groups

from catsim.llm import rl
from catsim.llm.rl import RLConfig
from catsim.llm.rl import step as rl_step
from catsim.llm.rl.programs import UpdatePrograms


@pytest.fixture(scope="module")
def pol(tmp_path_factory):
    from llm_rl_helpers import make_base_model

    from catsim.llm.evaluate import load_policy

    return load_policy(make_base_model(tmp_path_factory.mktemp("rl-programs") / "base"))


def _fresh(pol, fns):
    params = jax.tree.map(jnp.copy, pol.params)
    return params, fns.optimizer.init(params)


@pytest.mark.parametrize("shared", [False, True])
def test_programs_of_other_widths_equal_the_jitted_update(pol, shared):
    """After one update at width 8, the widths 16 and 32 are compiled in the background (16 first,
    the nearest); the compiled width-16 program gives the jitted update's numbers bit for bit."""
    cfg = _cfg()
    fns = rl_step.make_functions(pol.cfg, cfg)

    def batch(width):
        groups = rl_step.trim_completions((_sharing_groups if shared else _groups)(32), width)
        b = _batch(groups, cfg)
        if shared:
            b = jax.tree.map(jnp.asarray, rl_step.shared_prompt_batch(jax.tree.map(np.asarray, b), 4, 4))
        return b

    tau = np.float32(1.0)
    programs = UpdatePrograms(fns.update, max_new_tokens=32)
    try:
        params, opt = _fresh(pol, fns)
        first = programs.program(params, opt, batch(8), tau, 8)
        assert first is fns.update  # the first width: the jitted function, nothing compiled yet
        fns.update(params, opt, batch(8), tau)
        b16 = batch(16)
        program = programs.program(*_fresh(pol, fns), b16, tau, 16)
        assert program is not fns.update and isinstance(program, jax.stages.Compiled)
        out_aot = program(*_fresh(pol, fns), b16, tau)
        out_jit = fns.update(*_fresh(pol, fns), b16, tau)
        for a, b in zip(jax.tree.leaves(out_aot), jax.tree.leaves(out_jit)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        programs.program(*_fresh(pol, fns), batch(32), tau, 32)  # waits for the last one
        assert programs.compiled_widths == [16, 32]
    finally:
        programs.close()


def test_programs_off_and_unknown_shapes_use_the_jitted_update(pol):
    cfg = _cfg()
    fns = rl_step.make_functions(pol.cfg, cfg)
    off = UpdatePrograms(fns.update, max_new_tokens=32, background=False)
    params, opt = _fresh(pol, fns)
    b = _batch(rl_step.trim_completions(_groups(32), 8), cfg)
    assert off.program(params, opt, b, np.float32(1.0), 8) is fns.update and off.compiled_widths == []
    on = UpdatePrograms(fns.update, max_new_tokens=32)
    try:
        on.program(params, opt, b, np.float32(1.0), 8)
        other = {k: v[:4] for k, v in b.items()}  # another row count: not one of the programs
        assert on.program(params, opt, other, np.float32(1.0), 8) is fns.update
    finally:
        on.close()


class _SlowUpdate:
    """Stands in for the jitted update: each ahead-of-time compile takes `seconds`."""

    def __init__(self, seconds):
        self.seconds, self.started = seconds, threading.Event()

    def lower(self, *args):
        return self

    def compile(self):
        self.started.set()
        time.sleep(self.seconds)
        return "compiled"


def test_close_waits_for_the_compile_under_way_and_drops_the_rest():
    """No compilation outlives `close()` (a run's end): the one under way finishes, the others are
    never started, and the thread is gone."""
    slow = _SlowUpdate(2.0)  # ample time for close() to be called while width 16 compiles
    programs = UpdatePrograms(slow, max_new_tokens=32)
    batch = {"tokens": np.zeros((4, 8), np.int32), "prompt_tokens": np.zeros((1, 5), np.int32)}
    assert programs.program({"w": np.zeros(3, np.float32)}, (), batch, np.float32(1.0), 8) is slow
    assert slow.started.wait(10)  # width 16 is compiling; 32 waits its turn
    programs.close()
    assert programs.compiled_widths == [16]
    assert not [t for t in threading.enumerate() if t.name.startswith("catsim-compile")]


def test_run_with_programs_logs_what_a_run_without_them_logs(tmp_path, monkeypatch):
    """The same 3-step run with and without ahead-of-time programs: identical log lines (timing
    aside)."""
    from llm_rl_helpers import ToyTask, make_base_model

    make_base_model(tmp_path / "base", init_std=0.3)
    kw = dict(steps=3, prompts_per_step=2, group_size=4, max_new_tokens=12, score_truncated=True,
              learning_rate=3e-2, temperature=1.0)
    logs = {}
    for flag in (True, False):
        monkeypatch.setattr(rl.loop, "PRECOMPILE_WIDTHS", flag)
        out = tmp_path / f"run-{flag}"
        rl.run_rl(tmp_path / "base", out, RLConfig.from_flat(**kw), task=ToyTask(), progress=False)
        logs[flag] = [{k: v for k, v in r.items() if k not in ("step_seconds", "tokens_per_second")}
                      for r in rl.read_log(out)]
    assert logs[True] == logs[False]
