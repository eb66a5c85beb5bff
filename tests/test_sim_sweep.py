"""Sweeps: labelled results (xarray/pandas), resumability, regimes from data, the table, the
figure, the CLI (`catsim simulate`, `catsim sweep`) and sharding over 8 host devices."""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from catsim.cli.main import main
from catsim.errors import CatsimError
from catsim.sim import analysis
from catsim.sim import config as C
from catsim.sim import sweep as S
from catsim.sim.results import SimResults

TINY = C.SimConfig(policy=C.PolicyConfig(num_actions=200, num_correct=20), steps=10, log_every=5,
                   method="tiny")
TINY_ARGS = ["--num-actions", "200", "--num-correct", "20", "--steps", "10", "--log-every", "5"]


# Every test below uses these cells (N ∈ {2, 16}, γ ∈ {0, 1}, 2 seeds) so that the compiled
# programs are shared (engine caches them per configuration).
SIZES, GAMMAS, SEEDS = (2, 16), (0.0, 1.0), 2


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    return out, S.sweep(TINY, out, group_sizes=SIZES, gammas=GAMMAS, seeds=SEEDS, progress=False)


def test_sweep_results_and_conversions(swept):
    out, res = swept
    assert res.data["qpos"].shape == (1, 2, 2, 2, 3)
    ds = res.to_xarray()
    assert dict(ds.sizes) == {"method": 1, "gamma": 2, "n": 2, "seed": 2, "step": 3}
    assert list(ds["step"].values) == [0, 5, 10]
    df = res.to_dataframe()
    assert df.index.names == ["method", "gamma", "n", "seed", "step"] and "mret" in df.columns
    assert len(res.final_frame()) == 8
    loaded = SimResults.load(out / "results.npz")
    np.testing.assert_array_equal(loaded.data["mret"], res.data["mret"])
    assert np.isnan(res.data["mu_hat"][..., 0]).all() and not np.isnan(res.data["mu_hat"][..., 1:]).any()


def test_sweep_resumes_without_rerunning(swept, monkeypatch):
    out, res = swept
    monkeypatch.setattr(S, "run_cell", lambda *a, **k: pytest.fail("a finished cell was re-run"))
    again = S.sweep(TINY, out, group_sizes=SIZES, gammas=GAMMAS, seeds=SEEDS, progress=False)
    np.testing.assert_array_equal(again.data["qpos"], res.data["qpos"])
    # A changed configuration under the same label is neither silently reused nor overwritten.
    changed = dataclasses.replace(TINY, update=dataclasses.replace(TINY.update, learning_rate=0.02))
    with pytest.raises(CatsimError, match="learning_rate = 0.02 here, 0.01 there"):
        S.sweep(changed, out, group_sizes=SIZES, gammas=GAMMAS, seeds=SEEDS, progress=False)


def test_simulate_equals_sweep_cells(swept):
    _, res = swept
    a = S.simulate(TINY, group_sizes=(16,), gammas=GAMMAS, seeds=SEEDS)
    np.testing.assert_array_equal(a.data["mret"][:, :, 0], res.data["mret"][:, :, 1])


def test_find_regimes_from_data():
    sizes = [2, 4, 8, 16, 32, 64, 128]
    r = analysis.find_regimes(sizes, [0.99, 0.95, 0.3, 0.05, 0.2, 0.9, 0.99])
    assert (r["I"], r["II"], r["III"]) == ([2, 4], [8, 16, 32], [64, 128])
    r = analysis.find_regimes(sizes, [0.99] * 7)
    assert (r["I"], r["II"], r["III"]) == (sizes, [], [])
    r = analysis.find_regimes(sizes[::-1], [0.99, 0.9, 0.2, 0.05, 0.3, 0.95, 0.99])  # unsorted input
    assert r["II"] == [8, 16, 32]


def test_table_and_figure(swept, tmp_path):
    _, res = swept
    table = analysis.format_table(res)
    assert "regimes from data" in table and "16" in table
    from catsim.plots.fig2 import plot_fig2

    path = plot_fig2(res, tmp_path / "fig.png")
    assert path.exists() and path.stat().st_size > 10_000


