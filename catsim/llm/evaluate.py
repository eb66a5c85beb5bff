"""Evaluation of trained policies: pass@k with intervals, paired significance, rare-solution
diagnostics (ΔNLL_rare, retained answer mass) and a per-prompt solved/forgotten ledger.

    model = load_policy("runs/grpo/model")
    ev = evaluate_passk(model, task, n=64, ks=[1, 8, 64], n_prompts=128)
    ev["pass_at_k"][8], ev["interval"][8]

- pass@k: `catsim.llm.metrics.pass_at_k` (unbiased) on n samples per held-out prompt, averaged,
  with a bootstrap interval over prompts. A sample counts as correct when its verifier score is
  ≥ `correct_threshold` (1.0: fully correct, also for graded rewards).
- ΔNLL_rare (F-GRPO App. M.2): sample the BASE model on train prompts, keep its correct samples,
  length-normalised NLL = −(1/|o|)·Σ_t log π(o_t | x, o_<t) at temperature 1; "rare" = the top
  `rare_quantile` (1%) by base NLL (at least one trajectory); ΔNLL_rare = mean over the rare set of
  NLL_trained − NLL_base.
- Retained answer mass (many-solution task): the exact probability π(y | x) of every enumerated
  correct answer by teacher forcing (`catsim.llm.tasks.answer_mass`); an answer keeps its base mass
  when π_trained(y) ≥ π_base(y); Mret = 1 − Σ_y max(0, π_base − π_trained) / Σ_y π_base per prompt
  (the LLM counterpart of the simulator's Mret), plus the correct mass Qpos before and after.
- Ledger: per prompt, solved (≥ 1 correct of n) at each checkpoint; "forgotten" = solved at an
  earlier checkpoint and unsolved at the last one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np

from catsim.errors import CatsimError
from catsim.llm import metrics, scoring
from catsim.llm.model.config import ModelConfig
from catsim.llm.model.transformer import Params
from catsim.llm.rollout import SamplingConfig, sample_groups, stop_and_pad
from catsim.llm.tasks.base import take_unscored


@dataclass
class Policy:
    """A loaded model: config, parameters and tokenizer (and where it came from)."""

    cfg: ModelConfig
    params: Params
    tokenizer: Any  # catsim.llm.model.tokenizer.Tokenizer
    path: str = ""
    mesh: Any = None  # the jax.sharding.Mesh the parameters are sharded over (None: one device)


def load_policy(model_dir: str | Path, mesh=None) -> Policy:
    """A model directory's policy; with a mesh (of one or several processes) its parameters are
    FSDP-sharded over it and sampling splits rows over it, every process getting every row."""
    from catsim.llm.model.checkpoint import load_model
    from catsim.llm.model.tokenizer import Tokenizer

    cfg, params = load_model(model_dir, mesh=mesh)
    return Policy(cfg, params, Tokenizer.from_dir(model_dir), str(model_dir), mesh)


def _sampling(policy: Policy, max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0):
    stops, pad = stop_and_pad(policy.cfg, policy.tokenizer)
    return SamplingConfig(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                          stop_tokens=stops, pad_token=pad)


def sample(policy: Policy, task, prompts, n: int, *, max_new_tokens: int, seed: int = 0,
           batch_size: int = 256, temperature: float = 1.0, chat_template: bool = False,
           progress: bool | None = False, label: str = "sample"):
    """n completions per prompt (`catsim.llm.rollout.Groups`); randomness keyed by (seed, prompt, sample).

    progress: rollouts done on stderr, named `label` (`rollout_progress_bar`; True, False or None =
    automatic)."""
    if n < 1:
        raise CatsimError(f"samples per prompt must be >= 1, got {n}")
    layout: dict = {"batch_size": batch_size}
    if policy.mesh is not None:  # whole rows per device; padded rows are dropped
        from catsim.llm.model.sharding import whole_rows

        layout = {"batch_size": whole_rows(min(batch_size, len(prompts) * n), policy.mesh),
                  "pad_rows": True, "mesh": policy.mesh}
    with rollout_progress_bar(len(prompts) * n, label, progress) as bar:
        return sample_groups(policy.params, policy.cfg, policy.tokenizer, task, prompts, n,
                             _sampling(policy, max_new_tokens, temperature), jax.random.key(seed),
                             chat_template=chat_template, progress=bar, **layout)


def rollout_progress_bar(total: int, label: str, mode: bool | None, long: bool = True):
    """Rollouts done (`sample_groups(progress=...)`) on stderr: a bar on a terminal, removed when done,
    or plain lines (`catsim.progress.progress_bar`: mode True, False or None = automatic; `long`
    False keeps a piped command silent in automatic mode)."""
    from catsim.progress import progress_bar

    return progress_bar(total, label, mode, unit="rollout", leave=False, long=long)


def eval_prompts(task, split: str, data_seed: int, n_prompts: int):
    count = min(n_prompts, task.num_prompts(split)) if n_prompts > 0 else task.num_prompts(split)
    return [task.prompt(split, data_seed, i) for i in range(count)]


def passk_summary(num_correct_P, n: int, ks, *, seed: int = 0, confidence: float = 0.95) -> dict:
    """Mean pass@k and bootstrap interval for each k ≤ n, from per-prompt correct counts."""
    ks = sorted({int(k) for k in ks if 1 <= int(k) <= n})
    if not ks:
        raise CatsimError(f"no k in [1, n={n}] to evaluate")
    c = np.asarray(num_correct_P)
    out: dict[str, Any] = {"n": int(n), "ks": ks, "pass_at_k": {}, "interval": {},
                           "num_correct": c.astype(int).tolist()}
    for k in ks:
        per = metrics.pass_at_k(n, c, k)
        out["pass_at_k"][k] = float(per.mean())
        out["interval"][k] = list(metrics.bootstrap_interval(per, seed=seed, confidence=confidence))
    return out


def evaluate_passk(policy: Policy, task, *, n: int, ks, n_prompts: int = 128, split: str = "heldout",
                   data_seed: int = 0, max_new_tokens: int = 64, seed: int = 0, batch_size: int = 256,
                   correct_threshold: float = 1.0, chat_template: bool = False, progress: bool | None = False,
                   label: str = "eval") -> dict:
    """pass@k on `n_prompts` prompts of `split` with n samples each (see the module docstring);
    progress: rollouts done on stderr, named `label` (`rollout_progress_bar`)."""
    prompts = eval_prompts(task, split, data_seed, n_prompts)
    take_unscored(task)  # count only this evaluation's unverified completions
    groups = sample(policy, task, prompts, n, max_new_tokens=max_new_tokens, seed=seed,
                    batch_size=batch_size, chat_template=chat_template, progress=progress, label=label)
    correct = (groups.scores >= correct_threshold).sum(axis=1)
    out = passk_summary(correct, n, ks, seed=seed)
    out.update(prompt_indices=[p.index for p in prompts], split=split, mean_reward=float(groups.scores.mean()),
               response_length=float(groups.mask.sum(axis=1).mean()), unverified=take_unscored(task))
    return out


# ----------------------------------------------------------------------------- NLL / ΔNLL_rare
def sequence_nll(policy: Policy, prompt_tokens, prompt_mask, tokens, mask, batch_size: int = 256) -> np.ndarray:
    """Length-normalised NLL −(1/|o|)Σ_t log π(o_t | x, o_<t) per row at temperature 1: [B]
    (`catsim.llm.scoring.sequence_nll`)."""
    return scoring.sequence_nll(policy.params, policy.cfg, prompt_tokens, prompt_mask, tokens, mask, batch_size)


@dataclass
class RareSet:
    """The base model's rare correct trajectories (App. M.2)."""

    prompt_tokens: np.ndarray  # [R, W]
    prompt_mask: np.ndarray  # [R, W]
    tokens: np.ndarray  # [R, M]
    mask: np.ndarray  # [R, M]
    base_nll: np.ndarray  # [R] length-normalised NLL under the base model
    num_correct: int  # correct base samples the rare set was chosen from
    threshold: float  # smallest base NLL inside the rare set


