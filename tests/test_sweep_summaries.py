"""A sweep's summary files (results.npz/.nc, table.txt, timings.json) hold every finished cell in its
--out, not only the cells of the last call; its log is appended; cells one table cannot hold are
refused before any work; a call that computes nothing leaves every cell file as it was."""

import json

import numpy as np
import pytest

from catsim.cli.main import main
from catsim.sim import sweep as S
from catsim.sim.results import SimResults

TINY = ["--num-actions", "64", "--num-correct", "8", "--steps", "4", "--log-every", "2",
        "--gamma", "0", "--seeds", "1", "--no-progress", "--cpu-devices", "1"]
GRPO, PLAIN = "paper+adam-reinforce-lr0.01-grpo", "paper+adam-reinforce-lr0.01"


def _cells(out):
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in (out / "cells").glob("*.npz")}


def _one_line(capsys):
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_two_rules_into_one_out_are_both_in_its_summaries(tmp_path, capsys, monkeypatch):
    """Before: the second sweep's results.npz, results.nc, table and timings held its own cell only."""
    out = tmp_path / "sw"
    argv = ["sweep", *TINY, "--out", str(out)]
    assert main([*argv, "--group-size", "8", "--advantage", "grpo"]) == 0
    assert main([*argv, "--group-size", "8,16"]) == 0
    capsys.readouterr()
    res = SimResults.load(out / "results.npz")
    assert res.methods == (PLAIN, GRPO) and res.group_sizes == (8, 16)
    assert res.attrs[GRPO]["update"]["advantage"] == "grpo"
    assert res.attrs[PLAIN]["update"]["advantage"] == "mean_centred"
    grpo_cell = SimResults.load(out / "cells" / f"{GRPO}_n8.npz")
    assert (res.sel("qpos", method=GRPO, n=8) == grpo_cell.sel("qpos", method=GRPO, n=8)).all()
    table = (out / "table.txt").read_text()
    assert f"method {PLAIN}:" in table and f"method {GRPO}:" in table and "nan" not in table
    grpo_table = table[table.index(f"method {GRPO}:"):]
    assert "\n      8 " in grpo_table and "\n     16 " not in grpo_table  # its own N only
    timings = json.loads((out / "timings.json").read_text())["seconds_per_cell"]
    assert set(timings) == {f"{GRPO}_n8", f"{PLAIN}_n8", f"{PLAIN}_n16"}
    pytest.importorskip("xarray")
    import xarray

    with xarray.open_dataset(out / "results.nc", engine="scipy") as ds:
        assert list(ds["method"].values) == [PLAIN, GRPO]
    # the log keeps every call's records (before: replaced by the last call's)
    log = [json.loads(line) for line in (out / "sweep_log.jsonl").read_text().splitlines()]
    assert [(r["method"], r["group_size"]) for r in log] == [(GRPO, 8), (PLAIN, 8), (PLAIN, 16)]
    assert [r["step"] for r in log] == [1, 2, 3]
    # rerunning the first command computes nothing: every cell file untouched, the summary still whole
    cells = _cells(out)
    monkeypatch.setattr(S, "run_cell", lambda *a, **k: pytest.fail("a cell was computed"))
    assert main([*argv, "--group-size", "8", "--advantage", "grpo"]) == 0
    assert _cells(out) == cells
    again = SimResults.load(out / "results.npz")
    assert again.methods == (GRPO, PLAIN) and again.group_sizes == (8, 16)
    for method in res.methods:  # the same numbers (NaN at the (method, N) never swept, in both)
        np.testing.assert_array_equal(again.sel("mret", method=method), res.sel("mret", method=method))
    assert set(json.loads((out / "timings.json").read_text())["seconds_per_cell"]) == set(timings)
    assert len((out / "sweep_log.jsonl").read_text().splitlines()) == 4


@pytest.mark.parametrize("change, says", [
    (["--seeds", "2"], "seeds = [0, 1] here, [0] there"),
    (["--gamma", "0,1"], "gammas = [0.0, 1.0] here, [0.0] there"),
    (["--steps", "6"], "6 steps recorded every 2 here, 4 steps recorded every 2 there"),
])
def test_a_cell_one_table_cannot_hold_is_refused(tmp_path, capsys, monkeypatch, change, says):
    """Before: the second sweep ran (exit 0) and its results replaced the first's."""
    out = tmp_path / "sw"
    argv = ["sweep", *TINY, "--out", str(out), "--group-size", "8"]
    assert main([*argv, "--advantage", "grpo"]) == 0
    capsys.readouterr()
    cells, results = _cells(out), (out / "results.npz").read_bytes()
    monkeypatch.setattr(S, "run_cell", lambda *a, **k: pytest.fail("a cell was computed"))
    assert main([*argv, *change]) == 2
    err = _one_line(capsys)
    assert f"{GRPO}_n8.npz was computed on another grid ({says})" in err and "use another --out" in err
    assert _cells(out) == cells and (out / "results.npz").read_bytes() == results


def test_a_method_label_with_other_settings_at_another_n_is_refused(tmp_path, capsys, monkeypatch):
    """The label names the update rule, not the policy: a sweep of another policy at another N
    would have shared the first's rows of the table (before: accepted, one row of each)."""
    out = tmp_path / "sw"
    argv = ["sweep", *TINY, "--out", str(out)]
    assert main([*argv, "--group-size", "8"]) == 0
    capsys.readouterr()
    monkeypatch.setattr(S, "run_cell", lambda *a, **k: pytest.fail("a cell was computed"))
    assert main([*argv, "--group-size", "16", "--num-actions", "80"]) == 2
    err = _one_line(capsys)
    assert f"{PLAIN}_n8.npz holds method {PLAIN} computed with other settings" in err
    assert "config.policy.num_actions = 80 here, 64 there" in err and "another --out" in err


def test_an_unreadable_other_cell_is_left_out_with_one_line(tmp_path, capsys):
    out = tmp_path / "sw"
    argv = ["sweep", *TINY, "--out", str(out), "--group-size", "8"]
    assert main([*argv, "--advantage", "grpo"]) == 0
    (out / "cells" / f"{GRPO}_n8.npz").write_bytes(b"cut")
    assert main(argv) == 0
    assert f"cell {GRPO}_n8.npz cannot be read" in capsys.readouterr().err
    assert SimResults.load(out / "results.npz").methods == (PLAIN,)
    assert (out / "cells" / f"{GRPO}_n8.npz").read_bytes() == b"cut"  # nothing deleted
