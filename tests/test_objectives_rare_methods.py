"""The rare-solution rules as their authors wrote them: MaxRL, Pass@k Training, PKPO (s^(loo−1)
and the mean-centred form), the best-sample rule, W-REINFORCE / NSR / PSR and the unlikeliness
reward. Hand-computed groups, brute force over k-subsets (the papers' definitions), the expected
gradient against d pass@k / dp, counts vs per-sample forms, all-equal groups, large n."""

import itertools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from scipy import stats

from catsim.errors import CatsimError
from catsim.numerics import x64
from catsim.objectives import advantages as adv
from catsim.objectives import binary, losses, registry, rewards


def _group(c, n, dtype=jnp.float32):
    return jnp.array([1.0] * c + [0.0] * (n - c), dtype)


def _brute_force(r, k):
    """Pass@k over every k-subset: ρ, σ (population std over subsets) and, per sample, the mean of
    (max_S − ρ) over the subsets S that hold it (the mean-centred credit; ÷σ: Pass@k Training)."""
    n = len(r)
    subsets = list(itertools.combinations(range(n), k))
    score = {s: max(r[i] for i in s) for s in subsets}
    rho = np.mean(list(score.values()))
    sigma = np.std(list(score.values()))
    credit = np.array([np.mean([score[s] - rho for s in subsets if i in s]) for i in range(n)])
    return rho, sigma, credit


def _eq33(r, k):
    """PKPO's s^(loo−1) by its definition (arXiv 2505.15201, Eq. 33), times n (catsim's scale):
    (n/C(n,k)) Σ_{|I|=k, i∈I} (max_{j∈I} r_j − max_{b∈I∖i} r_b)."""
    n = len(r)
    out = np.zeros(n)
    for subset in itertools.combinations(range(n), k):
        for i in subset:
            rest = [r[j] for j in subset if j != i]
            out[i] += max(r[j] for j in subset) - max(rest)
    return out * n / math.comb(n, k)


@pytest.mark.parametrize("n, c, k", [(5, 2, 3), (6, 1, 2), (6, 2, 5), (4, 2, 4)])
def test_pkpo_mean_and_passk_training_match_subset_enumeration(n, c, k):
    r = [1.0] * c + [0.0] * (n - c)
    rho, sigma, credit = _brute_force(r, k)
    with x64():
        got_mean = np.asarray(binary.pkpo(jnp.array(r), k, baseline="mean"))
        got_pt = np.asarray(binary.passk_training(jnp.array(r), k))
    np.testing.assert_allclose(got_mean, k * credit, atol=1e-12)
    expected_pt = credit / sigma if sigma > 0 else np.zeros(n)
    np.testing.assert_allclose(got_pt, expected_pt, atol=1e-12)


def test_pkpo_is_eq33_on_every_binary_group_up_to_n_10():
    with x64():
        for n in range(2, 11):
            for c in range(n + 1):
                r = [1.0] * c + [0.0] * (n - c)
                for k in range(2, n + 1):
                    np.testing.assert_allclose(np.asarray(binary.pkpo(jnp.array(r), k)), _eq33(r, k),
                                               atol=1e-12, err_msg=f"n={n} c={c} k={k}")


@pytest.mark.parametrize("n, k", [(8, 2), (8, 4), (8, 8), (16, 3), (5, 1)])
def test_pkpo_expected_gradient_is_that_of_pass_at_k(n, k):
    """E over c ~ Bin(n, p) of the group's gradient (1/n)Σ_i A_i ∂log π(x_i)/∂p equals
    d pass@k/dp = k(1 − p)^(k−1) for s^(loo−1); the mean-centred form gives (1 − k/n) of it."""
    p = 0.3
    c = np.arange(n + 1)
    prob = stats.binom.pmf(c, n, p)
    with x64():
        a_c = np.array([float(binary.pkpo_counts(float(x), float(n), k)[0]) for x in c])
        a_w = np.array([float(binary.pkpo_counts(float(x), float(n), k)[1]) for x in c])
        m_c = np.array([float(binary.pkpo_counts(float(x), float(n), k, baseline="mean")[0]) for x in c])
        m_w = np.array([float(binary.pkpo_counts(float(x), float(n), k, baseline="mean")[1]) for x in c])
    # a correct draw's score is 1/p, a wrong one's −1/(1 − p)
    grad = np.sum(prob * (c * a_c / p - (n - c) * a_w / (1 - p))) / n
    grad_mean = np.sum(prob * (c * m_c / p - (n - c) * m_w / (1 - p))) / n
    exact = k * (1 - p) ** (k - 1)
    assert grad == pytest.approx(exact, rel=1e-9)
    assert grad_mean == pytest.approx(exact * (1 - k / n), rel=1e-9, abs=1e-12)


