"""`catsim mass-step --figure` / `--derivations` refuse the table's options, which they never read,
and a figure of other settings than the published one never takes the published figure's name."""

from __future__ import annotations

import pytest

from catsim.cli.main import main


@pytest.mark.parametrize("flags, needle", [
    (["--figure", "--groups", "1", "--gamma", "1"], "--gamma: not read with --figure"),
    (["--figure", "--groups", "1", "--probs", "0.5,0.5", "--rule", "linear"], "--probs, --rule: not read"),
    (["--derivations", "--lr", "0.1"], "--lr: not read with --derivations"),
    (["--derivations", "--out", "x"], "--out: not read with --derivations; read only with --figure"),
    (["--groups", "5"], "--groups: not read in the table"),
    (["--figure", "--derivations", "--groups", "1"], "give --figure or --derivations, not both"),
])
def test_an_option_the_mode_never_reads_is_refused(tmp_path, capsys, monkeypatch, flags, needle):
    """Before: each ran (rc 0) as if the option had not been given: --figure --gamma 1 drew the
    paper's γ = 0 step."""
    monkeypatch.chdir(tmp_path)
    assert main(["mass-step", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err, err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_figure_of_other_settings_keeps_off_the_published_name(tmp_path, capsys):
    """Before: --groups 1 with the default --out figures overwrote figures/mass_step_joint.png
    with a one-group figure."""
    from catsim.experiments.theory import mass_figure_stem

    assert main(["mass-step", "--figure", "--groups", "1", "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mass_step_joint_groups1.pdf", "mass_step_joint_groups1.png"]
    assert str(tmp_path / "mass_step_joint_groups1.png") in capsys.readouterr().out
    assert mass_figure_stem(300) == "mass_step_joint"  # the published settings keep the published name
    assert mass_figure_stem(300, seed=1) == "mass_step_joint_groups300_seed1"
