"""The theory figures: Lemma 3.1 (the paper's Fig. 3 and Fig. 5) and the joint distribution of
(ΔQpos, ΔQu,pos) over one update from the paper's initial policy (Prop. 3.2's phenomenon).

    from catsim.experiments.theory import reproduce_figures, reproduce_mass_figure
    reproduce_figures("figures")                 # lemma31_fig3/fig5 .png/.pdf
    rows = tail_miss_table([8, 64], [(0.01, 0.5)])  # what `catsim lemma --format csv` prints
    paths, samples = reproduce_mass_figure("figures", groups=300)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from catsim.plots.mass import figure_joint_changes
from catsim.plots.tail_miss import figure_simulation_point, figure_tail_miss_panels, save
from catsim.theory import mass
from catsim.theory.tail_miss import active_probability, tail_miss_peak, tail_miss_probability

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
    progress: bool | None = False,
) -> list[JointSample]:
    """Draw `groups` groups per N from the paper initialisation and apply one step to each.

    Per-group draws come from a NumPy Generator seeded with (seed, n, group index), so results do
    not depend on the order of N or on `groups`. Exact changes (not first order) are reported.
    progress: groups done on stderr (`catsim.progress.progress_bar`: True, False or None = automatic).
    """
    from catsim.progress import progress_bar

    logits, mask = mass.paper_initial_logits(num_actions, num_correct)
    p = np.exp(logits - logits.max())
    p /= p.sum()
    cdf = np.cumsum(p)
    cdf /= cdf[-1]
    out = []
    todo = [(n, g) for n in ns for g in range(groups)]
    results: dict[int, list[tuple[float, float]]] = {n: [] for n in ns}
    with progress_bar(len(todo), "one-step updates", progress, unit="group") as bar:
        for n, g in todo:
            rng = np.random.default_rng([seed, n, g])
            draws = np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), p.size - 1)
            dz = mass.logit_step(logits, mask, draws, config)
            u_pos = mask.copy()
            u_pos[draws] = False
            results[n].append((mass.exact_change(p, dz, mask), mass.exact_change(p, dz, u_pos)))
            bar.update(1)
    for n in ns:
        arr = np.asarray(results[n])
        out.append(JointSample(n=n, dqpos=arr[:, 0], dqupos=arr[:, 1]))
    return out


PUBLISHED_MASS_GROUPS = 300  # groups per N of the published figures/mass_step_joint.png (seed 0)


def mass_figure_stem(groups: int, seed: int = 0) -> str:
    """The file name (no suffix) of the joint-change figure: the published name only for the
    published settings; other settings name themselves, so that a figure of other settings never
    replaces the published one (as `catsim lemma` writes lemma31_custom)."""
    if (groups, seed) == (PUBLISHED_MASS_GROUPS, 0):
        return "mass_step_joint"
    return f"mass_step_joint_groups{groups}" + (f"_seed{seed}" if seed else "")


def reproduce_mass_figure(out_dir: Path | str = "figures", groups: int = PUBLISHED_MASS_GROUPS, seed: int = 0,
                          progress: bool | None = False) -> tuple[list[Path], list[JointSample]]:
    """Write out_dir/<mass_figure_stem(groups, seed)>.{png,pdf} (mass_step_joint for the published
    settings); returns (paths, samples)."""
    samples = sample_joint_changes(groups=groups, seed=seed, progress=progress)
    figure = figure_joint_changes(samples, SIMULATION_STEP)
    return save(figure, out_dir, mass_figure_stem(groups, seed)), samples


def reproduce_figures(out_dir: Path | str = "figures", formats: Sequence[str] = ("png", "pdf")) -> list[Path]:
    """Write the paper's Fig. 3 and Fig. 5 (Lemma 3.1) into out_dir; returns the written paths.

    Files: lemma31_fig3.{png,pdf} and lemma31_fig5.{png,pdf}. Used by `catsim lemma` and
    `catsim reproduce`.
    """
    paths = save(figure_tail_miss_panels(), out_dir, "lemma31_fig3", formats)
    paths += save(figure_simulation_point(), out_dir, "lemma31_fig5", formats)
    return paths


def custom_lemma_figure(out_dir: Path | str, *, mus: Sequence[float], ns: Sequence[int],
                        rhos: Sequence[float] | None, taus: Sequence[float] | None) -> list[Path]:
    """Fig. 3's panels for a chosen grid, written as out_dir/lemma31_custom.{png,pdf}."""
    return save(figure_tail_miss_panels(mus=mus, ns=ns, rhos=rhos, taus=taus), out_dir, "lemma31_custom")


def tail_miss_table(ns, pairs) -> list[dict]:
    """Rows n, tau, mu_pos, pr_tail_miss, pr_active for every N and every (tau, mu_pos) pair."""
    rows = []
    n_arr = np.asarray(ns, dtype=float)
    for tau, mu in pairs:
        pr = np.atleast_1d(tail_miss_probability(n_arr, tau, mu))
        act = np.atleast_1d(active_probability(n_arr, mu))
        rows += [{"n": int(k), "tau": tau, "mu_pos": mu, "pr_tail_miss": float(p), "pr_active": float(a)}
                 for k, p, a in zip(n_arr, pr, act)]
    return rows


def peak_table(pairs) -> list[dict]:
    """One row per (tau, mu_pos): the fields of `catsim.theory.tail_miss.TailMissPeak`."""
    return [asdict(tail_miss_peak(tau, mu)) for tau, mu in pairs]
