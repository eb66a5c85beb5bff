"""Every setting a run names acts in it: a γ schedule that never acts in the run's steps, or a
schedule setting its kind ignores, is refused (one line, exit 2) by `catsim llm rl` as by `catsim
simulate` (tests/test_sim_gamma_schedules.py); a count of CPU devices below 1 is refused, not read
as 1; `--n 2^17`, the form the help shows, is a group size."""

import json

import pytest

from catsim.cli.args import parse_int_list
from catsim.cli.main import main
from catsim.errors import CatsimError
from catsim.llm.rl import RLConfig
from catsim.objectives import registry
from catsim.objectives.focal import GammaSchedule

SIM = ["--num-actions", "64", "--num-correct", "8", "--steps", "2"]


def _one_line(capsys, *needles):
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "\n" not in err and "Traceback" not in err and not captured.out, err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.mark.parametrize("flags, needles", [
    (["--gamma", "1", "--gamma-schedule", "switch", "--gamma-switch-step", "50"],
     ["switch_step) = 50", "last step is 1 (2 steps)"]),
    (["--gamma", "1", "--gamma-switch-step", "50"], ["constant γ schedule ignores --gamma-switch-step"]),
    (["--gamma", "1", "--gamma-schedule", "step_ramp", "--gamma-ramp-start", "1"], ["ramp_start) = 1"]),
    (["--gamma", "1", "--gamma-schedule", "epoch_increment", "--gamma-warmup-epochs", "1",
      "--gamma-steps-per-epoch", "1"], ["2 epochs of 1 step"]),
    (["--gamma", "1", "--gamma-steps-per-epoch", "3"], ["ignores --gamma-steps-per-epoch"]),
])
def test_llm_rl_refuses_a_gamma_schedule_that_never_acts(flags, needles, tmp_path, capsys):
    """Before: `llm rl --steps 2 --gamma 1 --gamma-schedule switch --gamma-switch-step 50` trained
    plain GRPO and reported "F-GRPO γ=1 … finished"."""
    out = tmp_path / "rl"
    assert main(["llm", "rl", "--base", str(tmp_path / "no-base"), "--out", str(out), "--steps", "2",
                 "--no-progress", *flags]) == 2
    _one_line(capsys, *needles)
    assert not out.exists()


def test_rl_schedule_checks_in_the_library():
    with pytest.raises(CatsimError, match="never comes"):
        RLConfig.from_flat(gamma=0.5, gamma_schedule="switch", gamma_switch_step=50, steps=50)
    assert RLConfig.from_flat(gamma=0.5, gamma_schedule="switch", gamma_switch_step=49, steps=50).gamma.switch_step == 49
    # epochs of one pass over the prompts are known only from the task: 100 prompts, 10 a step,
    # 20 steps = 2 epochs of 10, and γ grows only after 2
    cfg = RLConfig.from_flat(gamma=1.0, gamma_schedule="epoch_increment", gamma_warmup_epochs=1, steps=20,
                             prompts_per_step=10)
    assert cfg.gamma_schedule(30).steps_per_epoch == 3  # 7 epochs: acts
    with pytest.raises(CatsimError, match="2 epochs of 10 steps"):
        cfg.gamma_schedule(100)


def test_rl_label_names_focal_only_when_gamma_can_be_nonzero():
    """A schedule whose γ is 0 at every step is the plain method (it was labelled "F-GRPO γ=0")."""
    assert RLConfig.from_flat(gamma_schedule="success_ramp").label() == "GRPO N=8"
    assert RLConfig.from_flat(gamma=0.5, gamma_schedule="success_ramp").label() == "F-GRPO γ=0.5 N=8"
    assert RLConfig.from_flat(gamma=0.5).label() == "F-GRPO γ=0.5 N=8"


def test_schedule_settings_read_by_each_kind():
    assert GammaSchedule(kind="switch", switch_step=3).ignored_settings() == []
    assert GammaSchedule(switch_step=3, increment=0.2).ignored_settings() == [
        "--gamma-switch-step (switch_step) = 3", "--gamma-increment (increment) = 0.2"]
    assert GammaSchedule(kind="step_ramp", ramp_start=3).idle_reason(5) is None  # acts at step 4
    assert "never comes" in GammaSchedule(kind="switch", switch_step=5).idle_reason(5)


# ------------------------------------------------------------------------ --cpu-devices, --n 2^k
@pytest.mark.parametrize("command", ["simulate", "sweep"])
@pytest.mark.parametrize("count", ["0", "-2"])
def test_cpu_devices_below_one_is_refused(command, count, tmp_path, capsys, monkeypatch):
    """Before: `--cpu-devices 0` ran on one device as if 1 had been given."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:  # argparse: one line, exit 2
        main([command, *SIM, "--group-size", "8", "--cpu-devices", count])
    assert stop.value.code == 2
    _one_line(capsys, "--cpu-devices", f"got '{count}'")
    assert not any(tmp_path.iterdir())
    from catsim.sim.devices import use_cpu_cores

    with pytest.raises(CatsimError, match=">= 1"):
        use_cpu_cores(int(count))


def test_power_of_two_group_size_as_the_help_shows_it(capsys):
    """Before: `--n 2^17` was refused ("'2^17' is not a number") though the help writes 2^1:2^17."""
    assert parse_int_list("2^17", "--n") == [131072]
    assert parse_int_list("2,2^3,2^4:2^5", "--n") == [2, 8, 16, 32]
    assert main(["simulate", *SIM, "--group-size", "2^6", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["n"] == 64
    for bad in ("2^1.5", "2^x", "2^"):
        with pytest.raises(CatsimError, match="bad power of two"):
            parse_int_list(bad, "--n")


@pytest.mark.parametrize("flags, named", [
    (["--target-qpos", "0.9"], "--target-qpos is read by --init target_qpos only"),
    (["--weight-decay", "0.1"], "--weight-decay is read by --optimizer adamw only"),
    (["--clip-high", "0.3"], "--clip-high is read by the grpo, dapo and cispo objectives only"),
    (["--w-reinforce-lambda", "0.5"], "--w-reinforce-lambda is read by --advantage w_reinforce only"),
    (["--adv-eps", "0.1"], f"--adv-eps is read by --advantage {', '.join(registry.EPS_NAMES)} only"),
    (["--negative-reading", "formula"], "--negative-reading is read by the asymmetric channels only"),
    (["--asym-channels", "--kl-direction", "policy_to_uniform"], "--kl-direction is read by the confidence"),
])
def test_simulator_option_the_run_never_reads_is_refused(flags, named, capsys):
    """Before: each of these ran without the option (the paper scenario's Adam on the log-prob
    objective with the mean-centred rule) and exited 0."""
    assert main(["simulate", *SIM, "--group-size", "8", *flags]) == 2
    _one_line(capsys, named)
    ok = {"--target-qpos": ["--init", "target_qpos"], "--weight-decay": ["--optimizer", "adamw"],
          "--clip-high": ["--method", "grpo", "--ppo-epochs", "2"], "--w-reinforce-lambda": ["--advantage", "w_reinforce"],
          "--adv-eps": ["--advantage", "grpo"], "--negative-reading": ["--asym-channels"],
          "--kl-direction": ["--asym-confidence"]}
    from catsim.cli._simargs import config_from_args
    from catsim.cli.main import build_parser

    extra = next(v for k, v in ok.items() if k in flags)
    config_from_args(build_parser().parse_args(["simulate", *SIM, *flags, *extra]))  # read: accepted
