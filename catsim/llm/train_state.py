"""Training state on disk, shared by supervised warm-up (`sft`) and RL (`rl`).

A state is any pytree of arrays, written as one safetensors file (`leaf_00000`, ...) with the step,
a fingerprint of the settings that produced it and the leaf count in its metadata. Writes are
atomic (temp file + rename), so a kill mid-write leaves the previous state intact; the step log is
cut back to the saved step on resume, so a killed run loses at most the steps after its last save.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jax
import numpy as np

from catsim.errors import CatsimError


def save_tree(path: Path, tree: Any, step: int, fingerprint: str) -> None:
    """Write `tree` atomically with its step and settings fingerprint.

    Multi-process runs: every process must call this (the sharded arrays are gathered across
    processes); only process 0 writes, then all wait for the file, so a resume reads it whole.
    """
    from safetensors.numpy import save_file

    from catsim.llm.model.sharding import barrier, is_primary, to_host

    leaves = jax.tree.leaves(to_host(tree))
    if not is_primary():
        barrier(f"catsim-save-{path.name}-{step}")
        return
    tensors = {f"leaf_{i:05d}": np.array(x, order="C") for i, x in enumerate(leaves)}
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata={"step": str(int(step)), "fingerprint": fingerprint,
                                           "leaves": str(len(leaves))})
    os.replace(tmp, path)
    barrier(f"catsim-save-{path.name}-{step}")


def load_tree(path: Path, template: Any, fingerprint: str, *, what: str = "run") -> tuple[Any, int]:
    """Read `save_tree`'s file into the structure, dtypes and shardings of `template`.

    Raises CatsimError if the file was written with other settings (fingerprint), for another
    model (leaf count) or has a tensor of the wrong shape or dtype. Returns (tree, step).
    """
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
            if array.size != np.size(ref) or array.dtype != np.asarray(ref).dtype:
                raise CatsimError(f"{path}: training state tensor {i} has the wrong shape or dtype")
            array = array.reshape(np.shape(ref))  # safetensors may store 0-d arrays as [1]
            loaded.append(jax.device_put(array, getattr(ref, "sharding", None)))
    return jax.tree.unflatten(treedef, loaded), int(meta["step"])


def truncate_log(path: Path, step: int) -> None:
    """Drop JSONL log lines of steps after `step` (they belong to a state that was never saved)."""
    if not path.exists():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            if json.loads(line)["step"] <= step:
                keep.append(line)
        except (json.JSONDecodeError, KeyError, TypeError):
            continue  # a line cut by a kill
    path.write_text("".join(line + "\n" for line in keep))
