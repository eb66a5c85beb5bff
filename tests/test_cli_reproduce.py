"""`catsim reproduce`: step selection and the lemma step end to end."""

import pytest

from catsim.cli.main import main


def test_reproduce_lemma_only_writes_figures(tmp_path, capsys):
    code = main(["reproduce", "--figures", str(tmp_path / "fig"), "--runs", str(tmp_path / "runs"),
                 "--skip", "mass,verify,sim,llm"])
    assert code == 0
    names = sorted(p.name for p in (tmp_path / "fig").iterdir())
    assert names == ["lemma31_fig3.pdf", "lemma31_fig3.png", "lemma31_fig5.pdf", "lemma31_fig5.png"]
    assert all((tmp_path / "fig" / n).stat().st_size > 10_000 for n in names)


@pytest.mark.parametrize("skip", ["nonsense", "lemma,bogus"])
def test_reproduce_rejects_unknown_steps(tmp_path, capsys, skip):
    code = main(["reproduce", "--figures", str(tmp_path), "--skip", skip])
    assert code == 2
    err = capsys.readouterr().err
    assert "unknown step" in err and len(err.strip().splitlines()) == 1
