"""Regression tests of the published CPU Maze study (figures/maze-study/, its runs in
figures/maze-study/cpu/, docs/llm-maze-study.md, docs/findings.md).

- results.json, report.md and the tests in them are what the code makes of the committed per-run
  evaluations (exact: the aggregation and the subsampling test are NumPy, seeded).
- The committed seed-0 warm-up, evaluated again, gives its published numbers within the sampling
  spread of a fresh evaluation (binomial over the samples: 4 standard errors).
- The first RL steps of the published s0 GRPO N = 8 run, rerun from the committed warm-up, give its
  logged training reward within the same kind of spread.
- The numbers the docs quote are the published ones.
- The arms (arms.json) and the TRL runs (trl.json) are what the code makes of their committed per-run
  evaluations, and the report's copies are those files.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

from catsim.experiments.maze import arms as maze_arms
from catsim.experiments.maze import presets as maze_presets
from catsim.experiments.maze import stats, study
from catsim.experiments.maze import trl as maze_trl
from catsim.experiments.maze.report import write_report
from catsim.experiments.maze.screen import load_screen, write_screen

pytestmark = pytest.mark.published

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "figures" / "maze-study"
STUDY = REPORT / "cpu"


@pytest.fixture(scope="module")
def published():
    return json.loads((REPORT / "results.json").read_text())


def test_results_and_report_are_those_of_the_committed_runs(published, tmp_path):
    sp = maze_presets.cpu()
    assert published["preset"] == json.loads(json.dumps(dataclasses.asdict(sp)))
    assert len(published["runs"]) == len(study.run_names(sp)) == 15
    said = []
    runs = [study.read_run(sp, STUDY / f"s{seed}", method, n, gamma, seed, said.append)
            for method, n, gamma, seed in study.run_names(sp)]
    bases = {seed: study.read_base(sp, STUDY / f"s{seed}", said.append) for seed in (0, 1, 2)}
    assert not said and all(r is not None for r in runs)  # every committed piece is usable
    assert runs == published["runs"] and {str(s): b for s, b in bases.items()} == published["bases"]
    assert json.loads(json.dumps(stats.summarize(runs, sp, bases))) == published["summary"]
    # the headline tests (N = 8, k = 1 and 64) recomputed: same seeds, so the same numbers to the bit
    head = dataclasses.replace(sp, plan=((8, 3),), ks=(1, 64))
    now = json.loads(json.dumps(stats.paired_tests(runs, head) + stats.change_tests(runs, bases, head)))
    for t in now:
        match = [p for p in published["tests"] + published["changes"]
                 if {k: p.get(k) for k in ("method", "group_size", "gamma", "k")}
                 == {k: t.get(k) for k in ("method", "group_size", "gamma", "k")}]
        assert match == [t]
    assert len(now) == 2 * 2 + 3 * 2
    write_report(published, tmp_path, study_dir="figures/maze-study/cpu", arms=maze_arms.load_arms(STUDY),
                 trl=maze_trl.load_trl(STUDY), screen=load_screen(STUDY))
    made = (tmp_path / "report.md").read_text().replace(f"--report {tmp_path}", "--report figures/maze-study")
    assert made == (REPORT / "report.md").read_text()


def _within_binomial(p_published: float, p_now: float, samples: int, z: float = 4.0) -> bool:
    p = min(max(p_published, 1.0 / samples), 1 - 1.0 / samples)
    return abs(p_now - p_published) <= z * np.sqrt(2 * p * (1 - p) / samples)


def test_the_committed_warm_up_reevaluates_to_its_published_numbers(published):
    sp = maze_presets.cpu()
    task = study.study_task(sp)
    prompts = 32
    now = study.evaluate(sp, task, STUDY / "s0" / "base", n=sp.eval_n, n_prompts=prompts, ks=(1, 64),
                         label="", progress=False, solution_mass=False)
    base = published["bases"]["0"]
    then = np.asarray(base["num_correct"][:prompts])
    assert _within_binomial(float(then.mean() / sp.eval_n), now["pass_at_k"]["1"], prompts * sp.eval_n)


def test_the_first_rl_steps_reproduce_the_published_run(published, tmp_path):
    from catsim.llm.rl import read_log, run_rl

    sp = maze_presets.cpu()
    task = study.study_task(sp)
    cfg = study.rl_config(sp, "grpo", 8, 0.0, 0, task.max_answer_chars + 1)
    steps = 15
    run_rl(STUDY / "s0" / "base", tmp_path / "rl", cfg, stop_after=steps, progress=False)
    now = np.asarray([r["reward"] for r in read_log(tmp_path / "rl")])
    run = next(r for r in published["runs"] if r["label"] == "grpo-N8" and r["seed"] == 0)
    then = np.asarray(run["reward_curve"][:steps])
    assert now.shape == then.shape
    assert _within_binomial(float(then.mean()), float(now.mean()), steps * sp.rollouts_per_step)


def test_the_docs_quote_the_published_numbers(published):
    """Every "pass@1 X / pass@64 Y" pair the README and docs quote for a method is the published one."""
    docs = "".join((ROOT / page).read_text() for page in ("README.md", "docs/findings.md", "docs/llm-maze-study.md"))
    rows = {(s["method"], s["group_size"], s["gamma"]): s for s in published["summary"]}
    found = 0
    for m in re.finditer(r"(GRPO|F-GRPO γ = ([0-9.]+)) at\s+N = (\d+):\s+pass@1 ([0-9.]+) %,\s+pass@64 ([0-9.]+) %", docs):
        method = "grpo" if m.group(1) == "GRPO" else "f-grpo"
        gamma = 0.0 if method == "grpo" else float(m.group(2))
        s = rows[(method, int(m.group(3)), gamma)]
        assert float(m.group(4)) == pytest.approx(100 * s["pass_at_k"]["1"], abs=0.051), m.group(0)
        assert float(m.group(5)) == pytest.approx(100 * s["pass_at_k"]["64"], abs=0.051), m.group(0)
        found += 1
    assert found >= 3


def _published_arms():
    committed = maze_arms.load_arms(STUDY)
    if committed is None:
        pytest.skip("no arms.json published yet")
    return committed


def test_arms_are_those_of_the_committed_runs():
    """Everything but the tests recomputed from the committed pieces; the tests (seeded NumPy, so
    exact) recomputed for two arms — every test costs a second — and the claims and headline judged
    again from the committed tests."""
    committed, sp, arms = _published_arms(), maze_presets.cpu(), maze_arms.arm_set("cpu")
    said = []
    now = json.loads(json.dumps(maze_arms.collect_arms(STUDY, sp, arms, said.append, tests=committed["tests"])))
    assert not said  # every committed piece is usable
    for key, value in now.items():
        assert committed[key] == value, key
    by_arm = {a.name: [r for r in committed["runs"] if r["arm"] == a.name] for a in arms}
    done = {a.name for a in arms if len(by_arm[a.name]) == a.seeds}
    # pkpo-k4: a rule zoo arm; f-grpo-g0.5-20000: App. K's horizon, whose claim the docs state
    some = [a for a in ("grpo-entropy", "f-grpo-g0.5", "pkpo-k4", "f-grpo-g0.5-20000") if a in done]
    again = json.loads(json.dumps(maze_arms.arm_tests(sp, arms, by_arm, done, only=some)))
    assert again and again == [t for t in committed["tests"] if t["arm"] in some]
    assert json.loads((REPORT / "arms.json").read_text()) == committed  # the report's copy


def test_trl_is_that_of_the_committed_runs():
    committed = maze_trl.load_trl(STUDY)
    if committed is None:
        pytest.skip("no trl.json published yet")
    said = []
    now = json.loads(json.dumps(maze_trl.collect(STUDY, maze_presets.cpu(), said.append)))
    assert not said
    for key, value in now.items():
        assert committed[key] == value, key
    assert json.loads((REPORT / "trl.json").read_text()) == committed


# The docs' arms table: its first cell names the arm; the columns after it are pass@1, pass@m,
# Δ pass@1 vs GRPO, Δ pass@m vs GRPO, Δ pass@m vs F-GRPO γ = 0.5 (points) and RL seconds per step.
ARM_LABELS = {
    "GRPO (study run)": "grpo", "F-GRPO γ = 0.5 (study run)": "f-grpo-g0.5",
    "F-GRPO γ = 1 (study run)": "f-grpo-g1", "GRPO at N = 32 (study run, seed 0)": "grpo-N32",
    "GRPO + entropy 0.001": "grpo-entropy", "GRPO + KL 0.001": "grpo-kl", "DAPO": "dapo",
    "F-DAPO γ = 0.5": "f-dapo-g0.5", "CISPO": "cispo", "F-CISPO γ = 0.5": "f-cispo-g0.5",
    "GRPO → F-GRPO at step 1,000": "switch-1000", "γ ramp (get_gamma)": "gamma-ramp",
    "GRPO, 4 updates a step": "grpo-4updates", "F-GRPO γ = 0.5, 4 updates a step": "f-grpo-g0.5-4updates",
    "GRPO, 6,000 steps": "grpo-6000", "F-GRPO γ = 0.5, 6,000 steps": "f-grpo-g0.5-6000",
    "GRPO, 20,000 steps": "grpo-20000", "F-GRPO γ = 0.5, 20,000 steps": "f-grpo-g0.5-20000",
}


def _number(cell: str) -> float | None:
    m = re.match(r"\s*([+−-]?[0-9.]+)", cell)
    return None if m is None else float(m.group(1).replace("−", "-"))


def test_the_docs_arms_table_quotes_arms_json():
    """Every number of the arms table in docs/llm-maze-study.md is arms.json's (to its last digit),
    and a cell reads – only where arms.json has no such test."""
    committed = _published_arms()
    text = (ROOT / "docs" / "llm-maze-study.md").read_text()
    section = text.split("### Where the arms stand", 1)[1].split("\n#", 1)[0]
    zoo = {a["name"] for a in committed["arms"] if a.get("rule")}  # docs/which-rule.md quotes those
    summary = {s["arm"]: s for s in committed["summary"] if s["arm"] not in zoo}
    tests = {(t["arm"], t["reference"], str(t["k"])): t for t in committed["tests"]}
    m = str(committed["tests"][0]["m"])
    rows = 0
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] not in ARM_LABELS:
            continue
        arm, rows = ARM_LABELS[cells[0]], rows + 1
        s = summary[arm]
        assert _number(cells[1]) == pytest.approx(100 * s["pass_at_k"]["1"], abs=0.051), line
        assert _number(cells[2]) == pytest.approx(100 * s["pass_at_k"][m], abs=0.051), line
        for cell, ref, k in ((cells[3], "grpo", "1"), (cells[4], "grpo", m), (cells[5], "f-grpo-g0.5", m)):
            t = tests.get((arm, ref, k)) or tests.get((ref, arm, k))
            if cell == "–":
                assert t is None or arm == ref, line
                continue
            sign = 1 if t["arm"] == arm else -1
            assert _number(cell) == pytest.approx(100 * sign * t["delta"], abs=0.051), line
            p = "p < 10⁻⁴" if t["p_value"] == 0 and t["iterations"] == 10_000 else f"p = {t['p_value']:.2g}"
            assert cell.endswith(f"({p})"), line
        assert _number(cells[6]) == pytest.approx(s["rl_seconds_per_step"], abs=0.0005), line
    assert rows == len(summary)  # every arm with results is in the table


def _points(fraction: float, signed: bool = True) -> str:
    """A fraction in points as the docs write it: one decimal, a sign, the minus sign U+2212."""
    return (f"{100 * fraction:+.1f}" if signed else f"{100 * fraction:.1f}").replace("-", "−")


def test_the_docs_state_app_k_horizons_verdict():
    """docs/llm-maze-study.md's paragraph on App. K's horizon quotes arms.json: both arms' means at
    20,000 steps, F-GRPO − GRPO at k = 1 and k = m with its interval and per-seed values, and the
    claim's verdict; docs/findings.md and the README give the same verdict and pass@1 change."""
    committed = _published_arms()
    claim = next(c for c in committed["claims"] if c["claim"].startswith("at App. K's horizon"))
    if claim["verdict"] == "pending":
        pytest.skip("the 20,000-step runs are not finished")
    text = (ROOT / "docs" / "llm-maze-study.md").read_text()
    para = text.split("**At App. K's horizon**", 1)[1].split("\n\n", 1)[0]
    summary = {s["arm"]: s for s in committed["summary"]}
    m = str(committed["tests"][0]["m"])
    for arm in ("f-grpo-g0.5-20000", "grpo-20000"):
        for k in ("1", m):
            assert f"{_points(summary[arm]['pass_at_k'][k], signed=False)} %" in para, (arm, k)
    for part in claim["parts"]:
        t = next(t for t in committed["tests"] if (t["arm"], t["reference"], t["k"]) == (part["arm"], part["reference"], part["k"]))
        said = (f"{_points(t['delta'])} points of pass@{t['k']}** [{_points(t['interval'][0])}, "
                f"{_points(t['interval'][1])}]")
        assert said in para, said
        seeds = ", ".join(_points(v) for _, v in sorted(t["delta_per_seed"].items(), key=lambda kv: int(kv[0])))
        assert f"per seed {seeds}" in para, seeds
    assert f"**{claim['verdict']}**" in para
    k1 = next(p for p in claim["parts"] if p["k"] == 1)
    for page in ("docs/findings.md", "README.md"):
        said = (ROOT / page).read_text()
        assert f"{_points(k1['delta'])} points of pass@1" in said and f"**{claim['verdict']}**" in said, page


