"""Reading the Maze study's finished pieces back (`catsim.experiments.maze_study`).

A piece is a warm-up's evaluation (`s<seed>/base_eval.json`) or an RL run's (`s<seed>/<run>/eval.json`).
One that cannot be used — missing, empty, truncated, not JSON, or written with other settings (another
n, other k, another number of mazes, another run) — reads as None, with one line saying why when the
file was there: the study then recomputes it, as the simulator's sweep does with a damaged cell.

    base = read_piece(path, lambda d: eval_problem(d, n=256, prompts=256, ks=ks), say=print)
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path


def read_piece(path: Path, problem: Callable[[dict], str | None], say=print) -> dict | None:
    """The JSON object in `path` when `problem(data)` finds nothing wrong with it, else None (one line
    to `say` when the file exists but cannot be used)."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        why = problem(data) if isinstance(data, dict) else "not a JSON object"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        why = f"unreadable ({type(err).__name__}: {err})" if path.stat().st_size else "empty"
    if why is None:
        return data
    say(f"{path}: {why}; recomputing it")
    return None


def _prob(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and 0.0 <= x <= 1.0


def eval_problem(d: dict, *, n: int, prompts: int, ks, solution_mass: bool = True) -> str | None:
    """What is wrong with an evaluation (`maze_study.evaluate`'s dict) for these settings, or None."""
    want_ks = [str(k) for k in ks if k <= n]
    if d.get("n") != n:
        return f"evaluated with n = {d.get('n')!r} samples per maze, not {n}"
    passk = d.get("pass_at_k")
    if not isinstance(passk, dict) or sorted(passk) != sorted(want_ks):
        return f"pass@k for k = {list(passk) if isinstance(passk, dict) else passk!r}, not {want_ks}"
    if not all(_prob(v) for v in passk.values()):
        return "a pass@k value outside [0, 1]"
    counts = d.get("num_correct")
    if not isinstance(counts, list) or len(counts) != prompts:
        return f"{len(counts) if isinstance(counts, list) else 'no'} per-maze counts, not {prompts}"
    if not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= n for c in counts):
        return f"a per-maze count outside 0…{n}"
    if not _prob(d.get("greedy_solve_rate")):
        return "no greedy solve rate in [0, 1]"
    if solution_mass:
        mass = d.get("solution_prob")
        if not isinstance(mass, list) or len(mass) != prompts or not all(_prob(m) for m in mass):
            return f"π(solution) is not {prompts} probabilities"
    return None


def run_problem(d: dict, *, method: str, group_size: int, gamma: float, seed: int, label: str, steps: int,
                n: int, prompts: int, ks, curve_n: int, checkpoints: int) -> str | None:
    """What is wrong with an RL run's eval.json for this run and these settings, or None."""
    want = {"method": method, "group_size": group_size, "gamma": gamma, "seed": seed, "label": label}
    other = sorted(k for k, v in want.items() if d.get(k) != v)
    if other:
        return f"holds another run ({', '.join(f'{k} = {d.get(k)!r}' for k in other)})"
    final = d.get("final")
    if not isinstance(final, dict):
        return "no final evaluation"
    why = eval_problem(final, n=n, prompts=prompts, ks=ks)
    if why:
        return f"final evaluation: {why}"
    curve = d.get("curve")
    if not isinstance(curve, list) or len(curve) != checkpoints:
        return f"{len(curve) if isinstance(curve, list) else 'no'} checkpoint evaluations, not {checkpoints}"
    want_ks = sorted(str(k) for k in ks if k <= curve_n)
    for c in curve:
        if (not isinstance(c, dict) or not isinstance(c.get("step"), int) or not isinstance(c.get("pass_at_k"), dict)
                or sorted(c["pass_at_k"]) != want_ks or not all(_prob(v) for v in c["pass_at_k"].values())):
            return "a damaged checkpoint evaluation"
    rewards = d.get("reward_curve")
    if not isinstance(rewards, list) or len(rewards) != steps:
        return f"{len(rewards) if isinstance(rewards, list) else 'no'} RL steps logged, not {steps}"
    return None
