"""A-GRAE (arXiv 2602.05548; catsim.objectives.agrae): hand-computed groups from the authors'
formula, edge groups, the counts form, the registry's batch-level hook, and the authors' own
`compute_grpo_outcome_advantage` (Yu7-code/A-GRAE, verl/trainer/ppo/core_algos.py) as the oracle."""

from __future__ import annotations

import math
from collections import defaultdict

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.objectives import agrae as ag
from catsim.objectives import registry

RULE = registry.get("agrae")


def _np(x):
    return np.asarray(x, np.float64)


# ------------------------------------------------------------------ hand-computed from the formula
def test_one_correct_of_four():
    """r = [1, 0, 0, 0]: p = 1/4, √p = 1/2; sample std s = sqrt(c(n−c)/(n(n−1))) = sqrt(3/12) = 1/2;
    A⁰ = (1 − 1/4)/(1/2) = 3/2 (correct), (0 − 1/4)/(1/2) = −1/2 (wrong). At ε = 0 the focus mix
    is ½[(1−B)/(1 − 1/2) + B/(1/2)] = ½[2(1−B) + 2B] = 1 for every B, so A = A⁰ before the clamp,
    and the positive A is × min(1, B): B = 1/4 -> 3/8, B = 1/2 -> 3/4, B = 1 -> 3/2; wrong −1/2."""
    r = jnp.array([1.0, 0.0, 0.0, 0.0])
    for b, a_c in ((0.25, 0.375), (0.5, 0.75), (1.0, 1.5)):
        np.testing.assert_allclose(_np(ag.agrae(r, b, eps=0.0)), [a_c, -0.5, -0.5, -0.5], rtol=1e-6)
        np.testing.assert_allclose(_np(ag.agrae_counts(1, 4, b, eps=0.0)), [a_c, -0.5], rtol=1e-6)


