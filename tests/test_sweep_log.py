"""`catsim sweep` logs one record per cell through the metrics writer (JSONL, TensorBoard)."""

import json

import numpy as np
import pytest

from catsim.cli.main import main
from catsim.sim.results import SimResults

SMALL = ["sweep", "--group-size", "2,4", "--seeds", "1", "--steps", "20", "--num-actions", "300",
         "--num-correct", "40", "--no-progress"]


def test_sweep_log_has_one_record_per_cell_and_mirrors_to_tensorboard(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "sw"
    args = SMALL + ["--out", str(out), "--figures", str(tmp_path)]
    assert main(args + ["--log-to", "tensorboard"]) == 0
    records = [json.loads(line) for line in (out / "sweep_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2] and [r["group_size"] for r in records] == [2, 4]
    res = SimResults.load(out / "results.npz")
    for r, n in zip(records, (2, 4)):
        for g in (0.0, 1.0):
            want = float(np.mean(res.sel("mret", gamma=g, n=n)[..., -1]))
            assert r[f"mret/gamma={g:g}"] == pytest.approx(want, rel=1e-6)
        assert r["seconds"] > 0
    from tensorboard.util import tensor_util

    acc = EventAccumulator(str(out / "tensorboard"), size_guidance={"tensors": 0})
    acc.Reload()
    events = acc.Tensors("catsim/mret/gamma=1")  # TensorBoard's own writer stores scalars as tensors
    assert [e.step for e in events] == [1, 2]
    assert float(tensor_util.make_ndarray(events[1].tensor_proto)) == pytest.approx(
        records[1]["mret/gamma=1"], rel=1e-6)
    # a resumed sweep reuses the cells and logs them again (no run time), after the first call's
    # records: the log is appended, not replaced (before, the second call's records replaced them)
    assert main(args) == 0
    again = [json.loads(line) for line in (out / "sweep_log.jsonl").read_text().splitlines()]
    assert again[:2] == records
    assert [r["step"] for r in again] == [1, 2, 3, 4] and [r["seconds"] for r in again[2:]] == [None, None]
    assert again[2]["mret/gamma=0"] == records[0]["mret/gamma=0"]
