"""The simulator as a screen for the trainer: does the methods study's ranking of the rare-solution
rules at N = 8 (`catsim sweep --study methods`: one prompt, a softmax policy) predict their ranking
on the Maze (the rule zoo's arms: a transformer, held-out mazes, 2,000 steps)?

    catsim llm maze-study --out DIR --screen figures/methods/methods.json --report figures/maze-study

`--screen` keeps the methods study's N = 8 numbers of GRPO and of every rule arm's row (the arm's
`screen` in `arm_table`) in DIR/screen.json; the report reads it beside arms.json:

    rows = screen_rows(screen, arms, m)     # screen.json's and arms.json's dicts
    result = judge(rows)                     # both correlations, the misplaced rules, the verdicts

The rule for the verdict, written down before any rule arm ran:
- per rule, x = the simulator's final Mret at N = 8 minus GRPO's (seed means) and y = the Maze
  Δpass@m against GRPO (the arms' paired test's estimate over (seed, maze) units);
- Spearman's ρ between x and y over the rules with both, and its one-sided permutation p-value
  (H1: ρ > 0; `scipy.stats.permutation_test` over the pairings: all of them for at most 8 rules,
  else 100,000 drawn from a fixed seed);
- "predicts" when ρ > 0 and p < 0.05, "does not predict" otherwise ("undecided" with fewer than 3
  rules or no order on one side); the same for the Maze Δpass@1 against the simulator's Qpos change;
- a rule the screen misplaces: its simulator rank and its Maze rank differ by more than a third of
  the rules (average ranks for ties; none named with fewer than 3 rules).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from scipy import stats

from catsim import provenance
from catsim.errors import CatsimError
from catsim.experiments.agreement import read_json
from catsim.experiments.maze.arms import find_test
from catsim.experiments.maze.summaries import write_summary

SCREEN_FILE = "screen.json"
SIM_N = 8  # the simulator's group size the screen reads (the zoo trains at N = 8)
BASELINE = "GRPO"  # the methods study's reference row
ALPHA = 0.05
RESAMPLES = 100_000
SEED = 0

__all__ = ["SCREEN_FILE", "write_screen", "load_screen", "screen_rows", "rank_correlation", "judge"]


def write_screen(out_dir, methods_json, arms) -> dict:
    """DIR/screen.json from a methods study's methods.json: the seed-mean final Mret and Qpos at
    N = 8 of GRPO and of each arm's `screen` row, with where they came from."""
    path = Path(methods_json)
    if not path.is_file():
        raise CatsimError(f"--screen {path}: no such file (a methods study writes methods.json: "
                          f"`catsim sweep --study methods --group-size {SIM_N} --out runs/screen`)")
    methods = read_json(path)
    if not isinstance(methods, dict) or any(k not in methods for k in ("methods", "group_sizes", "mret", "qpos")):
        raise CatsimError(f"--screen {path}: not a methods study's methods.json")
    if SIM_N not in methods["group_sizes"]:
        raise CatsimError(f"--screen {path}: the methods study has no N = {SIM_N} (it ran N = "
                          f"{', '.join(map(str, methods['group_sizes']))}); rerun it with --group-size {SIM_N}")
    names = [BASELINE, *dict.fromkeys(a.screen for a in arms if a.screen)]
    missing = [n for n in names if n not in methods["methods"]]
    if missing:
        raise CatsimError(f"--screen {path}: the methods study has no row {missing[0]!r}; rerun "
                          "`catsim sweep --study methods` with this catsim")
    j = methods["group_sizes"].index(SIM_N)
    rows = {}
    for name in names:
        i = methods["methods"].index(name)
        rows[name] = {"mret": float(np.mean(methods["mret"][i][j])), "qpos": float(np.mean(methods["qpos"][i][j]))}
        if not all(math.isfinite(v) for v in rows[name].values()):
            raise CatsimError(f"--screen {path}: row {name!r} at N = {SIM_N} is not finite")
    data = {"source": str(path), "n": SIM_N, "steps": methods.get("steps"), "seeds": methods.get("seeds"),
            "rows": rows, "provenance": provenance.collect()}
    return write_summary(Path(out_dir) / SCREEN_FILE, data)


