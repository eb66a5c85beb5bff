"""The Maze study's arms (catsim.experiments.maze.arms): each arm's RLConfig is what it names; an arms
study committed with the published .gitignore resumes on a fresh clone, reusing its finished runs and
the study's; a damaged arm piece is recomputed with one line; the claims' verdict and headline rules
on hand-made tests; the CLI's refusals; the report's arms section."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from catsim.cli.main import main
from catsim.errors import CatsimError
from catsim.experiments.maze import arms as maze_arms
from catsim.experiments.maze import presets as maze_presets
from catsim.experiments.maze import study
from catsim.experiments.maze.arms import Arm, arm_config, arm_set, run_arms

GITIGNORE = Path(__file__).resolve().parents[1] / "figures" / "maze-study" / "cpu" / ".gitignore"
QUIET = {"progress": False, "say": lambda *_: None}


def _git(*args, cwd):
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd, check=True,
                   capture_output=True)


def _numbers(arms: dict) -> str:
    runs = [{k: v for k, v in r.items() if k != "rl_seconds"} for r in arms["runs"]]
    summary = [{k: v for k, v in s.items() if k != "rl_seconds_per_step"} for s in arms["summary"]]
    return json.dumps({"runs": runs, "summary": summary, "tests": arms["tests"], "claims": arms["claims"]},
                      sort_keys=True)


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory):
    out = tmp_path_factory.mktemp("arms") / "study"
    study.run_study(out, maze_presets.tiny(), **QUIET)
    return out


def test_each_cpu_arm_config_is_what_it_names():
    sp, max_new = maze_presets.cpu(), 25
    arms = {a.name: a for a in arm_set("cpu")}
    cfg = {name: arm_config(sp, a, 1, max_new) for name, a in arms.items()}
    assert cfg["grpo-entropy"].objective.entropy_coef == 0.001 and cfg["grpo-entropy"].gamma.gamma == 0
    assert cfg["grpo-kl"].objective.kl_coef == 0.001 and cfg["grpo-kl"].objective.kl_estimator == "k3"
    assert (cfg["dapo"].method, cfg["dapo"].gamma.gamma) == ("dapo", 0.0)
    assert (cfg["f-cispo-g0.5"].method, cfg["f-cispo-g0.5"].gamma.gamma) == ("cispo", 0.5)
    switch = cfg["switch-1000"].gamma
    assert (float(switch(999)), float(switch(1000)), float(switch(1999))) == (0.0, 0.5, 0.5)
    ramp = cfg["gamma-ramp"].gamma
    article = lambda t: 0.5 if t <= 1000 else min(1.5, 0.5 + (t - 1000) / 2000)  # noqa: E731 (§5.2 get_gamma)
    for t in (0, 999, 1000, 1001, 2000, 3000, 5000):
        assert float(ramp(t)) == pytest.approx(article(t))
    assert cfg["grpo-4updates"].updates_per_step == 4 and cfg["grpo-4updates"].mini_batch == 64
    assert cfg["f-grpo-g0.5-4updates"].updates_per_step == 4 and cfg["grpo-entropy"].updates_per_step == 1
    assert cfg["f-grpo-g0.5-6000"].steps == 6000 and cfg["f-grpo-g0.5-6000"].run.snapshot_every == 500
    # an arm that is a study run has that run's config: its committed eval.json is the arm's
    assert cfg["grpo"] == study.rl_config(sp, "grpo", 8, 0.0, 1, max_new)
    assert cfg["grpo-N32"] == study.rl_config(sp, "grpo", 32, 0.0, 1, max_new)
    # every arm but its compute knobs matches GRPO's batch, learning rate and seed
    for c in cfg.values():
        assert (c.rollouts_per_step, c.optimizer.learning_rate, c.run.seed) == (256, 1e-4, 1)


def test_arms_resume_on_a_fresh_clone_and_reuse_finished_runs(tiny_study, tmp_path):
    sp, arms = maze_presets.tiny(), arm_set("tiny")
    repo = tmp_path / "repo"
    out = repo / "study"
    shutil.copytree(tiny_study, out)
    first = run_arms(out, sp, arms, max_runs=2, **QUIET)
    assert len(first["pending"]) == 2 and all(c["verdict"] in ("pending", "holds", "mixed", "does not hold")
                                              for c in first["claims"])
    shutil.copy(GITIGNORE, out / ".gitignore")
    _git("init", "-q", cwd=repo)
    _git("add", "-A", cwd=repo)
    _git("commit", "-q", "-m", "arms piece 1", cwd=repo)
    _git("clone", "-q", str(repo), str(tmp_path / "clone"), cwd=tmp_path)
    clone = tmp_path / "clone" / "study"
    kl = clone / "s0" / "arm-grpo-kl-N2" / "eval.json"
    assert kl.is_file() and not (kl.parent / "rl_state").exists()
    finished = kl.read_text()
    said = []
    resumed = run_arms(clone, sp, arms, progress=False, say=said.append)
    assert kl.read_text() == finished and not resumed["pending"]  # read back, not retrained
    trained = [s for s in said if s.startswith("[")]
    assert len(trained) == 2 and all("grpo-kl" not in s and "f-dapo" not in s for s in trained)
    whole = run_arms(out, sp, arms, **QUIET)  # the original, uninterrupted
    assert _numbers(resumed) == _numbers(whole)


def test_a_damaged_arm_piece_is_recomputed_with_one_line(tiny_study, tmp_path, capsys):
    out = tmp_path / "study"
    shutil.copytree(tiny_study, out)
    argv = ["llm", "maze-study", "--out", str(out), "--preset", "tiny", "--no-progress", "--arms", "all"]
    assert main(argv) == 0
    good = json.loads((out / "arms.json").read_text())
    piece = out / "s0" / "arm-f-dapo-g0.5-N2" / "eval.json"
    other = out / "s0" / "arm-grpo-kl-N2" / "eval.json"
    text, other_mtime = piece.read_text(), other.stat().st_mtime_ns
    another = json.loads(text)
    another["settings"]["options"]["gamma"] = 1.0
    for damaged, why in ((text[:40], "unreadable"), ("", "empty"), (json.dumps(another), "another arm")):
        piece.write_text(damaged)
        capsys.readouterr()
        assert main(argv) == 0
        printed = capsys.readouterr()
        notices = [line for line in printed.out.splitlines() if "recomputing it" in line]
        assert len(notices) == 1 and str(piece) in notices[0] and why in notices[0], printed.out
        assert json.loads(piece.read_text()) == json.loads(text)
        assert other.stat().st_mtime_ns == other_mtime
        assert _numbers(json.loads((out / "arms.json").read_text())) == _numbers(good)


def _t(arm, ref, k, delta, p, iterations=10_000):
    return {"arm": arm, "reference": ref, "k": k, "delta": delta, "p_value": p, "significant": p < 0.05,
            "interval": [delta - 0.01, delta + 0.01], "iterations": iterations}


@pytest.mark.parametrize("tests, verdict", [
    ([_t("grpo-entropy", "f-grpo-g0.5", 1, -0.02, 0.001), _t("grpo-entropy", "f-grpo-g0.5", 64, -0.03, 0.0)], "holds"),
    ([_t("grpo-entropy", "f-grpo-g0.5", 1, -0.02, 0.001), _t("grpo-entropy", "f-grpo-g0.5", 64, -0.03, 0.2)], "mixed"),
    ([_t("grpo-entropy", "f-grpo-g0.5", 1, 0.02, 0.001), _t("grpo-entropy", "f-grpo-g0.5", 64, -0.03, 0.2)],
     "does not hold"),
    ([_t("grpo-entropy", "f-grpo-g0.5", 1, -0.02, 0.001)], "pending"),
])
def test_claim_verdicts_follow_the_rule(tests, verdict):
    sp = maze_presets.cpu()
    claims = maze_arms.judge_claims(tests, sp, {a.name for a in arm_set("cpu")})
    entropy = next(c for c in claims if c["claim"] == "F-GRPO beats the entropy bonus")
    assert entropy["verdict"] == verdict
    assert [p["k"] for p in entropy["parts"]] == [1, 64]


@pytest.mark.parametrize("delta, p, met", [(-0.01, 0.5, True), (0.01, 0.5, True), (-0.03, 0.01, True),
                                           (0.03, 0.01, False)])
def test_at_most_parts_are_met_unless_significantly_above(delta, p, met):
    tests = [_t("grpo-N32", "f-grpo-g0.5", k, delta, p) for k in (1, 64)]
    claims = maze_arms.judge_claims(tests, maze_presets.cpu(), {a.name for a in arm_set("cpu")})
    n32 = next(c for c in claims if "N = 32" in c["claim"])
    assert [q["met"] for q in n32["parts"]] == [met, met]
    assert n32["verdict"] == ("holds" if met else "does not hold")


def test_headline_is_the_largest_significant_pass_at_m_gain_of_a_trained_arm():
    sp, arms = maze_presets.cpu(), arm_set("cpu")
    tests = [_t("dapo", "grpo", 64, 0.05, 0.0), _t("dapo", "grpo", 1, -0.01, 0.3),
             _t("cispo", "grpo", 64, 0.08, 0.2),  # larger, not significant
             _t("f-grpo-g0.5", "grpo", 64, 0.09, 0.0),  # a study run: not a trained arm
             _t("f-grpo-g0.5-6000", "grpo", 64, 0.2, 0.0)]  # another horizon
    h = maze_arms.headline(tests, arms, sp)
    assert h["arm"] == "dapo" and h["pass_at_1"]["delta"] == -0.01
    assert maze_arms.headline(tests[2:], arms, sp) is None


def test_arm_sets_and_plans_are_checked():
    with pytest.raises(CatsimError, match="unknown arm 'nope'"):
        arm_set("cpu", ["nope"])
    with pytest.raises(CatsimError, match="has no arms"):
        arm_set("paper")
    named = {a.name for a in arm_set("cpu", ["f-dapo-g0.5"])}
    assert {"f-dapo-g0.5", "dapo", "grpo", "f-grpo-g0.5"} <= named and "cispo" not in named
    with pytest.raises(CatsimError, match="no f-grpo γ = 2"):
        maze_arms._check_plan(maze_presets.cpu(), (Arm("x", study_run=("f-grpo", 2.0)),))
    with pytest.raises(CatsimError, match="4 seeds"):
        maze_arms._check_plan(maze_presets.cpu(), (Arm("x", seeds=4),))


def test_cli_refuses_in_one_line(tiny_study, tmp_path, capsys):
    for argv, why in ((["--out", str(tiny_study), "--preset", "tiny", "--arms", "bogus"], "unknown arm 'bogus'"),
                      (["--out", str(tiny_study), "--preset", "tiny", "--arms", ","], "--arms"),
                      (["--out", str(tmp_path / "none"), "--preset", "tiny", "--arms", "all"], "holds no maze study"),
                      (["--out", str(tmp_path / "p"), "--preset", "paper", "--arms", "all"], "has no arms"),
                      (["--out", str(tiny_study), "--preset", "tiny", "--arms", "all", "--max-runs", "-1"],
                       "--max-runs must be >= 0")):
        capsys.readouterr()
        assert main(["llm", "maze-study", "--no-progress", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert why in err and "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "none").exists() and not (tmp_path / "p").exists()


def test_report_has_the_arms_section_and_figures(tiny_study, tmp_path):
    out = tmp_path / "study"
    shutil.copytree(tiny_study, out)
    assert main(["llm", "maze-study", "--out", str(out), "--preset", "tiny", "--no-progress", "--arms", "all"]) == 0
    written = (out / "arms.json").read_text()
    (out / "arms.json").unlink()  # --max-runs 0 trains nothing and writes arms.json again from the runs
    assert main(["llm", "maze-study", "--out", str(out), "--preset", "tiny", "--no-progress", "--arms", "all",
                 "--max-runs", "0"]) == 0
    assert json.loads((out / "arms.json").read_text())["runs"] == json.loads(written)["runs"]
    report = tmp_path / "report"
    assert main(["llm", "maze-study", "--out", str(out), "--report", str(report)]) == 0
    text = (report / "report.md").read_text()
    assert "## Arms: which fix keeps pass@k" in text and "### The article's claims" in text
    assert "| grpo-kl | 2 |" in text and "### Horizon" in text and "--arms all" in text
    runs = {(r["arm"], r["seed"]): r["final"]["pass_at_k"]["1"] for r in json.loads(written)["runs"]}
    delta = round(100 * (runs["f-grpo-g0.5-4", 0] - runs["grpo-4", 0]), 1) + 0.0  # the horizon pair
    per_seed = f"per seed s0 {delta:+.1f})"
    assert per_seed in text
    assert json.loads((report / "arms.json").read_text()) == json.loads((out / "arms.json").read_text())
    for f in ("arms_frontier.png", "arms_horizon.png"):
        assert (report / f).read_bytes()[:4] == b"\x89PNG"
    (out / "arms.json").write_text("[]")
    assert main(["llm", "maze-study", "--out", str(out), "--report", str(tmp_path / "r2")]) == 2


def test_horizon_claims_test_each_longer_run_against_its_own_shorter_one():
    sp, names = maze_presets.cpu(), {a.name for a in arm_set("cpu")}
    assert "grpo" in next(a for a in arm_set("cpu") if a.name == "grpo-6000").compare
    tests = [_t("grpo-6000", "grpo", 64, -0.02, 0.001),  # GRPO lost more pass@64 by 6,000 steps
             _t("f-grpo-g0.5-6000", "grpo-6000", 64, 0.04, 0.0),
             _t("f-grpo-g0.5-6000", "grpo-6000", 1, -0.004, 0.3)]  # pass@1 cost no longer significant
    claims = {c["claim"]: c for c in maze_arms.judge_claims(tests, sp, names)}
    assert claims["GRPO's pass@k loss grows as training lengthens"]["verdict"] == "holds"
    longer = claims["with longer training F-GRPO keeps its pass@k gain and its pass@1 cost goes"]
    assert [p["met"] for p in longer["parts"]] == [True, True] and longer["verdict"] == "holds"
    tests[2] = _t("f-grpo-g0.5-6000", "grpo-6000", 1, -0.01, 0.001)  # the cost is still there
    claims = {c["claim"]: c for c in maze_arms.judge_claims(tests, sp, names)}
    assert claims["with longer training F-GRPO keeps its pass@k gain and its pass@1 cost goes"]["verdict"] == "mixed"
    tests[0] = _t("grpo-6000", "grpo", 64, 0.01, 0.4)
    claims = {c["claim"]: c for c in maze_arms.judge_claims(tests, sp, names)}
    assert claims["GRPO's pass@k loss grows as training lengthens"]["verdict"] == "does not hold"


SUMMARIES = ("results.json", "arms.json", "trl.json")


@pytest.fixture(scope="module")
def armed(tiny_study, tmp_path_factory):
    """The tiny study with every arm run, and trl.json from stand-in TRL evaluations (the catsim runs'
    own, relabelled: what the summaries do with TRL runs, not TRL's training, is under test)."""
    out = tmp_path_factory.mktemp("armed") / "study"
    shutil.copytree(tiny_study, out)
    assert main(["llm", "maze-study", "--out", str(out), "--preset", "tiny", "--no-progress", "--arms", "all"]) == 0
    if importlib.util.find_spec("trl") is not None:
        for ev_path in sorted(out.glob("s0/*grpo-N2*/eval.json")):
            ev = json.loads(ev_path.read_text())
            name = f"trl-{ev['label']}"
            (out / "s0" / name).mkdir()
            (out / "s0" / name / "eval.json").write_text(json.dumps(
                {**ev, "trainer": "trl", "label": name, "curve": [], "versions": {"trl": "stand-in"}}))
        assert main(["llm", "maze-study", "--out", str(out), "--preset", "tiny", "--no-progress", "--trainer", "trl",
                     "--max-runs", "0"]) == 0
    return out


def test_a_call_that_trains_nothing_changes_no_summary(armed, tmp_path, capsys):
    """Every summary file is rebuilt from all the runs on disk, never from only those a call asked
    about, and is left as it is when it says the same: a call that asks about some arms or trains
    nothing leaves results.json, arms.json and trl.json byte for byte (before: `--arms grpo-kl
    --max-runs 0` rewrote arms.json with 4 of the 6 arms, their tests and claims gone, and every
    such call rewrote the files with its own time and provenance)."""
    out = tmp_path / "study"
    shutil.copytree(armed, out)
    files = {name: (out / name).read_bytes() for name in SUMMARIES if (out / name).is_file()}
    assert len(files) == 2 + (importlib.util.find_spec("trl") is not None)
    calls = [["--arms", "grpo-kl", "--max-runs", "0"], ["--arms", "f-dapo-g0.5"], ["--arms", "all", "--max-runs", "0"],
             [], ["--max-runs", "1"], *([["--trainer", "trl", "--max-runs", "0"]] if "trl.json" in files else [])]
    for argv in calls:
        assert main(["llm", "maze-study", "--out", str(out), "--preset", "tiny", "--no-progress", *argv]) == 0, argv
        assert {name: (out / name).read_bytes() for name in files} == files, argv
    printed = capsys.readouterr().out
    assert "6 arm runs finished, 0 pending" in printed  # every arm, whichever was asked about


def test_asking_about_one_arm_keeps_every_other(armed, tmp_path):
    """An arm trained again after its runs went missing: arms.json is rebuilt with every arm of the
    preset, the others' runs, summaries, tests and claims as they were."""
    out = tmp_path / "study"
    shutil.copytree(armed, out)
    before = json.loads((out / "arms.json").read_text())
    shutil.rmtree(out / "s0" / "arm-grpo-kl-N2")
    assert main(["llm", "maze-study", "--out", str(out), "--preset", "tiny", "--no-progress", "--arms", "grpo-kl",
                 "--max-runs", "0"]) == 0
    pending = json.loads((out / "arms.json").read_text())
    assert pending["pending"] == ["s0/arm-grpo-kl-N2"] and [a["name"] for a in pending["arms"]] == \
        [a["name"] for a in before["arms"]]
    assert [s for s in pending["summary"] if s["arm"] != "grpo-kl"] == \
        [s for s in before["summary"] if s["arm"] != "grpo-kl"]
    assert main(["llm", "maze-study", "--out", str(out), "--preset", "tiny", "--no-progress", "--arms", "grpo-kl"]) == 0
    after = json.loads((out / "arms.json").read_text())
    assert _numbers(after) == _numbers(before) and after["headline"] == before["headline"]


def _set(path: list, value):
    def edit(d):
        for key in path[:-1]:
            d = d[key]
        d[path[-1]] = value
    return edit


@pytest.mark.parametrize("name, edit, where", [
    ("results.json", None, None),
    ("results.json", _set(["summary", 0, "pass_at_k", "1"], 0.99), "summary[0].pass_at_k.1 is 0.99"),
    ("results.json", _set(["runs", 1, "final", "greedy_solve_rate"], 0.99),
     "runs[1] (s0/f-grpo-N2-g0.5).final.greedy_solve_rate is 0.99"),
    ("results.json", _set(["tests", 0, "delta"], 0.5), "tests[0].delta is 0.5"),
    ("arms.json", _set(["summary", 2, "pass_at_k", "4"], 0.99), "summary[2].pass_at_k.4 is 0.99"),
    ("arms.json", _set(["claims", 0, "verdict"], "holds!"), "claims[0].verdict is \"holds!\""),
    ("arms.json", _set(["headline"], {"arm": "grpo-kl"}), "headline is {\"arm\": \"grpo-kl\"}"),
    ("trl.json", _set(["cross", 1, "grpo", "1"], 0.99), "cross[1].grpo.1 is 0.99"),
])
def test_report_refuses_a_summary_that_disagrees_with_its_runs(armed, tmp_path, capsys, name, edit, where):
    """`--report` publishes a summary file only when it says what the runs on disk say: one edited
    number is refused in one line naming the file and the field (before: published as it stood)."""
    if not (armed / name).is_file():
        pytest.skip(f"no {name} (TRL is not installed)")
    out = tmp_path / "study"
    shutil.copytree(armed, out)
    if edit is not None:
        d = json.loads((out / name).read_text())
        edit(d)
        (out / name).write_text(json.dumps(d, indent=1))
    capsys.readouterr()
    rc = main(["llm", "maze-study", "--out", str(out), "--report", str(tmp_path / "report")])
    err = capsys.readouterr().err.strip()
    if edit is None:
        assert rc == 0 and (tmp_path / "report" / "report.md").is_file(), err
        return
    assert rc == 2 and f"{out / name}: {where}, but the runs on disk give" in err, err
    assert "--max-runs 0" in err or name == "results.json"
    assert "\n" not in err and "Traceback" not in err and not (tmp_path / "report").exists()


def test_docs_table_is_the_arm_table():
    """docs/llm-maze-study.md's table of arms is `arm_table.markdown_table` of the cpu preset's rows
    (an arm added to the table and not to the docs fails here), and every row says what it is."""
    from catsim.experiments.maze.arm_table import cpu_arms, markdown_table

    doc = (GITIGNORE.parents[3] / "docs" / "llm-maze-study.md").read_text()
    assert markdown_table(maze_presets.cpu(), cpu_arms()) in doc
    assert all(a.what for a in cpu_arms())
    # the docs' line makes no run: arms that differ only in it are the same arm
    assert Arm("x", what="one") == Arm("x", what="two")


def test_the_rule_zoo_trains_every_registry_rule():
    """Every rule of the registry (a new one included) has a zoo arm, or the table says why not;
    each zoo arm's screen row exists in the simulator's methods study, and its options build a run."""
    from catsim.experiments import methods as methods_study
    from catsim.experiments.maze.arm_table import NOT_IN_ZOO, zoo_arms
    from catsim.objectives import registry

    zoo = zoo_arms()
    assert set(registry.NAMES) - {a.rule for a in zoo} == set(NOT_IN_ZOO)
    assert set(NOT_IN_ZOO) <= set(registry.NAMES)
    rows = {m.name for m in methods_study.METHODS}
    assert all(a.screen in rows for a in zoo if a.screen)
    from catsim.experiments.maze.arm_table import cpu_arms
    assert all(a in cpu_arms() for a in zoo) and all(not a.study_run and a.seeds == 3 for a in zoo)
    for a in zoo:
        cfg = maze_arms.arm_config(maze_presets.cpu(), a, 0, 26)
        assert cfg.group_size == 8 and cfg.method_spec() is not None, a.name
