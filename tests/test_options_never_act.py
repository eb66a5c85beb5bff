"""An option accepted by a command must act in the run it starts: `simulate`/`sweep` refuse --passk-k
with a rule that has no k and clip bounds with one PPO epoch, `sweep --study methods` refuses
--gamma, `llm rl` refuses the options its method never reads (one line, exit 2, before any work).
The published Maze arms' options all act."""

import dataclasses

import numpy as np
import pytest

from catsim.cli.main import main
from catsim.objectives import registry
from catsim.sim import config as C
from catsim.sim.sweep import simulate

SIM = ["--num-actions", "64", "--num-correct", "8", "--steps", "2", "--group-size", "8", "--format", "json"]


def _one_line(capsys, *needles):
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "\n" not in err and "Traceback" not in err and not captured.out, err
    for needle in needles:
        assert needle in err, err


@pytest.mark.parametrize("flags, needles, acts", [
    (["--passk-k", "2"], ["--passk-k is read by --advantage passk_training, pkpo, pkpo_mean only"],
     ["--advantage", "pkpo"]),
    (["--advantage", "grpo", "--passk-k", "2"], ["--passk-k is read by"], ["--advantage", "pkpo_mean"]),
    (["--method", "grpo", "--clip-high", "0.3"], ["--clip-high acts from the second PPO epoch on"],
     ["--ppo-epochs", "2"]),
    (["--method", "dapo", "--clip-low", "0.1"], ["--clip-low acts from the second PPO epoch on"],
     ["--ppo-epochs", "3"]),
    (["--method", "cispo", "--clip-high", "1"], ["the ratio π/π_old is 1"], ["--ppo-epochs", "2"]),
])
def test_simulator_option_that_cannot_act_is_refused(flags, needles, acts, capsys):
    """Before: each ran (exit 0) and its label or command claimed a k or a clip that never acted."""
    for command in (["simulate", *SIM], ["sweep", *SIM[:-2], "--log-every", "1", "--out", "/nonexistent/never-written"]):
        assert main([*command, *flags]) == 2
        _one_line(capsys, *needles)
    from catsim.cli._simargs import config_from_args
    from catsim.cli.main import build_parser

    config_from_args(build_parser().parse_args(["simulate", *SIM, *flags, *acts]))  # acts: accepted


@pytest.mark.parametrize("surrogate", ["grpo", "dapo", "cispo"])
def test_clip_bounds_cannot_act_with_one_ppo_epoch(surrogate):
    """Why the clip bounds are refused with one epoch: the run is the same whatever they are (the
    ratio is 1 at the only epoch), and differs from the second epoch on."""
    def run(epochs, low, high):
        update = dataclasses.replace(C.UpdateConfig(), surrogate=surrogate, optimizer="sgd", learning_rate=2.0,
                                     ppo_epochs=epochs, clip_low=low, clip_high=high)
        cfg = C.SimConfig(policy=C.PolicyConfig(num_actions=64, num_correct=8), update=update, steps=6,
                          log_every=2, group_size=8)
        return simulate(cfg, gammas=[0.0], seeds=2).data["qpos"]

    np.testing.assert_array_equal(run(1, 0.2, 0.2), run(1, 0.01, 0.02))
    assert not np.array_equal(run(2, 0.2, 0.2), run(2, 0.01, 0.02))


def test_methods_study_refuses_gamma(tmp_path, capsys):
    """Before: `sweep --study methods --gamma 1` ran every row at its own γ, ignoring --gamma (exit 0)."""
    out = tmp_path / "methods"
    assert main(["sweep", "--study", "methods", "--num-actions", "64", "--num-correct", "8", "--steps", "2",
                 "--group-size", "2", "--seeds", "1", "--gamma", "1", "--out", str(out), "--no-progress"]) == 2
    _one_line(capsys, "--study methods runs every rule under its own label and sets --gamma per row itself")
    assert not out.exists()


