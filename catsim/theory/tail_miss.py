"""Tail-miss probability of Lemma 3.1 (F-GRPO, arXiv 2602.06717), accurate in float64.

One prompt, a group of N i.i.d. rollouts, three disjoint outcome regions with masses

    rare      E       : tau              (a rare correct subset)
    other     P \\ E   : mu_pos - tau     (the other correct outcomes)
    wrong     N       : 1 - mu_pos

B = "the group is active (>= 1 correct and >= 1 wrong draw) and E received no draw":

    Pr(B)      = (1 - tau)^N - (mu_pos - tau)^N - (1 - mu_pos)^N          (Lemma 3.1)
               = (1 - tau)^N * [1 - r^N - (1 - r)^N],   r = (mu_pos - tau) / (1 - tau)
    Pr(active) = 1 - mu_pos^N - (1 - mu_pos)^N

The naive difference cancels catastrophically (relative error 1.0 in float32 on ordinary inputs,
~1e-7 in float64 when mu_pos -> 1 or mu_pos - tau is tiny). Here both are evaluated in factored form:

- the bracket 1 - r^N - s^N (s = 1 - r) is computed from the smaller of r, s, called q <= 1/2, as
  -expm1(N*log1p(-q)) - q^N. Both terms are well conditioned: the first has relative error of a few
  ulp for every N, the second never cancels more than a factor 3 against the first (N >= 2).
- the prefactor (1 - tau)^N is raised by binary powering in double-word ("double-double")
  arithmetic, so its error does not grow with |N*log(1 - tau)| the way exp(N*log1p(-tau)) does.

Accuracy (measured against 50-digit mpmath by `catsim verify`, see catsim/checks/tail_miss.py):
relative error below 1e-14 for 1 <= N <= 2^20, 1e-12 <= tau < mu_pos <= 1, including mu_pos -> 1
and mu_pos - tau down to one ulp, wherever Pr(B) >= 1e-280 (below that the low word of the
double-double prefactor is subnormal and accuracy degrades gracefully towards underflow).

`tail_miss_probability_jax` is the same algorithm in jax.numpy, usable under `jax.jit`; it is as
accurate in float64 (inside `catsim.numerics.x64()`) and about 1e-6 relative in float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize

from catsim.errors import CatsimError

__all__ = [
    "TailMissPeak",
    "active_fraction_prediction",
    "active_probability",
    "regime",
    "regime_boundaries",
    "tail_miss_continuous",
    "tail_miss_peak",
    "tail_miss_probability",
    "tail_miss_probability_jax",
    "tail_miss_probability_masses",
]


# --------------------------------------------------------------------------------------------
# Input validation (host side)
# --------------------------------------------------------------------------------------------


def _as_float_array(value: Any, name: str) -> np.ndarray:
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise CatsimError(f"{name} must be a number or an array of numbers, got {value!r}") from None
    if array.size == 0:
        raise CatsimError(f"{name} is empty")
    if not np.all(np.isfinite(array)):
        raise CatsimError(f"{name} must be finite, got {value!r}")
    return array


def _as_group_size(n: Any) -> np.ndarray:
    array = _as_float_array(n, "n")
    if np.any(array < 1) or np.any(array != np.floor(array)):
        bad = array[(array < 1) | (array != np.floor(array))].flat[0]
        raise CatsimError(f"group size n must be a whole number >= 1, got {bad:g}")
    if np.any(array > 2.0**53):
        raise CatsimError("group size n must be <= 2^53")
    return array


def _check_tau_mu(tau: np.ndarray, mu_pos: np.ndarray) -> None:
    if np.any(mu_pos > 1) or np.any(mu_pos <= 0):
        bad = mu_pos[(mu_pos > 1) | (mu_pos <= 0)].flat[0]
        raise CatsimError(f"mu_pos must satisfy 0 < mu_pos <= 1, got {bad:g}")
    if np.any(tau <= 0):
        raise CatsimError(f"tau must be > 0, got {tau[tau <= 0].flat[0]:g}")
    bad = np.broadcast_to(tau >= mu_pos, np.broadcast_shapes(tau.shape, mu_pos.shape))
    if np.any(bad):
        t, m = np.broadcast_arrays(tau, mu_pos)
        raise CatsimError(f"need tau < mu_pos, got tau={t[bad].flat[0]:g} >= mu_pos={m[bad].flat[0]:g}")


def _broadcast(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    try:
        return tuple(np.broadcast_arrays(*arrays))
    except ValueError:
        shapes = ", ".join(str(a.shape) for a in arrays)
        raise CatsimError(f"arguments do not broadcast together: shapes {shapes}") from None


def _scalar_or_array(result: np.ndarray) -> np.ndarray | float:
    return float(result) if result.ndim == 0 else result


# --------------------------------------------------------------------------------------------
# Kernels shared by the NumPy and JAX versions (xp = numpy or jax.numpy)
# --------------------------------------------------------------------------------------------


def _split(xp, x, splitter):
    """Dekker's split: x = hi + lo exactly, each with at most half the significand bits."""
    t = splitter * x
    hi = t - (t - x)
    return hi, x - hi


