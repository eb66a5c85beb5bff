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

from catsim.errors import CatsimError
from catsim.files import write_text
from catsim.objectives import registry
from catsim.sim import config as C
from catsim.sim.sweep import sweep


@dataclasses.dataclass(frozen=True)
class Method:
    """One entry of the study: overrides of the paper scenario's update and its focal γ."""

    name: str
    gamma: float = 0.0
    update: tuple = ()  # (field, value) pairs for UpdateConfig
    source: str = ""  # where its setting comes from
    k_per_n: bool = False  # a pass@k rule: k = `passk_k_for(N)` in each cell

    def k(self, n: int) -> int | None:
        """The pass@k k of this method's cell at group size n (None for the other rules)."""
        return passk_k_for(n) if self.k_per_n else None


PASSK_K = 4  # the k of the pass@k rules, where the group is large enough


def passk_k_for(n: int) -> int:
    """k = min(4, N/2): below N, since Pass@k Training and the mean-centred PKPO give every group
    zero advantage at k ≥ N (a run that never moves) and PKPO's s^(loo−1) keeps only c = 1 at k = N."""
    return max(1, min(PASSK_K, n // 2))


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
    Method("Pass@k Training", 0.0, (("advantage", "passk_training"),), "2508.10751, k = min(4, N/2)", True),
    Method("PKPO", 0.0, (("advantage", "pkpo"),), "2505.15201 s^(loo−1), k = min(4, N/2)", True),
    Method("PKPO mean-centred", 0.0, (("advantage", "pkpo_mean"),), "rllm PR #743, k = min(4, N/2)", True),
    Method("pass@k best", 0.0, (("advantage", "passk_best"),), "2503.19595, verl grpo_passk"),
    Method("unlikeliness β=0.25", 0.0, (("advantage", "grpo"), ("unlikeliness_beta", 0.25)),
           "2506.02355 (GRPO on the shaped rewards, all N ranked)"),
    Method("W-REINFORCE λ=0.1", 0.0, (("advantage", "w_reinforce"), ("w_reinforce_lambda", 0.1)),
           "2506.01347 (λ on correct, −1 on wrong, no baseline)"),
    Method("NSR", 0.0, (("advantage", "nsr"),), "2506.01347 (−1 on wrong only)"),
    Method("PSR", 0.0, (("advantage", "psr"),), "2506.01347 (+1 on correct only)"),
    Method("Dr.GRPO", 0.0, (("advantage", "dr_grpo"),), "2503.20783: centred, no ÷ std (no lengths here: = GRPO)"),
    Method("A-GRAE", 0.0, (("advantage", "agrae"),),
           "2602.05548, the authors' compute_grpo_outcome_advantage at every step (α = 1; B = the step's one group)"),
    Method("inverse-success α=1", 0.0, (("advantage", "inverse_success"),),
           "2601.15609: GRPO, positive advantages × (N − correct count)^α, α = 1"),
    Method("λ+=0.1 on centred", 0.0, (("positive_weight", 0.1),),
           "catsim's variant: λ on the positive centred advantages (not a published rule)"),
)


def _registry_rows(methods: tuple[Method, ...]) -> tuple[Method, ...]:
    """A row for every registry rule no row above runs (at its defaults, k = min(4, N/2)): a rule
    added to the registry enters the study by itself."""
    covered = {dict(m.update).get("advantage", C.UpdateConfig().advantage) for m in methods}
    return tuple(Method(rule.name, 0.0, (("advantage", rule.name),), f"{rule.paper} (registry defaults)",
                        rule.needs_k) for rule in registry.RULES.values() if rule.name not in covered)


METHODS = METHODS + _registry_rows(METHODS)
STUDY_GROUP_SIZES = C.PAPER_GROUP_SIZES
QUICK_GROUP_SIZES = (2, 8, 64, 512, 4096)
# A cell whose rule changed the policy on fewer than this share of its steps is not a result
# about keeping rare mass (it keeps it by not training): never crowned, never on a frontier.
MIN_UPDATE_RATE = 0.01


# Update fields the study's rows set themselves (or that would change every row under its label):
# a base config that sets one of them is refused. The surrogate stays the scenario's (DAPO's row apart).
ROW_FIELDS = tuple(sorted({f for m in METHODS for f, _ in m.update} - {"surrogate"} | {
    "passk_k", "gamma", "low_lr_gamma", "asym_channels", "asym_confidence", "asym_recompose", "dual_clip"}))


def check_base(base: C.SimConfig) -> None:
    """Refuse a base config whose update sets what the rows define (`ROW_FIELDS`): each row must be
    the rule it is labelled, whatever the caller's update rule."""
    default = C.UpdateConfig()
    given = [f for f in ROW_FIELDS if getattr(base.update, f) != getattr(default, f)]
    if given:
        raise CatsimError(f"the methods study sets {', '.join(given)} for each row itself (every row is "
                          f"the rule it is labelled): leave {'it' if len(given) == 1 else 'them'} at the default")


def method_config(base: C.SimConfig, method: Method, n: int | None = None) -> C.SimConfig:
    """The paper scenario with `method`'s overrides (and its k at group size n); its label is a
    file-safe version of its name (with -k<k> for the pass@k rules)."""
    overrides = dict(method.update)
    name = method.name
    if method.k_per_n:
        k = method.k(n if n is not None else base.group_size)
        overrides["passk_k"] = k
        name += f" k{k}"
    update = dataclasses.replace(base.update, **overrides)
    label = "".join(ch if ch.isalnum() or ch in "-." else "_" for ch in name)
    return dataclasses.replace(base, update=update, method=label)


def update_rate(config: C.SimConfig, gamma: float, n: int, mu_hat) -> np.ndarray:
    """Share of the logged steps on which the rule changed the policy, per seed: [seed, step] μ̂ -> [seed].

    From the group's count c = μ̂·N: an entropy or KL term always moves the policy; the
    unlikeliness reward moves it whenever a draw is correct; otherwise the step moves it when the
    focal-weighted advantage (`lean.class_advantages`) of a drawn class is non-zero.
    """
    import jax
    import jax.numpy as jnp

    from catsim.objectives import focal
    from catsim.sim import lean

    u = config.update
    mu = np.asarray(mu_hat, np.float64)
    c = np.rint(mu * n)
    if u.entropy_coef or u.kl_coef:
        moved = np.ones_like(c, bool)
    elif u.unlikeliness_beta > 0:
        moved = c > 0
    else:
        def cls(x):
            a_c, a_w = lean.class_advantages(u, x, jnp.float32(n))
            g = focal.focal_weight(x / n, gamma)
            return g * a_c, g * a_w

        a_c, a_w = (np.asarray(a) for a in jax.vmap(cls)(jnp.asarray(c.ravel(), jnp.float32)))
        moved = (((c.ravel() > 0) & (a_c != 0)) | ((c.ravel() < n) & (a_w != 0))).reshape(c.shape)
    return np.where(np.isfinite(mu), moved, np.nan).mean(axis=-1) if moved.size else np.zeros(c.shape[:-1])


@dataclasses.dataclass(frozen=True)
class MethodsStudy:
    """Seed statistics of the final state: arrays [method, N, seed]; `rate` [method, N, seed] is the
    share of steps on which the rule moved the policy (`update_rate`), `ks` the pass@k k per cell."""

    methods: tuple[str, ...]
    group_sizes: tuple[int, ...]
    mret: np.ndarray
    qpos: np.ndarray
    steps: int
    seeds: int
    seconds: float = 0.0
    rate: np.ndarray | None = None
    ks: tuple = ()  # per method: a tuple of k per N, or None

    @classmethod
    def from_json(cls, saved: dict) -> MethodsStudy:
        """The study `to_json` wrote (methods.json): what its figures are drawn from."""
        rate = saved.get("update_rate")
        ks = tuple(None if k is None else tuple(k) for k in saved.get("passk_k") or ())
        return cls(tuple(saved["methods"]), tuple(int(n) for n in saved["group_sizes"]),
                   np.asarray(saved["mret"], np.float64), np.asarray(saved["qpos"], np.float64),
                   int(saved["steps"]), int(saved["seeds"]), 0.0,
                   None if rate is None else np.asarray(rate, np.float64), ks)

    def mean(self, metric: str) -> np.ndarray:
        return np.nanmean(getattr(self, metric), axis=-1)

    def trained(self) -> np.ndarray:
        """[method, N] bool: the cell's rule moved the policy on at least MIN_UPDATE_RATE of its steps."""
        if self.rate is None:
            return np.ones(self.mret.shape[:2], bool)
        return np.nanmean(self.rate, axis=-1) >= MIN_UPDATE_RATE

    def frontier(self, j: int) -> list[int]:
        """Trained methods on the Mret-vs-Qpos Pareto frontier at N index j (no other has both higher)."""
        m, q = self.mean("mret")[:, j], self.mean("qpos")[:, j]
        ok = np.flatnonzero(self.trained()[:, j]).tolist()
        return [i for i in ok
                if not any((m[o] >= m[i]) & (q[o] >= q[i]) & ((m[o] > m[i]) | (q[o] > q[i])) for o in ok)]

    def best_rows(self) -> list[dict]:
        """Per N: the trained method with the highest mean Mret, its Mret, Qpos and Qpos − GRPO's Qpos."""
        m, q = self.mean("mret"), self.mean("qpos")
        base = self.methods.index("GRPO") if "GRPO" in self.methods else 0
        trained = self.trained()
        rows = []
        for j, n in enumerate(self.group_sizes):
            i = int(np.nanargmax(np.where(trained[:, j], m[:, j], -np.inf)))
            rows.append({"n": n, "best": self.methods[i], "k": self._k(i, j), "mret": float(m[i, j]),
                         "grpo_mret": float(m[base, j]), "qpos": float(q[i, j]),
                         "qpos_cost": float(q[base, j] - q[i, j]),
                         "frontier": [self.methods[k] for k in self.frontier(j)],
                         "not_trained": [self.methods[k] for k in np.flatnonzero(~trained[:, j])]})
        return rows

    def _k(self, i: int, j: int):
        return self.ks[i][j] if self.ks and self.ks[i] is not None else None

    def _name(self, i: int, j: int) -> str:
        k = self._k(i, j)
        return self.methods[i] + (f" k={k}" if k is not None else "")

    def table(self) -> str:
        m, q = self.mean("mret"), self.mean("qpos")
        ms = np.nanstd(self.mret, axis=-1)
        trained = self.trained()
        rate = self.mean("rate") if self.rate is not None else np.ones_like(m)
        width = max(len(x) for x in self.methods)
        head = f"{'method':<{width}} " + " ".join(f"{'N=' + str(n):>17}" for n in self.group_sizes)
        lines = [f"final Mret / Qpos, seed mean (std), {self.seeds} seeds, {self.steps} steps; "
                 f"pass@k rules at k = min({PASSK_K}, N/2)", head]
        for i, name in enumerate(self.methods):
            cells = []
            for j in range(len(self.group_sizes)):
                text = (f"{m[i, j]:.3f}({ms[i, j]:.3f})/{q[i, j]:.2f}"[:17] if rate[i, j] > 0
                        else "no update")
                cells.append((text if trained[i, j] or rate[i, j] == 0 else "*" + text[:16]).rjust(17))
            lines.append(f"{name:<{width}} " + " ".join(cells))
        lines += ["", f"no update: the rule never changed the policy; *: it changed it on fewer than "
                      f"{MIN_UPDATE_RATE:.0%} of its steps. Neither is ranked or on a frontier."]
        for i in range(len(self.methods)):
            for j, n in enumerate(self.group_sizes):
                if not trained[i, j]:
                    lines.append(f"  N={n}: {self._name(i, j)} updated on {rate[i, j]:.2%} of its steps")
        lines += ["", "N: most rare mass kept by a rule that trained (Mret; GRPO's) at Qpos (cost vs GRPO) "
                      "| Pareto frontier"]
        for r in self.best_rows():
            best = r["best"] + (f" k={r['k']}" if r["k"] is not None else "")
            lines.append(f"{r['n']:>6}: {best} {r['mret']:.3f} (GRPO {r['grpo_mret']:.3f}) at "
                         f"Qpos {r['qpos']:.3f} (cost {r['qpos_cost']:+.3f}) | {', '.join(r['frontier'])}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"methods": list(self.methods), "group_sizes": list(self.group_sizes),
                "steps": self.steps, "seeds": self.seeds, "mret": self.mret.tolist(),
                "qpos": self.qpos.tolist(),
                "update_rate": None if self.rate is None else self.rate.tolist(),
                "passk_k": [None if k is None else list(k) for k in self.ks] if self.ks else None,
                "min_update_rate": MIN_UPDATE_RATE, "best": self.best_rows()}


def run_methods_study(base: C.SimConfig, out_dir, *, group_sizes: Sequence[int] = STUDY_GROUP_SIZES,
                      seeds: int = 4, methods: Sequence[Method] = METHODS, figures_dir=None,
                      resume: bool = True, progress: bool = True, shard: bool = False,
                      log=None) -> MethodsStudy:
    """Run every method over `group_sizes` × `seeds` (resumable), write the table, JSON, figures."""
    check_base(base)
    out = Path(out_dir)
    t0 = time.perf_counter()
    mret = np.full((len(methods), len(group_sizes), seeds), np.nan)
    qpos = np.full_like(mret, np.nan)
    rate = np.full_like(mret, np.nan)
    for i, method in enumerate(methods):
        if log:
            log(f"method {method.name}")
        cells: dict = {}  # one sweep per distinct k (per N for the pass@k rules)
        for j, n in enumerate(group_sizes):
            cells.setdefault(method.k(n), []).append(j)
        for js in cells.values():
            sizes = [int(group_sizes[j]) for j in js]
            cfg = method_config(base, method, sizes[0])
            res = sweep(cfg, out / "runs" / cfg.method, group_sizes=sizes, gammas=[method.gamma],
                        seeds=seeds, resume=resume, progress=progress, shard=shard, log=log)
            mret[i, js] = res.final("mret")[0, 0]
            qpos[i, js] = res.final("qpos")[0, 0]
            for jj, (j, n) in enumerate(zip(js, sizes)):
                rate[i, j] = update_rate(cfg, method.gamma, n, res.data["mu_hat"][0, 0, jj][:, 1:])
    ks = tuple(tuple(method.k(int(n)) for n in group_sizes) if method.k_per_n else None for method in methods)
    study = MethodsStudy(tuple(m.name for m in methods), tuple(int(n) for n in group_sizes),
                         mret, qpos, base.steps, seeds, time.perf_counter() - t0, rate, ks)
    table, saved = study.table() + "\n", json.dumps(study.to_json(), indent=1) + "\n"
    write_text(out / "methods.txt", table)
    write_text(out / "methods.json", saved)
    fig_dir = Path(figures_dir) if figures_dir is not None else out
    _draw(study, fig_dir)
    if figures_dir is not None:
        write_text(fig_dir / "methods.txt", table)
        write_text(fig_dir / "methods.json", saved)
    return study


def _draw(study: MethodsStudy, fig_dir: Path) -> list[Path]:
    from catsim.plots.methods import plot_frontier, plot_vs_n

    return [plot_vs_n(study, fig_dir / "methods_vs_n.png"), plot_frontier(study, fig_dir / "methods_frontier.png")]


def rerender_methods_study(json_path, figures_dir) -> list[Path]:
    """Redraw the study's figures (methods_vs_n.png, methods_frontier.png) into `figures_dir` from
    the methods.json a run wrote, running nothing: how the committed figures are redrawn when only
    their drawing changes."""
    path = Path(json_path)
    if not path.is_file():
        raise CatsimError(f"{path}: no methods.json to redraw from (a methods study writes it)")
    try:
        study = MethodsStudy.from_json(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError) as err:
        raise CatsimError(f"{path}: not a methods study's methods.json ({err})") from None
    return _draw(study, Path(figures_dir))
