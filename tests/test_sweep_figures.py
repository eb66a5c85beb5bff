"""Where `catsim sweep` puts Fig. 2: figures/ only for a scenario's full grid; a reduced sweep run
from the repository root must not replace the published figures/fig2_<method>.png."""

from __future__ import annotations

import argparse

import pytest

from catsim.cli.main import main
from catsim.experiments.fig2 import is_full_sweep
from catsim.sim.config import PAPER_GAMMAS, PAPER_GROUP_SIZES, SCENARIO_GRIDS

TINY = ["--group-size", "2,4", "--seeds", "1", "--steps", "20", "--num-actions", "300", "--num-correct", "40",
        "--no-progress"]


def _sweep_config(argv: list[str]):
    """The SimConfig, sizes, γ and seeds `catsim sweep argv` would run (parsed like the CLI)."""
    from catsim.cli import sweep as sweep_cli
    from catsim.cli._simargs import (
        DEFAULT_GAMMAS,
        config_from_args,
        gammas,
        group_sizes,
        low_lr_gammas,
    )

    parser = argparse.ArgumentParser()
    sweep_cli.register(parser.add_subparsers())
    args = parser.parse_args(["sweep", *argv])
    sizes = group_sizes(args.n) if args.n is not None else list(SCENARIO_GRIDS[args.scenario])
    gamma = gammas(args.gamma if args.gamma is not None else DEFAULT_GAMMAS)  # as the CLI reads it
    return config_from_args(args), sizes, gamma, args.seeds, low_lr_gammas(args)


@pytest.mark.parametrize("argv, full", [
    ([], True),
    (["--scenario", "brorl"], True),
    (["--log-every", "100"], True),  # the recording interval does not change the grid
    (["--group-size", "2,4"], False),
    (["--seeds", "1"], False),
    (["--steps", "100"], False),
    (["--gamma", "0"], False),
    (["--lr", "0.1"], False),
    (["--low-lr-gamma", "0.5"], False),
])
def test_full_sweep_is_the_unmodified_scenario_grid(argv, full):
    assert is_full_sweep(*_sweep_config(argv)) is full


def test_full_sweep_reads_plain_sequences():
    from catsim.sim.config import scenario

    assert is_full_sweep(scenario("paper"), PAPER_GROUP_SIZES, PAPER_GAMMAS, 4)
    assert not is_full_sweep(scenario("paper"), PAPER_GROUP_SIZES[:-1], PAPER_GAMMAS, 4)
    assert not is_full_sweep(scenario("paper"), PAPER_GROUP_SIZES, PAPER_GAMMAS, [0, 1, 2, 3])


def test_a_reduced_sweep_leaves_the_published_figure_alone(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    published = tmp_path / "figures" / "fig2_paper+adam-reinforce-lr0.01.png"
    published.parent.mkdir()
    published.write_bytes(b"published")
    (tmp_path / "figures" / "fig2_paper.png").write_bytes(b"published")
    assert main(["sweep", *TINY, "--out", "runs/small"]) == 0
    assert "runs/small/fig2_" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == [
        "fig2_paper+adam-reinforce-lr0.01.png", "fig2_paper.png"]
    assert published.read_bytes() == b"published"
    assert (tmp_path / "figures" / "fig2_paper.png").read_bytes() == b"published"
    written = list((tmp_path / "runs" / "small").glob("fig2_*.png"))
    assert len(written) == 1 and written[0].read_bytes().startswith(b"\x89PNG")
    # an explicit --figures-dir is obeyed, figures/ included
    assert main(["sweep", *TINY, "--out", "runs/small", "--figures", "figures"]) == 0
    assert published.read_bytes().startswith(b"\x89PNG")
