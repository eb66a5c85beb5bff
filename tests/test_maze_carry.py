"""A long arm run in pieces and carried between machines (catsim.experiments.maze.carry, `catsim llm
maze-study --arms ... --stop-after`): a run stopped, committed with the published .gitignore and
continued on a fresh clone equals the uninterrupted run — evaluations, reward curve, weights; what a
piece leaves is refused in one line when part of it was not committed; the .gitignore commits the
carried arms' state and nothing else's."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from catsim.cli.main import main
from catsim.experiments.maze import carry, study
from catsim.experiments.maze import presets as maze_presets
from catsim.experiments.maze.arm_table import cpu_arms, tiny_arms

GITIGNORE = Path(__file__).resolve().parents[1] / "figures" / "maze-study" / "cpu" / ".gitignore"
CARRIED = [a for a in tiny_arms() if a.carry]
ARMS = ",".join(a.name for a in CARRIED)


def _git(*args, cwd):
    return subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd, check=False,
                          capture_output=True, text=True)


def _tiny_gitignore() -> str:
    """The published .gitignore with the tiny preset's carried arms in place of the CPU preset's."""
    kept = [line for line in GITIGNORE.read_text().splitlines() if not line.startswith("!")]
    return "\n".join(kept + [f"!/s*/{a.label()}/rl_state/" for a in CARRIED]) + "\n"


def _maze(out: Path, *extra: str, jobs: bool = True) -> int:
    """The carried arms' command: in two one-thread jobs (as the horizon runs), or here (`jobs` False)."""
    return main(["llm", "maze-study", "--out", str(out), "--preset", "tiny", "--no-progress", "--arms", ARMS,
                 *(("--jobs", "2") if jobs else ()), *extra])


def _run(d: dict) -> dict:
    return {k: v for k, v in d.items() if k not in ("rl_seconds", "provenance")}


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory):
    out = tmp_path_factory.mktemp("carry") / "study"
    study.run_study(out, maze_presets.tiny(), progress=False, say=lambda *_: None)
    return out


@pytest.fixture(scope="module")
def whole(tiny_study, tmp_path_factory):
    """The carried arms run uninterrupted, as the pieces are (two one-thread jobs)."""
    out = tmp_path_factory.mktemp("whole") / "study"
    shutil.copytree(tiny_study, out)
    assert _maze(out) == 0
    return out


def test_a_run_continued_on_a_fresh_clone_equals_the_uninterrupted_run(tiny_study, whole, tmp_path, capsys):
    repo = tmp_path / "repo"
    out = repo / "study"
    shutil.copytree(tiny_study, out)
    first, second = (out / "s0" / a.label() for a in CARRIED)
    assert _maze(out, "--stop-after", "2", "--max-runs", "1") == 0
    assert carry.state_step(first) == 2 and not second.exists()
    made = (first / carry.CURVE_FILE).stat().st_mtime_ns
    assert _maze(out, "--stop-after", "2", "--max-runs", "1") == 0  # the run at its stop is not one of the 1
    assert carry.state_step(second) == 2 and (first / carry.CURVE_FILE).stat().st_mtime_ns == made
    for a in CARRIED:
        rdir = out / "s0" / a.label()
        assert not (rdir / "eval.json").exists() and carry.state_step(rdir) == 2
        assert sorted(p.name for p in (rdir / "rl_state").iterdir() if p.name.isdigit()) == ["2"]  # one state kept
        piece = gzip.decompress((rdir / carry.PIECES_DIR / "000001-000002.jsonl.gz").read_bytes()).decode()
        assert piece == (rdir / "rl_log.jsonl").read_text()  # the log's lines, byte for byte
        assert [p["step"] for p in json.loads((rdir / carry.CURVE_FILE).read_text())["points"]] == [2]
    pending = json.loads((out / "arms.json").read_text())["pending"]
    assert {f"s0/{a.label()}" for a in CARRIED} <= set(pending)

    (out / ".gitignore").write_text(_tiny_gitignore())
    for args in (("init", "-q"), ("add", "-A"), ("commit", "-q", "-m", "piece 1")):
        assert _git(*args, cwd=repo).returncode == 0
    assert _git("clone", "-q", str(repo), str(tmp_path / "clone"), cwd=tmp_path).returncode == 0
    clone = tmp_path / "clone" / "study"
    for a in CARRIED:
        rdir = clone / "s0" / a.label()
        assert (rdir / "rl_state" / "2").is_dir()
        assert not (rdir / "rl_log.jsonl").exists() and not (rdir / "checkpoints").exists()

    capsys.readouterr()
    assert _maze(clone) == 0  # the second piece, on "another machine"
    for a in CARRIED:
        rdir, ref = clone / "s0" / a.label(), whole / "s0" / a.label()
        assert _run(json.loads((rdir / "eval.json").read_text())) == _run(json.loads((ref / "eval.json").read_text()))
        assert (rdir / "model" / "model.safetensors").read_bytes() == (ref / "model" / "model.safetensors").read_bytes()
        assert sorted(p.name for p in (rdir / carry.PIECES_DIR).iterdir()) == ["000001-000002.jsonl.gz",
                                                                               "000003-000004.jsonl.gz"]
        assert carry.state_step(rdir) == 4  # kept after the end: the horizon can be extended
        pieces = (rdir / carry.PIECES_DIR).iterdir()
        assert "".join(gzip.decompress(p.read_bytes()).decode() for p in sorted(pieces)) == \
            (rdir / "rl_log.jsonl").read_text()
        assert len(json.loads((rdir / "provenance.json").read_text())["pieces"]) == 2  # where each piece ran
    ours, theirs = (json.loads((d / "arms.json").read_text()) for d in (clone, whole))
    assert (ours["tests"], ours["claims"], ours["pending"]) == (theirs["tests"], theirs["claims"], theirs["pending"])


