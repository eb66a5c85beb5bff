"""Bad input is a one-line error (exit code 2) before any work or file is written."""

import pytest

from catsim.cli.args import parse_float_list
from catsim.cli.main import main
from catsim.errors import CatsimError


@pytest.mark.parametrize("argv, message", [
    (["sweep", "--group-size", ""], "--group-size: empty value"),
    (["simulate", "--group-size", "1e12"], "group sizes must lie in [1, 2^30]"),
    (["lemma", "--group-size", "2^0:2^1100"], "beyond 2^±62"),
    (["lemma", "--group-size", "1:1e9"], "more than 100,000 values"),
    (["simulate", "--group-size", "2", "--steps", "2", "--save", "/proc/version/x.npz"], "--save: cannot write"),
    (["llm", "pipeline", "--out", "OUT", "--seeds", ""], "--seeds: empty list"),
    (["llm", "pipeline", "--out", "OUT", "--runs", " , "], "--runs: empty list"),
])
def test_bad_input_is_one_line_and_touches_nothing(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())  # no output folder, no figure, no run directory


def test_list_size_limits():
    assert len(parse_float_list("1:100000", "--n")) == 100_000
    with pytest.raises(CatsimError, match="more than"):
        parse_float_list("1:100000,7", "--n")
    assert parse_float_list("2^60:2^62", "--n")[-1] == 2.0**62


def test_oserror_is_one_line(tmp_path, capsys, monkeypatch):
    """An OSError from a command (a path that cannot be read or written) is one line, exit 2."""
    import argparse

    from catsim.cli import main as cli_main

    missing = tmp_path / "missing.json"

    def fails(args):
        raise FileNotFoundError(2, "No such file or directory", str(missing))

    parser = cli_main.build_parser()
    monkeypatch.setattr(parser, "parse_args", lambda argv=None: argparse.Namespace(command="verify", func=fails))
    monkeypatch.setattr(cli_main, "build_parser", lambda argv=None: parser)
    assert cli_main.main([]) == 2
    assert capsys.readouterr().err.strip() == f"catsim verify: error: No such file or directory: {missing}"


def test_max_new_tokens_beyond_the_context_is_refused_before_sampling(tmp_path, capsys):
    """`llm sample --max-new-tokens 100000000` used to allocate until out of memory."""
    from llm_rl_helpers import make_base_model

    make_base_model(tmp_path / "base")
    assert main(["llm", "sample", "--model", str(tmp_path / "base"), "--prompt", "UD>", "--max-new-tokens",
                 "100000000"]) == 2
    err = capsys.readouterr().err.strip()
    assert "exceeds the model's context" in err and "\n" not in err
