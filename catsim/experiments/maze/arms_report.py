"""The arms' part of the Maze study report (`catsim.experiments.maze.arms`): which fix keeps pass@k,
at what pass@1 cost — the headline by the rule fixed before the runs, every arm against GRPO and
F-GRPO γ = 0.5, the article's claims with their verdicts, the horizon arms, and two figures. Read
from arms.json and the study's results.json alone.

    lines, figures = arms_section(arms, results, stage_dir)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from catsim.experiments.maze.arms import find_test as _test
from catsim.experiments.maze.stats import p_text
from catsim.plots import maze_arms as plots
from catsim.plots.maze_study import warm_up_on_curve_mazes

FIGURES = ("arms_frontier.png", "arms_horizon.png")
RULE_FIGURES = ("rules_frontier.png", "rules_screen.png")


def _pts(x: float) -> str:
    return f"{round(100 * x, 1) + 0.0:+.1f}"  # + 0.0: a change that rounds to zero reads +0.0, not -0.0


def _cell(t: dict | None) -> str:
    if t is None:
        return "–"
    return f"{_pts(t['delta'])} ({p_text(t)}{', sig.' if t['significant'] else ''})"


def _change(summary: dict) -> str:
    """The mean change of π(solution) from the warm-ups ("–" when no warm-up evaluation was read)."""
    return f"{summary['solution_prob_change']:+.3f}" if "solution_prob_change" in summary else "–"


def _spread(summary: dict, k: str) -> str:
    """Seed mean ± sample std; one seed has no spread, so its row shows the mean alone."""
    mean = f"{100 * summary['pass_at_k'][k]:.1f}"
    return mean if len(summary["seeds"]) < 2 else f"{mean} ± {100 * summary['pass_at_k_std'][k]:.1f}"


def table_lines(arms: dict, m: int) -> list[str]:
    """Every arm's but the rule zoo's (`rules_lines`) seed-mean pass@1 and pass@m (± seed std), and its
    Δ against GRPO and F-GRPO γ = 0.5 in points with the paired test's p (sig.: p < α)."""
    by = {a["name"]: a for a in arms["arms"]}
    lines = [f"| arm | N | steps | updates | seeds | pass@1 | pass@{m} | greedy | Δπ(solution) | s/step | "
             f"Δ pass@1 vs GRPO | Δ pass@{m} vs GRPO | Δ pass@1 vs F-GRPO | Δ pass@{m} vs F-GRPO |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in arms["summary"]:
        a = by[s["arm"]]
        if a.get("rule"):
            continue
        lines.append(f"| {s['arm']} | {a['group_size']} | {a['steps'] or arms['preset']['rl_steps']} | "
                     f"{a['updates'] or 1} | {len(s['seeds'])}/{a['seeds']} | {_spread(s, '1')} | {_spread(s, str(m))} | "
                     f"{100 * s['greedy_solve_rate']:.1f} | {_change(s)} | "
                     f"{s['rl_seconds_per_step']:.3f} | " + " | ".join(
                         _cell(_test(arms, s["arm"], ref, k)) for ref in ("grpo", "f-grpo-g0.5") for k in (1, m)) + " |")
    return lines


def claim_lines(arms: dict) -> list[str]:
    lines = ["| claim | the article | this regime (arm − reference, points) | verdict |", "|---|---|---|---|"]
    for c in arms["claims"]:
        parts = []
        for p in c["parts"]:
            what = f"{p['arm']} − {p['reference']} at k = {p['k']} (expected {p['sign']} 0): "
            parts.append(what + ("not run yet" if p["met"] is None else
                                 f"{_pts(p['delta'])} [{_pts(p['interval'][0])}, {_pts(p['interval'][1])}], "
                                 f"{p_text(p)}{'' if p['met'] else ' — not met'}"))
        lines.append(f"| {c['claim']} | {c['article']} | {'; '.join(parts)} | **{c['verdict']}** |")
    return lines


def headline_lines(arms: dict, m: int) -> list[str]:
    rule = ("Rule (fixed in catsim/experiments/maze_arms.py before the runs finished): among the trained arms at the "
            f"study's 2,000 steps, the one with the largest significant pass@{m} gain over GRPO, with its pass@1 "
            "change.")
    h = arms.get("headline")
    if h is None:
        done = {s["arm"] for s in arms["summary"]}
        return [rule, "", f"**No trained arm keeps significantly more pass@{m} than GRPO** (of {len(done)} arms "
                "with runs)." + (" Some arms are still pending." if arms["pending"] else "")]
    one = h["pass_at_1"]
    return [rule, "", f"**{h['arm']}** keeps {_pts(h['pass_at_m']['delta'])} points of pass@{m} over GRPO "
            f"({p_text(h['pass_at_m'])}), at {_pts(one['delta']) if one else '?'} points of pass@1 "
            f"({p_text(one) if one else 'no test'})." + (" Some arms are still pending." if arms["pending"] else "")]


def _per_seed(test: dict) -> str:
    """A paired test's arm − reference in points, seed by seed (its `delta_per_seed`)."""
    return ", ".join(f"s{s} {_pts(v)}" for s, v in sorted(test["delta_per_seed"].items(), key=lambda kv: int(kv[0])))


def horizon_lines(arms: dict, results: dict, m: int) -> list[str]:
    """F-GRPO − GRPO at the study's 2,000 steps and at each horizon's end (the pair of arms of that many
    steps), and each longer run's pass@m against its warm-up along the run (the simulator's horizons
    study predicts a loss growing with t)."""
    long = [a for a in arms["arms"] if a["steps"]]
    if not long:
        return []
    lines = []
    for k in (1, m):
        said = [f"{_cell(_test(arms, 'f-grpo-g0.5', 'grpo', k))} at {arms['preset']['rl_steps']:,} steps"]
        for steps in sorted({a["steps"] for a in long}):
            names = {a["name"] for a in long if a["steps"] == steps}
            far = next((t for t in arms["tests"] if t["k"] == k and {t["arm"], t["reference"]} <= names), None)
            said.append(f"{_cell(far)} at {steps:,} steps ({far['arm']} − {far['reference']}; per seed "
                        f"{_per_seed(far)})" if far else f"the {steps:,}-step runs are not finished")
        lines.append(f"- F-GRPO γ = 0.5 − GRPO at k = {k}: {', '.join(said)}.")
    for a in long:
        runs = [r for r in arms["runs"] if r["arm"] == a["name"]]
        if not runs or not all(r["curve"] for r in runs) or str(m) not in runs[0]["curve"][0]["pass_at_k"]:
            continue
        warm = np.mean([warm_up_on_curve_mazes(results, r["seed"], m) for r in runs])
        curve = np.mean([[c["pass_at_k"][str(m)] for c in r["curve"]] for r in runs], axis=0)
        steps = [c["step"] for c in runs[0]["curve"]]
        lines.append(f"- {a['name']}: pass@{m} − warm-up on the curve mazes, by step: "
                     + ", ".join(f"{s}: {_pts(v - warm)}" for s, v in zip(steps, curve)) + ".")
    return lines


def arms_section(arms: dict, results: dict, stage: Path,
                 screen: dict | None = None) -> tuple[list[str], tuple[str, ...]]:
    """The report's arms section and the figures it draws into `stage` (`screen`: the study's
    screen.json, the simulator's numbers for the rule zoo)."""
    m = arms["preset"]["test_m"]
    plots.plot_frontier(arms, results, stage / FIGURES[0], m)
    plots.plot_horizon(arms, results, stage / FIGURES[1], ks=(1, min(m, arms["preset"]["curve_n"])))
    lines = ["## Arms: which fix keeps pass@k, at what pass@1 cost", "",
             "Every arm starts from the same committed warm-ups and is evaluated exactly as the runs above; "
             "an arm that is a study run is read from it, not rerun. Coefficients were fixed before any held-out "
             "evaluation by one rule: the defaults of verl's ppo_trainer.yaml (the paper's stack) — entropy "
             "bonus 0.001, KL penalty 0.001 to the warm-up with the k3 estimator; DAPO and CISPO as "
             "`--method dapo|cispo` define them; the γ ramp is the article's get_gamma.", "",
             *headline_lines(arms, m), "", *table_lines(arms, m), "",
             "### The article's claims, and the horizon's", "",
             "A part is met when its paired test is significant (α = 0.05) in the expected direction (for ≥ / ≤: "
             "when it is not significant in the other); a claim holds when every part is met, does not hold "
             "when none is, and is mixed otherwise. Tests are descriptive: no correction for the many comparisons. "
             "The last rows test the horizon: each 6,000-step run against the 2,000-step run of its own seeds "
             "(the simulator's prediction), and F-GRPO against GRPO at 6,000 steps and at App. K's 20,000 (its "
             "parts strict: a significant pass@1 gain and pass@k lead).",
             "", *claim_lines(arms), ""]
    horizon = horizon_lines(arms, results, m)
    if horizon:
        lines += ["### Horizon", "", *horizon, ""]
    if arms["pending"]:
        lines += [f"Pending ({len(arms['pending'])} runs): " + ", ".join(arms["pending"]) + ".", ""]
    lines += [f"![{f}]({f})" for f in FIGURES] + [""]
    drawn = FIGURES
    if any(a.get("rule") for a in arms["arms"]):
        rule_lines, rule_figures = rules_section(arms, results, stage, screen)
        lines += rule_lines
        drawn += rule_figures
    return lines, drawn


def leaderboard_lines(arms: dict, m: int, screen: dict | None) -> list[str]:
    """The rule zoo's finished arms, best Δpass@m against GRPO first: pass@1 and pass@m (seed mean ±
    std), both Δs against GRPO and F-GRPO γ = 0.5 with their tests, and the simulator's changes."""
    rules = {a["name"]: a for a in arms["arms"] if a.get("rule")}
    done = [s for s in arms["summary"] if s["arm"] in rules]
    if not done:
        return ["No rule arm has finished a seed yet."]

    def gain(s):
        t = _test(arms, s["arm"], "grpo", m)
        return -np.inf if t is None else t["delta"]

    sim = (screen or {}).get("rows", {})
    base = sim.get("GRPO")
    lines = [f"| rank | rule arm | seeds | pass@1 | pass@{m} | Δ pass@{m} vs GRPO | Δ pass@1 vs GRPO | "
             f"Δ pass@{m} vs F-GRPO | Δ pass@1 vs F-GRPO | simulator N = 8: Δ Mret / Δ Qpos |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for i, s in enumerate(sorted(done, key=gain, reverse=True), 1):
        a, row = rules[s["arm"]], sim.get(rules[s["arm"]].get("screen") or "")
        simulated = (f"{row['mret'] - base['mret']:+.3f} / {row['qpos'] - base['qpos']:+.3f}"
                     if row and base else "–" if screen is None or not a.get("screen") else "no row")
        lines.append(f"| {i} | {s['arm']} | {len(s['seeds'])}/{a['seeds']} | {_spread(s, '1')} | {_spread(s, str(m))} | "
                     + " | ".join(_cell(_test(arms, s["arm"], ref, k)) for ref in ("grpo", "f-grpo-g0.5")
                                  for k in (m, 1)) + f" | {simulated} |")
    return lines


def screen_lines(rows: list[dict], result: dict, m: int) -> list[str]:
    """The screen's verdicts, with the rule they follow and the rules it misplaces."""
    from catsim.experiments.maze import screen as sc

    def said(c, what):
        if c["rho"] is None:
            return f"- {what}: undecided ({c['n']} rules with both numbers; it needs 3 with an order on each side)."
        return (f"- {what}: Spearman ρ = {c['rho']:+.2f} over {c['n']} rules, one-sided permutation p = "
                f"{c['p_value']:.3g} ({'every pairing' if c['exact'] else f'{sc.RESAMPLES:,} pairings'}): "
                f"**the simulator {c['verdict']}**.")

    lines = [f"Rule (fixed in catsim/experiments/maze/screen.py before the rule arms ran): the screen predicts "
             f"when Spearman's ρ between the simulator's change against GRPO at N = {sc.SIM_N} and the Maze's "
             f"is positive with a one-sided permutation p < {sc.ALPHA}; a rule is misplaced when its two ranks "
             "differ by more than a third of the rules.", "",
             said(result["pass_m"], f"Mret → Maze pass@{m}"), said(result["pass_1"], "Qpos → Maze pass@1")]
    if result["misplaced"]:
        lines.append("- Misplaced: " + ", ".join(f"{r['arm']} (simulator rank {r['sim_rank']:g}, Maze rank "
                                                 f"{r['maze_rank']:g})" for r in result["misplaced"]) + ".")
    return lines


def rules_section(arms: dict, results: dict, stage: Path, screen: dict | None) -> tuple[list[str], tuple[str, ...]]:
    """The rule zoo: its leaderboard, its pass@1-against-pass@m figure and, with the simulator's
    numbers (screen.json), the screen's figure and verdicts."""
    from catsim.experiments.maze import screen as sc

    m = arms["preset"]["test_m"]
    plots.plot_frontier(arms, results, stage / RULE_FIGURES[0], m, rules=True)
    lines = ["## Which rare-solution rule keeps pass@k: the rule zoo", "",
             "Every rule of the registry that trains at N = 8 (and asym-GRPO and the unlikeliness reward), as GRPO "
             "with the rule's advantage at its authors' defaults (k = 4, β = 0.25, λ = 0.1 where they give none), "
             "fixed before any held-out evaluation; 3 seeds × 2,000 steps from the same warm-ups, tested as every "
             "arm. Ranked by Δ pass@m against GRPO (the paired test's estimate).", "",
             *leaderboard_lines(arms, m, screen), "", f"![{RULE_FIGURES[0]}]({RULE_FIGURES[0]})", ""]
    if screen is None:
        return lines, RULE_FIGURES[:1]
    rows = sc.screen_rows(screen, arms, m)
    result = sc.judge(rows)
    plots.plot_screen(rows, result, stage / RULE_FIGURES[1], m)
    lines += ["### The simulator as a screen", "",
              f"The simulator's numbers: the methods study at N = {screen['n']} ({screen['seeds']} seeds, "
              f"{screen['steps']} steps; {screen['source']}).", "",
              *screen_lines(rows, result, m), "", f"![{RULE_FIGURES[1]}]({RULE_FIGURES[1]})", ""]
    return lines, RULE_FIGURES
