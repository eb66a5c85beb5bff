"""Asymmetric GRPO in the LLM RL trainer: the batch adjustment against hand-computed
values, the switches, and a run through `run_rl` with a tiny model."""

from __future__ import annotations

import argparse
import math

import jax
import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.llm import rl
from catsim.llm.rl import RLConfig
from catsim.llm.rl import asym as rl_asym
from catsim.llm.rl import step as rl_step
from catsim.llm.rollout import Groups

# one prompt, N = 4 rollouts; prompt width 2, three response slots
PROMPT = np.array([[0, 1]] * 4, np.int32)
PMASK = np.ones((4, 2), bool)
RESP = np.array([[4, 2, 0], [5, 4, 2], [4, 0, 0], [2, 2, 4]], np.int32)
RMASK = np.array([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]], bool)


def _groups(scores):
    return Groups(np.array([0]), PROMPT, PMASK, RESP, RMASK, np.array([scores], np.float32),
                  [""] * 4, np.ones(4, bool), np.zeros(4, np.float32))


def _old_logp(batch):
    """Deterministic per-token log-probs on the target grid B x (T−1)."""
    b, t = batch["loss_mask"].shape
    return -0.1 * (1 + np.arange(b)[:, None] + 0.5 * np.arange(t)[None, :]).astype(np.float32)


def _conf(batch):
    b, t = batch["loss_mask"].shape
    return (0.3 + 0.05 * np.arange(b * t).reshape(b, t) / (b * t)).astype(np.float32)


class _Fns:  # only what asymmetric_batch reads: the confidence function
    @staticmethod
    def confidence(params, tokens, real):
        return _conf({"loss_mask": np.zeros((tokens.shape[0], tokens.shape[1] - 1))})


def test_asymmetric_batch_hand_computed():
    scores = [1.0, 0.0, 0.0, 0.5]  # graded: P = 2 positives at threshold 0.5 → "poor" group
    cfg = RLConfig.from_flat(method="asym-grpo", asym_mixed=False, group_size=4, prompts_per_step=1,
                   max_new_tokens=3)
    groups = _groups(scores)
    adv = np.array([[1.2, -0.8, -0.8, 0.4]], np.float32)
    batch = rl_step.build_batch(groups, adv, np.array([1.0]))
    batch["old_logp"] = _old_logp(batch)
    out, stats = rl_asym.asymmetric_batch(batch, groups, adv, np.array([1.0]), cfg, _Fns, None)
    assert stats == {"mixed_near_frac": None}
    resp = np.zeros_like(batch["loss_mask"])
    resp[:, 1:] = RMASK  # response token j is the target at index W − 1 + j = 1 + j
    conf, old = _conf(batch), _old_logp(batch)
    for j in range(4):
        pi_bar = math.exp(np.sum(old[j] * resp[j]) / resp[j].sum())
        c = np.sum(conf[j] * resp[j]) / resp[j].sum()
        if adv[0, j] > 0:
            want = min(1.0, scores[j] / 1.0) * adv[0, j]  # w⁺ = min(1, r/τ), τ = 1
        else:
            want = (1 - pi_bar + 0.01) / (1 + 0.01) * c * adv[0, j]  # text reading × confidence
        np.testing.assert_allclose(out["adv"][j], want * resp[j], rtol=1e-5, atol=1e-7)
    # P = 2 < 3: all positives + the 3 best negatives → all 4 rollouts keep their loss
    np.testing.assert_array_equal(out["loss_mask"], batch["loss_mask"])


def test_recomposition_keeps_the_best_positive_of_a_rich_group():
    cfg = RLConfig.from_flat(method="grpo", asym_recompose=True, group_size=4, prompts_per_step=2)
    scores = np.array([[1, 1, 1, 0], [0.6, 1.0, 0.7, 0.0]], np.float32)
    logp = np.array([[-3.0, -1.0, -2.0, -0.5], [-0.1, -3.0, -0.2, -0.3]], np.float32)
    dist = np.zeros((2, 4, 4), np.float32)
    # equal scores: the most probable positive (index 1, log π̄ = −1); graded: the highest score
    keep = rl_asym.recompose_keep(scores, logp, dist, cfg.asym, cfg.components.positive_threshold)
    np.testing.assert_array_equal(keep, [[0, 1, 0, 0], [0, 1, 0, 0]])
    groups = _groups([1, 1, 1, 0])  # rows' log π̄ from _old_logp fall with the row: row 0 is the best
    adv = np.array([[0.5, 0.5, 0.5, -1.5]], np.float32)
    batch = rl_step.build_batch(groups, adv, np.array([1.0]))
    batch["old_logp"] = _old_logp(batch)
    out, _ = rl_asym.asymmetric_batch(batch, groups, adv, np.array([1.0]), cfg, _Fns, None)
    np.testing.assert_array_equal(out["adv"], batch["adv"])  # channels off: advantages untouched
    np.testing.assert_array_equal(out["loss_mask"][1:], 0.0)
    np.testing.assert_array_equal(out["loss_mask"][0], batch["loss_mask"][0])


