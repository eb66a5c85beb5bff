"""The numbers `catsim reproduce` publishes, read from its outputs, with their tolerances.

Each source has two readers: `*_published` turns a published output into {quantity: Published}
(value and tolerance, `catsim.experiments.agreement`), `*_values` turns a regenerated output of
the same kind into {quantity: value}. Quantity names are shared so that the two can be paired.

- Fig. 2: the table `catsim.sim.sweep.format_table` writes (mean ± std over seeds (min–max));
- LLM pipeline / comparison: a results.json (pass@k with bootstrap intervals, answer mass);
- theory: Lemma 3.1 peaks and the mass-step worked examples (closed forms) and the share of
  one-step updates with Qpos up and Qu,pos down at the paper initialisation (Monte Carlo).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import numpy as np

from catsim.errors import CatsimError
from catsim.experiments.agreement import Published, exact, seed_mean, standard_error

FIG2_ROUNDING = 5e-6  # the Fig. 2 table prints 5 decimals
PEAK_FIELDS = ("n_star", "n_argmax", "max_value", "half_max_lo", "half_max_hi", "n_active", "n_cover")
PEAK_TAUS = (0.001, 0.01, 0.05)  # the published peak table (README, `catsim lemma --peaks`)
PEAK_MUS = (0.2, 0.5, 0.8)
SHARE_GROUPS = 300  # groups per N of the mass-step figure (`catsim reproduce` mass step)

_CELL = re.compile(r"^\s*([-+0-9.eE]+)(?:\s*±\s*([-+0-9.eE]+))?")  # a one-seed table: the mean alone
_SEEDS = re.compile(r"over (\d+) seed")


# ---- Fig. 2 table -----------------------------------------------------------------------------


def parse_fig2_table(text: str) -> dict[str, tuple[float, float, int]]:
    """{'Fig. 2 N=256 Mret γ=0': (mean, sd, seeds)} from the text of a Fig. 2 table."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    seeds = _SEEDS.search(lines[0]) if lines else None
    header = next((ln for ln in lines if ln.lstrip().startswith("N ") and "|" in ln), None)
    if seeds is None or header is None:
        raise CatsimError("not a Fig. 2 table (no 'over K seed(s)' title or 'N reg | ...' header)")
    columns = [c.strip() for c in header.split("|")[1:]]
    out = {}
    for line in lines:
        parts = line.split("|")
        first = parts[0].split()
        if len(parts) != len(columns) + 1 or not first or not first[0].isdigit():
            continue
        for column, cell in zip(columns, parts[1:]):
            match = _CELL.match(cell)
            if match is None:
                raise CatsimError(f"Fig. 2 table: cannot read {cell.strip()!r} in row N={first[0]}")
            out[f"Fig. 2 N={first[0]} {column}"] = (float(match[1]), float(match[2] or 0.0), int(seeds[1]))
    if not out:
        raise CatsimError("Fig. 2 table has no rows")
    return out


def fig2_values(text: str) -> dict[str, float]:
    return {name: mean for name, (mean, _, _) in parse_fig2_table(text).items()}


def fig2_published(text: str, spread_from: str | None = None) -> dict[str, Published]:
    """Published Fig. 2 means; a one-seed table takes its seed spread from `spread_from` (the
    text of a multi-seed table of the same scenario) where that has the cell."""
    spread = parse_fig2_table(spread_from) if spread_from is not None else {}
    out = {}
    for name, (mean, sd, n) in parse_fig2_table(text).items():
        if n < 2 and name in spread and spread[name][2] >= 2:
            _, sd_full, n_full = spread[name]
            out[name] = seed_mean(mean, sd_full, n, rounding=FIG2_ROUNDING, sd_of=n_full)
        else:
            out[name] = seed_mean(mean, sd, n, rounding=FIG2_ROUNDING)
    return out


# ---- LLM results.json -------------------------------------------------------------------------


def _z95() -> float:
    from scipy import stats

    return float(stats.norm.ppf(0.5 + 0.95 / 2))


