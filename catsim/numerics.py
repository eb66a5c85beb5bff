"""Numerical helpers shared across catsim."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax


@contextlib.contextmanager
def x64() -> Iterator[None]:
    """Enable JAX float64 inside a `with` block only (thread-local), restoring the caller's setting.

    catsim never flips `jax_enable_x64` globally behind a user's back; functions that need
    float64 wrap their JAX work (tracing and calling) in this context.
    """
    with jax.enable_x64(True):
        yield
