"""Test-suite settings.

* Hypothesis draws the same examples on every run (derandomize), so a property test passes or
  fails reproducibly on every machine and in CI instead of finding a new example now and then;
  widen `max_examples` locally to search harder.
* XLA compiles the suite's programs at LLVM optimisation level 0 (`TEST_XLA_FLAGS`, prepended to
  XLA_FLAGS before JAX is imported, so xdist workers and the subprocesses the tests start inherit
  it). The suite is compile-bound: a tiny model's RL update compiles in ≈ 1.7 s at level 0 against
  2.8 s, and the full suite took 897 s at the default level on a 2-core machine. XLA's HLO passes
  (fusion, layout, algebraic rewrites) run at every level; only the machine-code optimisation of
  the fused kernels is skipped, which changes how fast a kernel runs, not what it computes.
  Programs that set their own level keep it (the simulator's chunk program compiles at level 1,
  `catsim.sim.engine.CHUNK_COMPILER_OPTIONS`). CATSIM_TEST_XLA_OPT=default runs the suite at
  XLA's default level instead.
"""

import os

from hypothesis import settings

TEST_XLA_FLAGS = "--xla_backend_optimization_level=0"

if os.environ.get("CATSIM_TEST_XLA_OPT", "") != "default" and TEST_XLA_FLAGS not in os.environ.get(
        "XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{TEST_XLA_FLAGS} {os.environ.get('XLA_FLAGS', '')}".strip()

settings.register_profile("catsim", derandomize=True, deadline=None)
settings.load_profile("catsim")

