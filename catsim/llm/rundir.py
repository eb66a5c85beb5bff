"""The run directory of a training run (`catsim llm sft`, `catsim llm rl`): one lifecycle for both.

    run = RunDir(out, state_dir=..., log_file=..., fingerprint=fp, what="RL run")
    with run.locked():                    # a second run on the same directory stops with one line
        run.clear(...) if overwrite       # start afresh
        tree, start = run.resume(template)    # the saved state (step 0: template), log cut back
        run.write_json(CONFIG_FILE, {...})
        with run.open_log(start, log_to=("tensorboard",)) as log: ...   # log.write(record) per step
        run.save_state(tree, step)        # asynchronous; every `save_every` steps
        run.save_model("model", cfg, params, tokenizer)
    # leaving `locked()` waits for the last state save

The training state is any pytree of arrays, saved as sharded orbax checkpoints in `<state_dir>/<step>/`
(`StateCheckpoints`: asynchronous, each process writes its own shards, a restore reads each array
straight into the template's shardings, the newest `keep` kept) with the step, the settings
fingerprint and the arrays' shapes and dtypes beside it. A checkpoint appears under its final name
only when complete and other files are written to a temporary name and renamed into place, so a
kill mid-write leaves the previous version; the step log is cut back to the saved step on resume,
so a killed run loses at most the steps after its last save. After a crash, resume repairs or refuses
what it finds: a damaged checkpoint is set aside for the previous one, a log line cut by a kill is
dropped (each said in one line), and a damaged log line before the last is refused naming the file
and the line. A state of the earlier one-file format
(`<state_dir>.safetensors`) is still read. Multi-process runs: every process takes part in saves
and restores; process 0 alone writes the other files (and holds the lock), the others wait at
barriers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import jax
import numpy as np

from catsim.errors import CatsimError, CatsimWarning
from catsim.files import write_text
from catsim.llm.model.sharding import barrier, is_primary, to_host
from catsim.llm.steplog import parse_log, read_log, truncate_log  # noqa: F401  (rundir.read_log: the callers' name)

TASK_FILE = "catsim_task.json"  # {task, config, data_seed} next to a model: how to rebuild its task
LOCK_FILE = ".catsim.lock"


# ----------------------------------------------------------------------------- small atomic writers
def write_json(path: Path, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, default=str) + "\n")


def fingerprint(settings: Any) -> str:
    """Short hash of the settings that change a run's trajectory (JSON, keys sorted)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------- the task file
def task_spec(task, data_seed: int | None = None) -> dict:
    """{task, config[, data_seed]} of a task object (the task file's content)."""
    config = getattr(task, "config", None)
    options = (json.loads(json.dumps(dataclasses.asdict(config), default=str))
               if config is not None and dataclasses.is_dataclass(config) else {})
    spec = {"task": task.name, "config": options}
    if data_seed is not None:
        spec["data_seed"] = int(data_seed)
    return spec


def check_base_outside(base_dir: str | Path, out_dir: str | Path) -> None:
    """Refuse a base model inside the run directory that a run writes (its model/ is replaced,
    --overwrite clears it): the run would destroy its own starting point and KL reference."""
    base, out = Path(base_dir).resolve(), Path(out_dir).resolve()
    if base == out or out in base.parents:
        raise CatsimError(f"the base model {base_dir} lies inside the output directory {out_dir}, which the "
                          "run writes (and --overwrite clears): copy the base elsewhere or choose another --out")


def read_task_file(model_dir: str | Path) -> dict:
    """The task file a warm-up (catsim llm sft) or an RL run writes next to its model."""
    path = Path(model_dir) / TASK_FILE
    if not Path(model_dir).is_dir():
        raise CatsimError(f"{model_dir}: no such model directory")
    if not path.is_file():
        raise CatsimError(f"{model_dir}: no {TASK_FILE}; pass the task explicitly (--task ...)")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise CatsimError(f"{path}: not valid JSON ({err.msg})") from None


def task_from_spec(spec: dict):
    from catsim.llm.tasks import make_task

    return make_task(spec["task"], **spec.get("config", {}))


