"""Where the Maze study's runs were computed: the set-ups (commit, CPU, ISA pin, threads) of its runs.

A float32 RL run is bit-for-bit reproducible only on the set-up that made it (`catsim.provenance`):
rounding differs between CPU kinds, XLA's ISA choices and thread counts, and RL amplifies it (the
same run on an Intel Xeon and an AMD EPYC diverged at step 24 and ended 3 points of pass@1 apart).
Every run records one `provenance.collect()` per piece of it (its eval.json's "provenance", copied
from the run's provenance.json); runs made before runs recorded it have none.

    lines = set_up_lines(results, arms, trl)      # the report's section
    note = recompute_note(out, "s0/grpo-N8", here)  # one line when a run is computed on another set-up
"""

from __future__ import annotations

import json
from pathlib import Path

from catsim import provenance


def set_up_key(record: dict) -> tuple:
    """What makes two pieces' set-ups the same, for grouping: the fields that decide the float
    results (`provenance.DETERMINING`, which `provenance.differences` compares)."""
    return tuple(json.dumps(record.get(k), sort_keys=True) for k in provenance.DETERMINING)


def _runs(results: dict, arms: dict | None, trl: dict | None) -> list[dict]:
    """Every distinct run of the report (an arm that is a study run is counted once)."""
    seen, out = set(), []
    for r in [*results.get("runs", []), *((arms or {}).get("runs", [])), *((trl or {}).get("runs", []))]:
        name = (r.get("seed"), r.get("label"), r.get("trainer"))
        if name not in seen:
            seen.add(name)
            out.append(r)
    return out


def set_up_lines(results: dict, arms: dict | None = None, trl: dict | None = None) -> list[str]:
    """The report's lines on where its runs were computed: each set-up with its number of runs (a
    run resumed on another set-up counts under each), and the runs that recorded none."""
    runs = _runs(results, arms, trl)
    groups: dict[tuple, dict] = {}
    unrecorded = 0
    for r in runs:
        pieces = [p for p in r.get("provenance") or [] if isinstance(p, dict)]
        if not pieces:
            unrecorded += 1
            continue
        for key in dict.fromkeys(set_up_key(p) for p in pieces):
            rec = next(p for p in pieces if set_up_key(p) == key)
            g = groups.setdefault(key, {"record": rec, "runs": 0, "mixed": 0})
            g["runs"] += 1
            g["mixed"] += len({set_up_key(p) for p in pieces}) > 1
    lines = [f"{len(runs)} runs (warm-ups not counted)."]
    for g in sorted(groups.values(), key=lambda g: -g["runs"]):
        mixed = f" ({g['mixed']} of them resumed across set-ups)" if g["mixed"] else ""
        lines.append(f"- {g['runs']} computed on {provenance.describe(g['record'])}{mixed}")
    if unrecorded:
        lines.append(f"- {unrecorded} made before runs recorded their set-up: their commit and CPU are not known")
    if len(groups) + bool(unrecorded) > 1:
        lines += ["", "Runs from different set-ups are equally valid samples of one experiment, but a rerun is "
                  "bit-identical only on the set-up that made it (docs/reproducibility.md)."]
    return lines


def recompute_note(out: Path, label: str, here: dict) -> str | None:
    """One line when the run `label` (s<seed>/<run>), about to be computed (or resumed) here, will not
    be bit-identical to a run made where the study's other runs were: the set-ups of the finished runs
    in `out` and of the run's own earlier pieces that differ from `here` (or recorded none); None when
    all were made on this set-up."""
    others: dict[tuple, dict] = {}
    unrecorded = 0
    for path in sorted(Path(out).glob("s*/*/eval.json")):
        if f"{path.parent.parent.name}/{path.parent.name}" == label:
            continue
        try:
            pieces = json.loads(path.read_text()).get("provenance") or []
        except (OSError, UnicodeDecodeError, ValueError, AttributeError):
            continue  # a damaged piece: its own recompute says so
        if not pieces:
            unrecorded += 1
        for p in pieces:
            if isinstance(p, dict) and provenance.differences(p, here):
                others.setdefault(set_up_key(p), p)
    own = [p for p in provenance.run_pieces(Path(out) / label) if provenance.differences(p, here)]
    for p in own:  # an interrupted earlier attempt at this run, made elsewhere: the resume mixes set-ups
        others.setdefault(set_up_key(p), p)
    if not others and not unrecorded:
        return None
    parts = [provenance.describe(p) for p in list(others.values())[:2]]
    if len(others) > 2:
        parts.append(f"{len(others) - 2} more")
    if unrecorded:
        parts.append(f"{unrecorded} runs that recorded none")
    return (f"{label} is computed on {provenance.describe(here)}; finished runs here come from "
            f"{'; '.join(parts)}: it will not be bit-identical to a run made there (docs/reproducibility.md)")