def test_hand_computed_values():
    # n = 8, c = 1, k = 2: ρ = 1 − C(7,2)/C(8,2) = 1/4, σ = √3/4, q = C(6,1)/C(7,1) = 6/7.
    a = np.asarray(binary.passk_training(_group(1, 8), 2))
    assert a[0] == pytest.approx(0.75 / (math.sqrt(3) / 4), rel=1e-6)
    assert a[1] == pytest.approx((0.75 - 6 / 7) / (math.sqrt(3) / 4), rel=1e-6)
    # PKPO mean-centred, n = 5, c = 2, k = 3: ρ = 1 − 1/10, q = C(2,2)/C(4,2) = 1/6 → 3·0.1, 3·(0.1 − 1/6).
    a = np.asarray(binary.pkpo(_group(2, 5), 3, baseline="mean"))
    np.testing.assert_allclose(a, [0.3, 0.3, -0.2, -0.2, -0.2], rtol=1e-6)
    # PKPO s^(loo−1), same group: a correct sample with both companions wrong: 3·C(3,2)/C(4,2) = 1.5.
    np.testing.assert_allclose(binary.pkpo(_group(2, 5), 3), [1.5, 1.5, 0, 0, 0], rtol=1e-6)
    # MaxRL, c = 1 of 4: p̂ = 1/4 → correct (3/4)/(1/4) = 3, wrong −1 (ε = 0).
    np.testing.assert_allclose(binary.maxrl(_group(1, 4), eps=0.0), [3.0, -1.0, -1.0, -1.0], rtol=1e-6)
    np.testing.assert_allclose(binary.maxrl(_group(3, 4), eps=0.0), [1 / 3] * 3 + [-1.0], rtol=1e-6)
    # best-sample rule, c = 1 of 4: gap 1, sample std 1/2.
    np.testing.assert_allclose(binary.passk_best(_group(1, 4), eps=0.0), [2.0, 0, 0, 0], rtol=1e-6)
    np.testing.assert_array_equal(binary.passk_best(_group(2, 4)), np.zeros(4))
    got = np.asarray(binary.passk_best(jnp.array([0.5, 0.9, 0.1]), eps=0.0))
    np.testing.assert_allclose(got, [0.0, 0.4 / np.std([0.5, 0.9, 0.1], ddof=1), 0.0], rtol=1e-5)


def test_k_one_and_k_n():
    r = _group(3, 8)
    # k = 1: Pass@k Training is GRPO with the population std, the mean-centred PKPO r − r̄, and
    # PKPO's s^(loo−1) the paper's k_opt = 1 leave-one-out centring r_i − mean_{j≠i} r_j.
    np.testing.assert_allclose(binary.passk_training(r, 1), adv.grpo(r, eps=0.0), rtol=1e-6)
    np.testing.assert_allclose(binary.pkpo(r, 1, baseline="mean"), adv.mean_centred(r), rtol=1e-6, atol=1e-7)
    loo = np.array([x - (3 - x) / 7 for x in np.asarray(r)])
    np.testing.assert_allclose(binary.pkpo(r, 1), loo, rtol=1e-6)
    # k = n with a correct sample: every n-subset passes: zero for both but s^(loo−1) at c = 1.
    np.testing.assert_array_equal(binary.passk_training(r, 8), np.zeros(8))
    np.testing.assert_array_equal(binary.pkpo(r, 8, baseline="mean"), np.zeros(8))
    np.testing.assert_array_equal(binary.pkpo(r, 8), np.zeros(8))
    np.testing.assert_allclose(binary.pkpo(_group(1, 8), 8), [8.0] + [0.0] * 7, rtol=1e-6)
    # k = n − c + 1 (every k-subset holds a correct sample): zero except s^(loo−1) at c = 1.
    np.testing.assert_array_equal(binary.pkpo(_group(6, 8), 3, baseline="mean"), np.zeros(8))
    np.testing.assert_array_equal(binary.passk_training(_group(6, 8), 3), np.zeros(8))
    assert np.all(np.asarray(binary.pkpo(_group(5, 8), 3, baseline="mean")) != 0)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