def test_the_committed_summaries_say_what_their_runs_say():
    """results.json, arms.json and trl.json pass `--report`'s check against the committed runs (every
    number recomputed from the runs' eval.json but the tests' subsampled fields)."""
    from catsim.experiments.maze.check import check_summaries

    check_summaries(STUDY, study.load_results(STUDY), maze_arms.load_arms(STUDY), maze_trl.load_trl(STUDY))


def test_the_screen_holds_the_methods_studys_numbers(tmp_path):
    """screen.json's simulator numbers are figures/methods/methods.json's at N = 8 (the committed
    methods study, which tests/test_methods_published.py checks), and the report's copy is it."""
    committed = load_screen(STUDY)
    if committed is None:
        pytest.skip("no screen.json published yet")
    again = write_screen(tmp_path, Path(__file__).resolve().parents[1] / committed["source"], maze_arms.arm_set("cpu"))
    assert again["rows"] == committed["rows"] and committed["n"] == 8
    assert json.loads((REPORT / "screen.json").read_text()) == committed


def test_the_rule_page_quotes_the_leaderboard():
    """docs/which-rule.md's leaderboard: every finished rule arm, each number arms.json's (pass@1,
    pass@m, Δ against GRPO with its p) or screen.json's (the simulator's changes at N = 8)."""
    committed, screen = _published_arms(), load_screen(STUDY)
    text = (ROOT / "docs" / "which-rule.md").read_text()
    arms = {a["name"]: a for a in committed["arms"] if a.get("rule")}
    summary = {s["arm"]: s for s in committed["summary"] if s["arm"] in arms}
    tests = {(t["arm"], t["reference"], str(t["k"])): t for t in committed["tests"]}
    m = str(committed["preset"]["test_m"])
    seen = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not cells or cells[0].strip("`") not in arms:
            continue
        arm = cells[0].strip("`")
        s, seen = summary[arm], seen + [arm]
        assert int(cells[1]) == len(s["seeds"]), line
        assert _number(cells[2]) == pytest.approx(100 * s["pass_at_k"]["1"], abs=0.051), line
        assert _number(cells[3]) == pytest.approx(100 * s["pass_at_k"][m], abs=0.051), line
        for cell, k in ((cells[4], m), (cells[5], "1")):
            t = tests[(arm, "grpo", k)]
            assert _number(cell) == pytest.approx(100 * t["delta"], abs=0.051), line
            p = "p < 10⁻⁴" if t["p_value"] == 0 and t["iterations"] == 10_000 else f"p = {t['p_value']:.2g}"
            assert cell.endswith(f"({p})"), line
        sim, base = screen["rows"].get(arms[arm]["screen"]), screen["rows"]["GRPO"]
        want = "–" if sim is None else f"{sim['mret'] - base['mret']:+.3f} / {sim['qpos'] - base['qpos']:+.3f}"
        assert cells[6].replace("−", "-") == want, line
    assert sorted(seen) == sorted(summary)  # every rule arm with results, once
