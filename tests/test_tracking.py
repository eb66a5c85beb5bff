"""catsim.tracking: what the JSONL log, the TensorBoard event files and the W&B run hold, under which
grouped tags, and the W&B run's project, entity and mode."""

from __future__ import annotations

import json
import math
import os
import socket
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from catsim.cli.main import _ArgumentParser
from catsim.errors import CatsimError
from catsim.tracking import (
    LogTo,
    MetricsWriter,
    add_log_to_argument,
    grouped,
    jsonable,
    parse_log_to,
    read_records,
    scalars,
)


def _record(step: int) -> dict:
    return {"step": step, "loss": 1.0 / step, "reward": np.float32(0.25 * step),
            "kept": np.int64(step), "eval": {"acc": 0.1 * step}, "warnings": ["w"],
            "heldout_accuracy": None, "label": "f-grpo", "finished": True, "kl": math.nan}


# --- JSONL -----------------------------------------------------------------------------------


def test_jsonl_one_plain_line_per_record_flushed_as_written(tmp_path):
    with MetricsWriter(tmp_path, "log.jsonl") as writer:
        written = writer.write(_record(1))
        lines = (tmp_path / "log.jsonl").read_text().splitlines()  # readable before close
        assert len(lines) == 1
        writer.write({"step": 2, "loss": math.inf, "grad": -math.inf, "x": np.array(2.5)})
    lines = (tmp_path / "log.jsonl").read_text().splitlines()
    first, second = (json.loads(line) for line in lines)
    assert first == written == {
        "step": 1, "loss": 1.0, "reward": 0.25, "kept": 1, "eval": {"acc": 0.1},
        "warnings": ["w"], "heldout_accuracy": None, "label": "f-grpo", "finished": True,
        "kl": None}
    assert type(first["kept"]) is int and type(first["reward"]) is float
    assert second == {"step": 2, "loss": None, "grad": None, "x": 2.5}
    assert "NaN" not in lines[0] and "Infinity" not in lines[1]
    # the same text json.dumps gives for the same plain record (logs stay byte-comparable)
    assert lines[0] == json.dumps(first)


def test_steps_must_increase_and_be_integers(tmp_path):
    with MetricsWriter(tmp_path) as writer:
        writer.write({"step": 3, "loss": 1.0})
        with pytest.raises(CatsimError, match="not after the last step 3"):
            writer.write({"step": 3, "loss": 0.5})
        with pytest.raises(CatsimError, match="integer 'step'"):
            writer.write({"loss": 0.5})
        with pytest.raises(CatsimError, match="integer 'step'"):
            writer.write({"step": 4.0})
        with pytest.raises(TypeError, match="Path"):
            writer.write({"step": 5, "where": tmp_path})
    assert [r["step"] for r in read_records(tmp_path / "metrics.jsonl")] == [3]


def test_resume_drops_steps_after_the_saved_one(tmp_path):
    path = tmp_path / "log.jsonl"
    with MetricsWriter(tmp_path, "log.jsonl") as writer:
        for step in range(1, 6):
            writer.write({"step": step, "loss": float(step)})
    with path.open("a") as fh:
        fh.write('{"step": 6, "lo')  # a line cut by a kill
    with MetricsWriter(tmp_path, "log.jsonl", resume_step=3) as writer:
        assert writer.last_step == 3
        with pytest.raises(CatsimError, match="not after the last step 3"):
            writer.write({"step": 2, "loss": 0.0})
        writer.write({"step": 4, "loss": 40.0})
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"step": 1, "loss": 1.0}, {"step": 2, "loss": 2.0}, {"step": 3, "loss": 3.0},
        {"step": 4, "loss": 40.0}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.jsonl"]  # no temp file left
    with MetricsWriter(tmp_path, "log.jsonl", resume_step=None):  # a fresh start
        pass
    assert path.read_text() == ""


def test_disabled_writer_writes_nothing(tmp_path):
    out = tmp_path / "run"
    with MetricsWriter(out, log_to="tensorboard", resume_step=2, enabled=False) as writer:
        assert writer.write(_record(3))["kl"] is None
    assert not out.exists()


def test_scalars_are_the_numeric_values_by_tag():
    assert scalars(jsonable(_record(2))) == {"loss": 0.5, "reward": 0.5, "kept": 2.0,
                                             "eval/acc": 0.2}


# --- --log-to ----------------------------------------------------------------------------------


