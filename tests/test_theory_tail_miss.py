"""Lemma 3.1 numerics: accuracy against 50-digit mpmath, published peaks, Monte Carlo, JAX twin."""

import math

import mpmath
import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.theory.tail_miss import (
    active_probability,
    regime,
    regime_boundaries,
    tail_miss_continuous,
    tail_miss_peak,
    tail_miss_probability,
    tail_miss_probability_jax,
    tail_miss_probability_masses,
)


def reference(n, tau, mu):
    with mpmath.workdps(50):
        t, m = mpmath.mpf(tau), mpmath.mpf(mu)
        return float((1 - t) ** n - (m - t) ** n - (1 - m) ** n)


HARD_CASES = [
    (2, 0.01, 0.5),
    (131072, 1e-9, 0.63),  # the simulator's largest group with a tiny tau
    (2**20, 1e-12, 0.5),
    (2**20, 1e-12, 1 - 1e-12),  # mu -> 1
    (2**20, 1e-6, 1 - 1e-6),
    (8, 0.3, 0.3 + 1e-15),  # mu - tau a few ulp
    (2**20, 1e-12, 1e-12 * (1 + 1e-14)),
    (1000, 0.4, 0.9),  # Pr ~ 1e-222: needs the double-word prefactor
    (3, 1e-12, 1.0),  # mu = 1: never active, exactly 0
    (1, 0.1, 0.5),  # a group of one is never active, exactly 0
    (19, 6.3e-5, 0.63),
]


@pytest.mark.parametrize("n,tau,mu", HARD_CASES)
def test_matches_mpmath_to_1e14(n, tau, mu):
    ref = reference(n, tau, mu)
    value = tail_miss_probability(n, tau, mu)
    if ref == 0:
        assert value == 0
    else:
        assert abs(value - ref) <= 1e-14 * abs(ref)


def test_naive_formula_would_fail_where_ours_does_not():
    # Guard that the hard cases are hard: the naive float64 expression is off by far more than 1e-14.
    n, tau, mu = 2**20, 1e-6, 1 - 1e-6
    naive = (1 - tau) ** n - (mu - tau) ** n - (1 - mu) ** n
    ref = reference(n, tau, mu)
    assert abs(naive - ref) / ref > 1e-11
    assert abs(tail_miss_probability(n, tau, mu) - ref) / ref < 1e-14


def test_vectorised_random_grid_against_mpmath():
    rng = np.random.default_rng(0)
    n = rng.integers(1, 2**20, size=60).astype(float)
    tau = 10.0 ** rng.uniform(-12, -0.5, size=60)
    mu = tau + (1 - tau) * rng.uniform(0, 1, size=60) ** 3
    values = tail_miss_probability(n, tau, mu)
    assert values.shape == (60,)
    for v, k, t, m in zip(values, n, tau, mu):
        ref = reference(int(k), float(t), float(m))
        if abs(ref) > 1e-280:
            assert abs(v - ref) <= 1e-14 * ref


def test_three_mass_variant_avoids_cancellation():
    # Masses given directly: mu - tau = 1e-30 cannot be formed by subtraction in float64.
    a, b, c = 0.25, 1e-30, 0.75 - 1e-30
    with mpmath.workdps(80):
        A, B = mpmath.mpf(a), mpmath.mpf(b)
        C = 1 - A - B
        ref = float((B + C) ** 10 - B**10 - C**10)
    assert tail_miss_probability_masses(10, a, b, c) == pytest.approx(ref, rel=1e-14)
    assert tail_miss_probability_masses(10, 0.1, 0.4, 0.5) == pytest.approx(tail_miss_probability(10, 0.1, 0.5), rel=1e-15)


def test_active_probability_against_mpmath():
    for n, mu in [(2, 0.5), (100, 1e-9), (2**20, 1e-7), (5, 1 - 1e-12), (1, 0.3), (7, 1.0)]:
        with mpmath.workdps(50):
            m = mpmath.mpf(mu)
            ref = float(1 - m**n - (1 - m) ** n)
        value = active_probability(n, mu)
        assert (value == 0) if ref == 0 else abs(value - ref) <= 1e-14 * ref


# ---- published numbers (THEORY.md §1 / paper Fig. 3 and Fig. 5) ------------------------------

