"""Agreement of a reproduction with the published numbers: comparison, tolerances, readers,
reference files, provenance, and the `catsim reproduce` summary line and --strict exit code."""

import json
import math
import os
import re
from pathlib import Path

import pytest
from scipy import stats

from catsim.cli.main import main
from catsim.errors import CatsimError
from catsim.experiments import agreement, provenance, reproduction
from catsim.experiments import published as src
from catsim.experiments.agreement import Published, compare

REPO = Path(__file__).resolve().parents[1]

TABLE_4 = """method paper: final values, mean ± std over 4 seed(s) (min–max)
      N reg |             Qpos γ=0              |             Mret γ=0
-----------------------------------------------------------------------
      2   I | 0.63241 ± 0.00004 (0.6323–0.6324) | 0.99460 ± 0.00009 (0.9945–0.9947)
    256  II | 0.99284 ± 0.00028 (0.9924–0.9931) | 0.04557 ± 0.00000 (0.0432–0.0485)
regimes from data (γ=0 mean final Mret < 0.5): I: N=2…2, II: N=256…256
"""
TABLE_1 = TABLE_4.replace("over 4 seed(s)", "over 1 seed(s)").replace("0.63241", "0.63244")


# ---- comparison and tolerance rules ------------------------------------------------------------


def test_compare_agreeing_disagreeing_missing_and_unpublished():
    published = {"a": Published(1.0, 0.1, "x"), "b": Published(2.0, 0.1, "x"),
                 "c": Published(3.0, 0.1, "x"), "d": Published(4.0, 0.0, "x")}
    now = {"a": 1.05, "b": 2.5, "d": 4.0, "e": 7.0}
    rows = compare(published, now)
    assert [r.quantity for r in rows] == ["a", "b", "c", "d"]
    assert [r.agrees for r in rows] == [True, False, False, True]
    assert rows[2].now is None and rows[2].difference is None  # missing: never agrees
    assert [r.identical for r in rows] == [False, False, False, True]
    assert agreement.unpublished(published, now) == ["e"]
    assert agreement.summary(rows) == "2 of 4 published numbers agree within tolerance"
    assert not compare({"a": Published(1.0, 1e9, "x")}, {"a": math.nan})[0].agrees


def test_tolerance_edge_is_inclusive():
    assert compare({"a": Published(1.0, 0.25, "x")}, {"a": 1.25})[0].agrees
    assert not compare({"a": Published(1.0, 0.25, "x")}, {"a": 1.2500001})[0].agrees


def test_exact_rules():
    assert agreement.exact(24).tolerance == 0 and "exact" in agreement.exact(24).basis
    p = agreement.exact(0.125)
    assert p.tolerance == pytest.approx(0.125 * agreement.EXACT_REL, rel=1e-12)
    assert compare({"q": p}, {"q": 0.125 * (1 + 1e-13)})[0].agrees
    assert not compare({"q": p}, {"q": 0.125 * (1 + 1e-11)})[0].agrees


def test_seed_mean_tolerance_is_t_quantile_times_se_of_difference():
    q = stats.t.ppf(1 - agreement.ALPHA / 2, 3)
    p = agreement.seed_mean(0.5, 0.002, 4, rounding=5e-6)
    assert p.tolerance == pytest.approx(q * 0.002 * math.sqrt(2 / 4) + 1e-5, rel=1e-12)
    # a printed sd of 0 counts as half the last digit, not as no spread
    zero = agreement.seed_mean(0.5, 0.0, 4, rounding=5e-6)
    assert zero.tolerance == pytest.approx(q * 5e-6 * math.sqrt(0.5) + 1e-5, rel=1e-12)
    # one seed, spread from 4 seeds elsewhere: the difference of two single draws
    one = agreement.seed_mean(0.5, 0.002, 1, rounding=5e-6, sd_of=4)
    assert one.tolerance == pytest.approx(q * 0.002 * math.sqrt(2) + 1e-5, rel=1e-12)
    assert agreement.seed_mean(0.5, 0.0, 1, rounding=5e-6).tolerance == pytest.approx(1e-5)


def test_standard_error_rule():
    p = agreement.standard_error(0.3, 0.01, "bootstrap")
    assert p.tolerance == pytest.approx(stats.norm.ppf(1 - agreement.ALPHA / 2) * math.sqrt(2) * 0.01)


