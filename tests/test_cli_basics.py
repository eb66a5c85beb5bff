"""The CLI framework: list/range parsing and one-line errors."""

import pytest

from catsim.cli.args import parse_float_list, parse_int_list
from catsim.cli.main import main
from catsim.errors import CatsimError


def test_parse_lists_and_ranges():
    assert parse_float_list("0.5, 1e-3", "--x") == [0.5, 1e-3]
    assert parse_int_list("1:4", "--n") == [1, 2, 3, 4]
    assert parse_int_list("2:8:2,16", "--n") == [2, 4, 6, 8, 16]
    assert parse_int_list("2^0:2^3", "--n") == [1, 2, 4, 8]
    assert parse_float_list("0.1:0.3:0.1", "--x") == pytest.approx([0.1, 0.2, 0.3])


@pytest.mark.parametrize("bad", ["", "1,,2", "abc", "5:1", "1:2:0", "nan", "2^3:2^1", "1:2:3:4"])
def test_parse_rejects_bad_lists(bad):
    with pytest.raises(CatsimError):
        parse_float_list(bad, "--x")


def test_parse_int_rejects_fractions():
    with pytest.raises(CatsimError, match="whole number"):
        parse_int_list("1.5", "--n")


def test_unknown_command_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err


def test_x64_is_local():
    import jax.numpy as jnp

    from catsim.numerics import x64

    with x64():
        assert jnp.ones(1).dtype == jnp.float64
    assert jnp.ones(1).dtype == jnp.float32
