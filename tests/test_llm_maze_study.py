"""The Maze study: the runner on the `tiny` preset (resume after an interrupt gives the same
results), the paired test against hand-computed cases, pass@n = the empirical solve rate, and bad
CLI input."""

import dataclasses
import json
import shutil

import numpy as np
import pytest

from catsim.cli.main import main
from catsim.experiments.maze import presets as maze_presets
from catsim.experiments.maze.report import FIGURES, write_report
from catsim.experiments.maze.stats import paired_tests
from catsim.experiments.maze.study import run_study
from catsim.llm import evaluate as ev
from catsim.llm.metrics import paired_subsample_test


def _numbers(results: dict) -> dict:
    """Everything but wall times."""
    runs = [{k: v for k, v in r.items() if k != "rl_seconds"} for r in results["runs"]]
    return {"bases": results["bases"], "runs": runs, "summary": results["summary"], "tests": results["tests"]}


def test_tiny_study_resumes_to_the_same_results(tmp_path):
    sp = maze_presets.tiny()
    out = tmp_path / "study"
    assert run_study(out, sp, progress=False, max_runs=1, say=lambda *_: None) is None  # "interrupted"
    first = out / "s0" / "grpo-N2" / "eval.json"
    assert first.is_file() and not (out / "s0" / "f-grpo-N2-g0.5" / "eval.json").exists()
    stamp = first.stat().st_mtime_ns
    done = run_study(out, sp, progress=False, say=lambda *_: None)
    assert first.stat().st_mtime_ns == stamp  # the finished run was reused, not rerun
    # redo the second run from nothing: the same numbers (every step is a pure function of its inputs)
    shutil.rmtree(out / "s0" / "f-grpo-N2-g0.5")
    again = run_study(out, sp, progress=False, say=lambda *_: None)
    assert json.dumps(_numbers(again), sort_keys=True) == json.dumps(_numbers(done), sort_keys=True)
    assert [(r["method"], r["gamma"]) for r in done["runs"]] == [("grpo", 0.0), ("f-grpo", 0.5)]
    for r in done["runs"]:  # pass@k at k = n is the share of mazes with at least one correct sample
        c = np.asarray(r["final"]["num_correct"])
        assert r["final"]["pass_at_k"][str(sp.eval_n)] == pytest.approx(np.mean(c > 0), abs=1e-12)
        assert len(r["final"]["solution_prob"]) == sp.eval_prompts and r["curve"][0]["step"] == sp.rl_steps
    assert {t["k"] for t in done["tests"]} == {1, 2, 4}
    report = write_report(done, tmp_path / "report")  # the report and its figures from results alone
    assert all((tmp_path / "report" / f).is_file() for f in FIGURES)
    assert "| GRPO | 2 | 1 |" in report.read_text() and "65.6–75.8" in report.read_text()
    with pytest.raises(Exception, match="other settings"):  # another preset in the same directory
        run_study(out, dataclasses.replace(sp, rl_steps=3), progress=False, say=lambda *_: None)


def test_passk_at_n_is_the_empirical_rate():
    c = np.random.default_rng(0).integers(0, 2, size=50) * np.random.default_rng(1).integers(0, 17, size=50)
    s = ev.passk_summary(c, 16, [1, 16])
    assert s["pass_at_k"][16] == pytest.approx(np.mean(c > 0), abs=1e-12)
    assert s["pass_at_k"][1] == pytest.approx(np.mean(c / 16), abs=1e-12)


@pytest.mark.parametrize("n, m, a, b, p, delta", [
    (3, 1, [1], [3], 2 / 3, 2 / 3),  # Δ = 1 − X, X ~ Bernoulli(1/3): Pr(Δ ≤ 0) = 1/3
    (4, 2, [2], [4], 1 / 3, 1 / 2),  # pass@1 on 2 of 4 = X/2, X ~ Hypergeom(2, 2, 2): Pr(X = 2) = 1/6
])
def test_paired_test_hand_cases(n, m, a, b, p, delta):
    res = paired_subsample_test(n, a, b, k=1, m=m, iterations=40_000, seed=3)
    assert res["p_value"] == pytest.approx(p, abs=0.015)
    assert res["delta"] == pytest.approx(delta, abs=1e-12)


def test_pooled_test_over_seeds_hand_case():
    """Two seeds, one maze each, n = 3, m = 1: Δ = 1 − (X1 + X2)/2 with X ~ Bernoulli(1/3), so
    Pr(Δ ≤ 0) = 1/9 and the two-sided p = 2/9; the units are (seed, maze) pairs."""
    sp = dataclasses.replace(maze_presets.tiny(), plan=((2, 2),), eval_n=3, ks=(1,), test_m=1,
                             test_iterations=40_000)
    runs = [{"method": meth, "group_size": 2, "gamma": g, "seed": s, "final": {"num_correct": [c]}}
            for s in (0, 1) for meth, g, c in (("grpo", 0.0, 1), ("f-grpo", 0.5, 3))]
    (t,) = paired_tests(runs, sp)
    assert t["units"] == 2 and t["seeds"] == [0, 1] and t["m"] == 1 and t["n"] == 3
    assert t["p_value"] == pytest.approx(2 / 9, abs=0.012)
    assert t["significant"] is False


