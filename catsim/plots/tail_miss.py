"""Figures of Lemma 3.1: the paper's Fig. 3 (Pr(B) vs N per mu_pos) and Fig. 5 (simulation point)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from catsim.plots.save import save_figure
from catsim.theory.tail_miss import tail_miss_peak, tail_miss_probability

FIG3_MU = (0.8, 0.5, 0.2)
FIG3_RHO = (0.01, 0.05, 0.1, 0.2)
FIG3_N = tuple(range(1, 513))
FIG5_MU = 0.64
FIG5_TAU = 6.3e-5
FIG5_N = tuple(2**k for k in range(18))


def _pyplot():
    import matplotlib.pyplot as plt

    return plt


def _log2_axis(ax, ns: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    lo, hi = int(np.floor(np.log2(min(ns)))), int(np.ceil(np.log2(max(ns))))
    step = max(1, (hi - lo) // 9)
    ticks = [2**k for k in range(lo, hi + 1, step)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"$2^{{{int(np.log2(t))}}}$" for t in ticks])
    ax.set_xlim(min(ns), max(ns))


def figure_tail_miss_panels(
    mus: Sequence[float] = FIG3_MU,
    ns: Sequence[int] = FIG3_N,
    rhos: Sequence[float] | None = FIG3_RHO,
    taus: Sequence[float] | None = None,
):
    """Fig. 3: one panel per mu_pos, one curve per rho = tau/mu (or per absolute tau), star at the
    integer argmax when it lies inside the plotted N range. Returns the matplotlib Figure."""
    plt = _pyplot()
    ns_arr = np.asarray(ns, dtype=float)
    fig, axes = plt.subplots(1, len(mus), figsize=(4.2 * len(mus), 3.6), sharey=True, squeeze=False)
    colors = plt.get_cmap("viridis")(np.linspace(0.0, 0.85, len(rhos if taus is None else taus)))
    for ax, mu in zip(axes[0], mus):
        curves = [(rho * mu, f"ρ = {rho:g}") for rho in rhos] if taus is None else [(t, f"τ = {t:g}") for t in taus]
        for color, (tau, label) in zip(colors, curves):
            ax.plot(ns_arr, tail_miss_probability(ns_arr, tau, mu), color=color, lw=1.8, label=label)
            if mu < 1:
                peak = tail_miss_peak(tau, mu)
                if ns_arr.min() <= peak.n_argmax <= ns_arr.max():
                    ax.plot([peak.n_argmax], [peak.max_value], marker="*", ms=13, color=color,
                            markeredgecolor="black", markeredgewidth=0.6, zorder=5)
        _log2_axis(ax, ns)
        ax.set_title(f"$\\mu_{{pos}}$ = {mu:g}")
        ax.set_xlabel("group size N")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("Pr(active group, rare subset unsampled)")
    axes[0][0].legend(frameon=False, fontsize=9)
    sep = " " if len(mus) > 1 else "\n"  # one panel is narrower than the title's one line
    fig.suptitle(f"Lemma 3.1: tail-miss probability{sep}(stars: integer argmax)", fontsize=11)
    fig.tight_layout()
    return fig


def figure_simulation_point(mu: float = FIG5_MU, tau: float = FIG5_TAU, ns: Sequence[int] = FIG5_N):
    """Fig. 5: Pr(B) at the categorical simulation's initial masses over N = 2^0..2^17."""
    plt = _pyplot()
    ns_arr = np.asarray(ns, dtype=float)
    dense = np.unique(np.round(np.geomspace(ns_arr.min(), ns_arr.max(), 600)))
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    ax.plot(dense, tail_miss_probability(dense, tau, mu), color="tab:blue", lw=1.8)
    ax.plot(ns_arr, tail_miss_probability(ns_arr, tau, mu), "o", color="tab:blue", ms=4)
    peak = tail_miss_peak(tau, mu)
    ax.plot([peak.n_argmax], [peak.max_value], marker="*", ms=14, color="tab:orange",
            markeredgecolor="black", markeredgewidth=0.6, zorder=5,
            label=f"argmax N = {peak.n_argmax}, Pr = {peak.max_value:.4f}")
    last = ns_arr.max()
    ax.annotate(f"N = {int(last)}: Pr = {float(tail_miss_probability(last, tau, mu)):.2e}",
                xy=(last, float(tail_miss_probability(last, tau, mu))), xytext=(-10, 30),
                textcoords="offset points", ha="right", arrowprops={"arrowstyle": "->"})
    ax.axvspan(peak.half_max_lo, min(peak.half_max_hi, last), color="tab:blue", alpha=0.08,
               label=f"Pr ≥ max/2: N ∈ [{peak.half_max_lo:.1f}, {peak.half_max_hi:.0f}]")
    _log2_axis(ax, ns)
    ax.set_xlabel("group size N")
    ax.set_ylabel("Pr(active group, rare subset unsampled)")
    ax.set_title(f"Lemma 3.1 at the simulation point: $\\mu_{{pos}}$ = {mu:g}, τ = {tau:g}", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(frameon=False, fontsize=8, loc="lower center")
    fig.tight_layout()
    return fig


def save(fig, out_dir: Path | str, stem: str, formats: Sequence[str] = ("png", "pdf")) -> list[Path]:
    """Write `fig` as out_dir/stem.<fmt> for each format, close it, return the paths."""
    plt = _pyplot()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = out / f"{stem}.{fmt}"
        # Fixed metadata so regenerating an unchanged figure gives identical files.
        metadata = {"Software": None} if fmt == "png" else {"CreationDate": None, "Producer": None}
        paths.append(save_figure(fig, path, close=False, dpi=150, metadata=metadata))
    plt.close(fig)
    return paths