def _llm_entries(results: Mapping, prefix: str):
    """(name, per-seed values, per-seed prompt-level standard errors) for every published number."""
    tasks = results.get("tasks") if isinstance(results, Mapping) else None
    if not isinstance(tasks, Mapping):
        raise CatsimError(f"{prefix}: results have no 'tasks' mapping")
    z = _z95()
    for task_name, task in tasks.items():
        base = task["base"]
        for k, value in base["pass_at_k"].items():
            lo, hi = base["interval"][k]
            yield f"{prefix} {task_name}: warm-up pass@{k}", [value], [(hi - lo) / (2 * z)]
        groups: dict[str, list[Mapping]] = {}
        for run in task["runs"].values():
            groups.setdefault(run["label"], []).append(run)
        for label, runs in groups.items():
            for k in runs[0]["eval"]["pass_at_k"]:
                values = [r["eval"]["pass_at_k"][k] for r in runs]
                ses = [(r["eval"]["interval"][k][1] - r["eval"]["interval"][k][0]) / (2 * z)
                       for r in runs]
                yield f"{prefix} {task_name}: {label} pass@{k}", values, ses
            masses = [r["answer_mass"] for r in runs if r.get("answer_mass")]
            if len(masses) == len(runs):
                ses = [float(np.std(m["mret_per_prompt"], ddof=1) / math.sqrt(len(m["mret_per_prompt"])))
                       for m in masses]
                yield f"{prefix} {task_name}: {label} Mret", [m["mret"] for m in masses], ses


def llm_values(results: Mapping, prefix: str = "LLM") -> dict[str, float]:
    """Regenerated LLM numbers: per task, the warm-up pass@k and each run's mean over seeds."""
    try:
        return {name: float(np.mean(values)) for name, values, _ in _llm_entries(results, prefix)}
    except (KeyError, TypeError, ValueError) as err:
        raise CatsimError(f"{prefix}: malformed results ({err!r})") from None


def llm_published(results: Mapping, prefix: str = "LLM") -> dict[str, Published]:
    """Published LLM numbers; the standard error of a mean over n seeds is the larger of the seed
    spread sd/√n and the root-mean-square prompt-bootstrap standard error over √n."""
    out = {}
    try:
        for name, values, ses in _llm_entries(results, prefix):
            n = len(values)
            boot = math.sqrt(float(np.mean(np.square(ses))) / n)
            seed = float(np.std(values, ddof=1)) / math.sqrt(n) if n > 1 else 0.0
            basis = f"{n} seeds, seed sd" if seed > boot else (
                "bootstrap over prompts" if "pass@" in name else "sd over prompts")
            out[name] = standard_error(float(np.mean(values)), max(seed, boot), basis)
    except (KeyError, TypeError, ValueError) as err:
        raise CatsimError(f"{prefix}: malformed results ({err!r})") from None
    return out


# ---- theory: Lemma 3.1 peaks, mass-step examples and shares ------------------------------------


def lemma_values() -> dict[str, float]:
    """Every field of the published peak table (`catsim lemma --peaks`), float64."""
    from catsim.theory.tail_miss import tail_miss_peak

    out = {}
    for tau in PEAK_TAUS:
        for mu in PEAK_MUS:
            peak = tail_miss_peak(tau, mu)
            for field in PEAK_FIELDS:
                out[f"Lemma 3.1 peak τ={tau:g} μ={mu:g}: {field}"] = float(getattr(peak, field))
    return out


def mass_values(groups: int = SHARE_GROUPS) -> dict[str, float]:
    """The worked examples (first-order changes per η and exact changes at η = 0.01, both update
    rules) and the shares of the mass-step figure (`groups` groups per N, seed 0)."""
    from catsim.checks.mass_redistribution import worked_example
    from catsim.experiments.theory import sample_joint_changes

    out = {}
    for rule in ("logprob", "paper"):
        first = worked_example(rule, 1e-6)
        step = worked_example(rule, 1e-2)
        for key, label in (("dqpos", "dQpos"), ("dqupos", "dQu,pos")):
            out[f"mass step ({rule}): first-order {label}/η"] = getattr(first, f"{key}_first_order") / 1e-6
            out[f"mass step ({rule}): exact {label}, η=0.01"] = float(getattr(step, f"{key}_exact"))
    for sample in sample_joint_changes(groups=groups, seed=0):
        out[f"mass step: share Qpos↑ Qu,pos↓, N={sample.n}"] = sample.share_rise_fall
    return out


def theory_published(values: Mapping[str, float], groups: int = SHARE_GROUPS) -> dict[str, Published]:
    """Closed forms exactly; a share p of `groups` Monte Carlo steps with the binomial standard
    error of (x + 1) / (groups + 2), which stays positive at p = 0 or 1."""
    out = {}
    for name, value in values.items():
        if "share" in name:
            p = (value * groups + 1) / (groups + 2)
            out[name] = standard_error(value, math.sqrt(p * (1 - p) / groups), f"binomial, {groups} groups")
        else:
            out[name] = exact(value)
    return out