PUBLISHED_ARGMAX = [
    (0.001, 0.2, 24), (0.001, 0.5, 10), (0.001, 0.8, 24),
    (0.01, 0.2, 15), (0.01, 0.5, 7), (0.01, 0.8, 14),
    (0.05, 0.2, 9), (0.05, 0.5, 5), (0.05, 0.8, 7),
]  # fmt: skip


@pytest.mark.published
@pytest.mark.parametrize("tau,mu,expected", PUBLISHED_ARGMAX)
def test_published_integer_argmax(tau, mu, expected):
    peak = tail_miss_peak(tau, mu)
    assert peak.n_argmax == expected
    # The integer argmax really is the maximum over a brute-force range.
    ns = np.arange(1, 400)
    assert int(ns[np.argmax(tail_miss_probability(ns, tau, mu))]) == expected


def _simulation_point():
    # Paper init: anchor logit 5, 9,999 other correct at 3, 118,000 wrong at 0 (THEORY.md §4).
    z = math.exp(5) + 9999 * math.exp(3) + 118000
    return math.exp(3) / z, (math.exp(5) + 9999 * math.exp(3)) / z


@pytest.mark.published
def test_published_simulation_point():
    tau, mu = _simulation_point()
    assert tau == pytest.approx(6.3e-5, rel=0.01) and mu == pytest.approx(0.63, rel=0.01)
    # "argmax N ~ 19 and Pr(N = 2^17) ~ 2.6e-4 (< 1e-3)": published to 2 significant digits.
    assert tail_miss_peak(tau, mu).n_argmax == 19
    assert tail_miss_peak(6.3e-5, 0.63).n_argmax == 19
    for t, m in [(tau, mu), (6.3e-5, 0.63)]:
        assert float(tail_miss_probability(2**17, t, m)) == pytest.approx(2.6e-4, abs=0.05e-4)


def test_peak_fields_are_consistent():
    tau, mu = 0.01, 0.8
    peak = tail_miss_peak(tau, mu)
    f = lambda n: float(tail_miss_continuous(n, tau, mu))  # noqa: E731
    assert f(peak.n_star) >= max(f(peak.n_star - 1e-3), f(peak.n_star + 1e-3))
    assert math.floor(peak.n_star) <= peak.n_argmax <= math.ceil(peak.n_star)
    assert peak.max_value == pytest.approx(float(tail_miss_probability(peak.n_argmax, tau, mu)), rel=1e-15)
    assert f(peak.half_max_lo) == pytest.approx(f(peak.n_star) / 2, rel=1e-10)
    assert f(peak.half_max_hi) == pytest.approx(f(peak.n_star) / 2, rel=1e-10)
    assert 1 < peak.half_max_lo < peak.n_star < peak.half_max_hi
    # The continuous form agrees with the integer form at whole N.
    assert f(14.0) == pytest.approx(float(tail_miss_probability(14, tau, mu)), rel=1e-13)


@pytest.mark.parametrize("tau,mu", [(0.001, 0.2), (0.05, 0.5), (1e-6, 0.99), (0.3, 0.31)])
def test_unimodal_in_n(tau, mu):
    ns = np.unique(np.round(np.geomspace(1, 50 / tau, 3000)))
    diffs = np.diff(tail_miss_probability(ns, tau, mu))
    signs = np.sign(diffs[np.abs(diffs) > 1e-300])
    assert np.count_nonzero(np.diff(signs)) == 1  # one rise-to-fall switch


def test_regimes():
    tau, mu = 0.001, 0.5
    n_active, n_cover = regime_boundaries(tau, mu)
    assert n_active == pytest.approx(2.0, rel=1e-12)  # 1 - 2 * 2^-N = 1/2 at N = 2
    assert n_cover == pytest.approx(math.log(2) / -math.log1p(-tau), rel=1e-15)
    assert float(active_probability(3, mu)) > 0.5
    assert regime(1, tau, mu) == "inactive"
    assert regime(24, tau, mu) == "concentration"
    assert regime(5000, tau, mu) == "coverage"
    assert regime_boundaries(0.1, 1.0)[0] == math.inf


# ---- Monte Carlo ----------------------------------------------------------------------------


