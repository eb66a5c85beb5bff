"""The Maze study as it lives in git: a study directory committed with the published `.gitignore`
(figures/maze-study/cpu/.gitignore) resumes on a fresh clone — finished runs read back, missing ones
run, the same numbers as an uninterrupted study — and a damaged piece (truncated, empty, other
settings) is recomputed with a one-line notice, not a traceback; a damaged warm-up is refused."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from catsim.cli.main import main
from catsim.experiments.maze import presets as maze_presets
from catsim.experiments.maze import study as study_module
from catsim.experiments.maze.study import run_study

GITIGNORE = Path(__file__).resolve().parents[1] / "figures" / "maze-study" / "cpu" / ".gitignore"
QUIET = {"progress": False, "say": lambda *_: None}


def _numbers(results: dict) -> str:
    """Everything but wall times and provenance, as canonical JSON."""
    runs = [{k: v for k, v in r.items() if k != "rl_seconds"} for r in results["runs"]]
    keep = {"bases": results["bases"], "runs": runs, "summary": results["summary"], "tests": results["tests"],
            "changes": results["changes"]}
    return json.dumps(keep, sort_keys=True)


def _git(*args, cwd):
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd, check=True,
                   capture_output=True)


def test_committed_study_resumes_on_a_fresh_clone(tmp_path):
    sp = maze_presets.tiny()
    repo = tmp_path / "repo"
    study = repo / "study"
    assert run_study(study, sp, max_runs=1, **QUIET) is None  # one piece done
    shutil.copy(GITIGNORE, study / ".gitignore")
    _git("init", "-q", cwd=repo)
    _git("add", "-A", cwd=repo)
    _git("commit", "-q", "-m", "piece 1", cwd=repo)
    _git("clone", "-q", str(repo), str(tmp_path / "clone"), cwd=tmp_path)
    clone = tmp_path / "clone" / "study"
    committed = {p.relative_to(clone).as_posix() for p in clone.rglob("*") if p.is_file()}
    # results and the warm-up model are in git; states, snapshots and final RL models are not
    assert {"study.json", "s0/base_eval.json", "s0/grpo-N2/eval.json", "s0/base/model.safetensors",
            "s0/base/config.json"} <= committed
    assert not any(part in p for p in committed for part in ("rl_state", "train_state", "checkpoints/",
                                                             "/model/", "rl_log.jsonl", ".catsim.lock"))
    finished = (clone / "s0" / "grpo-N2" / "eval.json").read_text()
    resumed = run_study(clone, sp, **QUIET)
    assert (clone / "s0" / "grpo-N2" / "eval.json").read_text() == finished  # read back, not rerun
    whole = run_study(study, sp, **QUIET)  # the original directory, uninterrupted from its state
    assert _numbers(resumed) == _numbers(whole)


def test_damaged_pieces_are_recomputed_with_one_line(tmp_path, capsys):
    out = tmp_path / "study"
    argv = ["llm", "maze-study", "--out", str(out), "--preset", "tiny", "--no-progress"]
    assert main(argv) == 0
    first = json.loads((out / "results.json").read_text())
    capsys.readouterr()
    run_eval = out / "s0" / "grpo-N2" / "eval.json"
    base_eval = out / "s0" / "base_eval.json"
    good_run, good_base = run_eval.read_text(), base_eval.read_text()
    other = json.loads(good_run)
    other["final"]["n"] = 4  # evaluated with another n
    odd_keys = json.loads(good_run)
    odd_keys["final"]["pass_at_k"]["x"] = 0.5  # a k that is not a number
    damages = [(run_eval, good_run[: len(good_run) // 2], "unreadable"), (base_eval, "", "empty"),
               (run_eval, json.dumps(other), "n = 4"), (base_eval, "[1, 2]", "not a JSON object"),
               (run_eval, json.dumps(odd_keys), "pass@k for k")]
    for path, text, why in damages:
        path.write_text(text)
        assert main(argv) == 0
        printed = capsys.readouterr()
        notices = [line for line in printed.out.splitlines() if "recomputing it" in line]
        assert len(notices) == 1 and str(path) in notices[0] and why in notices[0], printed.out
        assert "Traceback" not in printed.err
        assert json.loads(path.read_text()) == json.loads(good_run if path == run_eval else good_base)
        assert _numbers(json.loads((out / "results.json").read_text())) == _numbers(first)


def test_damaged_warm_up_is_refused_in_one_line(tmp_path, capsys):
    sp = maze_presets.tiny()
    out = tmp_path / "study"
    run_study(out, sp, max_runs=1, **QUIET)
    weights = out / "s0" / "base" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    capsys.readouterr()
    assert main(["llm", "maze-study", "--out", str(out), "--preset", "tiny", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "warm-up model not usable" in err and "\n" not in err and "Traceback" not in err
    assert f"move {out / 's0'} aside" in err and "delete" not in err  # the advice keeps the seed's results


@pytest.mark.parametrize("text", ["", "{", '{"preset": 3}'])
def test_damaged_study_file_is_rewritten(tmp_path, text):
    out = tmp_path / "study"
    out.mkdir()
    (out / "study.json").write_text(text)
    said = []
    run_study(out, maze_presets.tiny(), max_runs=1, progress=False, say=said.append)
    assert json.loads((out / "study.json").read_text())["preset"]["name"] == "tiny"
    assert any("study.json" in s and "recomputing it" in s for s in said)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished tiny study (copy it before changing it)."""
    out = tmp_path_factory.mktemp("finished") / "study"
    run_study(out, maze_presets.tiny(), **QUIET)
    return out


