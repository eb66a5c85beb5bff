"""The paper's Maze study (§5.2, App. K): does F-GRPO keep pass@k where GRPO loses it?

    results = run_study("runs/maze-study", presets.cpu())

For every seed s: one supervised warm-up (`catsim.llm.sft`, init and batch order seeded by s),
then from that same warm-up model GRPO and F-GRPO at every γ, at every group size N of the
preset's plan (RL seed s). Every model — the warm-up and each RL run's final policy — is scored
on the same held-out mazes (split seed `data_seed`): n samples per maze at temperature 1, pass@k
for the preset's k by the unbiased estimator (`catsim.llm.metrics.pass_at_k`), and π(solution)
per maze by teacher forcing (the maze has one solution). Every RL run also writes
`checkpoints` evenly spaced snapshots, each scored with `curve_n` samples on `curve_prompts`
mazes: pass@k against RL step (the paper's early pass@K drop).

F-GRPO − GRPO at each k is tested with the paper's paired m-out-of-n subsampling
(`catsim.llm.metrics.paired_subsample_test`, two-sided, α = 0.05): the units are (seed, maze)
pairs — the same maze under the GRPO and the F-GRPO run of one seed, which share a warm-up —
and each iteration draws m of the n samples of every unit, independently for the two methods.

Files (everything resumes: a finished piece is read back, an interrupted RL run resumes from its
state):
    <out>/study.json                 the preset (a different one in the same directory is refused)
    <out>/s<seed>/base/              warm-up model;  <out>/s<seed>/base_eval.json
    <out>/s<seed>/<run>/             RL run (`catsim.llm.rl.run_rl`);  <out>/s<seed>/<run>/eval.json
    <out>/results.json               everything the report needs (`catsim.experiments.maze.report`)
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from catsim.errors import CatsimError
from catsim.experiments import provenance
from catsim.experiments.agreement import read_json
from catsim.experiments.maze import presets
from catsim.experiments.maze.pieces import (
    base_identity,
    read_base,
    read_piece,
    read_run,
    results_problem,
    rl_base_id,
)
from catsim.experiments.maze.presets import StudyPreset, run_label, run_names
from catsim.experiments.maze.provenance import recompute_note
from catsim.experiments.maze.stats import change_tests, paired_tests, summarize
from catsim.experiments.maze.summaries import write_summary
from catsim.files import write_text

STUDY_FILE = "study.json"
RESULTS_FILE = "results.json"


def study_task(sp: StudyPreset):
    from catsim.llm.tasks import make_task

    return make_task("maze", size=sp.maze_size, algorithm=sp.algorithm, n_heldout=sp.n_heldout)


def write_piece(path: Path, data: dict) -> dict:
    write_text(path, json.dumps(data, indent=1, default=str) + "\n")
    return data


def preset_json(sp: StudyPreset) -> dict:
    return json.loads(json.dumps(dataclasses.asdict(sp)))


def settings_diff(have: dict, want: dict) -> str:
    keys = sorted(k for k in want if have.get(k) != want[k])
    return ", ".join(keys[:4]) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")


def _check_study_file(out: Path, sp: StudyPreset, say) -> bool:
    """Refuse (CatsimError) a directory that holds a study with other settings; True when study.json
    is to be written (missing or damaged: then results.json and the warm-ups say what the directory
    holds). Writes nothing."""
    want = preset_json(sp)
    notes: list[str] = []
    have = read_piece(out / STUDY_FILE, lambda d: None if isinstance(d.get("preset"), dict) else "no preset",
                      notes.append)
    if have is not None:
        if have["preset"] != want:
            raise CatsimError(f"{out} holds a maze study with other settings ({settings_diff(have['preset'], want)}; see "
                              f"{out / STUDY_FILE}): rerun with the options it was made with, or use another --out")
        return False
    other = _other_study(out, sp, want)
    if other:
        raise CatsimError(f"{out}: {STUDY_FILE} is {'damaged' if notes else 'missing'} and {other}: the folder "
                          "holds another study; rerun with the options it was made with, or use another --out")
    for note in notes:
        say(note)
    return True


def _other_study(out: Path, sp: StudyPreset, want: dict) -> str | None:
    """What in `out` (its results.json, a seed's warm-up settings) shows a study other than `sp`."""
    try:
        recorded = json.loads((out / RESULTS_FILE).read_text()).get("preset")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        recorded = None
    if isinstance(recorded, dict) and recorded != want:
        return f"{out / RESULTS_FILE} records another study (preset {recorded.get('name')!r}; {settings_diff(recorded, want)})"
    for seed in range(max(s for _, s in sp.plan)):
        base = out / f"s{seed}" / "base"
        try:
            record = json.loads((base / "sft_config.json").read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue  # none yet, or damaged: the warm-up's own check
        if _warm_up_settings(record, *_sft_config(sp, seed)):
            known = {"--preset paper": presets.paper(), "--preset cpu": presets.cpu(),
                     "--preset tiny": presets.tiny(), "--preset tiny --paper-shapes": presets.tiny(True)}
            named = [k for k, p in known.items() if not _warm_up_settings(record, *_sft_config(p, seed))]
            return f"{base} was warmed up with other settings" + (f" (those of {named[0]})" if named else "")
    return None


def _sft_config(sp: StudyPreset, seed: int):
    from catsim.llm.sft import ModelSize, SFTConfig

    cfg = SFTConfig(steps=sp.sft_steps, batch_size=sp.sft_batch, learning_rate=sp.sft_lr,
                    lr_schedule=sp.sft_schedule, warmup_steps=min(20, sp.sft_steps // 10), seed=seed,
                    data_seed=sp.data_seed, save_every=max(1, min(100, sp.sft_steps // 4)))
    return cfg, ModelSize(hidden_size=sp.hidden, num_layers=sp.layers, num_heads=sp.heads)


def _warm_up_settings(record, cfg, size) -> str | None:
    """What in a warm-up's sft_config.json differs from these settings, or None."""
    if not isinstance(record, dict) or record.get("sft") != json.loads(json.dumps(dataclasses.asdict(cfg))):
        return "trained with other warm-up settings"
    sizes = record.get("model_size")
    if not isinstance(sizes, dict) or any(sizes.get(k) != v for k, v in dataclasses.asdict(size).items() if v):
        return "a model of another size"
    return None


def _warm_up_problem(out: Path, cfg, size) -> str | None:
    """What is wrong with a finished warm-up directory (its settings, its weights file), or None."""
    from safetensors import safe_open

    try:
        why = _warm_up_settings(json.loads((out / "sft_config.json").read_text()), cfg, size)
        if why:
            return why
        with safe_open(str(out / "model.safetensors"), framework="numpy") as f:
            if not list(f.keys()):
                return "no weights"
    except Exception as err:  # OSError, JSONDecodeError, safetensors' SafetensorError
        return f"unreadable ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
    return None


def _warm_up(sp: StudyPreset, task, out: Path, seed: int, progress: bool) -> Path:
    """The seed's warm-up model (trained, or resumed, when not finished). A finished one that is
    damaged or has other settings is refused: the seed's evaluations and runs were made from it."""
    from catsim.experiments.warm_up import run_warm_up

    if not _finished(out):
        run_warm_up(task, *_sft_config(sp, seed), out, eval_prompts=0, progress=progress)
    _check_warm_up(sp, out, seed)
    return out


def _finished(base: Path) -> bool:
    return (base / "config.json").is_file() and (base / "catsim_task.json").is_file()


def _check_warm_up(sp: StudyPreset, base: Path, seed: int) -> None:
    why = _warm_up_problem(base, *_sft_config(sp, seed))
    if why:
        raise CatsimError(f"{base}: warm-up model not usable ({why}); restore it (e.g. from git), or move "
                          f"{base.parent} aside to recompute seed {seed} (its runs start from this model)")


def evaluate(sp: StudyPreset, task, model_dir: Path, *, n: int, n_prompts: int, ks, label: str,
             progress: bool, solution_mass: bool) -> dict:
    """pass@k counts of one model on the first `n_prompts` held-out mazes (n samples each, τ = 1),
    the greedy solve rate, and π(solution) per maze when `solution_mass`."""
    from catsim.llm import evaluate as ev

    policy = ev.load_policy(model_dir)
    max_new = task.max_answer_chars + 1
    res = ev.evaluate_passk(policy, task, n=n, ks=[k for k in ks if k <= n], n_prompts=n_prompts,
                            data_seed=sp.data_seed, max_new_tokens=max_new, seed=12345,
                            batch_size=sp.eval_batch, progress=progress, label=label)
    prompts = ev.eval_prompts(task, "heldout", sp.data_seed, n_prompts)
    greedy = ev.sample(policy, task, prompts, 1, max_new_tokens=max_new, batch_size=sp.eval_batch,
                       temperature=0.0)
    res["greedy_solve_rate"] = float(np.mean(greedy.scores >= 1.0))
    if solution_mass:
        res["solution_prob"] = [float(m[0]) for m in ev.answer_mass_table(policy, task, prompts)]
    return json.loads(json.dumps(res))  # the keys as results.json reads them back (k as strings)


def rl_config(sp: StudyPreset, method: str, n: int, gamma: float, seed: int, max_new: int, *,
              options: dict | None = None, updates: int = 0, steps: int = 0, snapshot_every: int = 0):
    """The RLConfig of a study run: GRPO (`method` "grpo") or F-GRPO at γ (`method` "f-grpo") at N
    with the preset's batch, learning rate and snapshots. An arm (`catsim.experiments.maze.arms`)
    adds flat `options` (`RLConfig.from_flat` names: method, gamma schedule, coefficients), its own
    optimizer `updates` per step (mini-batches of whole groups), `steps` and `snapshot_every`."""
    from catsim.llm.rl import RLConfig

    steps = steps or sp.rl_steps
    prompts, updates = sp.prompts(n), updates or sp.updates(n)
    if prompts % updates:
        raise CatsimError(f"{updates} updates per step need the {prompts} prompts of a step to divide evenly")
    mini = prompts // updates * n
    fields = {"method": "grpo", "group_size": n}
    if sp.rollout_batch and sp.rollout_batch < prompts * n:  # whole groups per generate call
        fields["rollout_batch_size"] = max(n, sp.rollout_batch // n * n)
    if sp.micro_batch and sp.micro_batch < mini and mini % sp.micro_batch == 0:
        fields["micro_batch_size"] = sp.micro_batch
    if method == "f-grpo":
        fields["gamma"] = gamma
    fields.update(options or {})
    return RLConfig.from_flat(**fields, steps=steps, prompts_per_step=prompts,
                              mini_batch_size=mini, learning_rate=sp.learning_rate,
                              warmup_steps=sp.warmup_steps, max_new_tokens=max_new, seed=seed,
                              data_seed=sp.data_seed, snapshot_every=snapshot_every or sp.snapshot_every(),
                              save_every=max(1, min(50, steps // sp.checkpoints)))


def prepare_study(out: Path, sp: StudyPreset, say=print) -> None:
    """Every check of the study folder `out` before the first file is written (its study.json, its
    finished warm-ups: CatsimError, one line), then its study.json when that is missing or damaged."""
    write_study_file = _check_study_file(out, sp, say)
    for seed in range(max(s for _, s in sp.plan)):
        if _finished(out / f"s{seed}" / "base"):
            _check_warm_up(sp, out / f"s{seed}" / "base", seed)
    if write_study_file:
        write_piece(out / STUDY_FILE, {"preset": preset_json(sp)})


def run_study(out_dir: str | Path, sp: StudyPreset, *, progress: bool | None = True, log_to: tuple = (),
              max_runs: int | None = None, say=print, only=None) -> dict | None:
    """Run (or resume) the study in `out_dir` and write results.json; returns the results, or None
    when `max_runs` RL runs were done this call and more remain (rerun to go on). `only`: run only
    these runs (names `s<seed>/<label>`; the jobs and parts of `catsim.experiments.maze.parallel`),
    write no results.json and return None."""
    out = Path(out_dir)
    task = study_task(sp)
    prepare_study(out, sp, say)
    t0 = time.perf_counter()
    runs = run_names(sp)
    bases: dict[int, dict] = {}
    base_ids: dict[int, str] = {}  # each warm-up's content: its runs' fingerprint holds it, not its path
    done_now = 0
    for i, (method, n, gamma, seed) in enumerate(runs):
        sdir = out / f"s{seed}"
        label = run_label(method, n, gamma)
        if only is not None and f"s{seed}/{label}" not in only:
            continue
        finished = read_run(sp, sdir, method, n, gamma, seed, say) is not None
        if not finished and max_runs is not None and done_now >= max_runs:  # before the next seed's warm-up
            say(f"stopped after {done_now} runs this call ({i} of {len(runs)} done); rerun to resume")
            return None
        ensure_base(sp, task, sdir, seed, bases, progress=progress, say=say)
        if finished:
            continue
        cfg = rl_config(sp, method, n, gamma, seed, task.max_answer_chars + 1)
        ev = train_and_evaluate(sp, task, sdir, label, cfg, {"method": method, "group_size": n, "gamma": gamma,
                                                            "seed": seed}, base_ids, progress=progress, log_to=log_to,
                                say=say)
        done_now += 1
        say(f"[{i + 1}/{len(runs)}] s{seed} {label}: {run_summary(ev)}")
    if only is not None:
        return None
    results = collect(out, sp, say)
    results["seconds_this_call"] = time.perf_counter() - t0
    results["provenance"] = provenance.collect()
    return write_summary(out / RESULTS_FILE, results)  # unchanged when it says the same


def check_study_ready(out: Path, sp: StudyPreset, seeds, say=print) -> None:
    """Refuse (CatsimError, one line) to build on a study folder that holds no study, another study,
    or a missing or unusable warm-up of one of `seeds`: the arms and the TRL runs start from them."""
    if not (out / STUDY_FILE).is_file():
        raise CatsimError(f"{out} holds no maze study: run `catsim llm maze-study --out {out}` first")
    _check_study_file(out, sp, say)  # the same settings as the study, or refused
    for seed in sorted(set(seeds)):
        if not _finished(out / f"s{seed}" / "base"):
            raise CatsimError(f"{out / f's{seed}' / 'base'}: no warm-up; run the study first")
        _check_warm_up(sp, out / f"s{seed}" / "base", seed)


def ensure_base(sp: StudyPreset, task, sdir: Path, seed: int, bases: dict, *, progress: bool, say) -> dict:
    """Seed `seed`'s warm-up (trained when missing) and its evaluation, kept in `bases`."""
    if seed not in bases:
        base_dir = _warm_up(sp, task, sdir / "base", seed, progress)
        bases[seed] = read_base(sp, sdir, say) or write_piece(sdir / "base_eval.json", evaluate(
            sp, task, base_dir, n=sp.eval_n, n_prompts=sp.eval_prompts, ks=sp.ks, label=f"s{seed} eval base",
            progress=progress, solution_mass=True))
        say(f"seed {seed}: warm-up greedy solve rate {bases[seed]['greedy_solve_rate']:.3f}, "
            f"pass@1 {bases[seed]['pass_at_k']['1']:.3f}")
    return bases[seed]


def train_and_evaluate(sp: StudyPreset, task, sdir: Path, label: str, cfg, record: dict, base_ids: dict, *,
                       progress: bool, log_to: tuple = (), say=print, stop_after: int | None = None,
                       carried: bool = False) -> dict | None:
    """Train (or resume) the RL run `sdir/label` from the seed's warm-up, evaluate its final policy
    and every snapshot, and write its eval.json: `record` (what the run is) with the evaluations, the
    RL time, the reward per step and where each piece of the run was computed ("provenance"). One
    line to `say` when the study's other runs (or this run's earlier pieces) come from another set-up.
    `stop_after`: stop once this many steps are done (state saved) and return None when the run is
    not finished. `carried`: a run carried between machines (`catsim.experiments.maze.carry`): its
    log rebuilt from the committed pieces first, one state kept, and each piece's end leaves its log
    piece and its snapshots' evaluations (curve.json)."""
    from catsim.experiments.maze import carry
    from catsim.llm.rl import read_log, run_rl

    seed, rdir = cfg.run.seed, sdir / label
    note = recompute_note(sdir.parent, f"{sdir.name}/{label}", provenance.collect())
    if note:
        say(note)
    if seed not in base_ids:
        base_ids[seed] = base_identity(sdir / "base")
    if carried:
        carry.unpack(rdir, say)
    try:
        result = run_rl(sdir / "base", rdir, cfg, progress=progress, label=f"s{seed} {label}", log_to=log_to,
                        base_id=rl_base_id(rdir, sdir / "base", cfg, base_ids[seed]), stop_after=stop_after,
                        keep_states=1 if carried else 2)
    except KeyboardInterrupt:  # stopped (Ctrl-C, SIGTERM: the state saved): the piece so far can be committed
        if carried:
            carry.pack(rdir, carry.state_step(rdir), say)
        raise
    if carried:
        carry.pack(rdir, result.steps_done, say)
        if not result.finished:
            _curve(sp, task, rdir, cfg, label, progress, result.steps_done, say)
    if not result.finished:
        return None
    final = evaluate(sp, task, Path(result.out_dir) / "model", n=sp.eval_n, n_prompts=sp.eval_prompts,
                     ks=sp.ks, label=f"s{seed} eval {label}", progress=progress, solution_mass=True)
    curve = _curve(sp, task, rdir, cfg, label, progress, result.steps_done, say, carried=carried)
    log = read_log(rdir)
    return write_piece(rdir / "eval.json", {**record, "seed": seed, "label": label, "final": final, "curve": curve,
                                       "rl_seconds": float(sum(r["step_seconds"] for r in log)),
                                       "reward_curve": [float(r["reward"]) for r in log],
                                       "provenance": provenance.run_pieces(rdir)})


def _curve(sp: StudyPreset, task, rdir: Path, cfg, label: str, progress, steps_done: int, say,
           carried: bool = True) -> list[dict]:
    """pass@k against step: each snapshot's evaluation on the curve mazes. A carried run keeps them in
    curve.json as they are made and takes there those whose snapshots another machine made."""
    from catsim.experiments.maze import carry

    def point(snap: Path) -> dict:
        e = evaluate(sp, task, snap, n=sp.curve_n, n_prompts=sp.curve_prompts, ks=sp.ks,
                     label=f"s{cfg.run.seed} {label} {snap.name}", progress=progress, solution_mass=False)
        return {"step": int(snap.name.split("_")[1]), "pass_at_k": e["pass_at_k"],
                "greedy_solve_rate": e["greedy_solve_rate"]}

    snaps = sorted((rdir / "checkpoints").glob("step_*"))
    if not carried:
        return [point(snap) for snap in snaps]
    fingerprint = read_json(rdir / "rl_config.json")["fingerprint"]
    points = carry.read_curve(rdir, fingerprint, say)
    for snap in snaps:
        step = int(snap.name.split("_")[1])
        if step not in points:
            points[step] = point(snap)
            carry.write_curve(rdir, fingerprint, points)
    every = cfg.run.snapshot_every
    missing = [s for s in range(every, steps_done + 1, every) if s not in points] if every else []
    if missing:
        raise CatsimError(f"{rdir}: no snapshot and no evaluation of step {missing[0]} (curve.json was not committed "
                          "with its piece); restore it from the study's history, or rerun the run with --overwrite")
    return [points[s] for s in sorted(points) if s <= steps_done]


def run_summary(ev: dict) -> str:
    """One line of a finished run: its final pass@1, greedy solve rate and RL time per step."""
    steps = max(1, len(ev["reward_curve"]))
    return (f"pass@1 {ev['final']['pass_at_k'].get('1', float('nan')):.3f}, greedy "
            f"{ev['final']['greedy_solve_rate']:.3f}, RL {ev['rl_seconds'] / steps:.3f} s/step")


def collect(out: Path, sp: StudyPreset, say=print, stored: dict | None = None) -> dict:
    """results.json's content from the run directories (every run must be evaluated). `stored`: a
    results.json whose tests' subsampled fields are taken (see `paired`), to check it."""
    bases = {}
    runs = []
    for method, n, gamma, seed in run_names(sp):
        if seed not in bases:
            bases[seed] = read_base(sp, out / f"s{seed}", say)
            if bases[seed] is None:
                raise CatsimError(f"seed {seed}'s warm-up has no usable evaluation; rerun the study")
        ev = read_run(sp, out / f"s{seed}", method, n, gamma, seed, say)
        if ev is None:
            raise CatsimError(f"run s{seed}/{run_label(method, n, gamma)} has no evaluation yet; rerun the study")
        runs.append(ev)
    stored = stored or {}
    return {"preset": json.loads(json.dumps(dataclasses.asdict(sp))), "bases": {str(s): b for s, b in bases.items()},
            "runs": runs, "summary": summarize(runs, sp, bases), "tests": paired_tests(runs, sp, stored=stored.get("tests")),
            "changes": change_tests(runs, bases, sp, stored=stored.get("changes"))}


def load_results(out_dir: str | Path) -> dict:
    path = Path(out_dir) / RESULTS_FILE
    if not path.is_file():
        raise CatsimError(f"{path} not found: run `catsim llm maze-study --out {out_dir}` first")
    results = read_json(path)
    why = results_problem(results)
    if why:
        raise CatsimError(f"{path}: not a maze-study results file ({why})")
    return results