@pytest.mark.parametrize("c", [0, 7])
def test_all_equal_groups(dtype, c):
    """Zero under every group-relative rule; the signed rules keep their constant per class."""
    with x64():
        r = _group(c, 7, dtype)
        opts = registry.Options(k=3)
        for rule in registry.RULES.values():
            out = np.asarray(rule.advantages(r, opts))
            jitted = np.asarray(jax.jit(lambda x, rule=rule: rule.advantages(x, opts))(r))
            assert out.dtype == np.dtype(dtype), rule.name
            np.testing.assert_array_equal(jitted, out)
            a_c, a_w = rule.class_advantages(jnp.asarray(c, dtype), jnp.asarray(7, dtype), opts)
            if rule.baseline_free:
                expected = {"w_reinforce": (0.1, -1.0), "nsr": (0.0, -1.0), "psr": (1.0, 0.0)}[rule.name]
                np.testing.assert_allclose(out, np.full(7, expected[0] if c else expected[1]), rtol=1e-6)
            else:
                np.testing.assert_array_equal(out, np.zeros(7), err_msg=rule.name)
                assert float(a_c) == 0.0 and float(a_w) == 0.0, rule.name


def test_signed_rules_are_the_authors_on_every_group():
    """RLVR-Decomposed `compute_psr_nsr_outcome_advantage` (γ = 1, outcome reward r ∈ {0, 1}):
    'positive' → r, 'negative' → r − 1, 'weighted' → λ·r on correct and r − 1 on wrong."""
    for n in (1, 2, 5):
        for c in range(n + 1):
            for dtype in (jnp.float32, jnp.float64):
                with x64():
                    r = _group(c, n, dtype)
                    rn = np.asarray(r, np.float64)
                    np.testing.assert_allclose(binary.psr(r), rn)
                    np.testing.assert_allclose(binary.nsr(r), rn - 1)
                    want = np.where(rn == 1, 0.1 * rn, rn - 1)
                    np.testing.assert_allclose(binary.w_reinforce(r), want, rtol=1e-6)
                    np.testing.assert_allclose(binary.w_reinforce(r, positive_weight=0.5),
                                               np.where(rn == 1, 0.5, -1.0), rtol=1e-6)


def test_counts_form_matches_per_sample_form_for_every_rule():
    groups = jnp.stack([_group(c, 8) for c in range(9)])
    for k in (1, 3, 8):
        opts = registry.Options(k=k, eps=1e-6)
        for rule in registry.RULES.values():
            per_sample = np.asarray(jax.vmap(lambda r, rule=rule, opts=opts: rule.advantages(r, opts))(groups))
            a_c, a_w = jax.jit(jax.vmap(lambda x, rule=rule, opts=opts: rule.class_advantages(x, 8.0, opts)))(
                jnp.arange(9, dtype=jnp.float32))
            for c in range(9):
                if c and (rule.name != "passk_best" or c == 1):
                    assert per_sample[c, 0] == pytest.approx(float(a_c[c]), rel=1e-6, abs=1e-7), (rule.name, k, c)
                if c < 8:
                    assert per_sample[c, -1] == pytest.approx(float(a_w[c]), rel=1e-6, abs=1e-7), (rule.name, k, c)


@pytest.mark.parametrize("k", [1, 7, 1000])
def test_large_n_is_exact_without_overflow(k):
    n, c = 131072, 3
    exact_miss = float(Fraction(math.comb(n - c, k), math.comb(n, k)))
    exact_q = float(Fraction(math.comb(n - c - 1, k - 1), math.comb(n - 1, k - 1)))
    exact_alone = float(Fraction(math.comb(n - c, k - 1), math.comb(n - 1, k - 1)))
    with x64():
        a_c, a_w = binary.pkpo_counts(3.0, float(n), k, baseline="mean")
        assert float(a_c) == pytest.approx(k * exact_miss, rel=1e-12)
        assert float(a_w) == pytest.approx(k * (exact_miss - exact_q), rel=1e-9)
        if k > 1:
            assert float(binary.pkpo_counts(3.0, float(n), k)[0]) == pytest.approx(k * exact_alone, rel=1e-12)
    a_c32, _ = binary.passk_training_counts(jnp.float32(c), jnp.float32(n), k)
    rho = 1 - exact_miss
    assert float(a_c32) == pytest.approx(exact_miss / math.sqrt(rho * exact_miss), rel=1e-3)
    assert np.isfinite(float(a_c32))


def test_log_comb_ratio_edges():
    assert float(binary.log_comb_ratio(0.0, 5.0, 3)) == 0.0
    assert float(binary.log_comb_ratio(2.0, 5.0, 0)) == 0.0
    assert float(binary.log_comb_ratio(3.0, 5.0, 3)) == -np.inf  # n − a = 2 < k
    assert float(jnp.exp(binary.log_comb_ratio(2.0, 5.0, 3))) == pytest.approx(1 / 10, rel=1e-6)


