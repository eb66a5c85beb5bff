"""The article's γ schedules reach the simulator through the CLI (`--gamma-schedule`)."""

import json

import pytest

from catsim.cli.main import main

SMALL = ["simulate", "--num-actions", "300", "--num-correct", "40", "--group-size", "16", "--steps", "6",
         "--format", "json"]


def _final(capsys, *extra):
    assert main(SMALL + list(extra)) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_step_ramp_before_its_start_is_the_constant_schedule(capsys, tmp_path):
    from catsim.sim.results import SimResults

    runs = {}
    for name, extra in (("const", ["--gamma", "0.5"]),
                        ("ramp", ["--gamma", "1.5", "--gamma-schedule", "step_ramp", "--gamma-start", "0.5",
                                  "--gamma-ramp-start", "4", "--gamma-ramp-steps", "1"])):
        _final(capsys, *extra, "--log-every", "1", "--save", str(tmp_path / f"{name}.npz"))
        runs[name] = SimResults.load(tmp_path / f"{name}.npz").data["qpos"]  # records after 0…6 steps
    # steps 0…4 at γ = 0.5 on both; step 5, the last, on the ramp (γ = 1.5) only
    assert (runs["ramp"][..., :6] == runs["const"][..., :6]).all() and (runs["ramp"][..., 6] != runs["const"][..., 6]).all()


def test_a_schedule_that_never_acts_in_the_run_is_refused(capsys):
    """A switch past the last step, a ramp starting at it, no growth: γ would keep its first value
    while the output names the schedule's γ, so the run is refused (one line, exit 2)."""
    for extra, named in ((["--gamma-schedule", "switch", "--gamma-switch-step", "100"], "switch_step) = 100"),
                         (["--gamma-schedule", "step_ramp", "--gamma-ramp-start", "5"], "ramp_start) = 5"),
                         (["--gamma-schedule", "epoch_increment", "--gamma-increment", "0"], "increment) = 0"),
                         (["--gamma-schedule", "epoch_increment", "--gamma-warmup-epochs", "2",
                           "--gamma-steps-per-epoch", "2"], "3 epochs of 2 steps"),
                         (["--gamma-switch-step", "3"], "constant γ schedule ignores --gamma-switch-step")):
        assert main(SMALL + ["--gamma", "1", *extra]) == 2
        captured = capsys.readouterr()
        err = captured.err.strip()
        assert named in err and "\n" not in err and "Traceback" not in err and not captured.out, err
    assert "the run's last step is 5 (6 steps)" in main_err(capsys, "--gamma-schedule", "switch",
                                                            "--gamma-switch-step", "6")
    _final(capsys, "--gamma", "1", "--gamma-schedule", "switch", "--gamma-switch-step", "5")  # acts at step 5


def main_err(capsys, *extra):
    assert main(SMALL + ["--gamma", "1", *extra]) == 2
    return capsys.readouterr().err


def test_epoch_increment_moves_gamma_between_its_start_and_cap(capsys):
    low = _final(capsys, "--gamma", "0.2")
    high = _final(capsys, "--gamma", "1.0")
    grow = _final(capsys, "--gamma", "1.0", "--gamma-schedule", "epoch_increment", "--gamma-start", "0.2",
                  "--gamma-increment", "0.3", "--gamma-steps-per-epoch", "2")
    assert grow["qpos"] not in (low["qpos"], high["qpos"])
    # no growth (increment 0) would be the constant schedule at gamma-start under γ = 1.0's name: refused
    assert main(SMALL + ["--gamma", "1.0", "--gamma-schedule", "epoch_increment", "--gamma-start", "0.2",
                         "--gamma-increment", "0"]) == 2
    assert "γ would stay at 0.2" in capsys.readouterr().err


@pytest.mark.parametrize("extra, message", [
    (["--gamma-schedule", "step_ramp", "--gamma-ramp-steps", "0"], "ramp_steps"),
    (["--gamma-schedule", "epoch_increment", "--gamma-steps-per-epoch", "0"], "steps_per_epoch"),
])
def test_bad_schedule_settings_are_one_line_errors(capsys, extra, message):
    assert main(SMALL + extra) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
