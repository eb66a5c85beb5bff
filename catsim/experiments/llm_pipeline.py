"""The LLM pipeline: warm-up (or a given base model) → RL for methods × group sizes × seeds →
evaluation → results.json and a report directory (markdown table, comparison, pass@k curves,
training dynamics, theory overlay; drawn by `catsim.experiments.llm_report`).

    report = run_pipeline("runs/pipeline", quick=True)          # what `catsim reproduce` runs
    report = run_pipeline("runs/pipeline")                      # the CPU default (< 30 min target)

Run specs are "method:N" with method grpo, dapo, cispo, dr_grpo, their focal variants
f-grpo, f-dapo, f-cispo, f-dr_grpo (γ = `gamma`), grpo-lowlr (GRPO at lr·m_γ, App. N) or
asym-grpo. Compute is matched across group sizes: every step samples `rollouts_per_step`
rollouts, i.e. rollouts_per_step / N prompts (at least one).

Files: <out>/<task>/base (warm-up model), <out>/<task>/<run label>-s<seed>/ (RL runs),
<out>/results.json, <out>/report.md, <out>/comparison.png (method comparison: reward and held-out
accuracy vs step, pass@1 by difficulty level, pass@k), <out>/passk_curves.png,
<out>/training_dynamics.png, <out>/theory_overlay.png.

results.json holds everything the report and figures need, including every run's per-step
training curves (`curves`), so they can be re-rendered without the run directories. It summarises
every run of `out` whose directory is still there, not only the runs of the last call: a rerun
with fewer --runs keeps the others' entries as they were (`summary_so_far`); a call with other
settings than the summary's (anything but the tasks, runs and seeds) is refused.
Besides pass@k, ΔNLL_rare, answer mass and the forgetting ledger, every run gets steps to a target
training reward (and held-out accuracy, when `heldout_every` > 0) and, on tasks with difficulty
levels (Maze `sizes`), pass@k per level; `PipelineConfig.compare()` is the GRPO / F-GRPO /
asym-GRPO comparison (`catsim.experiments.llm_compare`, `catsim llm compare`).

Multiple processes (`jax.distributed`, `mesh=` over every process's devices): every process runs
every phase (warm-up, RL runs, evaluation) on the same data, each holding its shards; process 0
alone writes results.json, report.md and the figures (`write_results`), the runs' own files as
`catsim.llm.rundir` does.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from catsim.errors import CatsimError
from catsim.experiments import provenance
from catsim.experiments.llm_report import training_curves, write_report
from catsim.files import write_text
from catsim.llm import evaluate as ev
from catsim.llm import metrics
from catsim.llm.model.sharding import barrier, is_primary
from catsim.llm.rl import RLConfig, read_log, run_rl


@dataclass(frozen=True)
class TaskSetup:
    """One task of the pipeline and the sizes used for it."""

    name: str  # "paths", "maze" or "math"
    options: dict = field(default_factory=dict)  # task config fields (catsim.llm.tasks.make_task)
    max_new_tokens: int = 0  # completion cap; 0 = the task's longest answer + 1


@dataclass(frozen=True)
class PipelineConfig:
    """Everything the pipeline varies (CPU defaults; `quick()` is the few-minute version)."""

    tasks: tuple = (TaskSetup("paths", {"height": 4, "width": 4, "min_answers": 3, "max_answers": 6,
                                        "zipf_exponent": 1.5}),
                    TaskSetup("maze", {"size": 7}))  # the small Maze and the many-solution task
    runs: tuple = ("grpo:8", "f-grpo:8", "grpo:2", "grpo:32")  # "method:N" specs
    gamma: float = 0.5  # γ of the f- methods and of the grpo-lowlr control (paper: 0.5)
    seeds: tuple = (0, 1)  # RL seeds per run spec
    rl_steps: int = 40  # RL steps per run
    rollouts_per_step: int = 64  # rollouts per step (compute-matched across N)
    updates_per_step: int = 2  # mini-batches per step (paper: 256/64 = 4)
    learning_rate: float = 1e-4  # RL lr (constant after warm-up; the paper's Maze value; 3e-4 lost pass@k everywhere)
    warmup_steps: int = 2  # RL lr warm-up steps
    sft_steps: int = 300  # warm-up steps (catsim.llm.sft)
    sft_batch: int = 32  # warm-up batch size
    sft_lr: float = 2e-3  # warm-up peak lr
    model_hidden: int = 64  # warm-up model width
    model_layers: int = 2  # warm-up model depth
    model_heads: int = 4  # warm-up model heads
    eval_prompts: int = 64  # held-out prompts scored
    eval_n: int = 64  # samples per held-out prompt (pass@k for k ≤ eval_n)
    ks: tuple = (1, 2, 4, 8, 16, 32, 64)  # k values reported
    rare_prompts: int = 64  # train prompts sampled for the ΔNLL_rare set
    rare_n: int = 64  # base samples per prompt for the ΔNLL_rare set
    rare_quantile: float = 0.01  # "rare" = top 1% by base NLL (paper App. M.2)
    test_m: int = 16  # m of the paired m-out-of-n test (paper: 256 of 1024)
    test_iterations: int = 20_000  # subsampling iterations (paper: 50k)
    data_seed: int = 0  # task split seed
    target_reward: float = 0.5  # steps-to-target: first step whose trailing mean training reward ≥ this
    target_window: int = 5  # steps-to-target: trailing window, in RL steps
    heldout_every: int = 0  # RL runs: held-out accuracy + safeguards every this many steps (0 = never)
    heldout_prompts: int = 32  # RL runs: held-out prompts of that accuracy (one sample each, τ = 1)

    @staticmethod
    def compare() -> PipelineConfig:
        """The asym-GRPO evaluation at CPU scale: GRPO vs F-GRPO vs asym-GRPO on Maze with difficulty
        levels 1–3 (sizes 5, 7, 9), four seeds; steps to a target reward, pass@1/10/16, accuracy by
        level (docs/asymmetric-grpo.md §10). About 25 min on the shared 2-core CPU."""
        return PipelineConfig(
            tasks=(TaskSetup("maze", {"sizes": (5, 7, 9), "n_heldout": 40}),),
            runs=("grpo:8", "f-grpo:8", "asym-grpo:8"), seeds=(0, 1, 2, 3), rl_steps=40, rollouts_per_step=32,
            updates_per_step=2, learning_rate=3e-4, sft_steps=300, sft_batch=32, model_hidden=64,
            model_layers=2, model_heads=4, eval_prompts=40, eval_n=16, ks=(1, 4, 10, 16), rare_prompts=16,
            rare_n=16, test_m=4, test_iterations=5000, target_reward=0.25, target_window=4, heldout_every=2,
            heldout_prompts=32)

    @staticmethod
    def compare_quick() -> PipelineConfig:
        """`compare` shrunk to seconds per run (tests, smoke checks): numbers mean nothing. Every
        sampling batch (rollouts, held-out accuracy, evaluation, rare set) has 8 rows, so the
        sampler compiles once per temperature."""
        return dataclasses.replace(
            PipelineConfig.compare(), tasks=(TaskSetup("maze", {"sizes": (5, 7), "n_heldout": 8}),),
            runs=("grpo:4", "asym-grpo:4"), seeds=(0,), rl_steps=2, rollouts_per_step=8, sft_steps=10,
            sft_batch=8, model_hidden=32, model_heads=2, eval_prompts=4, eval_n=2, ks=(1, 2), rare_prompts=4,
            rare_n=2, test_m=2, test_iterations=200, target_window=1, heldout_every=1, heldout_prompts=8)

    @staticmethod
    def quick() -> PipelineConfig:
        """A few-minute version: one tiny paths task, GRPO vs F-GRPO at N=4, one seed."""
        return PipelineConfig(
            tasks=(TaskSetup("paths", {"height": 3, "width": 3, "min_answers": 2, "max_answers": 6,
                                       "obstacle_density": 0.1, "n_heldout": 16}),),
            runs=("grpo:4", "f-grpo:4"), seeds=(0,), rl_steps=4, rollouts_per_step=16, updates_per_step=2,
            sft_steps=60, sft_batch=16, model_hidden=32, model_layers=2, model_heads=2,
            eval_prompts=16, eval_n=16, ks=(1, 4, 16), rare_prompts=16, rare_n=16, test_m=8,
            test_iterations=2000)


def parse_run(spec: str, gamma: float) -> tuple[str, dict]:
    """"f-grpo:8" -> ("F-GRPO N=8", RLConfig fields)."""
    try:
        name, n = spec.split(":")
        n = int(n)
    except ValueError:
        raise CatsimError(f"run spec {spec!r} must look like method:N, e.g. f-grpo:8") from None
    name = name.strip().lower().replace("drgrpo", "dr_grpo").replace("dr-grpo", "dr_grpo")
    fields: dict = {"group_size": n}
    if name.endswith("-lowlr"):
        fields.update(method=name[: -len("-lowlr")], low_lr_gamma=gamma)
    elif name.startswith("f-"):
        if gamma == 0:  # the run would be plain GRPO under an F- name
            raise CatsimError(f"run spec {spec!r} with --gamma 0: the focal weight (1 − μ̂)^γ would never act")
        fields.update(method=name[2:], gamma=gamma)
    else:
        fields.update(method=name)
    from catsim.llm.rl import METHODS

    if fields["method"] not in METHODS:
        raise CatsimError(f"run spec {spec!r}: unknown method {fields['method']!r}")
    if n < 1:
        raise CatsimError(f"run spec {spec!r}: N must be >= 1")
    return name, fields


def _rl_config(pc: PipelineConfig, fields: dict, seed: int, max_new: int) -> RLConfig:
    n = fields["group_size"]
    prompts = max(1, pc.rollouts_per_step // n)
    updates = pc.updates_per_step if prompts % pc.updates_per_step == 0 else 1  # whole groups per update
    return RLConfig.from_flat(**fields, steps=pc.rl_steps, prompts_per_step=prompts,
                    mini_batch_size=prompts // updates * n,
                    learning_rate=pc.learning_rate, warmup_steps=pc.warmup_steps, max_new_tokens=max_new,
                    seed=seed, data_seed=pc.data_seed, snapshot_every=max(1, pc.rl_steps // 2),
                    heldout_every=pc.heldout_every, heldout_prompts=pc.heldout_prompts)


def _warm_up(task, pc: PipelineConfig, out: Path, progress: bool, mesh=None) -> Path:
    try:
        from catsim.llm.sft import ModelSize, SFTConfig
    except ImportError:
        raise CatsimError("the warm-up needs catsim.llm.sft (catsim llm sft); pass a base model instead "
                          "(--base-model TASK=DIR)") from None
    barrier(f"catsim-pipeline-warm-up-{out}")  # every process sees the same files
    cfg = SFTConfig(steps=pc.sft_steps, batch_size=pc.sft_batch, learning_rate=pc.sft_lr,
                    warmup_steps=min(20, pc.sft_steps // 10), data_seed=pc.data_seed)
    size = ModelSize(hidden_size=pc.model_hidden, num_layers=pc.model_layers, num_heads=pc.model_heads)
    if (out / "config.json").is_file() and (out / "catsim_task.json").is_file():
        check_warm_up(out, task, cfg, size)
        return out
    from catsim.experiments.warm_up import run_warm_up

    run_warm_up(task, cfg, size, out, eval_prompts=0, progress=progress, mesh=mesh)
    return out


def check_warm_up(out: Path, task, cfg, size) -> None:
    """Refuse a finished warm-up in `out` made with other settings (task, warm-up, model size):
    reused silently, its model would be trained and scored under a config it never had (a
    `--quick` warm-up reported as the default one)."""
    from catsim.llm.rundir import read_task_file, settings_differences, task_spec

    def without_save_every(sft: dict) -> dict:
        return {k: v for k, v in sft.items() if k != "save_every"}

    have: dict = {"task": read_task_file(out)}
    want: dict = {"task": task_spec(task, cfg.data_seed)}
    stored = out / "sft_config.json"  # absent in a model directory placed there by hand
    if stored.is_file():
        try:
            record = json.loads(stored.read_text())
            have.update(sft=without_save_every(record["sft"]), model_size=record["model_size"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise CatsimError(f"{stored}: unreadable warm-up settings; remove {out} to warm up afresh") from None
        want.update(sft=without_save_every(dataclasses.asdict(cfg)), model_size=dataclasses.asdict(size))
    diff = settings_differences(have, want)
    if diff:
        raise CatsimError(f"{out} holds a warm-up with other settings ({diff}); use another --out, or "
                          f"start from it with --base-model {task.name}={out}")


def run_pipeline(out_dir: str | Path, *, quick: bool = False, config: PipelineConfig | None = None,
                 base_models: dict | None = None, progress: bool | None = True, mesh=None) -> Path:
    """Run everything and write the report; returns the path of report.md.

    base_models: {task name: Hugging Face model dir with catsim_task.json} to skip the warm-up.
    Finished RL runs are reused (and interrupted ones resumed) when the command is rerun.
    mesh: the device mesh every model is sharded over (None: one device); see the module
    docstring for multiple processes.
    """
    from catsim.llm.tasks import make_task

    pc = config or (PipelineConfig.quick() if quick else PipelineConfig())
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    base_models = dict(base_models or {})
    t0 = time.perf_counter()
    results: dict = {"config": json.loads(json.dumps(dataclasses.asdict(pc), default=str)), "tasks": {}}
    specs = [parse_run(s, pc.gamma) for s in pc.runs]
    bases = {t.name: Path(base_models[t.name]) if t.name in base_models else out / t.name / "base" for t in pc.tasks}
    results = summary_so_far(out, results, bases)  # every run results.json summarises is kept
    for setup in pc.tasks:
        task_dir = out / setup.name
        if setup.name in base_models:
            base_dir = Path(base_models[setup.name])
            spec = ev_task_spec(base_dir)
            task = make_task(spec["task"], **spec.get("config", {}))
        else:
            task = make_task(setup.name, **setup.options)
            base_dir = _warm_up(task, pc, task_dir / "base", progress, mesh)
            spec = ev_task_spec(base_dir)
        max_new = setup.max_new_tokens or int(getattr(task, "max_answer_chars", 63)) + 1
        base = ev.load_policy(base_dir, mesh=mesh)
        prompts = ev.eval_prompts(task, "heldout", pc.data_seed, pc.eval_prompts)
        eval_kw = dict(n=pc.eval_n, ks=pc.ks, n_prompts=pc.eval_prompts, data_seed=pc.data_seed,
                       max_new_tokens=max_new, seed=12345, progress=progress)
        base_eval = ev.evaluate_passk(base, task, label=f"{setup.name} eval base", **eval_kw)
        try:
            rare = ev.rare_correct_set(base, task, n_prompts=pc.rare_prompts, n=pc.rare_n,
                                       rare_quantile=pc.rare_quantile, data_seed=pc.data_seed,
                                       max_new_tokens=max_new, progress=progress)
        except CatsimError:
            rare = None
        levels = [int(task.level(p)) for p in prompts] if hasattr(task, "level") else None
        enumerable = task.correct_answers(prompts[0]) is not None
        base_mass = ev.answer_mass_table(base, task, prompts) if enumerable else None
        kept = results["tasks"].get(setup.name, {}).get("runs", {})
        task_res: dict = {"base_model": str(base_dir), "base": base_eval, "runs": dict(kept),
                          "rare_set": None if rare is None else {"size": int(rare.base_nll.size),
                                                                 "from_correct": rare.num_correct,
                                                                 "base_nll_threshold": rare.threshold}}
        if base_mass is not None:
            task_res["base_qpos"] = float(np.mean([m.sum() for m in base_mass]))
        if levels is not None:
            task_res["base_levels"] = metrics.passk_by_level(pc.eval_n, base_eval["num_correct"], levels, pc.ks)
        for name, fields in specs:
            for seed in pc.seeds:
                cfg = _rl_config(pc, fields, seed, max_new)
                label = cfg.label()
                run_dir = task_dir / f"{name.replace(':', '_')}-N{cfg.group_size}-s{seed}"
                result = run_rl(base_dir, run_dir, cfg, task_spec=spec, progress=progress, mesh=mesh,
                                label=f"{setup.name} {label} s{seed}")
                trained = ev.load_policy(Path(result.out_dir) / "model", mesh=mesh)
                final_eval = ev.evaluate_passk(trained, task, label=f"{setup.name} eval {label} s{seed}", **eval_kw)
                snaps = [s for s in sorted((run_dir / "checkpoints").glob("step_*"))
                         if s.name != f"step_{cfg.steps:06d}"]
                mid_counts = [ev.evaluate_passk(ev.load_policy(s, mesh=mesh), task,
                                                label=f"{setup.name} eval {s.name}", **eval_kw)["num_correct"]
                              for s in snaps]
                ledger = ev.forgetting_ledger(["base"] + [s.name for s in snaps] + ["final"],
                                              [base_eval["num_correct"], *mid_counts, final_eval["num_correct"]])
                entry = {"label": label, "spec": name, "seed": seed, "group_size": cfg.group_size,
                         "run_dir": str(run_dir), "eval": final_eval, "ledger": ledger,
                         "delta_nll_rare": None if rare is None else ev.delta_nll_rare(trained, rare)}
                if base_mass is not None:
                    entry["answer_mass"] = ev.retained_mass(base_mass, ev.answer_mass_table(trained, task, prompts))
                if levels is not None:
                    entry["levels"] = metrics.passk_by_level(pc.eval_n, final_eval["num_correct"], levels, pc.ks)
                log = read_log(run_dir)
                entry["curves"] = training_curves(log)
                entry.update(convergence(log, pc))
                task_res["runs"][f"{name}:{cfg.group_size}:s{seed}"] = entry
        task_res["tests"] = _paired_tests(task_res, pc)
        results["tasks"][setup.name] = task_res
        write_results(results, out, report=False)
    results["seconds"] = time.perf_counter() - t0
    results["provenance"] = provenance.collect()  # what produced these numbers (catsim reproduce reads it)
    return write_results(results, out)


CALL_FIELDS = ("tasks", "runs", "seeds")  # what one call may choose freely: results.json holds the union


def summary_so_far(out: Path, results: dict, bases: dict) -> dict:
    """`results` (a new call's, no task yet) holding every run `out`/results.json already
    summarises whose run directory is still on disk, so that the file is rebuilt from all the
    runs of `out` rather than from only those the call touches (a rerun with fewer --runs
    dropped the others' summaries). Refused in one line, before any work: a summary made with
    other settings (one table cannot hold both) or from another base model (`bases`: task name ->
    this call's base model directory)."""
    path = out / "results.json"
    if not path.is_file():
        return results
    try:
        old = json.loads(path.read_text())
        old_config, old_tasks = dict(old["config"]), dict(old["tasks"])
    except (OSError, ValueError, KeyError, TypeError):
        raise CatsimError(f"{path}: not a readable pipeline results.json; move it away to summarise "
                          f"{out} afresh") from None
    from catsim.llm.rundir import settings_differences

    def fixed(config: dict) -> dict:
        return {k: v for k, v in config.items() if k not in CALL_FIELDS}

    diff = settings_differences(fixed(old_config), fixed(results["config"]))
    if diff:
        raise CatsimError(f"{path} summarises runs made with other settings ({diff}); use another --out")
    tasks = {}
    for name, task in old_tasks.items():
        runs = {key: entry for key, entry in task.get("runs", {}).items()
                if (out / name / Path(str(entry.get("run_dir", ""))).name / "model").is_dir()}
        if not runs:
            continue
        if name in bases and Path(task["base_model"]).resolve() != bases[name].resolve():
            raise CatsimError(f"{path}: its {name} runs start from {task['base_model']}, this call's from "
                              f"{bases[name]}; use another --out")
        tasks[name] = {**task, "runs": runs}
    config = dict(results["config"])
    for key in CALL_FIELDS:  # what the kept runs were made with first, in its order

        def ident(value, key=key):
            return value.get("name") if key == "tasks" and isinstance(value, dict) else value

        kept = [v for v in old_config.get(key, []) if key != "tasks" or ident(v) in tasks]
        config[key] = kept + [v for v in config[key] if ident(v) not in map(ident, kept)]
    return {**results, "config": config, "tasks": tasks}


def write_results(results: dict, out: Path, *, results_file: bool = True, report: bool = True) -> Path:
    """results.json (`results_file`) and report.md with the figures (`report`) in `out`, written by
    process 0 alone; the others wait for it at a barrier. Returns the path of report.md."""
    out = Path(out)
    if is_primary():
        if results_file:
            write_text(out / "results.json", json.dumps(results, indent=2, default=str) + "\n")
        if report:
            write_report(results, out)
    barrier(f"catsim-pipeline-results-{out}-{results_file}-{report}")
    return out / "report.md"


def convergence(log: list, pc: PipelineConfig) -> dict:
    """Steps to the target from a run's step log: on the training reward (at the rollout
    temperature, which asym-GRPO anneals) and on the held-out accuracy at τ = 1 when measured
    (window: the same span of steps), plus every safeguard warning the run raised."""
    out = {"steps_to_target": metrics.steps_to_target([r["reward"] for r in log], pc.target_reward,
                                                      pc.target_window),
           "heldout_steps_to_target": None,
           "final_reward": float(np.mean([r["reward"] for r in log][-pc.target_window:])),
           "warnings": [f"step {r['step']}: {m}" for r in log for m in r.get("warnings") or ()]}
    acc = [(r["step"], r["heldout_accuracy"]) for r in log if r.get("heldout_accuracy") is not None]
    if acc:
        window = max(1, pc.target_window // max(1, pc.heldout_every))
        hit = metrics.steps_to_target([a for _, a in acc], pc.target_reward, window)
        out["heldout_steps_to_target"] = None if hit is None else acc[hit - 1][0]
        out["heldout_curve"] = [[s, a] for s, a in acc]
    return out


def ev_task_spec(base_dir: Path) -> dict:
    from catsim.llm.rundir import read_task_file as load_task_spec

    return load_task_spec(base_dir)


def _paired_tests(task_res: dict, pc: PipelineConfig) -> list:
    """F-method (and asym-GRPO) vs its plain method (GRPO) at the same N and seed: paired
    m-out-of-n test at k = 1 and k = m."""
    runs = task_res["runs"]
    tests = []
    for key, entry in runs.items():
        spec, n, seed = key.split(":")
        if spec.startswith("f-"):
            plain = spec[2:]
        elif spec == "asym-grpo":
            plain = "grpo"
        else:
            continue
        other = runs.get(f"{plain}:{n}:{seed}")
        if other is None:
            continue
        m = min(pc.test_m, pc.eval_n)
        for k in sorted({1, m}):
            res = metrics.paired_subsample_test(pc.eval_n, other["eval"]["num_correct"], entry["eval"]["num_correct"],
                                                k=k, m=m, iterations=pc.test_iterations, seed=entry["seed"])
            tests.append({"a": other["label"], "b": entry["label"], "seed": entry["seed"], **res})
    return tests
