"""The GRPO / F-GRPO / asym-GRPO method comparison: steps-to-target and pass@k-by-level metrics (hand-computed), the
report's comparison sections on a crafted results dict, and `catsim llm compare --quick` end to
end with a tiny given base model."""

from __future__ import annotations

import json
from math import comb

import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.experiments.llm_pipeline import PipelineConfig, convergence
from catsim.experiments.llm_report import render_report
from catsim.llm import metrics


def test_steps_to_target_hand_computed():
    curve = [0.1, 0.3, 0.6, 0.2, 0.8, 0.9]
    assert metrics.steps_to_target(curve, 0.5) == 3  # window 1: the first value ≥ 0.5
    # window 2 trailing means end at steps 2..6: 0.2, 0.45, 0.4, 0.5, 0.85
    assert metrics.steps_to_target(curve, 0.5, window=2) == 5
    assert metrics.steps_to_target(curve, 0.95, window=2) is None
    assert metrics.steps_to_target(curve[:1], 0.0, window=2) is None  # shorter than the window
    assert metrics.steps_to_target([0.5, 0.5], 0.5, window=2) == 2  # ≥, not >
    for bad in (dict(window=0), dict(window=1.5)):
        with pytest.raises(CatsimError):
            metrics.steps_to_target(curve, 0.5, **bad)
    with pytest.raises(CatsimError):
        metrics.steps_to_target([0.1, float("nan")], 0.5)


def test_passk_by_level_hand_computed():
    n = 4
    counts, levels = [0, 2, 4, 1], [1, 2, 2, 1]
    out = metrics.passk_by_level(n, counts, levels, [1, 2])
    assert list(out) == [1, 2] and out[1]["prompts"] == 2 and out[2]["prompts"] == 2
    assert out[1]["pass_at_k"][1] == pytest.approx((0 / 4 + 1 / 4) / 2)
    # pass@2 = 1 − C(n−c, 2)/C(n, 2): c = 1 → 1 − 3/6, c = 2 → 1 − 1/6, c = 4 → 1
    assert out[1]["pass_at_k"][2] == pytest.approx((0 + (1 - comb(3, 2) / comb(4, 2))) / 2)
    assert out[2]["pass_at_k"][2] == pytest.approx(((1 - comb(2, 2) / comb(4, 2)) + 1) / 2)
    with pytest.raises(CatsimError):
        metrics.passk_by_level(n, counts, levels[:3], [1])
    with pytest.raises(CatsimError):
        metrics.passk_by_level(n, [5, 0, 0, 0], levels, [1])


def test_convergence_from_a_log():
    pc = PipelineConfig(target_reward=0.5, target_window=2, heldout_every=2)
    log = [{"step": s, "reward": r, "heldout_accuracy": a, "warnings": w} for s, r, a, w in [
        (1, 0.2, None, []), (2, 0.6, 0.25, []), (3, 0.5, None, []), (4, 0.7, 0.5, ["reward collapse: x"]),
        (5, 0.9, None, []), (6, 0.9, 0.75, [])]]
    out = convergence(log, pc)
    assert out["steps_to_target"] == 3  # trailing means: 0.4, 0.55
    assert out["heldout_steps_to_target"] == 4  # window 2 // 2 = 1 measurement: 0.25, 0.5 → step 4
    assert out["final_reward"] == pytest.approx(0.9)
    assert out["warnings"] == ["step 4: reward collapse: x"]
    assert out["heldout_curve"] == [[2, 0.25], [4, 0.5], [6, 0.75]]


def _entry(label, spec, seed, p1, p10, lv1, lv2, steps):
    return {"label": label, "spec": spec, "seed": seed, "group_size": 8, "run_dir": "-",
            "eval": {"pass_at_k": {"1": p1, "10": p10}, "interval": {"1": [0, 1], "10": [0, 1]}},
            "ledger": {"forgotten": 0}, "delta_nll_rare": None,
            "levels": {"1": {"prompts": 3, "pass_at_k": {"1": lv1, "10": 1.0}},
                       "2": {"prompts": 5, "pass_at_k": {"1": lv2, "10": 0.5}}},
            "steps_to_target": steps, "heldout_steps_to_target": None, "final_reward": 0.5,
            "warnings": [], "heldout_curve": [[3, 0.25]]}


