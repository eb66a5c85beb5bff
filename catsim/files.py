"""Atomic file writes. Every file catsim writes goes through a temporary file next to it and a
rename (`os.replace`, atomic on POSIX within one file system), so a crash at any moment leaves
either the old file or the new one, never half of either; a failed write removes its temporary
file. Temporary names start with a dot and carry the process id, so concurrent writers of one
path (several processes) never share one.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def replacing(path: str | Path, *, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path next to `path` (its folder created if missing) to write the new
    file to; it is renamed onto `path` when the block ends without an error, removed otherwise.
    `suffix` ends the temporary name, for writers that infer the format from it (".npz",
    ".png")."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp{suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str, *, sync: bool = False) -> Path:
    """Write `text` to `path` atomically; `sync`: flush it to the disk before the rename (a
    checkpoint's manifest that must survive a power cut). Returns the path."""
    with replacing(path) as tmp, open(tmp, "w") as fh:
        fh.write(text)
        if sync:
            fh.flush()
            os.fsync(fh.fileno())
    return Path(path)


def copy_file(source: str | Path, path: str | Path) -> Path:
    """Copy `source` to `path` atomically (a published copy is never half a file, whatever stops
    the copy); a source or target that cannot be used is one line (CatsimError) naming both.
    Returns the path."""
    import shutil

    import catsim.errors

    try:
        with replacing(path) as tmp:
            shutil.copyfile(source, tmp)
    except OSError as err:
        raise catsim.errors.CatsimError(f"cannot copy {source} to {path}: {err.strerror or err}") from None
    return Path(path)
