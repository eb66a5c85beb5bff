"""Sweeps in parts (`sweep(part=(I, P))`, `catsim sweep --part I/P`, then an assembling run) and
damaged cells under OUT/cells (recomputed, with one line). The 2-process `--distributed` run is
in test_sim_sweep_multiprocess.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from catsim.cli._simargs import config_from_args
from catsim.cli.main import build_parser, main
from catsim.sim import sweep as S
from catsim.sim import sweep_parts
from catsim.sim.results import SimResults

# a tiny grid whose 3 cells split 1 + 2 over 2 parts
ARGS = ["--num-actions", "200", "--num-correct", "20", "--steps", "10", "--log-every", "5",
        "--group-size", "2,16,64", "--gamma", "0,1", "--seeds", "2", "--cpu-devices", "1"]
SIZES, GAMMAS, SEEDS = (2, 16, 64), (0.0, 1.0), 2
CONFIG = config_from_args(build_parser().parse_args(["sweep", *ARGS]))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("one")
    return out, S.sweep(CONFIG, out, group_sizes=SIZES, gammas=GAMMAS, seeds=SEEDS, progress=False)


def _equal(a: SimResults, b: SimResults) -> None:
    assert (a.methods, a.gammas, a.group_sizes, a.seeds) == (b.methods, b.gammas, b.group_sizes, b.seeds)
    assert set(a.data) == set(b.data)
    for name in a.data:
        np.testing.assert_array_equal(a.data[name], b.data[name])


def test_owners_are_a_fixed_balanced_partition():
    configs = [dataclasses.replace(CONFIG, group_size=n) for n in (2, 4, 8, 1024, 4096, 131072)]
    for parts in (1, 2, 3, 8):
        owners = sweep_parts.cell_owners(configs, parts)
        assert owners == sweep_parts.cell_owners(configs, parts) and set(owners) <= set(range(parts))
    owners = sweep_parts.cell_owners(configs, 2)
    assert owners[-1] != owners[-2]  # the two costliest cells on different parts
    assert set(sweep_parts.cell_owners(configs, 8)) == set(range(6))  # one cell each, 2 parts idle


def test_parts_then_assemble_equal_one_sweep(reference, tmp_path, monkeypatch):
    _, ref = reference
    shares = [S.sweep(CONFIG, tmp_path, group_sizes=SIZES, gammas=GAMMAS, seeds=SEEDS, progress=False,
                      part=(i, 2)) for i in (0, 1)]
    assert not (tmp_path / "results.npz").exists()
    assert sorted(n for s in shares for n in s.group_sizes) == sorted(SIZES)  # disjoint, complete
    real = S.run_cell
    monkeypatch.setattr(S, "run_cell", lambda *a, **k: pytest.fail("a present cell was recomputed"))
    again = S.sweep(CONFIG, tmp_path, group_sizes=SIZES, gammas=GAMMAS, seeds=SEEDS, progress=False,
                    part=(1, 2))  # a part rerun: its cells are present
    _equal(again, shares[1])
    assembled = S.sweep(CONFIG, tmp_path, group_sizes=SIZES, gammas=GAMMAS, seeds=SEEDS, progress=False)
    _equal(assembled, ref)  # bit-identical: the same run layout (one device) per cell
    _equal(SimResults.load(tmp_path / "results.npz"), ref)
    monkeypatch.setattr(S, "run_cell", real)


def test_cli_parts_assemble_and_mismatch(reference, tmp_path, capsys):
    _, ref = reference
    out = str(tmp_path / "run")
    assert main(["sweep", *ARGS, "--out", out, "--no-progress", "--part", "0/2"]) == 0
    assert "part 0/2: 1 cell in" in capsys.readouterr().out
    cells = sorted(p.name for p in (tmp_path / "run" / "cells").glob("*.npz"))
    # another part with other settings: refused before any work, one line, exit 2
    bad = [a if a != "10" else "20" for a in ARGS]  # --steps 20
    assert main(["sweep", *bad, "--out", out, "--no-progress", "--part", "1/2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "other settings" in err and "config.steps = 20 here, 10 there" in err
    assert sorted(p.name for p in (tmp_path / "run" / "cells").glob("*.npz")) == cells
    assert main(["sweep", *bad, "--out", out, "--no-progress"]) == 2  # nor may it assemble
    assert main(["sweep", *ARGS, "--out", out, "--no-progress", "--part", "1/2"]) == 0
    assert main(["sweep", *ARGS, "--out", out, "--no-progress"]) == 0
    assert "resuming: 3 of 3 cells already done" in capsys.readouterr().err
    _equal(SimResults.load(tmp_path / "run" / "results.npz"), ref)


@pytest.mark.parametrize("argv, match", [
    (["--part", "2/2"], "0 <= I < P"), (["--part", "1"], "I/P"), (["--part=-1/2"], "I/P"),
    (["--part", "0/2", "--distributed"], "without a coordinator"),
    (["--num-processes", "2"], "need --distributed"),
])
def test_cli_bad_part_one_line(tmp_path, capsys, argv, match):
    assert main(["sweep", *ARGS, "--out", str(tmp_path / "x"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and "\n" not in err and not (tmp_path / "x").exists()


def _truncate(path):
    path.write_bytes(path.read_bytes()[:200])


def _empty(path):
    path.write_bytes(b"")


def _wrong_shapes(path):
    with np.load(path) as f:
        arrays = dict(f)
    arrays["metric_mret"] = arrays["metric_mret"][..., :2]  # one recorded step short
    np.savez(path.with_suffix(""), **arrays)


def _wrong_settings(path):
    other = path.with_name(path.name.replace("_n16", "_n2"))
    path.write_bytes(other.read_bytes())  # N = 2's cell under N = 16's name


@pytest.mark.parametrize("damage, reason", [
    (_truncate, "not a zip file"), (_empty, "No data left"), (_wrong_shapes, "shape"),
    (_wrong_settings, "other settings"),
])
def test_damaged_cell_is_recomputed(reference, tmp_path, monkeypatch, damage, reason):
    src, ref = reference
    out = tmp_path / "sweep"
    (out / "cells").mkdir(parents=True)
    for p in (src / "cells").glob("*.npz"):
        (out / "cells" / p.name).write_bytes(p.read_bytes())
    damage(out / "cells" / f"{CONFIG.method_label}_n16.npz")
    ran, real = [], S.run_cell
    monkeypatch.setattr(S, "run_cell", lambda cfg, *a, **k: ran.append(cfg.group_size) or real(cfg, *a, **k))
    lines = []
    got = S.sweep(CONFIG, out, group_sizes=SIZES, gammas=GAMMAS, seeds=SEEDS, progress=False, log=lines.append)
    assert ran == [16]
    notes = [line for line in lines if "recomputing" in line]
    assert len(notes) == 1 and "_n16.npz" in notes[0] and reason in notes[0]
    _equal(got, ref)
