"""The RL step's shortcuts change nothing they should not: bucketed widths equal full-width
training, one prompt pass per group equals full rows, the update's own behaviour log-probs equal a
separate pass, tempered log-probs are the
sampling distribution's, no reference without KL, donated buffers, the compilation-cache switch."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from catsim.llm import rl
from catsim.llm.rl import RLConfig
from catsim.llm.rl import step as rl_step
from catsim.llm.rollout import Groups

EPS = np.finfo(np.float32).eps


@pytest.fixture(scope="module")
def pol(tmp_path_factory):
    from llm_rl_helpers import make_base_model

    from catsim.llm.evaluate import load_policy

    return load_policy(make_base_model(tmp_path_factory.mktemp("rl-speed") / "base"))


def _groups(width: int = 32, seed: int = 0) -> Groups:
    """2 prompts x 4 rollouts, left-padded prompts, completions of 1..5 tokens in `width` columns."""
    rng = np.random.default_rng(seed)
    prompt = rng.integers(4, 7, (8, 4)).astype(np.int32)
    pmask = np.ones((8, 4), bool)
    pmask[:4, 0] = False
    lengths = np.array([5, 1, 3, 2, 4, 5, 1, 2])
    mask = np.arange(width)[None] < lengths[:, None]
    tokens = np.where(mask, rng.integers(4, 7, (8, width)), 0).astype(np.int32)
    scores = np.array([[1, 0, 0, 1], [0, 1, 0, 0]], np.float32)
    return Groups(np.arange(2), prompt, pmask, tokens, mask, scores, [""] * 8, np.ones(8, bool),
                  np.zeros(8, np.float32))


def _cfg(**kw) -> RLConfig:
    return RLConfig.from_flat(prompts_per_step=2, group_size=4, max_new_tokens=32, **kw)


def _batch(groups: Groups, cfg: RLConfig) -> dict:
    adv, _, _ = rl_step.compute_advantages(groups.scores, cfg, 0.0)
    return jax.tree.map(jnp.asarray, rl_step.build_batch(groups, adv, np.ones(2, np.float32)))


def _assert_grads_close(a, b, terms):
    """Same float32 sums over different shapes: equal up to eps × terms × the gradient's size."""
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        size = float(np.max(np.abs(np.asarray(y)))) + 1e-30
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=0, atol=EPS * terms * size)


def test_completion_widths():
    assert rl_step.completion_widths(32) == (8, 16, 32)
    assert rl_step.completion_widths(20) == (8, 16, 20)
    assert rl_step.completion_widths(4) == (4,)
    groups = _groups()
    assert rl_step.completion_width(groups, 32) == 8  # longest completion: 5 tokens
    assert rl_step.trim_completions(groups, 8).tokens.shape == (8, 8)
    with pytest.raises(Exception, match="cut real tokens"):
        rl_step.trim_completions(groups, 4)


@pytest.mark.parametrize("method", ["grpo", "dr_grpo"])
def test_bucketed_training_equals_full_width_training(pol, method):
    """Cutting the completion padding (32 → 8 columns) leaves the loss, its metrics and its
    gradient unchanged: the padding is masked and the model causal."""
    cfg = _cfg(method=method, kl_coef=0.1, entropy_coef=0.01)
    fns = rl_step.make_functions(pol.cfg, cfg)
    full, cut = _batch(_groups(32), cfg), _batch(rl_step.trim_completions(_groups(32), 8), cfg)
    for b in (full, cut):
        logp = fns.logp(pol.params, b["tokens"], b["real"])[0]
        b["old_logp"], b["ref_logp"] = logp - 0.05, logp + 0.03
    g_full, m_full = fns.grads(pol.params, full)
    g_cut, m_cut = fns.grads(pol.params, cut)
    _assert_grads_close(g_cut, g_full, terms=8 * 35 * (pol.cfg.num_layers + 1))
    for key in ("loss", "entropy", "kl", "clip_low_frac", "clip_high_frac"):
        np.testing.assert_allclose(m_cut[key], m_full[key], rtol=1e-5, atol=1e-7, err_msg=key)
    assert float(m_full["loss"]) != 0.0


def _sharing_groups(width: int = 8, seed: int = 0) -> Groups:
    """`_groups` with each group's rows sharing their prompt (group 0 left-padded)."""
    g = _groups(width, seed)
    prompt = np.repeat(g.prompt_tokens[::4], 4, axis=0)
    pmask = np.repeat(g.prompt_mask[::4], 4, axis=0)
    return dataclasses.replace(g, prompt_tokens=np.where(pmask, prompt, 0), prompt_mask=pmask)


