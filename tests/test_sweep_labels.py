"""Sweeps of different settings into one --out: each update rule and γ schedule has its own method
label (so its own cells, rows, table and figure), and a finished cell is never overwritten by a
sweep of other settings (refused in one line, exit 2, before any work)."""

import dataclasses

import pytest

from catsim.cli._simargs import config_from_args
from catsim.cli.main import build_parser, main
from catsim.objectives.asymmetric import AsymmetricConfig
from catsim.objectives.focal import GammaSchedule
from catsim.sim import config as C
from catsim.sim import sweep as S
from catsim.sim.results import SimResults

TINY = ["--num-actions", "64", "--num-correct", "8", "--steps", "4", "--log-every", "2", "--group-size", "8",
        "--gamma", "0", "--seeds", "1", "--no-progress", "--cpu-devices", "1"]


def _label(*flags):
    return config_from_args(build_parser().parse_args(["sweep", *flags])).method_label


def test_published_labels_are_unchanged():
    assert _label() == "paper" and _label("--scenario", "brorl") == "brorl"
    assert C.UpdateConfig().label == "adam-reinforce-lr0.01"
    assert _label("--num-actions", "200", "--num-correct", "20") == "paper+adam-reinforce-lr0.01"
    assert _label("--advantage", "mean_centred") == "paper+adam-reinforce-lr0.01"  # the default rule
    assert _label("--update", "asym-grpo") == "paper+adam-reinforce-lr0.01+asym-ch-conf-rec-clip1"


def test_every_setting_that_acts_has_its_own_label():
    """Before: --advantage grpo and mean_centred (and every γ schedule) were all
    paper+adam-reinforce-lr0.01."""
    variants = [[], ["--advantage", "grpo"], ["--advantage", "grpo", "--adv-eps", "0.01"],
                ["--advantage", "maxrl"], ["--advantage", "maxrl", "--adv-eps", "0.1"],
                ["--gamma-schedule", "switch", "--gamma-switch-step", "2"],
                ["--gamma-schedule", "switch", "--gamma-switch-step", "3"],
                ["--gamma-schedule", "warmup", "--gamma-warmup-steps", "3"],
                ["--gamma-schedule", "warmup", "--gamma-warmup-steps", "3", "--gamma-start", "0.5"],
                ["--gamma-schedule", "success_ramp"], ["--gamma-schedule", "success_ramp", "--gamma-success-low", "0.1"],
                ["--gamma-schedule", "epoch_increment"], ["--gamma-schedule", "epoch_increment", "--gamma-increment", "0.2"],
                ["--gamma-schedule", "step_ramp"], ["--gamma-schedule", "step_ramp", "--gamma-ramp-steps", "2"],
                ["--entropy-coef", "0.01"], ["--kl-coef", "0.01"], ["--ppo-epochs", "2"],
                ["--method", "grpo", "--ppo-epochs", "2"],
                ["--method", "grpo", "--ppo-epochs", "2", "--clip-high", "0.3"],
                ["--optimizer", "adamw"], ["--optimizer", "adamw", "--weight-decay", "0.1"],
                ["--dynamic-sampling"], ["--update", "asym-grpo"],
                ["--update", "asym-grpo", "--negative-reading", "formula"],
                ["--update", "asym-grpo", "--kl-direction", "policy_to_uniform"]]
    labels = [_label("--steps", "4", "--log-every", "1", *v) for v in variants]
    assert len(set(labels)) == len(labels), labels
    # the settings without a flag, too
    base = C.UpdateConfig()
    others = [dataclasses.replace(base, reward_correct=2.0), dataclasses.replace(base, b2=0.99),
              dataclasses.replace(base, adam_eps=1e-6), dataclasses.replace(base, dynamic_sampling=True, max_resamples=4),
              dataclasses.replace(base, dual_clip=1.0, dual_clip_lower=0.2),
              dataclasses.replace(base, dual_clip=1.0, asym=AsymmetricConfig(baseline=0.5)),
              dataclasses.replace(base, gamma=GammaSchedule(kind="switch", switch_step=5))]
    assert len({u.label for u in [base, *others]}) == len(others) + 1


def test_two_rules_into_one_out_keep_their_cells(tmp_path, capsys, monkeypatch):
    """Before: the second sweep recomputed and overwrote the first's cell (one label for both)."""
    out = tmp_path / "sw"
    argv = ["sweep", *TINY, "--out", str(out)]
    assert main([*argv, "--advantage", "grpo"]) == 0
    assert main([*argv, "--advantage", "mean_centred"]) == 0
    cells = {p.name: p.read_bytes() for p in (out / "cells").glob("*.npz")}
    assert set(cells) == {"paper+adam-reinforce-lr0.01-grpo_n8.npz", "paper+adam-reinforce-lr0.01_n8.npz"}
    first = SimResults.load(out / "cells" / "paper+adam-reinforce-lr0.01-grpo_n8.npz")
    second = SimResults.load(out / "cells" / "paper+adam-reinforce-lr0.01_n8.npz")
    assert first.attrs[first.methods[0]]["update"]["advantage"] == "grpo"
    assert second.attrs[second.methods[0]]["update"]["advantage"] == "mean_centred"
    assert (first.data["qpos"] != second.data["qpos"]).any()
    capsys.readouterr()
    # the same rule with other settings: refused before any work, the finished cell kept
    monkeypatch.setattr(S, "run_cell", lambda *a, **k: pytest.fail("a cell was computed"))
    assert main([*argv, "--advantage", "grpo", "--steps", "6"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "\n" not in err and "Traceback" not in err and not captured.out
    assert "paper+adam-reinforce-lr0.01-grpo_n8.npz holds this cell computed with other settings" in err
    assert "config.steps = 6 here, 4 there" in err and "--no-resume" in err
    assert main([*argv, "--advantage", "grpo", "--gamma", "0,1"]) == 2
    assert "gammas = [0.0, 1.0] here, [0.0] there" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in (out / "cells").glob("*.npz")} == cells
    assert main([*argv, "--advantage", "grpo"]) == 0  # the same settings: read back, nothing computed
