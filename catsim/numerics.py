"""Numerical helpers shared across catsim."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax


@contextlib.contextmanager
def x64() -> Iterator[None]:
    """Enable JAX float64 inside a `with` block only, restoring the caller's setting after.

    catsim never flips `jax_enable_x64` globally behind a user's back; functions that need
    float64 wrap their JAX work in this context.
    """
    previous = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", previous)
