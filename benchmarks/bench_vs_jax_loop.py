"""catsim against the straightforward JAX loop (`jax_loop_baseline.py`), as a user runs each.

Every cell runs twice, back to back, each side in a fresh process (start-up and compilation
included): `catsim simulate --group-size N --gamma 0,1 --seeds 4 --steps T --format json` and
`python benchmarks/jax_loop_baseline.py --n N --steps T`. It prints both wall times, the ratio
(loop time ÷ catsim time: > 1 means catsim is faster) and the two sides' final Qpos / Mret
(mean over the 8 runs, and the largest per-run difference: both draw step t's uniforms from
fold_in(key(seed), t), so they follow the same random stream up to float32 rounding).

    PYTHONPATH=. python benchmarks/bench_vs_jax_loop.py                 # the issue's four cells
    PYTHONPATH=. python benchmarks/bench_vs_jax_loop.py --cells fig2    # every Fig. 2 N, 1000 steps
    PYTHONPATH=. python benchmarks/bench_vs_jax_loop.py --cells 8:1000,131072:300 --repeat 3
    PYTHONPATH=. python benchmarks/bench_vs_jax_loop.py --full-grid     # `catsim sweep` vs loop grid
    PYTHONPATH=. python benchmarks/bench_vs_jax_loop.py --full-grid --repeat 3  # best of 3 each
    PYTHONPATH=. python benchmarks/bench_vs_jax_loop.py --full-grid --keep /tmp/grid  # + its table
    PYTHONPATH=. python benchmarks/bench_vs_jax_loop.py --platform cuda # both sides on a GPU

`--platform` sets JAX_PLATFORMS for both processes (cpu, cuda, tpu). On a shared machine read the
ratios, not the times; `--repeat` alternates the two sides and reports the best time of each.
CPU seconds (user + system of each process) are printed too: catsim spreads its runs over one
host device per core, so its wall time can be below its CPU time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ISSUE_CELLS = "8:1000,1024:1000,131072:300,8+1024+131072:300"
FIG2_SIZES = tuple(2**k for k in range(1, 18))


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(cmd: list[str], env: dict) -> tuple[float, float, list[dict]]:
    """(wall s, CPU s of the process, its JSON lines)."""
    t0, c0 = time.perf_counter(), _cpu_children()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    seconds, cpu = time.perf_counter() - t0, _cpu_children() - c0
    if proc.returncode:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return seconds, cpu, rows


def _summary(rows: list[dict]) -> dict:
    return {(r["n"], float(r["gamma"]), r["seed"]): (r["qpos"], r["mret"]) for r in rows}


def _compare(a: dict, b: dict) -> str:
    if set(a) != set(b):
        return "runs differ!"
    qa = sum(v[0] for v in a.values()) / len(a)
    qb = sum(v[0] for v in b.values()) / len(b)
    ma = sum(v[1] for v in a.values()) / len(a)
    mb = sum(v[1] for v in b.values()) / len(b)
    dq = max(abs(a[k][0] - b[k][0]) for k in a)
    dm = max(abs(a[k][1] - b[k][1]) for k in a)
    return (f"Qpos {qa:.5f}/{qb:.5f} Mret {ma:.5f}/{mb:.5f} "
            f"(max run diff {dq:.1e}/{dm:.1e})")


def cell_commands(sizes: str, steps: int) -> tuple[list[str], list[str]]:
    catsim = [sys.executable, "-m", "catsim", "simulate", "--group-size", sizes, "--gamma", "0,1",
              "--seeds", "4", "--steps", str(steps), "--format", "json"]
    loop = [sys.executable, str(HERE / "jax_loop_baseline.py"), "--n", sizes,
            "--steps", str(steps)]
    return catsim, loop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default=ISSUE_CELLS,
                        help="N:steps list, N may be a+b+c (several N in one process); 'fig2' = "
                             "every Fig. 2 N with 1000 steps")
    parser.add_argument("--repeat", type=int, default=1, help="runs per side (best time kept)")
    parser.add_argument("--full-grid", action="store_true",
                        help="instead: default `catsim sweep` vs the loop's full grid")
    parser.add_argument("--keep", default=None,
                        help="--full-grid: keep the sweep's output (table, figure) in this folder")
    parser.add_argument("--platform", default=None, help="JAX_PLATFORMS for both sides (cuda…)")
    args = parser.parse_args()

    env = dict(os.environ)
    env.setdefault("PYTHONPATH", str(HERE.parent))
    if args.platform:
        env["JAX_PLATFORMS"] = args.platform
    print(f"cpus {os.cpu_count()}, load average {os.getloadavg()}, platform "
          f"{args.platform or 'default'}", flush=True)

    if args.full_grid:
        with tempfile.TemporaryDirectory() as tmp:
            out = args.keep or tmp
            catsim = [sys.executable, "-m", "catsim", "sweep", "--out", f"{out}/sweep",
                      "--figures", f"{out}/fig", "--no-progress", "--no-resume"]
            loop = [sys.executable, str(HERE / "jax_loop_baseline.py"), "--full-grid"]
            loops, cats = [], []
            for _ in range(args.repeat):  # alternating; the best wall time of each side is kept
                loops.append(_run(loop, env)[:2])
                cats.append(_run(catsim, env)[:2])
        (t_loop, c_loop), (t_cat, c_cat) = min(loops), min(cats)
        print(f"full grid: catsim sweep {t_cat:.1f} s ({c_cat:.1f} s CPU), loop {t_loop:.1f} s "
              f"({c_loop:.1f} s CPU), loop ÷ catsim = {t_loop / t_cat:.2f}x wall, "
              f"{c_loop / c_cat:.2f}x CPU; load average {os.getloadavg()}")
        if args.repeat > 1:
            print("  every run (wall s): catsim " + ", ".join(f"{t:.1f}" for t, _ in cats)
                  + "; loop " + ", ".join(f"{t:.1f}" for t, _ in loops))
        return

    cells = ([(str(n), 1000) for n in FIG2_SIZES] if args.cells == "fig2" else
             [(c.split(":")[0].replace("+", ","), int(c.split(":")[1]))
              for c in args.cells.split(",")])
    print(f"{'N':>18} {'steps':>5} | {'catsim s':>8} | {'loop s':>7} | {'loop÷catsim':>11} | "
          f"{'CPU s catsim/loop':>17} | final means catsim/loop")
    for sizes, steps in cells:
        catsim, loop = cell_commands(sizes, steps)
        t_cat = t_loop = c_cat = c_loop = float("inf")
        for _ in range(args.repeat):
            t, c, loop_rows = _run(loop, env)
            t_loop, c_loop = min(t_loop, t), min(c_loop, c)
            t, c, cat_rows = _run(catsim, env)
            t_cat, c_cat = min(t_cat, t), min(c_cat, c)
        cpu = f"{c_cat:.1f}/{c_loop:.1f}"
        print(f"{sizes:>18} {steps:>5} | {t_cat:>8.2f} | {t_loop:>7.2f} | "
              f"{t_loop / t_cat:>10.2f}x | {cpu:>17} | "
              f"{_compare(_summary(cat_rows), _summary(loop_rows))}", flush=True)
    print(f"load average at end {os.getloadavg()}")


if __name__ == "__main__":
    main()
