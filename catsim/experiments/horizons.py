"""Figure 2 across training horizons: Mret(N, t) for GRPO (γ = 0) and F-GRPO (γ = 1) over the
Fig. 2 grid up to T = 10,000 steps (what `catsim sweep --study horizons` runs).

    from catsim.experiments.horizons import horizons_config, run_horizons
    out = run_horizons(horizons_config(), "runs/horizons")   # resumable, one cell per N

It is the resumable Fig. 2 sweep (`catsim.sim.sweep.sweep`) at a longer horizon, read along the
recorded trajectory (`catsim.sim.horizons`): a heat map of Mret over (N, t) per γ and of the
γ difference, the step at which each N has lost half its retained mass (Mret <= 0.5), Mret at
chosen horizons, and the seed article's N = 8 claim ("Mret falls to 0.2–0.4 and γ = 1 clearly
raises it") located in time. The full default grid publishes to figures/horizons/.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from catsim.errors import CatsimError
from catsim.files import write_text
from catsim.plots.horizons import plot_half_loss, plot_heatmaps
from catsim.sim import horizons as H
from catsim.sim.analysis import COLLAPSE_THRESHOLD, _span, find_regimes
from catsim.sim.config import PAPER_GAMMAS, PAPER_GROUP_SIZES, PAPER_SEEDS, SimConfig, scenario
from catsim.sim.results import SimResults
from catsim.sim.sweep import sweep

HORIZON_STEPS = 10_000  # T of the study
HORIZON_LOG_EVERY = 10  # recording interval (the Fig. 2 sweep's)
REPORT_STEPS = (1000, 2000, 5000, 10_000)  # horizons tabulated (those <= T)
CLAIM_N = 8  # the seed article's group size
CLAIM_BAND = (0.2, 0.4)  # its "Mret falls to 0.2–0.4"
COLLAPSE_LEVELS = (0.9, 0.1)  # a run's collapse: from its first step at Mret <= 0.9 to <= 0.1
PUBLISHED_DIR = Path("figures/horizons")
TRAJECTORIES = "horizons_mret.npz"  # Mret and Qpos trajectories (the published data)
SUMMARY = "horizons_summary.json"
TABLE = "horizons_table.txt"


def horizons_config(base: SimConfig | None = None, *, steps: int = HORIZON_STEPS,
                    log_every: int = HORIZON_LOG_EVERY) -> SimConfig:
    """`base` (default: the paper scenario) run for `steps`, recorded every `log_every`."""
    return dataclasses.replace(base or scenario("paper"), steps=steps, log_every=log_every)


def is_full_horizons(config: SimConfig, group_sizes: Sequence[int], gammas: Sequence[float],
                     seeds) -> bool:
    """Whether this is the published study: the paper scenario at T = 10,000 recorded every 10
    steps, the full Fig. 2 grid of N, γ ∈ {0, 1}, `PAPER_SEEDS` seeds."""
    return (config == horizons_config() and tuple(int(n) for n in group_sizes) == PAPER_GROUP_SIZES
            and tuple(float(g) for g in gammas) == PAPER_GAMMAS
            and isinstance(seeds, int) and seeds == PAPER_SEEDS)


@dataclasses.dataclass(frozen=True)
class HorizonsOutput:
    """What `run_horizons` wrote."""

    results: SimResults  # every metric of every run (also <out>/results.npz)
    summary: dict  # the JSON summary (half-loss steps, Mret at horizons, the N = 8 check)
    table: str  # the text table (also <figures_dir>/horizons_table.txt)
    files: tuple[Path, ...]  # figures, table, summary and trajectories written
    seconds: float  # wall time of the sweep


def _stats(values) -> dict:
    v = np.asarray(values, dtype=float)
    return {"mean": float(v.mean()), "sd": float(v.std(ddof=1)) if v.size > 1 else None,
            "min": float(v.min()), "max": float(v.max()), "seeds": [float(x) for x in v]}


def _finite(x: float) -> float | None:
    return None if not math.isfinite(x) else float(x)


def claim_check(results: SimResults, *, n: int = CLAIM_N, band=CLAIM_BAND,
                method: str | None = None) -> dict | None:
    """Where the seed-mean Mret of group size `n` lies in `band`, per γ, and what the largest γ
    does there against the smallest: at every recorded step of the smallest γ's windows, the seed
    means and the per-seed ranges of both, and whether every seed of the larger γ is above every
    seed of the smaller one ("separated"). None when `n` or two γ values are missing."""
    if n not in results.group_sizes or len(results.gammas) < 2:
        return None
    runs = results.sel("mret", method=method or results.methods[0], n=n)  # [G, K, S]
    steps = np.asarray(results.steps)
    lo_g, hi_g = 0, len(results.gammas) - 1
    mean_GS = runs.mean(axis=1)
    windows = {f"gamma={g:g}": H.band_windows(steps, mean_GS[i], *band)
               for i, g in enumerate(results.gammas)}
    compared = []
    for first, last in windows[f"gamma={results.gammas[lo_g]:g}"]:
        ix = np.flatnonzero((steps >= first) & (steps <= last))
        low, high = runs[lo_g][:, ix], runs[hi_g][:, ix]  # [K, s]
        diff = high.mean(0) - low.mean(0)
        compared.append({
            "steps": [first, last],
            "mean_low_gamma": [float(low.mean(0).min()), float(low.mean(0).max())],
            "mean_high_gamma": [float(high.mean(0).min()), float(high.mean(0).max())],
            "difference": [float(diff.min()), float(diff.max())],
            "separated_share": float(np.mean(high.min(0) > low.max(0))),
        })
    per_seed = {f"gamma={g:g}": {
        "windows": [H.band_windows(steps, run, *band) for run in runs[i]],
        **{f"first_at_{level:g}": [_finite(H.first_crossing(steps, run, level)) for run in runs[i]]
           for level in COLLAPSE_LEVELS}} for i, g in enumerate(results.gammas)}
    return {"n": n, "band": list(band), "gammas": [results.gammas[lo_g], results.gammas[hi_g]],
            "log_every": int(steps[1] - steps[0]), "windows": windows, "compared": compared,
            "per_seed": per_seed}


def summarise(results: SimResults, *, method: str | None = None,
              report_steps: Sequence[int] = REPORT_STEPS) -> dict:
    """The study's numbers as a JSON-able dict (NaN written as null)."""
    method = method or results.methods[0]
    horizon = int(results.steps[-1])
    crossings = H.summarise_crossings(H.crossing_steps(results, method=method), horizon)
    half = {}
    for g, row in zip(results.gammas, crossings):
        half[f"gamma={g:g}"] = {
            str(n): {"steps": [_finite(s) for s in c.steps], "crossed": c.crossed,
                     "mean": _finite(c.mean), "sd": _finite(c.sd), "text": c.describe()}
            for n, c in zip(results.group_sizes, row)}
    at, regimes = {}, {}
    for t in (t for t in report_steps if t <= horizon and t in results.steps):
        values = H.values_at(results, t, method=method)  # [G, N, K]
        regimes[str(t)] = {f"gamma={g:g}": find_regimes(results.group_sizes, values[i].mean(-1))
                           for i, g in enumerate(results.gammas)}
        at[str(t)] = {f"gamma={g:g}": {str(n): _stats(values[i, j])
                                      for j, n in enumerate(results.group_sizes)}
                      for i, g in enumerate(results.gammas)}
    return {"method": method, "horizon": horizon, "log_every": int(results.steps[1] - results.steps[0]),
            "seeds": list(results.seeds), "gammas": list(results.gammas),
            "group_sizes": list(results.group_sizes), "half_loss_level": H.HALF_LOSS_LEVEL,
            "half_loss": half, "mret_at": at, "regimes_at": regimes, "claim": claim_check(results, method=method)}