def test_parse_log_to():
    assert parse_log_to("") == parse_log_to(None) == parse_log_to("none") == ()
    assert parse_log_to(" TensorBoard , wandb,tensorboard") == ("tensorboard", "wandb")
    assert parse_log_to(["wandb"]) == ("wandb",)
    with pytest.raises(CatsimError, match="unknown sink 'mlflow'; choose from tensorboard, wandb"):
        parse_log_to("tensorboard,mlflow")


def test_missing_package_names_the_extra(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "wandb" else real(name, *a))
    assert parse_log_to("tensorboard") == ("tensorboard",)
    with pytest.raises(CatsimError, match=r"needs the wandb package: pip install 'catsim\[wandb\]'"):
        parse_log_to("wandb")


def test_log_to_argument(capsys):
    parser = _ArgumentParser(prog="catsim llm rl")
    add_log_to_argument(parser)
    none = parser.parse_args([])
    assert none.log_to == LogTo() and not none.log_to and not hasattr(none, "wandb_project")
    both = parser.parse_args(["--log-to", "wandb,tensorboard"]).log_to
    assert both == LogTo(("wandb", "tensorboard")) and tuple(both) == ("wandb", "tensorboard") and "wandb" in both
    assert (both.wandb_project, both.wandb_entity, both.wandb_mode) == ("catsim", None, "offline")
    assert "tensorboard" in parser.format_help() and "wandb" in parser.format_help()
    for argv, message in ((["--log-to", "tensorbord"], "unknown sink 'tensorbord'"),
                          (["--log-to", "wandb", "--wandb-mode", "sometimes"], "invalid choice: 'sometimes'"),
                          (["--log-to", "wandb", "--wandb-project", " "], "the W&B project name is empty")):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err


def test_wandb_options_set_the_run_in_any_order():
    parser = _ArgumentParser(prog="catsim llm sft")
    add_log_to_argument(parser)
    args = parser.parse_args(["--wandb-entity", "lab", "--wandb-mode", "online", "--log-to", "wandb",
                              "--wandb-project", "rare-solutions"])
    assert args.log_to == LogTo(("wandb",), "rare-solutions", "lab", "online")


@pytest.mark.parametrize("argv", [["--wandb-project", "p"], ["--log-to", "tensorboard", "--wandb-mode", "online"],
                                  ["--wandb-entity", "lab", "--log-to", "none"]])
def test_a_wandb_option_without_wandb_is_refused_in_one_line(argv, capsys):
    """It would never act: the command has no W&B run for it to set."""
    parser = _ArgumentParser(prog="catsim sweep")
    add_log_to_argument(parser)
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1
    assert err.startswith(f"catsim sweep: error: {argv[0] if argv[0] != '--log-to' else argv[2]} sets the W&B run of "
                          "--log-to wandb, which this command was not given"), err