# ------------------------------------------------------------------------ catsim llm rl
@pytest.mark.parametrize("flags, needle, acts", [
    (["--kl-estimator", "k1"], "--kl-estimator is read by the KL penalty only", ["--kl-coef", "0.01"]),
    (["--kl-bias-correction"], "--kl-bias-correction is read by the KL penalty only", ["--kl-coef", "0.01"]),
    (["--max-sampling-rounds", "2"], "--max-sampling-rounds is read by dynamic sampling only", ["--method", "dapo"]),
    (["--overlong-buffer", "0.1"], "--overlong-buffer is read by the soft overlong punishment", ["--method", "dapo"]),
    (["--method", "dapo", "--advantage", "maxrl", "--overlong-penalty", "0.5"],
     "--overlong-penalty is read by the soft overlong punishment", ["--advantage", "grpo"]),
    (["--clip-high", "0.28"], "--clip-high acts only when a step makes several updates", ["--ppo-epochs", "2"]),
    (["--method", "cispo", "--clip-low", "0.5"], "--clip-low acts only when", ["--mini-batch-prompts", "4"]),
    (["--clip-ratio-c", "3"], "--clip-ratio-c acts only when", ["--mini-batch-size", "16"]),
    (["--temperature-min", "0.1"], "--temperature-min is read by a temperature schedule only",
     ["--temperature-schedule", "cosine"]),
    (["--temperature-fraction", "0.5"], "--temperature-fraction is read by a temperature schedule only",
     ["--method", "asym-grpo"]),
    (["--logprob-temperature", "one"], "--logprob-temperature 'one' differs from 'sampling' only",
     ["--temperature", "0.7"]),
    (["--dual-clip-lower", "0.05"], "--dual-clip-lower is read by the dual-threshold gradient clip only",
     ["--dual-clip"]),
    (["--dual-clip-amplification", "2"], "--dual-clip-amplification is read by", ["--method", "asym-grpo"]),
    (["--mixed-delta", "2"], "--mixed-delta is read by asym-GRPO's mixed groups and recomposition only",
     ["--asym-mixed"]),
    (["--positive-threshold", "0.7"], "--positive-threshold is read by", ["--asym-recompose"]),
    (["--negative-eps", "0.05"], "--negative-eps is read by the asym-GRPO channels only", ["--asym-channels"]),
    (["--negative-reading", "formula"], "--negative-reading is read by", ["--method", "asym-grpo"]),
    (["--kl-direction", "policy_to_uniform"], "--kl-direction is read by the asym-GRPO confidence weight only",
     ["--asym-confidence"]),
    (["--passk-k", "2"], "--passk-k is read by --advantage passk_training, pkpo, pkpo_mean only",
     ["--advantage", "pkpo"]),
    (["--w-reinforce-lambda", "0.2"], "--w-reinforce-lambda is read by --advantage w_reinforce only",
     ["--advantage", "w_reinforce"]),
    (["--method", "dr_grpo", "--adv-std", "population"],
     f"--adv-std is read by the {', '.join(registry.DDOF_NAMES)} advantages", ["--advantage", "grpo"]),
    (["--method", "dr_grpo", "--adv-std", "population"],
     f"--adv-std is read by the {', '.join(registry.DDOF_NAMES)} advantages", ["--advantage", "inverse_success"]),
    (["--method", "dr_grpo", "--adv-eps", "0.01"], f"--adv-eps is read by the {', '.join(registry.EPS_NAMES)} advantages",
     ["--advantage", "maxrl"]),
    (["--method", "asym-grpo", "--asym-advantage", "baseline_free", "--advantage", "maxrl"],
     "--advantage is not read with --asym-advantage baseline_free", ["--asym-advantage", "baseline"]),
    (["--heldout-prompts", "8"], "--heldout-prompts is read by the held-out accuracy only", ["--heldout-every", "2"]),
    (["--advantage", "maxrl", "--reward-correct", "2"], "--reward-correct is read by the advantages on rewards only",
     ["--advantage", "grpo"]),
    (["--method", "dr_grpo", "--advantage", "nsr", "--reward-wrong", "-1"], "--advantage nsr reads the 0/1 outcome",
     ["--advantage", "dr_grpo"]),
])
def test_llm_rl_option_the_method_never_reads_is_refused(flags, needle, acts, tmp_path, capsys, monkeypatch):
    """Before: each was accepted (the run started, and trained with the option in its config as if it acted)."""
    import catsim.llm.rl
    from catsim.cli.llm.rl import rl_config_from_args
    from catsim.cli.main import build_parser
    from catsim.llm.rl.config import FLAT

    monkeypatch.setattr(catsim.llm.rl, "run_rl", lambda *a, **k: pytest.fail("the run started"))
    out = tmp_path / "rl"
    assert main(["llm", "rl", "--base", str(tmp_path / "base"), "--out", str(out), *flags]) == 2
    _one_line(capsys, needle, "this run would not use it")
    assert not out.exists()
    # with what the message names, the option acts: accepted
    from catsim.llm.rl.unread import unread_options

    args = build_parser().parse_args(["llm", "rl", "--base", "b", "--out", "o", *flags, *acts])
    given = [name for name in FLAT if getattr(args, name, None) is not None]
    assert unread_options(rl_config_from_args(args), given) == []