def test_report_sections_on_crafted_results():
    runs = {"grpo:8:s0": _entry("GRPO N=8", "grpo", 0, 0.2, 0.5, 0.6, 0.1, 12),
            "grpo:8:s1": _entry("GRPO N=8", "grpo", 1, 0.4, 0.7, 0.8, 0.3, None),
            "asym-grpo:8:s0": _entry("asym-GRPO N=8", "asym-grpo", 0, 0.3, 0.6, 0.7, 0.4, 7),
            "asym-grpo:8:s1": _entry("asym-GRPO N=8", "asym-grpo", 1, 0.3, 0.9, 0.7, 0.2, 9)}
    base = {"ks": [1, 10], "pass_at_k": {"1": 0.1, "10": 0.4}, "interval": {"1": [0, 1], "10": [0, 1]}}
    results = {"config": {"runs": ["grpo:8", "asym-grpo:8"], "gamma": 0.5, "seeds": [0, 1], "rl_steps": 30,
                          "rollouts_per_step": 32, "eval_prompts": 8, "eval_n": 16, "target_reward": 0.5,
                          "target_window": 5, "heldout_every": 3},
               "tasks": {"maze": {"base_model": "b", "base": base, "runs": runs,
                                  "base_levels": {"1": {"prompts": 3, "pass_at_k": {"1": 0.5, "10": 1.0}},
                                                  "2": {"prompts": 5, "pass_at_k": {"1": 0.05, "10": 0.3}}}}}}
    text = render_report(results)
    assert "| GRPO N=8 | 12, >30 | >30, >30 | 0.500 [0.500 – 0.500] | 0.250 [0.250 – 0.250] | 0 |" in text
    assert "| asym-GRPO N=8 | 7, 9 |" in text
    assert "| run | level 1 (3) | level 2 (5) |" in text
    assert "| base | 0.500 | 0.050 |" in text
    assert "| GRPO N=8 | 0.700 [0.600 – 0.800] | 0.200 [0.100 – 0.300] |" in text
    # per-seed paired Δ: level 1: 0.7−0.6, 0.7−0.8 → mean 0.0 [−0.1, 0.1]; level 2: 0.3, −0.1 → 0.1
    assert "| Δ asym-GRPO N=8 − GRPO N=8 | 0.000 [-0.100 – 0.100] | 0.100 [-0.100 – 0.300] |" in text
    assert "Pass@10: 40.0%" in text
    assert "# GRPO N=8\nPass@10: 60.0%  (50.0%, 70.0%)" in text
    assert "# asym-GRPO N=8\nPass@10: 75.0%  (60.0%, 90.0%)" in text


def test_compare_quick_end_to_end(tmp_path, capsys):
    from llm_rl_helpers import make_base_model

    from catsim.cli.main import main
    from catsim.llm.tasks import grid, make_task

    options = dict(PipelineConfig.compare_quick().tasks[0].options)
    task = make_task("maze", **options)
    assert task.num_levels == 2
    make_base_model(tmp_path / "base", alphabet=grid.ALPHABET, init_std=0.1,
                    task_spec={"task": "maze", "config": {k: list(v) if isinstance(v, tuple) else v
                                                          for k, v in options.items()}})
    out, pub = tmp_path / "cmp", tmp_path / "pub"
    code = main(["llm", "compare", "--quick", "--no-progress", "--out", str(out), "--publish", str(pub),
                 "--base-model", f"maze={tmp_path / 'base'}", "--runs", "grpo:4"])  # one plain run: fewest compilations
    assert code == 0
    printed = capsys.readouterr().out
    assert "| GRPO N=4 |" in printed and "by difficulty level" in printed and "Convergence" in printed
    for name in ("report.md", "results.json", "comparison.png", "passk_curves.png", "training_dynamics.png"):
        assert (pub / name).stat().st_size > 0
    results = json.loads((out / "results.json").read_text())
    tr = results["tasks"]["maze"]
    assert set(tr["runs"]) == {"grpo:4:s0"}
    prompts = [task.prompt("heldout", 0, i) for i in range(4)]
    want_levels = sorted({task.level(p) for p in prompts})
    for entry in tr["runs"].values():
        assert [int(k) for k in entry["levels"]] == want_levels
        counts = np.asarray(entry["eval"]["num_correct"])
        lv = np.asarray([task.level(p) for p in prompts])
        for level, cell in entry["levels"].items():  # the per-level pass@1 is the mean of c/n over its prompts
            assert cell["pass_at_k"]["1"] == pytest.approx(np.mean(counts[lv == int(level)] / 2))
        assert [s for s, _ in entry["heldout_curve"]] == [1, 2]  # heldout_every = 1, 2 steps
        assert entry["steps_to_target"] in (None, 1, 2)


