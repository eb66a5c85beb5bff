"""Step metrics of a run: one JSONL record per step, mirrored live to TensorBoard and W&B.

The JSONL file is the record of a run. The optional sinks are views of it, chosen by name:

    tensorboard   event files under <out>/tensorboard/ (`tensorboard --logdir <out>`)
    wandb         a Weights & Biases run under <out>/wandb/ (`LogTo`: project, entity and mode;
                  offline by default, which never touches the network: upload it later with
                  `wandb sync <out>/wandb/latest-run`)

Every numeric value of a record becomes one scalar at the record's step, lists, strings, booleans
and None go to the JSONL only. Non-finite floats are written as null everywhere (JSON has no NaN),
so a sink never shows what the record does not hold. A scalar's tag (the same key in W&B) is its
group, then its key, nested keys joined by "/" (`GROUPS`): train/ the step's training metrics
(loss, reward, ...; a key no one grouped), eval/ evaluations (held-out accuracy), catsim/ catsim's
own diagnostics (focal weight, γ, active share and its prediction, the simulator's Mret and Qpos).
The writer of a record names the groups of its keys (`MetricsWriter(groups=...)`); a record key
that is a group name holding a dict ({"eval": {"acc": ...}}) is its own group.

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
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from catsim.errors import CatsimError
from catsim.files import write_text

# sink name -> (module that must be importable, pip extra that installs it)
SINKS = {"tensorboard": ("tensorboard", "tensorboard"), "wandb": ("wandb", "wandb")}
TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"
WANDB_MODES = ("offline", "online", "disabled")
WANDB_PROJECT = "catsim"  # the default W&B project
GROUPS = ("train", "eval", "catsim")  # tag groups; a key no one grouped is train/
DEFAULT_GROUP = "train"


@dataclass(frozen=True)
class LogTo:
    """Where a run's step metrics go besides its JSONL log (`sinks`) and the W&B run's settings.

    Iterates, sizes and tests membership as its tuple of sink names, so code that reads `log_to` as
    that tuple (`if log_to`, `"wandb" in log_to`) reads a LogTo the same."""

    sinks: tuple[str, ...] = ()  # sink names (`SINKS`), e.g. ("tensorboard", "wandb")
    wandb_project: str = WANDB_PROJECT  # W&B project the run is filed under
    wandb_entity: str | None = None  # W&B entity (user or team); None: the account's default
    wandb_mode: str = "offline"  # offline (a local run, `wandb sync` later), online, or disabled

    def __post_init__(self):
        if self.wandb_mode not in WANDB_MODES:
            raise CatsimError(f"W&B mode {self.wandb_mode!r}: choose from {', '.join(WANDB_MODES)}")
        if not str(self.wandb_project).strip():
            raise CatsimError("the W&B project name is empty")

    def __iter__(self):
        return iter(self.sinks)

    def __len__(self) -> int:
        return len(self.sinks)

    def __contains__(self, name) -> bool:
        return name in self.sinks


def as_log_to(value: LogTo | str | Iterable[str] | None) -> LogTo:
    """`value` as a LogTo: a LogTo as it is; sink names or a comma list (`parse_log_to`) with the
    default W&B settings."""
    return value if isinstance(value, LogTo) else LogTo(parse_log_to(value))


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


_WANDB_OPTIONS = ("--wandb-project", "--wandb-entity", "--wandb-mode")


def add_log_to_argument(parser: argparse.ArgumentParser) -> None:
    """`--log-to SINKS` and the W&B run's `--wandb-project`, `--wandb-entity`, `--wandb-mode`,
    parsed together into `args.log_to`, a `LogTo` (default: the JSONL log only). A W&B option
    without wandb among the sinks would never act: parsing refuses it in one line (exit 2)."""
    parser.add_argument(
        "--log-to", type=_log_to_type, default=(), metavar="SINKS",
        help="also send the step metrics to these sinks, comma-separated: tensorboard (event "
             "files in OUT/tensorboard/, tags grouped as train/, eval/, catsim/; pip install "
             "'catsim[tensorboard]'), wandb (a Weights & Biases run in OUT/wandb/, the same keys; "
             "offline unless --wandb-mode online; pip install 'catsim[wandb]'). Example: --log-to "
             "tensorboard,wandb (default: the JSONL log only)")
    group = parser.add_argument_group("Weights & Biases (with --log-to wandb)")
    group.add_argument("--wandb-project", default=None, metavar="NAME",
                       help=f"the W&B project of the run (default: {WANDB_PROJECT})")
    group.add_argument("--wandb-entity", default=None, metavar="NAME",
                       help="the W&B entity, a user or team (default: the account's default)")
    group.add_argument("--wandb-mode", default=None, choices=WANDB_MODES,
                       help="offline: a local run, uploaded later with `wandb sync OUT/wandb/latest-run` "
                            "(never touches the network); online: streamed to the W&B server; disabled: "
                            "nothing is written (default: offline)")
    parse = parser.parse_known_args

    def parse_known_args(args=None, namespace=None):  # every option seen: one LogTo of them
        namespace, extras = parse(args, namespace)
        given = [flag for flag in _WANDB_OPTIONS if getattr(namespace, _dest(flag), None) is not None]
        sinks = tuple(getattr(namespace, "log_to", ()) or ())
        if given and "wandb" not in sinks:
            parser.error(f"{given[0]} sets the W&B run of --log-to wandb, which this command was not given: "
                         "add wandb to --log-to, or leave it out")
        values = {_dest(flag): getattr(namespace, _dest(flag), None) for flag in _WANDB_OPTIONS}
        for name in values:
            if hasattr(namespace, name):
                delattr(namespace, name)
        try:
            namespace.log_to = LogTo(sinks, **{k: v for k, v in values.items() if v is not None})
        except CatsimError as err:
            parser.error(str(err))
        return namespace, extras

    parser.parse_known_args = parse_known_args


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


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


def grouped(values: Mapping[str, float], groups: Mapping[str, str] | None = None) -> dict[str, float]:
    """`values` (by tag, from `scalars`) under their group (`GROUPS`): a tag whose first part is a
    group keeps it ("eval/acc"); any other goes under `groups[its first part]`, else train/
    ("loss" -> "train/loss"; with groups={"gamma": "catsim"}, "gamma" -> "catsim/gamma")."""
    out = {}
    for tag, value in values.items():
        head = tag.split("/", 1)[0]
        out[tag if head in GROUPS and "/" in tag else f"{(groups or {}).get(head, DEFAULT_GROUP)}/{tag}"] = value
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
    """A Weights & Biases run under <out>/wandb/, in `log_to.wandb_mode`: offline writes
    offline-run-*-<id>/ and never opens a network connection (`wandb sync` uploads it later);
    online streams it to the W&B server; disabled writes nothing.

    Offline, a resumed run is rebuilt in place (its directory replaced). The server keeps what an
    online run logged, so a resumed online run is a new W&B run (same name) holding the whole curve."""

    def __init__(self, out: Path, run_id: str, name: str, log_to: LogTo, config: Mapping | None,
                 resumed: bool):
        import wandb

        mode = log_to.wandb_mode
        for old in (out / WANDB_DIR).glob(f"offline-run-*-{run_id}"):
            shutil.rmtree(old, ignore_errors=True)  # rebuilt from the JSONL records kept
        if mode == "online" and resumed:
            run_id = f"{run_id[:8]}{int(time.time()):x}"
        (out / WANDB_DIR).mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(mode=mode, silent=True, console="off", disable_git=True,
                                  save_code=False, disable_job_creation=True,
                                  x_disable_stats=True, x_disable_machine_info=True,
                                  x_disable_meta=True)
        # wandb's own usage analytics follow the process-wide settings, not the run's: without
        # this they would probe the W&B server even for an offline run
        wandb.setup(settings=settings)
        self._run = wandb.init(project=log_to.wandb_project, entity=log_to.wandb_entity, name=name, id=run_id,
                               dir=str(out), config=json.loads(json.dumps(dict(config or {}), default=str)),
                               mode=mode, settings=settings, reinit="create_new")

    def write(self, step: int, values: dict[str, float], flush: bool = True) -> None:
        self._run.log(values, step=step)

    def close(self, failed: bool = False) -> None:
        self._run.finish(exit_code=1 if failed else 0)


class MetricsWriter:
    """Writes one record per step to `<out_dir>/<filename>` (JSONL) and to the sinks in `log_to`.

    out_dir: the run directory (sinks write under it). filename: the JSONL file's name.
    log_to: a `LogTo`, or sink names or a comma list (`parse_log_to`; W&B's default settings).
    resume_step: keep the records of steps <= this (a resumed run's saved step); None starts the
    log afresh. config: the run's settings (logged to W&B). run_name: the W&B run's name (default:
    the directory's name). run_id: the W&B run id (default: derived from the log's absolute path,
    so a resumed run keeps it). groups: the tag group (`GROUPS`) of each record key not in train/
    (`grouped`). enabled: False on non-primary processes (writes nothing).

    Use as a context manager; `write(record)` needs an int "step" greater than the last one.
    """

    def __init__(self, out_dir: str | Path, filename: str = "metrics.jsonl", *,
                 log_to: str | Iterable[str] | None = (), resume_step: int | None = None,
                 config: Mapping | None = None, run_name: str | None = None,
                 run_id: str | None = None, groups: Mapping[str, str] | None = None, enabled: bool = True):
        self.log_to = as_log_to(log_to)
        self.sinks = self.log_to.sinks
        self.groups = dict(groups or {})
        if bad := sorted(set(self.groups.values()) - set(GROUPS)):
            raise CatsimError(f"metric groups {bad} are not among {', '.join(GROUPS)}")
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
                                              self.log_to, config, resumed=bool(kept)))
            for i, record in enumerate(kept):  # the sinks start as views of the records kept
                values = grouped(scalars(record), self.groups)
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
        values = grouped(scalars(clean), self.groups)
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
