"""The Maze study's report: report.md (the answer to the paper's question with its test and
confidence, our table beside the paper's App. K numbers, how this regime differs from the paper's,
the paired tests, the seed spread, the π(solution) change), four figures and a copy of results.json,
from results.json alone.

    write_report(load_results("runs/maze-study"), "figures/maze-study", study_dir="runs/maze-study")
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from catsim.experiments.maze.presets import paper
from catsim.experiments.maze.provenance import set_up_lines
from catsim.experiments.maze.stats import p_text, solution_prob_change
from catsim.files import write_text
from catsim.plots import maze_study as plots

# F-GRPO §5.2 / App. K as summarised in THEORY.md §5: ranges across N ∈ {4, …, 128}, in percent.
PAPER = {"grpo": {"1": (65.6, 75.8), "256": (67.3, 76.9)}, "f-grpo": {"1": (74.4, 93.6), "256": (75.9, 96.5)}}
FIGURES = ("passk_curves.png", "passk_vs_step.png", "solution_mass.png", "pvalues.png")


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _kmax(results: dict) -> str:
    return str(max(int(k) for k in results["summary"][0]["pass_at_k"]))


def _spread(summary: dict, k: str) -> str:
    """Seed mean ± sample std; one seed has no spread, so its row shows the mean alone."""
    mean = _pct(summary["pass_at_k"][k])
    return mean if len(summary["seeds"]) < 2 else f"{mean} ± {_pct(summary['pass_at_k_std'][k])}"


def _name(method: str, gamma: float) -> str:
    return "GRPO" if method == "grpo" else f"F-GRPO γ={gamma:g}"


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
        dmass = s.get("solution_prob_change")
        if dmass is None:  # results.json of an earlier version
            dmass = np.mean([solution_prob_change(r, results["bases"][str(r["seed"])])
                             for r in plots.runs_of(results, s)])
        paper_ = PAPER["grpo" if s["method"] == "grpo" else "f-grpo"]
        ref = s["method"] == "grpo" or s["gamma"] == 0.5  # the paper reports F-GRPO at γ = 0.5
        p1 = "{:.1f}–{:.1f}".format(*paper_["1"]) if ref else "–"
        p256 = "{:.1f}–{:.1f}".format(*paper_["256"]) if ref else "–"
        lines.append(f"| {_name(s['method'], s['gamma'])} | {s['group_size']} | {len(s['seeds'])} | "
                     f"{_spread(s, '1')} | {_spread(s, kmax)} | {_pct(s['greedy_solve_rate'])} | {dmass:+.3f} | "
                     f"{p1} | {p256} |")
    return lines


def _test_cells(t: dict) -> str:
    """A test's table cells from Δ on: Δ, interval, p, significant, each seed's Δ (seeds ascending)."""
    per_seed = ", ".join(f"{float(v):+.3f}" for _, v in sorted(t.get("delta_per_seed", {}).items(),
                                                                key=lambda kv: int(kv[0])))
    return (f"{t['delta']:+.4f} | [{t['interval'][0]:+.4f}, {t['interval'][1]:+.4f}] | "
            f"{p_text(t).removeprefix('p = ')} | {'yes' if t['significant'] else 'no'} | {per_seed} |")


def test_lines(results: dict) -> list[str]:
    tests = results["tests"]
    if not tests:
        return ["(no F-GRPO/GRPO pair finished)"]
    t0 = tests[0]
    lines = [f"Paired m-out-of-n subsampling over (seed, maze) units: n = {t0['n']} samples per maze, "
             f"m = {t0['m']}, {t0['iterations']} iterations, two-sided α = {t0['alpha']}; Δ = F-GRPO − GRPO "
             "(full-sample), interval = 95 % of the subsampled Δ; per seed: each seed's own full-sample Δ.", "",
             "| N | γ | units | k | Δ pass@k | interval | p | significant | Δ per seed |",
             "|---|---|---|---|---|---|---|---|---|"]
    for t in tests:
        lines.append(f"| {t['group_size']} | {t['gamma']:g} | {t['units']} | {t['k']} | {_test_cells(t)}")
    return lines


def change_lines(results: dict) -> list[str]:
    """Each method's pass@k after RL against its warm-up (the same test, run − warm-up)."""
    changes = results.get("changes") or []
    if not changes:
        return ["(not in this results.json)"]
    lines = ["| method | N | k | Δ pass@k (run − warm-up) | interval | p | significant | Δ per seed |",
             "|---|---|---|---|---|---|---|---|"]
    for t in changes:
        lines.append(f"| {_name(t['method'], t['gamma'])} | {t['group_size']} | {t['k']} | {_test_cells(t)}")
    return lines


