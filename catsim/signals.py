"""SIGTERM (a cluster's preemption signal) as a clean stop at a step boundary.

The `catsim` command installs `on_sigterm`. Outside a training step it raises `Terminated` (a
KeyboardInterrupt, so every Ctrl-C path applies). Inside `defer_termination()` — the body of one
SFT or RL step, whose buffers may be donated to the compiled update — it only marks the stop as
pending; the loop calls `check()` at the end of the step, where the state and the log agree, and
`Terminated` is raised there, so the state that is saved is the state of the last logged step.
"""

from __future__ import annotations

import contextlib

_STATE = {"defer": 0, "pending": False}


class Terminated(KeyboardInterrupt):
    """The process received SIGTERM."""


def on_sigterm(signum, frame) -> None:
    if _STATE["defer"]:
        _STATE["pending"] = True
        return
    raise Terminated()


@contextlib.contextmanager
def defer_termination():
    """Inside: SIGTERM waits for `check()`."""
    _STATE["defer"] += 1
    try:
        yield
    finally:
        _STATE["defer"] -= 1


def check() -> None:
    """Raise `Terminated` if a SIGTERM arrived during a deferred section."""
    if _STATE["pending"]:
        _STATE["pending"] = False
        raise Terminated()
