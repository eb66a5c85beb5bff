"""Atomic text files for the experiments' outputs (a reader never sees half a file): the
project-wide writer of `catsim.files`."""

from __future__ import annotations

from catsim.files import write_text

__all__ = ["write_text"]