def _direction(t: dict, up: str, down: str, flat: str) -> str:
    if not t["significant"]:
        return flat
    return up if t["delta"] > 0 else down


def _describe(t: dict) -> str:
    seeds = t.get("delta_per_seed", {})
    same = sum(np.sign(float(v)) == np.sign(t["delta"]) for v in seeds.values())
    spread = f"; {same} of {len(seeds)} seeds share its sign" if len(seeds) > 1 else "; one seed"
    return (f"Δpass@{t['k']} = {100 * t['delta']:+.1f} points (95 % interval "
            f"[{100 * t['interval'][0]:+.1f}, {100 * t['interval'][1]:+.1f}], {p_text(t)}, "
            f"{t['units']} (seed, maze) units{spread})")


def _early_lines(results: dict, n: int, gamma: float) -> list[str]:
    """pass@k at the first checkpoint against the warm-up on the same mazes (seed means): how early
    the change comes."""
    p = results["preset"]
    k = max(int(k) for k in results["runs"][0]["curve"][0]["pass_at_k"]) if results["runs"][0]["curve"] else None
    if k is None:
        return []
    out = []
    for method, g in (("grpo", 0.0), ("f-grpo", gamma)):
        runs = plots.runs_of(results, {"method": method, "group_size": n, "gamma": g})
        if not runs:
            continue
        warm = np.mean([plots.warm_up_on_curve_mazes(results, r["seed"], k) for r in runs])
        first = np.mean([r["curve"][0]["pass_at_k"][str(k)] for r in runs])
        last = np.mean([r["curve"][-1]["pass_at_k"][str(k)] for r in runs])
        out.append(f"{_name(method, g)} {_pct(warm)} → {_pct(first)} → {_pct(last)}")
    step0 = results["runs"][0]["curve"][0]["step"]
    return [f"- How early (pass@{k} in %, warm-up → step {step0} → step {p['rl_steps']}, the first "
            f"{p['curve_prompts']} mazes × {p['curve_n']} samples, seed means): " + "; ".join(out) + "."]


def _reward_tail(results: dict, method: str, n: int, gamma: float, share: float = 0.1) -> tuple[float, float]:
    """Seed-mean training reward over the run's last `share` of steps and the `share` before it."""
    curves = [np.asarray(r["reward_curve"])
              for r in plots.runs_of(results, {"method": method, "group_size": n, "gamma": gamma})
              if r.get("reward_curve")]
    if not curves:
        return float("nan"), float("nan")
    w = max(1, int(len(curves[0]) * share))
    return float(np.mean([c[-w:].mean() for c in curves])), float(np.mean([c[-2 * w:-w].mean() for c in curves]))


def _pass1_line(results: dict, n: int, gamma: float, one: dict) -> str:
    """pass@1 beside App. K, where F-GRPO's pass@1 is also the higher one."""
    paper_ = f"{PAPER['f-grpo']['1'][0]:.1f}–{PAPER['f-grpo']['1'][1]:.1f} % against GRPO's " \
             f"{PAPER['grpo']['1'][0]:.1f}–{PAPER['grpo']['1'][1]:.1f} %"
    g_end, g_before = _reward_tail(results, "grpo", n, 0.0)
    f_end, f_before = _reward_tail(results, "f-grpo", n, gamma)
    rewards = (f" Training rewards over the last tenth of the steps: GRPO {g_end:.3f} (the tenth before: "
               f"{g_before:.3f}), F-GRPO {f_end:.3f} ({f_before:.3f}).")
    if one["significant"] and one["delta"] < 0:
        return (f"pass@1 does not reproduce the paper's: App. K reports F-GRPO's pass@1 higher ({paper_}); here "
                f"F-GRPO − GRPO at k = 1 is {100 * one['delta']:+.1f} points ({p_text(one)}): no pass@1 gain in this "
                "regime, a small loss on the held-out mazes. Whether App. K's gain needs its larger mazes, model "
                "or 10× longer runs (the regime table below) this study cannot tell." + rewards)
    if one["significant"]:
        return f"pass@1 agrees in direction with App. K ({paper_}): {100 * one['delta']:+.1f} points ({p_text(one)})." \
            + rewards
    return (f"pass@1: no detectable difference ({100 * one['delta']:+.1f} points, {p_text(one)}); App. K reports "
            f"F-GRPO higher ({paper_})." + rewards)