def test_bad_input():
    with pytest.raises(CatsimError, match="binary"):
        binary.pkpo(jnp.array([0.5, 1.0]), 1)
    with pytest.raises(CatsimError, match="k must"):
        binary.pkpo(_group(1, 3), 0)
    with pytest.raises(CatsimError, match="k must"):
        binary.passk_training(_group(1, 3), 1.5)
    with pytest.raises(CatsimError, match="baseline"):
        binary.pkpo(_group(1, 3), 2, baseline="median")
    with pytest.raises(CatsimError, match="at least 2"):
        binary.passk_best(jnp.array([1.0]))
    with pytest.raises(CatsimError, match="positive_weight"):
        binary.w_reinforce(_group(1, 3), positive_weight=-0.1)
    with pytest.raises(CatsimError, match="beta"):
        rewards.unlikeliness(_group(1, 3), jnp.zeros(3), beta=2.0)


def _authors_unlikeliness(scores, logps, beta, eps=1e-6):
    """The rule of AndreHe02/rewarding-unlikely-release `ray_lean_trainer._compute_advantages` for one
    group, written from its definition: ranks = argsort(argsort(log π)) over all N, scores ×
    (1 − β·rank/N), then (r − mean)/(torch.std + ε). Stable argsort (ties by position)."""
    s, lp = torch.tensor(scores, dtype=torch.float64), torch.tensor(logps, dtype=torch.float64)
    ranks = torch.argsort(torch.argsort(lp, stable=True), stable=True).double() / len(s)
    shaped = s * (1 - ranks * beta)
    if len(s) == 1:  # the authors' code: mean 0, std 1 for a group of one
        return shaped.numpy(), (shaped / (1 + eps)).numpy()
    return shaped.numpy(), ((shaped - shaped.mean()) / (shaped.std() + eps)).numpy()


def test_unlikeliness_ranks_all_samples_as_the_authors():
    # the minimal case: r = [1, 1, 0], log-probs [−1, −2, −3], β = 0.25
    np.testing.assert_allclose(rewards.unlikeliness(jnp.array([1.0, 1.0, 0.0]), jnp.array([-1.0, -2.0, -3.0])),
                               [1 - 0.25 * 2 / 3, 1 - 0.25 / 3, 0.0], rtol=1e-6)
    rng = np.random.default_rng(0)
    for n in (1, 2, 5, 8):
        for c in range(n + 1):
            scores = np.array([1.0] * c + [0.0] * (n - c))
            rng.shuffle(scores)
            logp = rng.normal(size=n).round(1)  # rounding makes ties
            shaped, a_authors = _authors_unlikeliness(scores, logp, 0.25)
            with x64():
                got = np.asarray(rewards.unlikeliness(jnp.asarray(scores), jnp.asarray(logp)))
                np.testing.assert_allclose(got, shaped, atol=1e-12)
                if n > 1:  # GRPO with the sample std on the shaped rewards
                    np.testing.assert_allclose(adv.grpo(jnp.asarray(got), ddof=1), a_authors, atol=1e-9)
    # β = 0 is the identity; an all-wrong group stays zero; ties rank by position; jittable
    r, logp = jnp.array([1.0, 0.0, 1.0, 1.0]), jnp.array([-1.0, -5.0, -3.0, -2.0])
    np.testing.assert_array_equal(rewards.unlikeliness(r, logp, beta=0.0), r)
    np.testing.assert_array_equal(rewards.unlikeliness(jnp.zeros(3), jnp.zeros(3)), np.zeros(3))
    np.testing.assert_allclose(rewards.unlikeliness(jnp.ones(3), jnp.zeros(3), beta=0.3), [1, 0.9, 0.8])
    np.testing.assert_allclose(jax.jit(rewards.unlikeliness)(r, logp), rewards.unlikeliness(r, logp))
    # weight-0 (padding) samples are not ranked and N is the counted size
    padded = rewards.unlikeliness(jnp.array([1.0, 1.0, 0.0, 1.0]), jnp.array([-1.0, -2.0, -3.0, -9.0]),
                                  weights_N=jnp.array([1.0, 1.0, 1.0, 0.0]))
    np.testing.assert_allclose(np.asarray(padded)[:3], [1 - 0.25 * 2 / 3, 1 - 0.25 / 3, 0.0], rtol=1e-6)


def test_positive_sample_weight():
    a = jnp.array([0.5, -0.5, 0.0])
    np.testing.assert_allclose(losses.positive_sample_weight(a), [0.1, 1.0, 1.0], rtol=1e-6)
    np.testing.assert_array_equal(losses.positive_sample_weight(a, 1.0), np.ones(3))
    logp = jnp.array([-1.0, -2.0, -3.0])
    weighted = losses.reinforce_loss(logp, a) * losses.positive_sample_weight(a, 0.25)
    np.testing.assert_allclose(weighted, [0.25 * 0.5, -1.0, 0.0], rtol=1e-6)
    with pytest.raises(CatsimError):
        losses.positive_sample_weight(a, -1.0)
