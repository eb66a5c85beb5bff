"""Does `catsim llm advise` predict which prompts lose their rare solutions? A validation study on
the paths task (several enumerable shortest paths per prompt, Zipf warm-up).

    results = run_study("runs/advise-study")          # `catsim llm advise-study --out DIR`

1. Warm up a small model on paths (Zipf weights over each prompt's answers, so some correct
   answers are common and others rare), on a small train split so that RL visits every prompt
   several times.
2. Predict: sample `advise_n` completions of every train prompt, estimate μ̂ and τ̂ (rare rule
   `rule`), and the Lemma 3.1 risk at each group size N (`theory.planning.advise`).
3. Measure: the exact probability of every correct answer by teacher forcing, before and after
   GRPO at N ∈ `group_sizes` (compute-matched: the same rollouts per step), for each seed. A
   prompt's rare subset is the rule applied to its EXACT base probabilities; its outcome is the
   change of that subset's mass, Δ = log τ_after − log τ_before ("lost" when Δ < 0).
4. Compare: per (N, seed), Spearman's ρ between the predicted risk and the loss −Δ over the
   prompts with a rare subset, also with the risk weighted by how often RL drew the prompt
   (visits × risk = the expected number of active groups that missed the rare subset); and a
   calibration table: prompts binned by predicted risk, the share that lost rare mass per bin.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import stats

from catsim.errors import CatsimError
from catsim.files import replacing, write_text
from catsim.theory import planning


@dataclass(frozen=True)
class StudyConfig:
    """The study's settings (CPU-sized; `quick()` shrinks it to a smoke test)."""

    task_options: dict = field(default_factory=lambda: {
        "height": 4, "width": 4, "min_answers": 3, "max_answers": 6, "zipf_exponent": 1.5,
        "n_train": 48, "n_heldout": 16})  # paths config: RL trains on 48 prompts
    sft_steps: int = 300  # warm-up steps
    sft_batch: int = 32  # warm-up batch
    sft_lr: float = 2e-3  # warm-up peak lr
    model_hidden: int = 64  # warm-up model width
    model_layers: int = 2  # warm-up model depth
    model_heads: int = 4  # warm-up model heads
    group_sizes: tuple = (2, 8, 32)  # GRPO group sizes compared
    seeds: tuple = (0, 1, 2)  # RL seeds per N
    rl_steps: int = 40  # RL steps per run
    rollouts_per_step: int = 64  # compute-matched across N
    learning_rate: float = 1e-4  # RL lr
    advise_n: int = 64  # samples per prompt for the prediction
    rule: str = "share:0.1"  # the rare rule (planning.RareRule)
    n_boot: int = 100  # bootstrap resamples of the prediction
    data_seed: int = 0  # task split seed

    @staticmethod
    def quick() -> StudyConfig:
        """Seconds per run (tests): numbers mean nothing."""
        return StudyConfig(task_options={"height": 3, "width": 3, "min_answers": 2, "max_answers": 6,
                                         "obstacle_density": 0.1, "n_train": 8, "n_heldout": 4},
                           sft_steps=20, sft_batch=8, model_hidden=32, model_heads=2, group_sizes=(2, 4),
                           seeds=(0,), rl_steps=2, rollouts_per_step=8, advise_n=8, n_boot=10, rule="tail:0.5")