def load_screen(out_dir) -> dict | None:
    """DIR/screen.json, or None when the study has none; a damaged one is refused."""
    path = Path(out_dir) / SCREEN_FILE
    if not path.is_file():
        return None
    d = read_json(path)
    if not isinstance(d, dict) or not isinstance(d.get("rows"), dict) or BASELINE not in d["rows"]:
        raise CatsimError(f"{path}: not a screen file; rewrite it with `catsim llm maze-study --out "
                          f"{Path(out_dir)} --screen METHODS_JSON`")
    return d


def screen_rows(screen: dict, arms: dict, m: int) -> list[dict]:
    """One row per rule arm with a simulator row and both Maze tests against GRPO (k = 1, k = m);
    an arm still pending is left out."""
    base = screen["rows"][BASELINE]
    rows = []
    for a in arms["arms"]:
        sim = screen["rows"].get(a.get("screen") or "")
        t1, tm = find_test(arms, a["name"], "grpo", 1), find_test(arms, a["name"], "grpo", m)
        if sim is None or t1 is None or tm is None:
            continue
        rows.append({"arm": a["name"], "sim": a["screen"], "mret": sim["mret"], "qpos": sim["qpos"],
                     "d_mret": sim["mret"] - base["mret"], "d_qpos": sim["qpos"] - base["qpos"],
                     "d_pass_m": tm["delta"], "d_pass_1": t1["delta"], "p_m": tm["p_value"], "p_1": t1["p_value"],
                     "sig_m": tm["significant"], "sig_1": t1["significant"]})
    return rows


def rank_correlation(x, y, *, seed: int = SEED) -> dict:
    """Spearman's ρ of x and y with its one-sided permutation p-value (H1: ρ > 0); ρ and p are None
    with fewer than 3 pairs or when x or y has no order."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    out = {"n": int(len(x)), "rho": None, "p_value": None, "exact": None}
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return out
    ry = stats.rankdata(y) - (len(y) + 1) / 2  # centred ranks (ties share their average)

    def rho(xs, axis=-1):  # Spearman's ρ: Pearson's r of the ranks, for a whole batch of pairings at once
        rx = stats.rankdata(xs, axis=axis)
        rx = rx - rx.mean(axis=axis, keepdims=True)
        return (rx * ry).sum(axis=axis) / np.sqrt((rx * rx).sum(axis=axis) * (ry * ry).sum())

    res = stats.permutation_test((x,), rho, permutation_type="pairings", vectorized=True, n_resamples=RESAMPLES,
                                 alternative="greater", rng=np.random.default_rng(seed))
    return {**out, "rho": float(res.statistic), "p_value": float(res.pvalue),
            "exact": math.factorial(len(x)) <= RESAMPLES}  # scipy then enumerates every pairing


def _verdict(c: dict) -> str:
    if c["rho"] is None:
        return "undecided"
    return "predicts" if c["rho"] > 0 and c["p_value"] < ALPHA else "does not predict"


def judge(rows: list[dict]) -> dict:
    """Both correlations with their verdicts and the misplaced rules (the module docstring's rule)."""
    pass_m = rank_correlation([r["d_mret"] for r in rows], [r["d_pass_m"] for r in rows])
    pass_1 = rank_correlation([r["d_qpos"] for r in rows], [r["d_pass_1"] for r in rows])
    misplaced = []
    if len(rows) >= 3:  # fewer: the screen is undecided, no rank says anything
        sim_rank = stats.rankdata([-r["d_mret"] for r in rows])  # 1 = keeps the most
        maze_rank = stats.rankdata([-r["d_pass_m"] for r in rows])
        misplaced = [{"arm": r["arm"], "sim_rank": float(a), "maze_rank": float(b)}
                     for r, a, b in zip(rows, sim_rank, maze_rank) if abs(a - b) > len(rows) / 3]
    return {"pass_m": {**pass_m, "verdict": _verdict(pass_m)}, "pass_1": {**pass_1, "verdict": _verdict(pass_1)},
            "misplaced": misplaced}
