"""The JSONL step log of a training run (`rl_log.jsonl`, `sft_log.jsonl`): one record per step.

A record is one JSON object per line with an integer "step" (1 for the first step). The log is
written a line at a time (`catsim.tracking.MetricsWriter`), so a kill can cut its last line; a
damaged line anywhere else is damage from outside. On resume the log is cut back to the saved step
(`truncate_log`): every complete record up to it is kept, a cut last line is dropped with a note,
and a damaged line before the last is refused naming the file and the line, since dropping it
would leave a hole in the run's history that nothing shows.
"""

from __future__ import annotations

import json
from pathlib import Path

from catsim.errors import CatsimError
from catsim.files import write_text


def _record(line: str) -> dict | None:
    """A log line's step record, or None when the line is not one (cut, garbage)."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    step = record.get("step") if isinstance(record, dict) else None
    return record if isinstance(step, int) and not isinstance(step, bool) else None


def parse_log(path: Path) -> tuple[list[tuple[str, dict]], int | None]:
    """(line, record) of each step record of a JSONL log, and the number of its last line when that
    one is no record (cut by a kill while it was written), else None. A damaged line before the
    last is a CatsimError naming the file and the line: the records after it would be kept without
    it, a hole in the run's history that nothing would show."""
    lines = Path(path).read_bytes().decode("utf-8", errors="replace").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    kept = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        record = _record(line)
        if record is None:
            if number == len(lines):
                return kept, number
            raise CatsimError(f"{path}, line {number}: damaged (not a JSON step record); delete that line to "
                              "go on without its record, or rerun with --overwrite to start afresh")
        kept.append((line, record))
    return kept, None


def _ranges(steps: list[int]) -> str:
    """[1, 2, 3, 7] -> "1-3, 7"."""
    runs: list[list[int]] = []
    for s in steps:
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def truncate_log(path: Path, step: int) -> str | None:
    """Cut a JSONL step log back to the lines of steps <= `step` (the later ones belong to a state
    that was never saved), every complete record kept. Returns a one-line note when the log was
    repaired (a last line cut by a kill, dropped) or lacks records of saved steps, else None; a
    damaged line before the last is refused (`parse_log`)."""
    if not path.exists():
        return None
    lines, cut = parse_log(path)
    kept = [(line, r) for line, r in lines if r["step"] <= step]
    write_text(path, "".join(line + "\n" for line, _ in kept))
    have = {r["step"] for _, r in kept}
    missing = [s for s in range(1, step + 1) if s not in have]
    notes = [f"line {cut} was cut mid-record (a kill while it was written) and is removed"] if cut else []
    if missing:
        notes.append(f"it has no record of step(s) {_ranges(missing)} of the {step} saved (the training state "
                     "is intact; those steps' metrics are lost)")
    return f"{path}: {'; '.join(notes)}" if notes else None


def read_log(path: Path) -> list[dict]:
    """The records of a JSONL step log. A last line that is no record (being written, or cut by a
    kill) is left out; a damaged line before it is a CatsimError naming the file and the line."""
    if not Path(path).is_file():
        raise CatsimError(f"{Path(path).parent}: no {Path(path).name}")
    return [record for _, record in parse_log(Path(path))[0]]
