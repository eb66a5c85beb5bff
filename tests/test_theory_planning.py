"""The planning tool's risk computation: Lemma 3.1, Monte Carlo, and the τ̂ estimator on synthetic
answer distributions with known masses."""

import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.theory import planning, tail_miss_probability


def test_group_risk_is_lemma_31():
    mu = np.array([0.63, 0.3, 0.9])
    tau = np.array([6.3e-5, 0.05, 0.2])
    n = np.array([2, 8, 32, 1024])
    got = planning.group_risk(mu[:, None], tau[:, None], n[None, :])
    want = tail_miss_probability(n[None, :], tau[:, None], mu[:, None])
    np.testing.assert_allclose(got, want, rtol=1e-14)
    # by hand at one point: (1−τ)^N − (μ−τ)^N − (1−μ)^N
    assert got[1, 1] == pytest.approx(0.95**8 - 0.25**8 - 0.7**8, rel=1e-13)


def test_group_risk_edge_cases():
    # no rare subset / no correct mass: undefined; all correct mass rare: never missed while active
    got = planning.group_risk(np.array([0.5, 0.0, 0.4, 1.0]), np.array([0.0, 0.0, 0.4, 1.0]), 8)
    assert np.isnan(got[0]) and np.isnan(got[1])
    assert got[2] == 0.0 and got[3] == 0.0
    with pytest.raises(CatsimError, match="tau <= mu"):
        planning.group_risk(0.2, 0.3, 4)


def test_group_risk_matches_monte_carlo():
    # categorical with a rare correct answer (τ), other correct (μ−τ), wrong (1−μ)
    rng = np.random.default_rng(0)
    mu, tau, n, groups = 0.6, 0.04, 12, 200_000
    draws = rng.choice(3, size=(groups, n), p=[tau, mu - tau, 1 - mu])
    correct = draws < 2
    active = correct.any(1) & (~correct).any(1)
    missed = ~(draws == 0).any(1)
    freq = np.mean(active & missed)
    risk = float(planning.group_risk(mu, tau, n))
    se = np.sqrt(risk * (1 - risk) / groups)
    assert abs(freq - risk) < 5 * se  # 5 standard errors: a false alarm once in ~3.5 million runs
    steps = float(planning.steps_to_rare(mu, tau, n))
    hit = np.mean(active & ~missed)
    assert 1 / steps == pytest.approx(hit, abs=5 * np.sqrt(hit * (1 - hit) / groups))


def _synthetic(rng, probs, correct, p, n):
    labels = rng.choice(len(probs), size=(p, n), p=probs)
    return labels.astype(str), np.asarray(correct)[labels]


def test_tau_estimator_converges_to_the_known_rare_mass():
    # answers a0..a3 correct with masses .40,.15,.03,.02 (μ = .6); wrong .40 in two answers
    probs = np.array([0.40, 0.15, 0.03, 0.02, 0.25, 0.15])
    correct = [True, True, True, True, False, False]
    rng = np.random.default_rng(1)
    labels, ok = _synthetic(rng, probs, correct, p=40, n=4000)
    mu, tau = planning.masses_from_samples(labels, ok, planning.RareRule("share", 0.1))
    # share rule: answers with p ≤ 0.06 are rare → τ = 0.05
    se_mu, se_tau = np.sqrt(0.6 * 0.4 / 4000), np.sqrt(0.05 * 0.95 / 4000)
    assert abs(mu.mean() - 0.6) < 5 * se_mu / np.sqrt(40)
    assert abs(np.median(tau) - 0.05) < 5 * se_tau
    # tail rule, q = 0.1: rarest first while the total ≤ 0.06 → .02 + .03 = .05 too; q = 0.05 → .02
    _, tau_tail = planning.masses_from_samples(labels, ok, planning.RareRule("tail", 0.05))
    assert abs(np.median(tau_tail) - 0.02) < 5 * np.sqrt(0.02 * 0.98 / 4000)


