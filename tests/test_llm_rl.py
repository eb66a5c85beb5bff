"""RL loop: advantages and losses against hand-computed values through the loop's code path,
batch alignment against a direct forward pass, dynamic-sampling selection, resume = uninterrupted."""

from __future__ import annotations

import importlib.util
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.llm import rl, scoring
from catsim.llm.rl import RLConfig
from catsim.llm.rl import step as rl_step
from catsim.llm.rl.step import compute_advantages, policy_loss
from catsim.llm.rollout import Groups


# ----------------------------------------------------------------------------- advantages
def test_grpo_and_focal_advantages_hand_computed():
    scores = np.array([[1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]], np.float32)
    adv, mu, g = compute_advantages(scores, RLConfig.from_flat(group_size=4, adv_std="population"), 0.0)
    s = math.sqrt(0.25 * 0.75)  # population std of the first group
    np.testing.assert_allclose(mu, [0.25, 1.0, 0.5])
    np.testing.assert_allclose(adv[0], [0.75 / (s + 1e-6), *[-0.25 / (s + 1e-6)] * 3], rtol=1e-6)
    np.testing.assert_allclose(adv[1], 0.0)  # inactive group
    np.testing.assert_allclose(adv[2], [1, 1, -1, -1], rtol=1e-5)
    np.testing.assert_allclose(g, 1.0)
    # F-GRPO γ = 0.5: g = (1 − μ̂)^0.5 = (√0.75, 0, √0.5)
    fadv, _, fg = compute_advantages(
        scores, RLConfig.from_flat(group_size=4, gamma=0.5, adv_std="population"), 0.5)
    np.testing.assert_allclose(fg, [math.sqrt(0.75), 0.0, math.sqrt(0.5)], rtol=1e-6)
    np.testing.assert_allclose(fadv, adv * fg[:, None], rtol=1e-6)
    assert fadv[0, 0] == pytest.approx(1.5, rel=1e-5)  # √0.75 · 0.75/√0.1875
    # the default sample std (ddof 1): [1, 0, 0, 0] has std √(0.75/3) = 0.5 → (1.5, −0.5, −0.5, −0.5);
    # [1, 1, 0, 0] has std √(1/3) → ±√3/2; each is the population advantage times √(3/4)
    sadv, _, _ = compute_advantages(scores, RLConfig.from_flat(group_size=4), 0.0)
    np.testing.assert_allclose(sadv[0], [1.5, -0.5, -0.5, -0.5], rtol=1e-5)
    np.testing.assert_allclose(sadv[1], 0.0)
    np.testing.assert_allclose(sadv[2], [math.sqrt(3) / 2] * 2 + [-math.sqrt(3) / 2] * 2, rtol=1e-5)
    np.testing.assert_allclose(sadv, adv * math.sqrt(0.75), rtol=1e-5)


def test_dr_grpo_graded_rewards_negative_rw_mask_and_renorm():
    scores = np.array([[1.0, 0.5, 0.0, 0.5], [0.0, 0.0, 0.0, 1.0]], np.float32)
    cfg = RLConfig.from_flat(method="dr_grpo", group_size=4, reward_correct=1.0, reward_wrong=-1.0)
    adv, mu, _ = compute_advantages(scores, cfg, 0.0)
    rewards = -1 + 2 * scores  # R = Rw + s (Rc − Rw)
    np.testing.assert_allclose(mu, scores.mean(axis=1))  # μ̂ = (R̄ − Rw)/(Rc − Rw) = mean score
    np.testing.assert_allclose(adv, rewards - rewards.mean(axis=1, keepdims=True), rtol=1e-6)
    # a masked group carries no advantage; batch renorm divides by the std over the kept entries
    masked, _, _ = compute_advantages(scores, cfg, 0.0, group_mask_P=[1, 0])
    np.testing.assert_allclose(masked[1], 0.0)
    renorm, _, _ = compute_advantages(scores, RLConfig.from_flat(method="dr_grpo", group_size=4, reward_wrong=-1.0,
                                                       batch_renorm=True), 0.0, group_mask_P=[1, 0])
    kept = adv[0]
    np.testing.assert_allclose(renorm[0], kept / (np.sqrt(np.mean(kept**2)) + 1e-6), rtol=1e-5)


