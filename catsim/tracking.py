"""Step metrics of a run: one JSONL record per step, mirrored live to TensorBoard and W&B.

The JSONL file is the record of a run. The optional sinks are views of it, chosen by name:

    tensorboard   event files under <out>/tensorboard/ (`tensorboard --logdir <out>`)
    wandb         a Weights & Biases run in offline mode under <out>/wandb/ (never touches the
                  network; upload it later with `wandb sync <out>/wandb/latest-run`)

Every numeric value of a record becomes one scalar at the record's step (tag = key, nested keys
joined by "/"); lists, strings, booleans and None go to the JSONL only. Non-finite floats are
written as null everywhere (JSON has no NaN), so a sink never shows what the record does not hold.

Resume: `MetricsWriter(..., resume_step=k)` drops the records of steps after k (they belong to a
training state that was never saved) from the JSONL atomically, then rebuilds each sink from the
records kept. Event files and W&B runs are append-only, so appending after a kill would leave the
orphaned steps on the curves; rebuilt, a resumed run's curves equal an uninterrupted run's.

Multi-process runs: only the primary process writes (`enabled=False` elsewhere).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from catsim.errors import CatsimError
from catsim.files import write_text

# sink name -> (module that must be importable, pip extra that installs it)
SINKS = {"tensorboard": ("tensorboard", "tensorboard"), "wandb": ("wandb", "wandb")}
TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"


def parse_log_to(text: str | Iterable[str] | None) -> tuple[str, ...]:
    """Sink names from a comma list ("tensorboard,wandb"); "" / "none" / None -> ().

    Raises CatsimError for an unknown name or a sink whose package is not installed.
    """
    if text is None:
        return ()
    parts = text.split(",") if isinstance(text, str) else list(text)
    names: list[str] = []
    for part in (p.strip().lower() for p in parts):
        if part in ("", "none", "jsonl"):
            continue
        if part not in SINKS:
            raise CatsimError(f"--log-to: unknown sink {part!r}; choose from "
                              f"{', '.join(SINKS)} (comma-separated)")
        module, extra = SINKS[part]
        if importlib.util.find_spec(module) is None:
            raise CatsimError(f"--log-to {part} needs the {module} package: "
                              f"pip install 'catsim[{extra}]'")
        if part not in names:
            names.append(part)
    return tuple(names)


def _log_to_type(text: str) -> tuple[str, ...]:
    try:
        return parse_log_to(text)
    except CatsimError as err:  # argparse keeps an ArgumentTypeError's message as it is
        raise argparse.ArgumentTypeError(str(err)) from None


def add_log_to_argument(parser: argparse.ArgumentParser) -> None:
    """`--log-to SINKS` (parsed to a tuple of sink names; default: the JSONL log only)."""
    parser.add_argument(
        "--log-to", type=_log_to_type, default=(), metavar="SINKS",
        help="also send the step metrics to these sinks, comma-separated: tensorboard (event "
             "files in OUT/tensorboard/; pip install 'catsim[tensorboard]'), wandb (Weights & "
             "Biases offline run in OUT/wandb/, synced later with `wandb sync`; pip install "
             "'catsim[wandb]'). Example: --log-to tensorboard,wandb (default: the JSONL log only)")


def jsonable(value: Any) -> Any:
    """`value` as plain JSON data: NumPy/JAX scalars and arrays to Python numbers and lists,
    non-finite floats to None. Raises TypeError for anything else JSON cannot hold."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, (np.generic, np.ndarray)) or hasattr(value, "__array__"):
        array = np.asarray(value)
        return jsonable(array.item() if array.ndim == 0 else array.tolist())
    raise TypeError(f"metric value of type {type(value).__name__} cannot be written as JSON")


