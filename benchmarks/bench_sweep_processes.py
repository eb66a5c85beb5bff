"""The Fig. 2 sweep (a reduced grid by default) as 2 `jax.distributed` processes × 1 core each
against 1 process × 2 cores, side by side: the two layouts alternate, `--repeat` times, each into
a fresh output folder, and the script prints the wall time of each run and their ratio.

    PYTHONPATH=. python benchmarks/bench_sweep_processes.py                  # N = 2, 64, 1024, 8192; 200 steps
    PYTHONPATH=. python benchmarks/bench_sweep_processes.py --n 2,4,8,16,32,64,128,256,512,1024,2048,4096,8192,16384,32768,65536,131072 --steps 1000 --repeat 1

* 1 process × 2 cores: `catsim sweep --cpu-devices 2` pinned to cores 0,1 (each cell's runs split
  over 2 host devices, `--shard`).
* 2 processes × 1 core: the same command with `--distributed --num-processes 2 --process-id I
  --cpu-devices 1`, process I pinned to core I (`taskset`); each computes its share of the cells
  (`catsim.sim.sweep_parts.cell_owners`), process 0 assembles after a barrier.

Both compile their programs afresh (CATSIM_NO_COMPILE_CACHE=1: what a new machine pays; the
2-process side compiles a program twice when its cells fall on both processes). Wall time of
the whole command, start-up included. On a shared machine read the ratio, with `uptime`'s load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _sweep(args, out: Path) -> list[str]:
    return [sys.executable, "-m", "catsim", "sweep", "--scenario", "paper", "--group-size", args.n,
            "--steps", str(args.steps), "--seeds", str(args.seeds), "--out", str(out),
            "--figures", str(out), "--no-progress"]


def one_process(args, out: Path, env) -> float:
    t0 = time.perf_counter()
    subprocess.run(["taskset", "-c", "0,1", *_sweep(args, out), "--cpu-devices", "2"], env=env,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def two_processes(args, out: Path, env) -> float:
    port = _free_port()
    t0 = time.perf_counter()
    procs = [subprocess.Popen(["taskset", "-c", str(i), *_sweep(args, out), "--cpu-devices", "1",
                               "--distributed", "--coordinator", f"localhost:{port}",
                               "--num-processes", "2", "--process-id", str(i)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in (0, 1)]
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"a process failed: exit codes {codes}")
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", default="2,64,1024,8192", help="group sizes (default: 2,64,1024,8192)")
    parser.add_argument("--steps", type=int, default=200, help="steps per run (default: 200)")
    parser.add_argument("--seeds", type=int, default=4, help="seeds (default: 4, as Fig. 2)")
    parser.add_argument("--repeat", type=int, default=2, help="rounds of both layouts (default: 2)")
    args = parser.parse_args()
    env = dict(os.environ, CATSIM_NO_COMPILE_CACHE="1")
    env.pop("XLA_FLAGS", None)
    root = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    print(f"grid N = {args.n}, γ = 0,1, {args.seeds} seeds, {args.steps} steps; load at start {_load()}")
    ones, twos = [], []
    try:
        for r in range(args.repeat):
            for name, fn, times in (("1 process x 2 cores", one_process, ones),
                                    ("2 processes x 1 core", two_processes, twos)):
                out = root / f"{name[0]}-{r}"
                seconds = fn(args, out, env)
                times.append(seconds)
                print(f"round {r}: {name}: {seconds:.1f} s (load {_load()})", flush=True)
                shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    a, b = statistics.median(ones), statistics.median(twos)
    print(f"median: 1 process x 2 cores {a:.1f} s, 2 processes x 1 core {b:.1f} s, "
          f"ratio (1 process / 2 processes) {a / b:.2f}; load at end {_load()}")


if __name__ == "__main__":
    main()
