"""`catsim llm pipeline --quick` smoke test with a tiny given base model (no warm-up), shrunk further
through the CLI options: the report, results and figures are written and hold sane numbers."""

from __future__ import annotations

import json

import pytest

from catsim.cli.main import main
from catsim.experiments.llm_pipeline import PipelineConfig
from catsim.llm.tasks import make_task


def test_pipeline_quick_smoke(tmp_path, capsys):
    from llm_rl_helpers import make_base_model

    options = dict(PipelineConfig.quick().tasks[0].options)
    task = make_task("paths", **options)
    make_base_model(tmp_path / "base", alphabet=task.alphabet, task_spec={"task": "paths", "config": options},
                    init_std=0.1)
    out = tmp_path / "report"
    code = main(["llm", "pipeline", "--out", str(out), "--quick", "--no-progress", "--base-model",
                 f"paths={tmp_path / 'base'}", "--runs", "grpo:2,f-grpo:2", "--rl-steps", "2",
                 "--rollouts-per-step", "4", "--eval-samples", "4", "--eval-prompts", "4"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "| GRPO N=2 |" in printed and "| F-GRPO γ=0.5 N=2 |" in printed
    for name in ("report.md", "results.json", "passk_curves.png", "training_dynamics.png", "theory_overlay.png"):
        assert (out / name).stat().st_size > 0, name
    results = json.loads((out / "results.json").read_text())
    assert {"jax_version", "cpu_model", "isa_flags", "git_commit"} <= set(results["provenance"])  # what produced the numbers
    runs = results["tasks"]["paths"]["runs"]
    assert set(runs) == {"grpo:2:s0", "f-grpo:2:s0"}
    for entry in runs.values():
        values = entry["eval"]["pass_at_k"]
        assert set(values) == {"1", "2", "4"}
        assert all(0.0 <= v <= 1.0 for v in values.values())
        assert list(values.values()) == sorted(values.values())  # pass@k is non-decreasing in k
        assert 0.0 <= entry["answer_mass"]["mret"] <= 1.0
        assert len(entry["ledger"]["labels"]) == 3  # base, the mid-run snapshot, final
    assert (out / "paths" / "grpo-N2-s0" / "model" / "config.json").is_file()
    for entry in runs.values():  # per-step curves, one value per RL step
        assert {len(v) for v in entry["curves"].values()} == {2}

    # The report and figures are re-rendered from results.json alone: same bytes without the runs.
    import shutil

    shutil.rmtree(out / "paths")
    again = tmp_path / "again"
    again.mkdir()
    shutil.copyfile(out / "results.json", again / "results.json")
    assert main(["llm", "pipeline", "--out", str(again), "--rerender"]) == 0
    for name in ("report.md", "comparison.png", "passk_curves.png", "training_dynamics.png", "theory_overlay.png"):
        assert (again / name).read_bytes() == (out / name).read_bytes(), name
    assert main(["llm", "pipeline", "--out", str(tmp_path / "nothing"), "--rerender"]) == 2
    assert "cannot read pipeline results" in capsys.readouterr().err


def test_published_results_rerender_without_run_directories(tmp_path):
    """The published results.json files predate the stored curves and their run directories are
    gone: they still re-render (report identical; training panels say the curves are missing)."""
    from pathlib import Path

    from catsim.experiments.llm_report import load_results, write_report

    root = Path(__file__).resolve().parents[1]
    for name in ("llm-rl", "asym-grpo"):
        results = load_results(root / "figures" / name / "results.json")
        report = write_report(results, tmp_path / name)
        assert report.read_text() == (root / "figures" / name / "report.md").read_text()
        for png in ("comparison.png", "passk_curves.png", "training_dynamics.png", "theory_overlay.png"):
            assert (tmp_path / name / png).read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("flags, shown", [
    (["--runs", "grpo:4"], "--runs"),
    (["--quick", "--heldout-every", "0", "--base-model", "paths=x"], "--quick, --base-model, --heldout-every"),
])
def test_rerender_refuses_run_options(tmp_path, capsys, flags, shown):
    """Before: --rerender ignored every run option (rc 0) and redrew results.json as it was."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    (tmp_path / "results.json").write_bytes((root / "figures" / "llm-rl" / "results.json").read_bytes())
    assert main(["llm", "pipeline", "--out", str(tmp_path), "--rerender", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{shown}: not read with --rerender" in err and "\n" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]  # nothing redrawn


@pytest.mark.published
def test_published_default_report_is_the_rendering_of_its_results():
    """figures/llm-rl/report.md is exactly what `render_report` makes of the recorded results.json,
    and every table row of the default run quoted in docs/llm-rl.md is a row of that report."""
    from pathlib import Path

    from catsim.experiments.llm_report import render_report

    root = Path(__file__).resolve().parents[1]
    report = (root / "figures" / "llm-rl" / "report.md").read_text()
    results = json.loads((root / "figures" / "llm-rl" / "results.json").read_text())
    assert render_report(results) == report
    docs = (root / "docs" / "llm-rl.md").read_text()
    published = _pass_at_k_rows(report)
    assert len(published) == 10  # base + 4 runs, paths and maze
    assert set(published) <= set(_pass_at_k_rows(docs))


def _pass_at_k_rows(text: str) -> list[str]:
    """The body rows of every markdown table headed `| run | pass@1 | pass@8 | pass@64 |...`."""
    rows, inside = [], False
    for line in text.splitlines():
        if line.startswith("| run | pass@1 | pass@8 | pass@64 |"):
            inside = True
        elif inside and line.startswith("|") and not line.startswith("|---"):
            rows.append(line)
        elif not line.startswith("|"):
            inside = False
    return rows
