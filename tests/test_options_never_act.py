"""An option accepted by a command must act in the run it starts: `simulate`/`sweep` refuse --passk-k
with a rule that has no k and clip bounds with one PPO epoch, `sweep --study methods` refuses
--gamma, `llm rl` refuses the options its method never reads (one line, exit 2, before any work).
The published Maze arms' options all act."""

import dataclasses

import numpy as np
import pytest

from catsim.cli.main import main
from catsim.sim import config as C
from catsim.sim.sweep import simulate

SIM = ["--num-actions", "64", "--num-correct", "8", "--steps", "2", "--n", "8", "--format", "json"]


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
    (["--objective", "grpo", "--clip-high", "0.3"], ["--clip-high acts from the second PPO epoch on"],
     ["--ppo-epochs", "2"]),
    (["--objective", "dapo", "--clip-low", "0.1"], ["--clip-low acts from the second PPO epoch on"],
     ["--ppo-epochs", "3"]),
    (["--objective", "cispo", "--clip-high", "1"], ["the ratio π/π_old is 1"], ["--ppo-epochs", "2"]),
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
                 "--n", "2", "--seeds", "1", "--gamma", "1", "--out", str(out), "--no-progress"]) == 2
    _one_line(capsys, "--study methods runs every rule under its own label and sets --gamma per row itself")
    assert not out.exists()
