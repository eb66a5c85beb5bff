"""Mass redistribution under one policy-gradient step of a categorical policy (F-GRPO §2.3,
Prop. 3.2, App. C-H, J; BroRL = Hu et al. 2025 eq. 17, Lemma 2, Cor. 3).

Policy p = softmax(z) over V actions split into correct P and incorrect actions. A group of N
i.i.d. draws `draws_N` defines A / B = distinct sampled correct / incorrect actions and U = the
unsampled actions. The quantities tracked (THEORY.md §2):

    Qpos = Σ_P p           Qu,pos = Σ_{U∩P} p = Qpos - Ppos     Ppos = Σ_A p, Pneg = Σ_B p
    A2 = Σ_A p²  B2 = Σ_B p²  Upos,2 = Σ_{U∩P} p²  Uneg,2 = Σ_{U\\P} p²  U2 = Upos,2 + Uneg,2

One SGD step z -> z + Δz with Δz = -η ∇_z loss, where the loss is built from the SHARED objectives
(`catsim.objectives`), never re-derived here:

    rule "paper"   (eq. 5)   loss = -(1/N) Σ_{a∈A∪B} g·R_a·p_a       (distinct sets, raw rewards)
    rule "linear"  (App. J)  loss = -(1/N) Σ_j w_j p_{o_j}            (repeats counted)
    rule "logprob" (REINF.)  loss = -(1/N) Σ_j w_j log p_{o_j}        (repeats counted)

with per-draw weights w = g·advantage(R) (`raw` R, `centered` R - R̄, `grpo` (R - R̄)/(std + ε)) and
the focal weight g = (1 - μ̂)^γ. The change of a subset mass Q_S is reported two ways:

    first order  ΔQ_S ≈ Σ_{i∈S} p_i Δz_i - Q_S Σ_j p_j Δz_j           (subset-mass identity)
                        └ direct drift ┘   └ normalisation coupling ┘
    exact        ΔQ_S = [Σ_S p_i expm1(Δz_i) - Q_S Σ_j p_j expm1(Δz_j)] / (1 + Σ_j p_j expm1(Δz_j)),
                 which is softmax(z + Δz) summed over S minus Q_S, written without cancellation.

Closed forms (each proved symbolically in `catsim.theory.mass_symbolic` and checked numerically
against the gradient path in `catsim.checks.mass_redistribution`): `prop32_dqupos`,
`hu_eq17_dqpos`, `linear_rule_first_order`, `logprob_rule_first_order`, `grpo_logprob_first_order`,
`expected_unsampled_second_moment`, `pass_at_k`, `expected_sampled_correct_mass`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from catsim.errors import CatsimError

__all__ = [
    "ADVANTAGES",
    "RULES",
    "GroupStats",
    "MassStepConfig",
    "MassStepResult",
    "draw_weights",
    "exact_change",
    "expected_sampled_correct_mass",
    "expected_unsampled_second_moment",
    "first_order_change",
    "group_stats",
    "grpo_logprob_first_order",
    "hu_eq17_dqpos",
    "linear_rule_first_order",
    "logit_step",
    "logprob_rule_first_order",
    "mass_step",
    "paper_initial_logits",
    "pass_at_k",
    "prop32_dqupos",
    "validate_group",
]

RULES = ("paper", "linear", "logprob")
ADVANTAGES = ("raw", "centered", "grpo")
DEFAULT_ADVANTAGE = {"paper": "raw", "linear": "centered", "logprob": "grpo"}


@dataclass(frozen=True)
class MassStepConfig:
    """One policy-gradient step on a categorical policy."""

    rule: str = "logprob"  # "paper" (eq. 5), "linear" (App. J surrogate) or "logprob" (REINFORCE)
    advantage: str | None = None  # "raw", "centered" or "grpo"; None = the rule's default (see DEFAULT_ADVANTAGE)
    reward_correct: float = 1.0  # Rc, reward of a sampled correct action
    reward_wrong: float = 0.0  # Rw < Rc, reward of a sampled incorrect action
    gamma: float = 0.0  # focal exponent γ: weights scaled by g = (1 - μ̂)^γ (0 = no focal weight)
    eps: float = 0.0  # ε in the GRPO std normalisation (0 = the theory's exact form)
    eta: float = 0.01  # SGD step size η

    def resolved_advantage(self) -> str:
        return self.advantage or DEFAULT_ADVANTAGE[self.rule]

    def validate(self) -> None:
        if self.rule not in RULES:
            raise CatsimError(f"rule must be one of {', '.join(RULES)}, got {self.rule!r}")
        adv = self.resolved_advantage()
        if adv not in ADVANTAGES:
            raise CatsimError(f"advantage must be one of {', '.join(ADVANTAGES)}, got {adv!r}")
        if self.rule == "paper" and adv != "raw":
            raise CatsimError("rule 'paper' (eq. 5) is defined on raw rewards; use --advantage raw")
        for name in ("reward_correct", "reward_wrong", "gamma", "eps", "eta"):
            if not math.isfinite(getattr(self, name)):
                raise CatsimError(f"{name} must be finite")
        if not self.reward_correct > self.reward_wrong:
            raise CatsimError("need reward_correct > reward_wrong")
        if self.gamma < 0 or self.eps < 0 or self.eta <= 0:
            raise CatsimError("need gamma >= 0, eps >= 0 and eta > 0")


def validate_group(probs: Any, correct: Any, draws: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Check and convert (probs [V], correct indices or bool mask [V], draws [N]).

    Returns (probs float64 [V], correct_mask bool [V], draws int [N]).
    """
    try:
        p = np.asarray(probs, dtype=np.float64)
    except (TypeError, ValueError):
        raise CatsimError("probabilities must be numbers") from None
    if p.ndim != 1 or p.size < 2:
        raise CatsimError("probabilities must be a list of at least 2 numbers")
    if not np.all(np.isfinite(p)) or np.any(p <= 0):
        raise CatsimError("probabilities must be finite and > 0 (a softmax policy has full support)")
    if abs(p.sum() - 1.0) > 1e-9:
        raise CatsimError(f"probabilities must sum to 1, they sum to {p.sum():.12g}")
    correct_arr = np.asarray(correct)
    if correct_arr.dtype == bool:
        if correct_arr.shape != p.shape:
            raise CatsimError("correct mask must have one entry per action")
        mask = correct_arr.copy()
    else:
        idx = _indices(correct_arr, p.size, "correct")
        mask = np.zeros(p.size, bool)
        mask[idx] = True
    if not mask.any():
        raise CatsimError("the correct set is empty")
    draws_arr = _indices(np.asarray(draws), p.size, "draws")
    if draws_arr.size == 0:
        raise CatsimError("draws are empty")
    return p / p.sum(), mask, draws_arr


