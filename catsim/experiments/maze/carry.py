"""A long run carried from machine to machine: what a piece of it leaves in its run directory so that
a fresh clone of the study folder on another machine continues it (`catsim llm maze-study --arms
... --stop-after STEPS`, the arms with `carry`: App. K's 20,000-step horizon).

A run's step log (`rl_log.jsonl`, about 0.65 MB per 1,000 steps) and its snapshots (0.5 MB each)
are too large to commit, so a carried run keeps, beside its training state (`rl_state/<step>/`,
the newest only: model and Adam moments, 1.5 MB on the CPU preset):

    rl_log_pieces/<first>-<last>.jsonl.gz   the log's lines of each piece, byte for byte, written
                                            once when the piece ends (gzip without a time stamp)
    curve.json                              the evaluations of its snapshots (`pass@k` against step),
                                            each made when its piece ended, with the run's fingerprint

On another machine, `unpack` rebuilds `rl_log.jsonl` from the pieces before the run resumes, and the
run's end takes the curve points it cannot recompute (their snapshots are not there) from
curve.json: a continued run's eval.json, state and model equal an uninterrupted run's
(tests/test_maze_carry.py). A piece missing, a gap between pieces or a state ahead of its log is
refused in one line: the run's history would have a hole.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from catsim.errors import CatsimError
from catsim.experiments.agreement import read_json
from catsim.files import replacing, write_text
from catsim.llm.steplog import parse_log

PIECES_DIR = "rl_log_pieces"
CURVE_FILE = "curve.json"
_PIECE = re.compile(r"^(\d{6,})-(\d{6,})\.jsonl\.gz$")


def _pieces(rdir: Path) -> list[tuple[int, int, Path]]:
    """(first step, last step, file) of each log piece, in order; a gap or an overlap is refused."""
    folder = rdir / PIECES_DIR
    found = sorted((int(m[1]), int(m[2]), p) for p in folder.glob("*.jsonl.gz") if (m := _PIECE.match(p.name))) \
        if folder.is_dir() else []
    covered = 0
    for first, last, path in found:
        if first != covered + 1 or last < first:
            raise CatsimError(f"{path}: the log pieces of {rdir} do not follow on from step {covered} (a piece is "
                              "missing or two overlap); restore the missing piece from the study's history, or "
                              "rerun the run with --overwrite")
        covered = last
    return found


def _lines(path: Path) -> list[str]:
    try:
        text = gzip.decompress(path.read_bytes()).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as err:
        raise CatsimError(f"{path}: unreadable log piece ({type(err).__name__}: {err}); restore it from the "
                          "study's history") from None
    return text.splitlines()


def _log(rdir: Path) -> Path:
    """The run's step log (`catsim.llm.rl`'s name, imported when used: that package loads JAX)."""
    from catsim.llm.rl import LOG_FILE

    return rdir / LOG_FILE


def state_step(rdir: Path) -> int:
    """The step of the run's newest saved training state (0 when none)."""
    from catsim.llm.rl import STATE_FILE

    folder = rdir / STATE_FILE
    steps = [int(p.name) for p in folder.iterdir() if p.name.isdigit()] if folder.is_dir() else []
    return max(steps, default=0)


def at_stop(rdir: Path, stop_after: int | None) -> bool:
    """The run has its state saved at `stop_after` steps or beyond: nothing to do in a call that stops
    there (`--stop-after`), and no run of its `--max-runs`."""
    return stop_after is not None and state_step(rdir) >= stop_after


def _log_last(rdir: Path) -> int:
    path = _log(rdir)
    if not path.is_file():
        return 0
    records = [r for _, r in parse_log(path)[0]]
    return records[-1]["step"] if records else 0


def unpack(rdir: Path, say=print) -> None:
    """Before a carried run resumes: rebuild rl_log.jsonl from its log pieces when they reach further
    than the log on disk (a fresh clone has none), and refuse a saved state ahead of its log."""
    pieces = _pieces(rdir)
    covered = pieces[-1][1] if pieces else 0
    if covered > _log_last(rdir):
        lines = [line for *_, path in pieces for line in _lines(path)]
        write_text(_log(rdir), "".join(line + "\n" for line in lines))
        say(f"{rdir}: rl_log.jsonl rebuilt from {len(pieces)} committed log piece(s), steps 1-{covered}")
    state = state_step(rdir)
    have = max(covered, _log_last(rdir))
    if state > have:
        raise CatsimError(f"{rdir}: its training state is at step {state} but its log reaches step {have}: the log "
                          f"pieces of steps {have + 1}-{state} ({PIECES_DIR}/) were not committed with the state; "
                          "commit them, or rerun the run with --overwrite")


def _write_piece(path: Path, lines: list[str]) -> Path:
    with replacing(path) as tmp:
        tmp.write_bytes(gzip.compress("".join(line + "\n" for line in lines).encode("utf-8"), mtime=0))
    return path


def pack(rdir: Path, step: int, say=print) -> Path | None:
    """After a piece of a carried run ends with its state saved at `step`: write the log's lines of
    the steps since the last piece as a new piece (None when there are none). An earlier piece that
    is unreadable or says other than the log is written again from the log, with a line to `say`."""
    pieces = _pieces(rdir)
    path = _log(rdir)
    log = {r["step"]: line for line, r in parse_log(path)[0]} if path.is_file() else {}
    for first, last, piece in pieces:
        try:
            good = _lines(piece) == [log.get(s) for s in range(first, last + 1)]
        except CatsimError:
            good = False
        if not good and all(s in log for s in range(first, last + 1)):
            _write_piece(piece, [log[s] for s in range(first, last + 1)])
            say(f"{piece}: unreadable or not the log's lines; written again from {path.name}")
    covered = pieces[-1][1] if pieces else 0
    if step <= covered:
        return None
    if any(s not in log for s in range(covered + 1, step + 1)):
        raise CatsimError(f"{path}: it lacks records of steps {covered + 1}-{step}, so the piece cannot "
                          "be committed; rerun the run with --overwrite")
    return _write_piece(rdir / PIECES_DIR / f"{covered + 1:06d}-{step:06d}.jsonl.gz",
                        [log[s] for s in range(covered + 1, step + 1)])


def read_curve(rdir: Path, fingerprint: str, say=print) -> dict[int, dict]:
    """{step: curve point} of the run's curve.json (empty when none, or when it holds another run's
    points: a line to `say`, and they are recomputed where their snapshots are)."""
    path = rdir / CURVE_FILE
    if not path.is_file():
        return {}
    d = read_json(path)
    points = d.get("points") if isinstance(d, dict) else None
    if not isinstance(points, list) or not all(isinstance(p, dict) and isinstance(p.get("step"), int)
                                               and isinstance(p.get("pass_at_k"), dict) for p in points):
        raise CatsimError(f"{path}: not a curve file; restore it from the study's history")
    if d.get("fingerprint") != fingerprint:
        say(f"{path}: the evaluations of another run's snapshots; recomputing them")
        return {}
    return {p["step"]: p for p in points}


def write_curve(rdir: Path, fingerprint: str, points: dict[int, dict]) -> Path:
    """curve.json: the run's snapshot evaluations so far, by step."""
    return write_text(rdir / CURVE_FILE, json.dumps({"fingerprint": fingerprint,
                                                     "points": [points[s] for s in sorted(points)]}, indent=1) + "\n")