def rare_correct_set(base: Policy, task, *, n_prompts: int = 256, n: int = 32, rare_quantile: float = 0.01,
                     data_seed: int = 0, max_new_tokens: int = 64, seed: int = 0, batch_size: int = 256,
                     correct_threshold: float = 1.0, split: str = "train", progress: bool | None = False) -> RareSet:
    """Sample the base model on train prompts and keep the top `rare_quantile` of its correct
    samples by length-normalised NLL (paper: 256 prompts × 800 rollouts, top 1%)."""
    if not 0 < rare_quantile <= 1:
        raise CatsimError(f"rare_quantile must be in (0, 1], got {rare_quantile}")
    prompts = eval_prompts(task, split, data_seed, n_prompts)
    g = sample(base, task, prompts, n, max_new_tokens=max_new_tokens, seed=seed + 7919, batch_size=batch_size,
               progress=progress, label="rare set")
    ok = np.flatnonzero(g.scores.reshape(-1) >= correct_threshold)
    if ok.size == 0:
        raise CatsimError("the base model produced no correct sample: ΔNLL_rare is undefined")
    nll = sequence_nll(base, g.prompt_tokens[ok], g.prompt_mask[ok], g.tokens[ok], g.mask[ok], batch_size)
    keep = max(1, int(np.ceil(rare_quantile * ok.size)))
    top = np.argsort(-nll, kind="stable")[:keep]
    rows = ok[top]
    return RareSet(g.prompt_tokens[rows], g.prompt_mask[rows], g.tokens[rows], g.mask[rows], nll[top],
                   int(ok.size), float(nll[top].min()))