def test_a_command_refuses_a_wandb_option_before_any_work(tmp_path, capsys):
    from catsim.cli.main import main

    out = tmp_path / "sweep"
    with pytest.raises(SystemExit) as exc:
        main(["sweep", "--group-size", "2", "--seeds", "1", "--steps", "20", "--out", str(out),
              "--wandb-project", "mine"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1
    assert "--wandb-project sets the W&B run of --log-to wandb" in err and not out.exists()


def test_tags_are_grouped():
    values = {"loss": 1.0, "eval/acc": 0.5, "gamma": 0.5, "mret/gamma=0": 0.9, "train/x": 2.0, "eval": 3.0}
    assert grouped(values, {"gamma": "catsim", "mret": "catsim"}) == {
        "train/loss": 1.0, "eval/acc": 0.5, "catsim/gamma": 0.5, "catsim/mret/gamma=0": 0.9, "train/x": 2.0,
        "train/eval": 3.0}
    with pytest.raises(CatsimError, match=r"metric groups \['rare'\] are not among train, eval, catsim"):
        MetricsWriter("unused", groups={"gamma": "rare"}, enabled=False)


# --- TensorBoard --------------------------------------------------------------------------------


def _tensorboard_scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    acc = EventAccumulator(str(directory), size_guidance={"tensors": 0})
    acc.Reload()
    return {tag: [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)]
            for tag in acc.Tags()["tensors"]}


def test_tensorboard_event_files_hold_one_scalar_per_numeric_key_and_step(tmp_path):
    pytest.importorskip("tensorboard")
    with MetricsWriter(tmp_path, log_to="tensorboard", groups={"kept": "catsim"}) as writer:
        for step in (1, 2, 3):
            writer.write(_record(step))
        live = _tensorboard_scalars(tmp_path / "tensorboard")  # flushed per record
    # grouped tags (train/ unless the writer says otherwise), no None/NaN/str/list/bool
    assert sorted(live) == ["catsim/kept", "eval/acc", "train/loss", "train/reward"]
    logged = _tensorboard_scalars(tmp_path / "tensorboard")
    assert logged == live
    for tag, expect in (("train/loss", lambda s: 1.0 / s), ("train/reward", lambda s: 0.25 * s),
                        ("eval/acc", lambda s: 0.1 * s), ("catsim/kept", float)):
        # event files store float32: the values are the records' values rounded to float32
        assert logged[tag] == [(s, float(np.float32(expect(s)))) for s in (1, 2, 3)], tag


def test_tensorboard_is_rebuilt_from_the_kept_records_on_resume(tmp_path):
    pytest.importorskip("tensorboard")
    with MetricsWriter(tmp_path, log_to="tensorboard") as writer:
        for step in range(1, 5):
            writer.write({"step": step, "loss": float(step)})
    with MetricsWriter(tmp_path, log_to="tensorboard", resume_step=2) as writer:
        writer.write({"step": 3, "loss": 30.0})
    assert len(list((tmp_path / "tensorboard").iterdir())) == 1
    assert _tensorboard_scalars(tmp_path / "tensorboard") == {
        "train/loss": [(1, 1.0), (2, 2.0), (3, 30.0)]}


# --- Weights & Biases (offline) -------------------------------------------------------------------

_WANDB_SCRIPT = textwrap.dedent("""
    import json, socket, sys

    contacts = []

    def audit(event, args):  # every name look-up and connection this process attempts
        if event == "socket.getaddrinfo" and args[0] not in (None, "localhost", "127.0.0.1"):
            contacts.append(f"getaddrinfo {args[0]}")
        elif (event == "socket.connect" and args[0].family in (socket.AF_INET, socket.AF_INET6)
              and args[1][0] not in ("127.0.0.1", "::1")):  # loopback: the trap below sees it
            contacts.append(f"connect {args[1]}")

    sys.addaudithook(audit)
    from catsim.tracking import LogTo, MetricsWriter

    out, resume, steps = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
    log_to = LogTo(("wandb",), *json.loads(sys.argv[4])) if len(sys.argv) > 4 else "wandb"
    with MetricsWriter(out, "rl_log.jsonl", log_to=log_to, resume_step=resume,
                       config={"lr": 0.001, "method": "grpo", "asym": {"delta": 2.0}},
                       run_name="f-grpo") as writer:
        for step in steps:
            writer.write({"step": step, "loss": 1.0 / step, "eval": {"acc": 0.1 * step},
                          "warnings": [], "kl": float("nan")})
    print(json.dumps(contacts))
""")


def _run_wandb(out: Path, resume, steps, trap_port: int, settings=None) -> list[str]:
    trap = f"http://127.0.0.1:{trap_port}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "WANDB_BASE_URL": trap,
           "HTTP_PROXY": trap, "HTTPS_PROXY": trap, "http_proxy": trap, "https_proxy": trap,
           "NO_PROXY": "", "no_proxy": "", "WANDB_API_KEY": "x" * 40}
    env.pop("WANDB_MODE", None)
    proc = subprocess.run([sys.executable, "-c", _WANDB_SCRIPT, str(out), json.dumps(resume), json.dumps(steps),
                           *([json.dumps(settings)] if settings else [])],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _wandb_records(run_dir: Path) -> list:
    """The records of an offline run's .wandb file: LevelDB-log framing (32 KiB blocks, 7-byte
    chunk headers: crc32c, length, type FULL=1/FIRST=2/MIDDLE=3/LAST=4) after a 7-byte W&B
    header, each record a `wandb_internal_pb2.Record`."""
    from wandb.proto import wandb_internal_pb2

    (path,) = run_dir.glob("run-*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, pos, records, parts = 32768, 7, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        payload, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 2):
            parts = payload
        elif kind in (3, 4):
            parts += payload
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            records.append(record)
    return records


def _history(records) -> dict[int, dict]:
    rows = {}
    for r in records:
        if r.WhichOneof("record_type") == "history":
            items = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in r.history.item}
            rows[r.history.step.num] = {k: v for k, v in items.items() if not k.startswith("_")}
    return rows


def test_wandb_offline_run_holds_config_and_history_without_network(tmp_path):
    pytest.importorskip("wandb")
    with socket.socket() as trap:
        trap.bind(("127.0.0.1", 0))
        trap.listen()
        trap.setblocking(False)
        port = trap.getsockname()[1]
        out = tmp_path / "run"
        contacts = _run_wandb(out, None, [1, 2, 3], port)
        (first_dir,) = (out / "wandb").glob("offline-run-*")
        contacts += _run_wandb(out, 2, [3, 4], port)  # resumed after step 2
        mine = tmp_path / "mine"
        contacts += _run_wandb(mine, None, [1], port, ["rare-solutions", "lab", "offline"])
        with pytest.raises(BlockingIOError):
            trap.accept()  # nothing ever tried the W&B server or a proxy
    assert contacts == []

    (run_dir,) = (out / "wandb").glob("offline-run-*")  # the first run was rebuilt, not kept
    run_id = run_dir.name.rsplit("-", 1)[1]
    assert first_dir.name.endswith(run_id)  # the resumed run keeps its id
    records = _wandb_records(run_dir)
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (run.run_id, run.display_name, run.project) == (run_id, "f-grpo", "catsim")
    (named,) = [r.run for r in _wandb_records(next((mine / "wandb").glob("offline-run-*")))
                if r.WhichOneof("record_type") == "run"]
    assert (named.project, named.entity) == ("rare-solutions", "lab")  # --wandb-project / --wandb-entity
    config = {u.key: json.loads(u.value_json) for u in run.config.update if u.key != "_wandb"}
    assert config == {"lr": 0.001, "method": "grpo", "asym": {"delta": 2.0}}
    assert _history(records) == {  # the same grouped keys as TensorBoard's tags
        1: {"train/loss": 1.0, "eval/acc": 0.1},
        2: {"train/loss": 0.5, "eval/acc": 0.2},
        3: {"train/loss": 1 / 3, "eval/acc": 0.1 * 3},
        4: {"train/loss": 0.25, "eval/acc": 0.4},
    }
    assert [r["step"] for r in read_records(out / "rl_log.jsonl")] == [1, 2, 3, 4]


def test_wandb_run_takes_project_entity_and_mode(tmp_path, monkeypatch):
    """wandb.init gets the LogTo's project, entity and mode; a resumed online run is a new W&B run
    (the server keeps the first one's steps), a resumed offline run keeps its id (rebuilt in place)."""
    wandb = pytest.importorskip("wandb")
    calls = []

    class Run:
        def log(self, values, step):
            calls[-1]["logged"].append((step, values))

        def finish(self, exit_code=0):
            pass

    def init(**kwargs):
        calls.append({**kwargs, "logged": []})
        return Run()

    monkeypatch.setattr(wandb, "init", init)
    monkeypatch.setattr(wandb, "setup", lambda settings=None: None)
    online = LogTo(("wandb",), "rare-solutions", "lab", "online")
    with MetricsWriter(tmp_path / "a", log_to=online, groups={"gamma": "catsim"}) as writer:
        writer.write({"step": 1, "loss": 0.5, "gamma": 0.5})
    first = calls[-1]
    assert (first["project"], first["entity"], first["mode"], first["settings"].mode) == (
        "rare-solutions", "lab", "online", "online")
    assert first["logged"] == [(1, {"train/loss": 0.5, "catsim/gamma": 0.5})]
    with MetricsWriter(tmp_path / "a", log_to=online, resume_step=1, groups={"gamma": "catsim"}):
        pass
    assert calls[-1]["id"] != first["id"] and calls[-1]["logged"] == first["logged"]  # the whole curve again
    with MetricsWriter(tmp_path / "b", log_to="wandb", resume_step=None):
        pass
    with MetricsWriter(tmp_path / "b", log_to="wandb", resume_step=0):
        pass
    assert calls[-1]["id"] == calls[-2]["id"] and calls[-1]["mode"] == "offline"
    assert (calls[-1]["project"], calls[-1]["entity"]) == ("catsim", None)
    with MetricsWriter(tmp_path / "c", log_to=LogTo(("wandb",), wandb_mode="disabled")):
        pass
    assert calls[-1]["mode"] == "disabled"