def test_paired_tests_pair_asym_grpo_with_grpo():
    from catsim.experiments.llm_pipeline import _paired_tests

    def run(label, seed, counts):
        return {"label": label, "seed": seed, "eval": {"num_correct": counts}}

    runs = {"grpo:8:s0": run("GRPO N=8", 0, [0, 4, 8, 2]), "asym-grpo:8:s0": run("asym-GRPO N=8", 0, [1, 4, 8, 6]),
            "f-grpo:8:s0": run("F-GRPO γ=0.5 N=8", 0, [0, 4, 8, 2]), "asym-grpo:8:s1": run("asym-GRPO N=8", 1, [0] * 4)}
    pc = PipelineConfig(eval_n=8, test_m=4, test_iterations=500)
    tests = _paired_tests({"runs": runs}, pc)
    pairs = sorted({(t["a"], t["b"], t["seed"]) for t in tests})
    assert pairs == [("GRPO N=8", "F-GRPO γ=0.5 N=8", 0), ("GRPO N=8", "asym-GRPO N=8", 0)]  # s1 has no GRPO
    asym = next(t for t in tests if t["b"] == "asym-GRPO N=8" and t["k"] == 1)
    assert asym["delta"] == pytest.approx(((1 - 0) + (6 - 2)) / 8 / 4)  # pass@1 = c/n, mean over 4 prompts


@pytest.mark.published
def test_published_comparison_is_what_the_code_computes():
    """figures/asym-grpo holds the CPU-scale comparison (`catsim llm compare --out runs/asym-compare
    --publish figures/asym-grpo`, docs/asymmetric-grpo.md §10). Its numbers are recomputed here
    from the stored per-prompt counts with the one pass@k estimator and the task's own levels, and
    the published report must be exactly what `render_report` writes for its results.json."""
    from pathlib import Path

    from catsim.llm.tasks import make_task

    root = Path(__file__).resolve().parents[1] / "figures" / "asym-grpo"
    results = json.loads((root / "results.json").read_text())
    assert (root / "report.md").read_text() == render_report(results)
    pc = results["config"]
    tr = results["tasks"]["maze"]
    task = make_task("maze", **pc["tasks"][0]["options"])
    levels = [task.level(task.prompt("heldout", pc["data_seed"], i)) for i in range(pc["eval_prompts"])]
    n = pc["eval_n"]
    for entry in [tr["base"], *[e["eval"] for e in tr["runs"].values()]]:
        for k in pc["ks"]:
            assert entry["pass_at_k"][str(k)] == pytest.approx(metrics.pass_at_k(n, entry["num_correct"], k).mean(),
                                                               abs=1e-12)
    for entry in tr["runs"].values():
        table = metrics.passk_by_level(n, entry["eval"]["num_correct"], levels, pc["ks"])
        for level, cell in table.items():
            assert entry["levels"][str(level)]["prompts"] == cell["prompts"]
            for k, value in cell["pass_at_k"].items():
                assert entry["levels"][str(level)]["pass_at_k"][str(k)] == pytest.approx(value, abs=1e-12)
    assert sorted(tr["runs"]) == sorted(f"{s.split(':')[0]}:{s.split(':')[1]}:s{seed}"
                                        for s in pc["runs"] for seed in pc["seeds"])
