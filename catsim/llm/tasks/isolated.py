"""Run a function on untrusted input in a separate, killable worker process.

Signal-based time limits (math-verify's own `timeout_seconds`) only work in the main thread and
cannot interrupt long C-level work: a completion such as `\\boxed{9^{9^{9^{9^{9}}}}}` can keep
SymPy busy far past the alarm, and the alarm exception may even be swallowed by a callback. A
worker process can always be killed. `IsolatedFunction` keeps one worker alive (started with
`sys.executable -m catsim.llm.tasks.isolated module:function`, so no `fork` of a JAX process and
no re-import of the caller's `__main__`), sends it one JSON request per call over a pipe, and waits
at most `deadline` seconds for the answer; past that, the worker is killed (SIGKILL), the call
returns `TIMED_OUT`, and the next call starts a fresh worker.

Wire format, one JSON line each way: request `[arg, ...]`; answer `{"ok": value}` or
`{"error": "one line"}`. The worker answers `{"ready": true}` once the target is imported.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from typing import Any

from catsim.errors import CatsimError

STARTUP_SECONDS = 120.0  # generous: importing SymPy on a busy CPU can take several seconds


class IsolatedFunction:
    """`call(*args)` runs `target(*args)` in a worker process; `TIMED_OUT` when it ran past `deadline`.

    `target` is "module:function"; arguments and the result must be JSON-serialisable. Thread safe
    (calls are serialised). When the target raises, the call returns an `IsolatedError` (a str
    holding the one-line message) instead of raising, so untrusted input cannot crash the caller.
    """

    def __init__(self, target: str, deadline: float) -> None:
        if ":" not in target:
            raise CatsimError(f"target must be 'module:function', got {target!r}")
        if not deadline > 0:
            raise CatsimError(f"deadline must be positive, got {deadline}")
        self.target = target
        self.deadline = float(deadline)
        self.kills = 0  # workers killed for running past the deadline (a diagnostic)
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._buffer = b""
        atexit.register(self.close)

    def call(self, *args: Any) -> Any:
        request = (json.dumps(list(args)) + "\n").encode()
        with self._lock:
            proc = self._ensure_worker()
            try:
                proc.stdin.write(request)
                proc.stdin.flush()
            except (BrokenPipeError, OSError):  # the worker died between calls: start over once
                self._kill()
                proc = self._ensure_worker()
                proc.stdin.write(request)
                proc.stdin.flush()
            answer = self._read_line(proc, self.deadline)
            if answer is None:
                self.kills += 1
                self._kill()
                return TIMED_OUT
        if "error" in answer:
            return IsolatedError(answer["error"])
        return answer["ok"]

    def start(self) -> None:
        """Start the worker now (otherwise the first call does), so its start-up is not on a deadline."""
        with self._lock:
            self._ensure_worker()

    def close(self) -> None:
        with self._lock:
            self._kill()

    def _ensure_worker(self) -> subprocess.Popen:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._kill()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "catsim.llm.tasks.isolated", self.target],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
        )
        ready = self._read_line(self._proc, STARTUP_SECONDS)
        if not ready or not ready.get("ready"):
            self._kill()
            detail = ready.get("error", "no answer") if ready else f"no answer within {STARTUP_SECONDS:.0f} s"
            raise CatsimError(f"worker for {self.target} did not start: {detail}")
        return self._proc

    def _read_line(self, proc: subprocess.Popen, timeout: float) -> dict | None:
        end = time.monotonic() + timeout
        fd = proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = end - time.monotonic()
            if left <= 0:
                return None
            readable, _, _ = select.select([fd], [], [], left)
            if not readable:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:  # the worker exited (crashed, killed by the OS)
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError:
            return None

    def _kill(self) -> None:
        proc, self._proc, self._buffer = self._proc, None, b""
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


class IsolatedError(str):
    """The target raised; the string is its one-line message."""


class _TimedOut:
    def __repr__(self) -> str:
        return "TIMED_OUT"


TIMED_OUT = _TimedOut()  # what `call` returns when the worker ran past its deadline and was killed


def _serve(target: str) -> None:
    out = sys.stdout
    try:
        module, name = target.split(":", 1)
        fn = getattr(importlib.import_module(module), name)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises CatsimError
        out.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
        out.flush()
        return
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            answer = {"ok": fn(*json.loads(line))}
        except Exception as exc:  # noqa: BLE001 - untrusted input: report, keep serving
            answer = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:500]}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    _serve(sys.argv[1])
