"""`--help` of the simulator, theory, reproduce and pipeline commands: every option states its
default, enumerated options list their choices, and each command shows an example."""

from __future__ import annotations

import argparse

import pytest

from catsim.cli.main import build_parser, main

COMMANDS = [("simulate",), ("sweep",), ("lemma",), ("mass-step",), ("verify",), ("reproduce",),
            ("llm", "pipeline"), ("llm", "compare"), ("llm", "advise"), ("llm", "advise-study")]


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_option_has_a_default_and_the_command_an_example(command):
    parser = build_parser()
    for name in command:
        parser = _subparser(parser, name)
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or not action.option_strings or action.required:
            continue
        assert action.help and "default" in action.help, (command, action.option_strings)
    text = parser.format_help()
    assert f"catsim {' '.join(command)} " in (parser.epilog or "") + (parser.description or ""), command
    assert "example" in text


def test_help_lists_choices_and_real_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "{sgd,adam,adamw}" in text and "{linear,reinforce,grpo,dapo,cispo}" in text
    assert "paper: adam" in text and "paper: 0.01" in text  # the paper scenario's optimizer and η
    assert "record metrics every k steps; steps must be a multiple (default: 10)" in text
    with pytest.raises(SystemExit):
        main(["llm", "pipeline", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    from catsim.experiments.llm_pipeline import PipelineConfig

    assert f"RL steps per run (default: {PipelineConfig().rl_steps}; --quick: {PipelineConfig.quick().rl_steps})" in text