def _two_prod(xp, a, b, splitter):
    """p + e = a*b exactly (Dekker's TwoProduct, no FMA needed)."""
    p = a * b
    a_hi, a_lo = _split(xp, a, splitter)
    b_hi, b_lo = _split(xp, b, splitter)
    e = ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
    return p, e


def _dd_mul(xp, x_hi, x_lo, y_hi, y_lo, splitter):
    """Double-word product (x_hi + x_lo)(y_hi + y_lo), relative error ~ 2^-104."""
    p, e = _two_prod(xp, x_hi, y_hi, splitter)
    e = e + (x_hi * y_lo + x_lo * y_hi)
    hi = p + e
    return hi, e - (hi - p)


def _one_minus_power(xp, base_small, n, splitter, n_bits):
    """(1 - base_small)^n for whole n >= 0 by binary powering in double-word arithmetic.

    1 - base_small is formed exactly as a double word (Fast2Sum; 0 <= base_small <= 1).
    """
    b_hi = 1.0 - base_small
    b_lo = (1.0 - b_hi) - base_small
    r_hi = xp.ones_like(b_hi)
    r_lo = xp.zeros_like(b_hi)
    remaining = n
    for _ in range(n_bits):
        odd = xp.remainder(remaining, 2.0) == 1.0
        m_hi, m_lo = _dd_mul(xp, r_hi, r_lo, b_hi, b_lo, splitter)
        r_hi = xp.where(odd, m_hi, r_hi)
        r_lo = xp.where(odd, m_lo, r_lo)
        remaining = xp.floor(remaining / 2.0)
        b_hi, b_lo = _dd_mul(xp, b_hi, b_lo, b_hi, b_lo, splitter)
    return r_hi + r_lo


def _log1p(xp, x):
    """log(1 + x) to a few ulp from `log` alone (Goldberg's trick).

    XLA's float64 log1p is off by ~1e-14 relative at x = -0.4, so neither backend's log1p is
    trusted: with u = fl(1 + x), log1p(x) = log(u) * x / (u - 1), exact when u = 1.
    """
    u = 1.0 + x
    safe = xp.where(u == 1.0, 2.0, u)
    return xp.where(u == 1.0, x, xp.log(safe) * (x / (safe - 1.0)))


def _active_bracket(xp, n, q):
    """1 - (1-q)^n - q^n for 0 <= q <= 1/2, without cancellation. n may be real (>= 1)."""
    big = -xp.expm1(n * _log1p(xp, -q))  # 1 - (1-q)^n, accurate also for tiny n*q
    small = xp.where(q > 0, xp.power(xp.where(q > 0, q, 0.5), n), 0.0)
    return xp.where(n == 1, 0.0, big - small)


def _bracket_from_masses(xp, n, m_other, m_wrong, one_minus_rare):
    """1 - r^n - (1-r)^n with r = m_other / (m_other + m_wrong), from whichever mass is smaller."""
    q = xp.minimum(m_other, m_wrong) / one_minus_rare
    return _active_bracket(xp, n, xp.minimum(q, 0.5))


def _n_bits(max_n: float) -> int:
    return max(1, int(max_n).bit_length())


# --------------------------------------------------------------------------------------------
# NumPy API
# --------------------------------------------------------------------------------------------

_SPLITTER_64 = 2.0**27 + 1.0
_SPLITTER_32 = 2.0**12 + 1.0


