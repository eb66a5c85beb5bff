"""The trainer's readings of the reference methods: DAPO's overlong shaping and filtering, batch
units in prompts, the GRPO std, the article's γ schedules, sequence-mean aggregation, CISPO's two
clip sides and asym-GRPO's ranking and baseline-free channels — hand-computed values, the CLI, and
one run through `run_rl`."""

from __future__ import annotations

import argparse
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.llm import rl, scoring
from catsim.llm.rl import RLConfig
from catsim.llm.rl import asym as rl_asym
from catsim.llm.rl import step as rl_step
from catsim.llm.rl.step import compute_advantages, policy_loss
from catsim.llm.rollout import Groups


def _grpo(rewards, ddof=1, eps=1e-6):  # the trainer's default: sample std
    r = np.asarray(rewards, np.float64)
    return (r - r.mean()) / (r.std(ddof=ddof) + eps)


def _parse(argv):
    from catsim.cli.llm.rl import add_rl_options, rl_config_from_args

    parser = argparse.ArgumentParser()
    add_rl_options(parser)
    return rl_config_from_args(parser.parse_args(argv))


# ----------------------------------------------------------------------------- DAPO overlong
def test_dapo_overlong_punishment_enters_the_rewards_not_the_success_rate():
    # max_new_tokens 10, buffer 0.2 · 10 = 2 tokens: no penalty up to 8, −0.5 at 9, −1 at 10
    scores = np.array([[0.0, 1.0, 1.0, 0.0]], np.float32)
    lengths = np.array([[10, 9, 5, 8]])
    cfg = RLConfig.from_flat(method="dapo", group_size=4, max_new_tokens=10)
    assert cfg.method_spec().overlong_shaping and cfg.overlong_buffer_tokens == 2
    adv, mu, _ = compute_advantages(scores, cfg, 0.0, lengths_PxN=lengths)
    np.testing.assert_allclose(adv[0], _grpo([-1.0, 0.5, 1.0, 0.0]), rtol=1e-5)
    assert mu[0] == pytest.approx(0.5)  # μ̂ (the focal weight's input) is the verifier's
    # GRPO has no shaping; DAPO without it gives the plain GRPO advantages
    plain = _grpo([0.0, 1.0, 1.0, 0.0])
    for c in (RLConfig.from_flat(method="grpo", group_size=4, max_new_tokens=10),
              cfg.replace(overlong_shaping=False)):
        np.testing.assert_allclose(compute_advantages(scores, c, 0.0, lengths_PxN=lengths)[0][0], plain, rtol=1e-5)
    # a larger buffer and penalty: 0.5 · 10 = 5 tokens from 5, penalty 2 → 10: −2, 9: −1.6, 8: −1.2
    big = cfg.replace(overlong_buffer=0.5, overlong_penalty=2.0)
    np.testing.assert_allclose(compute_advantages(scores, big, 0.0, lengths_PxN=lengths)[0][0],
                               _grpo([-2.0, 1 - 1.6, 1.0, -1.2]), rtol=1e-5)
    with pytest.raises(CatsimError, match="lengths"):
        compute_advantages(scores, cfg, 0.0)
    with pytest.raises(CatsimError, match="overlong_buffer"):
        RLConfig.from_flat(overlong_buffer=1.5)


def _groups(scores, finished):
    n = len(finished)
    return Groups(np.array([0]), np.array([[0, 1]] * n, np.int32), np.ones((n, 2), bool),
                  np.array([[4, 2, 5]] * n, np.int32), np.ones((n, 3), bool), np.array([scores], np.float32),
                  [""] * n, np.asarray(finished, bool), np.zeros(n, np.float32))


def test_overlong_filtering_masks_truncated_completions_only_when_asked():
    groups = _groups([1.0, 0.0, 1.0, 0.0], [True, False, True, False])
    batch = rl_step.build_batch(groups, np.ones((1, 4), np.float32), np.array([1.0]))
    off = RLConfig.from_flat(method="dapo", group_size=4, prompts_per_step=1)
    assert not off.objective.overlong_filter  # DAPO's released recipe: the soft punishment only
    assert rl_step.filter_overlong(batch, groups, off) is batch
    on = rl_step.filter_overlong(batch, groups, off.replace(overlong_filter=True))
    np.testing.assert_array_equal(on["loss_mask"][[0, 2]], batch["loss_mask"][[0, 2]])
    np.testing.assert_array_equal(on["loss_mask"][[1, 3]], 0.0)
    assert batch["loss_mask"][[1, 3]].sum() > 0


