"""The unlikeliness reward in `catsim llm rl` (--unlikeliness-beta; He et al., "Rewarding the Unlikely",
arXiv 2506.02355 §4): the verifier scores of each group shaped by `objectives.rewards.unlikeliness`,
ranked by each completion's mean response-token log-prob under the behaviour policy, before the group
advantage and the focal weight, as the simulator does; recorded in the run's config and label; off
(β = 0) bit-identical to no flag; refused in one line where it could not act."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest

from catsim.cli.main import main
from catsim.errors import CatsimError
from catsim.llm.rl.config import RLConfig
from catsim.llm.rl.step import compute_advantages
from catsim.objectives import rewards

SCORES = np.array([[1.0, 1.0, 0.0]], np.float32)
LOGP = np.array([[-1.0, -2.0, -3.0]], np.float32)  # mean response-token log π of each completion
SHAPED = np.array([1 - 0.25 * 2 / 3, 1 - 0.25 * 1 / 3, 0.0])  # ranks 2, 1, 0 of N = 3: [0.833, 0.917, 0]


def _cfg(**options):
    return RLConfig.from_flat(group_size=3, prompts_per_step=1, unlikeliness_beta=0.25, **options)


def test_shaped_scores_are_the_unlikeliness_reward_hand_computed():
    np.testing.assert_allclose(rewards.unlikeliness(SCORES[0], LOGP[0], beta=0.25), SHAPED, rtol=1e-6)
    # Dr.GRPO's advantage is r − r̄ (Rc = 1, Rw = 0): it shows the shaped rewards themselves
    adv, mu, _ = compute_advantages(SCORES, _cfg(method="dr_grpo"), 0.0, logp_PxN=LOGP)
    np.testing.assert_allclose(adv[0], SHAPED - SHAPED.mean(), rtol=1e-5)
    assert mu[0] == pytest.approx(2 / 3)  # μ̂ (and so the focal weight) stays the verifier's success rate
    # GRPO (the authors' torch.std, ddof 1, + ε) on the shaped rewards, at reward levels Rw + (Rc − Rw)·s
    adv, _, _ = compute_advantages(SCORES, _cfg(reward_correct=1.0, reward_wrong=-1.0), 0.0, logp_PxN=LOGP)
    r = -1.0 + 2.0 * SHAPED
    np.testing.assert_allclose(adv[0], (r - r.mean()) / (r.std(ddof=1) + 1e-6), rtol=1e-5)
    # the unshaped rule gives both correct completions the same advantage; the shaping favours the unlikely one
    plain, _, _ = compute_advantages(SCORES, RLConfig.from_flat(group_size=3, prompts_per_step=1), 0.0)
    assert plain[0, 0] == plain[0, 1] and adv[0, 1] > adv[0, 0]


def test_edge_groups_and_the_focal_weight_compose_as_in_the_simulator():
    scores = np.array([[1, 1, 1], [0, 0, 0], [0, 1, 0]], np.float32)
    logp = np.tile(LOGP, (3, 1))
    cfg = _cfg(method="dr_grpo")
    adv, _, _ = compute_advantages(scores, cfg, 0.0, logp_PxN=logp)
    all_right = rewards.unlikeliness(scores[0], logp[0], beta=0.25)
    np.testing.assert_allclose(adv[0], all_right - np.mean(all_right), rtol=1e-5)  # all correct: still moves
    assert np.any(adv[0] != 0)
    np.testing.assert_array_equal(adv[1], 0.0)  # all wrong: stays zero
    one = np.array([0.0, 1 - 0.25 * 1 / 3, 0.0])  # one correct, rank 1 of 3
    np.testing.assert_allclose(adv[2], one - one.mean(), rtol=1e-5)
    focal, _, g = compute_advantages(scores, cfg, 0.5, logp_PxN=logp)  # g = (1 − μ̂)^γ times the shaped advantage
    np.testing.assert_allclose(focal, g[:, None] * adv, rtol=1e-6)
    assert g[0] == 0.0  # the focal weight silences the all-correct group


@pytest.mark.parametrize("rule", ["grpo", "mean_centred"])
def test_the_trainer_gives_the_simulators_advantages(rule):
    """One group of N = 8 draws (two of one action: a tie, ranked by position in both) through the
    simulator's lean step and the trainer's advantages, at the same reward levels, ε and std."""
    from catsim.sim.config import UpdateConfig
    from catsim.sim.lean import unlikeliness_draw_advantages

    p_V = jnp.asarray([0.3, 0.2, 0.15, 0.1, 0.1, 0.08, 0.05, 0.02])
    actions = jnp.asarray([0, 3, 3, 1, 6, 2, 7, 5])
    correct_V = jnp.asarray([True, False, True, True, False, False, True, False])
    update = UpdateConfig(advantage=rule, unlikeliness_beta=0.25, adv_eps=1e-6, reward_correct=1.0, reward_wrong=-1.0)
    weights = jnp.ones(8)
    sim = unlikeliness_draw_advantages(update, correct_V[actions], p_V, actions, weights, jnp.sum(weights))
    cfg = RLConfig.from_flat(group_size=8, prompts_per_step=1, unlikeliness_beta=0.25, adv_eps=1e-6,
                             adv_std="population", reward_correct=1.0, reward_wrong=-1.0,
                             **({} if rule == "grpo" else {"advantage": rule}))
    scores = np.asarray(correct_V[actions], np.float32)[None]
    got, _, _ = compute_advantages(scores, cfg, 0.0, logp_PxN=np.log(np.asarray(p_V)[np.asarray(actions)])[None])
    np.testing.assert_allclose(got[0], np.asarray(sim), rtol=1e-5, atol=1e-6)
    plain, _, _ = compute_advantages(scores, cfg.replace(unlikeliness_beta=0.0), 0.0)
    assert not np.allclose(plain, got, atol=1e-3)  # the shaping moved them: the comparison is not vacuous


def test_the_advantages_need_the_log_probs():
    with pytest.raises(CatsimError, match="log-probs"):
        compute_advantages(SCORES, _cfg(), 0.0)


def test_the_loop_ranks_by_the_behaviour_policys_own_mean_response_log_probs(tmp_path, monkeypatch):
    """The log-probs the step hands to the advantages are the base model's token log-probs (a direct
    scoring pass), averaged over each completion's response tokens; the run trains on the shaped rewards."""
    from llm_rl_helpers import ToyTask, make_base_model

    from catsim.llm import rl, scoring
    from catsim.llm.evaluate import load_policy
    from catsim.llm.rl import loop

    make_base_model(tmp_path / "base", init_std=0.3)
    seen = {}
    trim, advantages = loop.trim_completions, loop.compute_advantages

    def keep_groups(groups, width):
        seen.setdefault("groups", trim(groups, width))
        return seen["groups"]

    def keep_logp(scores, cfg, gamma, *args, **kwargs):
        seen.setdefault("logp", kwargs.get("logp_PxN"))
        return advantages(scores, cfg, gamma, *args, **kwargs)

    monkeypatch.setattr(loop, "trim_completions", keep_groups)
    monkeypatch.setattr(loop, "compute_advantages", keep_logp)
    cfg = RLConfig.from_flat(steps=1, prompts_per_step=4, group_size=4, max_new_tokens=3, learning_rate=3e-2,
                             score_truncated=True, temperature=0.8, unlikeliness_beta=0.25)
    rl.run_rl(tmp_path / "base", tmp_path / "run", cfg, task=ToyTask(), progress=False)
    groups, pol = seen["groups"], load_policy(tmp_path / "base")
    tokens = np.concatenate([groups.prompt_tokens, groups.tokens], axis=1)
    real = np.concatenate([groups.prompt_mask, groups.mask], axis=1)
    logp, _ = scoring.token_logps(pol.params, pol.cfg, jnp.asarray(tokens), jnp.asarray(real), temperature=0.8)
    resp = np.asarray(logp)[:, groups.prompt_tokens.shape[1] - 1:]
    want = (resp * groups.mask).sum(1) / groups.mask.sum(1)
    np.testing.assert_allclose(seen["logp"].reshape(-1), want, rtol=1e-5, atol=1e-6)
    assert np.any(groups.scores.max(1) > 0)  # some group has a correct completion to shape