# ----------------------------------------------------------------------------- losses
# three response tokens with ratios π/π_old = 1.5, 0.5, 1.1 and advantages 2, −1, 1
LOGP = jnp.log(jnp.array([[0.3, 0.2, 0.5]]))
OLD = LOGP - jnp.log(jnp.array([[1.5, 0.5, 1.1]]))
ADV = jnp.array([[2.0, -1.0, 1.0]])
MASK = jnp.ones((1, 3))


@pytest.mark.parametrize("method,expected", [
    ("grpo", (-2 * 1.2 + 0.8 - 1.1) / 3),  # token 1 clipped at 1.2, token 2 at 0.8
    ("dapo", (-2 * 1.28 + 0.8 - 1.1) / 3),  # clip-higher 0.28
    ("dr_grpo", (-2 * 1.2 + 0.8 - 1.1) / (1 * 4)),  # token sum / (B · max_new_tokens)
    ("cispo", -(1.5 * 2 * math.log(0.3) - 0.5 * math.log(0.2) + 1.1 * math.log(0.5)) / 3),
])
def test_policy_loss_values(method, expected):
    cfg = RLConfig.from_flat(method=method, max_new_tokens=4)
    loss, m = policy_loss(LOGP, OLD, ADV, MASK, cfg.method_spec(), cfg)
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    if method in ("grpo", "dr_grpo"):
        assert float(m["clip_low_frac"]) == pytest.approx(1 / 3)  # token 2: ρ < 0.8, A < 0
        assert float(m["clip_high_frac"]) == pytest.approx(1 / 3)  # token 1: ρ > 1.2, A > 0
    if method == "cispo":
        assert float(m["clip_low_frac"]) == 0.0  # all ρ within [0, 6]


def test_cispo_gradient_is_clipped_is_weight_times_advantage():
    cfg = RLConfig.from_flat(method="cispo")
    grad = jax.grad(lambda lp: policy_loss(lp, OLD, ADV, MASK, cfg.method_spec(), cfg)[0])(LOGP)
    np.testing.assert_allclose(grad, -jnp.array([[1.5 * 2, 0.5 * -1, 1.1 * 1]]) / 3, rtol=1e-5)


def test_kl_and_entropy_terms():
    ref = LOGP + jnp.array([[0.1, -0.2, 0.0]])
    ent = jnp.array([[1.0, 2.0, 3.0]])
    base_cfg = RLConfig.from_flat()
    base, _ = policy_loss(LOGP, OLD, ADV, MASK, base_cfg.method_spec(), base_cfg)
    d = np.array([0.1, -0.2, 0.0])
    k3 = np.exp(d) - d - 1
    cfg = RLConfig.from_flat(kl_coef=0.1, entropy_coef=0.01)
    loss, m = policy_loss(LOGP, OLD, ADV, MASK, cfg.method_spec(), cfg, entropy=ent, ref_logp=ref)
    assert float(loss) == pytest.approx(float(base) + 0.1 * k3.mean() - 0.01 * 2.0, rel=1e-5)
    assert float(m["kl"]) == pytest.approx(k3.mean(), rel=1e-5)
    assert float(m["entropy"]) == pytest.approx(2.0)
    cfg1 = RLConfig.from_flat(kl_coef=0.1, kl_estimator="k1")
    loss1, _ = policy_loss(LOGP, OLD, ADV, MASK, cfg1.method_spec(), cfg1, ref_logp=ref)
    assert float(loss1) == pytest.approx(float(base) + 0.1 * (-d).mean(), rel=1e-5)


def test_config_validation_and_low_lr_control():
    with pytest.raises(CatsimError):
        RLConfig.from_flat(method="ppo")
    with pytest.raises(CatsimError):
        RLConfig.from_flat(prompts_per_step=3, group_size=4, mini_batch_size=5)
    with pytest.raises(CatsimError):
        RLConfig.from_flat(gamma=0.5, low_lr_gamma=0.5)
    cfg = RLConfig.from_flat(learning_rate=1e-6, low_lr_gamma=0.5)
    assert cfg.peak_lr == pytest.approx(6.79e-7, rel=2e-3)  # App. N: m_0.5 ≈ 0.679
    assert RLConfig.from_flat(method="dapo").method_spec().dynamic_sampling
    assert RLConfig.from_flat(method="dapo").method_spec().clip_high == 0.28
    assert rl_step.lr_at(RLConfig.from_flat(learning_rate=1.0, warmup_steps=4), 0) == 0.25


