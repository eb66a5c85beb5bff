"""Figure of Prop. 3.2's phenomenon: the joint distribution of (ΔQpos, ΔQu,pos) over one step
from the paper's initial policy, per group size N (samples drawn by `catsim.experiments.theory`)."""

from __future__ import annotations

from collections.abc import Sequence

from catsim.theory import mass


def figure_joint_changes(samples: Sequence, config: mass.MassStepConfig):
    """One scatter panel per N: ΔQpos (x) against ΔQu,pos (y), share of rise/fall steps in the title.

    samples: objects with `n`, `dqpos` [groups], `dqupos` [groups] and `share_rise_fall`
    (`catsim.experiments.theory.JointSample`); config: the step they were drawn with (for the title).
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(samples), figsize=(4.3 * len(samples), 3.9), squeeze=False)
    for ax, s in zip(axes[0], samples):
        rise_fall = (s.dqpos > 0) & (s.dqupos < 0)
        ax.scatter(s.dqpos[~rise_fall], s.dqupos[~rise_fall], s=9, alpha=0.6, color="tab:gray", label="other")
        ax.scatter(s.dqpos[rise_fall], s.dqupos[rise_fall], s=9, alpha=0.6, color="tab:red",
                   label="Qpos ↑, Qu,pos ↓")
        ax.axhline(0, color="black", lw=0.6)
        ax.axvline(0, color="black", lw=0.6)
        ax.ticklabel_format(style="sci", scilimits=(-2, 2), axis="both")
        ax.set_title(f"N = {s.n}: {100 * s.share_rise_fall:.1f}% of steps Qpos↑ Qu,pos↓", fontsize=10)
        ax.set_xlabel("ΔQpos (one step)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("ΔQu,pos (one step)")
    axes[0][0].legend(frameon=False, fontsize=8, loc="lower left")
    groups = len(samples[0].dqpos)
    fig.suptitle(
        f"One {config.rule}-surrogate step ({config.resolved_advantage()} rewards ±1, η = {config.eta:g}) "
        f"from the paper init (V = 128,000), {groups} groups per N",
        fontsize=10,
    )
    fig.tight_layout()
    return fig
