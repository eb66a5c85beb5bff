"""pass@k against exact enumeration, bootstrap, paired subsampling test, retained mass, ledger."""

from __future__ import annotations

import itertools
from math import comb

import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.llm import evaluate as ev
from catsim.llm import metrics


def _enumerated_pass_at_k(n, c, k):
    """Share of the C(n, k) k-subsets of n samples (c correct) that contain a correct one."""
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_pass_at_k_equals_enumeration_over_subsets(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            got = float(metrics.pass_at_k(n, c, k))
            assert got == pytest.approx(_enumerated_pass_at_k(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_k_large_n_matches_binomial_ratio_and_is_vectorised():
    n, k = 1024, 256
    c = np.array([0, 1, 3, 100, 768, 769, 1024])
    expected = [1 - comb(n - ci, k) / comb(n, k) for ci in c]
    np.testing.assert_allclose(metrics.pass_at_k(n, c, k), expected, rtol=1e-12, atol=1e-15)
    assert metrics.pass_at_k(n, c.reshape(1, -1), k).shape == (1, c.size)
    np.testing.assert_allclose(metrics.pass_at_k_curve(4, [0, 1, 4], [1, 2]), [(0 + 0.25 + 1) / 3, (0 + 0.5 + 1) / 3])


@pytest.mark.parametrize("bad", [dict(n=4, c=5, k=1), dict(n=4, c=1, k=5), dict(n=4, c=-1, k=1),
                                 dict(n=4, c=1.5, k=1), dict(n=0, c=0, k=1), dict(n=4, c=1, k=0)])
def test_pass_at_k_rejects_bad_input(bad):
    with pytest.raises(CatsimError):
        metrics.pass_at_k(bad["n"], bad["c"], bad["k"])


def test_bootstrap_interval_brackets_mean_and_shrinks_with_more_prompts():
    rng = np.random.default_rng(0)
    small = rng.random(20)
    big = rng.random(2000)
    lo, hi = metrics.bootstrap_interval(small)
    assert lo < small.mean() < hi
    lo2, hi2 = metrics.bootstrap_interval(big)
    assert (hi2 - lo2) < (hi - lo) / 4  # width ~ 1/sqrt(P): 100x prompts -> ~10x narrower
    assert metrics.bootstrap_interval(np.full(5, 0.3)) == pytest.approx((0.3, 0.3))


def test_paired_subsample_test_full_sample_and_null():
    n = 16
    a = np.array([0, 2, 8, 16, 4, 1] * 5)
    # identical models: Δ = 0, and the subsampling distribution is symmetric -> large p
    same = metrics.paired_subsample_test(n, a, a, k=1, m=8, iterations=4000, seed=1)
    assert same["delta"] == 0.0
    assert same["p_value"] > 0.2
    # m = n: every subsample is the full sample, so Δ is deterministic and p is 0 when Δ > 0
    b = np.minimum(a + 4, n)
    full = metrics.paired_subsample_test(n, a, b, k=4, m=n, iterations=50, seed=0)
    exact = metrics.pass_at_k(n, b, 4).mean() - metrics.pass_at_k(n, a, 4).mean()
    assert full["delta"] == pytest.approx(exact)
    assert full["interval"] == pytest.approx([exact, exact])
    assert full["p_value"] == 0.0
    # the expected subsampled pass@k equals the full-sample pass@k (unbiasedness, m-out-of-n)
    sub = metrics.paired_subsample_test(n, a, b, k=2, m=8, iterations=20000, seed=3)
    assert sub["delta_mean"] == pytest.approx(metrics.pass_at_k(n, b, 2).mean() - metrics.pass_at_k(n, a, 2).mean(),
                                              abs=4e-3)
    with pytest.raises(CatsimError):
        metrics.paired_subsample_test(n, a, b, k=9, m=8)


def test_passk_summary_and_retained_mass_and_ledger():
    s = ev.passk_summary([0, 4, 2], 4, [1, 4, 9])
    assert s["ks"] == [1, 4]  # k > n dropped
    assert s["pass_at_k"][1] == pytest.approx((0 + 1 + 0.5) / 3)
    assert s["pass_at_k"][4] == pytest.approx(2 / 3)

    base = [np.array([0.5, 0.1, 0.1]), np.array([0.2, 0.2])]
    trained = [np.array([0.8, 0.05, 0.1]), np.array([0.1, 0.3])]
    r = ev.retained_mass(base, trained)
    assert (r["answers_kept"], r["answers_total"]) == (3, 5)  # 0.8 ≥ 0.5, 0.1 ≥ 0.1, 0.3 ≥ 0.2
    assert r["mret_per_prompt"] == pytest.approx([1 - 0.05 / 0.7, 1 - 0.1 / 0.4])
    assert r["qpos_base"] == pytest.approx((0.7 + 0.4) / 2)
    assert r["qpos_trained"] == pytest.approx((0.95 + 0.4) / 2)

    led = ev.forgetting_ledger(["base", "mid", "final"], [[1, 0, 3, 0], [0, 2, 3, 0], [0, 0, 1, 5]])
    assert led["solved"] == [2, 2, 2]
    assert led["forgotten_prompts"] == [0, 1]  # solved earlier, unsolved at the end
    assert led["gained"] == 1  # prompt 3: unsolved at base, solved at the end
    with pytest.raises(CatsimError):
        ev.forgetting_ledger(["only"], [[1, 2]])


def test_nll_rare_and_answer_mass_on_a_tiny_model(tmp_path):
    """Teacher-forced probabilities agree with a direct forward pass; the base model's ΔNLL_rare
    against itself is 0 and its rare set is the top-NLL share of its correct samples."""
    import jax
    import jax.numpy as jnp
    from llm_rl_helpers import ToyTask, make_base_model

    from catsim.llm.model.transformer import forward

    make_base_model(tmp_path / "base", init_std=0.3)
    policy = ev.load_policy(tmp_path / "base")
    task = ToyTask()
    prompts = ev.eval_prompts(task, "heldout", 0, 3)
    table = ev.answer_mass_table(policy, task, prompts)
    tok = policy.tokenizer
    for p, probs in zip(prompts, table):
        ids = tok.encode(p.text, add_special_tokens=True) + tok.encode(p.answers[0]) + [2]
        logp = jax.nn.log_softmax(forward(policy.params, policy.cfg, jnp.asarray([ids]))[0, :-1])
        n_prompt = len(tok.encode(p.text, add_special_tokens=True))
        direct = sum(float(logp[t - 1, ids[t]]) for t in range(n_prompt, len(ids)))
        assert probs[0] == pytest.approx(np.exp(direct), rel=1e-4)

    rare = ev.rare_correct_set(policy, task, n_prompts=8, n=8, rare_quantile=0.25, max_new_tokens=3)
    assert rare.base_nll.size == int(np.ceil(0.25 * rare.num_correct))
    assert np.all(rare.base_nll >= rare.threshold)
    assert ev.delta_nll_rare(policy, rare) == pytest.approx(0.0, abs=1e-5)
    r = ev.retained_mass(table, table)
    assert r["kept_fraction"] == 1.0 and r["mret"] == 1.0
