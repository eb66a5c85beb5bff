"""catsim.files: a write that fails leaves the previous file and no temporary one behind."""

import numpy as np
import pytest

from catsim.files import replacing, write_text


def test_write_text_replaces_the_file_and_creates_its_folder(tmp_path):
    path = tmp_path / "a" / "b.txt"
    assert write_text(path, "one\n") == path
    write_text(path, "two\n", sync=True)
    assert path.read_text() == "two\n"
    assert [p.name for p in path.parent.iterdir()] == ["b.txt"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_temporary_one(tmp_path):
    path = tmp_path / "table.txt"
    write_text(path, "old\n")
    with pytest.raises(RuntimeError), replacing(path) as tmp:
        tmp.write_text("half of the new")
        raise RuntimeError("crash mid-write")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["table.txt"]


def test_the_suffix_ends_the_temporary_name(tmp_path):
    # np.savez appends ".npz" to a name without it, which would leave the rename nothing to move
    path = tmp_path / "results.npz"
    with replacing(path, suffix=".npz") as tmp:
        assert tmp.name.endswith(".npz") and tmp.name.startswith(".")
        np.savez(tmp, x=np.arange(3))
    np.testing.assert_array_equal(np.load(path)["x"], np.arange(3))
    assert [p.name for p in tmp_path.iterdir()] == ["results.npz"]


def test_save_figure_writes_by_suffix_atomically_and_closes(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from catsim.plots.save import save_figure

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    pdf = save_figure(fig, tmp_path / "sub" / "f.pdf", close=False)
    png = save_figure(fig, tmp_path / "sub" / "f.png", dpi=50)
    assert pdf.read_bytes()[:4] == b"%PDF" and png.read_bytes()[:4] == b"\x89PNG"
    assert not plt.fignum_exists(fig.number)
    fig, _ = plt.subplots()

    def crash(tmp, **_):
        tmp.write_bytes(b"half a figure")
        raise RuntimeError("crash mid-write")

    fig.savefig = crash
    with pytest.raises(RuntimeError):  # a failed write keeps the old figure and leaves no temporary file
        save_figure(fig, tmp_path / "sub" / "f.png")
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in png.parent.iterdir()) == ["f.pdf", "f.png"]
    assert not plt.fignum_exists(fig.number)


def test_every_plot_is_written_by_the_one_figure_writer():
    from pathlib import Path

    plots = Path(__file__).resolve().parents[1] / "catsim" / "plots"
    direct = [p.name for p in plots.glob("*.py") if p.name != "save.py" and ".savefig(" in p.read_text()]
    assert not direct, direct
