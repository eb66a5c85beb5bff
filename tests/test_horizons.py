"""The horizon study: crossing steps and bands on hand-made trajectories, the N = 8 check, the
runner at a tiny size (outputs, resume), and its CLI options."""

from __future__ import annotations

import argparse
import json
import math
import types

import numpy as np
import pytest

from catsim.cli.main import main
from catsim.errors import CatsimError
from catsim.experiments import horizons as study
from catsim.sim import horizons as H
from catsim.sim.config import PAPER_GAMMAS, PAPER_GROUP_SIZES, PolicyConfig
from catsim.sim.results import SimResults


def test_first_crossing_interpolates_between_records():
    steps = np.array([0, 10, 20, 30])
    assert H.first_crossing(steps, np.array([1.0, 0.8, 0.4, 0.3]), 0.5) == pytest.approx(17.5)
    assert H.first_crossing(steps, np.array([1.0, 0.8, 0.5, 0.3]), 0.5) == pytest.approx(20.0)
    assert math.isnan(H.first_crossing(steps, np.array([1.0, 0.9, 0.6, 0.51]), 0.5))
    assert H.first_crossing(steps, np.array([0.4, 0.9, 0.6, 0.1]), 0.5) == 0.0
    # the first crossing counts, not a later one after a recovery
    assert H.first_crossing(steps, np.array([1.0, 0.0, 1.0, 0.0]), 0.5) == pytest.approx(5.0)
    with pytest.raises(CatsimError):
        H.first_crossing(steps, np.ones(3), 0.5)


def test_band_windows_are_maximal_runs_including_one_at_the_end():
    steps = [0, 10, 20, 30, 40, 50, 60]
    values = [1.0, 0.35, 0.3, 0.5, 0.25, 0.1, 0.2]
    assert H.band_windows(steps, values, 0.2, 0.4) == [(10, 20), (40, 40), (60, 60)]
    assert H.band_windows(steps, [1.0] * 7, 0.2, 0.4) == []


def test_crossing_summary_says_never_and_partial():
    assert H.Crossing((10.0, 20.0, 30.0), 100).describe() == "20 ± 10 (10–30)"
    part = H.Crossing((10.0, float("nan")), 10_000)
    assert part.crossed == 1 and math.isnan(part.mean)
    assert part.describe() == "1/2 seeds: 10–10; 1 never within 10,000"
    assert H.Crossing((float("nan"),) * 4, 10_000).describe() == "never within 10,000"


def _synthetic(n=8) -> SimResults:
    """Two γ, two seeds, linear decays: γ = 0 from 1 to 0 over 100 steps, γ = 1 half as fast."""
    steps = np.arange(0, 101, 10)
    base = 1.0 - steps / 100.0
    mret = np.stack([np.stack([base, base - 0.01]), np.stack([1 - steps / 200, 1 - steps / 200 + 0.01])])
    data = {"mret": mret[None, :, None].astype(np.float32)}
    return SimResults(("paper",), (0.0, 1.0), (n,), (0, 1), steps, data)


def test_summary_and_claim_on_synthetic_trajectories():
    res = _synthetic()
    half = H.crossing_steps(res)  # [G, N, K]
    assert half[0, 0] == pytest.approx([50.0, 49.0], abs=1e-4)
    assert half[1, 0, 0] == pytest.approx(100.0, abs=1e-4) and math.isnan(half[1, 0, 1])
    summary = study.summarise(res, report_steps=(50, 100, 1000))
    assert list(summary["mret_at"]) == ["50", "100"]
    assert summary["half_loss"]["gamma=1"]["8"]["text"] == "1/2 seeds: 100–100; 1 never within 100"
    claim = summary["claim"]
    assert claim["windows"]["gamma=0"] == [(60, 70)]  # seed means 0.395, 0.295, then 0.195
    (c,) = claim["compared"]
    assert c["separated_share"] == 1.0 and c["difference"][0] > 0.25
    text = study.format_table(summary)
    assert "never within 100" in text and "N = 8" in text
    json.dumps(summary)  # JSON-able
    assert study.claim_check(_synthetic(n=4)) is None


def _tiny_config():
    cfg = study.horizons_config(steps=40, log_every=10)
    import dataclasses

    return dataclasses.replace(cfg, policy=PolicyConfig(num_actions=300, num_correct=40))


def test_runner_writes_its_outputs_and_resumes(tmp_path, monkeypatch):
    messages = []
    kwargs = dict(group_sizes=(8,), gammas=(0.0, 1.0), seeds=2, progress=False, log=messages.append)
    first = study.run_horizons(_tiny_config(), tmp_path, **kwargs)
    names = sorted(p.name for p in first.files)
    assert names == sorted(["mret_heatmap.png", "half_loss.png", study.TABLE, study.SUMMARY,
                            study.TRAJECTORIES])
    assert all(p.parent == tmp_path for p in first.files)
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in first.files if p.suffix == ".png")
    cells = sorted((tmp_path / "cells").glob("*.npz"))
    stamps = [p.stat().st_mtime_ns for p in cells]
    # the figures were checked above; the rerun only has to reuse the cell (plots skipped: time)
    monkeypatch.setattr(study, "plot_heatmaps", lambda r, c, path, **kw: path)
    monkeypatch.setattr(study, "plot_half_loss", lambda r, c, path, **kw: path)
    second = study.run_horizons(_tiny_config(), tmp_path, **kwargs)
    assert any("resuming: 1 of 1 cells" in m for m in messages)
    assert [p.stat().st_mtime_ns for p in cells] == stamps
    assert second.summary == first.summary
    saved = SimResults.load(tmp_path / study.TRAJECTORIES)
    assert set(saved.data) == {"mret", "qpos"}
    np.testing.assert_array_equal(saved.data["mret"], first.results.data["mret"])
    record = json.loads((tmp_path / study.SUMMARY).read_text())
    assert record["horizon"] == 40 and "provenance" in record


def _horizon_args(argv):
    from catsim.cli import sweep as sweep_cli

    parser = argparse.ArgumentParser()
    sweep_cli.register(parser.add_subparsers())
    return parser.parse_args(["sweep", "--study", "horizons", *argv])


def test_the_default_horizon_study_is_the_published_one(monkeypatch):
    from catsim.cli import horizons as cli

    seen = {}

    def fake(cfg, out, **kw):
        seen.update(cfg=cfg, out=out, **kw)
        return types.SimpleNamespace(table="", files=(), seconds=0.0)

    monkeypatch.setattr(study, "run_horizons", fake)
    assert cli.run(_horizon_args(["--no-shard"])) == 0
    assert seen["cfg"].steps == study.HORIZON_STEPS
    assert study.is_full_horizons(seen["cfg"], seen["group_sizes"], seen["gammas"], seen["seeds"])
    assert not study.is_full_horizons(seen["cfg"], PAPER_GROUP_SIZES[:-1], PAPER_GAMMAS, 4)
    assert not study.is_full_horizons(study.horizons_config(steps=5000), PAPER_GROUP_SIZES,
                                      PAPER_GAMMAS, 4)


@pytest.mark.parametrize("argv, message", [
    (["--low-lr-gamma", "0.5"], "--study horizons takes neither"),
    (["--steps", "15", "--log-every", "10"], "multiple of log_every"),
    (["--steps", "10", "--log-every", "10"], "at least 2 records"),
])
def test_bad_horizon_options_exit_2_before_any_work(argv, message, tmp_path, capsys):
    out = tmp_path / "h"
    assert main(["sweep", "--study", "horizons", "--out", str(out), "--no-progress", *argv]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()