@pytest.mark.parametrize("micro", [0, 4])
def test_shared_prompt_training_equals_full_rows(pol, micro):
    """Each group's prompt run once, its keys and values shared by the group's completions
    (`shared_prompt_batch`), gives the loss, metrics and gradient of the full rows; so does
    gradient accumulation over micro-batches of whole groups."""
    cfg = _cfg(kl_coef=0.1, entropy_coef=0.01, micro_batch_size=micro)
    fns = rl_step.make_functions(pol.cfg, cfg)
    groups = _sharing_groups()
    full = _batch(groups, cfg)
    logp = fns.logp(pol.params, full["tokens"], full["real"])[0]
    full["old_logp"], full["ref_logp"] = logp - 0.05, logp + 0.03
    shared = rl_step.shared_prompt_batch(jax.tree.map(np.asarray, full), 4, 4)
    assert shared["prompt_tokens"].shape == (2, 4) and shared["tokens"].shape == (8, 8)
    assert shared["loss_mask"].shape == shared["old_logp"].shape == (8, 8)
    g_full, m_full = fns.grads(pol.params, full)
    g_shared, m_shared = fns.grads(pol.params, jax.tree.map(jnp.asarray, shared))
    _assert_grads_close(g_shared, g_full, terms=8 * 11 * (pol.cfg.num_layers + 1))
    for key in ("loss", "entropy", "kl", "clip_low_frac", "clip_high_frac"):
        np.testing.assert_allclose(m_shared[key], m_full[key], rtol=1e-5, atol=1e-7, err_msg=key)
    assert float(m_full["loss"]) != 0.0
    one_group = rl_step.batch_rows(shared, 4, 4)  # rows 4..7: the second group and its prompt
    np.testing.assert_array_equal(one_group["prompt_tokens"], shared["prompt_tokens"][1:])
    np.testing.assert_array_equal(one_group["tokens"], shared["tokens"][4:])


def test_shared_prompt_batch_rejects_rows_that_do_not_share_prompts():
    cfg = _cfg()
    batch = rl_step.build_batch(_groups(8), rl_step.compute_advantages(_groups(8).scores, cfg, 0.0)[0],
                                np.ones(2, np.float32))
    with pytest.raises(Exception, match="sharing a prompt"):
        rl_step.shared_prompt_batch(batch, 4, 4)  # _groups draws every row's prompt on its own


def test_grouped_token_logps_equal_full_rows(pol):
    """The completions' log-probs and entropies through the shared prompt pass, at τ ≠ 1, equal
    those of the concatenated rows at the completion targets."""
    from catsim.llm.scoring import grouped_token_logps, token_logps

    g = _sharing_groups(6, seed=3)
    tokens = np.concatenate([g.prompt_tokens, g.tokens], axis=1)
    real = np.concatenate([g.prompt_mask, g.mask], axis=1)
    want, want_ent = token_logps(pol.params, pol.cfg, tokens, real, temperature=0.7)
    got, got_ent = grouped_token_logps(pol.params, pol.cfg, g.prompt_tokens[::4], g.prompt_mask[::4], g.tokens,
                                       g.mask, temperature=0.7)
    assert got.shape == g.tokens.shape
    # float32 sums of a few dozen terms, log-probs of magnitude up to ~10
    atol = EPS * 64 * max(1.0, float(np.max(np.abs(want))))
    np.testing.assert_allclose(np.where(g.mask, got, 0), np.where(g.mask, np.asarray(want)[:, 3:], 0), atol=atol)
    np.testing.assert_allclose(np.where(g.mask, got_ent, 0), np.where(g.mask, np.asarray(want_ent)[:, 3:], 0),
                               atol=atol)


def test_update_without_old_logp_equals_a_separate_behaviour_pass(pol):
    """One update per step: the behaviour log-probs of the update's own forward pass (ratio 1)
    give the gradient that a separate pass at the same parameters gives."""
    cfg = _cfg()
    fns = rl_step.make_functions(pol.cfg, cfg)
    batch = _batch(_groups(8), cfg)
    g_same, m_same = fns.grads(pol.params, batch)
    g_sep, m_sep = fns.grads(pol.params, {**batch, "old_logp": fns.logp(pol.params, batch["tokens"],
                                                                          batch["real"])[0]})
    _assert_grads_close(g_same, g_sep, terms=8 * 11 * (pol.cfg.num_layers + 1))
    np.testing.assert_allclose(m_same["loss"], m_sep["loss"], rtol=1e-5)
    assert float(m_same["clip_low_frac"]) == float(m_same["clip_high_frac"]) == 0.0