def test_a_run_that_needs_old_logp_scores_the_behaviour_policy_once(tmp_path, monkeypatch):
    """With several updates per step the batch needs old_logp too: it gets the ranking pass's array,
    equal to what `loop.score` computes itself, instead of a second pass."""
    from llm_rl_helpers import ToyTask, make_base_model

    from catsim.llm import rl
    from catsim.llm.rl import loop

    make_base_model(tmp_path / "base", init_std=0.3)
    original, seen = loop.score, []

    def check_score(tr, params, ref_params, batch, temperature=1.0):
        seen.append("old_logp" in batch)
        own = original(tr, params, ref_params, {k: v for k, v in batch.items() if k != "old_logp"}, temperature)
        np.testing.assert_array_equal(batch["old_logp"], own["old_logp"])
        return original(tr, params, ref_params, batch, temperature)

    monkeypatch.setattr(loop, "score", check_score)
    cfg = RLConfig.from_flat(steps=1, prompts_per_step=4, group_size=4, mini_batch_size=8, max_new_tokens=3,
                             score_truncated=True, unlikeliness_beta=0.25)
    assert loop.needs_old_logp(cfg)
    rl.run_rl(tmp_path / "base", tmp_path / "run", cfg, task=ToyTask(), progress=False)
    assert seen == [True]


