"""`catsim sweep --distributed` with 2 `jax.distributed` processes × 2 host CPU devices
(`multiprocess_harness`): each process computes its share of the cells into the shared --out,
process 0 assembles. The first job's process 1 dies after its first cell (process 0 is then
killed at the barrier); the rerun recomputes only that process's missing cell, leaves every cell
present untouched, and assembles results bit-identical to a one-process sweep of the same cells
here (`--no-shard` in both, so every cell runs on one device in the same layout). ~30 s.
"""

from __future__ import annotations

import dataclasses
import textwrap
import time

import numpy as np
from multiprocess_harness import launch_pair, wait_all
from test_sim_sweep_parts import ARGS, CONFIG, GAMMAS, SEEDS, SIZES

from catsim.sim import sweep as S
from catsim.sim import sweep_parts
from catsim.sim.results import SimResults

WORKER = textwrap.dedent("""
    import sys
    from pathlib import Path
    pid, port, root = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    crash = {crash!r} and pid == 1
    if crash:  # process 1 dies right after writing its first cell
        import os
        from catsim.sim.results import SimResults
        save = SimResults.save
        def dying_save(self, path):
            out = save(self, path)
            if "cells" in str(path):
                os._exit(3)
            return out
        SimResults.save = dying_save
    from catsim.cli.main import main
    code = main(["sweep", *{args!r}, "--out", str(root / "out"), "--no-shard", "--no-progress",
                 "--distributed", "--coordinator", f"localhost:{{port}}", "--num-processes", "2",
                 "--process-id", str(pid)])
    assert code == 0, code
    print("WORKER-OK", pid, flush=True)
""")


def test_two_processes_crash_resume_equal_one_process(tmp_path):
    owners = sweep_parts.cell_owners([dataclasses.replace(CONFIG, group_size=n) for n in SIZES], 2)
    assert sorted(set(owners)) == [0, 1]
    cells = tmp_path / "out" / "cells"
    procs = launch_pair(WORKER.format(crash=True, args=ARGS), tmp_path)
    procs[1].wait(timeout=300)
    assert procs[1].returncode == 3
    mine0 = [cells / f"{CONFIG.method_label}_n{n}.npz" for n, o in zip(SIZES, owners) if o == 0]
    deadline = time.monotonic() + 120
    while not all(p.exists() for p in mine0) and time.monotonic() < deadline:
        time.sleep(0.5)
    procs[0].kill()
    procs[0].wait()
    done = sorted(cells.glob("*.npz"))
    assert len(done) == len(mine0) + 1  # process 1's first cell, then nothing more
    before = {p.name: p.stat().st_mtime_ns for p in done}

    # the reference while nothing else runs here: one process, one device, the same cells
    ref = S.sweep(CONFIG, tmp_path / "ref", group_sizes=SIZES, gammas=GAMMAS, seeds=SEEDS, progress=False)

    procs = launch_pair(WORKER.format(crash=False, args=ARGS), tmp_path)
    wait_all(procs, tmp_path, timeout=300)
    logs = {pid: (tmp_path / f"worker-{pid}.log").read_text() for pid in (0, 1)}
    assert f"part 0/2: {len(mine0)} of {len(SIZES)} cells are this part's, 0 to compute" in logs[0]
    assert f"part 1/2: {len(SIZES) - len(mine0)} of {len(SIZES)} cells are this part's, 1 to compute" in logs[1]
    assert {p.name: p.stat().st_mtime_ns for p in done} == before  # never recomputed
    assert "results:" in logs[0] and "results:" not in logs[1]  # process 0 assembled, alone
    got = SimResults.load(tmp_path / "out" / "results.npz")
    assert got.group_sizes == ref.group_sizes and got.seeds == ref.seeds
    for name in ref.data:
        np.testing.assert_array_equal(got.data[name], ref.data[name])  # bit-identical
    assert (tmp_path / "out" / "table.txt").exists() and list((tmp_path / "out").glob("fig2_*.png"))