@pytest.mark.parametrize("n,tau,mu,seed", [(4, 0.05, 0.5, 1), (24, 0.001, 0.2, 2), (64, 0.02, 0.9, 3)])
def test_monte_carlo_frequency(n, tau, mu, seed):
    """Empirical frequency of B over 100,000 groups within 4.5 binomial standard errors
    (false-alarm rate < 1e-5 per case; seeds fixed so the test is deterministic)."""
    groups = 100_000
    counts = np.random.default_rng(seed).multinomial(n, [tau, mu - tau, 1 - mu], size=groups)
    freq = np.mean((counts[:, 0] == 0) & (counts[:, 1] > 0) & (counts[:, 2] > 0))
    p = float(tail_miss_probability(n, tau, mu))
    assert abs(freq - p) <= 4.5 * math.sqrt(p * (1 - p) / groups)


# ---- JAX twin --------------------------------------------------------------------------------


def test_jax_twin_under_jit_float64():
    import jax

    from catsim.numerics import x64

    n = np.array([1, 2, 19, 131072, 2**20, 1000], float)
    tau = np.array([0.1, 0.01, 6.3e-5, 1e-9, 1e-12, 0.4])
    mu = np.array([0.5, 0.5, 0.63, 1 - 1e-9, 0.5, 0.9])
    expected = tail_miss_probability(n, tau, mu)
    with x64():
        got = np.asarray(jax.jit(lambda a, b, c: tail_miss_probability_jax(a, b, c, max_n=2**20))(n, tau, mu))
        eager = np.asarray(tail_miss_probability_jax(n, tau, mu))
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-14, atol=0)
    np.testing.assert_allclose(eager, expected, rtol=1e-14, atol=0)


def test_jax_twin_float32_is_accurate_to_single_precision():
    import jax

    n = np.array([2, 19, 512, 131072], np.float32)
    tau = np.array([0.01, 6.3e-5, 0.001, 1e-6], np.float32)
    mu = np.array([0.5, 0.63, 0.8, 0.999], np.float32)
    got = np.asarray(jax.jit(tail_miss_probability_jax, static_argnames="max_n")(n, tau, mu, max_n=2**17))
    assert got.dtype == np.float32
    # Reference from the float32 inputs exactly; naive float32 would be off by O(1) here.
    expected = tail_miss_probability(n.astype(float), tau.astype(float), mu.astype(float))
    np.testing.assert_allclose(got, expected, rtol=2e-5)


# ---- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [(5, 0.5, 0.5), (5, 0.6, 0.5), (5, 0.1, 1.2), (0, 0.1, 0.5), (2.5, 0.1, 0.5), ("x", 0.1, 0.5),
     ([], 0.1, 0.5), (5, float("nan"), 0.5), (5, -0.1, 0.5), ([1, 2], [0.1, 0.2, 0.3], 0.5)],
)  # fmt: skip
def test_bad_input_raises_catsim_error(args):
    with pytest.raises(CatsimError):
        tail_miss_probability(*args)


def test_bad_input_elsewhere():
    with pytest.raises(CatsimError):
        tail_miss_peak(0.1, 1.0)
    with pytest.raises(CatsimError):
        tail_miss_probability_masses(3, 0.2, 0.2, 0.2)  # does not sum to 1
    with pytest.raises(CatsimError):
        active_probability(3, 1.5)
    with pytest.raises(CatsimError):
        tail_miss_probability_jax(3, 0.6, 0.5)


def test_active_fraction_prediction():
    from catsim.theory import active_fraction_prediction

    np.testing.assert_allclose(active_fraction_prediction([0.0, 0.5, 1.0], 8), [0.0, 1 - 2 * 0.5**8, 0.0])
    assert float(active_fraction_prediction(0.3, 1)) == 0.0
    # 1 − 0.1^4 − 0.9^4, by hand
    assert float(active_fraction_prediction(0.1, 4)) == pytest.approx(1 - 1e-4 - 0.6561, rel=1e-14)
    for bad in ((1.5, 4), (float("nan"), 4), (0.5, 0), (0.5, 2.5), (0.5, True)):
        with pytest.raises(CatsimError):
            active_fraction_prediction(*bad)