# ----------------------------------------------------------------------------- batch units
def test_mini_batches_count_prompts_and_hold_whole_groups():
    cfg = RLConfig.from_flat(prompts_per_step=4, group_size=4, mini_batch_prompts=2)
    assert cfg.mini_batch == 8 and cfg.updates_per_step == 2
    assert RLConfig.from_flat(prompts_per_step=4, group_size=4, mini_batch_size=8).mini_batch == 8
    assert RLConfig.from_flat(prompts_per_step=4, group_size=4, mini_batch_prompts=2,
                              mini_batch_size=8).mini_batch == 8
    with pytest.raises(CatsimError, match="whole groups"):  # 12 rollouts, 6 divides them, N = 4 does not
        RLConfig.from_flat(prompts_per_step=3, group_size=4, mini_batch_size=6)
    with pytest.raises(CatsimError, match="must divide"):
        RLConfig.from_flat(prompts_per_step=4, group_size=4, mini_batch_prompts=3)
    with pytest.raises(CatsimError, match="disagree"):
        RLConfig.from_flat(prompts_per_step=4, group_size=4, mini_batch_prompts=2, mini_batch_size=4)
    # the paper's verl settings: 256 prompts per step, mini-batches of 64 prompts → 4 updates per step
    paper = _parse(["--prompts-per-step", "256", "--mini-batch-prompts", "64", "--group-size", "8"])
    assert paper.mini_batch == 512 and paper.updates_per_step == 4 and paper.rollouts_per_step == 2048


def test_micro_batching_under_prompt_mini_batches_and_sequence_mean(tmp_path):
    """The compiled update sees the mini-batch in rollouts: mini_batch_prompts = 1 at N = 4 with
    micro-batches of 2 rows gives the gradient of mini_batch_size = 4 (one pass), also for the
    sequence-mean aggregation, whose micro-batches are weighted by their sequences."""
    from llm_rl_helpers import make_base_model

    from catsim.llm.evaluate import load_policy

    make_base_model(tmp_path / "base")
    pol = load_policy(tmp_path / "base")
    rng = np.random.default_rng(1)
    rows, t = 4, 6
    mask = np.zeros((rows, t - 1), np.float32)
    mask[0, 1:] = 1  # sequences of 4, 1, 2 and 3 tokens: token mean ≠ sequence mean
    mask[1, 4] = 1
    mask[2, 3:] = 1
    mask[3, 2:] = 1
    batch = {"tokens": jnp.asarray(rng.integers(4, 7, (rows, t)), jnp.int32), "real": jnp.ones((rows, t), bool),
             "loss_mask": jnp.asarray(mask), "adv": jnp.asarray(rng.normal(size=(rows, t - 1)), jnp.float32)}
    logp, _ = scoring.token_logps(pol.params, pol.cfg, batch["tokens"], batch["real"])
    batch["old_logp"] = logp + 0.1 * jnp.asarray(rng.normal(size=logp.shape), jnp.float32)
    for aggregation in ("token_mean", "sequence_mean"):
        kw = dict(prompts_per_step=1, group_size=4, aggregation=aggregation)
        one = rl_step.make_functions(pol.cfg, RLConfig.from_flat(**kw, mini_batch_size=4)).grads(pol.params, batch)
        acc = rl_step.make_functions(pol.cfg, RLConfig.from_flat(**kw, mini_batch_prompts=1, micro_batch_size=2)
                                     ).grads(pol.params, batch)
        # the same float32 sum in another order: a few ulps of the largest gradient entry
        for a, b in zip(jax.tree.leaves(one[0]), jax.tree.leaves(acc[0])):
            scale = float(np.max(np.abs(a))) + 1e-30
            np.testing.assert_allclose(b, a, rtol=0, atol=1e-5 * scale)
        np.testing.assert_allclose(acc[1]["loss"], one[1]["loss"], rtol=1e-5)


