"""The Maze study's report: report.md (our table beside the paper's App. K numbers, the paired
tests, the seed spread, π(solution) change) and four figures, from results.json alone.

    write_report(load_results("runs/maze-study"), "figures/maze-study")
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from catsim.experiments._io import write_text
from catsim.plots import maze_study as plots

# F-GRPO §5.2 / App. K as summarised in THEORY.md §5: ranges across N ∈ {4, …, 128}, in percent.
PAPER = {"grpo": {"1": (65.6, 75.8), "256": (67.3, 76.9)}, "f-grpo": {"1": (74.4, 93.6), "256": (75.9, 96.5)}}
FIGURES = ("passk_curves.png", "passk_vs_step.png", "solution_mass.png", "pvalues.png")


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _kmax(results: dict) -> str:
    return str(max(int(k) for k in results["summary"][0]["pass_at_k"]))


def _spread(summary: dict, k: str) -> str:
    return f"{_pct(summary['pass_at_k'][k])} ± {_pct(summary['pass_at_k_std'][k])}"


def table_lines(results: dict) -> list[str]:
    """Markdown table: pass@1 and pass@k_max (%, seed mean ± sample std) per method and N, beside
    the paper's ranges, plus the greedy solve rate and the mean change of π(solution)."""
    kmax = _kmax(results)
    lines = [f"| method | N | seeds | pass@1 | pass@{kmax} | greedy solve | mean Δπ(solution) | paper pass@1 | "
             "paper pass@256 |", "|---|---|---|---|---|---|---|---|---|"]
    base = list(results["bases"].values())
    b1 = np.mean([b["pass_at_k"]["1"] for b in base])
    bk = np.mean([b["pass_at_k"][kmax] for b in base])
    bg = np.mean([b["greedy_solve_rate"] for b in base])
    lines.append(f"| warm-up | – | {len(base)} | {_pct(b1)} | {_pct(bk)} | {_pct(bg)} | – | – | – |")
    for s in sorted(results["summary"], key=lambda s: (s["group_size"], s["method"] != "grpo", s["gamma"])):
        name = "GRPO" if s["method"] == "grpo" else f"F-GRPO γ={s['gamma']:g}"
        runs = plots.runs_of(results, s)
        dmass = np.mean([np.mean(np.asarray(r["final"]["solution_prob"]) -
                                 np.asarray(results["bases"][str(r["seed"])]["solution_prob"])) for r in runs])
        paper = PAPER["grpo" if s["method"] == "grpo" else "f-grpo"]
        ref = s["method"] == "grpo" or s["gamma"] == 0.5  # the paper reports F-GRPO at γ = 0.5
        p1 = "{:.1f}–{:.1f}".format(*paper["1"]) if ref else "–"
        p256 = "{:.1f}–{:.1f}".format(*paper["256"]) if ref else "–"
        lines.append(f"| {name} | {s['group_size']} | {len(s['seeds'])} | {_spread(s, '1')} | {_spread(s, kmax)} | "
                     f"{_pct(s['greedy_solve_rate'])} | {dmass:+.3f} | {p1} | {p256} |")
    return lines


def test_lines(results: dict) -> list[str]:
    tests = results["tests"]
    if not tests:
        return ["(no F-GRPO/GRPO pair finished)"]
    t0 = tests[0]
    lines = [f"Paired m-out-of-n subsampling over (seed, maze) units: n = {t0['n']} samples per maze, "
             f"m = {t0['m']}, {t0['iterations']} iterations, two-sided α = {t0['alpha']}; Δ = F-GRPO − GRPO "
             "(full-sample), interval = 95 % of the subsampled Δ.", "",
             "| N | γ | units | k | Δ pass@k | interval | p | significant |", "|---|---|---|---|---|---|---|---|"]
    for t in tests:
        lines.append(f"| {t['group_size']} | {t['gamma']:g} | {t['units']} | {t['k']} | {t['delta']:+.4f} | "
                     f"[{t['interval'][0]:+.4f}, {t['interval'][1]:+.4f}] | {t['p_value']:.3g} | "
                     f"{'yes' if t['significant'] else 'no'} |")
    return lines


def write_report(results: dict, out_dir: str | Path) -> Path:
    """report.md and the figures in `out_dir`; returns the path of report.md."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots.plot_passk(results, out / FIGURES[0])
    ks = [k for k in (1, 8, 64) if all(str(k) in c["pass_at_k"] for r in results["runs"] for c in r["curve"])]
    plots.plot_passk_vs_step(results, out / FIGURES[1], ks=ks or (1,))
    plots.plot_solution_mass(results, out / FIGURES[2])
    plots.plot_pvalues(results, out / FIGURES[3])
    p = results["preset"]
    prov = results.get("provenance", {})
    text = [f"# Maze study (preset `{p['name']}`)", "",
            f"{p['maze_size']}×{p['maze_size']} mazes, model {p['hidden']} wide × {p['layers']} layers, warm-up "
            f"{p['sft_steps']} steps × batch {p['sft_batch']} (lr {p['sft_lr']:g}, {p['sft_schedule']}); RL "
            f"{p['rl_steps']} steps, lr {p['learning_rate']:g}, "
            + (f"{p['rollouts_per_step']} rollouts per step (compute-matched)" if p["rollouts_per_step"]
               else f"{p['prompts_per_step']} prompts per step") +
            f"; evaluation on {p['eval_prompts']} held-out mazes × {p['eval_n']} samples (τ = 1, unbiased pass@k).",
            "", "## pass@k (%) beside the paper's App. K (ranges across N = 4…128)", "", *table_lines(results), "",
            "## F-GRPO − GRPO: paired test", "", *test_lines(results), "",
            "## Figures", "", *[f"![{f}]({f})" for f in FIGURES], "",
            f"Provenance: commit {prov.get('git_commit', '?')}, {prov.get('cpu_model', '?')}, "
            f"{prov.get('cpu_count', '?')} CPUs, jax {prov.get('jax_version', '?')}."]
    return write_text(out / "report.md", "\n".join(text) + "\n")