def test_format_table_marks_rows():
    rows = compare({"same": Published(1.0, 0.1, "b1"), "close": Published(1.0, 0.1, "b2"),
                    "far": Published(1.0, 0.1, "b3"), "gone": Published(1.0, 0.1, "b4")},
                   {"same": 1.0, "close": 1.01, "far": 2.0})
    lines = agreement.format_table(rows).splitlines()
    assert lines[0].split()[:5] == ["quantity", "published", "now", "tolerance", "agrees"]
    assert re.search(r"same .* yes\s+b1", lines[1])
    assert re.search(r"close .* yes \(≈\)\s+b2", lines[2])
    assert re.search(r"far .* NO\s+b3", lines[3]) and re.search(r"gone .*missing.* NO", lines[4])


# ---- readers ----------------------------------------------------------------------------------


def test_fig2_table_reader():
    parsed = src.parse_fig2_table(TABLE_4)
    assert parsed == {"Fig. 2 N=2 Qpos γ=0": (0.63241, 0.00004, 4), "Fig. 2 N=2 Mret γ=0": (0.9946, 0.00009, 4),
                      "Fig. 2 N=256 Qpos γ=0": (0.99284, 0.00028, 4),
                      "Fig. 2 N=256 Mret γ=0": (0.04557, 0.0, 4)}
    one = src.fig2_published(TABLE_1, spread_from=TABLE_4)
    assert one["Fig. 2 N=2 Qpos γ=0"] == agreement.seed_mean(0.63244, 0.00004, 1, rounding=5e-6, sd_of=4)
    assert src.fig2_published(TABLE_1)["Fig. 2 N=2 Qpos γ=0"].basis.startswith("printed digits")
    with pytest.raises(CatsimError, match="not a Fig. 2 table"):
        src.parse_fig2_table("hello\nworld")
    with pytest.raises(CatsimError, match="cannot read"):
        src.parse_fig2_table(TABLE_4.replace("0.99284 ± 0.00028", "n/a"))


def test_published_fig2_table_reads_every_cell():
    parsed = src.parse_fig2_table((REPO / "figures" / "fig2_paper_table.txt").read_text())
    assert len(parsed) == 17 * 4 and {n for _, _, n in parsed.values()} == {4}
    assert parsed["Fig. 2 N=65536 Mret γ=0"] == (0.75049, 0.16684, 4)  # the published table


def _run(label, seed, p1, lo, hi, mret_per_prompt):
    return {"label": label, "seed": seed,
            "eval": {"pass_at_k": {"1": p1}, "interval": {"1": [lo, hi]}},
            "answer_mass": {"mret": sum(mret_per_prompt) / len(mret_per_prompt),
                            "mret_per_prompt": mret_per_prompt}}


def test_llm_reader_means_over_seeds_and_their_standard_error():
    z95 = stats.norm.ppf(0.975)
    results = {"tasks": {"maze": {
        "base": {"pass_at_k": {"1": 0.2}, "interval": {"1": [0.2 - z95 * 0.01, 0.2 + z95 * 0.01]}},
        "runs": {"grpo:8:s0": _run("GRPO", 0, 0.30, 0.29, 0.31, [0.5, 0.7]),
                 "grpo:8:s1": _run("GRPO", 1, 0.40, 0.39, 0.41, [0.6, 0.6])}}}}
    values = src.llm_values(results)
    assert values == pytest.approx({"LLM maze: warm-up pass@1": 0.2, "LLM maze: GRPO pass@1": 0.35,
                                    "LLM maze: GRPO Mret": 0.6})
    pub = src.llm_published(results)
    assert pub["LLM maze: warm-up pass@1"].tolerance == pytest.approx(
        agreement.standard_error(0.2, 0.01, "x").tolerance)
    # seeds 0.30 and 0.40: sd/√2 = 0.05 beats the bootstrap se (0.01/z95/√2)
    assert pub["LLM maze: GRPO pass@1"].tolerance == pytest.approx(
        agreement.standard_error(0.35, 0.05, "x").tolerance)
    assert "seed sd" in pub["LLM maze: GRPO pass@1"].basis
    with pytest.raises(CatsimError, match="malformed"):
        src.llm_values({"tasks": {"maze": {"base": {}}}})