def test_select_active_groups():
    chosen, mask = rl_step.select_active_groups(np.array([False, True, False, True, True]), 4)
    assert chosen.tolist() == [1, 3, 4, 0] and mask.tolist() == [1, 1, 1, 0]
    chosen, mask = rl_step.select_active_groups(np.array([True, True, True]), 2)
    assert chosen.tolist() == [0, 1] and mask.tolist() == [1, 1]


# ----------------------------------------------------------------------------- the loop's batch
def test_build_batch_aligns_response_tokens_with_a_direct_forward(tmp_path):
    """Loss through build_batch + token_logps = hand-written REINFORCE on a direct forward pass
    (on-policy CISPO: IS weight 1, so the loss is −Σ A·log π / #response tokens)."""
    from llm_rl_helpers import make_base_model

    from catsim.llm.evaluate import load_policy
    from catsim.llm.model.transformer import forward

    make_base_model(tmp_path / "base")
    pol = load_policy(tmp_path / "base")
    prompt = np.array([[0, 1, 4], [1, 5, 4]], np.int32)  # row 0 left-padded
    pmask = np.array([[0, 1, 1], [1, 1, 1]], bool)
    resp = np.array([[4, 2, 0], [5, 4, 2]], np.int32)  # row 0: two tokens then padding
    rmask = np.array([[1, 1, 0], [1, 1, 1]], bool)
    groups = Groups(np.array([0]), prompt, pmask, resp, rmask, np.array([[1.0, 0.0]]), ["", ""],
                    np.ones(2, bool), np.zeros(2, np.float32))
    adv = np.array([[0.7, -0.3]], np.float32)
    batch = rl_step.build_batch(groups, adv, np.array([1.0]))
    logp, _ = scoring.token_logps(pol.params, pol.cfg, jnp.asarray(batch["tokens"]), jnp.asarray(batch["real"]))
    cfg = RLConfig.from_flat(method="cispo", group_size=2, prompts_per_step=1)
    loss, _ = policy_loss(logp, logp, jnp.asarray(batch["adv"]), jnp.asarray(batch["loss_mask"]),
                          cfg.method_spec(), cfg)
    total, count = 0.0, 0
    for b in range(2):
        ids = [int(t) for t, m in zip(prompt[b], pmask[b]) if m] + [int(t) for t, m in zip(resp[b], rmask[b]) if m]
        lp = jax.nn.log_softmax(forward(pol.params, pol.cfg, jnp.asarray([ids]))[0])
        n_prompt = int(pmask[b].sum())
        for t in range(n_prompt, len(ids)):
            total += -adv[0, b] * float(lp[t - 1, ids[t]])
            count += 1
    assert float(loss) == pytest.approx(total / count, rel=1e-4, abs=1e-6)


# ----------------------------------------------------------------------------- resume
def _params_of(path):
    from catsim.llm.model.checkpoint import load_model

    return jax.tree.leaves(load_model(path)[1])


