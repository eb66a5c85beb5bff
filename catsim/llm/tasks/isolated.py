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

Memory: a worker may get a hard address-space limit (`RLIMIT_AS`, set in the worker before the
target is imported: a runaway allocation raises MemoryError there, which is an error answer), and is
recycled (stopped; the next call starts a fresh one) after `max_calls` answers or once its resident
set passes `max_rss_bytes`, so slow leaks in the verifier cannot accumulate.

`IsolatedPool` scores a batch on several such workers at once under one wall-clock budget for the
whole batch: what is not answered when the budget runs out is `UNSCORED`, never a hang.
"""

from __future__ import annotations

import atexit
import collections
import importlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from catsim.errors import CatsimError

STARTUP_SECONDS = 120.0  # generous: importing SymPy on a busy CPU can take several seconds
_ADDRESS_SPACE_ENV = "CATSIM_ISOLATED_ADDRESS_SPACE"  # the worker's RLIMIT_AS in bytes (unset: none)


class StartTimeout(CatsimError):
    """The worker gave no ready answer within the start-up time it was given."""


class IsolatedFunction:
    """`call(*args)` runs `target(*args)` in a worker process; `TIMED_OUT` when it ran past `deadline`.

    `target` is "module:function"; arguments and the result must be JSON-serialisable. Thread safe
    (calls are serialised). When the target raises, the call returns an `IsolatedError` (a str
    holding the one-line message) instead of raising, so untrusted input cannot crash the caller.
    """

    def __init__(self, target: str, deadline: float, *, max_calls: int = 0, max_rss_bytes: int = 0,
                 address_space_bytes: int = 0) -> None:
        if ":" not in target:
            raise CatsimError(f"target must be 'module:function', got {target!r}")
        if not deadline > 0:
            raise CatsimError(f"deadline must be positive, got {deadline}")
        if min(max_calls, max_rss_bytes, address_space_bytes) < 0:
            raise CatsimError("max_calls, max_rss_bytes and address_space_bytes must be >= 0 (0: no limit)")
        self.target = target
        self.deadline = float(deadline)
        self.max_calls = int(max_calls)  # answers before the worker is recycled (0: never)
        self.max_rss_bytes = int(max_rss_bytes)  # resident set past which it is recycled (0: never)
        self.address_space_bytes = int(address_space_bytes)  # the worker's RLIMIT_AS (0: none)
        self.kills = 0  # workers killed for running past the deadline (a diagnostic)
        self.recycles = 0  # workers stopped for their call count or memory (a diagnostic)
        self._proc: subprocess.Popen | None = None
        self._calls = 0  # answers given by the current worker
        self._lock = threading.Lock()
        self._buffer = b""
        atexit.register(self.close)

    def call(self, *args: Any, deadline: float | None = None) -> Any:
        """`target(*args)` in the worker; `deadline` (seconds) overrides the default for this call."""
        request = (json.dumps(list(args)) + "\n").encode()
        with self._lock:
            proc = self._ensure_worker(STARTUP_SECONDS)
            try:
                proc.stdin.write(request)
                proc.stdin.flush()
            except (BrokenPipeError, OSError):  # the worker died between calls: start over once
                self._kill()
                proc = self._ensure_worker(STARTUP_SECONDS)
                proc.stdin.write(request)
                proc.stdin.flush()
            answer = self._read_line(proc, self.deadline if deadline is None else max(deadline, 0.0))
            if answer is None:
                self.kills += 1
                self._kill()
                return TIMED_OUT
            self._calls += 1
            if (self.max_calls and self._calls >= self.max_calls) or (
                    self.max_rss_bytes and _rss_bytes(proc.pid) > self.max_rss_bytes):
                self.recycles += 1
                self._kill()
        if "error" in answer:
            return IsolatedError(answer["error"])
        return answer["ok"]

    @property
    def running(self) -> bool:
        proc = self._proc
        return proc is not None and proc.poll() is None

    def abort(self) -> None:
        """Kill the worker now, from any thread: a call in progress returns `TIMED_OUT` at once."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()

    def start(self, timeout: float = STARTUP_SECONDS) -> None:
        """Start the worker now (otherwise the first call does), so its start-up is not on a deadline.

        Raises `StartTimeout` when it is not ready within `timeout` seconds."""
        with self._lock:
            self._ensure_worker(timeout)

    def close(self) -> None:
        with self._lock:
            self._kill()

    def _ensure_worker(self, timeout: float) -> subprocess.Popen:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._kill()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop(_ADDRESS_SPACE_ENV, None)
        if self.address_space_bytes:
            env[_ADDRESS_SPACE_ENV] = str(self.address_space_bytes)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "catsim.llm.tasks.isolated", self.target],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
        )
        self._calls = 0
        t0 = time.monotonic()
        ready = self._read_line(self._proc, timeout)
        if not ready or not ready.get("ready"):
            self._kill()
            if ready:
                raise CatsimError(f"worker for {self.target} did not start: {ready.get('error', 'no answer')}")
            if time.monotonic() - t0 < timeout:  # the pipe closed early: the worker died starting
                raise CatsimError(f"worker for {self.target} did not start: it exited before answering")
            raise StartTimeout(f"worker for {self.target} did not start: no answer within {timeout:.0f} s")
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


