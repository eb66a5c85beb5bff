"""`catsim lemma` and `catsim verify`: figures, tables, peak table, error paths."""

import csv
import io
import json
import subprocess
import sys

import pytest

from catsim.cli.main import main
from catsim.theory.tail_miss import active_probability, tail_miss_probability


def test_csv_table_columns_and_values(capsys):
    assert main(["lemma", "--group-size", "1:4", "--tau", "0.01", "--mu-pos", "0.5,0.8", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert list(rows[0]) == ["n", "tau", "mu_pos", "pr_tail_miss", "pr_active"]
    assert len(rows) == 8
    for row in rows:
        n, tau, mu = int(row["n"]), float(row["tau"]), float(row["mu_pos"])
        assert float(row["pr_tail_miss"]) == tail_miss_probability(n, tau, mu)  # round-trip exact
        assert float(row["pr_active"]) == active_probability(n, mu)


def test_json_table_with_rho(capsys):
    assert main(["lemma", "--group-size", "2^0:2^3", "--rho", "0.1", "--mu-pos", "0.5", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["n"] for r in rows] == [1, 2, 4, 8]
    assert all(r["tau"] == pytest.approx(0.05) for r in rows)
    assert rows[1]["pr_tail_miss"] == pytest.approx(0.95**2 - 0.45**2 - 0.5**2, rel=1e-14)


def test_peak_table_prints_published_argmax(capsys):
    assert main(["lemma", "--peaks", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    got = {(float(r["tau"]), float(r["mu_pos"])): int(r["n_argmax"]) for r in rows}
    assert got == {
        (0.001, 0.2): 24, (0.001, 0.5): 10, (0.001, 0.8): 24,
        (0.01, 0.2): 15, (0.01, 0.5): 7, (0.01, 0.8): 14,
        (0.05, 0.2): 9, (0.05, 0.5): 5, (0.05, 0.8): 7,
    }  # fmt: skip
    assert main(["lemma", "--peaks"]) == 0
    text = capsys.readouterr().out
    assert "n_argmax" in text.splitlines()[0] and len(text.splitlines()) == 10


def test_figures_written(tmp_path, capsys):
    assert main(["lemma", "--out", str(tmp_path)]) == 0
    for stem in ("lemma31_fig3", "lemma31_fig5"):
        png = tmp_path / f"{stem}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (tmp_path / f"{stem}.pdf").read_bytes()[:5] == b"%PDF-"
    assert main(["lemma", "--group-size", "1:64", "--tau", "0.01,0.02", "--mu-pos", "0.5", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "lemma31_custom.png").stat().st_size > 1000


@pytest.mark.parametrize(
    "argv",
    [
        ["--tau", "0.6", "--mu-pos", "0.5", "--format", "csv"],
        ["--mu-pos", "1.2", "--format", "csv"],
        ["--group-size", "0", "--format", "csv"],
        ["--group-size", "abc", "--format", "csv"],
        ["--group-size", "", "--format", "csv"],
        ["--tau", "0.1", "--rho", "0.1"],
        ["--tau", "0.6", "--mu-pos", "0.5"],
        ["--peaks", "--tau", "0.5", "--mu-pos", "0.5"],
        ["--format", "xml"],
    ],
)
def test_bad_input_one_line_exit_2(argv, capsys):
    try:
        code = main(["lemma", *argv])
    except SystemExit as exc:  # argparse-level errors
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error" in err


def test_verify_quick_passes_and_reports(capsys):
    assert main(["verify", "--quick"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:1] == ["check"]
    assert "Lemma 3.1" in out and "FAIL" not in out
    # the README states how many checks `catsim verify` runs: keep it true
    import pathlib
    import re

    total = int(re.search(r"(\d+)/(\d+) checks passed", out).group(2))
    readme = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    assert f"`catsim verify` runs {total} " in readme


def test_verify_exit_code_on_failure(monkeypatch, capsys):
    from catsim.checks import CheckResult
    from catsim.cli import verify

    monkeypatch.setattr(verify, "collect", lambda quick: iter([CheckResult("bad", 1.0, 0.5)]))
    assert main(["verify"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_console_entry_point_subprocess():
    result = subprocess.run([sys.executable, "-m", "catsim", "lemma", "--group-size", "0", "--format", "csv"],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1


def test_a_reader_that_stops_early_ends_the_command_quietly():
    """`catsim lemma ... | head -1`: the 300 kB table fills the pipe, the reader closes it after one
    line, and the command ends with SIGPIPE's exit code and nothing on stderr (was "error: Broken
    pipe", rc 2)."""
    proc = subprocess.Popen([sys.executable, "-m", "catsim", "lemma", "--group-size", "1:512", "--format", "csv"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().startswith(b"n,tau,mu_pos")
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and stderr == "", stderr
