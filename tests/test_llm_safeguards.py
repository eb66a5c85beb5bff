"""asym-GRPO safeguards in the RL loop (issue 9, component 7): the detection on crafted histories,
the smoothing ε reaching the advantages, and a tiny run whose verifier collapses on the held-out
split, so both warnings fire through `run_rl` (log record + one stderr line)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.llm import rl
from catsim.llm.rl import RLConfig
from catsim.llm.rl import asym as rl_asym
from catsim.llm.safeguards import collapse_threshold, step_warnings


def _records(accuracy, temperatures, rewards=None, warnings=None):
    out = []
    for i, (acc, tau) in enumerate(zip(accuracy, temperatures)):
        out.append({"step": i + 1, "heldout_accuracy": acc, "temperature": tau,
                    "reward": 0.5 if rewards is None else rewards[i],
                    "warnings": [] if warnings is None else warnings[i]})
    return out


ASYM = RLConfig.from_flat(method="asym-grpo", steps=20)  # cosine: τ_min = 0.2 from step 6 (30% of 20)


def test_collapse_fires_on_a_sudden_zero_only():
    tau = [1.0] * 4
    assert step_warnings(_records([0.3, 0.4, 0.0], tau), ASYM)[0].startswith("reward collapse")
    assert step_warnings(_records([0.0, 0.0, 0.0], tau), ASYM) == ()  # never solved anything: no collapse
    assert step_warnings(_records([0.3, 0.04, 0.0], tau), ASYM) == ()  # a slide below 0.05, not sudden
    # 32 held-out prompts (the default): a zero after 0.125 happens by chance with p = 0.875^32 = 1.4%
    assert collapse_threshold(32) == pytest.approx(1 - 0.01 ** (1 / 32)) == pytest.approx(0.1340, abs=1e-4)
    assert collapse_threshold(8) == pytest.approx(0.4377, abs=1e-4) and collapse_threshold(1000) == 0.05
    assert step_warnings(_records([0.125, 0.0], tau), ASYM) == ()
    assert step_warnings(_records([0.14, 0.0], tau), ASYM)[0].startswith("reward collapse")
    # the newest record has no measurement: nothing new to judge, even though the last one was a drop
    assert step_warnings(_records([0.3, 0.0, None], tau), ASYM) == ()
    # collapse is a property of any run, not only of asym-GRPO
    assert step_warnings(_records([0.5, 0.0], [1.0, 1.0]), RLConfig.from_flat(steps=20))[0].startswith("reward collapse")


def test_stagnation_needs_the_floor_early_and_a_frozen_signal():
    floor = [1.0, 0.9, 0.7, 0.5, 0.3, 0.21, 0.2]  # at τ_min = 0.2 at step index 6 < 10 = 50% of 20
    frozen = [0.1, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3]
    msgs = step_warnings(_records(frozen, floor), ASYM)
    assert len(msgs) == 1 and msgs[0].startswith("exploration stagnation") and "step 6 of 20" in msgs[0]
    rising = frozen[:-1] + [0.35]
    assert step_warnings(_records(rising, floor), ASYM) == ()  # pass@k still improving
    assert step_warnings(_records(frozen, floor[:-1] + [0.21]), ASYM) == ()  # not at the floor yet
    late = RLConfig.from_flat(method="asym-grpo", steps=12)  # step index 6 is not before 50% of 12
    assert step_warnings(_records(frozen, floor), late) == ()
    constant = RLConfig.from_flat(method="grpo", steps=20, temperature=0.2)  # no schedule: nothing to diagnose
    assert step_warnings(_records(frozen, [0.2] * 7), constant) == ()
    # reported once per run: the next step would warn again, unless the log already holds the warning
    assert step_warnings(_records(frozen + [0.3], floor + [0.2]), ASYM)
    told = [[]] * 6 + [[msgs[0]], []]
    assert step_warnings(_records(frozen + [0.3], floor + [0.2], warnings=told), ASYM) == ()


def test_stagnation_falls_back_to_training_reward_without_heldout():
    floor = [1.0, 0.9, 0.7, 0.5, 0.3, 0.21, 0.2]
    none = [None] * 7
    flat = [0.2, 0.6, 0.5, 0.5, 0.4, 0.5, 0.6]  # no step beats the reward of index 1 by 1e-3
    assert step_warnings(_records(none, floor, rewards=flat), ASYM)[0].startswith("exploration stagnation")
    up = flat[:-1] + [0.7]
    assert step_warnings(_records(none, floor, rewards=up), ASYM) == ()


def test_smoothing_eps_reaches_the_negative_weights():
    """w⁻ = (π̄+ε)/(D−π̄+ε) (formula reading): with π̄ = 1 the smoothing is all that keeps it finite."""
    scores = np.array([[1.0, 0.0]], np.float32)
    adv = np.array([[1.0, -1.0]], np.float32)
    old_logp = np.zeros((2, 3), np.float32)  # every response token has probability 1: π̄ = 1
    resp = np.ones((2, 3), np.float32)
    for eps in (0.01, 0.5):
        cfg = RLConfig.from_flat(method="asym-grpo", negative_reading="formula", negative_eps=eps)
        out = rl_asym.asymmetric_advantages(adv, scores, old_logp, resp, cfg.asym)
        assert out[0, 0] == pytest.approx(1.0)
        assert out[0, 1] == pytest.approx(-(1 + eps) / eps, rel=1e-5)
    with pytest.raises(CatsimError):
        RLConfig.from_flat(negative_eps=-0.1)
    with pytest.raises(CatsimError):
        RLConfig.from_flat(heldout_every=-1)
    with pytest.raises(CatsimError):
        RLConfig.from_flat(heldout_prompts=0)


def test_safeguard_options_on_the_cli():
    from catsim.cli.llm.rl import add_rl_options, rl_config_from_args

    parser = argparse.ArgumentParser()
    add_rl_options(parser)
    cfg = rl_config_from_args(parser.parse_args(["--heldout-every", "3", "--heldout-prompts", "8",
                                                            "--negative-eps", "0.05"]))
    assert (cfg.run.heldout_every, cfg.run.heldout_prompts, cfg.asym.negative_eps) == (3, 8, 0.05)


@dataclass(frozen=True)
class CollapsingToy:
    """The toy task of llm_rl_helpers, except that its held-out verifier accepts everything on the
    first held-out evaluation and nothing afterwards: held-out accuracy 1 → 0, a "sudden zero"."""

    calls: list = field(default_factory=list, hash=False, compare=False)
    name: ClassVar[str] = "collapsing-toy"

    def __post_init__(self):
        from llm_rl_helpers import ToyTask

        object.__setattr__(self, "toy", ToyTask())

    alphabet = "UD>"

    def num_prompts(self, split):
        return self.toy.num_prompts(split)

    def prompt(self, split, seed, index):
        return self.toy.prompt(split, seed, index)

    def reward(self, prompt, completion_text):
        if prompt.split != "heldout":
            return self.toy.reward(prompt, completion_text)
        self.calls.append(prompt.index)
        first_pass = len(self.calls) <= self.toy.num_prompts("heldout")
        return 1.0 if first_pass else 0.0


def test_the_rl_loop_logs_and_prints_both_warnings(tmp_path, capsys):
    from llm_rl_helpers import make_base_model

    make_base_model(tmp_path / "base", init_std=0.3)
    # GRPO with a cosine schedule whose floor τ_min equals τ_max = 1 (the safeguards do not depend on
    # the other components, and one sampling temperature = one compilation): the temperature is at
    # its floor from step 0; 50% of 14 = 7; the pass@k window of 5 makes index 5 the earliest stagnation
    cfg = RLConfig.from_flat(method="grpo", temperature_schedule="cosine", steps=14, prompts_per_step=2, group_size=4,
                   max_new_tokens=3, learning_rate=1e-2, score_truncated=True, temperature_min=1.0,
                   heldout_every=1, heldout_prompts=8)
    task = CollapsingToy()
    result = rl.run_rl(tmp_path / "base", tmp_path / "run", cfg, task=task, progress=False, stop_after=6,
                       label="toy")
    assert result.steps_done == 6
    log = rl.read_log(tmp_path / "run")
    assert [r["heldout_accuracy"] for r in log] == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert [len(r["warnings"]) for r in log] == [0, 1, 0, 0, 0, 1]
    assert log[1]["warnings"][0].startswith("reward collapse: held-out accuracy fell from 1 to 0")
    assert log[5]["warnings"][0].startswith("exploration stagnation") and "step 5 of 14" in log[5]["warnings"][0]
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert err == [f"warning: toy: step 2: {log[1]['warnings'][0]}", f"warning: toy: step 6: {log[5]['warnings'][0]}"]
    # a resumed run rebuilds its history from the log: stagnation is not reported a second time
    rl.run_rl(tmp_path / "base", tmp_path / "run", cfg, task=task, progress=False, stop_after=7, label="toy")
    log = rl.read_log(tmp_path / "run")
    assert len(log) == 7 and log[6]["warnings"] == []
    assert json.loads((tmp_path / "run" / "rl_log.jsonl").read_text().splitlines()[1])["warnings"] == log[1]["warnings"]
