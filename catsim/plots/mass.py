"""Figure of Prop. 3.2's phenomenon: the joint distribution of (ΔQpos, ΔQu,pos) over one step
from the paper's initial policy, per group size N."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from catsim.theory import mass

# App. J / §5.1: linear surrogate on mean-centred rewards R = ±1, plain gradient step η = 1e-2.
SIMULATION_STEP = mass.MassStepConfig(
    rule="linear", advantage="centered", reward_correct=1.0, reward_wrong=-1.0, eta=1e-2
)


@dataclass(frozen=True)
class JointSample:
    """One-step changes from the initial policy for `groups` random groups of size n."""

    n: int  # group size N
    dqpos: np.ndarray  # [groups] exact ΔQpos of each step
    dqupos: np.ndarray  # [groups] exact ΔQu,pos of each step

    @property
    def share_rise_fall(self) -> float:
        """Fraction of steps where Qpos rises while Qu,pos falls."""
        return float(np.mean((self.dqpos > 0) & (self.dqupos < 0)))


def sample_joint_changes(
    ns: Sequence[int] = (8, 256, 131072),
    groups: int = 300,
    seed: int = 0,
    config: mass.MassStepConfig = SIMULATION_STEP,
    num_actions: int = 128_000,
    num_correct: int = 10_000,
    progress: bool = False,
) -> list[JointSample]:
    """Draw `groups` groups per N from the paper initialisation and apply one step to each.

    Per-group draws come from a NumPy Generator seeded with (seed, n, group index), so results do
    not depend on the order of N or on `groups`. Exact changes (not first order) are reported.
    """
    logits, mask = mass.paper_initial_logits(num_actions, num_correct)
    p = np.exp(logits - logits.max())
    p /= p.sum()
    cdf = np.cumsum(p)
    cdf /= cdf[-1]
    out = []
    iterator = [(n, g) for n in ns for g in range(groups)]
    if progress:
        from tqdm import tqdm

        iterator = tqdm(iterator, desc="one-step updates", file=None)
    results: dict[int, list[tuple[float, float]]] = {n: [] for n in ns}
    for n, g in iterator:
        rng = np.random.default_rng([seed, n, g])
        draws = np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), p.size - 1)
        dz = mass.logit_step(logits, mask, draws, config)
        u_pos = mask.copy()
        u_pos[draws] = False
        results[n].append((mass.exact_change(p, dz, mask), mass.exact_change(p, dz, u_pos)))
    for n in ns:
        arr = np.asarray(results[n])
        out.append(JointSample(n=n, dqpos=arr[:, 0], dqupos=arr[:, 1]))
    return out


def figure_joint_changes(samples: Sequence[JointSample], config: mass.MassStepConfig = SIMULATION_STEP):
    """One scatter panel per N: ΔQpos (x) against ΔQu,pos (y), share of rise/fall steps in the title."""
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


def reproduce_mass_figure(out_dir: Path | str = "figures", groups: int = 300, seed: int = 0,
                          progress: bool = False) -> tuple[list[Path], list[JointSample]]:
    """Write figures/mass_step_joint.{png,pdf}; returns (paths, samples)."""
    from catsim.plots.tail_miss import save

    samples = sample_joint_changes(groups=groups, seed=seed, progress=progress)
    return save(figure_joint_changes(samples), out_dir, "mass_step_joint"), samples