def test_bootstrap_band_covers_the_true_risk_usually():
    probs = np.array([0.45, 0.1, 0.05, 0.4])  # correct: first three; rare (share ≤ .1·.6): .05
    correct = [True, True, True, False]
    rng = np.random.default_rng(2)
    labels, ok = _synthetic(rng, probs, correct, p=60, n=256)
    advice = planning.advise(labels, ok, [2, 8, 32], rule=planning.RareRule("share", 0.1), n_boot=100)
    true = planning.group_risk(0.6, 0.05, np.array([2, 8, 32]))
    inside = (advice.risk_lo <= true) & (true <= advice.risk_hi)
    assert inside[advice.has_rare].mean() > 0.75  # a 90 % band; by chance well above 0.75


def test_rare_rules_on_exact_probabilities():
    p = np.array([0.5, 0.2, 0.05, 0.03, 0.02])  # μ = 0.8
    assert planning.rare_mask(p, planning.RareRule("share", 0.1)).tolist() == [False, False, True, True, True]
    assert planning.rare_mask(p, planning.RareRule("tail", 0.07)).tolist() == [False, False, False, True, True]
    assert planning.RareRule.parse("tail:0.2") == planning.RareRule("tail", 0.2)
    with pytest.raises(CatsimError, match="unknown rare rule"):
        planning.RareRule.parse("often:0.1")
    with pytest.raises(CatsimError, match="q must"):
        planning.RareRule("share", 1.5)


def test_advise_recommendation_and_json():
    rng = np.random.default_rng(3)
    labels, ok = _synthetic(rng, np.array([0.55, 0.04, 0.41]), [True, True, False], p=20, n=128)
    advice = planning.advise(labels, ok, [2, 4, 8, 16, 32, 64, 128], n_boot=50)
    assert advice.has_rare.sum() >= 15
    # risk per N follows the mean of the prompts' risks
    np.testing.assert_allclose(advice.mean_risk, np.nanmean(advice.risk, axis=0))
    # τ ≈ 0.04: the risk falls below 0.1 only around N ≳ 60; the recommendation must meet the target
    k = list(advice.group_sizes).index(advice.recommended_n)
    assert advice.mean_risk_hi[k] <= 0.1 or advice.recommended_gamma > 0
    assert str(advice.recommended_n) in advice.reasoning
    js = advice.to_json()
    assert js["recommended_n"] == advice.recommended_n and len(js["risk"]) == 20
    with pytest.raises(CatsimError, match="group sizes"):
        planning.advise(labels, ok, [])
    with pytest.raises(CatsimError, match="P x n"):
        planning.advise(labels[0], ok[0], [2])


def test_advise_without_rare_answers_says_so():
    # half the samples correct, all with the same answer "a": no rare subset; Pr(active) at N = 2 is
    # 1 − 2·0.5² = 0.5, enough signal, so the smallest N is advised
    labels = np.where(np.arange(10) % 2 == 0, "a", "b")[None, :].repeat(5, axis=0)
    advice = planning.advise(labels, labels == "a", [2, 8], n_boot=5)
    assert not advice.has_rare.any() and advice.recommended_gamma == 0.0 and not advice.too_weak
    assert advice.recommended_n == 2
    np.testing.assert_allclose(advice.active_share, [0.5, 1 - 2 * 0.5**8])
    # unseen is not absent: 10 samples bound the mass of an unseen correct answer at 1 − 0.05^(1/10)
    # (95 %), and the risk is reported at that bound (Lemma 3.1 at μ̂ = 0.5, τ = 0.259)
    bound = 1 - 0.05 ** 0.1
    assert advice.unseen_bound == pytest.approx(bound, rel=1e-12)
    np.testing.assert_allclose(advice.risk_at_unseen_bound, planning.group_risk(0.5, bound, np.array([2, 8])),
                               rtol=1e-12)
    assert "no loss" not in advice.reasoning and "bounds the rare mass" in advice.reasoning
    assert f"{bound:.3f}" in advice.reasoning
    # the point value and its band agree: no mean risk, no band (even where resamples find rare answers)
    js = advice.to_json()
    assert js["mean_risk"] == js["mean_risk_lo"] == js["mean_risk_hi"] == [None, None]
    assert None not in js["mean_risk_at_unseen_bound"]
    assert None not in js["focal_weights"]["0.5"][0]