def _indices(values: np.ndarray, size: int, name: str) -> np.ndarray:
    if values.size == 0:
        return values.astype(int).ravel()
    if values.dtype.kind not in "iu":
        if values.dtype.kind != "f" or np.any(values != np.round(values)):
            raise CatsimError(f"{name} must be whole-number action indices")
    values = values.astype(int).ravel()
    if np.any(values < 0) or np.any(values >= size):
        raise CatsimError(f"{name} out of range: indices must lie in 0..{size - 1}")
    return values


@dataclass(frozen=True)
class GroupStats:
    """The sums of THEORY.md §2 for one policy and one group (all floats; n = group size N)."""

    n: int
    qpos: float
    qneg: float
    ppos: float
    pneg: float
    qupos: float
    a2: float
    b2: float
    upos2: float
    uneg2: float
    u2: float
    success_rate: float  # μ̂ = X/N (draws counted with repeats)
    pbar_correct: float  # mean probability of the sampled correct draws (repeats counted)
    pbar_wrong: float  # same for the wrong draws


def group_stats(probs: Any, correct: Any, draws: Any) -> GroupStats:
    """GroupStats for probs [V], correct (indices or mask [V]) and draws [N]."""
    p, mask, draws = validate_group(probs, correct, draws)
    sampled = np.zeros(p.size, bool)
    sampled[draws] = True
    a, b = sampled & mask, sampled & ~mask
    u_pos, u_neg = ~sampled & mask, ~sampled & ~mask
    p2 = p * p
    is_correct = mask[draws]
    nan = float("nan")
    return GroupStats(
        n=int(draws.size),
        qpos=float(p[mask].sum()),
        qneg=float(p[~mask].sum()),
        ppos=float(p[a].sum()),
        pneg=float(p[b].sum()),
        qupos=float(p[u_pos].sum()),
        a2=float(p2[a].sum()),
        b2=float(p2[b].sum()),
        upos2=float(p2[u_pos].sum()),
        uneg2=float(p2[u_neg].sum()),
        u2=float(p2[u_pos].sum() + p2[u_neg].sum()),
        success_rate=float(is_correct.mean()),
        pbar_correct=float(p[draws][is_correct].mean()) if is_correct.any() else nan,
        pbar_wrong=float(p[draws][~is_correct].mean()) if (~is_correct).any() else nan,
    )