# ----------------------------------------------------------------------------- GRPO std
def test_sample_std_option():
    scores = np.array([[1, 0, 0, 0], [1, 1, 0, 0]], np.float32)
    pop, _, _ = compute_advantages(scores, RLConfig.from_flat(group_size=4, adv_std="population"), 0.0)
    sample, _, _ = compute_advantages(scores, RLConfig.from_flat(group_size=4), 0.0)  # the default
    for p in range(2):
        np.testing.assert_allclose(pop[p], _grpo(scores[p], ddof=0), rtol=1e-5)
        np.testing.assert_allclose(sample[p], _grpo(scores[p], ddof=1), rtol=1e-5)
    # e.g. [1, 1, 0, 0]: population std 0.5 → ±1; sample std 1/√3 → ±√3/2
    np.testing.assert_allclose(sample[1], [math.sqrt(3) / 2] * 2 + [-math.sqrt(3) / 2] * 2, rtol=1e-5)
    assert _parse(["--adv-std", "sample"]).objective.adv_std == "sample"
    assert RLConfig().objective.adv_std == "sample"  # verl's default
    with pytest.raises(CatsimError, match="at least 2"):
        RLConfig.from_flat(group_size=1, adv_std="sample")


# ----------------------------------------------------------------------------- γ schedules, aggregation
def test_article_gamma_schedules_from_the_cli():
    cfg = _parse(["--gamma-schedule", "epoch_increment", "--gamma", "1.0", "--gamma-start", "0.5",
                  "--gamma-warmup-epochs", "1", "--gamma-increment", "0.1", "--prompts-per-step", "10"])
    sched = cfg.gamma_schedule(100)  # one pass over 100 prompts = 10 steps
    assert sched.kind == "epoch_increment" and sched.steps_per_epoch == 10
    # epochs 0, 1: 0.5; epoch 2: 0.6; epoch 6 onwards: capped at 1.0
    np.testing.assert_allclose([float(sched(s)) for s in (0, 19, 20, 30, 69, 70, 500)],
                               [0.5, 0.5, 0.6, 0.7, 1.0, 1.0, 1.0], rtol=1e-6)
    assert cfg.replace(gamma_steps_per_epoch=4).gamma_schedule(100).steps_per_epoch == 4
    assert cfg.gamma_schedule(7).steps_per_epoch == 1  # fewer prompts than a step: one step per epoch
    # the article's get_gamma: 0.5 until step 1000, then 0.5 + (step − 1000)/2000, capped at 1.5
    ramp = _parse(["--gamma-schedule", "step_ramp", "--gamma", "1.5", "--gamma-start", "0.5", "--steps", "2000",
                   "--gamma-ramp-start", "1000", "--gamma-ramp-steps", "2000"]).gamma_schedule(1)
    np.testing.assert_allclose([float(ramp(s)) for s in (0, 1000, 2000, 3000, 5000)],
                               [0.5, 0.5, 1.0, 1.5, 1.5], rtol=1e-6)
    assert _parse(["--gamma-schedule", "success_ramp"]).gamma.kind == "success_ramp"


LOGP = jnp.log(jnp.array([[0.3, 0.2, 0.5], [0.4, 0.1, 0.1]]))
RATIO = jnp.array([[1.5, 0.5, 1.1], [7.0, 1.0, 0.5]])
OLD = LOGP - jnp.log(RATIO)
ADV = jnp.array([[2.0, -1.0, 1.0], [1.0, 1.0, -1.0]])
MASK = jnp.array([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])  # sequences of 3 and 1 tokens


