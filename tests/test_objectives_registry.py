"""The advantage registry is the one list: the simulator, the trainer, both CLIs and the docs'
table read it; k is checked against the group size in one place."""

import ast
from pathlib import Path

import pytest

from catsim.cli.main import build_parser
from catsim.errors import CatsimError
from catsim.llm.rl import config as rl_config
from catsim.llm.rl.rare import RL_ADVANTAGES
from catsim.objectives import registry
from catsim.sim import config as C

ROOT = Path(__file__).resolve().parents[1]


def _choices(argv, dest):
    parser = build_parser(argv)
    for action in _actions(parser):
        if action.dest == dest and action.choices:
            return tuple(action.choices)
    raise AssertionError(f"no --{dest} option with choices for {argv}")


def _actions(parser):
    for action in parser._actions:  # the parser tree (argparse keeps sub-parsers in choices)
        yield action
        if hasattr(action, "choices") and isinstance(action.choices, dict):
            for sub in action.choices.values():
                yield from _actions(sub)


def test_every_reader_uses_the_registry():
    assert C.ADVANTAGES == registry.NAMES
    assert RL_ADVANTAGES == registry.NAMES
    assert rl_config.CHOICES["advantage"] == registry.NAMES
    assert _choices(["simulate"], "advantage") == registry.NAMES
    assert _choices(["sweep"], "advantage") == registry.NAMES
    # no second list of rule names left in the library: no tuple, list or set literal of 3+ of them
    for path in (ROOT / "catsim").rglob("*.py"):
        tree = ast.parse(path.read_text())
        exports = {id(n) for a in ast.walk(tree) if isinstance(a, (ast.Assign, ast.AugAssign))
                   and "__all__" in ast.unparse(a.targets[0] if isinstance(a, ast.Assign) else a.target)
                   for n in ast.walk(a.value)}  # __all__ names functions, not rules
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and id(node) not in exports:
                names = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in registry.NAMES]
                assert len(names) < 3, f"{path.name}:{node.lineno} lists {names}"


def test_docs_table_is_the_registry():
    assert registry.markdown_table() in (ROOT / "docs" / "objectives.md").read_text()


def test_check_k():
    assert registry.check_k("grpo", 99, 4) is None
    assert registry.check_k("pkpo", 3, 4) is None
    with pytest.raises(CatsimError, match="exceeds the group size N = 4"):
        registry.check_k("passk_training", 5, 4)
    assert "trains nothing" in registry.check_k("passk_training", 4, 4)
    assert "trains nothing" in registry.check_k("pkpo_mean", 4, 4)
    assert "exactly one correct" in registry.check_k("pkpo", 4, 4)
    with pytest.raises(CatsimError, match="unknown advantage 'nope'"):
        registry.get("nope")


def test_can_move():
    assert not registry.get("grpo").can_move(1)
    assert registry.get("nsr").can_move(1)
    assert not registry.get("passk_training").can_move(4, 4) and registry.get("passk_training").can_move(4, 3)
    assert registry.get("pkpo").can_move(4, 4) and not registry.get("pkpo").can_move(4, 5)