def _files(root: Path) -> dict:
    """Every path under `root` with its size and modification time (a write changes one)."""
    return {p.relative_to(root).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def _tiny(out: Path, *argv) -> list[str]:
    return ["llm", "maze-study", "--out", str(out), "--preset", "tiny", "--no-progress", *argv]


@pytest.mark.parametrize("keep_results", [True, False])
def test_another_preset_is_refused_before_anything_is_written(finished, keep_results, tmp_path, capsys):
    """Issue 50, defect 5: with study.json gone, `--preset cpu` on a tiny study is refused in one line
    (from its results.json, or else its warm-up's settings), writes nothing — `--preset tiny` then
    still resumes it — and advises no deletion."""
    out = tmp_path / "study"
    shutil.copytree(finished, out)
    (out / "study.json").unlink()
    if not keep_results:
        (out / "results.json").unlink()
    before = _files(out)
    capsys.readouterr()
    assert main(["llm", "maze-study", "--out", str(out), "--preset", "cpu", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "study.json is missing" in err and "\n" not in err and "Traceback" not in err
    assert ("'tiny'" if keep_results else "(those of --preset tiny)") in err
    assert "delete" not in err and "rerun with the options it was made with" in err
    assert _files(out) == before
    assert main(_tiny(out)) == 0
    assert json.loads((out / "study.json").read_text())["preset"]["name"] == "tiny"
    assert (out / "s0" / "grpo-N2" / "eval.json").stat().st_mtime_ns == before["s0/grpo-N2/eval.json"][1]


def test_a_moved_study_recomputes_a_damaged_run(finished, tmp_path, capsys):
    """Issue 50, defect 6: the RL runs are fingerprinted by their warm-up's content, not its path, so
    a study copied elsewhere resumes a run whose eval.json is damaged from its saved state (no step is
    rerun) to the same numbers."""
    out = tmp_path / "elsewhere" / "study"
    shutil.copytree(finished, out)
    run = out / "s0" / "grpo-N2"
    log = (run / "rl_log.jsonl").read_text()
    (run / "eval.json").write_text("{")
    capsys.readouterr()
    assert main(_tiny(out)) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert (run / "rl_log.jsonl").read_text() == log  # resumed at its last step: nothing retrained
    now, then = (json.loads((d / "results.json").read_text()) for d in (out, finished))
    assert _numbers(now) == _numbers(then)


def test_a_state_fingerprinted_by_path_resumes_in_place_and_is_named_when_moved(finished, tmp_path, capsys):
    """A run state saved by the earlier catsim (base fingerprinted by its path) still resumes where it
    was made; moved, it is refused in one line that names only what exists — deleting the state, which
    then reruns the run to the same numbers."""
    from catsim.llm.rl import run_rl

    sp = maze_presets.tiny()
    out = tmp_path / "study"
    shutil.copytree(finished, out)
    run = out / "s0" / "grpo-N2"
    task = study_module.study_task(sp)
    cfg = study_module.rl_config(sp, "grpo", 2, 0.0, 0, task.max_answer_chars + 1)
    run_rl(out / "s0" / "base", run, cfg, overwrite=True, progress=False)  # no base_id: the path
    (run / "eval.json").write_text("{")
    capsys.readouterr()
    assert main(_tiny(out)) == 0  # in place: the old fingerprint is accepted
    moved = tmp_path / "moved"
    out.rename(moved)
    run = moved / "s0" / "grpo-N2"
    (run / "eval.json").write_text("{")
    before = _files(moved)
    capsys.readouterr()
    assert main(_tiny(moved)) == 2
    err = capsys.readouterr().err.strip()
    assert str(run / "rl_state") in err and "--overwrite" not in err and "\n" not in err and "Traceback" not in err
    assert _files(moved) == before
    shutil.rmtree(run / "rl_state")  # the advice
    assert main(_tiny(moved)) == 0
    assert _numbers(json.loads((moved / "results.json").read_text())) == \
        _numbers(json.loads((finished / "results.json").read_text()))
