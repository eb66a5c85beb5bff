"""Test-suite settings.

* Hypothesis draws the same examples on every run (derandomize), so a property test passes or
  fails reproducibly on every machine and in CI instead of finding a new example now and then;
  widen `max_examples` locally to search harder.
* XLA compiles the suite's programs at LLVM optimisation level 0 (`TEST_XLA_FLAGS`, prepended to
  XLA_FLAGS before JAX is imported, so xdist workers and the subprocesses the tests start inherit
  it). The suite is compile-bound: a tiny model's RL update compiles in ≈ 1.7 s at level 0 against
  2.8 s; the full suite took 638 s against 897 s at the default level (2-core machine, 964
  passed both). XLA's HLO passes (fusion, layout, algebraic rewrites) run at every level; what
  level 0 skips is LLVM's optimisation of the fused kernels, which changes float32 results in the
  last bits (fused multiply-adds, the order of vectorised sums: up to 1e-6 relative seen on
  elementwise maths and sums of 1e5 terms) — the kind of difference another CPU makes, which the
  suite's tolerances must allow anyway. The flag also wins over a program's own
  `compiler_options` level (measured: a program jitted with level 1 under it gave level-0 bits),
  so the simulator's chunk program (level 1 for users, `catsim.sim.engine.CHUNK_COMPILER_OPTIONS`)
  runs at level 0 here too, and tests of published numbers hold at their stated tolerances, not
  bit for bit. CATSIM_TEST_XLA_OPT=default runs the suite at XLA's default level.
* After each test module JAX's compilation caches are cleared (`_release_compiled_programs`): an
  xdist worker otherwise keeps every program the suite compiled, and its resident memory grew to
  6.3 GB by the suite's end; with the clearing it peaks at 2.8 GB, and the suite takes no longer
  (2-core machine, 2026-12-05).
"""

import gc
import os
import sys

import pytest
from hypothesis import settings

TEST_XLA_FLAGS = "--xla_backend_optimization_level=0"

if os.environ.get("CATSIM_TEST_XLA_OPT", "") != "default" and TEST_XLA_FLAGS not in os.environ.get(
        "XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{TEST_XLA_FLAGS} {os.environ.get('XLA_FLAGS', '')}".strip()

settings.register_profile("catsim", derandomize=True, deadline=None)
settings.load_profile("catsim")


@pytest.fixture(scope="module", autouse=True)
def _release_compiled_programs():
    """Drop the module's compiled programs once its tests are done (see the module docstring)."""
    yield
    if "jax" in sys.modules:
        sys.modules["jax"].clear_caches()
        gc.collect()
