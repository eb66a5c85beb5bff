"""Fig. 2 analysis of simulator results: the regimes I/II/III found from the data, and the
final-state table that `catsim sweep` prints.

    from catsim.sim.analysis import format_table, regimes_of
    print(format_table(results))          # results: a SimResults (e.g. SimResults.load(path))
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from catsim.sim.results import SimResults

COLLAPSE_THRESHOLD = 0.5  # regime II: final Mret (γ = 0, mean over seeds) below this value


def find_regimes(group_sizes: Sequence[int], final_mret: Sequence[float],
                 threshold: float = COLLAPSE_THRESHOLD) -> dict:
    """Regimes I/II/III of Fig. 2 from data: II = the contiguous run of N (in increasing order)
    around the minimum of final Mret whose Mret is below `threshold`; I = the N below it, III =
    the N above it. With no N below the threshold there is no regime II (all N are regime I).

    Returns {"I": [...], "II": [...], "III": [...], "threshold": t}.
    """
    sizes = list(group_sizes)
    mret = np.asarray(final_mret, dtype=float)
    order = np.argsort(sizes)
    sizes = [sizes[i] for i in order]
    mret = mret[order]
    if mret.size == 0 or not np.nanmin(mret) < threshold:
        return {"I": sizes, "II": [], "III": [], "threshold": threshold}
    lo = hi = int(np.nanargmin(mret))
    while lo > 0 and mret[lo - 1] < threshold:
        lo -= 1
    while hi < len(sizes) - 1 and mret[hi + 1] < threshold:
        hi += 1
    return {"I": sizes[:lo], "II": sizes[lo:hi + 1], "III": sizes[hi + 1:], "threshold": threshold}


def regimes_of(results: SimResults, method: str | None = None) -> dict:
    """`find_regimes` on the γ = 0 (or smallest γ) seed-mean final Mret of `method`."""
    method = method or results.methods[0]
    gamma = min(results.gammas)
    mret = np.nanmean(results.sel("mret", method=method, gamma=gamma)[..., -1], axis=-1)
    return find_regimes(results.group_sizes, mret)


def _regime_of(n: int, regimes: dict) -> str:
    return next((name for name in ("I", "II", "III") if n in regimes[name]), "")


def format_table(results: SimResults, method: str | None = None) -> str:
    """Final Qpos / Mret per N and γ: seed mean ± std (min–max over seeds), with the regime; a
    one-seed table shows each value alone (one seed has no spread)."""
    method = method or results.methods[0]
    regimes = regimes_of(results, method)
    k = len(results.seeds)
    head = f"{'N':>7} {'reg':>3}"
    for g in results.gammas:
        head += f" | {'Qpos γ=' + format(g, 'g'):^33} | {'Mret γ=' + format(g, 'g'):^33}"
    title = f"mean ± std over {k} seed(s) (min–max)" if k > 1 else "over 1 seed (no spread)"
    lines = [f"method {method}: final values, {title}", head, "-" * len(head)]
    for n in results.group_sizes:
        row = f"{n:>7} {_regime_of(n, regimes):>3}"
        for g in results.gammas:
            for metric in ("qpos", "mret"):
                v = results.sel(metric, method=method, gamma=g, n=n)[..., -1]
                if k > 1:
                    row += f" | {v.mean():.5f} ± {v.std():.5f} ({v.min():.4f}–{v.max():.4f})"
                else:
                    row += f" | {v.mean():^33.5f}"
        lines.append(row)
    lines.append(
        f"regimes from data (γ={min(results.gammas):g} mean final Mret < {regimes['threshold']}): "
        f"I: N={_span(regimes['I'])}, II: N={_span(regimes['II'])}, III: N={_span(regimes['III'])}")
    return "\n".join(lines)


def _span(sizes) -> str:
    if not sizes:
        return "none"
    return str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}…{sizes[-1]}"