def test_resume_after_stop_equals_uninterrupted_run(tmp_path):
    from llm_rl_helpers import ToyTask, make_base_model

    make_base_model(tmp_path / "base", init_std=0.3)
    task = ToyTask()
    cfg = RLConfig.from_flat(steps=3, prompts_per_step=4, group_size=4, mini_batch_size=8, max_new_tokens=3,
                   learning_rate=3e-2, gamma=0.5, score_truncated=True, kl_coef=0.01, entropy_coef=1e-3)
    full = rl.run_rl(tmp_path / "base", tmp_path / "full", cfg, task=task, progress=False)
    assert full.finished and full.steps_done == 3
    tb = ("tensorboard",) if importlib.util.find_spec("tensorboard") else ()
    part = rl.run_rl(tmp_path / "base", tmp_path / "part", cfg, task=task, progress=False, stop_after=1,
                     log_to=tb)
    assert not part.finished and part.steps_done == 1 and not (tmp_path / "part" / "model").exists()
    # a line of a step that never reached the saved state (as after a kill) is dropped on resume
    with (tmp_path / "part" / rl.LOG_FILE).open("a") as fh:
        fh.write(json.dumps({"step": 2, "reward": -1}) + "\n{\"cut")
    resumed = rl.run_rl(tmp_path / "base", tmp_path / "part", cfg, task=task, progress=False, log_to=tb)
    assert resumed.finished and resumed.steps_done == 3
    for a, b in zip(_params_of(tmp_path / "full" / "model"), _params_of(tmp_path / "part" / "model")):
        np.testing.assert_array_equal(a, b)
    timing = {"step_seconds", "tokens_per_second"}
    log_full, log_part = rl.read_log(tmp_path / "full"), rl.read_log(tmp_path / "part")
    assert [r["step"] for r in log_part] == [1, 2, 3]
    for a, b in zip(log_full, log_part):
        assert {k: v for k, v in a.items() if k not in timing} == {k: v for k, v in b.items() if k not in timing}
    assert set(log_full[0]) == set(rl.STEP_METRICS)
    if tb:  # the live curves equal the log: the cut step's line (reward −1) is gone from them too
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        from tensorboard.util import tensor_util

        acc = EventAccumulator(str(tmp_path / "part" / "tensorboard"), size_guidance={"tensors": 0})
        acc.Reload()
        curve = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors("train/reward")]
        assert [step for step, _ in curve] == [r["step"] for r in log_part]
        assert [value for _, value in curve] == pytest.approx([r["reward"] for r in log_part])
        assert set(acc.Tags()["tensors"]) >= {"train/loss", "catsim/gamma", "catsim/active_fraction"}  # grouped
    assert any(r["active_fraction"] > 0 for r in log_full)  # the toy task mixes rewards
    for r in log_full:
        assert 0.0 <= r["active_pred_pooled"] <= 1.0 and r["gamma"] == 0.5
    # the parameters moved
    assert any(np.any(a != b) for a, b in zip(_params_of(tmp_path / "base"), _params_of(tmp_path / "full" / "model")))
    with pytest.raises(CatsimError, match="different settings"):
        rl.run_rl(tmp_path / "base", tmp_path / "full", cfg.replace(seed=1), task=task,
                  progress=False)


def test_micro_batches_accumulate_to_the_mini_batch_update(tmp_path):
    """Gradient accumulation over micro-batches gives the same update and metrics as one pass,
    for token-mean (GRPO) and for the Dr.GRPO constant normaliser."""
    from llm_rl_helpers import make_base_model

    from catsim.llm.evaluate import load_policy

    make_base_model(tmp_path / "base")
    pol = load_policy(tmp_path / "base")
    rng = np.random.default_rng(0)
    rows, t = 8, 7
    real = np.ones((rows, t), bool)
    real[:2, :2] = False  # left padding
    mask = (rng.random((rows, t - 1)) < 0.6).astype(np.float32)
    mask[4:6] = 0.0  # a micro-batch with fewer tokens: the weights must not be uniform
    batch = {"tokens": jnp.asarray(rng.integers(4, 7, (rows, t)), jnp.int32), "real": jnp.asarray(real),
             "loss_mask": jnp.asarray(mask), "adv": jnp.asarray(rng.normal(size=(rows, t - 1)), jnp.float32)}
    logp, _ = scoring.token_logps(pol.params, pol.cfg, batch["tokens"], batch["real"])
    batch["old_logp"] = logp + 0.1 * jnp.asarray(rng.normal(size=logp.shape), jnp.float32)
    batch["ref_logp"] = logp - 0.05
    for method in ("grpo", "dr_grpo"):
        kw = dict(method=method, prompts_per_step=2, group_size=4, kl_coef=0.1, entropy_coef=0.01)
        outs = []
        for micro in (0, 2):
            outs.append(rl_step.make_functions(pol.cfg, RLConfig.from_flat(**kw, micro_batch_size=micro))
                        .grads(pol.params, batch))
        # The accumulated gradient is the same float32 sum in another order, so the two may differ
        # by rounding: about eps × (terms summed) × (size of what is summed) per element. Terms: one
        # per (row, position) of the mini-batch, once per transformer block and once in the head;
        # size: |w₁·g₁| + |w₂·g₂|, the two micro-batches' weighted gradients (each from a one-pass
        # call on that micro-batch alone), so cancellation between them cannot shrink the bound.
        # A wrong micro-batch weight (the halves carry unequal token counts) moves the gradient by
        # a share of that size, thousands of times the bound.
        half = rl_step.make_functions(pol.cfg, RLConfig.from_flat(**{**kw, "prompts_per_step": 1}))
        parts = [half.grads(pol.params, jax.tree.map(lambda a, i=i: a[4 * i:4 * i + 4], batch))[0]
                 for i in range(2)]
        counts = mask.reshape(2, 4, -1).sum(axis=(1, 2))
        w = counts / counts.sum() if method == "grpo" else np.full(2, 0.5)
        terms = rows * (t - 1) * (pol.cfg.num_layers + 1)
        for a, b, g1, g2 in zip(*(jax.tree.leaves(x) for x in (outs[0][0], outs[1][0], *parts))):
            size = np.max(np.abs(w[0] * np.asarray(g1)) + np.abs(w[1] * np.asarray(g2)))
            np.testing.assert_allclose(b, a, rtol=0, atol=np.finfo(np.float32).eps * terms * size)
        for key in ("loss", "entropy", "kl", "clip_low_frac", "clip_high_frac"):
            np.testing.assert_allclose(outs[0][1][key], outs[1][1][key], rtol=2e-5, atol=1e-7, err_msg=key)
        assert float(outs[0][1]["loss"]) != 0.0


