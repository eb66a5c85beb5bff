"""The Maze study's summary files — results.json, arms.json, trl.json — and the runs they summarise.

A summary file is rebuilt from every run of its plan on disk, never from only the runs a call
touched, and is written only when what it says changes (`write_summary`): a call that trains nothing
leaves every summary byte for byte as it was, its time and provenance included (they would name a
call that computed none of its numbers). `check` refuses a summary that says something else than a
rebuild from its runs (`catsim.experiments.maze.check`, for `--report`).

    write_summary(out / "arms.json", result)
    check(out / "arms.json", stored, rebuilt, "catsim llm maze-study ... --max-runs 0")
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from catsim.errors import CatsimError
from catsim.files import write_text

CALL_FIELDS = ("seconds_this_call", "provenance")  # what the writing call adds: not a result of the runs
SUBSAMPLED = ("delta_mean", "interval", "p_value")  # a paired test's fields that only its draws give


def _results_part(d: dict) -> dict:
    return {k: v for k, v in d.items() if k not in CALL_FIELDS}


def write_summary(path: Path, data: dict) -> dict:
    """Write the summary `data` to `path` unless the file already says the same apart from
    `CALL_FIELDS`; returns what the file holds."""
    try:
        old = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        old = None
    if isinstance(old, dict) and _results_part(old) == _results_part(json.loads(json.dumps(data, default=str))):
        return old
    write_text(path, json.dumps(data, indent=1, default=str) + "\n")
    return data


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def subsampled_ok(t) -> bool:
    """Whether `t` is a stored test whose `SUBSAMPLED` fields can stand (finite, p in [0, 1]), for
    `stats.paired(stored=...)`."""
    return (isinstance(t, dict) and _finite(t.get("delta_mean")) and _finite(t.get("p_value"))
            and 0 <= t["p_value"] <= 1 and isinstance(t.get("interval"), list) and len(t["interval"]) == 2
            and all(map(_finite, t["interval"])))


def stored_finder(stored, **match):
    """k → the test among `stored` (a summary file's tests, or None: then None) whose fields are
    `match`, for `stats.paired(stored=...)`."""
    if stored is None:
        return None
    found = {t.get("k"): t for t in stored if isinstance(t, dict) and all(t.get(f) == v for f, v in match.items())}
    return found.get


def difference(have, want, where: str = "") -> tuple[str, object, object] | None:
    """The first place where `have` differs from `want` (JSON values): (its path, e.g.
    `summary[2].pass_at_k.1`, the value in `have`, the value in `want`), or None."""
    if isinstance(have, dict) and isinstance(want, dict):
        for k in [*want, *(k for k in have if k not in want)]:
            path = f"{where}.{k}" if where else str(k)
            if k not in have or k not in want:
                return path, have.get(k, "missing"), want.get(k, "missing")
            found = difference(have[k], want[k], path)
            if found:
                return found
        return None
    if isinstance(have, list) and isinstance(want, list):
        for i, (a, b) in enumerate(zip(have, want)):
            found = difference(a, b, f"{where}[{i}]")
            if found:
                return found
        if len(have) != len(want):
            return f"{where} (length)", len(have), len(want)
        return None
    if have != want or type(have) is not type(want) and not {type(have), type(want)} <= {int, float}:
        return where, have, want
    return None


def _short(x) -> str:
    text = json.dumps(x, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def check(path: Path, stored: dict, rebuilt: dict, rebuild: str) -> None:
    """Refuse (CatsimError, one line) a summary file `stored` (read from `path`) that does not say
    what its runs say (`rebuilt`, made from them)."""
    found = difference(_results_part(stored), _results_part(json.loads(json.dumps(rebuilt, default=str))))
    if found:
        where, have, want = found
        i = where.removeprefix("runs[").split("]")[0]
        run = stored["runs"][int(i)] if where.startswith("runs[") and i.isdigit() else None
        if isinstance(run, dict) and "label" in run:  # which run's eval.json it is
            where = where.replace(f"runs[{i}]", f"runs[{i}] (s{run.get('seed')}/{run['label']})", 1)
        raise CatsimError(f"{path}: {where} is {_short(have)}, but the runs on disk give {_short(want)}: it does "
                          f"not summarise them; rebuild it with `{rebuild}` (trains nothing)")
