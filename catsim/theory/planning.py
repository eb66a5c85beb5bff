"""Lemma 3.1 as a planning tool: which prompts lose their rare solutions at group size N.

Inputs are plain arrays of sampled answers: for P prompts, n samples each, an answer label per
sample (equal labels = the same answer, e.g. the verifier-equivalent answer or the path string)
and whether it is correct. Per prompt the correct mass μ̂ is the share of correct samples, and
the rare mass τ̂ is the share of samples whose answer lies in the prompt's *rare correct subset*:

    rule "share:q"  every correct answer whose share of the prompt's correct mass is at most q
                    (p_a ≤ q·μ̂; default q = 0.1);
    rule "tail:q"   the least probable correct answers, taken from the rarest up while their total
                    stays at most q·μ̂ (the per-prompt analogue of ΔNLL_rare's top quantile of
                    correct samples by NLL, F-GRPO App. M.2).

From (μ̂, τ̂) and a group size N, Lemma 3.1 gives the risk Pr(group active and rare subset
missed) = (1−τ)^N − (μ−τ)^N − (1−μ)^N (`tail_miss_probability_masses`, accurate in float64);
a bootstrap over each prompt's n samples gives its sampling band. Prompts without a rare subset
(no correct sample, or one dominant answer under the rule) have no risk (NaN) and are counted apart.

Other per-N quantities: the share of prompts in the concentration regime (`regime_boundaries`,
level 1/2), the expected number of visits of a prompt until one of its groups is active *and*
samples the rare subset, 1 / (Pr(active) − Pr(B)), and the focal weight F-GRPO gives the prompt's
active groups, E[(1 − X/N)^γ | active] with X ~ Binomial(N, μ̂) the group's correct count.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Sequence

import numpy as np
from scipy import stats

from catsim.errors import CatsimError
from catsim.theory.tail_miss import (
    active_probability,
    regime_boundaries,
    tail_miss_probability_masses,
)

__all__ = [
    "RareRule",
    "Advice",
    "rare_mask",
    "masses_from_samples",
    "bootstrap_masses",
    "group_risk",
    "steps_to_rare",
    "concentration",
    "expected_focal_weight",
    "advise",
]

RARE_RULES = ("share", "tail")


@dataclasses.dataclass(frozen=True)
class RareRule:
    """Which correct answers of a prompt count as rare (see the module docstring)."""

    kind: str = "share"  # "share" or "tail"
    q: float = 0.1  # share of the prompt's correct mass (per answer for "share", in total for "tail")

    def __post_init__(self):
        if self.kind not in RARE_RULES:
            raise CatsimError(f"unknown rare rule {self.kind!r}; choose one of {', '.join(RARE_RULES)}")
        if not (isinstance(self.q, (int, float)) and 0.0 < self.q < 1.0):
            raise CatsimError(f"the rare rule's q must lie in (0, 1), got {self.q!r}")

    @classmethod
    def parse(cls, text: str) -> RareRule:
        """"share:0.1" or "tail:0.2" -> RareRule."""
        kind, sep, value = text.partition(":")
        try:
            q = float(value) if sep else cls.q
        except ValueError:
            raise CatsimError(f"rare rule {text!r}: {value!r} is not a number (want e.g. share:0.1)") from None
        return cls(kind.strip(), q)

    def __str__(self) -> str:
        return f"{self.kind}:{self.q:g}"


def rare_mask(probs_K, rule: RareRule) -> np.ndarray:
    """[K] bool: which of a prompt's K distinct correct answers (probabilities `probs_K`, estimated
    or exact, all > 0) are rare under `rule`."""
    p = np.asarray(probs_K, np.float64)
    if p.ndim != 1 or np.any(~np.isfinite(p)) or np.any(p <= 0):
        raise CatsimError("answer probabilities must be a 1-D array of positive numbers")
    mu = p.sum()
    if rule.kind == "share":
        return p <= rule.q * mu * (1 + 1e-12)
    order = np.argsort(p, kind="stable")  # rarest first; ties keep the given order
    inside = np.cumsum(p[order]) <= rule.q * mu * (1 + 1e-12)
    mask = np.zeros(p.size, bool)
    mask[order[inside]] = True
    return mask


def _check_samples(labels_PxN, correct_PxN) -> tuple[np.ndarray, np.ndarray]:
    labels = np.asarray(labels_PxN, dtype=object)
    correct = np.asarray(correct_PxN)
    if labels.ndim != 2 or labels.shape != correct.shape or labels.shape[1] < 1 or labels.shape[0] < 1:
        raise CatsimError(f"labels and correct must both be P x n arrays with n >= 1, got shapes "
                          f"{labels.shape} and {correct.shape}")
    if correct.dtype != bool and not np.all(np.isin(correct, (0, 1))):
        raise CatsimError("correct must hold booleans (or 0/1)")
    return labels, correct.astype(bool)


def _prompt_masses(labels_n, correct_n, rule: RareRule) -> tuple[float, float]:
    n = len(labels_n)
    answers, counts = np.unique(np.asarray([str(a) for a in labels_n[correct_n]]), return_counts=True)
    if answers.size == 0:
        return 0.0, 0.0
    probs = counts / n
    return float(probs.sum()), float(probs[rare_mask(probs, rule)].sum())


def masses_from_samples(labels_PxN, correct_PxN, rule: RareRule = RareRule()) -> tuple[np.ndarray, np.ndarray]:
    """(μ̂_P, τ̂_P) from P prompts × n sampled answers: the empirical answer distribution's correct
    mass and the mass of its rare correct subset under `rule`."""
    labels, correct = _check_samples(labels_PxN, correct_PxN)
    out = np.array([_prompt_masses(labels[i], correct[i], rule) for i in range(labels.shape[0])])
    return out[:, 0], out[:, 1]


def bootstrap_masses(labels_PxN, correct_PxN, rule: RareRule = RareRule(), *, n_boot: int = 200,
                     seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(μ̂, τ̂) of `n_boot` bootstrap resamples: each prompt's n samples drawn with replacement,
    the rare subset re-chosen in every resample. Returns two [n_boot, P] arrays."""
    labels, correct = _check_samples(labels_PxN, correct_PxN)
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise CatsimError(f"n_boot must be a positive whole number, got {n_boot!r}")
    rng = np.random.default_rng(seed)
    p, n = labels.shape
    mu, tau = np.empty((n_boot, p)), np.empty((n_boot, p))
    for b in range(n_boot):
        idx = rng.integers(0, n, size=(p, n))
        for i in range(p):
            mu[b, i], tau[b, i] = _prompt_masses(labels[i, idx[i]], correct[i, idx[i]], rule)
    return mu, tau


