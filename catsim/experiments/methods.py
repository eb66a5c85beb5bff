"""The methods study: which fix keeps rare correct mass across group sizes N?

Every method runs on the `paper` scenario (App. J policy, Adam 1e-2 on the log-prob surrogate,
rewards ±1) at its paper's setting, over a grid of N and seeds, through the resumable
`catsim.sim.sweep.sweep` (one folder per method under OUT/runs). The study then reports, per N,
the seed-mean final Mret and Qpos of each method, the Mret-vs-Qpos Pareto frontier, and which
method keeps the most rare mass at what Qpos cost against GRPO (OUT/methods.txt, .json and
the figures `methods_vs_n.png`, `methods_frontier.png`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from catsim.files import write_text
from catsim.sim import config as C
from catsim.sim.sweep import sweep


@dataclasses.dataclass(frozen=True)
class Method:
    """One entry of the study: overrides of the paper scenario's update and its focal γ."""

    name: str
    gamma: float = 0.0
    update: tuple = ()  # (field, value) pairs for UpdateConfig
    source: str = ""  # where its setting comes from


METHODS = (
    Method("GRPO", 0.0, (), "App. J centred rewards, γ = 0 (Fig. 2's baseline)"),
    Method("F-GRPO γ=0.5", 0.5, (), "F-GRPO 2602.06717 (LLM setting)"),
    Method("F-GRPO γ=1", 1.0, (), "F-GRPO 2602.06717 (Fig. 2)"),
    Method("DAPO", 0.0, (("surrogate", "dapo"), ("dynamic_sampling", True)),
           "DAPO: clip-higher 0.2/0.28 + dynamic sampling"),
    Method("entropy 1e-3", 0.0, (("entropy_coef", 1e-3),), "entropy bonus, F-GRPO's tuned 1e-3"),
    Method("KL 0.04", 0.0, (("kl_coef", 0.04),), "KL to π_0, DeepSeekMath GRPO β = 0.04"),
    Method("MaxRL", 0.0, (("advantage", "maxrl"),), "MaxRL 2602.02710"),
    Method("F-MaxRL γ=1", 1.0, (("advantage", "maxrl"),), "MaxRL with the focal weight"),
    Method("Pass@k Training k=4", 0.0, (("advantage", "passk_training"), ("passk_k", 4)), "2508.10751"),
    Method("PKPO k=4", 0.0, (("advantage", "pkpo"), ("passk_k", 4)), "2505.15201"),
    Method("pass@k best", 0.0, (("advantage", "passk_best"),), "2503.19595, verl grpo_passk"),
    Method("unlikeliness β=0.25", 0.0, (("advantage", "grpo"), ("unlikeliness_beta", 0.25)),
           "2506.02355 (GRPO on the shaped rewards)"),
    Method("NSR λ=0.1", 0.0, (("positive_weight", 0.1),), "W-REINFORCE 2506.01347 (on centred rewards)"),
)
STUDY_GROUP_SIZES = C.PAPER_GROUP_SIZES
QUICK_GROUP_SIZES = (2, 8, 64, 512, 4096)


def method_config(base: C.SimConfig, method: Method) -> C.SimConfig:
    """The paper scenario with `method`'s overrides; its label is a file-safe version of its name."""
    update = dataclasses.replace(base.update, **dict(method.update))
    label = "".join(ch if ch.isalnum() or ch in "-." else "_" for ch in method.name)
    return dataclasses.replace(base, update=update, method=label)


