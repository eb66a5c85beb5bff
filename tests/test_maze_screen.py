"""The rule zoo's screen (catsim.experiments.maze.screen) and its report section: the rank
correlation against a brute-force oracle, the verdict rule, screen.json's refusals, and the
leaderboard drawn from an arms.json."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from catsim.cli.main import main
from catsim.errors import CatsimError
from catsim.experiments.maze import arms_report
from catsim.experiments.maze import screen as sc
from catsim.experiments.maze.arm_table import zoo_arms

STUDY = Path(__file__).resolve().parents[1] / "figures" / "maze-study" / "cpu"


def _spearman_no_ties(x, y) -> float:
    rx, ry = np.argsort(np.argsort(x)), np.argsort(np.argsort(y))
    n = len(x)
    return 1 - 6 * np.sum((rx - ry) ** 2) / (n * (n * n - 1))


def test_rank_correlation_is_the_exact_permutation_test():
    """ρ and the one-sided p over all 5! pairings, counted by brute force."""
    x, y = [1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 1.0, 4.0, 3.0, 5.0]
    got = sc.rank_correlation(x, y)
    rho = _spearman_no_ties(x, y)
    assert rho == pytest.approx(0.8) and got["rho"] == pytest.approx(rho)
    at_least = sum(_spearman_no_ties(list(p), y) >= rho - 1e-12 for p in itertools.permutations(x))
    assert got["exact"] and got["p_value"] == pytest.approx(at_least / 120)  # 8 of 120 pairings


def test_rank_correlation_undefined_without_order_or_rules():
    assert sc.rank_correlation([1.0, 2.0], [1.0, 2.0])["rho"] is None
    assert sc.rank_correlation([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])["rho"] is None


def _rows(d_mret, d_pass_m):
    return [{"arm": f"r{i}", "d_mret": a, "d_pass_m": b, "d_qpos": a, "d_pass_1": -b}
            for i, (a, b) in enumerate(zip(d_mret, d_pass_m))]


def test_verdicts_follow_the_written_rule():
    up = np.arange(8.0)
    same = sc.judge(_rows(up, up))
    assert same["pass_m"]["verdict"] == "predicts" and same["pass_m"]["p_value"] == pytest.approx(1 / 40320)
    assert same["pass_1"]["verdict"] == "does not predict" and same["misplaced"] == []
    flipped = sc.judge(_rows(up, up[::-1]))
    assert flipped["pass_m"]["verdict"] == "does not predict" and flipped["pass_m"]["rho"] == pytest.approx(-1)
    # r0 ranks last in the simulator and first on the Maze: 7 > 8/3 places apart
    assert {m["arm"] for m in flipped["misplaced"]} >= {"r0", "r7"}
    two = sc.judge(_rows([1.0, 2.0], [2.0, 1.0]))
    assert two["pass_m"]["verdict"] == "undecided" and two["misplaced"] == []


def _methods(path: Path, sizes=(2, 8), drop=None) -> Path:
    names = ["GRPO", *dict.fromkeys(a.screen for a in zoo_arms() if a.screen)]
    names = [n for n in names if n != drop]
    mret = [[[0.5 + 0.01 * i + j, 0.5 + 0.01 * i + j] for j in range(len(sizes))] for i in range(len(names))]
    path.write_text(json.dumps({"methods": names, "group_sizes": list(sizes), "mret": mret, "qpos": mret,
                                "steps": 10, "seeds": 2}))
    return path


def test_write_screen_keeps_n8_and_refuses_in_one_line(tmp_path):
    d = sc.write_screen(tmp_path, _methods(tmp_path / "m.json"), zoo_arms())
    assert d["n"] == 8 and d["rows"]["GRPO"] == {"mret": 1.5, "qpos": 1.5}
    assert set(d["rows"]) == {"GRPO", *(a.screen for a in zoo_arms() if a.screen)}
    assert sc.load_screen(tmp_path)["rows"] == d["rows"]
    with pytest.raises(CatsimError, match="no N = 8"):
        sc.write_screen(tmp_path, _methods(tmp_path / "m2.json", sizes=(2, 64)), zoo_arms())
    with pytest.raises(CatsimError, match="no row 'MaxRL'"):
        sc.write_screen(tmp_path, _methods(tmp_path / "m3.json", drop="MaxRL"), zoo_arms())
    with pytest.raises(CatsimError, match="no such file"):
        sc.write_screen(tmp_path, tmp_path / "none.json", zoo_arms())


def test_cli_screen_writes_screen_json_and_refuses_training_flags(tmp_path, capsys):
    out = tmp_path / "study"
    out.mkdir()
    shutil.copy(STUDY / "results.json", out / "results.json")
    methods = _methods(tmp_path / "m.json")
    assert main(["llm", "maze-study", "--out", str(out), "--screen", str(methods)]) == 0
    assert json.loads((out / "screen.json").read_text())["source"] == str(methods)
    assert main(["llm", "maze-study", "--out", str(out), "--screen", str(methods), "--max-runs", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--screen trains nothing: --max-runs" in err and "\n" not in err
    # the flags --report refuses, --screen refuses too (one list): --threads-per-job would not act
    assert main(["llm", "maze-study", "--out", str(out), "--screen", str(methods), "--threads-per-job", "1"]) == 2
    assert "--screen trains nothing: --threads-per-job" in capsys.readouterr().err
    assert main(["llm", "maze-study", "--out", str(out), "--screen", str(tmp_path / "none.json")]) == 2


def test_leaderboard_and_screen_section(tmp_path):
    """Three finished rule arms: ranked by Δ pass@m against GRPO, the simulator's changes beside them,
    both figures drawn, and the screen's verdict stated."""
    m = 64
    arms_d = {"preset": {"test_m": m}, "arms": [{"name": "grpo", "steps": 0}, {"name": "f-grpo-g0.5", "steps": 0}],
              "summary": [], "tests": [], "runs": []}
    for name, screen_row, d in (("a", "MaxRL", 0.02), ("b", "NSR", 0.05), ("c", "PSR", -0.01)):
        arms_d["arms"].append({"name": name, "steps": 0, "seeds": 3, "rule": name, "screen": screen_row})
        arms_d["summary"].append({"arm": name, "seeds": [0, 1, 2], "pass_at_k": {"1": 0.5, str(m): 0.8},
                                  "pass_at_k_std": {"1": 0.01, str(m): 0.02}})
        for k, delta in ((1, -d), (m, d)):
            arms_d["tests"].append({"arm": name, "reference": "grpo", "k": k, "delta": delta, "p_value": 0.01,
                                    "significant": True, "interval": [delta - 0.01, delta + 0.01]})
    screen = {"n": 8, "seeds": 4, "steps": 1000, "source": "m.json",
              "rows": {"GRPO": {"mret": 0.9, "qpos": 0.6}, "MaxRL": {"mret": 0.92, "qpos": 0.6},
                       "NSR": {"mret": 1.0, "qpos": 0.8}, "PSR": {"mret": 0.2, "qpos": 0.9}}}
    results = {"bases": {"0": {"pass_at_k": {"1": 0.4, str(m): 0.9}}}}
    lines, figures = arms_report.rules_section(arms_d, results, tmp_path, screen)
    board = [line for line in lines if line.startswith("| 1 ") or line.startswith("| 2 ") or line.startswith("| 3 ")]
    assert [row.split(" | ")[1] for row in board] == ["b", "a", "c"]  # best Δ pass@64 first
    assert "+0.100 / +0.200" in board[0]  # NSR: Mret 1.0 − 0.9, Qpos 0.8 − 0.6
    text = "\n".join(lines)
    assert "ρ = +1.00 over 3 rules" in text and "every pairing" in text
    assert "does not predict" in text  # 3 rules: the best p is 1/6
    assert figures == arms_report.RULE_FIGURES and all((tmp_path / f).is_file() for f in figures)


def test_rank_correlation_with_ties_is_scipys_spearman():
    x, y = [0.1, 0.1, 0.3, 0.2, 0.5, 0.4], [1.0, 2.0, 2.0, 0.5, 3.0, 1.0]
    from scipy import stats

    assert sc.rank_correlation(x, y)["rho"] == pytest.approx(stats.spearmanr(x, y).statistic)
