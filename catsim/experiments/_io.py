"""Atomic text files for the experiments' outputs (a reader never sees half a file)."""

from __future__ import annotations

import os
from pathlib import Path


def write_text(path, text: str) -> Path:
    """Write `text` to `path` through a temporary file in the same folder and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path
