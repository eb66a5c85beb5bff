"""`--help` of the simulator, theory, reproduce and pipeline commands: every option states its
default, enumerated options list their choices, and each command shows an example."""

from __future__ import annotations

import argparse
import json

import pytest

from catsim.cli.main import build_parser, main

COMMANDS = [("simulate",), ("sweep",), ("lemma",), ("mass-step",), ("verify",), ("reproduce",),
            ("llm", "pipeline"), ("llm", "compare"), ("llm", "advise"), ("llm", "advise-study"),
            ("llm", "maze-study")]


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_option_has_a_default_and_the_command_an_example(command):
    parser = build_parser()
    for name in command:
        parser = _subparser(parser, name)
    for action in parser._actions:
        if (isinstance(action, argparse._HelpAction) or not action.option_strings or action.required
                or action.help == argparse.SUPPRESS):  # a hidden older spelling (catsim.cli.vocabulary)
            continue
        assert action.help and "default" in action.help, (command, action.option_strings)
    text = parser.format_help()
    assert f"catsim {' '.join(command)} " in (parser.epilog or "") + (parser.description or ""), command
    assert "example" in text


def test_help_lists_choices_and_real_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "{sgd,adam,adamw}" in text and "{linear,reinforce,grpo,dapo,cispo,f-grpo,f-dapo,f-cispo}" in text
    assert "paper: adam" in text and "paper: 0.01" in text  # the paper scenario's optimizer and η
    assert "record metrics every k steps; steps must be a multiple (default: 10)" in text
    with pytest.raises(SystemExit):
        main(["llm", "pipeline", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    from catsim.experiments.llm_pipeline import PipelineConfig

    assert f"RL steps per run (default: {PipelineConfig().rl_steps}; --quick: {PipelineConfig.quick().rl_steps})" in text


def test_a_command_imports_only_what_it_needs_and_help_still_lists_every_command(capsys):
    """`catsim simulate ...` builds only its own parser (no trainer, SciPy or plotting imports at
    start-up); with no command, every command is listed; `catsim llm <sub>` builds that one."""
    import subprocess
    import sys

    heavy = ("catsim.experiments.llm_pipeline", "catsim.llm.rl", "scipy", "catsim.theory", "matplotlib")
    probe = ("import json, sys; from catsim.cli.main import build_parser; build_parser({argv!r}); "
             "print(json.dumps([m for m in {heavy!r} if m in sys.modules]))")
    for argv in (["simulate", "--group-size", "8"], ["llm", "plan", "--help"]):
        out = subprocess.run([sys.executable, "-c", probe.format(argv=argv, heavy=heavy)], capture_output=True,
                             text=True, check=True).stdout
        assert json.loads(out) == [], argv
    # the probe can see them: building every parser imports them
    out = subprocess.run([sys.executable, "-c", probe.format(argv=None, heavy=heavy)], capture_output=True,
                         text=True, check=True).stdout
    assert "catsim.experiments.llm_pipeline" in json.loads(out)
    parser = build_parser(["simulate"])
    assert list(next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices) == ["simulate"]
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = capsys.readouterr().out
    assert all(name in listed for name in ("simulate", "sweep", "lemma", "mass-step", "verify", "reproduce", "llm"))
    with pytest.raises(SystemExit):
        main(["llm", "compare", "--help"])
    assert "--publish" in capsys.readouterr().out
