"""The report of an LLM pipeline run: report.md and its figures, from the pipeline's results
(the results.json dict) alone.

    results = load_results("runs/pipeline/results.json")
    write_report(results, "runs/pipeline")       # report.md, comparison.png, passk_curves.png, ...

Every run entry carries its per-step training curves (`curves`); results.json files written
before they were recorded get them from the run directories when those still exist
(`attach_curves`), and otherwise their training-dynamics panels say the curves are missing.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from catsim.errors import CatsimError
from catsim.files import write_text
from catsim.llm.rl import read_log
from catsim.plots.llm_compare import plot_comparison
from catsim.plots.llm_rl import plot_passk_curves, plot_theory_overlay, plot_training_dynamics

CURVE_KEYS = ("reward", "entropy", "active_fraction", "mean_g", "success_rate")  # kept per step


def load_results(path) -> dict:
    """A pipeline's results.json, with curves attached from the run directories where missing."""
    try:
        results = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise CatsimError(f"cannot read pipeline results from {path}: {err}") from None
    if not isinstance(results, dict) or "tasks" not in results or "config" not in results:
        raise CatsimError(f"{path} is not a pipeline results.json (no 'config' and 'tasks')")
    return attach_curves(results)


def attach_curves(results: dict) -> dict:
    """`results` with each run's `curves` filled in from its run directory's step log when the
    entry has none and the directory still exists (older results.json files); a new dict."""
    out = json.loads(json.dumps(results, default=str))
    for task in out["tasks"].values():
        for entry in task["runs"].values():
            if "curves" in entry or not entry.get("run_dir"):
                continue
            try:
                entry["curves"] = training_curves(read_log(entry["run_dir"]))
            except CatsimError:  # the run directory is gone: the figures say so
                pass
    return out


def training_curves(log: list) -> dict:
    """{key: [value of each RL step]} for CURVE_KEYS (None where a step has no value), from a
    run's step log: what the training-dynamics figures draw."""
    return {key: [rec.get(key) for rec in log] for key in CURVE_KEYS}


