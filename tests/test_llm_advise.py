"""`catsim llm advise` and its validation study, end to end on a seconds-long paths set-up."""

import contextlib
import io
import json

import numpy as np
import pytest

from catsim.cli.main import main
from catsim.experiments import advise_study


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The quick study run as docs/advise.md's command with its smaller flag (`--quick`), progress
    lines and all; tests/test_docs.py leaves that command to this fixture (the same run, minutes)."""
    root = tmp_path_factory.mktemp("advise")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["llm", "advise-study", "--out", str(root / "study"), "--figures", str(root / "figures"),
                     "--quick"])
    assert code == 0, err.getvalue()[-3000:]
    assert "is deprecated; use" not in err.getvalue()  # the page uses today's spellings
    return root / "study"


def test_study_writes_results_and_figure(study):
    figures = study.parent / "figures"  # --figures: results.json and the figure go there
    results = json.loads((figures / "results.json").read_text())
    sc = advise_study.StudyConfig.quick()
    assert set(results["runs"]) == {f"N{n}-s{s}" for n in sc.group_sizes for s in sc.seeds}
    n_train = sc.task_options["n_train"]
    for run in results["runs"].values():
        assert len(run["delta_log_tau"]) == n_train and len(run["visits"]) == n_train
        # every step draws prompts_per_step = rollouts / N train prompts
        assert sum(run["visits"]) == sc.rl_steps * max(1, sc.rollouts_per_step // run["group_size"])
    assert (figures / "advise_study.png").stat().st_size > 0 and not (study / "results.json").exists()
    # a rerun reuses the finished runs and gives the same numbers, by default into the study folder
    again = advise_study.run_study(study, sc, progress=False)
    assert again["runs"] == results["runs"]
    assert json.loads((study / "results.json").read_text())["runs"] == results["runs"]
    assert (study / "advise_study.png").stat().st_size > 0


def test_advise_cli_table_json_and_figure(study, tmp_path, capsys, monkeypatch):
    base = study / "base"
    fig = tmp_path / "risk.png"
    args = ["llm", "advise", "--model", str(base), "--task", "paths", "--samples", "8", "--prompts", "6", "--group-size", "2,4,8",
            "--bootstrap", "10", "--rare", "tail:0.5", "--figure", str(fig)]
    assert main(args + ["--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["group_sizes"] == [2, 4, 8] and out["task"] == "paths" and len(out["mu"]) == 6
    assert out["recommended_n"] in (2, 4, 8) and out["reasoning"]
    assert fig.stat().st_size > 0
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "prompts x 8 samples" in text and out["reasoning"][:40] in text
    assert "active (all)" in text and None not in out["active_share"]
    # a JSON run writes no figure unless --figure is given
    monkeypatch.chdir(tmp_path)
    assert main(args[:-2] + ["--format", "json"]) == 0
    capsys.readouterr()
    assert not (tmp_path / "advise_risk.png").exists()


@pytest.mark.parametrize("extra, message", [
    (["--samples", "1"], "--samples must be at least 2"),
    (["--group-size", ""], "empty value"),
    (["--group-size", "0,4"], "each N"),
    (["--rare", "often:0.1"], "unknown rare rule"),
    (["--target-risk", "1.5"], "--target-risk"),
    (["--figure", "/nonexistent-dir/x.png"], "cannot write"),
])
def test_advise_bad_input_is_one_line_error_before_work(study, extra, message, capsys):
    assert main(["llm", "advise", "--model", str(study / "base")] + extra) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


def test_advise_needs_a_catsim_model_dir(tmp_path, capsys):
    assert main(["llm", "advise", "--model", str(tmp_path)]) == 2
    assert "config.json" in capsys.readouterr().err


def test_calibration_bins_and_spearman():
    risk = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, np.nan])
    lost = np.array([0, 0, 0, 1, 1, 1, 1.0])
    cal = advise_study.calibration(risk, lost, bins=2)
    assert [c["prompts"] for c in cal] == [3, 3]
    assert cal[0]["lost_share"] == 0.0 and cal[1]["lost_share"] == 1.0
    # ranks 1..6 against tied ranks 2,2,2,5,5,5: ρ = 13.5 / sqrt(17.5 · 13.5)
    assert advise_study._spearman(risk, lost) == pytest.approx(np.sqrt(13.5 / 17.5))
    assert advise_study._spearman([1, 1, 1], [1, 2, 3]) is None


def test_the_default_figure_goes_into_the_model_directory_not_the_cwd(tmp_path, capsys, monkeypatch):
    """Before: `llm advise --model M` (a table) wrote advise_risk.png into the current folder."""
    from llm_rl_helpers import make_paths_base

    model = make_paths_base(tmp_path / "model")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert main(["llm", "advise", "--model", str(model), "--samples", "2", "--prompts", "2", "--group-size", "2",
                 "--bootstrap", "2"]) == 0
    assert f"figure: {model / 'advise_risk.png'}" in capsys.readouterr().err
    assert (model / "advise_risk.png").read_bytes()[:4] == b"\x89PNG"
    assert list(cwd.iterdir()) == []
    monkeypatch.setattr("os.access", lambda path, mode: False)  # a model folder that cannot take it
    assert main(["llm", "advise", "--model", str(model), "--samples", "2", "--prompts", "2"]) == 2
    assert "give --figure PATH, or --figure none" in capsys.readouterr().err  # one line saying what to do


def test_a_one_seed_study_prints_no_spread(study, capsys):
    """The quick study has one seed: its table shows each mean alone (was '+0.123 ± 0.000')."""
    assert advise_study.StudyConfig.quick().seeds == (0,)
    capsys.readouterr()
    assert main(["llm", "advise-study", "--out", str(study), "--quick", "--no-progress"]) == 0  # reuses the runs
    out = capsys.readouterr().out
    assert "Spearman(risk, loss)" in out and "±" not in out