def tail_miss_probability_masses(
    n: Any, m_rare: Any, m_other: Any, m_wrong: Any
) -> np.ndarray | float:
    """Pr(B) of Lemma 3.1 from the three region masses (tau, mu_pos - tau, 1 - mu_pos).

    Use this form when the masses are known individually (e.g. tiny mu_pos - tau): nothing is
    subtracted. The masses must be >= 0 with m_rare > 0, m_other + m_wrong > 0 and sum to 1 within
    1e-9; the result is exact for the normalised distribution
    (m_rare, (1 - m_rare) * r, (1 - m_rare) * (1 - r)), r = m_other / (m_other + m_wrong).

    Shapes: all arguments broadcast together; returns an array of the broadcast shape
    (a float for scalar inputs).
    """
    n = _as_group_size(n)
    a = _as_float_array(m_rare, "m_rare")
    b = _as_float_array(m_other, "m_other")
    c = _as_float_array(m_wrong, "m_wrong")
    if np.any(a <= 0) or np.any(b < 0) or np.any(c < 0):
        raise CatsimError("masses must be >= 0 and m_rare > 0")
    n, a, b, c = _broadcast(n, a, b, c)
    if np.any(b + c <= 0):
        raise CatsimError("m_other + m_wrong must be > 0")
    if np.any(np.abs((a + b + c) - 1.0) > 1e-9):
        raise CatsimError("masses must sum to 1 (within 1e-9)")
    return _scalar_or_array(_tail_miss_numpy(n, a, b, c))


def _tail_miss_numpy(n, a, b, c):
    prefactor = _one_minus_power(np, a, n, _SPLITTER_64, _n_bits(np.max(n)))
    with np.errstate(under="ignore"):
        return prefactor * _bracket_from_masses(np, n, b, c, 1.0 - a)


def tail_miss_probability(n: Any, tau: Any, mu_pos: Any) -> np.ndarray | float:
    """Pr(B) of Lemma 3.1: the group is active and the rare correct subset E got no draw.

    n: group size N (whole number >= 1); tau: mass of E (> 0); mu_pos: total correct mass,
    tau < mu_pos <= 1. Arguments broadcast; returns float64 of the broadcast shape (a float for
    scalar inputs). Raises CatsimError for invalid input. Accuracy: see the module docstring.
    """
    n = _as_group_size(n)
    tau = _as_float_array(tau, "tau")
    mu_pos = _as_float_array(mu_pos, "mu_pos")
    _check_tau_mu(tau, mu_pos)
    n, tau, mu_pos = _broadcast(n, tau, mu_pos)
    # mu_pos - tau is correctly rounded; 1 - mu_pos is exact when it is the smaller mass
    # (Sterbenz, mu_pos >= 1/2), so the bracket loses nothing.
    return _scalar_or_array(_tail_miss_numpy(n, tau, mu_pos - tau, 1.0 - mu_pos))


def active_probability(n: Any, mu_pos: Any) -> np.ndarray | float:
    """Pr(active) = 1 - mu_pos^N - (1 - mu_pos)^N: the group has a correct and a wrong draw.

    n: whole number >= 1; 0 < mu_pos <= 1 (mu_pos = 0 is allowed too: never active).
    """
    n = _as_group_size(n)
    mu_pos = _as_float_array(mu_pos, "mu_pos")
    if np.any(mu_pos < 0) or np.any(mu_pos > 1):
        raise CatsimError("mu_pos must satisfy 0 <= mu_pos <= 1")
    n, mu_pos = _broadcast(n, mu_pos)
    with np.errstate(under="ignore"):
        q = np.minimum(mu_pos, 1.0 - mu_pos)
        return _scalar_or_array(_active_bracket(np, n, q))


def active_fraction_prediction(success_rate: Any, group_size: int) -> np.ndarray:
    """Pr(active) of Lemma 3.1 as the trainer, the plots and advise read it: the expected share of
    active groups of N rollouts at success rate μ, 1 − μ^N − (1 − μ)^N, elementwise in μ.

    `active_probability` with the success rate first and a whole-number group size; always an
    array (float64, the shape of `success_rate`).
    """
    if isinstance(group_size, bool) or int(group_size) != group_size or group_size < 1:
        raise CatsimError(f"group size must be a whole number >= 1, got {group_size!r}")
    mu = np.asarray(success_rate, np.float64)
    if not np.all(np.isfinite(mu)):
        raise CatsimError("success rates must lie in [0, 1]")
    return np.asarray(active_probability(np.full(mu.shape, float(group_size)), mu))


# --------------------------------------------------------------------------------------------
# JAX twin
# --------------------------------------------------------------------------------------------