def test_nine_correct_of_sixteen():
    """c = 9, n = 16: p = 9/16, √p = 3/4; s² = 9·7/(16·15) = 21/80; A⁰ = (7/16)/s and −(9/16)/s.
    B = 1/2: mix = ½[(1/2)/(1/4) + (1/2)/(3/4)] = ½[2 + 2/3] = 4/3; the positive one × 1/2:
    A_c = (7/16)(4/3)(1/2)/s = (7/24)/s, A_w = −(9/16)(4/3)/s = −(3/4)/s.
    B = 0: mix = ½/(1/4) = 2, the positive one × 0: A_c = 0, A_w = −(9/8)/s.
    B = 1: mix = ½/(3/4) = 2/3, no damping: A_c = (7/24)/s, A_w = −(3/8)/s."""
    s = math.sqrt(21 / 80)
    r = jnp.array([1.0] * 9 + [0.0] * 7)
    for b, a_c, a_w in ((0.5, 7 / 24 / s, -0.75 / s), (0.0, 0.0, -9 / 8 / s), (1.0, 7 / 24 / s, -3 / 8 / s)):
        got = _np(ag.agrae(r, b, eps=0.0))
        np.testing.assert_allclose(got, [a_c] * 9 + [a_w] * 7, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(_np(ag.agrae_counts(9, 16, b, eps=0.0)), [a_c, a_w], rtol=1e-6, atol=1e-7)


def test_the_authors_eps_enters_every_denominator():
    """ε = 1e-6 as in the authors' code: s + ε, √p + ε and 1 − √p + ε (c = 1 of 4, B = 1/2)."""
    eps = 1e-6
    a0_c, a0_w = 0.75 / (0.5 + eps), -0.25 / (0.5 + eps)
    mix = 0.5 * 0.5 / (0.5 + eps) + 0.5 * 0.5 / (0.5 + eps)
    np.testing.assert_allclose(_np(ag.agrae_counts(1, 4, 0.5, eps=eps)), [a0_c * mix * 0.5, a0_w * mix], rtol=1e-6)


# ------------------------------------------------------------------ edge groups
@pytest.mark.parametrize("b", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("eps", [0.0, 1e-6])
def test_edge_groups(b, eps):
    """All correct and all wrong: A⁰ = 0, so 0 (never NaN, also at ε = 0 where 1 − √1 = 0 and √0 = 0).
    One correct of 8: the only positive sample, damped by min(1, B); the wrong ones keep the mix."""
    n = 8
    for c in (0, n):
        r = jnp.array([1.0] * c + [0.0] * (n - c))
        assert np.all(_np(ag.agrae(r, b, eps=eps)) == 0.0)
        assert np.all(_np(ag.agrae_counts(c, n, b, eps=eps)) == 0.0)
    p, s = 1 / 8, math.sqrt(7 / 56)
    mix = 0.5 * ((1 - b) / (1 - math.sqrt(p) + eps) + b / (math.sqrt(p) + eps))
    a_c, a_w = (1 - p) / (s + eps) * mix * min(1.0, b), -p / (s + eps) * mix
    got = _np(ag.agrae(jnp.array([1.0] + [0.0] * 7), b, eps=eps))
    np.testing.assert_allclose(got, [a_c] + [a_w] * 7, rtol=1e-5, atol=1e-7)


def test_group_of_one_gets_zero():
    """No sample std for n = 1: 0 in both forms (the authors' verl code gives it mean 0, std 1: see
    test_the_authors_singleton_differs)."""
    for r in (1.0, 0.0):
        assert np.all(_np(ag.agrae(jnp.array([r]), 0.5)) == 0.0)
        assert np.all(_np(ag.agrae_counts(r, 1, 0.5)) == 0.0)
    assert not RULE.can_move(1)


@pytest.mark.parametrize("n", [2, 5, 8])
def test_counts_form_is_the_group_form(n):
    for c in range(n + 1):
        r = jnp.array([1.0] * c + [0.0] * (n - c))
        for b in (0.0, 0.2, 0.7, 1.0):
            a_c, a_w = _np(ag.agrae_counts(c, n, b))
            np.testing.assert_allclose(_np(ag.agrae(r, b)), [a_c] * c + [a_w] * (n - c), rtol=1e-5, atol=1e-6)


def test_jit_and_traced_batch_mean():
    r = jnp.array([1.0, 0.0, 1.0, 0.0, 0.0])
    f = jax.jit(ag.agrae)
    np.testing.assert_allclose(_np(f(r, 0.4)), _np(ag.agrae(r, 0.4)), rtol=1e-6)
    g = jax.jit(ag.agrae_counts)
    np.testing.assert_allclose(_np(g(2.0, 5.0, 0.4)), _np(ag.agrae_counts(2, 5, 0.4)), rtol=1e-6)


def test_bad_inputs_are_one_line_errors():
    with pytest.raises(CatsimError, match="batch mean must lie in"):
        ag.agrae(jnp.array([1.0, 0.0]), 1.5)
    with pytest.raises(CatsimError, match="rewards must lie in"):
        ag.agrae(jnp.array([1.0, -1.0]), 0.5)
    with pytest.raises(CatsimError, match="alpha"):
        ag.agrae(jnp.array([1.0, 0.0]), 0.5, alpha=0.0)


# ------------------------------------------------------------------ the registry's batch-level hook
def test_registry_entry_and_batch_mean_hook():
    assert RULE.reads_batch_mean and RULE.reads_eps and RULE.binary
    assert "agrae" in registry.EPS_NAMES
    assert [r.name for r in registry.RULES.values() if r.reads_batch_mean] == ["agrae"]
    o = registry.Options(eps=0.0)
    r = jnp.array([1.0, 0.0, 0.0, 0.0])
    # default B: the group's own mean (a batch of one group, the simulator's case)
    np.testing.assert_allclose(_np(RULE.advantages(r, o)), [0.375, -0.5, -0.5, -0.5], rtol=1e-6)
    np.testing.assert_allclose(_np(RULE.advantages(r, o, 0.5)), [0.75, -0.5, -0.5, -0.5], rtol=1e-6)
    np.testing.assert_allclose(_np(RULE.class_advantages(1, 4, o)), [0.375, -0.5], rtol=1e-6)
    np.testing.assert_allclose(_np(RULE.class_advantages(1, 4, o, 0.5)), [0.75, -0.5], rtol=1e-6)
    # a rule that does not read B ignores it
    grpo = registry.get("grpo")
    np.testing.assert_array_equal(_np(grpo.advantages(r, o, 0.9)), _np(grpo.advantages(r, o)))


def test_batch_mean_is_the_mean_of_group_means():
    x = jnp.array([[1.0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
    assert float(registry.batch_mean(x)) == pytest.approx((0.25 + 0.5 + 1.0) / 3)
    assert float(registry.batch_mean(x, jnp.array([1.0, 1.0, 0.0]))) == pytest.approx(0.375)  # third dropped
    assert float(registry.batch_mean(x, jnp.zeros(3))) == 0.0


def test_llm_step_passes_the_batch_mean_of_its_groups():
    """The trainer's advantage program gives each group the A-GRAE advantage at B = the step's mean over
    its groups that carry loss (not each group's own mean)."""
    from catsim.llm.rl import step

    scores = jnp.array([[1.0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]])
    settings = step.AdvantageSettings("agrae", registry.Options(eps=0.0), (1.0, 0.0), 1.0, False, None)
    for mask in (jnp.ones(3), jnp.array([1.0, 1.0, 0.0])):
        mu = jnp.mean(scores, axis=1)
        adv, _ = step._advantages(settings, scores, mask, mu, jnp.float32(0.0), None)
        b = float(registry.batch_mean(scores, mask))
        want = np.stack([_np(ag.agrae(row, b, eps=0.0)) for row in scores]) * _np(mask)[:, None]
        np.testing.assert_allclose(_np(adv), want, rtol=1e-5, atol=1e-6)


def test_host_takes_the_batch_mean_over_groups_of_every_size():
    """The plug-ins' host function: B over the scorable groups of the batch (sizes 4 and 2 here; the
    NaN group and the group of one, which get 0, are out), the same B for each."""
    from catsim.integrations import host

    rewards = np.array([1, 0, 0, 0, 1, 1, 1, 0, 1, 0, np.nan, 1, 1], np.float32)
    uids = np.array([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 4])
    adv, _, _ = host.group_advantages(rewards, uids, host.resolve("agrae", options=registry.Options(eps=0.0)))
    b = (0.25 + 0.75 + 0.5) / 3
    np.testing.assert_allclose(adv[:4], _np(ag.agrae(jnp.array([1.0, 0, 0, 0]), b, eps=0.0)), rtol=1e-5)
    np.testing.assert_allclose(adv[4:8], _np(ag.agrae(jnp.array([1.0, 1, 1, 0]), b, eps=0.0)), rtol=1e-5)
    np.testing.assert_allclose(adv[8:10], _np(ag.agrae(jnp.array([1.0, 0]), b, eps=0.0)), rtol=1e-5)
    assert np.all(adv[10:] == 0.0)


# ------------------------------------------------------------------ the authors' code as the oracle
def _authors(token_level_rewards, eos_mask, index, grpo_weight, epsilon=1e-6, norm_adv_by_std_in_grpo=True):
    """The body of compute_grpo_outcome_advantage, Yu7-code/A-GRAE@5f129ef verl/trainer/ppo/core_algos.py,
    copied as released (its print removed)."""
    import torch

    response_length = token_level_rewards.shape[-1]
    scores = token_level_rewards.sum(dim=-1)
    id2score = defaultdict(list)
    id2mean = {}
    id2std = {}
    with torch.no_grad():
        bsz = scores.shape[0]
        for i in range(bsz):
            id2score[index[i]].append(scores[i])
        for idx in id2score:
            if len(id2score[idx]) == 1:
                id2mean[idx] = torch.tensor(0.0)
                id2std[idx] = torch.tensor(1.0)
            elif len(id2score[idx]) > 1:
                id2mean[idx] = torch.mean(torch.tensor(id2score[idx]))
                id2std[idx] = torch.std(torch.tensor([id2score[idx]]))
            else:
                raise ValueError(f"no score in prompt index: {idx}")
        all_means = torch.tensor(list(id2mean.values()))
        overall_mean = torch.mean(all_means)
        for i in range(bsz):
            if norm_adv_by_std_in_grpo:
                scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
            else:
                scores[i] = scores[i] - id2mean[index[i]]
            if grpo_weight == 2.0:
                scores_difffouces = 0.5 * scores[i] / (torch.sqrt(id2mean[index[i]]) + epsilon)
                scores_easyfouces = 0.5 * scores[i] / (1 - torch.sqrt(id2mean[index[i]]) + epsilon)
                scores[i] = (1 - overall_mean) * scores_easyfouces + overall_mean * scores_difffouces
                if scores[i] > 0:
                    alpha = 1  # 0.5 for geo3k and med, 1 for  math
                    wieght = min(1, overall_mean / alpha)
                    scores[i] = scores[i] * wieght
        scores = scores.unsqueeze(-1).tile([1, response_length]) * eos_mask
    return scores, scores


def _oracle(scores_B, uids_B):
    torch = pytest.importorskip("torch", reason="torch (the pinned CPU oracle, 2.13.0) is not installed")
    t = torch.zeros(len(scores_B), 3)
    t[:, -1] = torch.as_tensor(scores_B)  # outcome reward on the last token, as verl lays it out
    adv, _ = _authors(t, torch.ones(len(scores_B), 3), uids_B, grpo_weight=2.0)
    return adv[:, 0].numpy()


@pytest.mark.parametrize("graded", [False, True])
def test_the_authors_function_is_the_oracle(graded):
    """Several groups of sizes 2 to 8, shuffled in the batch and keyed by verl-style string uids;
    0/1 scores (the registry's binary rule) or graded scores in [0, 1] (the group form allows them)."""
    rng = np.random.default_rng(7 + graded)
    sizes = [2, 3, 4, 5, 8, 8, 8, 6]
    uids = np.array([f"uid-{g}" for g, n in enumerate(sizes) for _ in range(n)], dtype=object)
    scores = rng.random(uids.size) if graded else (rng.random(uids.size) < 0.4).astype(np.float64)
    scores[uids == "uid-5"] = 1.0  # an all-correct group
    scores[uids == "uid-6"] = 0.0  # an all-wrong group
    order = rng.permutation(uids.size)
    uids, scores = uids[order], scores[order].astype(np.float32)
    want = _oracle(scores, uids)
    groups = sorted(set(uids))
    b = float(np.mean([scores[uids == u].mean() for u in groups]))
    got = np.zeros_like(scores)
    for u in groups:
        got[uids == u] = np.asarray(ag.agrae(jnp.asarray(scores[uids == u]), b, eps=1e-6))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    if not graded:  # the registry's binary rule, through the host function the plug-ins share
        from catsim.integrations import host

        adv, _, _ = host.group_advantages(scores, uids, host.resolve("agrae", options=registry.Options(eps=1e-6)))
        np.testing.assert_allclose(adv, want, rtol=2e-5, atol=2e-6)


def test_the_authors_singleton_differs():
    """A deliberate difference: verl's code gives a group of one mean 0 and std 1, so A⁰ = r/(1 + ε), and
    counts it as mean 0 in B: here B = (1/4 + 0)/2 = 1/8 and the solo correct sample gets
    [(1 − B)·½A⁰/(1 + ε) + B·½A⁰/ε]·B ≈ 7812.5 (its hard term ½/ε = 5·10⁵). catsim gives such a group 0
    (the authors' runs use n = 8: none arises there)."""
    uids = np.array(["a", "a", "a", "a", "solo"], dtype=object)
    want = _oracle(np.array([1, 0, 0, 0, 1], np.float32), uids)
    eps, b = 1e-6, 0.125
    a0 = 1 / (1 + eps)
    assert want[-1] == pytest.approx(((1 - b) * 0.5 * a0 / (1 + eps) + b * 0.5 * a0 / eps) * b, rel=1e-4)
    assert float(ag.agrae(jnp.array([1.0]), 0.5)[0]) == 0.0


def test_the_released_gate_never_fires():
    """ray_trainer.py: grpo_weight = w₀ + (t/T)(1 − w₀) with w₀ = 2.0 and t = global_steps, which starts
    at 1; core_algos applies A-GRAE only when grpo_weight == 2.0. It never is, for any T tried, so the
    released scripts train GRPO: catsim applies the re-weighting at every step instead."""
    w0 = 2.0
    for total in (1, 7, 20, 140, 1000, 100_000):
        assert not any(w0 + (t / total) * (1 - w0) == 2.0 for t in range(1, total + 1))
    assert w0 + (0 / 140) * (1 - w0) == 2.0  # it would at step 0, which the loop never trains
