"""Layers import downward only (function-local imports included): runners never import plots or
experiments, plots import no runner, and only the CLI imports the CLI."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CATSIM = Path(__file__).resolve().parents[1] / "catsim"
RUNNERS = ("catsim.sim.sweep", "catsim.sim.engine", "catsim.llm.rl", "catsim.llm.sft",
           "catsim.experiments")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {n for n in names if n.startswith("catsim")}


def _modules(package: str):
    return sorted((CATSIM / package).rglob("*.py"))


@pytest.mark.parametrize("package,forbidden", [
    ("sim", ("catsim.plots", "catsim.experiments", "catsim.cli", "catsim.llm")),
    ("theory", ("catsim.plots", "catsim.experiments", "catsim.cli", "catsim.sim", "catsim.llm")),
    ("objectives", ("catsim.plots", "catsim.experiments", "catsim.cli", "catsim.sim", "catsim.llm")),
    ("llm", ("catsim.plots", "catsim.experiments", "catsim.cli")),
    ("plots", RUNNERS + ("catsim.cli",)),
    ("experiments", ("catsim.cli",)),
])
def test_layer_imports_point_down(package, forbidden):
    bad = [f"{path.relative_to(CATSIM.parent)} imports {name}"
           for path in _modules(package) for name in sorted(_imports(path))
           if any(name == f or name.startswith(f + ".") for f in forbidden)]
    assert not bad, "\n".join(bad)


def test_the_checker_sees_function_local_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from catsim.sim.sweep import sweep\n")
    assert "catsim.sim.sweep" in _imports(module)


@pytest.mark.parametrize("module", ["errors.py", "files.py"])
def test_base_modules_import_no_other_catsim_module(module):
    # every layer may use them (one error type, one atomic writer), so they may use none
    assert _imports(CATSIM / module) <= {"catsim.errors"}
