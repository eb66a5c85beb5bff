"""catsim.objectives.losses: gradients on a 6-action softmax vs hand derivations, clipping at the
bounds, KL estimators, aggregation, jit parity."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.numerics import x64
from catsim.objectives import advantages as adv
from catsim.objectives import losses as L

Z6 = np.array([0.3, -0.2, 0.5, 0.1, -0.4, 0.0])
DRAWS = np.array([0, 0, 3, 4, 5])
W = np.array([1.0, 0.5, -1.0, -0.25, 2.0])


def _softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def _grad(loss_of_logits, z):
    with x64():
        return np.asarray(jax.grad(loss_of_logits)(jnp.asarray(z, dtype=jnp.float64)))


def test_linear_surrogate_gradient_on_6_action_softmax():
    # d/dz of −(1/N)Σ_j w_j p_{o_j} = −(1/N)Σ_j w_j p_{o_j}(e_{o_j} − p)
    p = _softmax(Z6)
    expected = np.zeros(6)
    for o, w in zip(DRAWS, W):
        e = np.eye(6)[o]
        expected -= w * p[o] * (e - p) / len(DRAWS)

    def loss(z):
        logp = L.action_log_probs(z, DRAWS)
        return L.token_mean(L.linear_prob_surrogate_loss(logp, jnp.asarray(W)))

    np.testing.assert_allclose(_grad(loss, Z6), expected, rtol=1e-12, atol=1e-15)


def test_reinforce_gradient_on_6_action_softmax():
    # d/dz of −(1/N)Σ_j w_j log p_{o_j} = −(1/N)Σ_j w_j (e_{o_j} − p)
    p = _softmax(Z6)
    expected = -sum(w * (np.eye(6)[o] - p) for o, w in zip(DRAWS, W)) / len(DRAWS)

    def loss(z):
        return L.token_mean(L.reinforce_loss(L.action_log_probs(z, DRAWS), jnp.asarray(W)))

    np.testing.assert_allclose(_grad(loss, Z6), expected, rtol=1e-12, atol=1e-15)


def _subset_mass_change(p, dz, subset):
    # first-order ΔQ_S = Σ_{i∈S} p_i Δz_i − Q_S Σ_j p_j Δz_j (THEORY.md §2)
    return p[subset].dot(dz[subset]) - p[subset].sum() * p.dot(dz)


@pytest.mark.published
def test_theory_worked_example_log_prob_rule():
    # p = (.4,.1,.1 | .2,.1,.1), P = {0,1,2}, draws (0,0,3,4), GRPO A = (1,1,−1,−1):
    # ΔQpos = +0.125η, ΔQu,pos = −0.025η (THEORY.md §2 worked example).
    p = np.array([0.4, 0.1, 0.1, 0.2, 0.1, 0.1])
    draws = np.array([0, 0, 3, 4])
    with x64():
        a = adv.grpo(jnp.array([1.0, 1.0, 0.0, 0.0]), eps=0.0)
        np.testing.assert_allclose(a, [1, 1, -1, -1])

        def loss(z):
            return L.token_mean(L.reinforce_loss(L.action_log_probs(z, draws), a))

        dz = -np.asarray(jax.grad(loss)(jnp.log(jnp.asarray(p))))  # η = 1
    assert _subset_mass_change(p, dz, [0, 1, 2]) == pytest.approx(0.125, abs=1e-12)
    assert _subset_mass_change(p, dz, [1, 2]) == pytest.approx(-0.025, abs=1e-12)


@pytest.mark.published
def test_theory_worked_example_paper_eq5():
    # Paper eq. 5 on distinct sets A={0}, B={3,4}, Rc=1, Rw=0 (SR = 0.4), N = 4:
    # ΔQpos = +0.0124η, ΔQu,pos = −0.0052η.
    p = np.array([0.4, 0.1, 0.1, 0.2, 0.1, 0.1])
    distinct = np.array([0, 3, 4])
    rewards = np.array([1.0, 0.0, 0.0])
    with x64():

        def loss(z):
            terms = L.linear_prob_surrogate_loss(L.action_log_probs(z, distinct), rewards)
            return jnp.sum(terms) / 4

        dz = -np.asarray(jax.grad(loss)(jnp.log(jnp.asarray(p))))
    # eq. 5 directly: Δz_i = (1/N) p_i (R_i − SR), R = 0 off the sampled set
    r_all = np.zeros(6)
    r_all[distinct] = rewards
    np.testing.assert_allclose(dz, p * (r_all - 0.4) / 4, atol=1e-15)
    assert _subset_mass_change(p, dz, [0, 1, 2]) == pytest.approx(0.0124, abs=1e-12)
    assert _subset_mass_change(p, dz, [1, 2]) == pytest.approx(-0.0052, abs=1e-12)


def test_counts_weighted_token_mean_equals_per_draw_mean():
    # The simulator may aggregate N draws into counts c_V: token_mean(loss_V, c_V) = (1/N)Σ_j.
    counts = np.bincount(DRAWS, minlength=6).astype(float)
    per_action_adv = np.array([0.7, 0.0, 0.0, -0.3, -0.3, 1.1])
    with x64():

        def per_draw(z):
            logp = L.action_log_probs(z, DRAWS)
            return L.token_mean(L.reinforce_loss(logp, jnp.asarray(per_action_adv[DRAWS])))

        def per_count(z):
            logp = jax.nn.log_softmax(z)
            return L.token_mean(L.reinforce_loss(logp, jnp.asarray(per_action_adv)), counts)

        z = jnp.asarray(Z6)
        assert float(per_draw(z)) == pytest.approx(float(per_count(z)), rel=1e-14)
        np.testing.assert_allclose(jax.grad(per_draw)(z), jax.grad(per_count)(z), atol=1e-15)


# --- clipping ---


def _ppo_value_and_dlogp(ratio, a, **kw):
    old = jnp.float32(-1.0)
    logp = old + jnp.log(jnp.float32(ratio))
    value, g = jax.value_and_grad(lambda lp: L.ppo_clip_loss(lp, old, jnp.float32(a), **kw))(logp)
    return float(value), float(g)


@pytest.mark.parametrize(
    "ratio, a, value, dlogp",
    [
        # ρ = 1.5, A = +1: −min(1.5, 1.2) = −1.2, clipped → no gradient
        (1.5, 1.0, -1.2, 0.0),
        # ρ = 1.5, A = −1: −min(−1.5, −1.2) = 1.5, unclipped → d/dlogp (−ρA) = 1.5
        (1.5, -1.0, 1.5, 1.5),
        # ρ = 0.5, A = −1: −min(−0.5, −0.8) = 0.8, clipped → 0
        (0.5, -1.0, 0.8, 0.0),
        # ρ = 0.5, A = +2: −min(1.0, 1.6) = −1.0, unclipped → −ρA = −1.0
        (0.5, 2.0, -1.0, -1.0),
        # ρ = 1: value −A, gradient −A (REINFORCE)
        (1.0, 3.0, -3.0, -3.0),
    ],
)
def test_ppo_clip_hand_cases(ratio, a, value, dlogp):
    v, g = _ppo_value_and_dlogp(ratio, a)
    assert v == pytest.approx(value, rel=1e-6)
    assert g == pytest.approx(dlogp, rel=1e-6, abs=1e-7)


def test_dapo_clip_higher():
    # ρ = 1.25, A = +1: GRPO clips at 1.2 (no gradient); DAPO's 1.28 does not clip.
    old = jnp.float32(0.0)
    logp = jnp.log(jnp.float32(1.25))
    assert float(L.ppo_clip_loss(logp, old, jnp.float32(1.0))) == pytest.approx(-1.2)
    assert float(L.dapo_clip_loss(logp, old, jnp.float32(1.0))) == pytest.approx(-1.25, rel=1e-6)
    g = jax.grad(lambda lp: L.dapo_clip_loss(lp, old, jnp.float32(1.0)))(logp)
    assert float(g) == pytest.approx(-1.25, rel=1e-6)
    # low side unchanged: ρ = 0.7, A = −1 → clipped at 0.8 in both
    lo = jnp.log(jnp.float32(0.7))
    assert float(L.dapo_clip_loss(lo, old, jnp.float32(-1.0))) == pytest.approx(0.8)


def test_clip_fractions_at_and_beyond_bounds():
    ratios = np.array([0.79, 0.8, 1.0, 1.2, 1.21, 1.21, 0.79])
    advs = np.array([-1.0, -1.0, 1.0, 1.0, 1.0, -1.0, 1.0])
    with x64():
        logp = jnp.log(jnp.asarray(ratios))
        old = jnp.zeros(7)
        low, high = L.ppo_clip_fractions(logp, old, jnp.asarray(advs))
        # exactly at the bound (0.8, 1.2) is not clipped; beyond with the matching sign is
        np.testing.assert_array_equal(low, [1, 0, 0, 0, 0, 0, 0])
        np.testing.assert_array_equal(high, [0, 0, 0, 0, 1, 0, 0])
        assert float(L.token_mean(high)) == pytest.approx(1 / 7)
        c = L.cispo_clip_fraction(jnp.log(jnp.array([0.01, 5.9, 6.1])), jnp.zeros(3))
        np.testing.assert_array_equal(c, [0, 0, 1])


def test_cispo_weight_is_clipped_and_stop_gradient():
    old = jnp.float32(0.0)
    a = jnp.float32(2.0)
    # ρ = 7 → weight clipped to 1 + 5 = 6: loss = −6·A·logp, d/dlogp = −12
    logp = jnp.log(jnp.float32(7.0))
    value, g = jax.value_and_grad(lambda lp: L.cispo_loss(lp, old, a))(logp)
    assert float(value) == pytest.approx(-6 * 2 * float(logp), rel=1e-6)
    assert float(g) == pytest.approx(-12.0, rel=1e-6)
    # ρ = 0.3, default ε_low = 1.0 → lower bound 0, weight 0.3; with ε_low = 0.2 → 0.8
    logp = jnp.log(jnp.float32(0.3))
    assert float(jax.grad(lambda lp: L.cispo_loss(lp, old, a))(logp)) == pytest.approx(
        -0.6, rel=1e-6
    )
    g = jax.grad(lambda lp: L.cispo_loss(lp, old, a, clip_low=0.2))(logp)
    assert float(g) == pytest.approx(-1.6, rel=1e-6)


def test_on_policy_surrogates_equal_reinforce_gradient():
    # At ρ = 1 (old = new), GRPO/DAPO/CISPO all give the REINFORCE gradient on logits.
    a = jnp.asarray(W)
    with x64():
        z0 = jnp.asarray(Z6)
        old = L.action_log_probs(z0, DRAWS)
        ref = jax.grad(lambda z: L.token_mean(L.reinforce_loss(L.action_log_probs(z, DRAWS), a)))(
            z0
        )
        for name in ("grpo", "dapo", "cispo", "reinforce"):
            fn = L.SURROGATES[name]
            g = jax.grad(lambda z, fn=fn: L.token_mean(fn(L.action_log_probs(z, DRAWS), old, a)))(
                z0
            )
            np.testing.assert_allclose(g, ref, atol=1e-14, err_msg=name)


# --- regularisers ---


def test_kl_estimators_hand_values_and_unbiasedness():
    logp, ref = jnp.log(0.5), jnp.log(0.25)
    assert float(L.kl_k1(logp, ref)) == pytest.approx(np.log(2), rel=1e-6)
    # k3 = q/p − log(q/p) − 1 = 0.5 + log 2 − 1
    assert float(L.kl_k3(logp, ref)) == pytest.approx(0.5 + np.log(2) - 1, rel=1e-6)
    # Exact expectation over a categorical: E_p[k1] = E_p[k3] = KL(p‖q).
    zq = np.array([0.0, 1.0, -1.0, 0.5, 0.2, -0.3])
    with x64():
        lp = jax.nn.log_softmax(jnp.asarray(Z6))
        lq = jax.nn.log_softmax(jnp.asarray(zq))
        p = jnp.exp(lp)
        kl = float(L.categorical_kl(jnp.asarray(Z6), jnp.asarray(zq)))
        kl_np = float(np.sum(_softmax(Z6) * (np.log(_softmax(Z6)) - np.log(_softmax(zq)))))
        assert kl == pytest.approx(kl_np, rel=1e-12)
        assert float(jnp.sum(p * L.kl_k1(lp, lq))) == pytest.approx(kl, rel=1e-12)
        assert float(jnp.sum(p * L.kl_k3(lp, lq))) == pytest.approx(kl, rel=1e-12)
        # KL to itself has zero value and zero gradient
        g = jax.grad(lambda z: L.categorical_kl(z, jnp.asarray(Z6)))(jnp.asarray(Z6))
        np.testing.assert_allclose(g, 0.0, atol=1e-15)


def test_entropy():
    assert float(L.entropy(jnp.zeros(6))) == pytest.approx(np.log(6), rel=1e-6)
    assert float(L.entropy(jnp.array([0.0, -1e4]))) == pytest.approx(0.0, abs=1e-6)
    assert L.entropy(jnp.zeros((2, 3, 5))).shape == (2, 3)


# --- aggregation ---


def test_aggregations_hand_computed():
    loss = jnp.array([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
    mask = jnp.array([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert float(L.token_mean(loss, mask)) == 2.5  # (1+2+3+4)/4
    assert float(L.sequence_mean(loss, mask)) == 3.0  # (2 + 4)/2
    assert float(L.token_sum_constant(loss, mask, 5)) == 1.0  # 10/(2·5)
    assert float(L.token_mean(loss)) == pytest.approx(28 / 6)
    # a sequence with no valid token is left out of the sequence mean; all-zero mask gives 0
    mask2 = jnp.array([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    assert float(L.sequence_mean(loss, mask2)) == 2.0
    assert float(L.token_mean(loss, jnp.zeros_like(mask))) == 0.0
    with pytest.raises(CatsimError, match="rank 2"):
        L.sequence_mean(jnp.ones(3), jnp.ones(3))
    with pytest.raises(CatsimError, match="max_length"):
        L.token_sum_constant(loss, mask, 0)


def test_shape_checks_and_token_log_probs():
    with pytest.raises(CatsimError, match="shapes must match"):
        L.reinforce_loss(jnp.ones(3), jnp.ones(4))
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(2, 3, 5)))
    tokens = jnp.array([[0, 4, 2], [1, 1, 3]])
    lp = L.action_log_probs(logits, tokens)
    full = jax.nn.log_softmax(logits, axis=-1)
    assert float(lp[1, 2]) == pytest.approx(float(full[1, 2, 3]))
    with pytest.raises(CatsimError, match="actions shape"):
        L.action_log_probs(logits, tokens[:, :2])


def test_jit_matches_eager():
    rng = np.random.default_rng(1)
    logp = jnp.asarray(np.log(rng.uniform(0.05, 1, size=(3, 4))), dtype=jnp.float32)
    old = logp + jnp.asarray(rng.normal(scale=0.3, size=(3, 4)), dtype=jnp.float32)
    a = jnp.asarray(rng.normal(size=(3, 4)), dtype=jnp.float32)
    mask = jnp.asarray(rng.integers(0, 2, size=(3, 4)), dtype=jnp.float32)
    for name, fn in L.SURROGATES.items():
        eager = L.token_mean(fn(logp, old, a), mask)
        jitted = jax.jit(lambda lp, o, aa, m, fn=fn: L.token_mean(fn(lp, o, aa), m))(
            logp, old, a, mask
        )
        np.testing.assert_allclose(jitted, eager, rtol=1e-6, err_msg=name)
    for fn in (L.kl_k1, L.kl_k3):
        np.testing.assert_allclose(jax.jit(fn)(logp, old), fn(logp, old), rtol=1e-6)


def test_clipped_losses_match_numpy_reference_on_random_tokens():
    # Independent NumPy formulas for value and d/dlogp on 2,000 random tokens, both bound sets.
    rng = np.random.default_rng(7)
    n = 2000
    old = np.log(rng.uniform(0.01, 1.0, n))
    logp = old + rng.normal(scale=0.4, size=n)
    a = rng.normal(size=n)
    ratio = np.exp(logp - old)
    with x64():
        args = (jnp.asarray(logp), jnp.asarray(old), jnp.asarray(a))
        for lo, hi in ((0.2, 0.2), (0.2, 0.28)):
            value = np.minimum(ratio * a, np.clip(ratio, 1 - lo, 1 + hi) * a)
            clipped = ((ratio > 1 + hi) & (a > 0)) | ((ratio < 1 - lo) & (a < 0))
            grad = np.where(clipped, 0.0, -ratio * a)

            def total(lp, lo=lo, hi=hi):
                return jnp.sum(L.ppo_clip_loss(lp, args[1], args[2], clip_low=lo, clip_high=hi))

            got = L.ppo_clip_loss(*args, clip_low=lo, clip_high=hi)
            np.testing.assert_allclose(got, -value, rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(jax.grad(total)(args[0]), grad, rtol=1e-12, atol=1e-15)
            low, high = L.ppo_clip_fractions(*args, clip_low=lo, clip_high=hi)
            np.testing.assert_array_equal(np.asarray(low) + np.asarray(high), clipped)
        w = np.clip(ratio, 0.0, 6.0)
        got = jax.grad(lambda lp: jnp.sum(L.cispo_loss(lp, args[1], args[2])))(args[0])
        np.testing.assert_allclose(got, -w * a, rtol=1e-12, atol=1e-15)


def test_ppo_dual_clip_hand_computed():
    # ρ = 4, 2, 0.5 with A = −1, and ρ = 4 with A = +1; ε = 0.2, c = 3 (verl's clip_ratio_c)
    ratio = jnp.array([4.0, 2.0, 0.5, 4.0])
    adv = jnp.array([-1.0, -1.0, -1.0, 1.0])
    logp, old = jnp.log(ratio), jnp.zeros(4)
    plain = L.ppo_clip_loss(logp, old, adv)
    # −min(ρA, clip(ρ)A): 4, 2, 0.8 (clip 0.8 binds), −1.2 (clip 1.2 binds)
    np.testing.assert_allclose(plain, [4.0, 2.0, 0.8, -1.2], rtol=1e-6)
    dual = L.ppo_clip_loss(logp, old, adv, clip_ratio_c=3.0)
    np.testing.assert_allclose(dual, [3.0, 2.0, 0.8, -1.2], rtol=1e-6)  # only ρ > c with A < 0 moves
    grad = jax.grad(lambda lp: jnp.sum(L.ppo_clip_loss(lp, old, adv, clip_ratio_c=3.0)))(logp)
    np.testing.assert_allclose(grad, [0.0, 2.0, 0.0, 0.0], atol=1e-6)  # −A·ρ where unclipped
    np.testing.assert_allclose(L.dapo_clip_loss(logp, old, adv, clip_ratio_c=3.0)[0], 3.0, rtol=1e-6)
    for bad in (1.0, 0.5, float("nan")):
        with pytest.raises(CatsimError, match="clip_ratio_c"):
            L.ppo_clip_loss(logp, old, adv, clip_ratio_c=bad)


def test_bias_corrected_kl_hand_computed():
    # π = 0.5, π_old = 0.25 (ρ = 2), π_ref = 0.25: k3 = 0.5 − ln 0.5 − 1 = ln 2 − 0.5
    logp, old, ref = jnp.log(jnp.array([0.5])), jnp.log(jnp.array([0.25])), jnp.log(jnp.array([0.25]))
    k3 = math.log(2) - 0.5
    np.testing.assert_allclose(L.kl_k3(logp, ref), [k3], rtol=1e-6)
    np.testing.assert_allclose(L.kl_k3_bias_corrected(logp, old, ref), [2 * k3], rtol=1e-6)
    # TRL does not detach the ratio: d(ρ·k3)/dlogπ = ρ·k3 + ρ·(1 − π_ref/π) = 2k3 + 2·0.5
    grad = jax.grad(lambda lp: jnp.sum(L.kl_k3_bias_corrected(lp, old, ref)))(logp)
    np.testing.assert_allclose(grad, [2 * k3 + 1.0], rtol=1e-6)
    # on-policy (π_old = π) the value is plain k3
    np.testing.assert_allclose(L.kl_k3_bias_corrected(logp, logp, ref), [k3], rtol=1e-6)
