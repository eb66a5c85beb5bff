"""Arms of the Maze study: which fix keeps pass@k, at what pass@1 cost (the F-GRPO article's practical
claims, tested in the Maze regime).

    arms = run_arms("figures/maze-study/cpu", presets.cpu(), arm_set("cpu"))

An arm is a named method configuration — method, γ or γ schedule, entropy / KL coefficient, optimizer
updates per step, RL steps — at a group size N, one row of `catsim.experiments.maze.arm_table`,
trained from the study's committed warm-ups (seed s: `s<s>/base`) and evaluated exactly as the
study's runs (`study.train_and_evaluate`). An arm that *is* a study run (GRPO, F-GRPO γ = 0.5 at
N = 8, …) names it (`study_run`) and is read from the study, never rerun.

Each arm is tested against its references (`compare`; GRPO and F-GRPO γ = 0.5 at the same N unless
it says otherwise) at k = 1 and k = m with the study's paired m-out-of-n test over (seed, maze)
units, and the article's claims (`CLAIMS`) are judged from those tests by a rule fixed before the runs:
each claim is a list of (arm, reference, k, expected sign) parts; a part is met when the test is
significant (α = 0.05) in the expected direction (for "≥"/"≤": when it is not significant in the
other one); the claim holds when every part is met, does not hold when none is, and is mixed
otherwise. The headline (`headline`) is the trained arm at 2,000 steps with the largest significant
pass@m gain over GRPO, with its pass@1 change; no such arm is said as such.

Coefficients were fixed before any held-out evaluation, by one rule: the defaults of verl's
`ppo_trainer.yaml` (the paper's stack): entropy_coeff 0.001, kl_loss_coef 0.001 with its
low-variance (k3) estimator against the warm-up; DAPO and CISPO as `--method dapo|cispo` define
them (catsim's `METHODS`, from their papers); the γ ramp is the article's `get_gamma` (§5.2).

Files, beside the study's:
    <out>/s<seed>/arm-<name>-N<n>/   the arm's RL run and its eval.json (with "arm" and "settings")
    <out>/arms.json                  what the report needs: the plan, the finished runs, the pending
                                     ones, the summary, the tests and the claims' verdicts
"""

from __future__ import annotations

import dataclasses
import json
import time
import zlib
from pathlib import Path

import numpy as np

from catsim.errors import CatsimError
from catsim.experiments import provenance
from catsim.experiments.agreement import read_json
from catsim.experiments.maze import carry, stats, study
from catsim.experiments.maze.arm_table import ARM_SETS, CLAIMS, Arm, arm_set  # noqa: F401 (arm_set: as before)
from catsim.experiments.maze.pieces import read_base, read_piece, read_run, run_problem
from catsim.experiments.maze.presets import StudyPreset
from catsim.experiments.maze.summaries import stored_finder, write_summary

ARMS_FILE = "arms.json"
ALPHA = 0.05


def _check_plan(sp: StudyPreset, arms) -> None:
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise CatsimError(f"two arms share a name: {names}")
    plan = dict(sp.plan)
    for a in arms:
        if a.study_run and (plan.get(a.group_size, 0) < a.seeds or
                            (a.study_run[0] != "grpo" and a.gamma() not in sp.gammas)):
            raise CatsimError(f"arm {a.name}: the study has no {a.study_run[0]} γ = {a.gamma():g} run at "
                              f"N = {a.group_size} with {a.seeds} seeds")
        if not a.study_run and max(s for _, s in sp.plan) < a.seeds:
            raise CatsimError(f"arm {a.name}: {a.seeds} seeds, but the study warms up only "
                              f"{max(s for _, s in sp.plan)}")


def _steps(sp: StudyPreset, arm: Arm) -> int:
    return arm.steps or sp.rl_steps


def _checkpoints(sp: StudyPreset, arm: Arm) -> int:
    return _steps(sp, arm) // (arm.curve_every or sp.snapshot_every())