def delta_nll_rare(policy: Policy, rare: RareSet, batch_size: int = 256) -> float:
    """Mean NLL increase of the rare set under `policy` relative to the base (App. M.2)."""
    nll = sequence_nll(policy, rare.prompt_tokens, rare.prompt_mask, rare.tokens, rare.mask, batch_size)
    return float(np.mean(nll - rare.base_nll))


# ----------------------------------------------------------------------------- answer mass
def answer_mass_table(policy: Policy, task, prompts) -> np.ndarray:
    """π(y | x) for every enumerated correct answer: a list (per prompt) of [K_p] arrays."""
    from catsim.llm.tasks.answer_mass import answer_probabilities

    eos = stop_and_pad(policy.cfg, policy.tokenizer)[0][0]
    fn = scoring.answer_logprob_fn(policy.params, policy.cfg)
    backend = getattr(policy.tokenizer, "backend", policy.tokenizer)
    out = []
    for p in prompts:
        probs = answer_probabilities(fn, backend, task, p, eos)
        out.append(np.asarray([probs[a] for a in task.correct_answers(p)]))
    return out


def retained_mass(base_probs, trained_probs) -> dict:
    """How many correct answers keep their base-model mass, and the mass-weighted Mret.

    Args: two lists (per prompt) of [K_p] answer probabilities, base and trained.
    """
    if len(base_probs) != len(trained_probs) or not base_probs:
        raise CatsimError("retained_mass needs equal, non-empty lists of per-prompt answer probabilities")
    kept = total = 0
    mret, q0, q1, kept_frac = [], [], [], []
    for b, t in zip(base_probs, trained_probs):
        b, t = np.asarray(b, np.float64), np.asarray(t, np.float64)
        if b.shape != t.shape:
            raise CatsimError("base and trained answer lists differ in length")
        k = int(np.sum(t >= b))
        kept += k
        total += b.size
        kept_frac.append(k / b.size)
        mret.append(1.0 - np.sum(np.maximum(0.0, b - t)) / b.sum() if b.sum() > 0 else 1.0)
        q0.append(b.sum())
        q1.append(t.sum())
    return {"answers_kept": kept, "answers_total": total, "kept_fraction": kept / total,
            "mret": float(np.mean(mret)), "mret_per_prompt": [float(x) for x in mret],
            "qpos_base": float(np.mean(q0)), "qpos_trained": float(np.mean(q1)),
            "kept_fraction_per_prompt": kept_frac}


# ----------------------------------------------------------------------------- ledger
def forgetting_ledger(labels, num_correct_CxP) -> dict:
    """Per-prompt solved (≥ 1 correct) across checkpoints in order; forgotten = solved at some
    earlier checkpoint and unsolved at the last one; gained = unsolved at the first, solved last."""
    c = np.asarray(num_correct_CxP)
    if c.ndim != 2 or c.shape[0] != len(labels) or c.shape[0] < 2:
        raise CatsimError("the ledger needs counts for at least two checkpoints, one row per label")
    solved = c > 0
    ever_before = np.cumsum(solved[:-1], axis=0)[-1] > 0
    forgotten = ever_before & ~solved[-1]
    gained = ~solved[0] & solved[-1]
    return {
        "labels": list(labels),
        "solved": [int(x) for x in solved.sum(axis=1)],
        "forgotten": int(forgotten.sum()),
        "gained": int(gained.sum()),
        "forgotten_prompts": [int(i) for i in np.flatnonzero(forgotten)],
        "solved_matrix": solved.astype(int).tolist(),
    }