def answer_lines(results: dict) -> list[str]:
    """The paper's question answered for this regime from the tests: the headline comparison is the
    N with the most seeds, the paper's γ = 0.5 (else the smallest γ) and the largest tested k; every
    other N, γ and k is reported beside it as descriptive (the tables below)."""
    tests, changes = results["tests"], results.get("changes") or []
    if not tests:
        return ["No F-GRPO/GRPO pair has finished: no answer yet."]
    seeds_at = {s["group_size"]: len(s["seeds"]) for s in results["summary"]}
    n = max(seeds_at, key=lambda x: (seeds_at[x], -x))
    gammas = sorted({t["gamma"] for t in tests if t["group_size"] == n})
    gamma = 0.5 if 0.5 in gammas else gammas[0]
    k = max(t["k"] for t in tests)
    head = next(t for t in tests if (t["group_size"], t["gamma"], t["k"]) == (n, gamma, k))
    one = next(t for t in tests if (t["group_size"], t["gamma"], t["k"]) == (n, gamma, 1))
    drop = next((t for t in changes if (t["method"], t["group_size"], t["k"]) == ("grpo", n, k)), None)
    focal_drop = next((t for t in changes if (t["method"], t["group_size"], t["gamma"], t["k"]) == ("f-grpo", n, gamma, k)), None)
    lines = [f"**Question** (§5.2): does F-GRPO keep pass@k where GRPO loses it? **Headline test**, chosen by "
             f"a rule written before the study finished, not by its numbers: N = {n} (the N with the most seeds, {seeds_at[n]}), γ = {gamma:g}, "
             f"k = {k} (the largest k the m = {head['m']} subsample can test), two-sided, α = {head['alpha']}.", ""]
    grpo_lost = drop is not None and drop["significant"] and drop["delta"] < 0
    focal_better = head["significant"] and head["delta"] > 0
    if drop is not None:
        lines.append("- GRPO against its warm-up: " + _describe(drop) + " — GRPO "
                     + _direction(drop, f"raised pass@{k}", f"lost pass@{k}", f"did not change pass@{k} detectably") + ".")
    if focal_drop is not None:
        lines.append(f"- F-GRPO γ = {gamma:g} against its warm-up: " + _describe(focal_drop) + " — F-GRPO "
                     + _direction(focal_drop, f"raised pass@{k}", f"lost pass@{k}", f"did not change pass@{k} detectably") + ".")
    lines.append(f"- F-GRPO γ = {gamma:g} − GRPO: " + _describe(head) + ".")
    lines.append("- At k = 1: F-GRPO − GRPO " + _describe(one) + ".")
    lines += _early_lines(results, n, gamma)
    lines.append("")
    if grpo_lost and focal_better:
        verdict = (f"**Yes, in this regime**: GRPO loses pass@{k} against the warm-up and F-GRPO (γ = {gamma:g}) "
                   f"keeps more of it ({p_text(head)}).")
    elif grpo_lost:
        verdict = (f"**Not shown in this regime**: GRPO loses pass@{k} against the warm-up, but F-GRPO (γ = {gamma:g}) "
                   f"is not detectably better at k = {k} ({p_text(head)}); the paper's claim does not "
                   "reproduce here.")
    elif focal_better:
        verdict = (f"**Partly**: GRPO does not detectably lose pass@{k} against the warm-up here, yet F-GRPO "
                   f"(γ = {gamma:g}) ends higher ({p_text(head)}).")
    else:
        verdict = (f"**The paper's premise does not arise in this regime**: GRPO does not detectably lose pass@{k} "
                   f"against the warm-up, and F-GRPO (γ = {gamma:g}) is not detectably different from GRPO at k = {k} "
                   f"({p_text(head)}).")
    lines.append(verdict)
    lines += ["", _pass1_line(results, n, gamma, one)]
    lines += ["", "Confidence: the p-values come from the paper's paired m-out-of-n subsampling test, whose units "
              "are (seed, maze) pairs: it measures the sampling noise of the evaluation, not the spread between "
              "RL seeds. The per-seed Δ (how many seeds share the sign) is the check on the latter; with one seed "
              "(the other N) a difference is one training run's and says nothing of the seed spread. The many "
              "other tests below are descriptive (no correction for multiple comparisons)."]
    return lines


