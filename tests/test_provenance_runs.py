"""Each training run records where every piece of it was computed (commit, CPU, ISA, XLA flags,
threads), the Maze study's eval.json carries it, a run computed on another set-up than the study's
other runs says so in one line, and the report names the set-ups its runs come from."""

import json

import pytest

from catsim import provenance
from catsim.experiments.maze import presets as maze_presets
from catsim.experiments.maze import provenance as maze_provenance
from catsim.experiments.maze.study import run_study


@pytest.mark.parametrize("flags, want", [
    ("--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1", 1),
    ("--xla_force_host_platform_device_count=8 --intra_op_parallelism_threads=3", 3),
    ("--xla_cpu_multi_thread_eigen=false", 1),
])
def test_threads_read_from_xla_flags(flags, want):
    assert provenance.threads(flags) == want


def test_threads_default_to_the_cores_this_process_may_use():
    import os

    assert provenance.threads("") == len(os.sched_getaffinity(0))
    assert provenance.collect()["threads"] == provenance.threads()


def test_differences_name_threads_and_skip_fields_a_record_predates():
    here = provenance.collect()
    assert provenance.differences(here, {**here, "threads": here["threads"] + 1}) == [
        f"threads: {here['threads']} -> {here['threads'] + 1}"]
    old = {k: v for k, v in here.items() if k != "threads"}  # recorded before threads were
    assert provenance.differences(old, {**here, "threads": 99}) == []


def test_run_pieces_are_appended_and_cut_back_on_resume(tmp_path):
    a = {"git_commit": "a" * 40, "cpu_model": "Intel(R) Xeon(R) Processor", "threads": 2}
    b = {"git_commit": "b" * 40 + "+dirty", "cpu_model": "AMD EPYC", "threads": 1,
         "xla_flags": "--xla_cpu_max_isa=AVX2"}
    assert provenance.run_pieces(tmp_path) == []
    provenance.record_run_piece(tmp_path, 0, a)
    provenance.record_run_piece(tmp_path, 50, b)
    assert [p["from_step"] for p in provenance.run_pieces(tmp_path)] == [0, 50]
    provenance.record_run_piece(tmp_path, 25, b)  # resumed from step 25: the piece from 50 is gone
    assert [(p["from_step"], p["cpu_model"]) for p in provenance.run_pieces(tmp_path)] == [
        (0, "Intel(R) Xeon(R) Processor"), (25, "AMD EPYC")]
    provenance.record_run_piece(tmp_path, 0, b)  # started afresh (--overwrite)
    assert [p["from_step"] for p in provenance.run_pieces(tmp_path)] == [0]
    assert provenance.describe(b) == "commit bbbbbbbbbb+dirty, AMD EPYC, ISA pinned to AVX2, 1 thread"
    assert provenance.describe(None) == "not recorded"
    (tmp_path / provenance.PIECES_FILE).write_text("{garbage")
    assert provenance.run_pieces(tmp_path) == []


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A finished tiny study made here."""
    out = tmp_path_factory.mktemp("prov") / "study"
    said: list[str] = []
    results = run_study(out, maze_presets.tiny(), progress=False, say=said.append)
    return out, results, said


def test_every_run_and_warm_up_records_its_set_up(study):
    out, results, said = study
    here = provenance.collect()
    assert not [s for s in said if "bit-identical" in s]  # one set-up throughout: nothing to say
    for run in results["runs"]:
        (piece,) = run["provenance"]
        assert piece["from_step"] == 0 and provenance.differences(piece, here) == []
        rdir = out / f"s{run['seed']}" / run["label"]
        assert provenance.run_pieces(rdir) == run["provenance"]
    assert provenance.run_pieces(out / "s0" / "base")[0]["cpu_model"] == here["cpu_model"]
    lines = maze_provenance.set_up_lines(results)
    assert lines == [f"{len(results['runs'])} runs (warm-ups not counted).",
                     f"- {len(results['runs'])} computed on {provenance.describe(here)}"]


def test_a_run_recomputed_on_another_set_up_says_so_in_one_line(study, tmp_path):
    import shutil

    out = tmp_path / "study"
    shutil.copytree(study[0], out)
    other = out / "s0" / "grpo-N2" / "eval.json"
    ev = json.loads(other.read_text())
    ev["provenance"] = [{**ev["provenance"][0], "cpu_model": "Intel(R) Xeon(R) Processor", "threads": 1}]
    other.write_text(json.dumps(ev))
    (out / "s0" / "f-grpo-N2-g0.5" / "eval.json").unlink()  # this piece is recomputed
    said: list[str] = []
    results = run_study(out, maze_presets.tiny(), progress=False, say=said.append)
    notes = [s for s in said if "bit-identical" in s]
    assert len(notes) == 1
    assert notes[0].startswith(f"s0/f-grpo-N2-g0.5 is computed on {provenance.describe(provenance.collect())}; "
                               "finished runs here come from commit ")
    assert "Intel(R) Xeon(R) Processor, 1 thread" in notes[0]
    lines = maze_provenance.set_up_lines(results)
    assert "- 1 computed on " in "\n".join(lines) and "Intel(R) Xeon(R) Processor, 1 thread" in "\n".join(lines)
    assert lines[-1].startswith("Runs from different set-ups are equally valid samples")


def test_runs_made_before_provenance_are_counted_as_unrecorded(study):
    _, results, _ = study
    old = {**results, "runs": [{k: v for k, v in r.items() if k != "provenance"} for r in results["runs"]]}
    assert maze_provenance.set_up_lines(old)[1] == (
        f"- {len(old['runs'])} made before runs recorded their set-up: their commit and CPU are not known")


def test_a_resumed_run_records_each_piece_and_a_finished_one_adds_none(tmp_path):
    from llm_rl_helpers import make_paths_base

    from catsim.cli.main import main

    base = make_paths_base(tmp_path / "base")
    out = tmp_path / "rl"
    argv = ["llm", "rl", "--base", str(base), "--out", str(out), "--steps", "3", "--group-size", "4",
            "--prompts-per-step", "1", "--max-new-tokens", "4", "--save-every", "1", "--no-progress"]
    assert main([*argv, "--stop-after", "1"]) == 0
    assert main(argv) == 0
    pieces = provenance.run_pieces(out)
    assert [p["from_step"] for p in pieces] == [0, 1]
    assert provenance.differences(pieces[0], pieces[1]) == []
    assert main(argv) == 0  # finished: nothing computed, no piece added
    assert provenance.run_pieces(out) == pieces