def read_arm_run(sp: StudyPreset, out: Path, arm: Arm, seed: int, say) -> dict | None:
    """A finished run of the arm (a study run's eval.json for a `study_run` arm), or None."""
    sdir = out / f"s{seed}"
    if arm.study_run:
        return read_run(sp, sdir, arm.method(), arm.group_size, arm.gamma(), seed, say)

    def problem(d: dict) -> str | None:
        if d.get("arm") != arm.name or d.get("settings") != json.loads(json.dumps(arm.settings())):
            return f"holds another arm ({d.get('arm')!r} with other settings)"
        return run_problem(d, method=arm.method(), group_size=arm.group_size, gamma=arm.gamma(), seed=seed,
                           label=arm.label(), steps=_steps(sp, arm), n=sp.eval_n, prompts=sp.eval_prompts,
                           ks=sp.ks, curve_n=sp.curve_n, checkpoints=_checkpoints(sp, arm))

    return read_piece(sdir / arm.label() / "eval.json", problem, say)


def arm_config(sp: StudyPreset, arm: Arm, seed: int, max_new: int):
    """The arm's RLConfig for one seed (the study's batch, learning rate and evaluation)."""
    options = {k: v for k, v in arm.options.items() if k != "gamma"}
    return study.rl_config(sp, "f-grpo" if arm.gamma() else "grpo", arm.group_size, arm.gamma(), seed,
                                max_new, options=options, updates=arm.updates, steps=arm.steps,
                                snapshot_every=arm.curve_every)


def check_arms_ready(out: Path, sp: StudyPreset, arms, say=print) -> None:
    """Refuse (CatsimError, one line) arms that do not fit the study, or a study folder the arms cannot
    build on: no study, another study, a warm-up missing, or a study run an arm names not finished."""
    _check_plan(sp, arms)
    study.check_study_ready(out, sp, range(max(a.seeds for a in arms)), say)
    for a in arms:
        for seed in range(a.seeds):
            if a.study_run and read_arm_run(sp, out, a, seed, say) is None:
                raise CatsimError(f"arm {a.name} is the study run s{seed}/{a.label()}, which is not finished: "
                                  f"run the study first (`catsim llm maze-study --out {out}`)")


def run_arms(out_dir: str | Path, sp: StudyPreset, arms, *, progress: bool | None = True, log_to: tuple = (),
             max_runs: int | None = None, say=print, only=None, stop_after: int | None = None) -> dict | None:
    """Train and evaluate every arm's missing runs (at most `max_runs` this call), seed by seed in
    the arms' order, and write arms.json (the pending runs listed when some remain; rerun to go on)
    from every arm of the preset (`summarised_arms`), not only those asked for. The study's warm-ups
    must be there, and the study runs the arms name must be finished. `only`: run only these runs
    (names `s<seed>/<arm label>`; the jobs and parts of `catsim.experiments.maze.parallel`), write no
    arms.json and return None."""
    out = Path(out_dir)
    arms = tuple(arms)
    check_arms_ready(out, sp, arms, say)
    task = study.study_task(sp)
    todo = [(a, seed) for a in arms if not a.study_run for seed in range(a.seeds)]  # arm by arm, in order
    bases: dict[int, dict] = {}
    base_ids: dict[int, str] = {}
    done_now, t0 = 0, time.perf_counter()
    for i, (arm, seed) in enumerate(todo):
        if (only is not None and f"s{seed}/{arm.label()}" not in only) or read_arm_run(sp, out, arm, seed, say):
            continue
        if carry.at_stop(out / f"s{seed}" / arm.label(), stop_after):
            continue
        if max_runs is not None and done_now >= max_runs:
            if max_runs:  # 0: arms.json rebuilt from the runs on disk, nothing to say
                say(f"stopped after {done_now} arm runs this call; rerun to resume")
            break
        sdir = out / f"s{seed}"
        study.ensure_base(sp, task, sdir, seed, bases, progress=progress, say=say)
        cfg = arm_config(sp, arm, seed, task.max_answer_chars + 1)
        record = {"arm": arm.name, "settings": arm.settings(), "method": arm.method(),
                  "group_size": arm.group_size, "gamma": arm.gamma()}
        ev = study.train_and_evaluate(sp, task, sdir, arm.label(), cfg, record, base_ids, progress=progress,
                                      log_to=log_to, say=say, stop_after=stop_after, carried=arm.carry)
        done_now += 1
        say(f"[{i + 1}/{len(todo)}] s{seed} {arm.name}: " + (
            study.run_summary(ev) if ev else f"stopped at step {carry.state_step(sdir / arm.label()):,} of "
            f"{_steps(sp, arm):,} (--stop-after; state saved: rerun to go on)"))
    if only is not None:
        return None
    result = collect_arms(out, sp, summarised_arms(sp, arms), say)
    result["seconds_this_call"] = time.perf_counter() - t0
    result["provenance"] = provenance.collect()
    return write_summary(out / ARMS_FILE, result)