def regime_lines(results: dict) -> list[str]:
    """How this preset differs from App. K's, and what each difference may change."""
    p, ref = results["preset"], paper()
    if p["name"] == "paper":
        return ["This is App. K's set-up as written (batch units read as in docs/llm-maze-study.md)."]
    sizes = sorted({n for n, _ in p["plan"]})
    greedy = np.mean([b["greedy_solve_rate"] for b in results["bases"].values()])
    per_step = (f"{p['rollouts_per_step']} rollouts per step at every N (compute-matched: "
                + ", ".join(f"{p['rollouts_per_step'] // n} prompts at N = {n}" for n in sizes) + ")"
                if p["rollouts_per_step"] else f"{p['prompts_per_step']} prompts per step")
    return [
        "| | this study | App. K |", "|---|---|---|",
        f"| mazes | {p['maze_size']}×{p['maze_size']} | {ref.maze_size}×{ref.maze_size} |",
        f"| model | {p['hidden']} wide × {p['layers']} layers | {ref.hidden} wide × {ref.layers} layers (≈ 3.15M) |",
        f"| warm-up | {p['sft_steps']} steps, lr {p['sft_lr']:g} {p['sft_schedule']} | {ref.sft_steps} steps, lr "
        f"{ref.sft_lr:g} {ref.sft_schedule} |",
        f"| RL steps | {p['rl_steps']:,} | {ref.rl_steps:,} |",
        f"| batch | {per_step} | {ref.prompts_per_step} prompts × N, {ref.prompts_per_step // ref.mini_batch_prompts} updates per step |",
        f"| N | {', '.join(map(str, sizes))} | {', '.join(str(n) for n, _ in ref.plan)} |",
        f"| evaluation | {p['eval_prompts']} mazes × {p['eval_n']} samples, test m = {p['test_m']} | "
        f"{ref.eval_prompts} × {ref.eval_n}, m = {ref.test_m} |", "",
        f"What these may change: (1) {p['rl_steps'] / ref.rl_steps:.2g} of the paper's RL steps leaves less time "
        "for the rare solution mass to be drained — the simulator's horizons study (figures/horizons) finds the "
        "loss grows with t, so a loss measured here is likely smaller than the same run's at 20,000 steps; "
        f"(2) small mazes have few wrong routes and a warm-up that already solves {_pct(greedy)} % of them "
        "greedily, so fewer mazes sit in the rare-solution regime the theory is about (the π(solution) figure "
        "shows where each maze starts); (3) compute-matched batches "
        "give large N few prompts per step, so N changes the prompts seen as well as the group size; "
        "(4) pass@k is tested up to k = m, not 256.",
    ]


def write_report(results: dict, out_dir: str | Path, *, study_dir: str | Path | None = None,
                 arms: dict | None = None, trl: dict | None = None, screen: dict | None = None) -> Path:
    """report.md, the figures and results.json in `out_dir`; returns the path of report.md.
    `study_dir`: the study directory, named in the report's commands; `arms`: the study's arms.json
    (`arms.load_arms`), reported with its own figures, and `trl` its trl.json
    (`trl.load_trl`), the cross-trainer table, and `screen` its screen.json (`screen.load_screen`), the
    simulator's numbers for the rule zoo: all copied beside results.json. The files
    are made in a temporary folder and moved into `out_dir` once all are made: a failure leaves
    nothing behind. A file an earlier report wrote that this one does not (arms.json, trl.json or
    the arms figures of a study that has none now) is removed, so the folder holds only this report."""
    out = Path(out_dir)
    anchor = next(p for p in (out, *out.parents) if p.exists())  # on the same file system as `out`
    stage = Path(tempfile.mkdtemp(prefix=".maze-report-", dir=anchor))
    try:
        _write_files(results, stage, out_dir, study_dir, arms, trl, screen)
        out.mkdir(parents=True, exist_ok=True)
        made = sorted(f.name for f in stage.iterdir())
        for name in made:
            os.replace(stage / name, out / name)
        for name in sorted(report_files(out, study_dir) - set(made)):
            (out / name).unlink(missing_ok=True)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return out / "report.md"


def report_files(out_dir: str | Path, study_dir: str | Path | None) -> set[str]:
    """Every file name a report into `out_dir` may write: what a later report that does not write
    one of them removes. A report into the study directory itself never writes (so never removes)
    the study's own results.json, arms.json and trl.json."""
    from catsim.experiments.maze.arms_report import FIGURES as ARM_FIGURES
    from catsim.experiments.maze.arms_report import RULE_FIGURES

    names = {"report.md", *FIGURES, *ARM_FIGURES, *RULE_FIGURES}
    if study_dir is None or Path(study_dir).resolve() != Path(out_dir).resolve():
        names |= {"results.json", "arms.json", "trl.json", "screen.json"}
    return names