def format_table(summary: dict) -> str:
    """The text table: half-loss steps per N and γ, Mret at the report horizons, the N = 8 check."""
    gammas, sizes = summary["gammas"], summary["group_sizes"]
    k, horizon = len(summary["seeds"]), summary["horizon"]
    lines = [f"method {summary['method']}: Mret over {horizon:,} steps (recorded every "
             f"{summary['log_every']}), {k} seed(s)",
             f"half-loss step = first step with Mret <= {summary['half_loss_level']:g} (linear "
             "between records); mean ± sd (min–max) over seeds", ""]
    head = f"{'N':>7}" + "".join(f" | {'half-loss γ=' + format(g, 'g'):<38}" for g in gammas)
    lines += [head, "-" * len(head)]
    for n in sizes:
        lines.append(f"{n:>7}" + "".join(
            f" | {summary['half_loss'][f'gamma={g:g}'][str(n)]['text']:<38}" for g in gammas))
    for t, per_gamma in summary["mret_at"].items():
        lines += ["", f"Mret at step {int(t):,}: mean ± sd (min–max) over seeds"]
        head = f"{'N':>7}" + "".join(f" | {'γ=' + format(g, 'g'):<32}" for g in gammas)
        lines += [head, "-" * len(head)]
        for n in sizes:
            cells = []
            for g in gammas:
                s = per_gamma[f"gamma={g:g}"][str(n)]
                sd = f" ± {s['sd']:.4f}" if s["sd"] is not None else ""
                cells.append(f" | {s['mean']:.4f}{sd} ({s['min']:.4f}–{s['max']:.4f})".ljust(35))
            lines.append(f"{n:>7}" + "".join(cells))
    lines += ["", f"regimes (find_regimes: regime II = seed-mean Mret < {COLLAPSE_THRESHOLD:g} "
                  "around its minimum over N) at each horizon:"]
    for t, per_gamma in summary["regimes_at"].items():
        for name, reg in per_gamma.items():
            lines.append(f"  t={int(t):>6,} {name.replace('gamma', 'γ')}: " + ", ".join(
                f"{k}: N={_span(reg[k])}" for k in ("I", "II", "III")))
    lines += ["", *describe_claim(summary["claim"])]
    return "\n".join(lines)