def test_theory_published_rules():
    pub = src.theory_published({"Lemma x: n_argmax": 24.0, "Lemma x: n_star": 24.3416,
                                "mass step: share y": 1.0}, groups=300)
    assert pub["Lemma x: n_argmax"].tolerance == 0
    assert pub["Lemma x: n_star"].tolerance == pytest.approx(24.3416e-12)
    p = 301 / 302  # (x + 1) / (G + 2): a share of 1 still has a spread
    assert pub["mass step: share y"].tolerance == pytest.approx(
        agreement.standard_error(1.0, math.sqrt(p * (1 - p) / 300), "x").tolerance)


@pytest.mark.published
def test_published_theory_reference_holds_the_readme_numbers():
    ref = agreement.load_reference(REPO / "figures" / "reference" / "theory.json")
    lemma = ref["lemma"]
    readme = (REPO / "README.md").read_text()
    block = readme[readme.index("  tau  mu_pos   n_star"):]
    rows = [line.split() for line in block.splitlines()[1:10]]
    assert len(rows) == 9
    for tau, mu, *fields in rows:
        for field, text in zip(src.PEAK_FIELDS, fields):
            value = lemma[f"Lemma 3.1 peak τ={float(tau):g} μ={float(mu):g}: {field}"].value
            assert f"{value:.6g}" == text, (tau, mu, field)
    mass = ref["mass"]
    assert mass["mass step (logprob): first-order dQpos/η"].value == pytest.approx(0.125, abs=5e-4)
    assert mass["mass step (paper): first-order dQu,pos/η"].value == pytest.approx(-0.0052, abs=5e-5)
    shares = [mass[f"mass step: share Qpos↑ Qu,pos↓, N={n}"].value for n in (8, 256, 131072)]
    assert [round(100 * s, 1) for s in shares] == [97.7, 100.0, 93.0]  # docs/theory.md


@pytest.mark.published
def test_lemma_numbers_agree_with_the_published_reference():
    ref = agreement.load_reference(REPO / "figures" / "reference" / "theory.json")["lemma"]
    rows = compare(ref, src.lemma_values())
    assert len(rows) == 63 and all(r.agrees for r in rows)


# ---- reference files --------------------------------------------------------------------------


def test_reference_round_trip_merges_steps_and_records_provenance(tmp_path):
    path = tmp_path / "ref" / "quick.json"
    agreement.write_reference(path, {"sim": {"a": Published(1.0, 0.1, "b")}}, "test")
    agreement.write_reference(path, {"llm": {"c": Published(2.0, 0.2, "d")}}, "test")
    assert agreement.load_reference(path) == {"sim": {"a": Published(1.0, 0.1, "b")},
                                              "llm": {"c": Published(2.0, 0.2, "d")}}
    prov = agreement.reference_provenance(path)
    assert prov["sim"]["jax_version"] == prov["llm"]["jax_version"]
    assert os.stat(path).st_mode & 0o044 == 0o044  # readable by others, like any published file
    assert [p.name for p in path.parent.iterdir()] == ["quick.json"]  # no temp file left behind
    path.write_text(json.dumps({"steps": {"sim": {"a": 1}}}))
    with pytest.raises(CatsimError, match="not a catsim reference file"):
        agreement.load_reference(path)


# ---- check_reproduction and the CLI -----------------------------------------------------------


def _setup(tmp_path, now_table: str):
    pub, runs = tmp_path / "pub", tmp_path / "runs"
    agreement.write_reference(pub / reproduction.QUICK_REFERENCE,
                              {"sim": src.fig2_published(TABLE_1, spread_from=TABLE_4)}, "test")
    (runs / "sim-quick").mkdir(parents=True)
    (runs / "sim-quick" / "fig2_table.txt").write_text(now_table)
    return pub, runs


def _check(pub, runs, steps, quick=True, **kw):
    lines = []
    published = reproduction.load_published(quick, steps, pub=pub)
    code = reproduction.check_reproduction(published, runs, steps, log=lines.append, **kw)
    return code, lines


def test_check_reproduction_agreeing(tmp_path):
    pub, runs = _setup(tmp_path, TABLE_1.replace("0.99460", "0.99470"))
    code, lines = _check(pub, runs, ["sim"], strict=True)
    assert code == 0
    assert lines[-1] == "4 of 4 published numbers agree within tolerance (3 identical to the published digits)"