def _write_files(results: dict, stage: Path, out_dir: str | Path, study_dir: str | Path | None,
                 arms: dict | None, trl: dict | None, screen: dict | None = None) -> None:
    """write_report's files, made in `stage`."""
    out = Path(out_dir)
    plots.plot_passk(results, stage / FIGURES[0])
    ks = [k for k in (1, 8, 64) if all(str(k) in c["pass_at_k"] for r in results["runs"] for c in r["curve"])]
    plots.plot_passk_vs_step(results, stage / FIGURES[1], ks=ks or (1,))
    plots.plot_solution_mass(results, stage / FIGURES[2])
    plots.plot_pvalues(results, stage / FIGURES[3])
    if study_dir is None or Path(study_dir).resolve() != out.resolve():
        write_text(stage / "results.json", json.dumps(results, indent=1) + "\n")
        for name, extra in (("arms.json", arms), ("trl.json", trl), ("screen.json", screen if arms else None)):
            if extra is not None:
                write_text(stage / name, json.dumps(extra, indent=1) + "\n")
    arm_lines = []
    if trl is not None:
        from catsim.experiments.maze.trl import report_lines

        arm_lines = [*report_lines(trl), ""]
    if arms is not None:
        from catsim.experiments.maze.arms_report import arms_section

        arm_lines = arms_section(arms, results, stage, screen)[0] + arm_lines
    p = results["preset"]
    prov = results.get("provenance", {})
    study = study_dir if study_dir is not None else "STUDY_DIR"
    rl = [r["rl_seconds"] / max(1, len(r["reward_curve"])) for r in results["runs"] if r.get("reward_curve")]
    text = [f"# Maze study (preset `{p['name']}`)", "",
            f"{p['maze_size']}×{p['maze_size']} mazes, model {p['hidden']} wide × {p['layers']} layers, warm-up "
            f"{p['sft_steps']} steps × batch {p['sft_batch']} (lr {p['sft_lr']:g}, {p['sft_schedule']}); RL "
            f"{p['rl_steps']} steps, lr {p['learning_rate']:g}, "
            + (f"{p['rollouts_per_step']} rollouts per step (compute-matched)" if p["rollouts_per_step"]
               else f"{p['prompts_per_step']} prompts per step") +
            f"; evaluation on {p['eval_prompts']} held-out mazes × {p['eval_n']} samples (τ = 1, unbiased pass@k).",
            "", "## Answer", "", *answer_lines(results), "",
            "## pass@k (%) beside the paper's App. K (ranges across N = 4…128)", "",
            "Seed mean ± sample std (ddof 1) over the seeds of each row (a one-seed row: its value alone).", "", *table_lines(results), "",
            "## How this regime differs from the paper's", "", *regime_lines(results), "",
            "## F-GRPO − GRPO: paired test", "", *test_lines(results), "",
            "## Each method against its warm-up: paired test", "", *change_lines(results), "", *arm_lines,
            "## Figures", "", *[f"![{f}]({f})" for f in FIGURES], "",
            "## Commands", "", "```bash",
            f"catsim llm maze-study --out {study} --preset {p['name']} --max-runs R   # pieces; each rerun resumes",
            *([f"catsim llm maze-study --out {study} --preset {p['name']} --arms all --max-runs R   # the arms"]
              if arms is not None else []),
            *([f"catsim llm maze-study --out {study} --preset {p['name']} --trainer trl --max-runs R   # TRL"]
              if trl is not None else []),
            *([f"catsim llm maze-study --out {study} --screen {screen['source']}   # the simulator's numbers"]
              if screen is not None and arms is not None else []),
            f"catsim llm maze-study --out {study} --report {out_dir}", "```", "",
            (f"RL wall time per step, mean over runs: {np.mean(rl):.3f} s (range {min(rl):.3f}–{max(rl):.3f} s)."
             if rl else ""),
            "", "## Where the runs were computed", "", *set_up_lines(results, arms, trl), "",
            f"results.json written at commit {prov.get('git_commit', '?')} on {prov.get('cpu_model', '?')}, "
            f"{prov.get('cpu_count', '?')} CPUs, jax {prov.get('jax_version', '?')}."]
    write_text(stage / "report.md", "\n".join(text) + "\n")
