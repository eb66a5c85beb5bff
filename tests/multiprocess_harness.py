"""Launch a worker script as 2 `jax.distributed` processes × 2 host CPU devices (the multi-process
tests). The workers find each other through a coordinator on a free localhost port (CPU
collectives across processes: gloo, JAX's default); each writes its output to worker-<pid>.log and
prints WORKER-OK as its last act."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

TESTS = Path(__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def launch(script: str, tmp_path: Path, pid: int, port: int, devices: int = 2) -> subprocess.Popen:
    """Run `script` (argv: pid, port, tmp_path) as process `pid` with `devices` host CPU devices."""
    flags = os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
    env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([str(TESTS.parent), str(TESTS), os.environ.get("PYTHONPATH", "")]))
    with open(tmp_path / f"worker-{pid}.log", "w") as log:
        return subprocess.Popen([sys.executable, "-c", script, str(pid), str(port), str(tmp_path)], env=env,
                                stdout=log, stderr=subprocess.STDOUT)


def launch_pair(script: str, tmp_path: Path) -> dict:
    """Processes 0 and 1 of one job."""
    port = free_port()
    return {pid: launch(script, tmp_path, pid, port) for pid in (0, 1)}


def wait_all(procs: dict, tmp_path: Path, timeout: float = 600) -> None:
    """Wait for every worker (killing those left at the timeout); fail with their logs' tails
    unless each exited 0 after printing WORKER-OK."""
    deadline = time.monotonic() + timeout
    try:
        for proc in procs.values():
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    report = []
    for name, proc in procs.items():
        text = (tmp_path / f"worker-{name}.log").read_text()
        if proc.returncode != 0 or "WORKER-OK" not in text:
            report.append(f"--- worker {name} exit {proc.returncode}:\n{text[-3000:]}")
    assert not report, "\n".join(report)