def summarised_arms(sp: StudyPreset, arms) -> tuple[Arm, ...]:
    """The arms arms.json summarises: the preset's whole arm set, whichever a call asked to run (an
    arm it did not ask about keeps its runs, summary, tests and claims; one not run yet is pending),
    then any other arm given."""
    name = sp.name.removesuffix("-paper-shapes")
    every = ARM_SETS[name]() if name in ARM_SETS else ()
    known = {a.name: a for a in every}
    for a in arms:
        if known.get(a.name, a) != a:
            raise CatsimError(f"arm {a.name}: not the {sp.name} preset's arm of that name")
    return every + tuple(a for a in arms if a.name not in known)


def collect_arms(out: Path, sp: StudyPreset, arms, say=print, tests: list[dict] | None = None) -> dict:
    """arms.json's content from the run directories: the finished runs, the pending ones, each arm's
    summary (seed mean and spread; the seeds finished so far), the tests and the claims. `tests`: an
    arms.json's tests, whose subsampled fields are taken, not drawn again (`stats.paired`)."""
    bases = {}
    runs, pending = [], []
    for a in arms:
        for seed in range(a.seeds):
            ev = read_arm_run(sp, out, a, seed, say)
            if ev is None:
                pending.append(f"s{seed}/{a.label()}")
                continue
            runs.append({**ev, "arm": a.name})
            if seed not in bases:
                bases[seed] = read_base(sp, out / f"s{seed}", say)
    by_arm = {a.name: [r for r in runs if r["arm"] == a.name] for a in arms}
    done = {a.name for a in arms if len(by_arm[a.name]) == a.seeds}
    summary = [_summary(a, by_arm[a.name], bases) for a in arms if by_arm[a.name]]
    tests = arm_tests(sp, arms, by_arm, done, stored=tests)
    return {"preset": json.loads(json.dumps(dataclasses.asdict(sp))),
            "arms": [{"name": a.name, **a.settings(), "seeds": a.seeds, "study_run": list(a.study_run),
                      "compare": list(a.compare), **({"rule": a.rule, "screen": a.screen} if a.rule else {})}
                     for a in arms],
            "runs": runs, "pending": pending, "summary": summary, "tests": tests,
            "claims": judge_claims(tests, sp, {a.name for a in arms}), "headline": headline(tests, arms, sp)}


def _summary(arm: Arm, rs: list[dict], bases: dict) -> dict:
    return {"arm": arm.name, **stats.seed_stats(rs, bases),
            "rl_seconds_per_step": float(np.mean([r["rl_seconds"] / max(1, len(r["reward_curve"])) for r in rs]))}


