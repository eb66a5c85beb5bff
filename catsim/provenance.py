"""What produced a results file: catsim version and commit, JAX, the CPU and its instruction set.

A float32 run is bit-for-bit reproducible only on the same software and the same instruction set:
XLA's CPU backend picks vector widths and fused multiply-adds from the CPU (or from
`XLA_FLAGS=--xla_cpu_max_isa=...`), and a different choice changes the last bits of sums, which
training can amplify; so does XLA's CPU thread count (it splits reductions). `collect()` records
everything that decides this; `differences(a, b)` says which of those fields two records disagree on.

A training run records one `collect()` per piece of it (`record_run_piece`: the step it started
from, appended at every start or resume), so a run continued on another machine or commit says so
(`run_pieces`, `describe`).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

# Instruction-set extensions that change XLA's CPU code generation (vector width, FMA, bf16).
ISA_FLAGS = ("sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512bw",
             "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile",
             "asimd", "sve", "sve2")  # the last three: ARM (reported as "Features" there)

# Fields that must match for two runs to be expected bit-identical.
DETERMINING = ("catsim_version", "git_commit", "jax_version", "jaxlib_version", "cpu_model",
               "isa_flags", "xla_flags", "threads", "backend", "device_count", "machine")
PIECES_FILE = "provenance.json"  # in a run directory: {"pieces": [{"from_step": s, **collect()}, ...]}


def cpu_info(cpuinfo: str | None = None) -> tuple[str, list[str]]:
    """(CPU model name, the ISA_FLAGS it has), read from /proc/cpuinfo where there is one."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return platform.processor() or "unknown", []
    model, flags = "", set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "cpu model", "hardware") and not model:
            model = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = set(value.split())
    return model or platform.processor() or "unknown", [f for f in ISA_FLAGS if f in flags]


def git_commit(path: Path | str | None = None) -> str | None:
    """The commit of the checkout holding `path` (default: this package), '+dirty' when it has
    uncommitted changes outside `figures/` (the published outputs, which a reproduction run itself
    rewrites, do not change what the code computes); None outside a git checkout or without git."""
    where = Path(path) if path is not None else Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no",
                                "--", ".", ":(exclude)figures"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def threads(xla_flags: str | None = None) -> int:
    """The number of threads XLA's CPU backend computes with: `intra_op_parallelism_threads` when
    XLA_FLAGS sets it, 1 when it turns Eigen's thread pool off, else the cores this process may
    run on (its affinity: `taskset -c 0` gives 1)."""
    flags = os.environ.get("XLA_FLAGS", "") if xla_flags is None else xla_flags
    for flag in reversed(flags.split()):
        name, _, value = flag.lstrip("-").partition("=")
        if name == "intra_op_parallelism_threads" and value.isdigit():
            return int(value)
        if name == "xla_cpu_multi_thread_eigen" and value.lower() in ("false", "0"):
            return 1
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def collect() -> dict:
    """A JSON-ready record of the software and hardware this process runs on."""
    import jax
    import jaxlib
    import numpy

    from catsim import __version__

    model, flags = cpu_info()
    return {
        "catsim_version": __version__,
        "git_commit": git_commit(),
        "python": sys.version.split()[0],
        "jax_version": jax.__version__,
        "jaxlib_version": jaxlib.__version__,
        "numpy_version": numpy.__version__,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": model,
        "cpu_count": os.cpu_count(),
        "isa_flags": flags,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "threads": threads(),
        "backend": jax.default_backend(),
        "device_count": jax.device_count(),
        "devices": sorted({d.device_kind for d in jax.devices()}),
    }


def stamp(record: dict) -> dict:
    """A copy of `record` (a results mapping) with a "provenance" entry from `collect()`."""
    return {**record, "provenance": collect()}


def differences(a: dict | None, b: dict | None) -> list[str]:
    """The DETERMINING fields on which two provenance records differ ('field: a -> b'); one line
    saying the record is missing when either is None. A field only one record has is not compared."""
    if not a or not b:
        return ["provenance not recorded"]
    out = []
    for key in DETERMINING:
        if key not in a or key not in b:  # a record older than the field: unknown, not different
            continue
        if a.get(key) != b.get(key):
            out.append(f"{key}: {_short(a.get(key))} -> {_short(b.get(key))}")
    return out


def _short(value) -> str:
    text = " ".join(value) if isinstance(value, list) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ----------------------------------------------------------------------------- a run's pieces
def run_pieces(run_dir: Path | str) -> list[dict]:
    """The provenance of each piece of the run in `run_dir` ({"from_step", **collect()}, oldest
    first); [] when the run recorded none (made before runs recorded it) or the file is unreadable."""
    try:
        pieces = json.loads((Path(run_dir) / PIECES_FILE).read_text()).get("pieces")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return []
    return [p for p in pieces if isinstance(p, dict)] if isinstance(pieces, list) else []


def record_run_piece(run_dir: Path | str, start: int, record: dict | None = None) -> list[dict]:
    """Record that the run in `run_dir` (re)starts at step `start` here: the pieces that began before
    `start` are kept (a piece that began at or after it was cut back by the resume), this process's
    `collect()` is appended, and the file is written atomically. Returns the pieces."""
    from catsim.files import write_text

    pieces = [p for p in run_pieces(run_dir) if isinstance(p.get("from_step"), int) and p["from_step"] < start]
    pieces.append({"from_step": int(start), **(collect() if record is None else record)})
    write_text(Path(run_dir) / PIECES_FILE, json.dumps({"pieces": pieces}, indent=1, default=str) + "\n")
    return pieces


def describe(record: dict | None) -> str:
    """One short line naming where a record comes from: commit, CPU, ISA pin, threads."""
    if not record:
        return "not recorded"
    flags = str(record.get("xla_flags") or "")
    isa = next((f.split("=", 1)[1] for f in flags.split() if f.lstrip("-").startswith("xla_cpu_max_isa=")), None)
    commit = record.get("git_commit")
    commit = commit[:10] + ("+dirty" if commit.endswith("+dirty") else "") if commit else "not known"
    return (f"commit {commit}, {record.get('cpu_model', 'unknown CPU')}"
            + (f", ISA pinned to {isa}" if isa else "")
            + (f", {record['threads']} thread{'s' if record['threads'] != 1 else ''}" if "threads" in record else ""))