def group_risk(mu, tau, n) -> np.ndarray:
    """Pr(group of n active and rare subset missed), Lemma 3.1, broadcast over (μ, τ, n); NaN where
    the prompt has no rare subset (τ = 0) or no correct mass; 0 where every answer is correct and rare."""
    mu, tau, n = np.broadcast_arrays(np.asarray(mu, np.float64), np.asarray(tau, np.float64),
                                     np.asarray(n, np.float64))
    if np.any((mu < 0) | (mu > 1) | (tau < 0) | (tau > mu + 1e-12)):
        raise CatsimError("need 0 <= tau <= mu <= 1 for every prompt")
    out = np.full(mu.shape, np.nan)
    defined = (tau > 0) & (mu > 0)
    no_rest = defined & (mu - tau + (1 - mu) <= 0)  # τ = μ = 1: no group can be active
    out[no_rest] = 0.0
    ok = defined & ~no_rest
    if np.any(ok):
        a, b, c = tau[ok], np.maximum(mu[ok] - tau[ok], 0.0), 1.0 - mu[ok]
        out[ok] = tail_miss_probability_masses(n[ok], a, b, c)
    return out


def steps_to_rare(mu, tau, n) -> np.ndarray:
    """Expected visits of a prompt until one of its groups of n is active and samples the rare
    subset: 1 / (Pr(active) − Pr(B)) (geometric); inf where that never happens, NaN without a rare subset."""
    risk = group_risk(mu, tau, n)
    mu_b, n_b = np.broadcast_arrays(np.asarray(mu, np.float64), np.asarray(n, np.float64))
    active = np.asarray(active_probability(np.maximum(n_b, 1), np.clip(mu_b, 0, 1)), np.float64)
    hit = np.where(np.isnan(risk), np.nan, np.maximum(active - risk, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.isnan(hit), np.nan, np.where(hit > 0, 1.0 / np.where(hit > 0, hit, 1.0), np.inf))


def concentration(mu, tau, n, level: float = 0.5) -> np.ndarray:
    """[P, K] bool: prompt p is in the concentration regime at group size n_k (active groups that
    usually miss the rare subset, `regime_boundaries` at `level`); False without a rare subset."""
    mu, tau = np.asarray(mu, np.float64), np.asarray(tau, np.float64)
    n = np.asarray(n, np.float64)
    out = np.zeros((mu.size, n.size), bool)
    for i, (m, t) in enumerate(zip(mu, tau)):
        if t > 0 and t < m:
            lo, hi = regime_boundaries(t, m, level)
            out[i] = (n >= lo) & (n < hi)
    return out


def expected_focal_weight(mu, n, gamma: float) -> np.ndarray:
    """[P, K] E[(1 − X/N)^γ | group active], X ~ Binomial(N, μ) the correct count of a group of N
    (F-GRPO's weight of the prompt's groups that carry a gradient). At μ̂ = 0 (1) no group is ever
    active and the value is the limit μ → 0 (μ → 1): (1 − 1/N)^γ ((1/N)^γ), the weight of a group
    with one correct (one wrong) sample. NaN only for N = 1, where no group can be active."""
    mu = np.clip(np.asarray(mu, np.float64).reshape(-1), 0.0, 1.0)
    ns = np.asarray(n, np.int64).reshape(-1)
    out = np.full((mu.size, ns.size), np.nan)
    for k, size in enumerate(ns):
        if size < 2:
            continue
        x = np.arange(1, size)  # the active counts
        pmf = stats.binom.pmf(x[None, :], size, mu[:, None])  # [P, N−1]
        mass = pmf.sum(axis=1)
        g = np.power(1.0 - x / size, gamma)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, k] = np.where(mass > 0, (pmf * g).sum(axis=1) / np.where(mass > 0, mass, 1.0), np.nan)
        # μ̂ = 0 or 1 (or so close that no active count has mass): the limit μ → 0 (μ → 1) of the
        # conditional weight, that of a group with one correct (one wrong) sample
        out[:, k] = np.where(np.isnan(out[:, k]) & (mu < 0.5), (1.0 - 1.0 / size) ** gamma, out[:, k])
        out[:, k] = np.where(np.isnan(out[:, k]) & (mu >= 0.5), (1.0 / size) ** gamma, out[:, k])
    return out