def write_report(results: dict, out) -> Path:
    """The figures and report.md of a pipeline's results; returns the path of report.md."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plot_comparison(results, out / "comparison.png")
    plot_passk_curves(results, out / "passk_curves.png")
    plot_training_dynamics(results, out / "training_dynamics.png")
    plot_theory_overlay(results, out / "theory_overlay.png")
    return write_text(out / "report.md", render_report(results))


def _summ(values) -> dict:
    v = np.asarray([x for x in values if x is not None], np.float64)
    if v.size == 0:
        return {"mean": None, "min": None, "max": None, "sd": None}
    return {"mean": float(v.mean()), "min": float(v.min()), "max": float(v.max()),
            "sd": float(v.std(ddof=1)) if v.size > 1 else 0.0}


def _fmt(x, digits=3):
    return "–" if x is None else f"{x:.{digits}f}"


def _at(table: dict, k: int):
    """table[k] whether the keys are ints (in memory) or strings (read back from results.json)."""
    return table[k] if k in table else table[str(k)]


def _base_cell(b: dict, k: int) -> str:
    lo, hi = _at(b["interval"], k)
    return f"{_at(b['pass_at_k'], k):.3f} [{lo:.3f}, {hi:.3f}]"


def _seed_cell(values, digits: int = 3) -> str:
    """mean over seeds, with [min – max] when there are several."""
    s = _summ(values)
    if s["mean"] is None:
        return "–"
    s = {k: (0.0 if v is not None and abs(v) < 1e-12 else v) for k, v in s.items()}  # no "-0.000"
    if len([v for v in values if v is not None]) == 1:
        return _fmt(s["mean"], digits)
    return f"{s['mean']:.{digits}f} [{s['min']:.{digits}f} – {s['max']:.{digits}f}]"


def render_report(results: dict) -> str:
    """The markdown report: one table per task (mean over seeds, [min, max] across seeds)."""
    pc = results["config"]
    lines = ["# catsim LLM pipeline report", "",
             f"Runs: {', '.join(pc['runs'])}; γ = {pc['gamma']}; seeds {pc['seeds']}; {pc['rl_steps']} RL steps of "
             f"{pc['rollouts_per_step']} rollouts; evaluation: {pc['eval_prompts']} held-out prompts × "
             f"{pc['eval_n']} samples (unbiased pass@k)."
             + (f" Total time {results['seconds']:.0f} s." if "seconds" in results else ""), "",
             "Cells: mean over seeds [min – max across seeds]; base row: one evaluation with a 95% bootstrap "
             "interval over prompts. ΔNLL_rare: NLL increase of the base model's rare correct samples "
             "(App. M.2). Kept: share of enumerated correct answers whose probability did not fall; Mret: "
             "mass-weighted retention. Forgotten: held-out prompts solved by the base (or mid-run) model and "
             "unsolved at the end.", ""]
    for tname, tr in results["tasks"].items():
        ks = tr["base"]["ks"]
        kmax = ks[-1]
        lines += [f"## {tname}", "", f"Base model: `{tr['base_model']}`"]
        if tr.get("rare_set"):
            rs = tr["rare_set"]
            lines.append(f"Rare set: {rs['size']} of {rs['from_correct']} correct base samples "
                         f"(base NLL ≥ {rs['base_nll_threshold']:.3f}).")
        lines += ["", f"| run | pass@1 | pass@{ks[len(ks) // 2]} | pass@{kmax} | ΔNLL_rare | kept | Mret | forgotten |",
                  "|---|---|---|---|---|---|---|---|"]
        b = tr["base"]
        kmid = ks[len(ks) // 2]
        lines.append(f"| base | {_base_cell(b, 1)} | {_base_cell(b, kmid)} | {_base_cell(b, kmax)} | 0 | 1 | 1 | – |")
        groups: dict = {}
        for entry in tr["runs"].values():
            groups.setdefault(entry["label"], []).append(entry)
        for label, entries in groups.items():
            row = [label,
                   _seed_cell([_at(e["eval"]["pass_at_k"], 1) for e in entries]),
                   _seed_cell([_at(e["eval"]["pass_at_k"], kmid) for e in entries]),
                   _seed_cell([_at(e["eval"]["pass_at_k"], kmax) for e in entries]),
                   _seed_cell([e["delta_nll_rare"] for e in entries]),
                   _seed_cell([e.get("answer_mass", {}).get("kept_fraction") for e in entries]),
                   _seed_cell([e.get("answer_mass", {}).get("mret") for e in entries]),
                   _seed_cell([e["ledger"]["forgotten"] for e in entries], 1)]
            lines.append("| " + " | ".join(row) + " |")
        lines += _comparison_sections(tr, pc, groups)
        if tr.get("tests"):
            lines += ["", "Paired m-out-of-n tests (B − A, mean pass@k):", "",
                      "| A | B | seed | k | m of n | Δ | 95% interval | p |", "|---|---|---|---|---|---|---|---|"]
            for t in tr["tests"]:
                lines.append(f"| {t['a']} | {t['b']} | {t['seed']} | {t['k']} | {t['m']} of {t['n']} | "
                             f"{t['delta']:+.3f} | [{t['interval'][0]:+.3f}, {t['interval'][1]:+.3f}] | "
                             f"{t['p_value']:.3f} |")
        lines.append("")
    lines += ["Figures: `comparison.png`, `passk_curves.png`, `training_dynamics.png`, `theory_overlay.png`.", ""]
    return "\n".join(lines)


def _per_seed(values, cap: int) -> str:
    """Steps per seed, ">cap" where the target was not reached."""
    return ", ".join(f">{cap}" if v is None else str(v) for v in values)


def _reference(label: str, groups: dict) -> str | None:
    """The plain GRPO label at the same N (the baseline of the Δ rows), if it was run."""
    n = label.rsplit(" N=", 1)[-1]
    ref = f"GRPO N={n}"
    return ref if ref in groups and ref != label else None


def _comparison_sections(tr: dict, pc: dict, groups: dict) -> list:
    """The method comparison: steps to a target, accuracy by difficulty level (with Δ vs GRPO at the
    same N and seed), and the article's `evaluate.py --k 10` lines. Skipped for results without them."""
    lines: list = []
    entries0 = next(iter(groups.values()), [])
    if entries0 and "steps_to_target" in entries0[0]:
        target, window, steps = pc.get("target_reward"), pc.get("target_window"), pc["rl_steps"]
        lines += ["", f"Convergence: first RL step whose trailing {window}-step mean training reward reaches "
                      f"{target} (the reward is measured at the rollout temperature, which asym-GRPO anneals "
                      "to 0.2)" + (f"; the same on the held-out accuracy at τ = 1 (every {pc['heldout_every']} steps)"
                                   if pc.get("heldout_every") else "; held-out accuracy not measured (heldout_every = 0)")
                  + "; final: mean training reward of the last window; per seed.", "",
                  "| run | steps to reward target | steps to held-out target | final reward | final held-out acc. "
                  "| safeguard warnings |", "|---|---|---|---|---|---|"]
        for label, entries in groups.items():
            finals = [e.get("final_reward") for e in entries]
            held = [e["heldout_curve"][-1][1] if e.get("heldout_curve") else None for e in entries]
            warn = sum(len(e.get("warnings") or []) for e in entries)
            lines.append(f"| {label} | {_per_seed([e['steps_to_target'] for e in entries], steps)} | "
                         f"{_per_seed([e.get('heldout_steps_to_target') for e in entries], steps)} | "
                         f"{_seed_cell(finals)} | {_seed_cell(held)} | {warn} |")
    if "base_levels" in tr:
        levels = list(tr["base_levels"])
        k_hi = tr["base"]["ks"][-1]

        def cell(entries, level, k):
            return _seed_cell([_at(_at(e["levels"], level)["pass_at_k"], k) for e in entries])

        for k in sorted({1, k_hi}):
            head = " | ".join(f"level {lv} ({_at(tr['base_levels'], lv)['prompts']})" for lv in levels)
            lines += ["", f"pass@{k} by difficulty level (held-out prompts per level in brackets):", "",
                      f"| run | {head} |", "|---|" + "---|" * len(levels)]
            lines.append("| base | " + " | ".join(
                _fmt(_at(_at(tr["base_levels"], lv)["pass_at_k"], k)) for lv in levels) + " |")
            for label, entries in groups.items():
                lines.append(f"| {label} | " + " | ".join(cell(entries, lv, k) for lv in levels) + " |")
            for label, entries in groups.items():
                ref = _reference(label, groups)
                if ref is None:
                    continue
                by_seed = {e["seed"]: e for e in groups[ref]}
                pairs = [(e, by_seed[e["seed"]]) for e in entries if e["seed"] in by_seed]
                row = [_seed_cell([_at(_at(a["levels"], lv)["pass_at_k"], k) - _at(_at(b["levels"], lv)["pass_at_k"], k)
                                   for a, b in pairs]) for lv in levels]
                lines.append(f"| Δ {label} − {ref} | " + " | ".join(row) + " |")
    if 10 in tr["base"]["ks"] or "10" in tr["base"]["ks"]:
        lines += ["", "The article's `evaluate.py --k 10` output (unbiased pass@10 on the held-out prompts, "
                      "mean over seeds; per seed in brackets):", "", "```",
                  f"# base\nPass@10: {100 * _at(tr['base']['pass_at_k'], 10):.1f}%"]
        for label, entries in groups.items():
            vals = [100 * _at(e["eval"]["pass_at_k"], 10) for e in entries]
            lines.append(f"# {label}\nPass@10: {np.mean(vals):.1f}%  ({', '.join(f'{v:.1f}%' for v in vals)})")
        lines.append("```")
    return lines