def test_every_published_maze_arm_sets_only_options_that_act():
    from catsim.experiments.maze import presets as maze_presets
    from catsim.experiments.maze.arms import ARM_SETS, arm_config
    from catsim.llm.rl.unread import unread_options

    presets = {"cpu": maze_presets.cpu(), "tiny": maze_presets.tiny()}
    for name, arms in ARM_SETS.items():
        for arm in arms():
            cfg = arm_config(presets[name], arm, 0, 25)
            assert unread_options(cfg, list(arm.options) + ["mini_batch_size", "micro_batch_size",
                                                            "rollout_batch_size"]) == [], (name, arm.name)


def _rl_config(*flags):
    from catsim.cli.llm.rl import rl_config_from_args
    from catsim.cli.main import build_parser

    return rl_config_from_args(build_parser().parse_args(["llm", "rl", "--base", "b", "--out", "o", *flags]))


def test_dapo_with_a_binary_rule_refuses_its_overlong_shaping_that_never_acts(tmp_path, capsys, monkeypatch):
    """Before: `--method dapo --advantage maxrl` ran as DAPO (label, config) while the overlong
    punishment it turns on never reached the advantages (exit 0). --no-overlong-shaping accepts it."""
    import catsim.llm.rl
    from catsim.llm.rl.unread import check_options_act

    monkeypatch.setattr(catsim.llm.rl, "run_rl", lambda *a, **k: pytest.fail("the run started"))
    out = tmp_path / "rl"
    assert main(["llm", "rl", "--base", str(tmp_path / "base"), "--out", str(out), "--method", "dapo",
                 "--advantage", "maxrl"]) == 2
    _one_line(capsys, "--method dapo turns on the soft overlong punishment, which --advantage maxrl never reads",
              "--no-overlong-shaping")
    assert not out.exists()
    for acts in (["--advantage", "maxrl", "--no-overlong-shaping"], ["--advantage", "grpo"], []):
        check_options_act(_rl_config("--method", "dapo", *acts), ["overlong_shaping"] if len(acts) == 3 else [])


def test_a_binary_rule_reads_neither_the_reward_levels_nor_the_overlong_shaping():
    """Why both are refused with a binary rule: the advantages and μ̂ are the same whatever Rc, Rw and
    the overlong punishment; a rule on rewards reads them."""
    from catsim.llm.rl.step import compute_advantages

    rng = np.random.default_rng(0)
    scores = (rng.random((4, 8)) < 0.5).astype(np.float32)
    lengths = rng.integers(1, 33, (4, 8))

    def run(*flags):
        cfg = _rl_config("--max-new-tokens", "32", *flags)
        return compute_advantages(scores, cfg, 0.5, lengths_PxN=lengths)[:2]

    for rule in ("maxrl", "nsr"):
        plain = run("--advantage", rule)
        for other in (run("--advantage", rule, "--reward-correct", "3", "--reward-wrong", "-2"),
                      run("--method", "dapo", "--advantage", rule, "--overlong-shaping")):
            for x, y in zip(plain, other):
                np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6)
    assert not np.allclose(run("--method", "dapo", "--advantage", "dr_grpo")[0],
                           run("--method", "dapo", "--advantage", "dr_grpo", "--no-overlong-shaping")[0])
    assert not np.allclose(run("--advantage", "dr_grpo")[0],
                           run("--advantage", "dr_grpo", "--reward-correct", "3")[0])