def scalars(record: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The numeric values of a (jsonable) record by tag, nested keys joined by "/"; "step",
    booleans, None, strings and lists are left out."""
    out: dict[str, float] = {}
    for key, value in record.items():
        tag = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(scalars(value, tag + "/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and tag != "step":
            out[tag] = float(value)
    return out


def read_records(path: str | Path) -> list[dict]:
    """The records of a JSONL log, skipping a last line cut by a kill. [] if there is no file."""
    path = Path(path)
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int):
            records.append(record)
    return records


def truncate_records(path: str | Path, step: int | None) -> list[dict]:
    """Keep the records of steps <= `step` (none when `step` is None); atomic (temp + rename).
    Returns the records kept."""
    path = Path(path)
    kept = [] if step is None else [r for r in read_records(path) if r["step"] <= step]
    write_text(path, "".join(json.dumps(r) + "\n" for r in kept))
    return kept


class _TensorBoardSink:
    """Scalars as TensorBoard event files, written by TensorBoard's own (framework-free) writer."""

    def __init__(self, directory: Path):
        from tensorboard.summary import Writer

        shutil.rmtree(directory, ignore_errors=True)  # rebuilt from the JSONL records kept
        directory.mkdir(parents=True)
        self._writer = Writer(str(directory))

    def write(self, step: int, values: dict[str, float], flush: bool = True) -> None:
        for tag, value in values.items():
            self._writer.add_scalar(tag, value, step)
        if flush:
            self._writer.flush()

    def close(self, failed: bool = False) -> None:
        self._writer.close()


class _WandbSink:
    """A Weights & Biases run in offline mode: it writes <out>/wandb/offline-run-*-<id>/ and never
    opens a network connection; `wandb sync` uploads it later."""

    def __init__(self, out: Path, run_id: str, name: str, project: str, config: Mapping | None):
        import wandb

        for old in (out / WANDB_DIR).glob(f"offline-run-*-{run_id}"):
            shutil.rmtree(old, ignore_errors=True)  # rebuilt from the JSONL records kept
        (out / WANDB_DIR).mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(mode="offline", silent=True, console="off", disable_git=True,
                                  save_code=False, disable_job_creation=True,
                                  x_disable_stats=True, x_disable_machine_info=True,
                                  x_disable_meta=True)
        # wandb's own usage analytics follow the process-wide settings, not the run's: without
        # this they would probe the W&B server even for an offline run
        wandb.setup(settings=settings)
        self._run = wandb.init(project=project, name=name, id=run_id, dir=str(out),
                               config=json.loads(json.dumps(dict(config or {}), default=str)),
                               mode="offline",
                               settings=settings, reinit="create_new")

    def write(self, step: int, values: dict[str, float], flush: bool = True) -> None:
        self._run.log(values, step=step)

    def close(self, failed: bool = False) -> None:
        self._run.finish(exit_code=1 if failed else 0)


class MetricsWriter:
    """Writes one record per step to `<out_dir>/<filename>` (JSONL) and to the sinks in `log_to`.

    out_dir: the run directory (sinks write under it). filename: the JSONL file's name.
    log_to: sink names or a comma list (see `parse_log_to`). resume_step: keep the records of
    steps <= this (a resumed run's saved step); None starts the log afresh. config: the run's
    settings (logged to W&B). run_name: the W&B run's name (default: the directory's name).
    run_id: the W&B run id (default: derived from the log's absolute path, so a resumed run keeps
    it). project: the W&B project. enabled: False on non-primary processes (writes nothing).

    Use as a context manager; `write(record)` needs an int "step" greater than the last one.
    """

    def __init__(self, out_dir: str | Path, filename: str = "metrics.jsonl", *,
                 log_to: str | Iterable[str] | None = (), resume_step: int | None = None,
                 config: Mapping | None = None, run_name: str | None = None,
                 run_id: str | None = None, project: str = "catsim", enabled: bool = True):
        self.sinks = parse_log_to(log_to)
        self.out = Path(out_dir)
        self.path = self.out / filename
        self.enabled = enabled
        self.last_step: int | None = None
        self._file = None
        self._sinks: list = []
        if not enabled:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        kept = truncate_records(self.path, resume_step)
        self.last_step = kept[-1]["step"] if kept else None
        try:
            if "tensorboard" in self.sinks:
                self._sinks.append(_TensorBoardSink(self.out / TENSORBOARD_DIR))
            if "wandb" in self.sinks:
                run_id = run_id or hashlib.sha256(str(self.path.resolve()).encode()).hexdigest()[:16]
                self._sinks.append(_WandbSink(self.out, run_id, run_name or self.out.resolve().name,
                                              project, config))
            for i, record in enumerate(kept):  # the sinks start as views of the records kept
                values = scalars(record)
                for sink in self._sinks:
                    sink.write(record["step"], values, flush=i == len(kept) - 1)
            self._file = self.path.open("a")
        except BaseException:
            self.close(failed=True)
            raise

    def write(self, record: Mapping[str, Any]) -> dict:
        """Write one step's record (values as in `jsonable`); returns the record as written."""
        clean = jsonable(dict(record))
        step = clean.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            raise CatsimError(f"a metrics record needs an integer 'step', got {step!r}")
        if self.last_step is not None and step <= self.last_step:
            raise CatsimError(f"metrics step {step} is not after the last step {self.last_step}")
        self.last_step = step
        if not self.enabled:
            return clean
        self._file.write(json.dumps(clean, allow_nan=False) + "\n")
        self._file.flush()
        values = scalars(clean)
        for sink in self._sinks:
            sink.write(step, values)
        return clean

    def close(self, failed: bool = False) -> None:
        """Flush and close the JSONL file and every sink (safe to call twice); `failed` marks
        the W&B run as crashed (as leaving the `with` block on an exception does)."""
        sinks, self._sinks = self._sinks, []
        for sink in sinks:
            sink.close(failed)
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(failed=exc_type is not None)