def test_check_reproduction_disagreeing_and_missing(tmp_path):
    table = TABLE_1.replace("0.99460", "0.90000")
    table = "\n".join(ln for ln in table.splitlines() if not ln.lstrip().startswith("256"))
    pub, runs = _setup(tmp_path, table)
    code, lines = _check(pub, runs, ["sim"])
    assert code == 0 and lines[-1].startswith("1 of 4 published numbers agree within tolerance")
    code, lines = _check(pub, runs, ["sim"], strict=True)
    assert code == 1
    assert re.search(r"Fig. 2 N=256 Qpos γ=0\s+0.99284\s+missing", "\n".join(lines))
    # a step that did not run is not compared; nothing compared is a failure under --strict
    published = reproduction.load_published(True, ["sim"], pub=pub)
    lines = []
    assert reproduction.check_reproduction(published, runs, [], strict=True, log=lines.append) == 1
    assert lines[-1].startswith("0 of 0 published numbers")
    # the run's output file is gone altogether: every number is missing
    (runs / "sim-quick" / "fig2_table.txt").unlink()
    code, lines = _check(pub, runs, ["sim"], strict=True)
    assert code == 1 and lines[-1].startswith("0 of 4 published numbers")
    assert any(ln.startswith("note: sim:") and "not found" in ln for ln in lines)


def test_published_numbers_are_read_before_the_run(tmp_path):
    pub, runs = _setup(tmp_path, TABLE_1)
    published = reproduction.load_published(True, ["sim"], pub=pub)
    (pub / reproduction.QUICK_REFERENCE).write_text("{}")  # a step overwrites figures/ meanwhile
    lines = []
    assert reproduction.check_reproduction(published, runs, ["sim"], strict=True, log=lines.append) == 0
    with pytest.raises(CatsimError, match="not a catsim reference file"):
        reproduction.load_published(True, ["sim"], pub=pub)


def test_written_references_record_the_checkout_as_it_was_before_the_run(tmp_path, monkeypatch):
    """A step writes into figures/ (the LLM report) before the references are written: the record
    must describe the checkout before the run, not one those writes made '+dirty'."""
    from catsim.experiments import provenance

    pub, runs = _setup(tmp_path, TABLE_1)
    calls = iter([{"git_commit": "abc"}, {"git_commit": "abc+dirty"}, {"git_commit": "abc+dirty"}])
    monkeypatch.setattr(provenance, "collect", lambda: next(calls))
    published = reproduction.load_published(True, ["sim"], pub=pub)
    reproduction.check_reproduction(published, runs, ["sim"], write=True, log=lambda line: None)
    records = agreement.reference_provenance(pub / reproduction.QUICK_REFERENCE)
    assert records["sim"]["git_commit"] == "abc"


def _cli(tmp_path, *extra):
    return main(["reproduce", "--figures", str(tmp_path / "fig"), "--runs", str(tmp_path / "runs"),
                 "--skip", "mass,verify,sim,llm", *extra])


def test_cli_summary_line_and_strict_exit_code(tmp_path, monkeypatch, capsys):
    pub = tmp_path / "pub"
    published = src.theory_published(src.lemma_values())
    agreement.write_reference(pub / reproduction.THEORY_REFERENCE, {"lemma": published}, "test")
    monkeypatch.setattr(reproduction, "published_dir", lambda: pub)
    assert _cli(tmp_path, "--strict") == 0
    out = capsys.readouterr().out
    assert "63 of 63 published numbers agree within tolerance (63 identical" in out

    name = "Lemma 3.1 peak τ=0.01 μ=0.5: max_value"
    wrong = {**published, name: Published(published[name].value * (1 + 1e-9), published[name].tolerance,
                                          published[name].basis)}
    agreement.write_reference(pub / reproduction.THEORY_REFERENCE, {"lemma": wrong}, "test")
    assert _cli(tmp_path) == 0  # without --strict a disagreement is reported, not an error
    assert _cli(tmp_path, "--strict") == 1
    out = capsys.readouterr().out
    assert "62 of 63 published numbers agree within tolerance" in out
    assert re.search(re.escape(name) + r"\s.*NO", out)