# --------------------------------------------------------------------------------------------
# The step itself: Δz from jax.grad of the shared surrogate losses
# --------------------------------------------------------------------------------------------


def draw_weights(rewards_N, config: MassStepConfig):
    """Per-draw weights w_j = g·advantage(R)_j from the shared objectives ([N] -> [N], jnp)."""
    hyper = (config.reward_correct, config.reward_wrong, config.gamma, config.eps)
    return _draw_weights(rewards_N, hyper, config.resolved_advantage())


def _draw_weights(rewards_N, hyper, advantage: str):
    from catsim.objectives import advantages, focal

    reward_correct, reward_wrong, gamma, eps = hyper
    if advantage == "raw":
        adv = rewards_N
    elif advantage == "centered":
        adv = advantages.mean_centred(rewards_N)
    else:
        adv = advantages.grpo(rewards_N, eps=eps, ddof=0)
    rate = advantages.success_rate(rewards_N, reward_correct=reward_correct, reward_wrong=reward_wrong)
    return focal.apply_focal(adv, rate, gamma)


def _loss(logits_V, correct_V, draws_N, hyper, rule: str, advantage: str):
    """The surrogate loss of `rule` at logits z (shared objectives; see module docstring).

    hyper = (Rc, Rw, γ, ε) as traced scalars, so one compilation serves every value."""
    import jax.numpy as jnp

    from catsim.objectives import losses

    rewards_N = jnp.where(correct_V[draws_N], hyper[0], hyper[1])
    weights_N = _draw_weights(rewards_N, hyper, advantage)
    logp_N = losses.action_log_probs(logits_V, draws_N)
    if rule == "logprob":
        return losses.token_mean(losses.reinforce_loss(logp_N, weights_N))
    if rule == "linear":
        return losses.token_mean(losses.linear_prob_surrogate_loss(logp_N, weights_N))
    # Paper eq. 5: each DISTINCT sampled action once, normalised by N (not by |A ∪ B|).
    # weights_N is g·R_j (raw rewards); a distinct action's weight is that of any of its draws.
    n_draws = draws_N.shape[0]
    sampled_V = jnp.zeros(logits_V.shape[0], bool).at[draws_N].set(True)
    weight_V = jnp.zeros(logits_V.shape[0], weights_N.dtype).at[draws_N].set(weights_N)
    logp_V = losses.action_log_probs(logits_V, jnp.arange(logits_V.shape[0]))
    per_action = losses.linear_prob_surrogate_loss(logp_V, weight_V)
    return jnp.sum(jnp.where(sampled_V, per_action, 0.0)) / n_draws


def logit_step(logits: Any, correct_mask: Any, draws: Any, config: MassStepConfig) -> np.ndarray:
    """Δz = -η ∇_z loss(z) for one group, float64 [V] (jax.grad of the shared surrogate)."""
    import jax.numpy as jnp

    from catsim.numerics import x64

    with x64():
        hyper = jnp.asarray([config.reward_correct, config.reward_wrong, config.gamma, config.eps])
        grad = _jitted_grad()(jnp.asarray(logits, dtype=jnp.float64), jnp.asarray(correct_mask),
                              jnp.asarray(draws), hyper, config.rule, config.resolved_advantage())
        # η is applied outside the compiled function: Δz is linear in η (inf: refused by mass_step)
        with np.errstate(over="ignore"):
            return -config.eta * np.asarray(grad)


@functools.cache
def _jitted_grad():
    import jax

    return jax.jit(jax.grad(_loss), static_argnums=(4, 5))


@functools.cache
def _jitted_weights():
    import jax

    return jax.jit(_draw_weights, static_argnums=2)