def test_sequence_mean_aggregation():
    cfg = RLConfig.from_flat(aggregation="sequence_mean")
    assert cfg.method_spec().aggregation == "sequence_mean"
    loss, _ = policy_loss(LOGP, OLD, ADV, MASK, cfg.method_spec(), cfg)
    # PPO clip 0.2: row 0 = (−2·1.2 + 0.8 − 1.1)/3; row 1 = −1.2 (ρ = 7 clipped); mean of the two
    seq = [(-2 * 1.2 + 0.8 - 1.1) / 3, -1.2]
    assert float(loss) == pytest.approx(np.mean(seq), rel=1e-5)
    token, _ = policy_loss(LOGP, OLD, ADV, MASK, RLConfig().method_spec(), RLConfig())
    assert float(token) == pytest.approx((-2 * 1.2 + 0.8 - 1.1 - 1.2) / 4, rel=1e-5)
    assert _parse(["--aggregation", "sequence_mean"]).method_spec().aggregation == "sequence_mean"


def test_cispo_logs_each_clip_side():
    # ε_low 0.2 (range [0.8, 6]): ρ = 0.5 (row 0) is clipped low, ρ = 7 (row 1) high; 4 masked tokens
    cfg = RLConfig.from_flat(method="cispo", clip_low=0.2)
    _, m = policy_loss(LOGP, OLD, ADV, MASK, cfg.method_spec(), cfg)
    assert float(m["clip_low_frac"]) == pytest.approx(1 / 4)
    assert float(m["clip_high_frac"]) == pytest.approx(1 / 4)
    _, m = policy_loss(LOGP, OLD, ADV, MASK, RLConfig.from_flat(method="cispo").method_spec(),
                       RLConfig.from_flat(method="cispo"))
    assert float(m["clip_low_frac"]) == 0.0 and float(m["clip_high_frac"]) == pytest.approx(1 / 4)


# ----------------------------------------------------------------------------- asym-GRPO
def test_recomposition_and_mixed_groups_rank_by_sequence_log_prob():
    cfg = RLConfig.from_flat(method="asym-grpo", group_size=5, prompts_per_step=1)
    THRESHOLD = cfg.components.positive_threshold  # noqa: N806 - the rule's one other input
    # one positive (index 0), four negatives all 1 edit from it: "top-3 negatives" is a tie in
    # distance, broken by log π̄ → the three most probable negatives (indices 4, 2, 3)
    scores = np.array([[1, 0, 0, 0, 0]], np.float32)
    logp = np.array([[-1.0, -4.0, -2.0, -3.0, -0.5]], np.float32)
    dist = np.ones((1, 5, 5), np.float32) - np.eye(5, dtype=np.float32)
    np.testing.assert_array_equal(rl_asym.recompose_keep(scores, logp, dist, cfg.asym, THRESHOLD), [[1, 0, 1, 1, 1]])
    # distance comes before log π̄: negative 1 is the only one at distance 0.5
    near = dist.copy()
    near[0, 1, 0] = near[0, 0, 1] = 0.5
    near[0, 4, 0] = near[0, 0, 4] = 3.0
    np.testing.assert_array_equal(rl_asym.recompose_keep(scores, logp, near, cfg.asym, THRESHOLD), [[1, 1, 1, 1, 0]])
    # mixed groups: of two positives of equal score the more probable one is amplified
    two = np.array([[1, 0, 1, 0, 0]], np.float32)
    np.testing.assert_allclose(rl_asym.mixed_weights(two, logp, dist, cfg.asym, THRESHOLD), [[1.5, 1, 1, 1, 1]])
    later = np.array([[-3.0, -4.0, -1.0, -2.0, -0.5]], np.float32)  # now index 2 is the more probable
    np.testing.assert_allclose(rl_asym.mixed_weights(two, later, dist, cfg.asym, THRESHOLD), [[1, 1, 1.5, 1, 1]])
    # and the share of negatives near a positive (δ = 4 edits): all at distance 1, none at 4
    assert rl_asym.mixed_near_fraction(two, dist, np.ones(1), cfg.asym.delta, THRESHOLD) == 1.0
    assert rl_asym.mixed_near_fraction(two, 4 * dist, np.ones(1), cfg.asym.delta, THRESHOLD) == 0.0
    assert rl_asym.mixed_near_fraction(two, dist, np.zeros(1), cfg.asym.delta, THRESHOLD) is None  # group dropped
    # the trainer's δ is in token edits: near = at most 3 edits from a positive (δ = 4)
    far = np.array([[[0, 3, 5, 4, 9], [3, 0, 1, 1, 1], [5, 1, 0, 1, 1], [4, 1, 1, 0, 1], [9, 1, 1, 1, 0]]],
                   np.float32)
    np.testing.assert_allclose(rl_asym.mixed_weights(scores, logp, far, cfg.asym, THRESHOLD), [[1.5, 1, 0, 0, 0]])
    assert rl_asym.mixed_near_fraction(scores, far, np.ones(1), cfg.asym.delta, THRESHOLD) == 0.25