def _warm_up(task, sc: StudyConfig, out: Path, progress: bool) -> Path:
    from catsim.experiments.llm_pipeline import check_warm_up
    from catsim.experiments.warm_up import run_warm_up
    from catsim.llm.sft import ModelSize, SFTConfig

    cfg = SFTConfig(steps=sc.sft_steps, batch_size=sc.sft_batch, learning_rate=sc.sft_lr,
                    warmup_steps=min(20, sc.sft_steps // 10), data_seed=sc.data_seed)
    size = ModelSize(hidden_size=sc.model_hidden, num_layers=sc.model_layers, num_heads=sc.model_heads)
    if (out / "config.json").is_file() and (out / "catsim_task.json").is_file():
        check_warm_up(out, task, cfg, size)  # a --quick warm-up is not the full study's
    else:
        run_warm_up(task, cfg, size, out, eval_prompts=0, progress=progress)
    return out


def _rl_config(sc: StudyConfig, n: int, seed: int, max_new: int):
    from catsim.llm.rl import RLConfig

    prompts = max(1, sc.rollouts_per_step // n)
    return RLConfig.from_flat(method="grpo", group_size=n, steps=sc.rl_steps, prompts_per_step=prompts,
                              mini_batch_size=prompts // 2 * n if prompts % 2 == 0 else 0,
                              learning_rate=sc.learning_rate, max_new_tokens=max_new, seed=seed,
                              data_seed=sc.data_seed,
                              # the analysis' population std, which the published study was run with
                              adv_std="population")


def _visits(cfg, n_train: int) -> np.ndarray:
    """How often RL drew each train prompt (the draw is a pure function of seed and step)."""
    from catsim.llm.rl.step import step_prompt_indices

    counts = np.zeros(n_train, np.int64)
    for step in range(cfg.run.steps):
        np.add.at(counts, step_prompt_indices(cfg, step, 0, n_train), 1)
    return counts


def _rare_mass(probs_list, rule: planning.RareRule, masks=None):
    """Per prompt, the rare subset of the exact probabilities (or the given masks) and its mass."""
    masks = masks or [planning.rare_mask(p, rule) if p.size and np.all(p > 0) else np.zeros(p.size, bool)
                      for p in probs_list]
    return masks, np.array([float(p[m].sum()) for p, m in zip(probs_list, masks)])


def _spearman(x, y) -> float | None:
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3 or np.ptp(x[ok]) == 0 or np.ptp(y[ok]) == 0:
        return None
    return float(stats.spearmanr(x[ok], y[ok]).statistic)


def calibration(risk, lost, bins: int = 5) -> list[dict]:
    """Prompts binned by predicted risk (quantile bins): mean risk and share that lost rare mass."""
    risk, lost = np.asarray(risk, float), np.asarray(lost, float)
    ok = np.isfinite(risk) & np.isfinite(lost)
    risk, lost = risk[ok], lost[ok]
    if risk.size == 0:
        return []
    edges = np.unique(np.quantile(risk, np.linspace(0, 1, bins + 1)))
    which = np.clip(np.searchsorted(edges, risk, side="right") - 1, 0, max(edges.size - 2, 0))
    out = []
    for b in range(max(edges.size - 1, 1)):
        sel = which == b
        if sel.any():
            out.append({"risk_mean": float(risk[sel].mean()), "lost_share": float(lost[sel].mean()),
                        "prompts": int(sel.sum())})
    return out


def run_study(out_dir: str | Path, config: StudyConfig | None = None, *, progress: bool = True,
              figures_dir: str | Path | None = None) -> dict:
    """Run the study (resumable: finished runs are reused) and write results.json and the figure
    into `figures_dir` (default: `out_dir`; the run directories stay in `out_dir`)."""
    from catsim.experiments.advise import answer_labels
    from catsim.llm import evaluate as ev
    from catsim.llm.rl import run_rl
    from catsim.llm.tasks import make_task

    sc = config or StudyConfig()
    rule = planning.RareRule.parse(sc.rule)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    task = make_task("paths", **sc.task_options)
    base_dir = _warm_up(task, sc, out / "base", progress)
    max_new = int(task.max_answer_chars) + 1
    n_train = task.num_prompts("train")
    prompts = [task.prompt("train", sc.data_seed, i) for i in range(n_train)]
    base = ev.load_policy(base_dir)
    groups = ev.sample(base, task, prompts, sc.advise_n, max_new_tokens=max_new, seed=4242)
    texts = [groups.texts[i * sc.advise_n:(i + 1) * sc.advise_n] for i in range(n_train)]
    labels, correct = answer_labels(task, prompts, texts), np.asarray(groups.scores) >= 1.0
    advice = planning.advise(labels, correct, sc.group_sizes, rule=rule, n_boot=sc.n_boot, seed=0)
    base_probs = ev.answer_mass_table(base, task, prompts)
    masks, tau_before = _rare_mass(base_probs, rule)
    has_subset = (tau_before > 0) & np.array([m.any() and not m.all() for m in masks])
    runs = {}
    for k, n in enumerate(sc.group_sizes):
        for seed in sc.seeds:
            cfg = _rl_config(sc, int(n), int(seed), max_new)
            run_dir = out / f"grpo-N{n}-s{seed}"
            result = run_rl(base_dir, run_dir, cfg, progress=progress, label=f"advise-study N={n} s{seed}")
            trained = ev.load_policy(Path(result.out_dir) / "model")
            _, tau_after = _rare_mass(ev.answer_mass_table(trained, task, prompts), rule, masks)
            with np.errstate(divide="ignore", invalid="ignore"):
                delta = np.where(has_subset, np.log(np.maximum(tau_after, 1e-300)) - np.log(tau_before), np.nan)
            visits = _visits(cfg, n_train)
            risk = np.where(has_subset, advice.risk[:, k], np.nan)
            runs[f"N{n}-s{seed}"] = {
                "group_size": int(n), "seed": int(seed), "visits": visits.tolist(),
                "tau_after": tau_after.tolist(), "delta_log_tau": [None if not np.isfinite(d) else float(d)
                                                                    for d in delta],
                "lost_share": float(np.mean(delta[has_subset] < 0)) if has_subset.any() else None,
                "mean_delta_log_tau": float(np.nanmean(delta)) if has_subset.any() else None,
                "spearman_risk_vs_loss": _spearman(risk, -delta),
                "spearman_visits_x_risk_vs_loss": _spearman(risk * visits, -delta),
            }
    pooled_risk, pooled_lost = [], []
    for k, n in enumerate(sc.group_sizes):
        for seed in sc.seeds:
            d = np.array([np.nan if x is None else x for x in runs[f"N{n}-s{seed}"]["delta_log_tau"]])
            pooled_risk.append(np.where(has_subset, advice.risk[:, k], np.nan))
            pooled_lost.append(np.where(np.isfinite(d), (d < 0).astype(float), np.nan))
    results = {
        "config": json.loads(json.dumps(dataclasses.asdict(sc), default=list)),
        "prompts": n_train, "prompts_with_rare_subset": int(has_subset.sum()),
        "rule": str(rule), "tau_before": tau_before.tolist(), "advice": advice.to_json(),
        "runs": runs, "calibration": calibration(np.concatenate(pooled_risk), np.concatenate(pooled_lost)),
        "summary": _summary(runs, sc),
        "seconds": time.perf_counter() - t0,
    }
    pub = Path(figures_dir) if figures_dir is not None else out
    pub.mkdir(parents=True, exist_ok=True)
    write_text(pub / "results.json", json.dumps(results, indent=1) + "\n")
    from catsim.plots.advise import plot_study

    with replacing(pub / "advise_study.png", suffix=".png") as tmp:
        plot_study(results, tmp)
    return results


def _summary(runs: dict, sc: StudyConfig) -> dict:
    out = {}
    for n in sc.group_sizes:
        rows = [runs[f"N{n}-s{s}"] for s in sc.seeds]

        def mean_of(key, rows=rows):
            vals = [r[key] for r in rows if r[key] is not None]
            return (float(np.mean(vals)), float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0) if vals else None

        out[str(n)] = {"spearman_risk_vs_loss": mean_of("spearman_risk_vs_loss"),
                       "spearman_visits_x_risk_vs_loss": mean_of("spearman_visits_x_risk_vs_loss"),
                       "lost_share": mean_of("lost_share"), "mean_delta_log_tau": mean_of("mean_delta_log_tau")}
    return out


def check_out_dir(out_dir: str | Path, flag: str = "--out") -> None:
    parent = Path(out_dir).resolve().parent
    if not parent.is_dir():
        raise CatsimError(f"{flag}: {parent} does not exist")