def describe_claim(claim: dict | None) -> list[str]:
    """Plain-language lines of `claim_check`'s result."""
    if claim is None:
        return [f"N = {CLAIM_N} claim: not checked (needs N = {CLAIM_N} and two γ values)"]
    lo, hi = claim["band"]
    g0, g1 = claim["gammas"]
    out = [f"seed article, N = {claim['n']}: 'Mret falls to {lo:g}–{hi:g}, and γ = {g1:g} clearly "
           "raises it'"]
    for name, windows in claim["windows"].items():
        spans = ", ".join(f"{a:,}–{b:,}" for a, b in windows) or "never"
        out.append(f"  steps with seed-mean Mret in [{lo:g}, {hi:g}], {name.replace('gamma', 'γ')}: {spans}")
    for c in claim["compared"]:
        a, b = c["steps"]
        out.append(f"  in the γ={g0:g} window {a:,}–{b:,}: Mret γ={g0:g} {c['mean_low_gamma'][0]:.3f}–"
                   f"{c['mean_low_gamma'][1]:.3f}, γ={g1:g} {c['mean_high_gamma'][0]:.3f}–"
                   f"{c['mean_high_gamma'][1]:.3f}, difference {c['difference'][0]:+.3f} to "
                   f"{c['difference'][1]:+.3f}; every γ={g1:g} seed above every γ={g0:g} seed at "
                   f"{100 * c['separated_share']:.0f}% of its records")
    hi_level, lo_level = COLLAPSE_LEVELS
    for name, seeds in claim.get("per_seed", {}).items():
        dwell = [sum(b - a + claim["log_every"] for a, b in w) for w in seeds["windows"]]
        start, end = seeds[f"first_at_{hi_level:g}"], seeds[f"first_at_{lo_level:g}"]
        spans = [f"{a:.0f}→{b:.0f}" if a is not None and b is not None else "not within T"
                 for a, b in zip(start, end)]
        out.append(f"  per seed, {name.replace('gamma', 'γ')}: Mret {hi_level:g} → {lo_level:g} at steps "
                   f"{', '.join(spans)}; records in [{lo:g}, {hi:g}] span ≈ {min(dwell)}–{max(dwell)} steps")
    return out


def _publish_trajectories(results: SimResults, path: Path) -> Path:
    data = {k: v for k, v in results.data.items() if k in ("mret", "qpos")}
    return dataclasses.replace(results, data=data).save(path)


def run_horizons(config: SimConfig, out_dir, *, group_sizes: Sequence[int] = PAPER_GROUP_SIZES,
                 gammas: Sequence[float] = PAPER_GAMMAS, seeds=PAPER_SEEDS, figures_dir=None,
                 resume: bool = True, progress: bool = True, shard: bool = False, log=None,
                 command: str | None = None) -> HorizonsOutput:
    """Run (or resume) the sweep of `config` into `out_dir`, then write the heat maps, the
    half-loss figure, the table, the summary (with `command` and provenance) and the Mret / Qpos
    trajectories to `figures_dir` (default: figures/horizons/ for the published study,
    `is_full_horizons`, else `out_dir`)."""
    if config.steps // config.log_every < 2:
        raise CatsimError(f"a horizon study needs at least 2 records after step 0 "
                          f"(steps {config.steps}, log_every {config.log_every})")
    if len({float(g) for g in gammas}) < 1 or not group_sizes:
        raise CatsimError("the horizon study needs group sizes and γ values")
    out = Path(out_dir)
    if figures_dir is None:
        figures_dir = PUBLISHED_DIR if is_full_horizons(config, group_sizes, gammas, seeds) else out
    figures_dir = Path(figures_dir)
    t0 = time.perf_counter()
    results = sweep(config, out, group_sizes=group_sizes, gammas=gammas, seeds=seeds,
                    resume=resume, progress=progress, shard=shard, log=log)
    seconds = time.perf_counter() - t0
    summary = summarise(results)
    table = format_table(summary)
    from catsim.experiments import provenance

    record = {"command": command, **summary, "provenance": provenance.collect()}
    crossings = H.crossing_steps(results)
    files = (
        plot_heatmaps(results, crossings, figures_dir / "mret_heatmap.png"),
        plot_half_loss(results, crossings, figures_dir / "half_loss.png",
                       report_steps=[int(t) for t in summary["mret_at"]]),
        write_text(figures_dir / TABLE, table + "\n"),
        write_text(figures_dir / SUMMARY, json.dumps(record, indent=1, ensure_ascii=False) + "\n"),
        _publish_trajectories(results, figures_dir / TRAJECTORIES),
    )
    return HorizonsOutput(results, summary, table, tuple(Path(f) for f in files), seconds)
