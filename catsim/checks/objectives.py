"""`catsim verify` checks for catsim.objectives: the shared advantages, focal weights and losses.

Each check compares the library against an independent reference: SciPy quadrature for the App. N
multiplier m_γ, the THEORY.md §2 worked example (hand arithmetic) through jax.grad of the shared
losses, and the closed form of mean|A_GRPO| against explicit groups.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
from scipy import integrate

from catsim.checks import CheckResult
from catsim.numerics import x64
from catsim.objectives import advantages, focal, losses


def _m_gamma_quadrature(gamma: float) -> float:
    num, _ = integrate.quad(lambda m: (1 - m) ** gamma * math.sqrt(m * (1 - m)), 0, 1, epsabs=1e-14)
    den, _ = integrate.quad(lambda m: math.sqrt(m * (1 - m)), 0, 1, epsabs=1e-14)
    return num / den


def _subset_change(p: np.ndarray, dz: np.ndarray, subset: list[int]) -> float:
    return float(p[subset] @ dz[subset] - p[subset].sum() * (p @ dz))


def run(quick: bool) -> Iterator[CheckResult]:
    gammas = (0.5, 1.0, 2.0) if quick else (0.25, 0.5, 1.0, 2.0, 4.0)
    err = max(
        abs(focal.low_lr_multiplier(g) - _m_gamma_quadrature(g)) / _m_gamma_quadrature(g)
        for g in gammas
    )
    yield CheckResult("objectives: m_gamma = B(3/2,g+3/2)/B(3/2,3/2) vs quadrature", err, 1e-9)
    yield CheckResult(
        "objectives: m_0.5 = 32/(15 pi) (~0.679)",
        abs(focal.low_lr_multiplier(0.5) - 32 / (15 * math.pi)),
        1e-14,
        kind="abs",
    )

    p = np.array([0.4, 0.1, 0.1, 0.2, 0.1, 0.1])
    with x64():
        a = advantages.grpo(jnp.array([1.0, 1.0, 0.0, 0.0]), eps=0.0)
        draws = jnp.array([0, 0, 3, 4])

        def logprob_loss(z):
            return losses.token_mean(losses.reinforce_loss(losses.action_log_probs(z, draws), a))

        dz = -np.asarray(jax.grad(logprob_loss)(jnp.log(jnp.asarray(p))))

        distinct, rewards = jnp.array([0, 3, 4]), jnp.array([1.0, 0.0, 0.0])

        def linear_loss(z):
            terms = losses.linear_prob_surrogate_loss(losses.action_log_probs(z, distinct), rewards)
            return jnp.sum(terms) / 4

        dz_lin = -np.asarray(jax.grad(linear_loss)(jnp.log(jnp.asarray(p))))
    err = max(
        abs(_subset_change(p, dz, [0, 1, 2]) - 0.125),
        abs(_subset_change(p, dz, [1, 2]) + 0.025),
    )
    yield CheckResult(
        "objectives: log-prob rule worked example (dQpos=.125, dQu=-.025)", err, 1e-12, "abs"
    )
    err = max(
        abs(_subset_change(p, dz_lin, [0, 1, 2]) - 0.0124),
        abs(_subset_change(p, dz_lin, [1, 2]) + 0.0052),
    )
    yield CheckResult(
        "objectives: eq. 5 worked example (dQpos=.0124, dQu=-.0052)", err, 1e-12, "abs"
    )

    worst = 0.0
    with x64():
        for n, x in ((8, 3), (16, 1), (32, 20)):
            group = jnp.array([1.0] * x + [0.0] * (n - x))
            mean_abs = float(jnp.mean(jnp.abs(advantages.grpo(group, eps=0.0))))
            worst = max(worst, abs(mean_abs - float(focal.mean_abs_grpo_advantage(x / n))))
    yield CheckResult(
        "objectives: mean|A_GRPO| = 2 sqrt(mu(1-mu)) on explicit groups", worst, 1e-12, "abs"
    )
