"""Update programs for the completion widths a run has not used yet, compiled in the background.

A training batch is cut to the longest completion rounded up to one of a few widths
(`step.completion_widths`), one compiled update per width. The first batch of a new width used to
stop the run while its update was traced, lowered and compiled (or loaded from the persistent
cache: on the CPU ≈ 0.5–0.8 s for the maze model, paid mid-run, once per width and process).
`UpdatePrograms` compiles the update for every other width ahead of time, on one background
thread, as soon as the run's first update shows the batch layout; a later batch of that width runs
the compiled program (`jax.stages.Compiled`, the same program the jitted function would compile:
identical results). Shapes derive from the first batch: every array except the `prompt_*` ones
has the completion along its last axis (`step.build_batch`, `step.shared_prompt_batch`).
"""

from __future__ import annotations

import concurrent.futures
import threading

import jax

from catsim.llm.rl.step import completion_widths


def _spec(a) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=getattr(a, "sharding", None))


class UpdatePrograms:
    """`fns.update` with the programs of the other completion widths compiled in the background.

    Call `program(params, opt_state, batch, tau, width)` with the placed mini-batch of completion
    width `width`: it returns the compiled program of that width when the background thread has
    it (waiting for one under way rather than compiling it twice), else the jitted function, and
    after the first call it starts compiling the other widths. `close()` drops the programs not
    started and waits for the one under way, so no compilation outlives the run.
    `background=False` compiles nothing ahead (the jitted function every time).
    """

    def __init__(self, update_fn, max_new_tokens: int, background: bool = True):
        self.update_fn = update_fn
        self.widths = completion_widths(max_new_tokens)
        self.background = background
        self._futures: dict[tuple, concurrent.futures.Future] = {}
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.compiled_widths: list[int] = []  # what the background thread finished, in order

    @staticmethod
    def signature(batch: dict) -> tuple:
        return tuple(sorted((k, tuple(v.shape), str(v.dtype)) for k, v in batch.items()))

    def program(self, params, opt_state, batch: dict, tau, width: int):
        if not self.background:
            return self.update_fn
        future = self._futures.get(self.signature(batch))
        if self._pool is None:
            self._start(params, opt_state, batch, tau, width)
        if future is None:
            return self.update_fn
        try:
            return future.result()
        except Exception:  # noqa: BLE001 — a failed ahead-of-time compile: the jitted path decides
            return self.update_fn

    def _start(self, params, opt_state, batch: dict, tau, width: int) -> None:
        """Submit the other widths' programs, from abstract copies of this call's arguments."""
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="catsim-compile")
        params_s, opt_s = jax.tree.map(_spec, params), jax.tree.map(_spec, opt_state)
        tau_s = _spec(tau) if hasattr(tau, "shape") else tau
        # the width nearest the current one first: the likeliest next batch
        for other in sorted((w for w in self.widths if w != width), key=lambda w: abs(w - width)):
            shift = other - width
            batch_s = {k: v if k.startswith("prompt_") else jax.ShapeDtypeStruct(
                           (*v.shape[:-1], v.shape[-1] + shift), v.dtype, sharding=v.sharding)
                       for k, v in ((k, _spec(a)) for k, a in batch.items())}
            if min(s.shape[-1] for s in batch_s.values()) < 1:
                continue
            self._futures[self.signature(batch_s)] = self._pool.submit(
                self._compile, other, params_s, opt_s, batch_s, tau_s)

    def _compile(self, width, params_s, opt_s, batch_s, tau_s):
        compiled = self.update_fn.lower(params_s, opt_s, batch_s, tau_s).compile()
        with self._lock:
            self.compiled_widths.append(width)
        return compiled

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