def task_for_model(model_dir, name: str | None, overrides: dict, data_seed: int | None = None):
    """(task, data_seed) for a model directory: its task file's settings are the defaults, so
    `--task maze` on a 7×7 model samples 7×7 mazes; `overrides` (config fields) and `data_seed`
    replace them; `name=None` means the recorded task."""
    recorded = read_task_file(model_dir) if (Path(model_dir) / TASK_FILE).is_file() else {}
    if name is None:
        name = recorded.get("task")
        if name is None:
            raise CatsimError(f"{model_dir} records no task ({TASK_FILE}); give --task")
    options = dict(recorded.get("config", {})) if recorded.get("task") == name else {}
    options.update(overrides)
    seed = data_seed if data_seed is not None else int(recorded.get("data_seed", 0))
    return task_from_spec({"task": name, "config": options}), seed


# ----------------------------------------------------------------------------- training state
def _flat(settings: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as {"a.b": leaf}."""
    if not isinstance(settings, dict):
        return {prefix.rstrip("."): settings}
    out: dict[str, Any] = {}
    for key, value in settings.items():
        out.update(_flat(value, f"{prefix}{key}."))
    return out


def settings_differences(have: Any, want: dict | None, limit: int = 3) -> str:
    """The first `limit` settings that differ, as "rl.learning_rate 0.01 there, 0.02 here" (the
    settings as JSON holds them), or "" when either side is unknown."""
    if not isinstance(have, dict) or want is None:
        return ""
    old, new = _flat(have), _flat(json.loads(json.dumps(want, default=str)))
    unset = object()
    keys = sorted(k for k in old.keys() | new.keys() if old.get(k, unset) != new.get(k, unset))

    def shown(value):
        text = "unset" if value is unset else json.dumps(value)
        return text if len(text) <= 30 else text[:27] + "..."

    parts = [f"{k} {shown(old.get(k, unset))} there, {shown(new.get(k, unset))} here" for k in keys[:limit]]
    return "; ".join(parts) + (f"; and {len(keys) - limit} more" if len(keys) > limit else "")


def unreadable_checkpoint(folder: Path, err: BaseException) -> str:
    """What is wrong with a checkpoint folder that failed to read, naming the file where known:
    a metadata file that is not JSON, a missing part, or the reader's first line."""
    if isinstance(err, json.JSONDecodeError):
        for path in sorted(folder.rglob("*")):
            if path.name in ("metadata", "_METADATA") and path.is_file():
                try:
                    json.loads(path.read_bytes())
                except (ValueError, UnicodeDecodeError):
                    return f"{path}: damaged (not valid JSON)"
    if isinstance(err, KeyError):
        return f"{folder}: incomplete ({err.args[0] if err.args else err})"
    while err.__cause__ is not None or err.__context__ is not None:  # the reader's own error, not a wrapper's
        err = err.__cause__ or err.__context__
    first = (str(err).splitlines() or [type(err).__name__])[0].split(" [tensorstore_spec")[0]
    return f"{folder}: damaged ({first if len(first) <= 240 else first[:237] + '...'})"


def _leaf_signature(leaves) -> list[list]:
    """[shape, dtype] of each leaf: what a saved state must match to be read into a template."""
    return [[list(np.shape(x)), str(np.dtype(getattr(x, "dtype", np.asarray(x).dtype)))] for x in leaves]


class StateCheckpoints:
    """The training state as sharded orbax checkpoints: `directory/<step>/{state,meta}`.

    Each save is asynchronous: `save` returns once the arrays are copied off the devices (so the
    caller may donate or overwrite them) and the files are written in the background; each process
    writes the shards it holds; a checkpoint appears under its final name only once complete
    (orbax writes into a temporary directory and renames it), so a crash mid-save leaves the previous
    one readable. The newest `keep` checkpoints are kept. `restore` reads each array straight into
    the template's shardings (every process reads only its own slices). The tree is stored flat
    (`leaf_00000`, ...) next to a JSON item with the step, the settings fingerprint and every leaf's
    shape and dtype, which a restore checks before reading any array.
    """

    def __init__(self, directory: Path, keep: int = 2):
        import orbax.checkpoint as ocp

        if keep < 1:
            raise CatsimError(f"checkpoints to keep must be at least 1, got {keep}")
        self.directory = Path(directory).absolute()
        self._ocp = ocp
        self._manager = ocp.CheckpointManager(
            self.directory, options=ocp.CheckpointManagerOptions(
                max_to_keep=keep, create=True, enable_async_checkpointing=True,
                cleanup_tmp_directories=True))
        self._last_saved: int | None = None

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def save(self, tree: Any, step: int, fingerprint: str, settings: dict | None = None) -> None:
        """Start writing `tree` as checkpoint `step` (every process must call this). A step already
        saved is not written again (a step's state is a function of the run's settings). `settings`
        (what `fingerprint` hashes) is kept beside it, so that a refusal can name what differs."""
        ocp = self._ocp
        if step == self._last_saved or step in self._manager.all_steps():
            return
        self._last_saved = int(step)
        leaves = jax.tree.leaves(tree)
        meta = {"step": int(step), "fingerprint": fingerprint, "leaves": _leaf_signature(leaves)}
        if settings is not None:
            meta["settings"] = json.loads(json.dumps(settings, default=str))
        state = {f"leaf_{i:05d}": x for i, x in enumerate(leaves)}
        self._manager.save(int(step), args=ocp.args.Composite(
            state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)), force=True)

    def restore(self, template: Any, fingerprint: str, *, what: str = "run",
                settings: dict | None = None) -> tuple[Any, int]:
        """(tree, step) of the newest readable checkpoint, read into `template`'s structure and shardings.

        Raises CatsimError if it was written with other settings (fingerprint; `settings`, the dict
        the fingerprint hashes, names what differs) or for another model (leaf count, shapes,
        dtypes). A checkpoint whose files are damaged (truncated, garbage, missing) is passed over
        for the previous one, which a warning names, and moved to `<directory>.damaged/` so that
        the run writes that step afresh; with none readable (or several processes, which must
        agree on the step) it is a CatsimError naming the damaged folder and file.
        """
        damaged: list[tuple[Path, str]] = []
        for step in sorted(self._manager.all_steps(), reverse=True):
            try:
                tree = self._restore_step(int(step), template, fingerprint, what, settings)
            except (CatsimError, MemoryError):
                raise
            except Exception as err:  # orbax, TensorStore and JSON errors of damaged files
                damaged.append((self.directory / str(step), unreadable_checkpoint(self.directory / str(step), err)))
                if jax.process_count() > 1:
                    break
                continue
            if damaged:
                warnings.warn(self._set_aside(damaged, int(step)), CatsimWarning, stacklevel=4)
            return tree, int(step)
        older = f" (and {len(damaged) - 1} older one(s))" if len(damaged) > 1 else ""
        hint = (f"move {damaged[0][0]} aside to resume from the previous checkpoint, or rerun with --overwrite"
                if jax.process_count() > 1 else "rerun with --overwrite to start afresh")
        raise CatsimError(f"cannot resume: {damaged[0][1]}{older}; {hint}")

    def _restore_step(self, step: int, template: Any, fingerprint: str, what: str, settings: dict | None):
        ocp = self._ocp
        meta = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta
        if meta.get("fingerprint") != fingerprint:
            differ = settings_differences(meta.get("settings"), settings)
            raise CatsimError(f"{self.directory.parent} holds a {what} with different settings"
                              f"{f' ({differ})' if differ else ''}; use another --out directory or "
                              "--overwrite to start afresh")
        leaves, treedef = jax.tree.flatten(template)
        if meta.get("leaves") != _leaf_signature(leaves):
            raise CatsimError(f"{self.directory / str(step)}: training state does not match this model "
                              "(number, shapes or dtypes of its arrays)")
        target = {f"leaf_{i:05d}": ocp.utils.to_shape_dtype_struct(x) for i, x in enumerate(leaves)}
        state = self._manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(target))).state
        return jax.tree.unflatten(treedef, [state[f"leaf_{i:05d}"] for i in range(len(leaves))])

    def _set_aside(self, damaged: list[tuple[Path, str]], step: int) -> str:
        """Move damaged checkpoints out of the manager's folder (kept for inspection, replacing an
        earlier copy of the same step); returns the warning that says so."""
        aside = self.directory.with_name(f"{self.directory.name}.damaged")
        aside.mkdir(exist_ok=True)
        for folder, _ in damaged:
            shutil.rmtree(aside / folder.name, ignore_errors=True)
            os.replace(folder, aside / folder.name)
        self._manager.reload()
        moved = ", ".join(str(aside / folder.name) for folder, _ in damaged)
        return f"{'; '.join(why for _, why in damaged)}; resumed from the checkpoint of step {step} instead (moved to {moved})"

    def wait(self) -> None:
        """Block until the last save is on disk."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        self._manager.wait_until_finished()
        self._manager.close()


def load_legacy_tree(path: Path, template: Any, fingerprint: str, *, what: str = "run") -> tuple[Any, int]:
    """Read a training state of the earlier one-file format (`<state>.safetensors`, tensors
    `leaf_00000`, ... with step, fingerprint and leaf count in its metadata) into `template`."""
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as fh:
        meta = fh.metadata() or {}
        if meta.get("fingerprint") != fingerprint:
            raise CatsimError(f"{path.parent} holds a {what} with different settings; use another "
                              "--out directory or --overwrite to start afresh")
        leaves, treedef = jax.tree.flatten(template)
        if int(meta.get("leaves", -1)) != len(leaves):
            raise CatsimError(f"{path}: training state does not match this model")
        loaded = []
        for i, ref in enumerate(leaves):
            array = fh.get_tensor(f"leaf_{i:05d}")
            if array.size != np.size(ref) or array.dtype != np.dtype(ref.dtype):
                raise CatsimError(f"{path}: training state tensor {i} has the wrong shape or dtype")
            array = array.reshape(np.shape(ref))  # safetensors may store 0-d arrays as [1]
            loaded.append(jax.device_put(array, getattr(ref, "sharding", None)))
    return jax.tree.unflatten(treedef, loaded), int(meta["step"])


def save_model_files(directory: Path, model_cfg, params, tokenizer, extra: dict[str, Any] | None = None) -> None:
    """A Hugging Face model directory (plus `extra` JSON files, e.g. the task file), written into a
    temporary directory and renamed into place file by file. Multi-process: every process takes
    part in the gather, process 0 writes."""
    from catsim.llm.model.checkpoint import save_model

    host = to_host(params)
    if not is_primary():
        return
    directory = Path(directory)
    tmp = directory.with_name(f".{directory.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_model(tmp, model_cfg, host, tokenizer)
    for name, obj in (extra or {}).items():
        (tmp / name).write_text(json.dumps(obj, indent=2, default=str) + "\n")
    directory.mkdir(parents=True, exist_ok=True)
    for stale in list(directory.glob("model*.safetensors")) + [directory / "model.safetensors.index.json"]:
        if not (tmp / stale.name).exists():
            stale.unlink(missing_ok=True)
    for f in sorted(tmp.iterdir()):
        os.replace(f, directory / f.name)
    tmp.rmdir()


# ----------------------------------------------------------------------------- the directory
class RunDir:
    """One run's output directory: lock, overwrite, resume, config, log, state and model files."""

    def __init__(self, path: str | Path, *, state_dir: str, log_file: str, fingerprint: str,
                 what: str = "run", keep: int = 2, settings: dict | None = None):
        """settings: the dict `fingerprint` hashes (`fingerprint(settings)`), kept with each saved
        state so that a rerun with other settings is told which differ."""
        self.settings = settings
        self.path = Path(path)
        self.state_path = self.path / state_dir  # orbax checkpoints <state_dir>/<step>/
        self.legacy_state_path = self.path / f"{state_dir}.safetensors"  # the earlier one-file format
        self.log_path = self.path / log_file
        self.fingerprint = fingerprint
        self.what = what
        self.keep = keep  # newest training-state checkpoints kept on disk
        self.primary = is_primary()  # multi-process: only process 0 writes files
        self._checkpoints: StateCheckpoints | None = None

    @property
    def checkpoints(self) -> StateCheckpoints:
        """The training-state checkpoints (opened on first use, on every process)."""
        if self._checkpoints is None:
            self._checkpoints = StateCheckpoints(self.state_path, self.keep)
        return self._checkpoints

    def close(self) -> None:
        """Wait for the last state save to be on disk and release the checkpoint manager."""
        if self._checkpoints is not None:
            self._checkpoints.close()
            self._checkpoints = None

    @contextlib.contextmanager
    def locked(self):
        """Hold an exclusive lock on the directory (process 0 only) for the run's duration; on exit
        the last state save is waited for."""
        import fcntl

        self.path.mkdir(parents=True, exist_ok=True)
        if not self.primary:
            try:
                yield self
            finally:
                self.close()
            return
        fh = open(self.path / LOCK_FILE, "w")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            raise CatsimError(f"{self.path} is in use by another run (wait for it, or use another --out)") from None
        try:
            yield self
        finally:
            try:
                self.close()
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
                fh.close()

    def clear(self, files=(), dirs=()) -> None:
        """--overwrite: remove the state, the log and the named files and directories."""
        self.close()
        if self.primary:
            for name in (self.legacy_state_path.name, self.log_path.name, *files):
                (self.path / name).unlink(missing_ok=True)
            for name in (self.state_path.name, f"{self.state_path.name}.damaged", *dirs):
                shutil.rmtree(self.path / name, ignore_errors=True)
        barrier(f"catsim-clear-{self.fingerprint}")

    def resume(self, template: Any) -> tuple[Any, int]:
        """(state, step): the newest saved state read into `template`'s structure and shardings (a
        state of the earlier one-file format too), or (template, 0); the log is cut back to that
        step (every process then reads the same log). A damaged newest checkpoint gives way to the
        previous one and a log's cut last line is dropped, each with a one-line warning
        (`StateCheckpoints.restore`, `truncate_log`); a damaged line before the log's last is refused."""
        tree, start = template, 0
        if self.log_path.is_file():
            parse_log(self.log_path)  # a damaged line is refused before anything is touched
        if self.state_path.is_dir() and self.checkpoints.latest_step() is not None:
            tree, start = self.checkpoints.restore(template, self.fingerprint, what=self.what, settings=self.settings)
        elif self.legacy_state_path.is_file():
            tree, start = load_legacy_tree(self.legacy_state_path, template, self.fingerprint, what=self.what)
        note = truncate_log(self.log_path, start) if self.primary else None
        if note:
            warnings.warn(note, CatsimWarning, stacklevel=2)
        barrier(f"catsim-resume-{self.fingerprint}")
        return tree, start

    def history(self) -> list[dict]:
        """The log records so far (after `resume`)."""
        return read_log(self.log_path) if self.log_path.is_file() else []

    def write_json(self, name: str, obj: Any) -> None:
        if self.primary:
            write_json(self.path / name, obj)

    def open_log(self, start: int, *, log_to=(), config: dict | None = None, run_name: str | None = None,
                 groups: dict | None = None):
        """The step log as a `catsim.tracking.MetricsWriter` (JSONL, plus the `log_to` sinks:
        tensorboard, wandb, their tags in `groups`), resumed at step `start`; it writes nothing on
        processes other than 0. `write(record)` takes a dict with an int "step"."""
        from catsim.tracking import MetricsWriter

        return MetricsWriter(self.path, self.log_path.name, log_to=log_to, resume_step=start, config=config,
                             run_name=run_name or self.path.name, groups=groups, enabled=self.primary)

    def save_state(self, tree: Any, step: int) -> None:
        """Start an asynchronous save of the training state at `step` (every process calls this;
        each writes its own shards). Returns once the arrays are copied off the devices."""
        self.checkpoints.save(tree, step, self.fingerprint, self.settings)

    def wait(self) -> None:
        """Block until the last `save_state` is on disk."""
        if self._checkpoints is not None:
            self._checkpoints.wait()

    def save_model(self, name: str, model_cfg, params, tokenizer, extra: dict[str, Any] | None = None) -> Path:
        """A Hugging Face model directory `name` inside the run ("" = the run directory itself)."""
        directory = self.path / name if name else self.path
        save_model_files(directory, model_cfg, params, tokenizer, extra)
        return directory