@dataclasses.dataclass
class Advice:
    """What `advise` found (arrays over P prompts and K candidate group sizes)."""

    group_sizes: np.ndarray  # [K]
    rule: str  # the rare rule, e.g. "share:0.1"
    n_samples: int  # samples per prompt the estimates rest on
    mu: np.ndarray  # [P] μ̂
    tau: np.ndarray  # [P] τ̂
    has_rare: np.ndarray  # [P] bool: a rare subset was observed
    risk: np.ndarray  # [P, K] Lemma 3.1 risk (NaN without a rare subset)
    risk_lo: np.ndarray  # [P, K] bootstrap 5 % quantile
    risk_hi: np.ndarray  # [P, K] bootstrap 95 % quantile
    mean_risk: np.ndarray  # [K] over prompts with a rare subset
    mean_risk_lo: np.ndarray  # [K] bootstrap 5 % of the mean
    mean_risk_hi: np.ndarray  # [K] bootstrap 95 % of the mean
    concentration_share: np.ndarray  # [K] share of prompts with a rare subset in the concentration regime
    median_steps_to_rare: np.ndarray  # [K] median over prompts of steps_to_rare
    mean_active: np.ndarray  # [K] mean over prompts with a rare subset of Pr(group active)
    active_share: np.ndarray  # [K] mean over ALL prompts of Pr(group active): the share of groups with signal
    too_weak: bool  # even the largest N leaves most groups inactive: RL would barely move
    focal_weights: dict  # {γ: [P, K] E[(1 − X/N)^γ | active]}
    unseen_bound: float  # 95 % upper bound on the mass of correct answers never seen in n_samples
    risk_at_unseen_bound: np.ndarray  # [K] mean risk, over prompts with μ̂ > 0 and no rare subset seen, at that bound
    recommended_n: int
    recommended_gamma: float
    reasoning: str

    def to_json(self) -> dict:
        def clean(a):
            a = np.asarray(a, np.float64)
            return [None if not math.isfinite(x) else float(x) for x in a.reshape(-1)] if a.ndim <= 1 else \
                [clean(row) for row in a]

        return {
            "group_sizes": [int(x) for x in self.group_sizes], "rule": self.rule, "n_samples": self.n_samples,
            "prompts": int(self.mu.size), "prompts_with_rare_subset": int(self.has_rare.sum()),
            "mu": clean(self.mu), "tau": clean(self.tau), "risk": clean(self.risk),
            "risk_lo": clean(self.risk_lo), "risk_hi": clean(self.risk_hi),
            "mean_risk": clean(self.mean_risk), "mean_risk_lo": clean(self.mean_risk_lo),
            "mean_risk_hi": clean(self.mean_risk_hi), "concentration_share": clean(self.concentration_share),
            "median_steps_to_rare": clean(self.median_steps_to_rare),
            "mean_active": clean(self.mean_active), "active_share": clean(self.active_share),
            "too_weak_for_rl": self.too_weak,
            "focal_weights": {f"{g:g}": clean(w) for g, w in self.focal_weights.items()},
            "unseen_rare_bound": self.unseen_bound, "mean_risk_at_unseen_bound": clean(self.risk_at_unseen_bound),
            "recommended_n": self.recommended_n, "recommended_gamma": self.recommended_gamma,
            "reasoning": self.reasoning,
        }


