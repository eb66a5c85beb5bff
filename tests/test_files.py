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
