"""The methods study: frontier and best-method table on hand-made numbers, a tiny real run."""

import dataclasses
import json

import numpy as np

from catsim.experiments.methods import (
    METHODS,
    MethodsStudy,
    method_config,
    passk_k_for,
    run_methods_study,
    update_rate,
)
from catsim.sim import config as C


def test_frontier_and_best_rows_by_hand():
    # 3 methods × 2 N × 2 seeds. N=2: A (0.9, 0.5), B (0.8, 0.7), C (0.7, 0.6) → frontier A, B.
    mret = np.array([[[0.9, 0.9], [0.2, 0.4]], [[0.8, 0.8], [0.5, 0.5]], [[0.7, 0.7], [0.1, 0.1]]])
    qpos = np.array([[[0.5, 0.5], [0.9, 0.9]], [[0.7, 0.7], [0.8, 0.8]], [[0.6, 0.6], [0.95, 0.95]]])
    s = MethodsStudy(("GRPO", "B", "C"), (2, 8), mret, qpos, steps=10, seeds=2)
    assert s.frontier(0) == [0, 1]
    assert s.frontier(1) == [0, 1, 2]  # at N=8 each is best in one respect or on the trade-off
    rows = s.best_rows()
    assert rows[0]["best"] == "GRPO" and rows[0]["qpos_cost"] == 0.0
    assert rows[1]["best"] == "B" and rows[1]["mret"] == 0.5
    assert abs(rows[1]["qpos_cost"] - 0.1) < 1e-12  # GRPO 0.9 − B 0.8
    assert "B 0.500 (GRPO 0.300)" in s.table()


def test_every_method_builds_a_valid_config_with_its_own_label():
    base = C.scenario("paper")
    labels = {method_config(base, m).method for m in METHODS}
    assert len(labels) == len(METHODS)


def test_pass_at_k_rules_run_below_n():
    assert [passk_k_for(n) for n in (1, 2, 3, 8, 64, 512)] == [1, 1, 1, 4, 4, 4]
    pkpo = next(m for m in METHODS if m.name == "PKPO")
    base = C.scenario("paper")
    for n in (2, 8, 512):
        cfg = dataclasses.replace(method_config(base, pkpo, n), group_size=n)  # validates k <= N
        assert cfg.update.passk_k == passk_k_for(n) and cfg.method.endswith(f"k{passk_k_for(n)}")


def test_a_rule_that_never_moved_is_never_crowned():
    # B keeps all its mass at N = 2 by never updating (rate 0); C hardly updates (0.5 %): the best
    # trained rule is GRPO, B and C are off the frontier and listed.
    mret = np.array([[[0.5, 0.5]], [[1.0, 1.0]], [[0.9, 0.9]]])
    qpos = np.array([[[0.7, 0.7]], [[0.7, 0.7]], [[0.8, 0.8]]])
    rate = np.array([[[0.9, 0.9]], [[0.0, 0.0]], [[0.004, 0.006]]])
    s = MethodsStudy(("GRPO", "B", "C"), (2,), mret, qpos, steps=10, seeds=2, rate=rate)
    row = s.best_rows()[0]
    assert row["best"] == "GRPO" and row["frontier"] == ["GRPO"] and row["not_trained"] == ["B", "C"]
    table = s.table()
    assert "no update" in table and "*0.900" in table and "N=2: C updated on 0.50% of its steps" in table


def test_update_rate_from_the_counts():
    """pass@k best moves the policy only at c = 1; GRPO at 0 < c < N; NSR always; entropy always."""
    base = C.scenario("paper")
    mu = np.array([[0.0, 0.25, 0.5, 1.0]])  # N = 4: c = 0, 1, 2, 4
    def rate(change):
        cfg = dataclasses.replace(base, update=dataclasses.replace(base.update, **change))
        return float(update_rate(cfg, 0.0, 4, mu)[0])
    assert rate(dict(advantage="passk_best")) == 0.25
    assert rate({}) == 0.5
    assert rate(dict(advantage="nsr")) == 0.75  # c = N: nothing wrong to push down
    assert rate(dict(entropy_coef=1e-3)) == 1.0
    assert rate(dict(advantage="w_reinforce")) == 1.0


def test_tiny_study_writes_table_json_and_figures(tmp_path):
    base = dataclasses.replace(C.scenario("paper"), policy=C.PolicyConfig(num_actions=300, num_correct=30),
                               steps=4, log_every=2)
    chosen = [m for m in METHODS if m.name in ("GRPO", "PKPO")]
    study = run_methods_study(base, tmp_path, group_sizes=(8,), seeds=2, methods=chosen, progress=False)
    assert study.mret.shape == (2, 1, 2) and np.all(np.isfinite(study.mret))
    saved = json.loads((tmp_path / "methods.json").read_text())
    assert saved["methods"] == ["GRPO", "PKPO"] and len(saved["best"]) == 1
    assert saved["passk_k"] == [None, [4]] and np.all(np.array(saved["update_rate"]) >= 0)
    for name in ("methods.txt", "methods_vs_n.png", "methods_frontier.png"):
        assert (tmp_path / name).stat().st_size > 0
    # resumable: a second call reuses the cells and gives the same numbers
    again = run_methods_study(base, tmp_path, group_sizes=(8,), seeds=2, methods=chosen, progress=False)
    np.testing.assert_array_equal(again.mret, study.mret)
