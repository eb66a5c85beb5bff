"""The README's tour quotes what its commands measured: every number of its "Measured here" line is
the one in figures/tour/eval.json, the `--save` file of the tour's `catsim llm eval` (made by the
README's commands as written, then copied there; figures/tour/README.md says how and where)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODELS = {"warm-up": "figures/maze-study/cpu/s0/base", "GRPO": "runs/tour/grpo/model",
          "F-GRPO": "runs/tour/f-grpo/model"}


@pytest.fixture(scope="module")
def measured():
    return json.loads((ROOT / "figures" / "tour" / "eval.json").read_text())


def _measured_line() -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("Measured here")
    return " ".join(readme[start:readme.index("\n\n", start)].split())


def test_the_readme_quotes_the_tours_pass_at_k(measured):
    line = _measured_line()
    found = dict(re.findall(r"(warm-up|F-GRPO|GRPO) ([0-9.]+ / [0-9.]+)", line))
    assert set(found) == set(MODELS), line
    for name, path in MODELS.items():
        pass_at_k = measured["models"][path]["pass_at_k"]
        assert found[name] == f"{pass_at_k['1']:.3f} / {pass_at_k['64']:.3f}", name


def test_the_readme_quotes_the_tours_paired_test(measured):
    line = _measured_line()
    m = re.search(r"F-GRPO − GRPO at pass@(\d+): ([+−-][0-9.]+) \(95 % \[([+−-][0-9.]+), ([+−-][0-9.]+)\], "
                  r"p = ([0-9.e-]+)\)", line)
    assert m, line
    test = next(t for t in measured["tests"] if t["a"] == MODELS["GRPO"] and t["b"] == MODELS["F-GRPO"]
                and t["k"] == int(m.group(1)))
    quoted = [float(x.replace("−", "-")) for x in m.group(2, 3, 4)]
    assert quoted == [round(test["delta"], 3), round(test["interval"][0], 3), round(test["interval"][1], 3)]
    assert m.group(5) == f"{test['p_value']:.2g}"


def test_the_readme_describes_the_committed_warm_up():
    base = json.loads((ROOT / "figures" / "maze-study" / "cpu" / "s0" / "base_eval.json").read_text())
    readme = " ".join((ROOT / "README.md").read_text().split())
    m = re.search(r"solves (\d+) % of held-out 7×7 mazes per sample and (\d+) % within 64 samples", readme)
    assert m and [int(m.group(1)), int(m.group(2))] == [round(100 * base["pass_at_k"][k]) for k in ("1", "64")]


def test_the_readme_quotes_the_published_simulator_cell():
    row = next(line for line in (ROOT / "figures" / "fig2_paper_table.txt").read_text().splitlines()
               if line.split()[:1] == ["256"])
    cells = [cell.split()[0] for cell in row.split("|")[1:]]  # Qpos γ=0, Mret γ=0, Qpos γ=1, Mret γ=1
    readme = " ".join((ROOT / "README.md").read_text().split())
    m = re.search(r"over 4 seeds ([0-9.]+) against ([0-9.]+)", readme)
    assert m and [m.group(1), m.group(2)] == [f"{float(cells[1]):.3f}", f"{float(cells[3]):.3f}"]


def test_the_readme_quotes_the_tours_pass_at_1_test(measured):
    m = re.search(r"at pass@1 ([+−-][0-9.]+) \(p = ([0-9.]+)\)", _measured_line())
    assert m
    test = next(t for t in measured["tests"] if t["a"] == MODELS["GRPO"] and t["b"] == MODELS["F-GRPO"]
                and t["k"] == 1)
    assert float(m.group(1).replace("−", "-")) == round(test["delta"], 3)
    assert m.group(2) == f"{test['p_value']:.2g}"