def test_cli_simulate_json(capsys):
    code = main(["simulate", *TINY_ARGS, "--group-size", "2,16", "--gamma", "0,1", "--seeds", "2",
                 "--format", "json"])
    assert code == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert len(rows) == 8
    assert {"n", "gamma", "seed", "steps", "qpos", "mret", "entropy"} <= set(rows[0])
    assert {(r["n"], r["gamma"], r["seed"]) for r in rows} == {
        (n, g, s) for n in (2, 16) for g in (0.0, 1.0) for s in (0, 1)}


@pytest.mark.parametrize("argv,match", [
    (["--num-actions", "10", "--num-correct", "10"], "smaller than num_actions"),
    (["--group-size", "0"], "group sizes must lie in [1, 2^30]"),
    (["--lr", "-0.1"], "learning_rate must be > 0"),
    (["--gamma", "-1"], "values must be finite numbers >= 0"),
])
def test_cli_bad_input_one_line(capsys, argv, match):
    assert main(["simulate", *argv]) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1


def test_cli_unknown_rule_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["simulate", "--method", "ppo2"])
    assert info.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_cli_sweep_writes_figure_and_table(tmp_path, capsys):
    code = main(["sweep", *TINY_ARGS, "--group-size", "2,16", "--seeds", "2", "--out", str(tmp_path / "run"),
                 "--figures", str(tmp_path / "fig"), "--no-progress"])
    assert code == 0
    out = capsys.readouterr().out
    assert "regimes from data" in out
    assert (tmp_path / "run" / "results.npz").exists() and (tmp_path / "run" / "table.txt").exists()
    assert list((tmp_path / "fig").glob("fig2_*.png"))


def test_cli_low_lr_gamma_equals_the_reduced_lr(capsys):
    """`--gamma 0 --low-lr-gamma 0.5` gives the numbers of `--gamma 0 --lr η·m_0.5` (App. N)."""
    from catsim.objectives.focal import low_lr_multiplier

    def final(argv):
        assert main(["simulate", *TINY_ARGS, "--group-size", "16", "--seeds", "2", "--format", "json",
                     "--gamma", "0", *argv]) == 0
        rows = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
        return [{k: v for k, v in r.items() if k != "method"} for r in rows], {r["method"] for r in rows}

    control, methods = final(["--low-lr-gamma", "0.5"])
    assert methods == {"paper+adam-reinforce-lr0.01+lowlr0.5"}  # TINY_ARGS modify the scenario
    reduced, _ = final(["--lr", repr(1e-2 * low_lr_multiplier(0.5))])
    assert control == reduced
    plain, _ = final([])
    assert plain != control


def test_cli_sweep_low_lr_gamma_list_is_one_method_each(tmp_path, capsys):
    code = main(["sweep", *TINY_ARGS, "--group-size", "2,16", "--seeds", "2", "--gamma", "0,1",
                 "--low-lr-gamma", "0,0.5", "--out", str(tmp_path / "run"),
                 "--figures", str(tmp_path / "fig"), "--no-progress"])
    assert code == 0
    res = SimResults.load(tmp_path / "run" / "results.npz")
    plain_label = "paper+adam-reinforce-lr0.01"  # TINY_ARGS modify the scenario
    assert res.methods == (plain_label, plain_label + "+lowlr0.5") and res.gammas == GAMMAS
    assert sorted(p.name for p in (tmp_path / "fig").glob("*.png")) == [
        f"fig2_{plain_label}+lowlr0.5.png", f"fig2_{plain_label}.png"]
    assert capsys.readouterr().out.count("regimes from data") == 2
    # the plain method's cells are those of a sweep without the control
    plain = S.simulate(dataclasses.replace(C.scenario("paper"), policy=TINY.policy, steps=10,
                                           log_every=5), group_sizes=SIZES, gammas=GAMMAS, seeds=SEEDS)
    np.testing.assert_array_equal(res.data["mret"][:1], plain.data["mret"])