def tail_miss_probability_jax(n, tau, mu_pos, *, max_n: int = 2**31):
    """jax.numpy twin of `tail_miss_probability`, usable under jax.jit / vmap / grad-free code.

    Same algorithm; dtype follows JAX (float64 inside `catsim.numerics.x64()`, else float32).
    n may be a traced array of whole numbers in [1, max_n]; `max_n` (static) fixes the number of
    binary-powering rounds. Inputs are validated only when they are concrete (not traced): under
    jit invalid input is the caller's responsibility and yields NaN.
    """
    import jax
    import jax.numpy as jnp

    concrete = not any(isinstance(x, jax.core.Tracer) for x in (n, tau, mu_pos))
    if concrete:
        checked_n = _as_group_size(n)
        _check_tau_mu(_as_float_array(tau, "tau"), _as_float_array(mu_pos, "mu_pos"))
        max_n = int(np.max(checked_n))
    dtype = jnp.result_type(float)
    n, tau, mu_pos = (jnp.asarray(x, dtype=dtype) for x in (n, tau, mu_pos))
    n, tau, mu_pos = jnp.broadcast_arrays(n, tau, mu_pos)
    splitter = _SPLITTER_64 if dtype == jnp.float64 else _SPLITTER_32
    prefactor = _one_minus_power(jnp, tau, n, splitter, _n_bits(max_n))
    bracket = _bracket_from_masses(jnp, n, mu_pos - tau, 1.0 - mu_pos, 1.0 - tau)
    valid = (n >= 1) & (tau > 0) & (tau < mu_pos) & (mu_pos <= 1)
    return jnp.where(valid, prefactor * bracket, jnp.nan)


# --------------------------------------------------------------------------------------------
# Peak, half-maximum plateau and regimes
# --------------------------------------------------------------------------------------------


def tail_miss_continuous(n: Any, tau: float, mu_pos: float) -> np.ndarray | float:
    """Pr(B) with real-valued N >= 1 (the analytic continuation used to locate the peak)."""
    n = _as_float_array(n, "n")
    if np.any(n < 1):
        raise CatsimError("n must be >= 1")
    tau_a, mu_a = _as_float_array(tau, "tau"), _as_float_array(mu_pos, "mu_pos")
    _check_tau_mu(tau_a, mu_a)
    with np.errstate(under="ignore"):
        prefactor = np.exp(n * np.log1p(-tau_a))
        q = np.minimum(mu_a - tau_a, 1.0 - mu_a) / (1.0 - tau_a)
        return _scalar_or_array(prefactor * _active_bracket(np, n, np.minimum(q, 0.5)))


def _log_derivative_scaled(n: float, tau: float, mu_pos: float) -> float:
    """d Pr(B)/dN divided by (1-tau)^N: ln(1-tau)(1 - r^N - s^N) - r^N ln r - s^N ln s.

    Its root is the continuous maximiser; it is > 0 at N = 1 and tends to ln(1 - tau) < 0.
    """
    q = min(mu_pos - tau, 1.0 - mu_pos) / (1.0 - tau)
    q = min(q, 0.5)
    log_p = math.log1p(-q)  # ln of the larger ratio, 1 - q
    big_pow = math.exp(n * log_p)
    value = math.log1p(-tau) * float(_active_bracket(np, np.float64(n), np.float64(q)))
    value -= big_pow * log_p
    if q > 0:
        value -= math.exp(n * math.log(q)) * math.log(q)
    return value


def _bracket_root(func, lo: float, hi_start: float) -> tuple[float, float]:
    hi = max(hi_start, lo * 2.0)
    while func(hi) > 0:
        lo, hi = hi, hi * 2.0
        if hi > 1e300:
            raise CatsimError("peak search did not converge")
    return lo, hi


@dataclass(frozen=True)
class TailMissPeak:
    """Where Pr(B) of Lemma 3.1 peaks as a function of the group size N.

    tau, mu_pos: the inputs.
    n_star: continuous maximiser N* (root of the derivative equation, see catsim.theory.symbolic).
    n_argmax: integer maximiser (floor or ceil of n_star).
    max_value: Pr(B) at n_argmax.
    half_max_lo, half_max_hi: real N where the continuous Pr(B) equals half of its maximum
        (the plateau where the tail miss is at least half as likely as at the peak).
    n_active: N where Pr(active) = 1/2 (start of the concentration regime; inf if mu_pos = 1).
    n_cover: N where Pr(E sampled) = 1 - (1-tau)^N = 1/2, i.e. ln 2 / -ln(1-tau) (coverage regime).
    """

    tau: float
    mu_pos: float
    n_star: float
    n_argmax: int
    max_value: float
    half_max_lo: float
    half_max_hi: float
    n_active: float
    n_cover: float


