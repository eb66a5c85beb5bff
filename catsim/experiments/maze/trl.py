"""The Maze study inside TRL: does F-GRPO keep pass@64 over GRPO in another trainer?

    trl = run_trl_study("figures/maze-study/cpu", presets.cpu())

From the study's committed warm-ups (seed s: `s<s>/base`, written in the transformers format), TRL's
own `GRPOTrainer` (GRPO) and catsim's plug-in `catsim.integrations.trl.FGRPOTrainer` (F-GRPO γ = 0.5)
train at the study's headline N (the N with the most seeds) with the study's batch (prompts × N
rollouts a step, one optimizer update), learning rate and warm-up, temperature 1, its response
length and RL steps, on the task's training mazes with catsim's verifier as TRL's reward function.
TRL's loss is set as close to catsim's as TRL allows (`TRL_SETTINGS`); what is left differs is
listed in `DIFFERENCES`. Each final model is evaluated by the study's own evaluator (same held-out
mazes, samples, k), and F-GRPO − GRPO is tested inside TRL with the same paired m-out-of-n test.

Files, beside the study's:
    <out>/s<seed>/trl-<run>/eval.json      the evaluation, TRL's settings and versions (committed)
    <out>/s<seed>/trl-<run>/trl_log.jsonl  TRL's log history, one row a step (committed)
    <out>/s<seed>/trl-<run>/model/         the final model (not committed)
    <out>/trl.json                         the runs, the summary, the tests, the cross-trainer table

Resume: a finished run (its eval.json) is read back; a trained one whose evaluation is missing is
evaluated; an interrupted training restarts (TRL's optimizer state is not kept).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

from catsim.errors import CatsimError
from catsim.experiments import provenance
from catsim.experiments.agreement import read_json
from catsim.experiments.maze import stats, study
from catsim.experiments.maze.pieces import read_piece, read_run, run_problem
from catsim.experiments.maze.presets import StudyPreset, run_label
from catsim.experiments.maze.provenance import recompute_note
from catsim.experiments.maze.summaries import write_summary
from catsim.files import write_text
from catsim.progress import progress_bar

TRL_FILE = "trl.json"
METHODS = (("grpo", 0.0), ("f-grpo", 0.5))
LOG_KEYS = ("step", "loss", "grad_norm", "learning_rate", "reward", "reward_std", "completions/mean_length",
            "completions/clipped_ratio", "entropy", "clip_ratio/region_mean", "catsim/focal_weight/mean",
            "catsim/success_rate/mean", "step_seconds")

# TRL's GRPOConfig fields set to match catsim's GRPO step (catsim.llm.rl, the study's runs)
TRL_SETTINGS = {"loss_type": "dapo",  # the token mean over the batch: catsim's "token_mean"
                "scale_rewards": "group",  # each group's reward std (ddof 1): catsim's adv_std "sample"
                "epsilon": 0.2, "beta": 0.0, "num_iterations": 1, "gradient_accumulation_steps": 1,
                "weight_decay": 0.01, "max_grad_norm": 1.0, "adam_beta1": 0.9, "adam_beta2": 0.999,
                "adam_epsilon": 1e-8, "lr_scheduler_type": "constant_with_warmup", "temperature": 1.0,
                "top_k": 0, "top_p": 1.0, "disable_dropout": True, "gradient_checkpointing": False,
                "mask_truncated_completions": False}

DIFFERENCES = (
    ("learning-rate warm-up", "lr × min(1, (t + 1)/w) from step t = 0", "HF constant_with_warmup: lr × t/w (0 at step 0)"),
    ("advantage ε", "(r − mean)/(std + 1e-6)", "(r − mean)/(std + 1e-4)"),
    ("prompt order", "catsim's sampler (seed, data seed)", "TRL's shuffled dataloader over the same training mazes"),
    ("sampling", "JAX, catsim's rollout engine", "PyTorch `generate` (same τ = 1, no top-k/p)"),
    ("numerics", "float32 XLA on the CPU", "float32 PyTorch on the CPU"),
    ("F-GRPO's weight", "(1 − μ̂)^γ on catsim's advantages", "(1 − μ̂)^γ on TRL's advantages (the plug-in)"),
)


def _headline(study_plan) -> tuple[int, int]:
    """(N, seeds) of the study's headline N: the one with the most seeds (the smallest on a tie)."""
    return max((tuple(p) for p in study_plan), key=lambda p: (p[1], -p[0]))