class _Unscored:
    def __repr__(self) -> str:
        return "UNSCORED"


UNSCORED = _Unscored()  # what `IsolatedPool.map` gives a request the batch budget left unanswered


@dataclass(frozen=True)
class BatchAnswers:
    """What `IsolatedPool.map` returns."""

    values: list  # per request: the answer, an IsolatedError, TIMED_OUT or UNSCORED
    unscored: int  # requests not answered when the budget ran out (never started, or cut off)
    timed_out: int  # requests killed at their own per-call deadline
    seconds: float  # wall time of the batch, worker start-ups before the budget clock included


class IsolatedPool:
    """`map(requests, budget)` runs `target(*request)` for a batch on `workers` killable workers.

    Each request has the per-call `deadline`; the batch as a whole has `budget` seconds from the
    moment every worker is ready. A request still running when the budget ends is cut off (its
    worker killed) and, like every request not started by then, is `UNSCORED`. Killed and recycled
    workers are started again (within the budget during a batch, before the clock otherwise).
    """

    def __init__(self, target: str, deadline: float, *, workers: int = 2, max_calls: int = 0,
                 max_rss_bytes: int = 0, address_space_bytes: int = 0) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise CatsimError(f"workers must be a positive integer, got {workers!r}")
        self.workers = [IsolatedFunction(target, deadline, max_calls=max_calls, max_rss_bytes=max_rss_bytes,
                                         address_space_bytes=address_space_bytes) for _ in range(workers)]
        self.deadline = float(deadline)
        self._lock = threading.Lock()  # one batch at a time

    @property
    def kills(self) -> int:
        return sum(w.kills for w in self.workers)

    @property
    def recycles(self) -> int:
        return sum(w.recycles for w in self.workers)

    def start(self) -> None:
        """Start every stopped worker (in parallel); a worker that cannot start is a CatsimError."""
        errors: list[BaseException] = []

        def start_one(worker: IsolatedFunction) -> None:
            try:
                worker.start()
            except CatsimError as err:
                errors.append(err)

        threads = [threading.Thread(target=start_one, args=(w,), daemon=True)
                   for w in self.workers if not w.running]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def map(self, requests: list[tuple], budget: float) -> BatchAnswers:
        if not budget > 0:
            raise CatsimError(f"batch budget must be positive, got {budget}")
        with self._lock:
            t0 = time.monotonic()
            if not requests:
                return BatchAnswers([], 0, 0, 0.0)
            self.start()
            end = time.monotonic() + budget
            values: list = [UNSCORED] * len(requests)
            todo = collections.deque(range(len(requests)))
            timed_out = [0]
            errors: list[CatsimError] = []
            take = threading.Lock()

            def serve(worker: IsolatedFunction) -> None:
                while True:
                    with take:
                        if not todo or time.monotonic() >= end:
                            return
                        i = todo.popleft()
                    try:
                        if not worker.running:  # killed or recycled earlier in this batch
                            worker.start(timeout=end - time.monotonic())
                        left = end - time.monotonic()
                        answer = worker.call(*requests[i], deadline=min(self.deadline, left))
                    except StartTimeout:
                        return  # the budget ran out while a fresh worker started
                    except CatsimError as err:  # a worker that cannot start at all
                        errors.append(err)
                        return
                    except OSError:  # a fresh worker died before taking the request: left unscored
                        return
                    if answer is TIMED_OUT and left < self.deadline:
                        return  # cut off by the budget: the request stays UNSCORED
                    timed_out[0] += answer is TIMED_OUT
                    values[i] = answer

            threads = [threading.Thread(target=serve, args=(w,), daemon=True) for w in self.workers]
            try:
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(max(end - time.monotonic(), 0.0) + 5.0)
            finally:
                for w, t in zip(self.workers, threads):
                    if t.is_alive():  # blocked past the budget (should not happen): kill its worker
                        w.abort()
                        t.join()
            if errors:
                raise errors[0]
            unscored = sum(v is UNSCORED for v in values)
            return BatchAnswers(values, unscored, timed_out[0], time.monotonic() - t0)

    def close(self) -> None:
        for w in self.workers:
            w.close()


def _rss_bytes(pid: int) -> int:
    """Resident set size of process `pid` (Linux /proc; 0 where it cannot be read)."""
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _serve(target: str) -> None:
    out = sys.stdout
    limit = os.environ.get(_ADDRESS_SPACE_ENV)
    if limit:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (int(limit), int(limit)))
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
