"""MaxRL, Pass@k Training, PKPO, the best-sample pass@k rule, the unlikeliness reward and the NSR
positive weight: hand-computed groups, brute force over k-subsets, counts vs per-sample forms,
all-equal groups exactly zero, large n without overflow."""

import itertools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.numerics import x64
from catsim.objectives import advantages as adv
from catsim.objectives import losses, rewards


def _group(c, n, dtype=jnp.float32):
    return jnp.array([1.0] * c + [0.0] * (n - c), dtype)


def _brute_force(r, k):
    """Pass@k over every k-subset: ρ, σ (population std over subsets) and, per sample, the mean of
    (max_S − ρ) over the subsets S that hold it (PKPO's s_i − ρ; ÷σ: Pass@k Training)."""
    n = len(r)
    subsets = list(itertools.combinations(range(n), k))
    score = {s: max(r[i] for i in s) for s in subsets}
    rho = np.mean(list(score.values()))
    sigma = np.std(list(score.values()))
    credit = np.array([np.mean([score[s] - rho for s in subsets if i in s]) for i in range(n)])
    return rho, sigma, credit


@pytest.mark.parametrize("n, c, k", [(5, 2, 3), (6, 1, 2), (6, 2, 5), (4, 2, 4)])
def test_pkpo_and_passk_training_match_subset_enumeration(n, c, k):
    r = [1.0] * c + [0.0] * (n - c)
    rho, sigma, credit = _brute_force(r, k)
    with x64():
        got_pkpo = np.asarray(adv.pkpo(jnp.array(r), k))
        got_pt = np.asarray(adv.passk_training(jnp.array(r), k))
    np.testing.assert_allclose(got_pkpo, k * credit, atol=1e-12)
    expected_pt = credit / sigma if sigma > 0 else np.zeros(n)
    np.testing.assert_allclose(got_pt, expected_pt, atol=1e-12)


def test_hand_computed_values():
    # n = 8, c = 1, k = 2: ρ = 1 − C(7,2)/C(8,2) = 1/4, σ = √3/4, q = C(6,1)/C(7,1) = 6/7.
    a = np.asarray(adv.passk_training(_group(1, 8), 2))
    assert a[0] == pytest.approx(0.75 / (math.sqrt(3) / 4), rel=1e-6)
    assert a[1] == pytest.approx((0.75 - 6 / 7) / (math.sqrt(3) / 4), rel=1e-6)
    # PKPO n = 5, c = 2, k = 3: ρ = 1 − 1/10, q = C(2,2)/C(4,2) = 1/6 → 3·0.1, 3·(0.1 − 1/6).
    a = np.asarray(adv.pkpo(_group(2, 5), 3))
    np.testing.assert_allclose(a, [0.3, 0.3, -0.2, -0.2, -0.2], rtol=1e-6)
    # MaxRL, c = 1 of 4: p̂ = 1/4 → correct (3/4)/(1/4) = 3, wrong −1 (ε = 0).
    np.testing.assert_allclose(adv.maxrl(_group(1, 4), eps=0.0), [3.0, -1.0, -1.0, -1.0], rtol=1e-6)
    # c = 3 of 4: 1/3 and −1.
    np.testing.assert_allclose(adv.maxrl(_group(3, 4), eps=0.0), [1 / 3] * 3 + [-1.0], rtol=1e-6)
    # best-sample rule, c = 1 of 4: gap 1, sample std √(1/4) = 1/2... ddof 1: √((3/16·4)/3) = 1/2.
    np.testing.assert_allclose(adv.passk_best(_group(1, 4), eps=0.0), [2.0, 0, 0, 0], rtol=1e-6)
    # c = 2: top-2 gap 0 → nothing; graded rewards: best = 0.9, 2nd 0.5, std of (0.9, .5, .1).
    np.testing.assert_array_equal(adv.passk_best(_group(2, 4)), np.zeros(4))
    got = np.asarray(adv.passk_best(jnp.array([0.5, 0.9, 0.1]), eps=0.0))
    np.testing.assert_allclose(got, [0.0, 0.4 / np.std([0.5, 0.9, 0.1], ddof=1), 0.0], rtol=1e-5)


def test_k_one_and_k_n():
    r = _group(3, 8)
    # k = 1: Pass@k Training is GRPO with the population std, PKPO the mean-centred reward.
    np.testing.assert_allclose(adv.passk_training(r, 1), adv.grpo(r, eps=0.0), rtol=1e-6)
    np.testing.assert_allclose(adv.pkpo(r, 1), adv.mean_centred(r), rtol=1e-6, atol=1e-7)
    # k = n with a correct sample: every n-subset passes, so both are zero (n − c < k).
    np.testing.assert_array_equal(adv.passk_training(r, 8), np.zeros(8))
    np.testing.assert_array_equal(adv.pkpo(r, 8), np.zeros(8))
    # n − c < k: 6 correct of 8, k = 3.
    np.testing.assert_array_equal(adv.pkpo(_group(6, 8), 3), np.zeros(8))
    # n − c = k: non-zero (one subset fails).
    assert np.all(np.asarray(adv.pkpo(_group(5, 8), 3)) != 0)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
@pytest.mark.parametrize("c", [0, 7])
def test_all_equal_groups_give_exactly_zero(dtype, c):
    with x64():
        r = _group(c, 7, dtype)
        for f in (lambda r: adv.maxrl(r), lambda r: adv.passk_training(r, 3), lambda r: adv.pkpo(r, 3),
                  lambda r: adv.passk_best(r), lambda r: adv.maxrl(r, eps=0.0)):
            out = np.asarray(f(r))
            assert out.dtype == np.dtype(dtype)
            np.testing.assert_array_equal(out, np.zeros(7))
            np.testing.assert_array_equal(np.asarray(jax.jit(f)(r)), np.zeros(7))
        for kind in adv.BINARY_METHODS:
            a_c, a_w = adv.binary_method_advantages(kind, jnp.asarray(c, dtype), jnp.asarray(7, dtype), k=3)
            assert float(a_c) == 0.0 and float(a_w) == 0.0