@pytest.mark.parametrize("argv, message", [
    (["--preset", "huge"], "unknown maze-study preset"),
    (["--seeds", "0"], "--seeds must be >= 1"),
    (["--gamma", "0"], "gammas must be > 0"),
    (["--group-size", "3"], "must be divisible by N = 3"),
    (["--paper-shapes"], "--paper-shapes goes with --preset tiny"),
    (["--max-runs", "0"], "--max-runs must be >= 1"),
])
def test_bad_input_is_one_line(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["llm", "maze-study", "--out", "OUT", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())


def test_report_from_results(tmp_path, capsys):
    assert main(["llm", "maze-study", "--out", str(tmp_path / "none"), "--report", str(tmp_path / "r")]) == 2
    assert "not found" in capsys.readouterr().err


@pytest.fixture(scope="module")
def doubled(tmp_path_factory):
    """The tiny study run by a command that names one γ and one N twice (issue 50, defect 4)."""
    out = tmp_path_factory.mktemp("doubled") / "study"
    rc = main(["llm", "maze-study", "--out", str(out), "--preset", "tiny", "--gamma", "0.5,0.5",
               "--group-size", "2,2", "--no-progress"])
    return rc, out


def test_a_value_given_twice_is_one_run(doubled, capsys):
    """`--gammas 0.5,0.5` / `--group-sizes 2,2` count once, as in `catsim simulate`: one GRPO and one
    F-GRPO run, one test per k, the study's settings those of `--preset tiny` (so it resumes with or
    without the repeat)."""
    rc, out = doubled
    assert rc == 0
    results = json.loads((out / "results.json").read_text())
    assert [(r["method"], r["group_size"], r["gamma"]) for r in results["runs"]] == [("grpo", 2, 0.0), ("f-grpo", 2, 0.5)]
    assert [(t["group_size"], t["gamma"], t["k"]) for t in results["tests"]] == [(2, 0.5, 1), (2, 0.5, 2), (2, 0.5, 4)]
    assert len(results["changes"]) == 2 * 3 and len(results["summary"]) == 2
    tiny = json.loads(json.dumps(dataclasses.asdict(maze_presets.tiny())))
    assert json.loads((out / "study.json").read_text())["preset"] == results["preset"] == tiny
    capsys.readouterr()
    for argv in (["--gamma", "0.5,0.5"], ["--group-size", "2,2"], []):  # read back, not refused or rerun
        assert main(["llm", "maze-study", "--out", str(out), "--preset", "tiny", "--no-progress", *argv]) == 0
        assert len(json.loads((out / "results.json").read_text())["runs"]) == 2
    assert "Traceback" not in capsys.readouterr().err
    with pytest.raises(Exception, match="one N two seed counts"):  # the library: an N named twice, ambiguously
        dataclasses.replace(maze_presets.tiny(), plan=((2, 1), (2, 2)))


def _damaged_results(good: dict, how: str):
    bad = json.loads(json.dumps(good))
    if how == "interval":
        bad["tests"][0]["interval"] = None
    elif how == "summary":
        bad["summary"] = [{}]
    elif how == "run":
        bad["runs"] = bad["runs"][:1]
    return bad


@pytest.mark.parametrize("how", ["{}", "[]", "3", "interval", "summary", "run"])
def test_report_of_a_results_file_of_the_wrong_shape_is_one_line(how, doubled, tmp_path, capsys):
    """`--report` on a results.json that is not the study's (issue 50, defect 7): one line naming the
    file, exit 2, and no report folder left behind."""
    good = json.loads((doubled[1] / "results.json").read_text())
    study = tmp_path / "study"
    study.mkdir()
    text = how if how[0] in "{[3" else json.dumps(_damaged_results(good, how))
    (study / "results.json").write_text(text)
    capsys.readouterr()
    assert main(["llm", "maze-study", "--out", str(study), "--report", str(tmp_path / "r" / "report")]) == 2
    err = capsys.readouterr().err.strip()
    assert str(study / "results.json") in err and "not a maze-study results file" in err
    assert "\n" not in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["results.json", "study"]


def test_report_moves_in_once_made(doubled, tmp_path, capsys):
    """A good results.json: the report's files land in the folder, and no staging folder stays."""
    report = tmp_path / "a" / "report"
    assert main(["llm", "maze-study", "--out", str(doubled[1]), "--report", str(report)]) == 0
    assert sorted(p.name for p in report.iterdir()) == sorted([*FIGURES, "report.md", "results.json"])
    assert sorted(p.name for p in tmp_path.rglob("*") if p.name.startswith(".")) == []
    assert f"report: {report / 'report.md'}" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--max-runs", "1"], "--report runs nothing: --max-runs does not go with it"),
    (["--arms", "all"], "--report runs nothing: --arms does not go with it"),
    (["--trainer", "trl"], "--report runs nothing: --trainer trl does not go with it"),
    (["--log-to", "tensorboard"], "--report runs nothing: --log-to does not go with it"),
    (["--preset", "cpu"], "is the 'tiny' study, with other settings than those given (checkpoints"),
    (["--preset", "tiny", "--gamma", "1"], "is the 'tiny' study, with other settings than those given (gammas)"),
    (["--preset", "tiny"], None),
    (["--preset", "tiny", "--gamma", "0.5", "--paper-shapes"], "with other settings than those given (heads"),
])
def test_report_refuses_options_that_would_not_act(argv, message, doubled, tmp_path, capsys):
    """`--report` runs nothing and reports the study in --out as it is: an option that would run
    something, or study settings other than the study's, is one line and exit 2 (before: ignored, and
    the report of another study made as if it were theirs)."""
    report = tmp_path / "report"
    capsys.readouterr()
    rc = main(["llm", "maze-study", "--out", str(doubled[1]), "--report", str(report), *argv])
    err = capsys.readouterr().err.strip()
    if message is None:
        assert rc == 0 and (report / "report.md").is_file(), err
        return
    assert rc == 2 and message in err and "\n" not in err and "Traceback" not in err, err
    assert not report.exists()