@pytest.mark.parametrize("delta,weights", [(2.0, [1.5, 1, 1, 1]), (1.0, [1.5, 0, 0, 1])])
def test_mixed_group_weights_with_token_edit_distance(delta, weights):
    # positives (score ≥ 0.5): rows 0 ([4, 2], score 1 → the top-1, ×1.5) and 3 ([2, 2, 4]);
    # negatives: row 1 [5, 4, 2] is 1 edit from row 0 (delete 5), row 2 [4] is 1 edit from row 0.
    # near = distance < δ: both near at δ = 2, both far (dropped) at δ = 1.
    cfg = RLConfig.from_flat(method="grpo", asym_mixed=True, mixed_delta=delta, group_size=4,
                   prompts_per_step=1)
    groups = _groups([1.0, 0.0, 0.0, 0.5])
    dist = rl_asym.edit_distances(groups)
    logp = np.zeros((1, 4), np.float32)
    np.testing.assert_array_equal(rl_asym.mixed_weights(groups.scores, logp, dist, cfg.asym, cfg.components.positive_threshold), [weights])
    adv = np.array([[1.2, -0.8, -0.8, 0.4]], np.float32)
    batch = rl_step.build_batch(groups, adv, np.array([1.0]))
    batch["old_logp"] = _old_logp(batch)
    out, stats = rl_asym.asymmetric_batch(batch, groups, adv, np.array([1.0]), cfg, _Fns, None)
    assert stats["mixed_near_frac"] == (1.0 if delta == 2.0 else 0.0)  # both negatives 1 edit away
    want = rl_step.build_batch(groups, adv * np.array([weights], np.float32), np.array([1.0]))["adv"]
    np.testing.assert_allclose(out["adv"], want, rtol=1e-6)


def test_switches_defaults_and_validation():
    asym, plain = RLConfig.from_flat(method="asym-grpo"), RLConfig.from_flat(method="grpo")
    for name in ("channels", "confidence", "recompose", "mixed", "dual_clip"):
        assert asym.use(name) and not plain.use(name)
    assert not RLConfig.from_flat(method="asym-grpo", dual_clip=False).use("dual_clip")
    assert asym.temperature_plan() == "cosine" and plain.temperature_plan() == "constant"
    assert asym.label() == "asym-GRPO N=8"
    # cosine from 1.0 to 0.2 over 30% of 10 steps: τ_t = 0.2 + 0.4(1 + cos(π t / 3)), then 0.2
    cfg = RLConfig.from_flat(method="asym-grpo", steps=10)
    want = [0.2 + 0.4 * (1 + math.cos(math.pi * min(t, 3) / 3)) for t in range(10)]
    np.testing.assert_allclose([cfg.rollout_temperature(t) for t in range(10)], want, rtol=1e-6)
    step = RLConfig.from_flat(method="grpo", temperature_schedule="stepwise", steps=10)
    assert step.rollout_temperature(0) == 1.0 and step.rollout_temperature(9) == pytest.approx(0.2)
    with pytest.raises(CatsimError, match="lower_threshold"):
        RLConfig.from_flat(method="grpo", dual_clip=True, dual_clip_lower=2.0)
    with pytest.raises(CatsimError, match="temperature_schedule"):
        RLConfig.from_flat(temperature_schedule="linear")
    with pytest.raises(CatsimError, match="negative_reading"):
        RLConfig.from_flat(negative_reading="both")


def test_cli_options_reach_the_config():
    from catsim.cli.llm.rl import add_rl_options, rl_config_from_args

    parser = argparse.ArgumentParser()
    add_rl_options(parser)
    args = parser.parse_args(["--method", "asym-grpo", "--no-asym-recompose", "--negative-reading",
                              "formula", "--temperature-schedule", "stepwise"])
    cfg = rl_config_from_args(args)
    assert cfg.use("channels") and not cfg.use("recompose")
    assert cfg.asym.negative_reading == "formula" and cfg.temperature_plan() == "stepwise"


def test_asym_grpo_run_through_the_rl_loop(tmp_path):
    from llm_rl_helpers import ToyTask, make_base_model

    from catsim.llm.model.checkpoint import load_model

    make_base_model(tmp_path / "base", init_std=0.3)
    cfg = RLConfig.from_flat(method="asym-grpo", steps=2, prompts_per_step=4, group_size=4, max_new_tokens=3,
                   learning_rate=3e-2, score_truncated=True)
    result = rl.run_rl(tmp_path / "base", tmp_path / "run", cfg, task=ToyTask(), progress=False)
    assert result.finished
    log = rl.read_log(tmp_path / "run")
    assert set(log[0]) == set(rl.STEP_METRICS)
    # τ_0 = τ_max; with 2 steps T_max = 0.6 < 1, so step 1 samples at τ_min
    assert [r["temperature"] for r in log] == pytest.approx([1.0, 0.2])
    assert all(1 <= r["kept_rollouts"] <= 16 for r in log)
    before = jax.tree.leaves(load_model(tmp_path / "base")[1])
    after = jax.tree.leaves(load_model(tmp_path / "run" / "model")[1])
    assert any(np.any(a != b) for a, b in zip(before, after))


def test_asymmetric_batch_compiles_once(caplog):
    """Every component on (edit distances, mixed weights, recomposition): the second and third
    batches of one shape compile nothing. Called eagerly, the rules' scans compiled again at every
    step, and the pile of compiled code ended a Maze run after ~120 steps."""
    cfg = RLConfig.from_flat(method="asym-grpo", group_size=4, prompts_per_step=1, max_new_tokens=3)
    assert cfg.use("mixed") and cfg.use("recompose")
    adv = np.array([[1.2, -0.8, -0.8, 0.4]], np.float32)
    compiles = []
    for scores in ([1.0, 0.0, 0.0, 0.5], [0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]):
        groups = _groups(scores)
        batch = rl_step.build_batch(groups, adv, np.array([1.0]))
        batch["old_logp"] = _old_logp(batch)
        caplog.clear()
        with caplog.at_level("WARNING", logger="jax"), jax.log_compiles():
            rl_asym.asymmetric_batch(batch, groups, adv, np.array([1.0]), cfg, _Fns, None)
        compiles.append([r.getMessage()[:80] for r in caplog.records if "Compiling" in r.getMessage()])
    assert compiles[0], "the first batch compiles (else this test checks nothing)"
    assert compiles[1:] == [[], []]
