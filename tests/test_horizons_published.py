"""Regression tests of the published horizon study (figures/horizons/, docs/simulator.md).

Tolerances: a published seed mean of 4 seeds with sample sd s agrees with a rerun's mean within
the two-sided t(3) quantile at α = 1e-3 times s·√(2/4) (`catsim.experiments.agreement.seed_mean`):
a rerun on another CPU follows other sampling paths, so its mean is another draw."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from catsim.experiments import horizons as study
from catsim.experiments.agreement import seed_mean
from catsim.sim import horizons as H
from catsim.sim.results import SimResults
from catsim.sim.sweep import simulate

pytestmark = pytest.mark.published

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / study.PUBLISHED_DIR


@pytest.fixture(scope="module")
def published():
    results = SimResults.load(PUBLISHED / study.TRAJECTORIES)
    summary = json.loads((PUBLISHED / study.SUMMARY).read_text())
    return results, summary


def test_published_summary_and_table_are_those_of_the_published_trajectories(published):
    results, summary = published
    now = json.loads(json.dumps(study.summarise(results)))
    for key in ("horizon", "seeds", "gammas", "group_sizes", "half_loss", "mret_at", "claim"):
        assert now[key] == summary[key], key
    assert summary["command"] == "catsim sweep --study horizons --out runs/horizons --no-progress"
    assert (PUBLISHED / study.TABLE).read_text() == study.format_table(now) + "\n"
    assert results.steps[-1] == study.HORIZON_STEPS and len(results.seeds) == 4


# (gamma, N) -> the half-loss step documented in docs/simulator.md (seed mean)
DOCUMENTED_HALF_LOSS = {(0, 8): 3200, (1, 8): 4103, (0, 256): 715, (1, 256): 789,
                        (0, 2048): 531, (1, 2048): 595, (0, 32768): 852, (1, 32768): 1336}
# (gamma, N, step) -> seed-mean Mret documented there
DOCUMENTED_MRET = {(0, 8, 2000): 0.9441, (1, 8, 2000): 0.9471, (0, 8, 5000): 0.0083,
                   (1, 8, 5000): 0.0474, (0, 4, 5000): 0.3784, (1, 4, 5000): 0.9277}


def test_documented_numbers_are_the_published_ones(published):
    _, summary = published
    for (g, n), value in DOCUMENTED_HALF_LOSS.items():
        cell = summary["half_loss"][f"gamma={g}"][str(n)]
        assert cell["crossed"] == 4
        assert abs(cell["mean"] - value) <= 0.5, (g, n)
    for (g, n, t), value in DOCUMENTED_MRET.items():
        assert abs(summary["mret_at"][str(t)][f"gamma={g}"][str(n)]["mean"] - value) <= 5e-5, (g, n, t)
    assert summary["half_loss"]["gamma=0"]["2"]["crossed"] == 0  # never within 10,000
    claim = summary["claim"]
    assert [tuple(w) for w in claim["windows"]["gamma=0"]] == [(3250, 3360)]
    assert claim["compared"][0]["separated_share"] == 1.0
    # the issue's `catsim simulate --n 8 --gamma 0,1 --steps 5000` (seed 0): 0.008 / 0.064
    at = summary["mret_at"]["5000"]
    assert round(at["gamma=0"]["8"]["seeds"][0], 3) == 0.008
    assert round(at["gamma=1"]["8"]["seeds"][0], 3) == 0.064


def test_a_recomputed_cell_has_the_published_half_loss_steps(published):
    """N = 512, 4 seeds, both γ, the first 700 steps (its half-loss steps are near 580 and 635)."""
    _, summary = published
    n, steps = 512, 700
    res = simulate(study.horizons_config(steps=steps), group_sizes=(n,), gammas=(0.0, 1.0), seeds=4)
    now = H.crossing_steps(res)[:, 0]  # [G, K]
    assert np.all(np.isfinite(now))
    for i, g in enumerate((0, 1)):
        cell = summary["half_loss"][f"gamma={g}"][str(n)]
        expected = seed_mean(cell["mean"], cell["sd"], 4)
        assert abs(now[i].mean() - expected.value) <= expected.tolerance, (g, now[i], expected)
    # and the trajectory itself, at the last recomputed step
    mret_now = H.values_at(res, steps)[:, 0]  # [G, K]
    published_results, _ = published
    pub = H.values_at(published_results, steps)[:, list(published_results.group_sizes).index(n)]
    for i in range(2):
        expected = seed_mean(float(pub[i].mean()), float(pub[i].std(ddof=1)), 4)
        assert abs(mret_now[i].mean() - expected.value) <= expected.tolerance
