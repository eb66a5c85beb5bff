"""The article's γ schedules reach the simulator through the CLI (`--gamma-schedule`)."""

import json

import pytest

from catsim.cli.main import main

SMALL = ["simulate", "--num-actions", "300", "--num-correct", "40", "--n", "16", "--steps", "6",
         "--format", "json"]


def _final(capsys, *extra):
    assert main(SMALL + list(extra)) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_step_ramp_before_its_start_is_the_constant_schedule(capsys):
    const = _final(capsys, "--gamma", "0.5")
    ramp = _final(capsys, "--gamma", "1.5", "--gamma-schedule", "step_ramp", "--gamma-start", "0.5",
                  "--gamma-ramp-start", "1000", "--gamma-ramp-steps", "2000")
    assert (ramp["qpos"], ramp["mret"]) == (const["qpos"], const["mret"])


def test_epoch_increment_moves_gamma_between_its_start_and_cap(capsys):
    low = _final(capsys, "--gamma", "0.2")
    high = _final(capsys, "--gamma", "1.0")
    grow = _final(capsys, "--gamma", "1.0", "--gamma-schedule", "epoch_increment", "--gamma-start", "0.2",
                  "--gamma-increment", "0.3", "--gamma-steps-per-epoch", "2")
    assert grow["qpos"] not in (low["qpos"], high["qpos"])
    # no growth (increment 0) is the constant schedule at gamma-start
    flat = _final(capsys, "--gamma", "1.0", "--gamma-schedule", "epoch_increment", "--gamma-start", "0.2",
                  "--gamma-increment", "0")
    assert flat["qpos"] == low["qpos"]


@pytest.mark.parametrize("extra, message", [
    (["--gamma-schedule", "step_ramp", "--gamma-ramp-steps", "0"], "ramp_steps"),
    (["--gamma-schedule", "epoch_increment", "--gamma-steps-per-epoch", "0"], "steps_per_epoch"),
])
def test_bad_schedule_settings_are_one_line_errors(capsys, extra, message):
    assert main(SMALL + extra) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
