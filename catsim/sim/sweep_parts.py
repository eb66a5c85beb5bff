"""A sweep split into parts (job arrays, `jax.distributed` processes) and the checks of its
cached cells, for `catsim.sim.sweep.sweep`.

* `parse_part("1/4")` -> (1, 4); `check_part((I, P))` validates a library argument.
* `cell_owners(configs, P)`: which part computes each cell: a deterministic function of the grid
  alone (every part, and a resumed part, computes the same answer), balanced by an estimated
  cost (longest cell first onto the least loaded part; cells of one compiled program together
  when that costs nothing).
* `claim_manifest(out, settings)`: `<out>/sweep.json` records the settings of a sweep run in parts;
  a part with other settings is refused (CatsimError), before any work.
* `cell_problem(results, ...)`: why a cached cell cannot be used (None: it can);
  `other_settings(results, ...)`: the settings a cached cell of this cell was computed with instead
  (a sweep refuses to overwrite it).
* `other_cells(cells_dir, ...)`: the finished cells on disk besides a sweep's own grid (its results
  and table hold them too), refusing one that one results array cannot hold with the sweep's cells.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import numpy as np

from catsim.errors import CatsimError
from catsim.sim import engine
from catsim.sim.config import SimConfig
from catsim.sim.metrics import ALL_METRICS
from catsim.sim.results import SimResults

MANIFEST = "sweep.json"


def parse_part(text: str) -> tuple[int, int]:
    """"I/P" -> (I, P) with 0 <= I < P (CatsimError otherwise)."""
    index, sep, count = str(text).partition("/")
    if not sep or not index.strip().isdigit() or not count.strip().isdigit():
        raise CatsimError(f"--part must be I/P with 0 <= I < P (e.g. 0/4), got {text!r}")
    return check_part((int(index), int(count)))


def check_part(part) -> tuple[int, int]:
    """Validate a (I, P) pair: whole numbers, P >= 1, 0 <= I < P."""
    try:
        index, count = (int(v) for v in part)
    except (TypeError, ValueError):
        raise CatsimError(f"part must be a pair (I, P), got {part!r}") from None
    if count < 1 or not 0 <= index < count:
        raise CatsimError(f"part must be (I, P) with 0 <= I < P, got ({index}, {count})")
    return index, count


def cell_cost(cfg: SimConfig) -> float:
    """Estimated relative run time of a cell: ~1 up to N = 64, growing like √N beyond (the full
    Fig. 2 sweep's cells took 15–17 s at N = 4…64, 52 s at 1024, 107 s at 32768, 232 s at 131072
    on one 2-core machine, docs/simulator.md). Only the ranking matters."""
    return 1.0 + math.sqrt(cfg.group_size) / 30.0


def _program(cfg: SimConfig, sizes) -> tuple:
    shared = engine.shares_program(cfg, sizes)
    return cfg.method_label, engine.program_group_size(cfg) if shared else cfg.group_size


def cell_owners(configs: list[SimConfig], parts: int) -> list[int]:
    """The part (0 … parts−1) that computes each cell of `configs` (a sweep's whole grid, in grid
    order): `catsim.jobs.owners` of the cells' estimated costs (`cell_cost`), cells of one compiled
    program together when that costs nothing."""
    from catsim.jobs import owners

    sizes = [c.group_size for c in configs]
    return owners([cell_cost(c) for c in configs], parts, [_program(c, sizes) for c in configs])


def settings_signature(settings: dict) -> str:
    text = json.dumps(settings, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _flat(value, prefix=""):
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): value}


def _differences(ours: dict, theirs: dict, limit: int = 3) -> str:
    a, b = _flat(ours), _flat(theirs)
    keys = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    text = "; ".join(f"{k} = {a.get(k)!r} here, {b.get(k)!r} there" for k in keys[:limit])
    return text + (f"; and {len(keys) - limit} more" if len(keys) > limit else "")


def read_manifest(out: Path) -> dict | None:
    """The settings recorded in `<out>/sweep.json` (None when there is none; CatsimError when it
    cannot be read)."""
    path = Path(out) / MANIFEST
    if not path.exists():
        return None
    try:
        recorded = json.loads(path.read_text())
        return {"signature": str(recorded["signature"]), "settings": dict(recorded["settings"])}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CatsimError(f"cannot read {path}: {err}; remove it to start the sweep afresh") from None


def check_manifest(out: Path, settings: dict) -> bool:
    """CatsimError when `<out>/sweep.json` records other settings; True when it records these,
    False when there is none."""
    recorded = read_manifest(out)
    if recorded is None:
        return False
    if recorded["signature"] != settings_signature(settings):
        raise CatsimError(
            f"{Path(out)} holds a sweep run in parts with other settings "
            f"({_differences(settings, recorded['settings'])}): give every part the same "
            f"settings, or use another --out")
    return True


def claim_manifest(out: Path, settings: dict) -> None:
    """Record `settings` in `<out>/sweep.json` unless it exists (created atomically: of parts
    starting at once exactly one writes it, the others then compare), refusing other settings."""
    path = Path(out) / MANIFEST
    if check_manifest(out, settings):
        return
    text = json.dumps({"signature": settings_signature(settings), "settings": settings},
                      indent=1, sort_keys=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text + "\n")
        os.link(tmp, path)  # fails when another part created it first
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    check_manifest(out, settings)


def other_settings(cached, *, label: str, group_size: int, description: dict, gammas, seeds) -> str | None:
    """The settings in which the cached cell file of this cell (its method label and N) was computed
    differently from `description` (`dataclasses.asdict` of the cell's config, less group_size),
    `gammas` and `seeds`, as "name = ours here, theirs there; ..."; None when the file holds another
    cell (a damaged or misnamed file) or differs only in fields one side lacks (a file written before a
    field was renamed or added): those are recomputed, a cell of other settings is not overwritten."""
    recorded = cached.attrs.get(label)
    if cached.methods != (label,) or cached.group_sizes != (group_size,) or not isinstance(recorded, dict):
        return None
    ours = json.loads(json.dumps({"config": description, "gammas": [float(g) for g in gammas],
                                  "seeds": [int(s) for s in seeds]}))
    theirs = {"config": recorded, "gammas": list(cached.gammas), "seeds": list(cached.seeds)}
    a, b = _flat(ours), _flat(theirs)
    keys = [k for k in sorted(set(a) & set(b)) if a[k] != b[k]]
    return _differences({k: a[k] for k in keys}, {k: b[k] for k in keys}) if keys else None


def cell_problem(cached, *, label: str, group_size: int, gammas, seeds, steps, signature: str):
    """Why the cached cell `cached` (SimResults) does not hold this cell, in a few words; None
    when it does."""
    if cached.attrs.get("signature") != signature:
        return "computed with other settings"
    coords = (cached.methods, cached.group_sizes, cached.gammas, cached.seeds)
    if coords != ((label,), (group_size,), tuple(gammas), tuple(seeds)):
        return "other coordinates"
    if not np.array_equal(cached.steps, steps):
        return "other recorded steps"
    missing = [m for m in ALL_METRICS if m not in cached.data]
    if missing:
        return f"metric {missing[0]} missing"
    return None


def cell_files(cells_dir) -> list[Path]:
    """The cell files in `cells_dir` by name (not the temporary file of a write in progress)."""
    folder = Path(cells_dir)
    return sorted(p for p in folder.glob("*.npz") if not p.name.startswith(".")) if folder.is_dir() else []


def _steps_text(steps) -> str:
    steps = np.asarray(steps)
    every = int(steps[1] - steps[0]) if len(steps) > 1 else 0
    return f"{int(steps[-1])} steps recorded every {every}" if every else f"{len(steps)} record(s)"


def _grid_difference(cached, gammas, seeds, steps) -> str | None:
    """How the γ values, seeds or recorded steps of a cached cell differ from a sweep's (None: they
    agree up to order), as "name = ours here, theirs there"."""
    parts = []
    if sorted(cached.gammas) != sorted(float(g) for g in gammas):
        parts.append(f"gammas = {sorted(float(g) for g in gammas)} here, {sorted(cached.gammas)} there")
    if sorted(cached.seeds) != sorted(int(s) for s in seeds):
        parts.append(f"seeds = {sorted(int(s) for s in seeds)} here, {sorted(cached.seeds)} there")
    if not np.array_equal(cached.steps, steps):
        parts.append(f"{_steps_text(steps)} here, {_steps_text(cached.steps)} there")
    return "; ".join(parts) or None


def other_cells(cells_dir, skip, *, descriptions: dict, gammas, seeds, steps, log=None) -> dict:
    """{path: SimResults} of every finished cell in `cells_dir` but the files in `skip` (the sweep's
    own grid), for the sweep's results and table, which summarise every cell on disk.

    One results array holds every cell only on one grid of γ values, seeds and recorded steps, and
    one method label names one set of settings (`descriptions`: the sweep's labels -> their
    `dataclasses.asdict` less group_size): a cell on another grid, or of one of the sweep's labels
    computed with other settings, is refused (CatsimError naming the file and what differs) before
    any work. A file that cannot be read or holds no single cell is left out, with one line to `log`
    (nothing is deleted)."""
    out = {}
    for path in cell_files(cells_dir):
        if path in skip:
            continue
        try:
            cached = SimResults.load(path)
        except CatsimError as err:
            if log:
                log(f"cell {path.name} cannot be read ({str(err).removeprefix(f'cannot read simulator results from {path}: ')}): "
                    f"left out of the results and table")
            continue
        missing = [m for m in ALL_METRICS if m not in cached.data]
        if len(cached.methods) != 1 or len(cached.group_sizes) != 1 or missing:
            if log:
                log(f"cell {path.name} does not hold one finished cell: left out of the results and table")
            continue
        grid = _grid_difference(cached, gammas, seeds, steps)
        label = cached.methods[0]
        differ = label in descriptions and other_settings(
            cached, label=label, group_size=cached.group_sizes[0], description=descriptions[label],
            gammas=gammas, seeds=seeds)
        if grid or differ:
            what = "was computed on another grid" if grid else f"holds method {label} computed with other settings"
            raise CatsimError(f"{path} {what} ({grid or differ}): one results table cannot hold it and this "
                              f"sweep's cells; use another --out")
        out[path] = cached
    return out