@pytest.fixture(scope="module")
def stopped(tiny_study, tmp_path_factory):
    """The carried arms stopped at step 2 (here, in this process)."""
    out = tmp_path_factory.mktemp("stopped") / "study"
    shutil.copytree(tiny_study, out)
    assert _maze(out, "--stop-after", "2", jobs=False) == 0
    return out


@pytest.mark.parametrize("damage, said", [
    (lambda r: shutil.rmtree(r / carry.PIECES_DIR) or (r / "rl_log.jsonl").unlink(),
     "training state is at step 2 but its log reaches step 0"),
    (lambda r: (r / carry.PIECES_DIR / "000001-000002.jsonl.gz").rename(r / carry.PIECES_DIR / "000002-000002.jsonl.gz"),
     "do not follow on from step 0"),
    (lambda r: [(r / carry.PIECES_DIR / "000001-000002.jsonl.gz").write_bytes(b"not gzip"),
                (r / "rl_log.jsonl").unlink()], "unreadable log piece"),
    (lambda r: (r / carry.CURVE_FILE).unlink() or shutil.rmtree(r / "checkpoints"), "no snapshot and no evaluation"),
])
def test_a_piece_not_wholly_committed_is_refused_in_one_line(stopped, tmp_path, capsys, damage, said):
    out = tmp_path / "study"
    shutil.copytree(stopped, out)
    damage(out / "s0" / CARRIED[0].label())
    capsys.readouterr()
    assert _maze(out, jobs=False) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert said in err[-1] and "Traceback" not in "".join(err), err


def test_a_damaged_piece_is_written_again_from_the_log_on_disk(stopped, tmp_path, capsys):
    out = tmp_path / "study"
    shutil.copytree(stopped, out)
    rdir = out / "s0" / CARRIED[0].label()
    piece = rdir / carry.PIECES_DIR / "000001-000002.jsonl.gz"
    good = piece.read_bytes()
    piece.write_bytes(good[: len(good) // 2])  # cut by a kill, or a bad copy: the log still has its lines
    capsys.readouterr()
    assert _maze(out, jobs=False) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if "written again" in line]
    assert len(said) == 1 and str(piece) in said[0]
    assert piece.read_bytes() == good and (rdir / "eval.json").is_file()


def test_a_stopped_piece_leaves_its_log_piece(stopped, tmp_path, monkeypatch):
    """Ctrl-C or SIGTERM (a session's end) stops a run with its state saved: the log piece up to that
    state is written, so the piece can be committed as it is."""
    import catsim.llm.rl as rl

    real = rl.run_rl

    def stopped_at_3(*args, **kw):
        real(*args, **{**kw, "stop_after": 3})
        raise KeyboardInterrupt

    monkeypatch.setattr(rl, "run_rl", stopped_at_3)
    out = tmp_path / "study"
    shutil.copytree(stopped, out)
    assert _maze(out, jobs=False) == 130  # "interrupted; rerun the same command to resume"
    rdir = out / "s0" / CARRIED[0].label()
    assert carry.state_step(rdir) == 3
    assert sorted(p.name for p in (rdir / carry.PIECES_DIR).iterdir()) == ["000001-000002.jsonl.gz",
                                                                           "000003-000003.jsonl.gz"]


@pytest.mark.parametrize("argv, said", [
    (["--stop-after", "0"], "--stop-after"),
    (["--stop-after", "3"], "--stop-after goes with --arms"),
    (["--stop-after", "3", "--report", "r"], "--stop-after does not go with it"),
])
def test_stop_after_refusals(tiny_study, capsys, argv, said):
    before = sorted(p.stat().st_mtime_ns for p in tiny_study.rglob("*"))
    try:
        code = main(["llm", "maze-study", "--out", str(tiny_study), "--preset", "tiny", *argv])
    except SystemExit as stop:  # argparse's own refusal of a value
        code = stop.code
    assert code == 2
    assert said in capsys.readouterr().err
    assert sorted(p.stat().st_mtime_ns for p in tiny_study.rglob("*")) == before  # nothing touched


def test_the_gitignore_commits_the_carried_arms_state_and_no_other():
    lines = [line for line in GITIGNORE.read_text().splitlines() if line.startswith("!")]
    assert lines == [f"!/s*/{a.label()}/rl_state/" for a in cpu_arms() if a.carry]
    assert {a.name for a in cpu_arms() if a.carry} == {"grpo-20000", "f-grpo-g0.5-20000"}


def test_the_gitignore_keeps_what_a_piece_needs(tmp_path):
    root = tmp_path / "study"
    root.mkdir()
    shutil.copy(GITIGNORE, root / ".gitignore")
    assert _git("init", "-q", cwd=root).returncode == 0
    carried = next(a for a in cpu_arms() if a.carry).label()
    other = next(a for a in cpu_arms() if not a.carry and not a.study_run).label()
    kept = [f"s0/{carried}/rl_state/3000/state/manifest.ocdbt", f"s0/{carried}/rl_log_pieces/000001-003000.jsonl.gz",
            f"s0/{carried}/curve.json", f"s2/{carried}/rl_config.json", f"s1/{carried}/provenance.json"]
    dropped = [f"s0/{carried}/rl_log.jsonl", f"s0/{carried}/checkpoints/step_001000/model.safetensors",
               f"s0/{carried}/model/model.safetensors", f"s0/{other}/rl_state/2000/state/manifest.ocdbt"]
    ignored = _git("check-ignore", "--no-index", *kept, *dropped, cwd=root).stdout.split()
    assert sorted(ignored) == sorted(dropped)