def test_counts_form_matches_per_sample_form_and_jits():
    cs = jnp.arange(9, dtype=jnp.float32)
    groups = jnp.stack([_group(c, 8) for c in range(9)])
    for kind, f in (("maxrl", adv.maxrl), ("passk_best", adv.passk_best),
                    ("pkpo", lambda r: adv.pkpo(r, 3)), ("passk_training", lambda r: adv.passk_training(r, 3))):
        a_c, a_w = jax.jit(jax.vmap(lambda x, kind=kind: adv.binary_method_advantages(kind, x, 8, k=3)))(cs)
        per_sample = np.asarray(jax.vmap(f)(groups))
        for c in range(9):
            if c and (kind != "passk_best" or c == 1):
                assert per_sample[c, 0] == pytest.approx(float(a_c[c]), rel=1e-6, abs=1e-7)
            if c < 8:
                assert per_sample[c, -1] == pytest.approx(float(a_w[c]), rel=1e-6, abs=1e-7)


@pytest.mark.parametrize("k", [1, 7, 1000])
def test_large_n_is_exact_without_overflow(k):
    n, c = 131072, 3
    exact_miss = float(Fraction(math.comb(n - c, k), math.comb(n, k)))
    exact_q = float(Fraction(math.comb(n - c - 1, k - 1), math.comb(n - 1, k - 1)))
    with x64():
        a_c, a_w = adv.binary_method_advantages("pkpo", 3.0, float(n), k=k)
        assert float(a_c) == pytest.approx(k * exact_miss, rel=1e-12)
        assert float(a_w) == pytest.approx(k * (exact_miss - exact_q), rel=1e-9)
    a_c32, _ = adv.binary_method_advantages("passk_training", jnp.float32(c), jnp.float32(n), k=k)
    rho = 1 - exact_miss
    assert float(a_c32) == pytest.approx(exact_miss / math.sqrt(rho * exact_miss), rel=1e-3)
    assert np.isfinite(float(a_c32))


def test_log_comb_ratio_edges():
    assert float(adv.log_comb_ratio(0.0, 5.0, 3)) == 0.0
    assert float(adv.log_comb_ratio(2.0, 5.0, 0)) == 0.0
    assert float(adv.log_comb_ratio(3.0, 5.0, 3)) == -np.inf  # n − a = 2 < k
    assert float(jnp.exp(adv.log_comb_ratio(2.0, 5.0, 3))) == pytest.approx(1 / 10, rel=1e-6)


def test_bad_input():
    with pytest.raises(CatsimError, match="binary"):
        adv.pkpo(jnp.array([0.5, 1.0]), 1)
    with pytest.raises(CatsimError, match="k must"):
        adv.pkpo(_group(1, 3), 0)
    with pytest.raises(CatsimError, match="k must"):
        adv.passk_training(_group(1, 3), 1.5)
    with pytest.raises(CatsimError, match="at least 2"):
        adv.passk_best(jnp.array([1.0]))
    with pytest.raises(CatsimError, match="unknown binary advantage"):
        adv.binary_method_advantages("nope", 1, 2)
    with pytest.raises(CatsimError, match="beta"):
        rewards.unlikeliness(_group(1, 3), jnp.zeros(3), beta=2.0)


def test_unlikeliness_hand_computed():
    r = jnp.array([1.0, 0.0, 1.0, 1.0])
    logp = jnp.array([-1.0, -5.0, -3.0, -2.0])
    # correct ascending by log-prob: index 2 (rank 0), 3 (rank 1), 0 (rank 2); N = 4, β = 1/4.
    np.testing.assert_allclose(rewards.unlikeliness(r, logp), [1 - 0.25 * 2 / 4, 0.0, 1.0, 1 - 0.25 / 4])
    # β = 0 is the identity; an all-wrong group stays zero; ties rank by position.
    np.testing.assert_array_equal(rewards.unlikeliness(r, logp, beta=0.0), r)
    np.testing.assert_array_equal(rewards.unlikeliness(jnp.zeros(3), jnp.zeros(3)), np.zeros(3))
    np.testing.assert_allclose(rewards.unlikeliness(jnp.ones(3), jnp.zeros(3), beta=0.3), [1, 0.9, 0.8])
    # GRPO on the shaped rewards gives the least likely correct sample the largest advantage.
    a = np.asarray(adv.grpo(rewards.unlikeliness(r, logp)))
    assert a[2] == a.max() and a[1] == a.min()
    # jittable
    np.testing.assert_allclose(jax.jit(rewards.unlikeliness)(r, logp), rewards.unlikeliness(r, logp))


def test_positive_sample_weight():
    a = jnp.array([0.5, -0.5, 0.0])
    np.testing.assert_allclose(losses.positive_sample_weight(a), [0.1, 1.0, 1.0], rtol=1e-6)
    np.testing.assert_array_equal(losses.positive_sample_weight(a, 1.0), np.ones(3))
    # as a loss component: the REINFORCE loss of a positive sample shrinks by λ, a negative one stays
    logp = jnp.array([-1.0, -2.0, -3.0])
    weighted = losses.reinforce_loss(logp, a) * losses.positive_sample_weight(a, 0.25)
    np.testing.assert_allclose(weighted, [0.25 * 0.5, -1.0, 0.0], rtol=1e-6)
    with pytest.raises(CatsimError):
        losses.positive_sample_weight(a, -1.0)