def test_trainer_gives_exact_zero_to_groups_of_equal_graded_scores():
    # graded scores that are not exact in binary (0.37 × 16 gave up to ±0.056 before the fix);
    # the last group is active and must keep its signal
    scores = np.array([[0.37] * 16, [0.7] * 16, [0.1] * 16, [1.0] * 8 + [0.0] * 8], np.float32)
    for flat in ({}, {"adv_std": "population", "adv_eps": 0.0}, {"method": "dr_grpo"}):
        adv, _, _ = compute_advantages(scores, RLConfig.from_flat(group_size=16, **flat), 0.0)
        np.testing.assert_array_equal(adv[:3], 0.0)
        assert np.all(np.abs(adv[3]) > 0.4)


def test_trainer_loss_options_dual_clip_and_bias_corrected_kl():
    from catsim.objectives import losses

    # one sequence of 3 tokens, ρ = (4, 1, 1), A = −1, π_ref ≠ π
    logp = jnp.log(jnp.array([[0.8, 0.5, 0.4]]))
    old = jnp.log(jnp.array([[0.2, 0.5, 0.4]]))
    ref = jnp.log(jnp.array([[0.4, 0.25, 0.4]]))
    adv, mask = -jnp.ones((1, 3)), jnp.ones((1, 3))
    base = RLConfig.from_flat(kl_coef=0.1)
    spec = base.method_spec()
    plain, _ = policy_loss(logp, old, adv, mask, spec, base, ref_logp=ref)
    dual_cfg = RLConfig.from_flat(kl_coef=0.1, clip_ratio_c=3.0)
    dual, _ = policy_loss(logp, old, adv, mask, spec, dual_cfg, ref_logp=ref)
    # the dual clip lowers only the first token's policy term: 4 → 3, so the token mean drops by 1/3
    assert float(plain - dual) == pytest.approx(1 / 3, rel=1e-5)
    bc_cfg = RLConfig.from_flat(kl_coef=0.1, kl_bias_correction=True)
    bc, _ = policy_loss(logp, old, adv, mask, spec, bc_cfg, ref_logp=ref)
    k3 = losses.kl_k3(logp, ref)[0]
    # only the first token is off-policy: its KL term gains the factor ρ = 4
    assert float(bc - plain) == pytest.approx(float(0.1 * 3 * k3[0] / 3), rel=1e-5)
    with pytest.raises(CatsimError, match="clip_ratio_c"):
        RLConfig.from_flat(method="cispo", clip_ratio_c=3.0)
    with pytest.raises(CatsimError, match="clip_ratio_c"):
        RLConfig.from_flat(clip_ratio_c=1.0)
    with pytest.raises(CatsimError, match="k3"):
        RLConfig.from_flat(kl_bias_correction=True, kl_estimator="k1")



def test_new_loss_options_enter_the_fingerprint_only_when_on():
    from catsim.llm.rl.loop import fingerprint_settings

    plain = fingerprint_settings(RLConfig.from_flat())
    assert "clip_ratio_c" not in plain and "kl_bias_correction" not in plain  # older run dirs resume
    assert fingerprint_settings(RLConfig.from_flat(clip_ratio_c=3.0))["clip_ratio_c"] == 3.0
    assert fingerprint_settings(RLConfig.from_flat(kl_bias_correction=True))["kl_bias_correction"] is True
    assert "steps" not in plain and plain["method"] == "grpo"