def first_order_change(probs: Any, dz: Any, subset_mask: Any) -> tuple[float, float, float]:
    """(ΔQ_S, direct drift Σ_S p_i Δz_i, normalisation coupling -Q_S Σ_j p_j Δz_j), first order."""
    p, dz, s = np.asarray(probs, float), np.asarray(dz, float), np.asarray(subset_mask, bool)
    direct = float(np.sum(p[s] * dz[s]))
    coupling = -float(p[s].sum()) * float(np.sum(p * dz))
    return direct + coupling, direct, coupling


def exact_change(probs: Any, dz: Any, subset_mask: Any) -> float:
    """Σ_S softmax(z + Δz) - Q_S for p = softmax(z), evaluated without cancellation."""
    p, dz, s = np.asarray(probs, float), np.asarray(dz, float), np.asarray(subset_mask, bool)
    with np.errstate(over="ignore", invalid="ignore"):
        grow = np.expm1(dz)
        total = float(np.sum(p * grow))
        change = (float(np.sum(p[s] * grow[s])) - float(p[s].sum()) * total) / (1.0 + total)
    if math.isfinite(change):
        return change
    logits = np.log(p) + dz  # exp(Δz) overflowed (was printed as nan): the shifted softmax
    q = np.exp(logits - logits.max())
    return float(q[s].sum() / q.sum()) - float(p[s].sum())


@dataclass(frozen=True)
class MassStepResult:
    """First-order and exact changes of Qpos and Qu,pos for one step, with the named terms."""

    dqpos_first_order: float
    dqupos_first_order: float
    dqpos_exact: float
    dqupos_exact: float
    terms: dict  # {"dqpos"|"dqupos": {"direct_drift", "normalisation_coupling"}}
    closed_form: dict  # the rule's closed forms (Prop. 3.2 / eq. 17 / general forms), same keys
    stats: GroupStats
    delta_z: np.ndarray  # [V] the logit step

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        # JSON has no NaN: an undefined mean (no correct / no wrong draw) becomes None.
        out["stats"] = {k: (None if isinstance(v, float) and math.isnan(v) else v)
                        for k, v in dataclasses.asdict(self.stats).items()}
        out["delta_z"] = [float(x) for x in self.delta_z]
        return out


def mass_step(probs: Any, correct: Any, draws: Any, config: MassStepConfig) -> MassStepResult:
    """One SGD step on the shared surrogate from policy `probs` [V] and group `draws` [N]."""
    config.validate()
    p, mask, draws = validate_group(probs, correct, draws)
    stats = group_stats(p, mask, draws)
    dz = logit_step(np.log(p), mask, draws, config)
    if not np.all(np.isfinite(dz)):
        raise CatsimError(f"eta = {config.eta:g} overflows the logit step (not finite); take a smaller eta")
    sampled = np.zeros(p.size, bool)
    sampled[draws] = True
    u_pos = mask & ~sampled
    dqpos, qpos_direct, qpos_coupling = first_order_change(p, dz, mask)
    dqupos, upos_direct, upos_coupling = first_order_change(p, dz, u_pos)
    return MassStepResult(
        dqpos_first_order=dqpos,
        dqupos_first_order=dqupos,
        dqpos_exact=exact_change(p, dz, mask),
        dqupos_exact=exact_change(p, dz, u_pos),
        terms={
            "dqpos": {"direct_drift": qpos_direct, "normalisation_coupling": qpos_coupling},
            "dqupos": {"direct_drift": upos_direct, "normalisation_coupling": upos_coupling},
        },
        closed_form=closed_form_changes(p, mask, draws, config),
        stats=stats,
        delta_z=dz,
    )


# --------------------------------------------------------------------------------------------
# Closed forms (first order in η)
# --------------------------------------------------------------------------------------------


def prop32_dqupos(stats: GroupStats, rc: float, rw: float, eta: float) -> float:
    """Prop. 3.2: ΔQu,pos = (η/N)[-SR·Upos,2 - Qu,pos((Rc-SR)A2 + (Rw-SR)B2 - SR·U2)],
    SR = Rc·Ppos + Rw·Pneg. Valid for the paper's eq.-5 rule only (distinct sets, raw R)."""
    sr = rc * stats.ppos + rw * stats.pneg
    coupling = (rc - sr) * stats.a2 + (rw - sr) * stats.b2 - sr * stats.u2
    return eta / stats.n * (-sr * stats.upos2 - stats.qupos * coupling)