def plan(sp: StudyPreset) -> list[tuple[str, int, float, int]]:
    """The TRL runs: GRPO and F-GRPO γ = 0.5 at the N with the most seeds, every seed of it."""
    n, seeds = _headline(sp.plan)
    return [(method, n, gamma, seed) for seed in range(seeds) for method, gamma in METHODS]


def label(method: str, n: int, gamma: float) -> str:
    return f"trl-{run_label(method, n, gamma)}"


def versions() -> dict:
    import torch
    import transformers
    import trl

    return {"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__}


def trl_config(sp: StudyPreset, method: str, n: int, gamma: float, seed: int, max_new: int, out_dir: Path):
    """TRL's GRPOConfig (GRPO) or the plug-in's FGRPOConfig (F-GRPO at γ) of one run."""
    from trl import GRPOConfig

    from catsim.integrations.trl import FGRPOConfig

    fields = dict(TRL_SETTINGS, output_dir=str(out_dir), per_device_train_batch_size=sp.prompts(n) * n,
                  num_generations=n, max_completion_length=max_new, learning_rate=sp.learning_rate,
                  warmup_steps=sp.warmup_steps, max_steps=sp.rl_steps, seed=seed, logging_steps=1,
                  save_strategy="no", report_to="none", use_cpu=True, bf16=False, dataloader_num_workers=0)
    return GRPOConfig(**fields) if method == "grpo" else FGRPOConfig(**fields, focal_gamma=gamma)


def train(sp: StudyPreset, task, base: Path, rdir: Path, method: str, n: int, gamma: float, seed: int,
          max_new: int, progress: bool | None = True) -> list[dict]:
    """Train one TRL run from the warm-up `base`; writes rdir/trl_log.jsonl, then rdir/model (a catsim
    model directory: TRL's weights, the warm-up's tokenizer and task files) in one rename. Progress:
    one bar (TRL's own callbacks print every step's log, which `logging_steps=1` makes a flood)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, TrainerCallback
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import GRPOTrainer

    from catsim.integrations.trl import FGRPOTrainer

    torch.manual_seed(seed)
    count = min(task.num_prompts("train"), sp.prompts(n) * sp.rl_steps)
    prompts = [task.prompt("train", sp.data_seed, i) for i in range(count)]
    by_text = {p.text: p for p in prompts}
    tok = PreTrainedTokenizerFast(tokenizer_file=str(base / "tokenizer.json"))
    special = json.loads((base / "tokenizer_config.json").read_text())
    tok.bos_token, tok.eos_token, tok.pad_token = special["bos_token"], special["eos_token"], special["pad_token"]
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)

    def reward(prompts, completions, **_):
        return [task.reward(by_text[p.removeprefix(tok.bos_token)], c) for p, c in zip(prompts, completions)]

    times: list[float] = []

    bar = progress_bar(sp.rl_steps, f"s{seed} {rdir.name}", progress, unit="step")

    class Timer(TrainerCallback):
        def on_step_begin(self, *_, **__):
            self.t = time.perf_counter()

        def on_step_end(self, *_, **__):
            times.append(time.perf_counter() - self.t)
            bar.update(1)

    stage = rdir / ".trl-stage"
    shutil.rmtree(stage, ignore_errors=True)
    args = trl_config(sp, method, n, gamma, seed, max_new, stage / "trainer")
    trainer = (GRPOTrainer if method == "grpo" else FGRPOTrainer)(
        model=model, reward_funcs=reward, args=args, processing_class=tok, callbacks=[Timer()],
        train_dataset=Dataset.from_dict({"prompt": [p.text for p in prompts]}))
    for quiet in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(quiet)
    with bar:
        trainer.train()
    rows = [{k: _short(h[k]) for k in LOG_KEYS if k in h} for h in trainer.state.log_history if "reward" in h]
    if len(rows) != sp.rl_steps or len(times) != sp.rl_steps:
        raise CatsimError(f"{rdir}: TRL logged {len(rows)} steps, not {sp.rl_steps}")
    for row, t in zip(rows, times):
        row["step_seconds"] = _short(t)
    trainer.save_model(str(stage / "model"))
    for name in ("tokenizer.json", "tokenizer_config.json", "catsim_task.json"):
        shutil.copy(base / name, stage / "model" / name)
    write_text(rdir / "trl_log.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    shutil.rmtree(rdir / "model", ignore_errors=True)
    os.replace(stage / "model", rdir / "model")
    shutil.rmtree(stage, ignore_errors=True)
    return rows


def _short(x):
    """A logged float to 7 significant digits (TRL's are float32: nothing is lost)."""
    return float(f"{x:.7g}") if isinstance(x, float) else x


def _read_log(rdir: Path, steps: int) -> list[dict] | None:
    try:
        rows = [json.loads(line) for line in (rdir / "trl_log.jsonl").read_text().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    ok = len(rows) == steps and all(isinstance(r, dict) and isinstance(r.get("reward"), (int, float)) for r in rows)
    return rows if ok and (rdir / "model" / "catsim_task.json").is_file() else None


def _read(sp: StudyPreset, sdir: Path, method: str, n: int, gamma: float, seed: int, say) -> dict | None:
    name = label(method, n, gamma)

    def problem(d: dict) -> str | None:
        if d.get("trainer") != "trl" or not isinstance(d.get("versions"), dict):
            return "not a TRL run's evaluation"
        return run_problem(d, method=method, group_size=n, gamma=gamma, seed=seed, label=name, steps=sp.rl_steps,
                           n=sp.eval_n, prompts=sp.eval_prompts, ks=sp.ks, curve_n=sp.curve_n, checkpoints=0)

    return read_piece(sdir / name / "eval.json", problem, say)


def check_plan_has_gamma(sp: StudyPreset) -> None:
    """The TRL runs train F-GRPO at γ = 0.5 (METHODS) beside catsim's own run of it: a study whose plan
    has no γ = 0.5 would leave catsim's side of the cross-trainer table empty, so it is refused."""
    missing = sorted({g for method, g in METHODS if method != "grpo" and g not in sp.gammas})
    if missing:
        raise CatsimError(f"--trainer trl trains F-GRPO at γ = {', '.join(f'{g:g}' for g in missing)} beside catsim's run "
                          f"of it, but this study's γ are {', '.join(f'{g:g}' for g in sp.gammas)}: add "
                          f"{', '.join(f'{g:g}' for g in missing)} to --gamma")


def run_trl_study(out_dir: str | Path, sp: StudyPreset, *, progress: bool | None = True, max_runs: int | None = None,
                  say=print) -> dict:
    """Train and evaluate the missing TRL runs (at most `max_runs` this call) and write trl.json (the
    pending runs listed when some remain; rerun to go on). The study's warm-ups must be there."""
    check_plan_has_gamma(sp)
    try:
        import trl  # noqa: F401
    except ImportError:
        raise CatsimError("TRL is not installed: pip install -e '.[trl]'") from None
    out = Path(out_dir)
    runs = plan(sp)
    study.check_study_ready(out, sp, [seed for *_, seed in runs], say)
    task = study.study_task(sp)
    max_new = task.max_answer_chars + 1
    done_now, t0 = 0, time.perf_counter()
    for i, (method, n, gamma, seed) in enumerate(runs):
        sdir = out / f"s{seed}"
        if _read(sp, sdir, method, n, gamma, seed, say) is not None:
            continue
        if max_runs is not None and done_now >= max_runs:
            say(f"stopped after {done_now} TRL runs this call; rerun to resume")
            break
        rdir = sdir / label(method, n, gamma)
        rdir.mkdir(parents=True, exist_ok=True)
        rows = _read_log(rdir, sp.rl_steps)
        if rows is None:  # not trained, or interrupted: TRL restarts it
            here = provenance.collect()
            note = recompute_note(out, f"s{seed}/{rdir.name}", here)
            if note:
                say(note)
            provenance.record_run_piece(rdir, 0, here)
            rows = train(sp, task, sdir / "base", rdir, method, n, gamma, seed, max_new, progress)
        final = study.evaluate(sp, task, rdir / "model", n=sp.eval_n, n_prompts=sp.eval_prompts, ks=sp.ks,
                                    label=f"s{seed} eval {rdir.name}", progress=progress, solution_mass=True)
        ev = study.write_piece(rdir / "eval.json", {
            "trainer": "trl", "method": method, "group_size": n, "gamma": gamma, "seed": seed,
            "label": rdir.name, "final": final, "curve": [], "rl_seconds": float(sum(r["step_seconds"] for r in rows)),
            "reward_curve": [float(r["reward"]) for r in rows], "versions": versions(),
            "provenance": provenance.run_pieces(rdir),
            "settings": {**TRL_SETTINGS, "per_device_train_batch_size": sp.prompts(n) * n, "num_generations": n,
                         "max_completion_length": max_new, "learning_rate": sp.learning_rate,
                         "warmup_steps": sp.warmup_steps, "max_steps": sp.rl_steps, "seed": seed}})
        done_now += 1
        say(f"[{i + 1}/{len(runs)}] s{seed} {rdir.name}: {study.run_summary(ev)}")
    result = collect(out, sp, say)
    result["seconds_this_call"] = time.perf_counter() - t0
    result["provenance"] = provenance.collect()
    return write_summary(out / TRL_FILE, result)


def collect(out: Path, sp: StudyPreset, say=print, stored: dict | None = None) -> dict:
    """trl.json's content: the finished TRL runs, the pending ones, the summary, F-GRPO − GRPO inside
    TRL (the study's paired test) and the cross-trainer table (catsim's runs of the same N, seeds).
    `stored`: a trl.json whose tests' subsampled fields are taken (`stats.paired`), to check it."""
    runs, pending = [], []
    todo = plan(sp)
    for method, n, gamma, seed in todo:
        ev = _read(sp, out / f"s{seed}", method, n, gamma, seed, say)
        if ev is None:
            pending.append(f"s{seed}/{label(method, n, gamma)}")
        else:
            runs.append(ev)
    catsim_runs = [r for method, n, gamma, seed in todo
                   if (r := read_run(sp, out / f"s{seed}", method, n, gamma, seed, say)) is not None]
    head = dataclasses.replace(sp, plan=(_headline(sp.plan),), gammas=(0.5,), ks=(1, sp.test_m))
    # the trainers are compared on the seeds both have finished (GRPO and F-GRPO), else catsim's all
    paired = lambda rs: {r["seed"] for r in rs if r["method"] == "grpo"} & {r["seed"] for r in rs if r["method"] != "grpo"}  # noqa: E731
    common = paired(runs) & paired(catsim_runs)
    both = {"trl": [r for r in runs if r["seed"] in common],
            "catsim": [r for r in catsim_runs if r["seed"] in common] if common else catsim_runs}
    known = {"trl": stored["tests"], "catsim": [t for row in stored["cross"] if isinstance(row, dict) and row.get(
        "trainer") == "catsim" for t in (row.get("test"), row.get("test_1")) if t]} if stored else {}
    tests = {k: stats.paired_tests(rs, head, stored=known.get(k)) for k, rs in both.items()}
    return {"preset": study.preset_json(sp), "runs": runs, "pending": pending,
            "summary": stats.summarize(runs, sp) if runs else [], "tests": tests["trl"],
            "cross_seeds": sorted(common), "cross": cross_table(both["trl"] if common else runs, both["catsim"], tests, sp),
            "differences": [list(d) for d in DIFFERENCES]}


def cross_table(trl_runs: list[dict], catsim_runs: list[dict], tests: dict, sp: StudyPreset) -> list[dict]:
    """Per trainer: GRPO's and F-GRPO's pass@1 and pass@m (seed means), Δ pass@m (F − G) with its
    interval and p, and each seed's sign."""
    m = str(sp.test_m)
    rows = []
    for trainer, runs in (("catsim", catsim_runs), ("trl", trl_runs)):
        mean = {}
        for method, gamma in METHODS:
            rs = [r for r in runs if (r["method"], r["gamma"]) == (method, gamma)]
            mean[method] = {k: float(np.mean([r["final"]["pass_at_k"][k] for r in rs])) if rs else None
                            for k in ("1", m)}
        t = next((t for t in tests[trainer] if t["k"] == sp.test_m), None)
        one = next((t for t in tests[trainer] if t["k"] == 1), None)
        rows.append({"trainer": trainer, "grpo": mean["grpo"], "f-grpo": mean["f-grpo"], "test": t, "test_1": one})
    return rows


def load_trl(out_dir: str | Path) -> dict | None:
    """The study's trl.json, or None when it has no TRL runs; a damaged one is refused."""
    path = Path(out_dir) / TRL_FILE
    if not path.is_file():
        return None
    d = read_json(path)
    if not isinstance(d, dict) or any(not isinstance(d.get(k), list) for k in ("runs", "pending", "cross", "tests")):
        raise CatsimError(f"{path}: not a maze-study TRL file; rerun `catsim llm maze-study --trainer trl ...`")
    return d


def cross_lines(trl: dict) -> list[str]:
    """The cross-trainer table (markdown): per trainer GRPO's and F-GRPO's pass@1 and pass@m, and
    F-GRPO − GRPO at k = 1 and k = m with its interval, p and per-seed Δ."""
    m = trl["preset"]["test_m"]
    pct = lambda x: "–" if x is None else f"{100 * x:.1f}"  # noqa: E731
    lines = [f"| trainer | GRPO pass@1 | GRPO pass@{m} | F-GRPO pass@1 | F-GRPO pass@{m} | Δ pass@1 (p) | "
             f"Δ pass@{m} | interval | p | per-seed Δ pass@{m} |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in trl["cross"]:
        t, one = row["test"], row["test_1"]
        means = (f"| {row['trainer']} | {pct(row['grpo']['1'])} | {pct(row['grpo'][str(m)])} | "
                 f"{pct(row['f-grpo']['1'])} | {pct(row['f-grpo'][str(m)])} | ")
        if t is None:
            lines.append(means + "– | – | – | – | not finished |")
            continue
        seeds = ", ".join(f"{100 * v:+.1f}" for _, v in sorted(t["delta_per_seed"].items(), key=lambda kv: int(kv[0])))
        lines.append(means + f"{100 * one['delta']:+.1f} ({stats.p_text(one)}) | {100 * t['delta']:+.1f} | "
                     f"[{100 * t['interval'][0]:+.1f}, {100 * t['interval'][1]:+.1f}] | {stats.p_text(t)} | {seeds} |")
    return lines


def _size_line(trl: dict, m: int) -> str:
    """The effect's size in the two trainers, and whether their 95 % intervals overlap (a reading of
    the two tests, not a test of the difference between the trainers)."""
    t = {row["trainer"]: row["test"] for row in trl["cross"]}
    (lo_t, hi_t), (lo_c, hi_c) = t["trl"]["interval"], t["catsim"]["interval"]
    gap = 100 * (t["trl"]["delta"] - t["catsim"]["delta"])
    size = f"Its size at k = {m}: {100 * t['trl']['delta']:+.1f} points in TRL against {100 * t['catsim']['delta']:+.1f} in catsim"
    if lo_t <= hi_c and lo_c <= hi_t:
        return (f"{size} ({gap:+.1f}); the two intervals overlap, so the trainers' effects are not told apart at this "
                "resolution (the overlap is a reading of the two tests, not a test of their difference).")
    return (f"{size} ({gap:+.1f}); the two intervals do not overlap: the effect is {'smaller' if gap < 0 else 'larger'} "
            "in TRL, and the differences left between the set-ups (below) are the candidates.")


def report_lines(trl: dict) -> list[str]:
    """The report's cross-trainer section: the table, the verdict, the differences left, versions."""
    m = trl["preset"]["test_m"]
    seeds = trl.get("cross_seeds") or []
    planned = range(_headline(trl["preset"]["plan"])[1])
    lines = ["## The same finding inside TRL", "",
             "TRL's own GRPOTrainer (GRPO) and catsim's plug-in FGRPOTrainer (F-GRPO γ = 0.5) from the same warm-ups, "
             "with the study's batch, learning rate, temperature, response length and steps, evaluated by catsim's "
             "evaluator on the same held-out mazes; F-GRPO − GRPO by the same paired test within each trainer, "
             + (f"on the seeds both trainers have finished ({', '.join(map(str, seeds))} of {len(planned)})."
                if seeds else "catsim on all its seeds (no TRL seed has both runs yet)."), "", *cross_lines(trl)]
    verdicts = {row["trainer"]: (row["test"]["significant"] and row["test"]["delta"] > 0,
                                 all(v > 0 for v in row["test"]["delta_per_seed"].values()))
                for row in trl["cross"] if row["test"] is not None}
    lines.append("")
    if "trl" in verdicts and "catsim" in verdicts:
        (trl_sig, trl_all), (cat_sig, _) = verdicts["trl"], verdicts["catsim"]
        partial = f" (so far: {len(seeds)} of {len(planned)} seeds)" if len(seeds) < len(planned) else ""
        if trl_sig and cat_sig:
            lines.append(f"**The effect replicates in TRL**{partial}: F-GRPO keeps significantly more pass@{m} than "
                         f"GRPO in both trainers{' (every TRL seed the same sign)' if trl_all else ''}.")
            lines.append(_size_line(trl, m))
        elif cat_sig:
            lines.append(f"**The effect does not replicate in TRL**{partial}: catsim's F-GRPO − GRPO at k = {m} is significant, "
                         "TRL's is not; the differences left between the two set-ups are below.")
        else:
            lines.append(f"Neither trainer's F-GRPO − GRPO at k = {m} is the catsim finding (see the table).")
    else:
        lines.append("The TRL runs are not finished: no verdict yet.")
    if trl["pending"]:
        lines += ["", f"Pending ({len(trl['pending'])} runs): " + ", ".join(trl["pending"]) + "."]
    lines += ["", "What still differs between the trainers (TRL's settings: "
              + ", ".join(f"{k} = {v}" for k, v in TRL_SETTINGS.items()) + "):", "",
              "| | catsim | TRL |", "|---|---|---|", *[f"| {a} | {b} | {c} |" for a, b, c in trl["differences"]]]
    vs = sorted({json.dumps(r["versions"], sort_keys=True) for r in trl["runs"]})
    if vs:
        lines += ["", "Versions of the TRL runs: " + "; ".join(
            ", ".join(f"{k} {v}" for k, v in json.loads(x).items()) for x in vs) + "."]
    rl = [r["rl_seconds"] / max(1, len(r["reward_curve"])) for r in trl["runs"]]
    if rl:
        lines.append(f"TRL wall time per RL step, mean over runs: {np.mean(rl):.3f} s (within a run, not a "
                     "side-by-side timing: benchmarks/bench_rl_vs_trl.py is that).")
    return lines
