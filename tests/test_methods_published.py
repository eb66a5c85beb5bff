"""Regression of the methods study's published N = 512 numbers (figures/methods/methods.txt):
GRPO loses the rare mass (Mret 0.033), PKPO's s^(loo−1) at k = 4 keeps almost all of it (0.976),
its mean-centred form about a third (0.369), NSR all of it (1.000).

Tolerances: 5 seed standard deviations of the published 4-seed run (GRPO 0.001, PKPO 0.004) plus
0.01 for rounding across instruction sets (not measured across ISAs in this session)."""

import dataclasses

import pytest

from catsim.experiments.methods import METHODS, method_config
from catsim.sim import config as C
from catsim.sim.sweep import simulate

# N = 512: seed mean, seed std
PUBLISHED = {"GRPO": (0.033, 0.001), "PKPO": (0.976, 0.000), "PKPO mean-centred": (0.369, 0.004),
             "NSR": (1.000, 0.000)}


@pytest.mark.published
def test_pkpo_keeps_rare_mass_where_grpo_loses_it():
    base = C.scenario("paper")
    got = {}
    for method in METHODS:
        if method.name in PUBLISHED:
            cfg = dataclasses.replace(method_config(base, method, 512), log_every=1000)
            res = simulate(cfg, group_sizes=[512], gammas=[method.gamma], seeds=4)
            got[method.name] = float(res.final("mret")[0, 0, 0].mean())
    for name, (mean, std) in PUBLISHED.items():
        assert got[name] == pytest.approx(mean, abs=5 * std + 0.01), name
    assert got["PKPO"] > got["PKPO mean-centred"] > got["GRPO"] + 0.2


@pytest.mark.published
def test_published_table_is_the_code_s_table_of_the_published_json():
    """figures/methods/methods.txt is what MethodsStudy makes of methods.json, and no cell whose rule
    moved the policy on fewer than 1 % of its steps is crowned."""
    import json
    from pathlib import Path

    import numpy as np

    from catsim.experiments.methods import MIN_UPDATE_RATE, MethodsStudy

    folder = Path(__file__).resolve().parents[1] / "figures" / "methods"
    d = json.loads((folder / "methods.json").read_text())
    study = MethodsStudy(tuple(d["methods"]), tuple(d["group_sizes"]), np.array(d["mret"]), np.array(d["qpos"]),
                         d["steps"], d["seeds"], rate=np.array(d["update_rate"]),
                         ks=tuple(None if k is None else tuple(k) for k in d["passk_k"]))
    assert (folder / "methods.txt").read_text() == study.table() + "\n"
    rate = np.nanmean(np.array(d["update_rate"]), -1)
    for j, row in enumerate(d["best"]):
        assert rate[d["methods"].index(row["best"]), j] >= MIN_UPDATE_RATE
        assert "pass@k best" not in row["frontier"] or rate[d["methods"].index("pass@k best"), j] >= MIN_UPDATE_RATE
    # the pass@k rules ran at k < N in every cell
    for name, ks in zip(d["methods"], d["passk_k"]):
        if ks is not None:
            assert all(k < n for k, n in zip(ks, d["group_sizes"])), name
