"""Files copied into a published folder (`llm compare --publish`, `catsim reproduce` into
--figures) are copied atomically, and a publication that cannot happen is one line — before the
long run where it can be known then."""

from __future__ import annotations

import errno
import shutil

import pytest

from catsim.cli.main import main


def _one_line(capsys, *needles) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


def _copy_that_dies_half_way(monkeypatch):
    """shutil.copyfile that writes half of the file and then fails (a full disk, a kill)."""
    real = shutil.copyfile

    def half(source, target, *args, **kwargs):
        data = open(source, "rb").read()
        with open(target, "wb") as fh:
            fh.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shutil, "copyfile", half)
    return real


def test_reproduce_never_leaves_half_a_published_figure(tmp_path, monkeypatch, capsys):
    """Before: the Fig. 2 copy wrote into figures/fig2_quick.png itself: a copy that failed half way
    left half a PNG there, and the OSError was a traceback."""
    from catsim.experiments import fig2

    made = tmp_path / "made.png"
    made.write_bytes(b"\x89PNG new figure " * 64)
    monkeypatch.setattr(fig2, "reproduce", lambda *a, **k: {"figure": str(made)})
    figures = tmp_path / "figures"
    figures.mkdir()
    (figures / "fig2_quick.png").write_bytes(b"the published figure")
    _copy_that_dies_half_way(monkeypatch)
    code = main(["reproduce", "--quick", "--skip", "lemma,mass,verify,llm", "--figures", str(figures),
                 "--runs", str(tmp_path / "runs")])
    assert code == 2
    _one_line(capsys, "cannot copy", "fig2_quick.png", "No space left on device")
    assert (figures / "fig2_quick.png").read_bytes() == b"the published figure"
    assert [p.name for p in figures.iterdir()] == ["fig2_quick.png"]  # no temporary file left


def test_copy_file_replaces_the_target_whole(tmp_path):
    from catsim.errors import CatsimError
    from catsim.files import copy_file

    (tmp_path / "a").write_text("new")
    (tmp_path / "b").write_text("old")
    assert copy_file(tmp_path / "a", tmp_path / "sub" / "b").read_text() == "new"  # its folder is made
    with pytest.raises(CatsimError, match="cannot copy .*missing"):
        copy_file(tmp_path / "missing", tmp_path / "b")
    assert (tmp_path / "b").read_text() == "old"


@pytest.mark.parametrize("where", ["out", "file", "entry"])
def test_compare_refuses_a_publish_folder_before_the_run(tmp_path, capsys, where):
    """Before: --publish into --out itself ran the whole comparison, then died with SameFileError
    (a traceback); a --publish that is a file died the same way after the run."""
    out = tmp_path / "cmp"
    target = {"out": out, "file": tmp_path / "a-file", "entry": tmp_path / "pub"}[where]
    if where == "file":
        target.write_text("x")
    if where == "entry":
        (target / "report.md").mkdir(parents=True)
    code = main(["llm", "compare", "--quick", "--no-progress", "--out", str(out), "--publish", str(target)])
    assert code == 2
    _one_line(capsys, "--publish", {"out": "is --out itself", "file": "is a file",
                                    "entry": "report.md there is a folder"}[where])
    assert not (out / "results.json").exists() and not (out / "maze").exists()  # nothing ran


def test_compare_publishes_nothing_when_a_file_is_missing(tmp_path, capsys, monkeypatch):
    """Before: a published file missing after the run was a FileNotFoundError traceback, with the
    files before it already copied."""
    from catsim.experiments import llm_compare

    def fake_pipeline(out_dir, **kwargs):
        for name in ("report.md", "results.json"):
            (tmp_path / "cmp" / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "cmp" / name).write_text("{}")
        return tmp_path / "cmp" / "report.md"

    monkeypatch.setattr(llm_compare, "run_pipeline", fake_pipeline)
    code = main(["llm", "compare", "--quick", "--no-progress", "--out", str(tmp_path / "cmp"),
                 "--publish", str(tmp_path / "pub")])
    assert code == 2
    _one_line(capsys, "nothing published", "comparison.png")
    assert list((tmp_path / "pub").iterdir()) == []