def test_advise_with_inactive_groups_weighs_activity():
    # μ̂ = 1/64 on every prompt (one correct sample, always the same answer): no rare subset, and
    # Pr(active) = 1 − μ^N − (1 − μ)^N is 0.031 at N = 2, 0.22 at N = 16, 0.63 at N = 64
    labels = np.where(np.arange(64) == 0, "a", "b")[None, :].repeat(4, axis=0)
    ok = labels == "a"
    mu = 1 / 64
    expect = [1 - mu**n - (1 - mu) ** n for n in (2, 16, 64)]
    advice = planning.advise(labels, ok, [2, 16], n_boot=5)
    np.testing.assert_allclose(advice.active_share, expect[:2], rtol=1e-12)
    assert advice.too_weak and "too weak" in advice.reasoning and advice.recommended_n == 16
    js = advice.to_json()
    assert js["too_weak_for_rl"] is True and None not in js["active_share"]
    # with N = 64 on the list, most groups are active there: that N is advised, not N = 2
    advice = planning.advise(labels, ok, [2, 16, 64], n_boot=5)
    assert not advice.too_weak and advice.recommended_n == 64
    np.testing.assert_allclose(advice.active_share, expect, rtol=1e-12)
    # a model that solves everything gives no signal either
    advice = planning.advise(labels, np.ones_like(ok), [2, 16], n_boot=5)
    assert advice.too_weak and "too strong" in advice.reasoning


def test_expected_focal_weight_by_hand_and_monte_carlo():
    mu = np.array([0.3, 0.8])
    # N = 2: the only active count is X = 1 → (1/2)^γ whatever μ
    np.testing.assert_allclose(planning.expected_focal_weight(mu, [2], 0.5)[:, 0], 0.5**0.5, rtol=1e-12)
    # N = 3, μ = 0.3: X=1 w.p. 3·.3·.49 = .441, X=2 w.p. 3·.09·.7 = .189
    want = (0.441 * (2 / 3) + 0.189 * (1 / 3)) / (0.441 + 0.189)
    assert planning.expected_focal_weight([0.3], [3], 1.0)[0, 0] == pytest.approx(want, rel=1e-12)
    rng = np.random.default_rng(4)
    x = rng.binomial(16, 0.8, size=400_000)
    x = x[(x > 0) & (x < 16)]
    mc = np.power(1 - x / 16, 0.5)
    got = planning.expected_focal_weight([0.8], [16], 0.5)[0, 0]
    assert abs(mc.mean() - got) < 5 * mc.std() / np.sqrt(mc.size)


def test_expected_focal_weight_at_mu_zero_and_one_is_the_limit():
    """No group is active at μ̂ = 0 or 1: the weight is the limit, that of one correct (wrong) sample."""
    ns, gamma = [2, 8, 64], 0.5
    at0 = planning.expected_focal_weight([0.0, 1.0], ns, gamma)
    np.testing.assert_allclose(at0[0], [(1 - 1 / n) ** gamma for n in ns], rtol=1e-12)
    np.testing.assert_allclose(at0[1], [(1 / n) ** gamma for n in ns], rtol=1e-12)
    near = planning.expected_focal_weight([1e-9, 1 - 1e-9], ns, gamma)
    np.testing.assert_allclose(near, at0, rtol=1e-6)
    assert np.isnan(planning.expected_focal_weight([0.0], [1], gamma)[0, 0])  # N = 1: never active


def test_advice_never_recommends_an_n_below_the_risk_peak():
    rng = np.random.default_rng(5)
    labels, ok = _synthetic(rng, np.array([0.2, 0.01, 0.79]), [True, True, False], p=30, n=200)
    advice = planning.advise(labels, ok, [2, 4, 8, 16, 32, 64], n_boot=30)
    peak = advice.group_sizes[int(np.nanargmax(advice.mean_risk))]
    assert advice.recommended_n >= peak
    assert advice.mean_risk[0] < advice.mean_risk.max()  # small N: low risk, because rarely active