@dataclasses.dataclass(frozen=True)
class MethodsStudy:
    """Seed statistics of the final state: arrays [method, N, seed]."""

    methods: tuple[str, ...]
    group_sizes: tuple[int, ...]
    mret: np.ndarray
    qpos: np.ndarray
    steps: int
    seeds: int
    seconds: float = 0.0

    def mean(self, metric: str) -> np.ndarray:
        return np.nanmean(getattr(self, metric), axis=-1)

    def frontier(self, j: int) -> list[int]:
        """Methods on the Mret-vs-Qpos Pareto frontier at N index j (no other has both higher)."""
        m, q = self.mean("mret")[:, j], self.mean("qpos")[:, j]
        return [i for i in range(len(self.methods))
                if not any((m[o] >= m[i]) & (q[o] >= q[i]) & ((m[o] > m[i]) | (q[o] > q[i]))
                           for o in range(len(self.methods)))]

    def best_rows(self) -> list[dict]:
        """Per N: the method with the highest mean Mret, its Mret, Qpos and Qpos − GRPO's Qpos."""
        m, q = self.mean("mret"), self.mean("qpos")
        base = self.methods.index("GRPO") if "GRPO" in self.methods else 0
        rows = []
        for j, n in enumerate(self.group_sizes):
            i = int(np.nanargmax(m[:, j]))
            rows.append({"n": n, "best": self.methods[i], "mret": float(m[i, j]),
                         "grpo_mret": float(m[base, j]), "qpos": float(q[i, j]),
                         "qpos_cost": float(q[base, j] - q[i, j]),
                         "frontier": [self.methods[k] for k in self.frontier(j)]})
        return rows

    def table(self) -> str:
        m, q = self.mean("mret"), self.mean("qpos")
        ms = np.nanstd(self.mret, axis=-1)
        width = max(len(x) for x in self.methods)
        head = f"{'method':<{width}} " + " ".join(f"{'N=' + str(n):>17}" for n in self.group_sizes)
        lines = [f"final Mret / Qpos, seed mean (std), {self.seeds} seeds, {self.steps} steps", head]
        for i, name in enumerate(self.methods):
            lines.append(f"{name:<{width}} " + " ".join(
                f"{m[i, j]:.3f}({ms[i, j]:.3f})/{q[i, j]:.2f}"[:17].rjust(17)
                for j in range(len(self.group_sizes))))
        lines += ["", "N: most rare mass kept (Mret; GRPO's) at Qpos (cost vs GRPO) | Pareto frontier"]
        for r in self.best_rows():
            lines.append(f"{r['n']:>6}: {r['best']} {r['mret']:.3f} (GRPO {r['grpo_mret']:.3f}) at "
                         f"Qpos {r['qpos']:.3f} (cost {r['qpos_cost']:+.3f}) | {', '.join(r['frontier'])}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"methods": list(self.methods), "group_sizes": list(self.group_sizes),
                "steps": self.steps, "seeds": self.seeds, "mret": self.mret.tolist(),
                "qpos": self.qpos.tolist(), "best": self.best_rows()}


def run_methods_study(base: C.SimConfig, out_dir, *, group_sizes: Sequence[int] = STUDY_GROUP_SIZES,
                      seeds: int = 4, methods: Sequence[Method] = METHODS, figures_dir=None,
                      resume: bool = True, progress: bool = True, shard: bool = False,
                      log=None) -> MethodsStudy:
    """Run every method over `group_sizes` × `seeds` (resumable), write the table, JSON, figures."""
    out = Path(out_dir)
    t0 = time.perf_counter()
    mret = np.full((len(methods), len(group_sizes), seeds), np.nan)
    qpos = np.full_like(mret, np.nan)
    for i, method in enumerate(methods):
        cfg = method_config(base, method)
        if log:
            log(f"method {method.name}")
        res = sweep(cfg, out / "runs" / cfg.method, group_sizes=group_sizes, gammas=[method.gamma],
                    seeds=seeds, resume=resume, progress=progress, shard=shard, log=log)
        mret[i] = res.final("mret")[0, 0]
        qpos[i] = res.final("qpos")[0, 0]
    study = MethodsStudy(tuple(m.name for m in methods), tuple(int(n) for n in group_sizes),
                         mret, qpos, base.steps, seeds, time.perf_counter() - t0)
    write_text(out / "methods.txt", study.table() + "\n")
    write_text(out / "methods.json", json.dumps(study.to_json(), indent=1) + "\n")
    from catsim.plots.methods import plot_frontier, plot_vs_n

    fig_dir = Path(figures_dir) if figures_dir is not None else out
    plot_vs_n(study, fig_dir / "methods_vs_n.png")
    plot_frontier(study, fig_dir / "methods_frontier.png")
    if figures_dir is not None:
        write_text(fig_dir / "methods.txt", study.table() + "\n")
    return study