def hu_eq17_dqpos(stats: GroupStats, rc: float, rw: float, eta: float) -> float:
    """Hu et al. (BroRL) eq. 17 for the eq.-5 rule:
    ΔQpos = (η/N)[(Rc-SR)Qneg·A2 + (SR-Rw)Qpos·B2 + SR(Qpos·Uneg,2 - Qneg·Upos,2)]."""
    sr = rc * stats.ppos + rw * stats.pneg
    return eta / stats.n * (
        (rc - sr) * stats.qneg * stats.a2
        + (sr - rw) * stats.qpos * stats.b2
        + sr * (stats.qpos * stats.uneg2 - stats.qneg * stats.upos2)
    )


def _per_action_weight_sums(size: int, draws: np.ndarray, weights: np.ndarray) -> np.ndarray:
    c = np.zeros(size)
    np.add.at(c, draws, weights)
    return c


def linear_rule_first_order(probs, correct_mask, draws, weights, eta) -> tuple[float, float]:
    """(ΔQpos, ΔQu,pos) for the linear surrogate with repeated draws (App. J), first order:
    with c_i = Σ_{j: o_j = i} w_j and S = Σ_j w_j p_{o_j} = Σ_i c_i p_i,
        ΔQ_S = (η/N)[Σ_S c_i p_i² - S·Σ_S p_i² - Q_S(Σ_i c_i p_i² - S·Σ_i p_i²)].
    For distinct draws with w = R this is Prop. 3.2 / eq. 17."""
    p, mask = np.asarray(probs, float), np.asarray(correct_mask, bool)
    draws = np.asarray(draws)
    c = _per_action_weight_sums(p.size, draws, np.asarray(weights, float))
    s = float(np.sum(c * p))
    coupling = float(np.sum(c * p * p)) - s * float(np.sum(p * p))
    sampled = np.zeros(p.size, bool)
    sampled[draws] = True
    out = []
    for subset in (mask, mask & ~sampled):
        direct = float(np.sum(c[subset] * p[subset] ** 2)) - s * float(np.sum(p[subset] ** 2))
        out.append(eta / draws.size * (direct - float(p[subset].sum()) * coupling))
    return out[0], out[1]


def logprob_rule_first_order(probs, correct_mask, draws, weights, eta) -> tuple[float, float]:
    """(ΔQpos, ΔQu,pos) for log-prob REINFORCE, Δz = (η/N)Σ_j w_j(e_{o_j} - p), first order:
    with S' = Σ_j w_j,
        ΔQu,pos = (η/N)[-S'·Upos,2 - Qu,pos(Σ_j w_j p_{o_j} - S'·Σ_a p_a²)]        (sum over all a)
        ΔQpos   = (η/N)[Σ_{j: o_j∈P} w_j p_{o_j} - S'·Σ_P p² - Qpos(Σ_j w_j p_{o_j} - S'·Σ_a p_a²)].
    The coupling holds FIRST moments Σ_j w_j p_{o_j}, where Prop. 3.2 has second moments."""
    p, mask = np.asarray(probs, float), np.asarray(correct_mask, bool)
    draws, w = np.asarray(draws), np.asarray(weights, float)
    s_prime = float(w.sum())
    first = float(np.sum(w * p[draws]))
    coupling = first - s_prime * float(np.sum(p * p))
    sampled = np.zeros(p.size, bool)
    sampled[draws] = True
    u_pos = mask & ~sampled
    direct_pos = float(np.sum((w * p[draws])[mask[draws]])) - s_prime * float(np.sum(p[mask] ** 2))
    dqpos = eta / draws.size * (direct_pos - float(p[mask].sum()) * coupling)
    dqupos = eta / draws.size * (-s_prime * float(np.sum(p[u_pos] ** 2)) - float(p[u_pos].sum()) * coupling)
    return dqpos, dqupos


def grpo_logprob_first_order(stats: GroupStats, eta: float, g: float = 1.0) -> tuple[float, float]:
    """GRPO special case (log-prob rule, mean-centred weights with population std, ε = 0):
        ΔQpos   = g·η·σ·(Qneg·p̄_C + Qpos·p̄_W) >= 0,
        ΔQu,pos = -g·η·Qu,pos·σ·(p̄_C - p̄_W),        σ = sqrt(μ̂(1-μ̂)).
    An inactive group (μ̂ ∈ {0, 1}) gives (0, 0). g is the focal weight (1-μ̂)^γ."""
    mu = stats.success_rate
    if mu in (0.0, 1.0):
        return 0.0, 0.0
    sigma = math.sqrt(mu * (1 - mu))
    dqpos = g * eta * sigma * (stats.qneg * stats.pbar_correct + stats.qpos * stats.pbar_wrong)
    dqupos = -g * eta * stats.qupos * sigma * (stats.pbar_correct - stats.pbar_wrong)
    return dqpos, dqupos