def test_log_to_is_refused_where_nothing_would_log_to_it(tmp_path, capsys):
    """TRL's runs send nothing to --log-to sinks: asked for, it is one line before anything runs."""
    out = tmp_path / "none"
    assert main(["llm", "maze-study", "--out", str(out), "--preset", "tiny", "--trainer", "trl",
                 "--log-to", "tensorboard"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--log-to goes with catsim's RL runs" in err and "\n" not in err and not out.exists()


def test_max_runs_stops_before_the_next_seeds_warm_up(doubled, tmp_path):
    """`--max-runs R` stops after R RL runs and computes nothing more: the next seed's warm-up is
    trained with its first run, not before stopping (before: `--seeds 2 --max-runs 1` trained and
    evaluated seed 1's warm-up, then stopped)."""
    src, out = doubled[1] / "s0", tmp_path / "study" / "s0"
    shutil.copytree(src / "base", out / "base")
    shutil.copy(src / "base_eval.json", out / "base_eval.json")
    shutil.copytree(src / "grpo-N2", out / "grpo-N2")  # s0's GRPO run finished, its F-GRPO run not
    assert main(["llm", "maze-study", "--out", str(out.parent), "--preset", "tiny", "--seeds", "2", "--max-runs", "1",
                 "--no-progress"]) == 0
    assert (out / "f-grpo-N2-g0.5" / "eval.json").is_file() and not (out.parent / "s1").exists()


def test_a_report_folder_keeps_no_stale_arms_or_trl_files(tmp_path, capsys):
    """`maze-study --report DIR` on a study without arms or TRL runs removes the arms.json, trl.json
    and arms figures an earlier report left in DIR (they would sit beside the new report as if
    current), and leaves every file no report writes alone."""
    from pathlib import Path

    from catsim.experiments.maze.arms_report import FIGURES as ARM_FIGURES

    study = tmp_path / "study"
    shutil.copytree(Path(__file__).resolve().parents[1] / "figures" / "maze-study" / "cpu", study)
    report = tmp_path / "report"
    assert main(["llm", "maze-study", "--out", str(study), "--report", str(report)]) == 0
    stale = ("arms.json", "trl.json", *ARM_FIGURES)
    assert all((report / name).is_file() for name in stale)
    (report / "notes.txt").write_text("mine\n")
    (study / "arms.json").unlink()
    (study / "trl.json").unlink()
    assert main(["llm", "maze-study", "--out", str(study), "--report", str(report)]) == 0
    capsys.readouterr()
    assert [name for name in stale if (report / name).exists()] == []
    assert (report / "notes.txt").read_text() == "mine\n"
    assert all((report / f).is_file() for f in (*FIGURES, "report.md", "results.json"))
    # a report into the study folder itself never removes the study's own files
    assert main(["llm", "maze-study", "--out", str(study), "--report", str(study)]) == 0
    assert (study / "results.json").is_file() and (study / "study.json").is_file()