@pytest.mark.parametrize("argv,match", [
    (["--low-lr-gamma", "-0.5"], "--low-lr-gamma: values must be >= 0"),
    (["--low-lr-gamma", "x"], "--low-lr-gamma: 'x' is not a number"),
])
def test_cli_low_lr_gamma_bad_input(capsys, argv, match):
    assert main(["simulate", *argv]) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1


def test_sharded_over_8_devices_agrees():
    """Split over 8 host devices, each device runs its runs one after another
    (`devices.RUNS_ONE_BY_ONE`): the results equal those of one device, running them one after
    another or as one vmapped batch (the default on one device), to float32 rounding (the
    programs fuse differently). The chunk program is compiled once per cell: init's state
    already has the sharding the chunk returns."""
    script = textwrap.dedent("""
        import dataclasses, jax, numpy as np
        from catsim.sim import config as C, devices, engine, sweep as S
        assert len(jax.devices()) == 8, jax.devices()
        S.CHUNK_STEPS = 3  # two chunk calls per cell
        cfg = C.SimConfig(policy=C.PolicyConfig(num_actions=256, num_correct=32), group_size=16,
                          steps=6, log_every=3)
        a = S.run_cell(cfg, (0.0, 1.0), range(4), shard=True)
        sharding = engine.run_sharding(8)
        assert devices.runs_one_by_one(sharding) and not devices.runs_one_by_one(None)
        chunk = engine.make_batched_chunked(cfg, 1, True, sharding)[1]
        assert chunk._cache_size() == 1, chunk._cache_size()
        batch = S.run_cell(cfg, (0.0, 1.0), range(4), shard=False)
        devices.RUNS_ONE_BY_ONE = True
        b = S.run_cell(cfg, (0.0, 1.0), range(4), shard=False)
        for k in a:  # values O(1e-4 … 1), 2 × 3 float32 steps: a few ulps
            np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-9)
            np.testing.assert_allclose(a[k], batch[k], rtol=1e-5, atol=1e-9)
        print("AGREE")
    """)
    flags = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    env = dict(os.environ, XLA_FLAGS=flags,
               PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "AGREE" in proc.stdout


def test_reproduce_entry_point(tmp_path, monkeypatch):
    """`reproduce` (for `catsim reproduce`) on a tiny stand-in for the paper scenario."""
    from catsim.experiments import fig2

    monkeypatch.setattr(fig2, "scenario", lambda name: TINY)
    monkeypatch.setattr(fig2, "QUICK_GROUP_SIZES", (2, 16))
    out = fig2.reproduce(tmp_path, quick=True, progress=False, log=None)
    assert out["figure"].exists() and out["table"].read_text().startswith("method tiny")
    assert out["results"].group_sizes == (2, 16) and out["results"].seeds == (0,)


def test_shard_only_up_to_the_shard_limit(monkeypatch):
    """Runs are split over the devices for every N by default, and only for programs with
    N <= SHARD_MAX_GROUP_SIZE when a limit is set; results agree either way (test above)."""
    from catsim.sim import engine

    calls = []  # the run count of each split asked for (the stand-in says None: one device)
    monkeypatch.setattr(engine, "run_sharding", lambda r: calls.append(r))
    cfg = C.SimConfig(policy=C.PolicyConfig(num_actions=256, num_correct=32), group_size=16,
                      steps=2, log_every=2)
    assert engine.SHARD_MAX_GROUP_SIZE is None
    S.run_cell(cfg, (0.0,), range(2), shard=True)
    assert calls == [2]
    monkeypatch.setattr(engine, "SHARD_MAX_GROUP_SIZE", 64)  # N = 16 runs N = 64's shared program
    S.run_cell(cfg, (0.0,), range(2), shard=True)
    assert calls == [2, 2]
    monkeypatch.setattr(engine, "SHARD_MAX_GROUP_SIZE", 8)
    S.run_cell(cfg, (0.0,), range(2), shard=True)
    assert calls == [2, 2]  # its program's N = 64 > 8: not split
