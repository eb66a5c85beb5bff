"""`catsim verify` checks of Lemma 3.1 (tail-miss probability) and its peak.

References are independent of the float64 code: SymPy identities, exact rational enumeration,
50-digit mpmath, and Monte Carlo sampling of groups.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction

import numpy as np

from catsim.checks import CheckResult

# The published peak table (THEORY.md §1, paper Fig. 3): integer argmax of Pr(B) over N.
PUBLISHED_ARGMAX = {
    (0.001, 0.2): 24, (0.001, 0.5): 10, (0.001, 0.8): 24,
    (0.01, 0.2): 15, (0.01, 0.5): 7, (0.01, 0.8): 14,
    (0.05, 0.2): 9, (0.05, 0.5): 5, (0.05, 0.8): 7,
}  # fmt: skip


def accuracy_grid(quick: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(n, tau, mu_pos) points covering the stated domain 1 <= N <= 2^20, 1e-12 <= tau < mu <= 1,
    with mu -> 1, mu - tau down to a few ulp, and N = 131072 with tau = 1e-9."""
    ns = [1, 2, 3, 7, 19, 64, 512, 4096, 131072, 2**20]
    taus = [1e-12, 1e-9, 1e-6, 1e-3, 0.05, 0.4]
    if not quick:
        ns += [5, 24, 100, 1000, 10**4, 65536, 500000]
        taus += [3e-11, 6.3e-5, 0.01, 0.2, 0.7]
    points = []
    for t in taus:
        mus = [0.2, 0.5, 0.64, 0.8, 1 - 1e-6, 1 - 1e-12, 1.0]
        mus += [t * (1 + 4e-16), t + 1e-12, 2 * t, 1.5 * t, t + 1e-9]
        for m in mus:
            if t < m <= 1:
                points += [(n, t, m) for n in ns]
    n, tau, mu = map(np.array, zip(*points))
    return n.astype(np.float64), tau, mu


def mpmath_reference(n: np.ndarray, tau: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """Lemma 3.1 evaluated naively at 50 significant digits from the exact float inputs."""
    import mpmath

    out = np.empty(n.shape)
    with mpmath.workdps(50):
        for i, (k, t, m) in enumerate(zip(n, tau, mu)):
            t_, m_ = mpmath.mpf(float(t)), mpmath.mpf(float(m))
            k = int(k)
            out[i] = float((1 - t_) ** k - (m_ - t_) ** k - (1 - m_) ** k)
    return out


def relative_error(value: np.ndarray, reference: np.ndarray, floor: float = 1e-280) -> float:
    """Worst |value - ref| / |ref| where |ref| >= floor; where the reference is 0, |value| itself."""
    value, reference = np.asarray(value, float), np.asarray(reference, float)
    zero = reference == 0
    big = np.abs(reference) >= floor
    errors = [np.abs(value[zero])] if zero.any() else []
    if big.any():
        errors.append(np.abs(value[big] - reference[big]) / np.abs(reference[big]))
    return float(max(np.max(e) for e in errors)) if errors else 0.0


def monte_carlo_z(n: int, tau: float, mu: float, groups: int, seed: int) -> float:
    """|z| of the empirical frequency of B among `groups` sampled groups vs Lemma 3.1.

    Region counts of a group are multinomial(n, (tau, mu - tau, 1 - mu)); B holds when E has no
    draw and both other regions have one. z = (freq - p) / sqrt(p (1 - p) / groups).
    """
    from catsim.theory.tail_miss import tail_miss_probability

    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n, [tau, mu - tau, 1 - mu], size=groups)
    hits = (counts[:, 0] == 0) & (counts[:, 1] > 0) & (counts[:, 2] > 0)
    p = float(tail_miss_probability(n, tau, mu))
    return abs(hits.mean() - p) / np.sqrt(p * (1 - p) / groups)


MONTE_CARLO_CASES = [(2, 0.05, 0.5), (8, 0.01, 0.8), (24, 0.001, 0.2), (100, 0.01, 0.5), (19, 6.3e-5, 0.63)]
# Max |z| accepted over the cases. With 5 cases, Pr(max |z| > 4.5) < 5 * 6.8e-6 under the formula;
# the seeds are fixed, so the check is deterministic.
MONTE_CARLO_Z_TOL = 4.5