def test_cli_write_references_needs_a_checkout(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(reproduction, "published_dir", lambda: None)
    assert _cli(tmp_path, "--write-references") == 2
    err = capsys.readouterr().err
    assert "source checkout" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "fig").exists()  # refused before any work


# ---- provenance -------------------------------------------------------------------------------


def test_cpu_info_reads_model_and_isa_flags():
    text = ("processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: fpu sse4_2 avx avx2 fma avx512f x\n"
            "processor\t: 1\nmodel name\t: Test CPU 9000\nflags\t\t: fpu\n")
    assert provenance.cpu_info(text) == ("Test CPU 9000", ["sse4_2", "avx", "avx2", "fma", "avx512f"])


def test_collect_and_differences(tmp_path):
    import jax

    record = provenance.collect()
    assert record["jax_version"] == jax.__version__ and record["device_count"] == jax.device_count()
    assert json.loads(json.dumps(record)) == record
    assert provenance.differences(record, dict(record)) == []
    changed = {**record, "xla_flags": "--xla_cpu_max_isa=SSE4_2"}
    assert provenance.differences(record, changed) == [
        f"xla_flags: {record['xla_flags']} -> --xla_cpu_max_isa=SSE4_2"]
    assert provenance.differences(None, record) == ["provenance not recorded"]
    assert provenance.git_commit(tmp_path) is None
    assert provenance.stamp({"a": 1})["a"] == 1


def test_git_commit_dirty_only_for_changes_outside_figures(tmp_path):
    import shutil
    import subprocess

    if shutil.which("git") is None:
        pytest.skip("git not installed")
    repo = tmp_path / "repo"
    (repo / "figures").mkdir(parents=True)
    (repo / "figures" / "table.txt").write_text("1\n")
    (repo / "code.py").write_text("x = 1\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "init"]):
        subprocess.run(["git", "-C", str(repo), *cmd], check=True, env=env)
    clean = provenance.git_commit(repo)
    assert clean is not None and not clean.endswith("+dirty")
    (repo / "figures" / "table.txt").write_text("2\n")  # a run rewrote a published output
    assert provenance.git_commit(repo) == clean
    (repo / "code.py").write_text("x = 2\n")
    assert provenance.git_commit(repo) == clean + "+dirty"


def test_full_run_reads_the_published_files_and_write_publishes_this_run(tmp_path):
    pub, runs = tmp_path / "pub", tmp_path / "runs"
    pub.mkdir()
    (pub / "fig2_paper_table.txt").write_text(TABLE_4)
    (runs / "sim-full").mkdir(parents=True)
    rerun = TABLE_4.replace("0.63241 ± 0.00004", "0.63300 ± 0.00004")  # 0.00059 off: 15 sd
    (runs / "sim-full" / "fig2_table.txt").write_text(rerun)
    code, lines = _check(pub, runs, ["sim"], quick=False, strict=True, write=True)
    assert code == 1
    assert any("sim published on another set-up (provenance not recorded)" in ln for ln in lines)
    assert any(ln.startswith("3 of 4 published numbers agree") for ln in lines)
    assert (pub / "fig2_paper_table.txt").read_text() == rerun  # published now
    sidecar = json.loads((pub / "fig2_paper_table_provenance.json").read_text())
    assert sidecar == {**provenance.collect(), "git_commit": sidecar["git_commit"]}
    code, lines = _check(pub, runs, ["sim"], quick=False, strict=True)
    assert code == 0
    assert lines[-1] == "4 of 4 published numbers agree within tolerance (4 identical to the published digits)"


def test_quick_write_takes_the_spread_from_the_published_full_table(tmp_path):
    pub, runs = tmp_path / "pub", tmp_path / "runs"
    pub.mkdir()
    (pub / "fig2_paper_table.txt").write_text(TABLE_4)
    (runs / "sim-quick").mkdir(parents=True)
    (runs / "sim-quick" / "fig2_table.txt").write_text(TABLE_1)
    _check(pub, runs, ["sim"], write=True)
    ref = agreement.load_reference(pub / reproduction.QUICK_REFERENCE)["sim"]
    assert ref == src.fig2_published(TABLE_1, spread_from=TABLE_4)
    assert ref["Fig. 2 N=256 Qpos γ=0"].basis.startswith("t(3)")