def closed_form_changes(p: np.ndarray, mask: np.ndarray, draws: np.ndarray, config: MassStepConfig) -> dict:
    """The closed-form first-order (ΔQpos, ΔQu,pos) that applies to `config`, with its name."""
    import jax.numpy as jnp

    from catsim.numerics import x64

    with x64():
        rewards = jnp.where(jnp.asarray(mask)[draws], config.reward_correct, config.reward_wrong)
        hyper = jnp.asarray([config.reward_correct, config.reward_wrong, config.gamma, config.eps])
        weights = np.asarray(_jitted_weights()(rewards, hyper, config.resolved_advantage()), float)
    stats = group_stats(p, mask, draws)
    rate = stats.success_rate
    g = (1.0 - rate) ** config.gamma
    out: dict = {}
    if config.rule == "paper":
        rc, rw = g * config.reward_correct, g * config.reward_wrong
        out = {"name": "Prop. 3.2 and Hu et al. eq. 17",
               "dqpos": hu_eq17_dqpos(stats, rc, rw, config.eta),
               "dqupos": prop32_dqupos(stats, rc, rw, config.eta)}
    elif config.rule == "linear":
        dqpos, dqupos = linear_rule_first_order(p, mask, draws, weights, config.eta)
        out = {"name": "linear surrogate, repeated draws", "dqpos": dqpos, "dqupos": dqupos}
    else:
        dqpos, dqupos = logprob_rule_first_order(p, mask, draws, weights, config.eta)
        out = {"name": "log-prob REINFORCE", "dqpos": dqpos, "dqupos": dqupos}
        if config.resolved_advantage() == "grpo" and config.eps == 0.0:
            gq, gu = grpo_logprob_first_order(stats, config.eta, g)
            out["grpo_special_case"] = {"dqpos": gq, "dqupos": gu}
    return out


# --------------------------------------------------------------------------------------------
# Expectations over groups (BroRL, App. H)
# --------------------------------------------------------------------------------------------


def expected_unsampled_second_moment(probs: Any, n: int) -> float:
    """E[U2] = Σ_i p_i²(1 - p_i)^N over N i.i.d. draws (Hu et al. Lemma 2 / Cor. 3)."""
    p = np.asarray(probs, float)
    return float(np.sum(p * p * np.exp(n * np.log1p(-p))))


def pass_at_k(qpos: Any, k: Any) -> Any:
    """pass@k = 1 - (1 - Qpos)^k for one prompt of a categorical policy (BroRL)."""
    return -np.expm1(np.asarray(k, float) * np.log1p(-np.asarray(qpos, float)))


def expected_sampled_correct_mass(probs_correct: Any, k: Any) -> Any:
    """App. H: E[Ppos | X = k] = Σ_{o∈C} π(o)(1 - (1 - q(o))^k), q = π/μ on the correct set C.

    Given that k of the N draws are correct, those k are i.i.d. from π restricted to C.
    Non-decreasing in k (each term is). probs_correct: [|C|] the probabilities π(o), o ∈ C.
    """
    pc = np.asarray(probs_correct, float)
    q = pc / pc.sum()
    k = np.asarray(k, float)
    return np.sum(pc * -np.expm1(np.multiply.outer(k, np.log1p(-q))), axis=-1)


def paper_initial_logits(num_actions: int = 128_000, num_correct: int = 10_000) -> tuple[np.ndarray, np.ndarray]:
    """The §5.1 / App. J initialisation: one anchor correct logit 5, other correct 3, incorrect 0.

    Returns (logits [V], correct_mask [V]) with the correct actions first (anchor = action 0).
    """
    logits = np.zeros(num_actions)
    logits[:num_correct] = 3.0
    logits[0] = 5.0
    mask = np.zeros(num_actions, bool)
    mask[:num_correct] = True
    return logits, mask