def run(quick: bool) -> Iterator[CheckResult]:
    from catsim.theory import symbolic
    from catsim.theory.tail_miss import (
        active_probability,
        tail_miss_peak,
        tail_miss_probability,
        tail_miss_probability_jax,
    )

    yield CheckResult(
        "Lemma 3.1: inclusion-exclusion = closed form (SymPy)",
        0.0 if symbolic.prove_closed_form() == 0 else 1.0, 0.0, "exact")
    yield CheckResult(
        "Lemma 3.1: closed form = factored form (SymPy)",
        0.0 if symbolic.prove_factored_form() == 0 else 1.0, 0.0, "exact")
    bad = sum(symbolic.tail_miss_polynomial_identity(k) != 0 for k in range(1, 9))
    yield CheckResult("Lemma 3.1: multinomial sum = closed form, N <= 8 (SymPy)", float(bad), 0.0, "exact")
    yield CheckResult(
        "Lemma 3.1: peak equation = dPr/dN (SymPy)",
        0.0 if symbolic.prove_peak_equation() == 0 else 1.0, 0.0, "exact")

    masses = [(Fraction(1, 10), Fraction(3, 10), Fraction(3, 5)), (Fraction(1, 1000), Fraction(799, 1000), Fraction(1, 5))]
    worst = 0.0
    for n in range(1, 6 if quick else 9):
        for m in masses:
            exact = symbolic.enumerate_tail_miss(n, m)
            value = tail_miss_probability(n, float(m[0]), float(m[0] + m[1]))
            ref = float(exact)
            worst = max(worst, abs(value - ref) / ref if ref else abs(value))
    yield CheckResult("Lemma 3.1: float64 vs exact 3^N enumeration", worst, 1e-14)

    n, tau, mu = accuracy_grid(quick)
    reference = mpmath_reference(n, tau, mu)
    numpy_value = tail_miss_probability(n, tau, mu)
    yield CheckResult(
        f"Lemma 3.1: float64 vs 50-digit mpmath ({n.size} pts, N<=2^20, tau>=1e-12)",
        relative_error(numpy_value, reference), 1e-14)

    from catsim.numerics import x64

    with x64():
        import jax

        jax_value = np.asarray(jax.jit(lambda *a: tail_miss_probability_jax(*a, max_n=2**20))(n, tau, mu))
    yield CheckResult("Lemma 3.1: JAX twin (jit, x64) vs mpmath", relative_error(jax_value, reference), 1e-14)

    act_n = np.array([1, 2, 3, 10, 100, 2**17, 2**20], float)
    act_mu = np.array([1e-12, 1e-6, 0.3, 0.5, 0.63, 1 - 1e-9, 1.0])
    grid_n, grid_mu = (a.ravel() for a in np.meshgrid(act_n, act_mu))
    import mpmath

    with mpmath.workdps(50):
        ref = np.array([float(1 - mpmath.mpf(m) ** int(k) - (1 - mpmath.mpf(m)) ** int(k)) for k, m in zip(grid_n, grid_mu)])
    yield CheckResult("Pr(active) vs 50-digit mpmath", relative_error(active_probability(grid_n, grid_mu), ref), 1e-14)

    worst_argmax = 0
    for (t, m), expected in PUBLISHED_ARGMAX.items():
        worst_argmax = max(worst_argmax, abs(tail_miss_peak(t, m).n_argmax - expected))
    yield CheckResult("Peak table (9 published integer argmax)", float(worst_argmax), 0.0, "abs")

    worst_peak = 0.0
    eq = symbolic.peak_equation()
    balance = sympy_to_mpmath(eq.lhs - eq.rhs)
    with mpmath.workdps(50):
        for t, m in [(0.001, 0.2), (0.05, 0.8), (6.3e-5, 0.63), (1e-9, 0.5)]:
            peak = tail_miss_peak(t, m)
            t_, m_ = mpmath.mpf(t), mpmath.mpf(m)
            root = mpmath.findroot(lambda x, t_=t_, m_=m_: balance(x, t_, m_), peak.n_star)
            worst_peak = max(worst_peak, abs(float(root) - peak.n_star) / float(root))
    yield CheckResult("Continuous maximiser N* vs mpmath root of peak equation", worst_peak, 1e-12)

    cases = MONTE_CARLO_CASES[:2] if quick else MONTE_CARLO_CASES
    groups = 20_000 if quick else 200_000
    z = max(monte_carlo_z(k, t, m, groups, seed=i) for i, (k, t, m) in enumerate(cases))
    yield CheckResult(f"Lemma 3.1 vs Monte Carlo ({groups} groups x {len(cases)} cases)", z, MONTE_CARLO_Z_TOL, "z")


def sympy_to_mpmath(expr):
    """Lambdify a SymPy expression in (N, tau, mu_pos) for mpmath evaluation."""
    import sympy as sp

    from catsim.theory.symbolic import N, mu, tau

    return sp.lambdify((N, tau, mu), expr, modules="mpmath")