def arm_tests(sp: StudyPreset, arms, by_arm: dict, done: set, only=None, stored=None) -> list[dict]:
    """Every finished arm (of `only`, when given) − each finished reference it names, at k = 1 and
    k = m: the study's paired m-out-of-n test over the (seed, maze) units of the seeds both hold.
    `by_arm`: {arm name: its finished runs}; `done`: the arms with every seed finished; `stored`: an
    arms.json's tests (see `stats.paired`)."""
    counts = {name: {r["seed"]: r["final"]["num_correct"] for r in rs} for name, rs in by_arm.items()}
    tests = []
    for a in (a for a in arms if only is None or a.name in only):
        for ref in a.compare:
            if a.name not in done or ref not in done or ref == a.name:
                continue
            for k in (1, sp.test_m):
                seed = zlib.crc32(f"{a.name}|{ref}|{k}".encode())
                for t in stats.paired(sp, counts[ref], counts[a.name], seed, ALPHA, ks=(k,),
                                           stored=stored_finder(stored, arm=a.name, reference=ref)):
                    tests.append({"arm": a.name, "reference": ref, **t})
    return tests


def _part_met(t: dict, sign: str) -> bool:
    up, down = t["significant"] and t["delta"] > 0, t["significant"] and t["delta"] < 0
    return {">": up, "<": down, ">=": not down, "<=": not up}[sign]


def judge_claims(tests: list[dict], sp: StudyPreset, names) -> list[dict]:
    """Each claim of `CLAIMS` whose arms are all among `names` with its parts' tests and a verdict:
    holds (every part met), does not (none met), mixed, or pending (a part's test not there yet)."""
    index = {(t["arm"], t["reference"], t["k"]): t for t in tests}
    out = []
    for c in (c for c in CLAIMS if all(a in names and r in names for a, r, *_ in c["parts"])):
        parts = []
        for arm, ref, k, sign in c["parts"]:
            k = sp.test_m if k == "m" else k
            t = index.get((arm, ref, k))
            parts.append({"arm": arm, "reference": ref, "k": k, "sign": sign,
                          "met": None if t is None else bool(_part_met(t, sign)),
                          "delta": None if t is None else t["delta"], "p_value": None if t is None else t["p_value"],
                          "interval": None if t is None else t["interval"],
                          "iterations": None if t is None else t["iterations"]})
        met = [p["met"] for p in parts]
        verdict = ("pending" if None in met else "holds" if all(met) else "does not hold" if not any(met)
                   else "mixed")
        out.append({"claim": c["claim"], "article": c["article"], "parts": parts, "verdict": verdict})
    return out


def headline(tests: list[dict], arms, sp: StudyPreset) -> dict | None:
    """The rule fixed before the runs: among trained arms at the preset's RL steps, the one with the
    largest significant pass@m gain over GRPO (with its pass@1 change); None when no arm has one."""
    trained = {a.name for a in arms if not a.study_run and not a.steps}
    best = None
    for t in tests:
        if t["arm"] in trained and t["reference"] == "grpo" and t["k"] == sp.test_m and t["significant"] \
                and t["delta"] > 0 and (best is None or t["delta"] > best["delta"]):
            best = t
    if best is None:
        return None
    one = next((t for t in tests if t["arm"] == best["arm"] and t["reference"] == "grpo" and t["k"] == 1), None)
    return {"arm": best["arm"], "pass_at_m": best, "pass_at_1": one}


def find_test(arms: dict, arm: str, reference: str, k: int) -> dict | None:
    """arms.json's test of `arm` − `reference` at k (None when it has none)."""
    return next((t for t in arms["tests"] if (t["arm"], t["reference"], t["k"]) == (arm, reference, k)), None)


def load_arms(out_dir: str | Path) -> dict | None:
    """The study's arms.json, or None when it has no arms; a damaged one is refused."""
    path = Path(out_dir) / ARMS_FILE
    if not path.is_file():
        return None
    d = read_json(path)
    if not isinstance(d, dict) or any(not isinstance(d.get(k), list) for k in ("arms", "runs", "summary", "tests",
                                                                                  "claims", "pending")):
        raise CatsimError(f"{path}: not a maze-study arms file; rerun `catsim llm maze-study --arms ...`")
    return d
