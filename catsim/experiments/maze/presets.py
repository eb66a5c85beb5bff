"""Presets of the Maze study (`catsim.experiments.maze.study`): the paper's App. K set-up, a CPU
version chosen by measurement, and a seconds-long one for tests.

Batch units follow verl (the paper's stack): `prompts_per_step` is verl's train_batch_size in
prompts (groups), each sampled N times, and `mini_batch_prompts` its ppo_mini_batch_size. The
paper's "batch 256" is read as 256 prompts per step, and its mini-batch as 64 prompts (the
paper's LLM set-up, App. L: global batch 256, mini-batch 64, one PPO epoch), i.e. four optimizer
updates per step. `rollouts_per_step` > 0 instead matches compute across N: rollouts_per_step / N
prompts per step (the CPU preset's reading of "≥ 256 rollouts per step").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from catsim.errors import CatsimError

PAPER_KS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class StudyPreset:
    """Everything the Maze study varies."""

    name: str = "custom"
    maze_size: int = 17  # grid side incl. the outer wall (paper: 17)
    algorithm: str = "dfs"  # maze generator
    n_heldout: int = 256  # held-out mazes (paper: 256)
    hidden: int = 256  # model width (paper: ~3M parameters; 256 wide, 3 layers: 3.15M)
    layers: int = 3
    heads: int = 8
    sft_steps: int = 1500  # paper: 1,500
    sft_batch: int = 32  # paper: 32
    sft_lr: float = 5e-4  # paper: AdamW 5e-4
    sft_schedule: str = "constant"  # the paper states no decay
    plan: tuple = ((4, 1), (8, 1), (16, 1), (32, 1), (64, 1), (128, 1))  # (N, seeds) pairs
    gammas: tuple = (0.5, 1.0)  # F-GRPO γ values (GRPO runs beside them)
    rl_steps: int = 20_000  # paper: 20K
    prompts_per_step: int = 256  # verl train_batch_size, in prompts (paper: 256)
    rollouts_per_step: int = 0  # > 0: compute-matched, rollouts_per_step / N prompts per step
    mini_batch_prompts: int = 64  # verl ppo_mini_batch_size in prompts (0 = one update per step)
    learning_rate: float = 1e-4  # paper: 1e-4
    warmup_steps: int = 15  # lr warm-up (the paper's LLM set-up: 15)
    eval_prompts: int = 256  # held-out mazes scored (paper: 256)
    eval_n: int = 1024  # samples per held-out maze (paper's test: n = 1024)
    ks: tuple = PAPER_KS
    checkpoints: int = 10  # pass@k against RL step at this many evenly spaced checkpoints
    curve_prompts: int = 256  # held-out mazes per checkpoint evaluation
    curve_n: int = 256  # samples per maze per checkpoint evaluation
    test_m: int = 256  # m of the paired m-out-of-n test (paper: 256 of n = 1024)
    test_iterations: int = 50_000  # paper: 50k
    eval_batch: int = 4096  # rollouts per generate call in evaluations
    rollout_batch: int = 8192  # RL: most rollouts per generate call (0 = all at once; bounds the KV cache)
    micro_batch: int = 1024  # RL: most rollouts per forward/backward pass (0 = the mini-batch)
    data_seed: int = 0  # the task's split seed (same held-out mazes for every seed)

    def __post_init__(self) -> None:
        if not self.plan or any(len(p) != 2 or int(p[0]) < 2 or int(p[1]) < 1 for p in self.plan):
            raise CatsimError(f"study plan must be (N >= 2, seeds >= 1) pairs, got {self.plan!r}")
        # a value given twice is one run, as in `catsim simulate` (first-seen order kept)
        plan = tuple(dict.fromkeys((int(n), int(s)) for n, s in self.plan))
        if len({n for n, _ in plan}) != len(plan):
            raise CatsimError(f"study plan gives one N two seed counts: {list(plan)}")
        object.__setattr__(self, "plan", plan)
        object.__setattr__(self, "gammas", tuple(dict.fromkeys(float(g) for g in self.gammas)))
        object.__setattr__(self, "ks", tuple(int(k) for k in self.ks))
        if any(not g > 0 for g in self.gammas):
            raise CatsimError(f"gammas must be > 0 (γ = 0 is GRPO, which always runs), got {list(self.gammas)}")
        for name in ("rl_steps", "eval_prompts", "eval_n", "curve_prompts", "curve_n", "checkpoints",
                     "sft_steps", "sft_batch", "test_iterations", "test_m"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CatsimError(f"study {name} must be a positive integer, got {value!r}")
        if self.test_m > self.eval_n:
            raise CatsimError(f"test m ({self.test_m}) must be <= eval n ({self.eval_n})")
        if any(not 1 <= k <= self.eval_n for k in self.ks) or 1 not in self.ks:
            raise CatsimError(f"every k must be in [1, eval n = {self.eval_n}] and k = 1 among them (the "
                              f"report's pass@1), got {list(self.ks)}")
        for n, _ in self.plan:
            self.prompts(n)

    def prompts(self, group_size: int) -> int:
        """Prompts per RL step at group size N."""
        if self.rollouts_per_step:
            if self.rollouts_per_step % group_size:
                raise CatsimError(f"rollouts per step ({self.rollouts_per_step}) must be divisible by N = {group_size}")
            return self.rollouts_per_step // group_size
        return self.prompts_per_step

    def updates(self, group_size: int) -> int:
        """Mini-batches per step (whole groups per update)."""
        p = self.prompts(group_size)
        return 1 if not self.mini_batch_prompts or p % self.mini_batch_prompts else p // self.mini_batch_prompts

    def snapshot_every(self) -> int:
        """RL steps between the policy snapshots that the pass@k-against-step curve evaluates."""
        return max(1, self.rl_steps // self.checkpoints)

    def with_overrides(self, *, seeds: int | None = None, group_sizes=None, gammas=None) -> StudyPreset:
        """The CLI's --seeds K (every N gets K seeds), --group-size and --gamma (a value given
        twice counts once)."""
        plan = self.plan
        if group_sizes is not None:
            if not group_sizes:
                raise CatsimError("--group-size: empty list")
            known = dict(plan)
            plan = tuple((n, known.get(n, 1)) for n in dict.fromkeys(int(n) for n in group_sizes))
        if seeds is not None:
            if isinstance(seeds, bool) or int(seeds) < 1:
                raise CatsimError(f"--seeds must be >= 1, got {seeds}")
            plan = tuple((n, int(seeds)) for n, _ in plan)
        changes: dict = {"plan": plan}
        if gammas is not None:
            if not gammas:
                raise CatsimError("--gamma: empty list")
            changes["gammas"] = tuple(gammas)
        return dataclasses.replace(self, **changes)


def run_names(sp: StudyPreset) -> list[tuple[str, int, float, int]]:
    """Every RL run of the study as (method, N, γ, seed), seeds outermost: GRPO (γ = 0) then F-GRPO
    at every γ, for every N of the plan."""
    out = []
    for seed in range(max(s for _, s in sp.plan)):
        for n, seeds in sp.plan:
            if seed < seeds:
                out += [("grpo", n, 0.0, seed)] + [("f-grpo", n, g, seed) for g in sp.gammas]
    return out


def run_label(method: str, n: int, gamma: float) -> str:
    return f"{method}-N{n}" + (f"-g{gamma:g}" if method != "grpo" else "")


def paper() -> StudyPreset:
    """App. K as written (for a GPU)."""
    return StudyPreset(name="paper")


def cpu() -> StudyPreset:
    """The CPU study, chosen by measurement (docs/llm-maze-study.md): 7×7 mazes, a 2-layer
    64-wide model warmed up until it solves over half of the held-out mazes greedily, 2,000 RL
    steps of 256 rollouts, GRPO and F-GRPO (γ = 0.5, 1) at N = 8 with 3 seeds and N = 4, 32 with 1."""
    return StudyPreset(
        name="cpu", maze_size=7, hidden=64, layers=2, heads=4, sft_steps=1000, sft_batch=32, sft_lr=2e-3,
        sft_schedule="cosine", plan=((8, 3), (4, 1), (32, 1)), rl_steps=2000, prompts_per_step=0,
        rollouts_per_step=256, mini_batch_prompts=0, learning_rate=1e-4, warmup_steps=2, eval_prompts=256,
        eval_n=256, ks=PAPER_KS, checkpoints=4, curve_prompts=64, curve_n=64, test_m=64,
        test_iterations=10_000, eval_batch=2048, rollout_batch=0, micro_batch=0)


def tiny(paper_shapes: bool = False) -> StudyPreset:
    """Seconds, for tests (numbers mean nothing). paper_shapes: the paper's 17×17 mazes and
    ~3M-parameter model shape with every count shrunk (the GPU preset's code paths on a CPU)."""
    base = StudyPreset(
        name="tiny", maze_size=5, hidden=16, layers=1, heads=2, sft_steps=4, sft_batch=8, sft_lr=2e-3,
        sft_schedule="constant", plan=((2, 1),), gammas=(0.5,), rl_steps=2, prompts_per_step=4,
        rollouts_per_step=0, mini_batch_prompts=2, learning_rate=1e-4, warmup_steps=0, n_heldout=8,
        eval_prompts=8, eval_n=8, ks=(1, 2, 4, 8), checkpoints=1, curve_prompts=4, curve_n=4, test_m=4,
        test_iterations=200, eval_batch=64, rollout_batch=0, micro_batch=0)
    if paper_shapes:
        base = dataclasses.replace(base, name="tiny-paper-shapes", maze_size=17, hidden=256, layers=3, heads=8)
    return base


PRESETS = {"paper": paper, "cpu": cpu, "tiny": tiny}


def preset(name: str) -> StudyPreset:
    if name not in PRESETS:
        raise CatsimError(f"unknown maze-study preset {name!r}; choose from {', '.join(PRESETS)}")
    return PRESETS[name]()