RUN = ["--group-size", "4", "--prompts-per-step", "2", "--max-new-tokens", "8", "--steps", "2", "--no-progress"]


@pytest.fixture(scope="module")
def paths_base(tmp_path_factory):
    from llm_rl_helpers import make_paths_base

    return make_paths_base(tmp_path_factory.mktemp("unlikely") / "base")


def _run(base, out, *flags):
    assert main(["llm", "rl", "--base", str(base), "--out", str(out), *RUN, *flags]) == 0
    log = [json.loads(line) for line in (out / "rl_log.jsonl").read_text().splitlines()]
    return log, json.loads((out / "rl_config.json").read_text())


def _params(path):
    import jax

    from catsim.llm.model.checkpoint import load_model

    return jax.tree.leaves(load_model(path)[1])


def test_llm_rl_runs_with_the_flag_and_records_beta(paths_base, tmp_path, capsys):
    log, saved = _run(paths_base, tmp_path / "run", "--unlikeliness-beta", "0.25")
    assert [r["step"] for r in log] == [1, 2] and all(np.isfinite(r["loss"]) for r in log)
    assert saved["rl"]["rare"]["unlikeliness_beta"] == 0.25
    assert "unlikely β=0.25" in saved["label"] and "unlikely β=0.25" in capsys.readouterr().out
    from catsim.llm.rl.loop import fingerprint_settings

    assert fingerprint_settings(RLConfig.from_flat(unlikeliness_beta=0.25))["unlikeliness_beta"] == 0.25


def test_beta_zero_is_bit_identical_to_no_flag(paths_base, tmp_path):
    from catsim.llm.rl.loop import fingerprint_settings

    timing = {"step_seconds", "tokens_per_second"}
    plain_log, plain = _run(paths_base, tmp_path / "plain")
    zero_log, zero = _run(paths_base, tmp_path / "zero", "--unlikeliness-beta", "0")
    assert [{k: v for k, v in r.items() if k not in timing} for r in plain_log] == \
        [{k: v for k, v in r.items() if k not in timing} for r in zero_log]
    for a, b in zip(_params(tmp_path / "plain" / "model"), _params(tmp_path / "zero" / "model")):
        np.testing.assert_array_equal(a, b)
    assert plain["fingerprint"] == zero["fingerprint"] and plain["label"] == zero["label"]
    assert "unlikeliness_beta" not in fingerprint_settings(RLConfig.from_flat())  # older run dirs resume


@pytest.mark.parametrize("flags, needle", [
    (["--advantage", "maxrl", "--unlikeliness-beta", "0.25"], "--advantage maxrl never reads"),
    (["--advantage", "nsr", "--unlikeliness-beta", "0.25"], "a binary rule reads the 0/1 outcome"),
    (["--method", "asym-grpo", "--asym-advantage", "baseline_free", "--unlikeliness-beta", "0.25"],
     "asym_advantage 'baseline_free' replaces"),
    (["--unlikeliness-beta", "1.5"], "unlikeliness_beta must lie in [0.0, 1.0]"),
    (["--unlikeliness-beta", "-0.25"], "unlikeliness_beta must lie in [0.0, 1.0]"),
    (["--advantage", "psr", "--unlikeliness-beta", "0"], "--unlikeliness-beta is read by"),
])
def test_a_beta_that_cannot_act_is_refused_in_one_line(flags, needle, tmp_path, capsys, monkeypatch):
    import catsim.llm.rl

    monkeypatch.setattr(catsim.llm.rl, "run_rl", lambda *a, **k: pytest.fail("the run started"))
    out = tmp_path / "rl"
    assert main(["llm", "rl", "--base", str(tmp_path / "base"), "--out", str(out), *flags]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "\n" not in err and "Traceback" not in err and needle in err, err
    assert not out.exists()


def test_a_binary_rule_ignores_the_shaping():
    """Why a binary rule is refused: it thresholds score > 1/2, so its advantages are the same with
    or without the shaped scores (shown here on the scores the shaping would give)."""
    from catsim.objectives import registry

    for name in (n for n in registry.NAMES if registry.get(n).binary):
        cfg = RLConfig.from_flat(group_size=3, prompts_per_step=1, advantage=name, passk_k=2)
        shaped = np.asarray(rewards.unlikeliness(SCORES[0], LOGP[0], beta=0.25))[None].astype(np.float32)
        np.testing.assert_array_equal(compute_advantages(SCORES, cfg, 0.0)[0], compute_advantages(shaped, cfg, 0.0)[0])
