"""The methods study: frontier and best-method table on hand-made numbers, a tiny real run."""

import dataclasses
import json

import numpy as np

from catsim.experiments.methods import METHODS, MethodsStudy, method_config, run_methods_study
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


def test_tiny_study_writes_table_json_and_figures(tmp_path):
    base = dataclasses.replace(C.scenario("paper"), policy=C.PolicyConfig(num_actions=300, num_correct=30),
                               steps=4, log_every=2)
    chosen = [m for m in METHODS if m.name in ("GRPO", "PKPO k=4")]
    study = run_methods_study(base, tmp_path, group_sizes=(8,), seeds=2, methods=chosen, progress=False)
    assert study.mret.shape == (2, 1, 2) and np.all(np.isfinite(study.mret))
    saved = json.loads((tmp_path / "methods.json").read_text())
    assert saved["methods"] == ["GRPO", "PKPO k=4"] and len(saved["best"]) == 1
    for name in ("methods.txt", "methods_vs_n.png", "methods_frontier.png"):
        assert (tmp_path / name).stat().st_size > 0
    # resumable: a second call reuses the cells and gives the same numbers
    again = run_methods_study(base, tmp_path, group_sizes=(8,), seeds=2, methods=chosen, progress=False)
    np.testing.assert_array_equal(again.mret, study.mret)