def tail_miss_peak(tau: float, mu_pos: float) -> TailMissPeak:
    """Continuous and integer maximiser of Pr(B) over N, its value and half-maximum interval.

    Pr(B) is 0 at N = 1, rises, and decays like (1-tau)^N; the continuous maximiser solves
    (1-tau)^N ln(1/(1-tau)) = (mu-tau)^N ln(1/(mu-tau)) + (1-mu)^N ln(1/(1-mu)).
    Requires 0 < tau < mu_pos < 1 (for mu_pos = 1 no group is ever active).
    """
    tau_a, mu_a = _as_float_array(tau, "tau"), _as_float_array(mu_pos, "mu_pos")
    if tau_a.ndim or mu_a.ndim:
        raise CatsimError("tail_miss_peak takes scalars; loop over a grid")
    _check_tau_mu(tau_a, mu_a)
    tau, mu_pos = float(tau_a), float(mu_a)
    if mu_pos == 1.0:
        raise CatsimError("mu_pos = 1: no group is ever active, Pr(B) = 0 for every N")

    def slope(n: float) -> float:
        return _log_derivative_scaled(n, tau, mu_pos)

    lo, hi = _bracket_root(slope, 1.0, 4.0)
    n_star = optimize.brentq(slope, lo, hi, xtol=1e-13, rtol=4 * np.finfo(float).eps, maxiter=500)
    candidates = sorted({max(2, math.floor(n_star)), max(2, math.ceil(n_star))})
    values = [float(tail_miss_probability(k, tau, mu_pos)) for k in candidates]
    best = int(np.argmax(values))
    n_argmax, max_value = candidates[best], values[best]

    peak = float(tail_miss_continuous(n_star, tau, mu_pos))

    def above_half(n: float) -> float:
        return float(tail_miss_continuous(n, tau, mu_pos)) - 0.5 * peak

    half_lo = optimize.brentq(above_half, 1.0, n_star, xtol=1e-12, rtol=1e-14)
    lo2, hi2 = _bracket_root(above_half, n_star, 2.0 * n_star)
    half_hi = optimize.brentq(above_half, lo2, hi2, xtol=1e-12, rtol=1e-14)
    n_active, n_cover = regime_boundaries(tau, mu_pos)
    return TailMissPeak(
        tau=tau,
        mu_pos=mu_pos,
        n_star=float(n_star),
        n_argmax=int(n_argmax),
        max_value=max_value,
        half_max_lo=float(half_lo),
        half_max_hi=float(half_hi),
        n_active=n_active,
        n_cover=n_cover,
    )


def regime_boundaries(tau: float, mu_pos: float, level: float = 0.5) -> tuple[float, float]:
    """Boundaries (n_active, n_cover) of the three group-size regimes at probability `level`.

    inactive      N < n_active: Pr(active) = 1 - mu^N - (1-mu)^N < level (mostly no signal);
    concentration n_active <= N < n_cover: groups are active but usually miss E (Pr(B) is large);
    coverage      N >= n_cover: E is sampled with probability >= level, n_cover = ln(1-level)/ln(1-tau).
    n_active is the real root of Pr(active) = level (inf when mu_pos = 1). If n_active >= n_cover the
    concentration regime is empty.
    """
    if not 0 < level < 1:
        raise CatsimError(f"level must be in (0, 1), got {level:g}")
    tau_a, mu_a = _as_float_array(tau, "tau"), _as_float_array(mu_pos, "mu_pos")
    _check_tau_mu(tau_a, mu_a)
    tau, mu_pos = float(tau_a), float(mu_a)
    n_cover = math.log1p(-level) / math.log1p(-tau)
    q = min(mu_pos, 1.0 - mu_pos)
    if q == 0.0:
        return math.inf, n_cover

    def excess(n: float) -> float:
        return level - float(_active_bracket(np, np.float64(n), np.float64(q)))

    hi = 2.0  # excess(1) = level > 0 since no group of one is active
    while excess(hi) > 0:
        hi *= 2.0
    n_active = optimize.brentq(lambda n: -excess(n), 1.0, hi, xtol=1e-12, rtol=1e-14)
    return float(n_active), n_cover


def regime(n: float, tau: float, mu_pos: float, level: float = 0.5) -> str:
    """'inactive', 'concentration' or 'coverage' for group size n (see `regime_boundaries`)."""
    n_active, n_cover = regime_boundaries(tau, mu_pos, level)
    if n >= n_cover:
        return "coverage"
    if n < n_active:
        return "inactive"
    return "concentration"