def _nanmean_rows(a: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        count = np.sum(~np.isnan(a), axis=-2)
        return np.where(count > 0, np.nansum(a, axis=-2) / np.maximum(count, 1), np.nan)


def advise(labels_PxN, correct_PxN, group_sizes: Sequence[int], *, rule: RareRule = RareRule(),
           n_boot: int = 200, seed: int = 0, gammas: Sequence[float] = (0.5, 1.0),
           target_risk: float = 0.1, level: float = 0.5, min_active: float = 0.5) -> Advice:
    """Per prompt and candidate N: Lemma 3.1 risk with a bootstrap band; per N: the mean risk, the
    concentration share, the median visits to a first rare sample in an active group and F-GRPO's
    expected focal weight; and a recommendation.

    The recommendation: risk is low at small N only because groups are rarely active there (no
    learning signal), so only N at or above the peak of the mean risk count. Among those, the
    smallest N whose mean risk (upper 95 % bootstrap bound) is at most `target_risk`, with plain
    GRPO; if none is, the largest candidate N with F-GRPO, at the smaller γ when most of the
    prompts there are in the concentration regime and the larger one otherwise. Every recommended N
    must also leave at least `min_active` of the groups active on average over all prompts
    (Pr(active) = 1 − μ̂^N − (1 − μ̂)^N, which needs only μ̂); when even the largest candidate does
    not, the model is reported too weak (or too strong) for RL at these N.
    """
    ns = np.asarray(list(group_sizes), np.float64)
    if ns.size == 0 or np.any(ns < 1) or np.any(ns != np.floor(ns)) or np.any(ns > 2**31):
        raise CatsimError("group sizes must be a non-empty list of whole numbers in [1, 2^31]")
    if not 0 < target_risk < 1:
        raise CatsimError(f"target_risk must lie in (0, 1), got {target_risk}")
    if not gammas or any(not (math.isfinite(g) and g > 0) for g in gammas):
        raise CatsimError("gammas must be positive numbers")
    mu, tau = masses_from_samples(labels_PxN, correct_PxN, rule)
    n_samples = int(np.asarray(correct_PxN).shape[1])
    has_rare = (tau > 0) & (mu > 0)
    risk = group_risk(mu[:, None], tau[:, None], ns[None, :])
    mu_b, tau_b = bootstrap_masses(labels_PxN, correct_PxN, rule, n_boot=n_boot, seed=seed)
    risk_b = group_risk(mu_b[:, :, None], tau_b[:, :, None], ns[None, None, :])  # [B, P, K]
    with warnings.catch_warnings():  # all-NaN columns (prompts without a rare subset) are expected
        warnings.simplefilter("ignore", RuntimeWarning)
        risk_lo = np.nanquantile(risk_b, 0.05, axis=0)
        risk_hi = np.nanquantile(risk_b, 0.95, axis=0)
    risk_lo = np.where(has_rare[:, None], risk_lo, np.nan)
    risk_hi = np.where(has_rare[:, None], risk_hi, np.nan)
    mean_risk = _nanmean_rows(risk)
    means_b = _nanmean_rows(risk_b)  # [B, K]
    with warnings.catch_warnings():  # all-NaN columns (prompts without a rare subset) are expected
        warnings.simplefilter("ignore", RuntimeWarning)
        mean_lo, mean_hi = np.nanquantile(means_b, 0.05, axis=0), np.nanquantile(means_b, 0.95, axis=0)
    # the band of a mean that does not exist (no prompt showed a rare subset) does not either, even
    # where bootstrap resamples find rare answers the samples themselves do not
    mean_lo, mean_hi = np.where(np.isnan(mean_risk), np.nan, mean_lo), np.where(np.isnan(mean_risk), np.nan, mean_hi)
    # not seeing a rare answer in n samples bounds its mass, it does not make it zero: at 95 %,
    # (1 − τ)^n ≥ 0.05, i.e. τ ≤ 1 − 0.05^(1/n) (≈ 3/n); the risk of the prompts without a seen rare
    # subset at that bound
    unseen_bound = float(1.0 - 0.05 ** (1.0 / n_samples))
    unseen = (mu > 0) & ~has_rare
    at_bound = group_risk(mu[unseen, None], np.minimum(unseen_bound, mu[unseen])[:, None], ns[None, :])
    risk_at_bound = at_bound.mean(axis=0) if np.any(unseen) else np.full(ns.size, np.nan)
    conc = concentration(mu, tau, ns, level)
    share = conc[has_rare].mean(axis=0) if np.any(has_rare) else np.full(ns.size, np.nan)
    steps = steps_to_rare(mu[:, None], tau[:, None], ns[None, :])
    with warnings.catch_warnings():  # all-NaN columns (prompts without a rare subset) are expected
        warnings.simplefilter("ignore", RuntimeWarning)
        median_steps = np.nanmedian(np.where(has_rare[:, None], steps, np.nan), axis=0)
    weights = {float(g): expected_focal_weight(mu, ns, g) for g in gammas}
    active = np.asarray(active_probability(ns[None, :], np.clip(mu[:, None], 0.0, 1.0)), np.float64)
    mean_active = active[has_rare].mean(axis=0) if np.any(has_rare) else np.full(ns.size, np.nan)
    active_share = active.mean(axis=0)
    busy = active_share >= min_active

    n_rare = int(has_rare.sum())
    too_weak = not bool(busy[-1])
    if too_weak:
        rec_n, rec_gamma = int(ns[-1]), 0.0
        side = "wrong" if np.mean(mu) < 0.5 else "correct"
        reasoning = (f"The model is too {'weak' if side == 'wrong' else 'strong'} for RL at these group sizes: "
                     f"mean μ̂ = {np.mean(mu):.3f} over {mu.size} prompts, so even at the largest candidate "
                     f"N = {rec_n} only {active_share[-1]:.0%} of the groups are expected to be active "
                     f"(Lemma 3.1, 1 − μ̂^N − (1 − μ̂)^N; below {min_active:.0%}); the others are all {side} and "
                     f"carry no learning signal. Train the warm-up further (or take a larger N) before RL.")
    elif n_rare == 0:
        k = int(np.argmax(busy))
        rec_n, rec_gamma = int(ns[k]), 0.0
        top = int(np.nanargmax(risk_at_bound)) if np.any(np.isfinite(risk_at_bound)) else k
        reasoning = (f"None of the {mu.size} prompts showed a rare correct answer under rule {rule} in "
                     f"{n_samples} samples each. That bounds the rare mass, it does not make it zero: a correct "
                     f"answer never seen in {n_samples} samples has mass below 1 − 0.05^(1/{n_samples}) = "
                     f"{unseen_bound:.3f} (95 %), and at that bound the mean Lemma 3.1 risk of these prompts is "
                     f"{risk_at_bound[k]:.3f} at N = {rec_n} (largest {risk_at_bound[top]:.3f}, at "
                     f"N = {int(ns[top])}). The smallest candidate N that keeps at least {min_active:.0%} of the "
                     f"groups active is N = {rec_n} ({active_share[k]:.0%} expected active): take it with plain "
                     f"GRPO (γ = 0), or sample more per prompt (--n) to see rarer answers and tighten the bound.")
    else:
        peak = int(np.nanargmax(mean_risk))
        head = (f"{n_rare} of {mu.size} prompts have a rare correct subset (rule {rule}; mean "
                f"τ̂ = {np.mean(tau[has_rare]):.3g}, mean μ̂ = {np.mean(mu[has_rare]):.3g}). Their mean Lemma 3.1 "
                f"risk peaks at N = {int(ns[peak])} ({mean_risk[peak]:.3f}); below that N it is low only "
                f"because groups are rarely active (no learning signal). ")
        fine = [k for k in range(peak, ns.size) if mean_hi[k] <= target_risk and busy[k]]
        if fine:
            k = fine[0]
            rec_n, rec_gamma = int(ns[k]), 0.0
            reasoning = head + (f"The smallest larger N whose mean risk is at most {target_risk:g} (upper 95 % "
                                f"bootstrap bound) is N = {rec_n}: mean risk {mean_risk[k]:.3f} [{mean_lo[k]:.3f}, "
                                f"{mean_hi[k]:.3f}], groups active with probability {mean_active[k]:.2f}, "
                                f"{share[k]:.0%} of these prompts in the concentration regime. Plain GRPO "
                                f"(γ = 0) suffices there; between N = {int(ns[peak])} and N = {rec_n} rare "
                                f"answers are lost more often.")
        else:
            k = ns.size - 1
            rec_n = int(ns[k])
            rec_gamma = float(min(gammas)) if share[k] > 0.5 else float(max(gammas))
            g = np.nanmean(weights[rec_gamma][has_rare, k])
            reasoning = head + (f"No candidate N from there on brings it under {target_risk:g}; at the largest, "
                                f"N = {rec_n}, it is {mean_risk[k]:.3f} [{mean_lo[k]:.3f}, {mean_hi[k]:.3f}] and "
                                f"{share[k]:.0%} of these prompts are in the concentration regime. Use the largest N "
                                f"you can afford with F-GRPO γ = {rec_gamma:g} (expected focal weight of their "
                                f"active groups {g:.2f}), so that prompts the policy already solves pull less "
                                f"mass from their rare answers.")
    return Advice(ns.astype(np.int64), str(rule), n_samples, mu, tau, has_rare, risk, risk_lo, risk_hi,
                  mean_risk, mean_lo, mean_hi, share, median_steps, mean_active, active_share, too_weak, weights,
                  unseen_bound, risk_at_bound, rec_n, rec_gamma, reasoning)
