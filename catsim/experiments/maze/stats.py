"""The Maze study's statistics, shared by the study's runs, its arms, the TRL runs and the report.

    seed_stats       one configuration's seeds: mean and seed spread of pass@k, greedy solve rate,
                     mean change of π(solution) from each seed's warm-up
    paired           B − A at every k ≤ m: the paper's paired m-out-of-n subsampling test
                     (`catsim.llm.metrics.paired_subsample_test`) over (seed, maze) units, with each
                     seed's own full-sample Δ beside it
    paired_tests     F-GRPO − GRPO at every N, γ;  change_tests: each run − its warm-up
    p_text           a test's p-value as the report writes it

A test's subsampled fields (`SUBSAMPLED`) can be taken from a summary file instead of drawn again:
that is how `--report` checks a file against its runs (`catsim.experiments.maze.check`).
"""

from __future__ import annotations

import numpy as np

from catsim.experiments.maze.presets import StudyPreset
from catsim.experiments.maze.summaries import SUBSAMPLED, stored_finder, subsampled_ok


def summarize(runs: list[dict], sp: StudyPreset, bases: dict | None = None) -> list[dict]:
    """Per (method, N, γ): `seed_stats` of its runs."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault((r["method"], r["group_size"], r["gamma"]), []).append(r)
    return [{"method": method, "group_size": n, "gamma": gamma, **seed_stats(rs, bases)}
            for (method, n, gamma), rs in groups.items()]


def seed_stats(rs: list[dict], bases: dict | None = None) -> dict:
    """The seeds of one configuration's runs `rs`: mean and seed spread (sample std, ddof 1; 0 with one
    seed) of pass@k, the mean greedy solve rate, and (given `bases`, {seed: warm-up evaluation}) the mean
    per-maze change of π(solution) from each seed's warm-up (`solution_prob_change`), over the seeds
    whose warm-up is given."""
    entry = {"seeds": [r["seed"] for r in rs], "pass_at_k": {}, "pass_at_k_std": {}}
    for k in rs[0]["final"]["pass_at_k"]:
        vals = np.asarray([r["final"]["pass_at_k"][k] for r in rs])
        entry["pass_at_k"][k] = float(vals.mean())
        entry["pass_at_k_std"][k] = float(vals.std(ddof=1)) if vals.size > 1 else 0.0
    entry["greedy_solve_rate"] = float(np.mean([r["final"]["greedy_solve_rate"] for r in rs]))
    changes = [solution_prob_change(r, bases[r["seed"]]) for r in rs if bases and bases.get(r["seed"])]
    if changes:
        entry["solution_prob_change"] = float(np.mean(changes))
    return entry


def solution_prob_change(run: dict, base: dict) -> float:
    """Mean over the held-out mazes of π(solution) after the run minus π(solution) of its warm-up."""
    return float(np.mean(np.asarray(run["final"]["solution_prob"]) - np.asarray(base["solution_prob"])))


def pooled(runs: list[dict], method: str, n: int, gamma: float) -> dict[int, list[int]]:
    """{seed: per-maze correct counts} of one (method, N, γ)'s runs."""
    return {r["seed"]: r["final"]["num_correct"] for r in runs
            if r["method"] == method and r["group_size"] == n and r["gamma"] == gamma}


def p_text(t: dict) -> str:
    """A test's p-value as reported: `p = …`, or its resolution bound (`p < 1/iterations`) when no
    subsampled Δ fell on the other side of 0."""
    return f"p < {1 / t['iterations']:.0e}" if t["p_value"] == 0 else f"p = {t['p_value']:.2g}"


def paired(sp: StudyPreset, a: dict[int, list[int]], b: dict[int, list[int]], seed: int, alpha: float,
           ks=None, stored=None) -> list[dict]:
    """B − A at every k ≤ m (or at `ks`) over the (seed, maze) units of the seeds both hold, with each
    seed's own full-sample Δ beside the pooled test (the seeds' spread, which the maze-level test does
    not see). `a`, `b`: {seed: per-maze correct counts of n samples}. `stored` (k → a test a summary
    file holds, or None): its `SUBSAMPLED` fields are taken, not drawn again (a minute per test on the
    CPU study) and everything else is computed from the counts — how `--report` checks a file."""
    from catsim.llm.metrics import paired_subsample_test, pass_at_k

    seeds = sorted(set(a) & set(b))
    if not seeds:
        return []
    ca = np.concatenate([a[s] for s in seeds])
    cb = np.concatenate([b[s] for s in seeds])
    out = []
    for k in (k for k in (sp.ks if ks is None else ks) if k <= sp.test_m):
        old = stored(k) if stored is not None else None
        if subsampled_ok(old):
            res = {"delta": float(pass_at_k(sp.eval_n, cb, k).mean() - pass_at_k(sp.eval_n, ca, k).mean()),
                   **{f: old[f] for f in SUBSAMPLED}, "n": sp.eval_n, "m": sp.test_m, "k": k,
                   "iterations": sp.test_iterations}  # paired_subsample_test's fields, in its order
        else:
            res = paired_subsample_test(sp.eval_n, ca, cb, k=k, m=sp.test_m, iterations=sp.test_iterations,
                                        seed=seed + k)
        per_seed = {str(s): float(pass_at_k(sp.eval_n, np.asarray(b[s]), k).mean()
                                  - pass_at_k(sp.eval_n, np.asarray(a[s]), k).mean()) for s in seeds}
        out.append({"seeds": seeds, "units": int(ca.size), "significant": res["p_value"] < alpha, "alpha": alpha,
                    "delta_per_seed": per_seed, **res})
    return out


def paired_tests(runs: list[dict], sp: StudyPreset, alpha: float = 0.05, stored=None) -> list[dict]:
    """F-GRPO − GRPO at every N, γ and k ≤ m: the paired m-out-of-n subsampling test over (seed,
    maze) units (see the module docstring). `stored`: tests of a summary file (see `paired`)."""
    tests = []
    for n, _ in sp.plan:
        plain = pooled(runs, "grpo", n, 0.0)
        for gamma in sp.gammas:
            for t in paired(sp, plain, pooled(runs, "f-grpo", n, gamma), 1000 * n, alpha,
                            stored=stored_finder(stored, group_size=n, gamma=gamma)):
                tests.append({"group_size": n, "gamma": gamma, **t})
    return tests


def change_tests(runs: list[dict], bases: dict[int, dict], sp: StudyPreset, alpha: float = 0.05,
                 stored=None) -> list[dict]:
    """Each run − its warm-up at every k ≤ m (did RL lose or gain pass@k?), per (method, N, γ): the
    same paired test, units (seed, maze), each seed's run against that seed's warm-up."""
    warm = {s: b["num_correct"] for s, b in bases.items()}
    tests = []
    for n, _ in sp.plan:
        for method, gamma in [("grpo", 0.0)] + [("f-grpo", g) for g in sp.gammas]:
            for t in paired(sp, warm, pooled(runs, method, n, gamma), 1000 * n + 500, alpha,
                            stored=stored_finder(stored, method=method, group_size=n, gamma=gamma)):
                tests.append({"method": method, "group_size": n, "gamma": gamma, **t})
    return tests