def test_baseline_free_channels():
    from test_llm_asym import _Fns, _old_logp
    from test_llm_asym import _groups as asym_groups

    cfg = RLConfig.from_flat(method="grpo", asym_channels=True, asym_advantage="baseline_free", group_size=4,
                             prompts_per_step=1, max_new_tokens=3)
    scores = [1.0, 0.0, 0.0, 0.5]
    groups = asym_groups(scores)
    adv = np.array([[1.2, -0.8, -0.8, 0.4]], np.float32)  # ignored: no baseline
    batch = rl_step.build_batch(groups, adv, np.array([1.0]))
    batch["old_logp"] = _old_logp(batch)
    out, _ = rl_asym.asymmetric_batch(batch, groups, adv, np.array([1.0]), cfg, _Fns, None, focal_P=[0.5])
    resp = np.zeros_like(batch["loss_mask"])
    resp[:, 1:] = groups.mask
    old = _old_logp(batch)
    for j, r in enumerate(scores):
        pi_bar = math.exp(np.sum(old[j] * resp[j]) / resp[j].sum())
        w_neg = (1 - pi_bar + 0.01) / (1 + 0.01)  # text reading
        want = 0.5 * (min(1.0, r) * r - w_neg * (1 - r))  # × the focal weight 0.5
        np.testing.assert_allclose(out["adv"][j], want * resp[j], rtol=1e-5, atol=1e-7)
    # an all-wrong group gets a negative signal; a dropped group none
    wrong = asym_groups([0.0] * 4)
    out, _ = rl_asym.asymmetric_batch(batch, wrong, np.zeros((1, 4), np.float32), np.array([1.0]), cfg, _Fns, None)
    assert np.all(out["adv"][resp > 0] < 0)
    out, _ = rl_asym.asymmetric_batch(batch, wrong, np.zeros((1, 4), np.float32), np.array([0.0]), cfg, _Fns, None)
    np.testing.assert_array_equal(out["adv"], 0.0)
    with pytest.raises(CatsimError, match="asym_channels"):
        RLConfig.from_flat(method="grpo", asym_advantage="baseline_free")
    assert _parse(["--method", "asym-grpo", "--asym-advantage", "baseline_free"]).components.advantage == \
        "baseline_free"


# ----------------------------------------------------------------------------- one run
def test_dapo_run_logs_truncation_filters_it_and_follows_the_gamma_ramp(tmp_path):
    from llm_rl_helpers import ToyTask, make_base_model

    make_base_model(tmp_path / "base", init_std=0.3)
    cfg = RLConfig.from_flat(method="dapo", overlong_filter=True, steps=3, prompts_per_step=4, group_size=4,
                             mini_batch_prompts=2, max_new_tokens=2, learning_rate=3e-2, score_truncated=True,
                             gamma_schedule="step_ramp", gamma=1.0, gamma_start=0.0, gamma_ramp_start=1,
                             gamma_ramp_steps=2, adv_std="sample", aggregation="sequence_mean")
    result = rl.run_rl(tmp_path / "base", tmp_path / "run", cfg, task=ToyTask(), progress=False)
    assert result.finished
    log = rl.read_log(tmp_path / "run")
    assert set(log[0]) == set(rl.STEP_METRICS)
    assert [r["gamma"] for r in log] == pytest.approx([0.0, 0.0, 0.5])
    assert any(r["truncated_frac"] > 0 for r in log)  # a 2-token cap truncates some of a random model's text
    for r in log:
        # overlong filtering: the rollouts carrying loss are the kept groups' untruncated ones
        assert r["kept_rollouts"] == round((1 - r["truncated_frac"]) * 4 * r["groups_kept"])