def test_tempered_loss_is_the_policy_gradient_of_the_sampling_distribution(pol):
    """At τ the on-policy gradient is −Σ A ∇log softmax(logits / τ)[token] / #tokens, which differs
    from the τ = 1 gradient."""
    from catsim.llm.model.transformer import forward

    cfg = _cfg()
    fns = rl_step.make_functions(pol.cfg, cfg)
    batch = _batch(_groups(8), cfg)
    tau = np.float32(0.5)
    got, _ = fns.grads(pol.params, batch, tau)

    def reference(params):
        logits = forward(params, pol.cfg, batch["tokens"], mask_BxT=batch["real"])[:, :-1] / tau
        logp = jnp.take_along_axis(jax.nn.log_softmax(logits), batch["tokens"][:, 1:, None], axis=-1)[..., 0]
        return -jnp.sum(batch["adv"] * logp * batch["loss_mask"]) / jnp.sum(batch["loss_mask"])

    ref = jax.grad(reference)(pol.params)
    _assert_grads_close(got, ref, terms=8 * 11 * (pol.cfg.num_layers + 1))
    at_one, _ = fns.grads(pol.params, batch, np.float32(1.0))
    assert max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree.leaves(at_one), jax.tree.leaves(got))) > 1e-3


def test_logprob_temperature_setting():
    assert _cfg(temperature=0.7).logprob_temperature(0) == pytest.approx(0.7)
    assert _cfg(temperature=0.7, logprob_temperature="one").logprob_temperature(0) == 1.0
    assert _cfg(temperature=0.0).logprob_temperature(0) == 1.0  # greedy rollouts: the model itself
    cos = _cfg(method="asym-grpo", temperature=1.0, temperature_min=0.2, steps=10)
    assert cos.logprob_temperature(9) == pytest.approx(cos.rollout_temperature(9))
    assert cos.rollout_temperature(9) < 1.0
    with pytest.raises(Exception, match="logprob_temperature"):
        _cfg(logprob_temperature="two")


def test_update_donates_params_and_optimizer_state(pol):
    cfg = _cfg()
    fns = rl_step.make_functions(pol.cfg, cfg)
    params = jax.tree.map(jnp.copy, pol.params)
    state = fns.optimizer.init(params)
    new_params, _, _ = fns.update(params, state, _batch(_groups(8), cfg), np.float32(1.0))
    if jax.devices()[0].platform == "cpu" and not any(x.is_deleted() for x in jax.tree.leaves(params)):
        pytest.skip("this backend ignores donation")
    assert all(x.is_deleted() for x in jax.tree.leaves(params))
    assert not any(x.is_deleted() for x in jax.tree.leaves(new_params))


def test_passes_a_step_runs():
    one = _cfg()
    assert not rl.loop.needs_reference(one) and not rl.loop.needs_old_logp(one)
    assert rl.loop.needs_reference(_cfg(kl_coef=0.01))
    assert rl.loop.needs_old_logp(_cfg(mini_batch_size=4))  # two updates: the policy moves
    assert rl.loop.needs_old_logp(_cfg(ppo_epochs=2))
    assert rl.loop.needs_old_logp(_cfg(method="asym-grpo"))  # the channels read π_old


def test_run_without_kl_logs_no_kl_and_with_kl_logs_it(tmp_path):
    from llm_rl_helpers import ToyTask, make_base_model

    make_base_model(tmp_path / "base", init_std=0.3)
    kw = dict(steps=2, prompts_per_step=2, group_size=4, max_new_tokens=3, score_truncated=True,
              learning_rate=3e-2, temperature=0.8)
    plain = rl.run_rl(tmp_path / "base", tmp_path / "plain", RLConfig.from_flat(**kw), task=ToyTask(),
                      progress=False)
    assert plain.finished and all(r["kl"] is None for r in rl.read_log(tmp_path / "plain"))
    rl.run_rl(tmp_path / "base", tmp_path / "kl", RLConfig.from_flat(**kw, kl_coef=0.1), task=ToyTask(),
              progress=False)
    log = rl.read_log(tmp_path / "kl")
    assert log[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # step 1: the policy is the reference
    assert log[1]["kl"] > 0.0


def test_compile_cache_env(tmp_path):
    from catsim.cli.main import compile_cache_env

    env = {"XDG_CACHE_HOME": str(tmp_path)}
    compile_cache_env(env)
    assert env["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "catsim" / "jax")
    assert env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
    mine = {"JAX_COMPILATION_CACHE_DIR": "/elsewhere"}
    compile_cache_env(mine)
    assert mine["JAX_COMPILATION_CACHE_DIR"] == "/elsewhere"
    off = {"CATSIM_NO_COMPILE_CACHE": "1"}
    compile_cache_env(off)
    assert off == {"CATSIM_NO_COMPILE_CACHE": "1"}
