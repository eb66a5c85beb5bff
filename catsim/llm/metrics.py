"""Evaluation statistics on per-prompt sample counts: the ONE pass@k estimator, bootstrap intervals,
and the paired m-out-of-n subsampling test (Lemma 3.1's active-group prediction lives in
`catsim.theory.active_fraction_prediction`).

Shapes: `num_correct_P` is c_p, the number of correct samples among n drawn for prompt p.

- `pass_at_k(n, c, k)`: unbiased pass@k (Chen et al. 2021; F-GRPO §5.3) 1 − C(n−c, k)/C(n, k),
  evaluated as the exact product 1 − Π_{i=n−c+1}^{n} (1 − k/i), never through huge binomials.
- `bootstrap_interval`: percentile interval of a mean over prompts, prompts resampled with
  replacement.
- `paired_subsample_test`: the paper's significance test (§5.3, n = 1024, m = 256, 50k iterations):
  each iteration draws m of the n samples of every prompt without replacement, independently for
  the two models, and recomputes mean pass@k; the number of correct samples in such a draw is
  hypergeometric(c, n − c, m), so no sample list is needed.
- `passk_by_level(n, c, levels, ks)`: mean pass@k over the prompts of each difficulty level.
- `steps_to_target(values, target, window)`: the first step whose trailing mean reaches a target
  (convergence speed from a per-step training curve).
"""

from __future__ import annotations

import numpy as np

from catsim.errors import CatsimError

__all__ = [
    "pass_at_k",
    "pass_at_k_curve",
    "bootstrap_interval",
    "paired_subsample_test",
    "passk_by_level",
    "steps_to_target",
]


def _check_counts(n, num_correct) -> np.ndarray:
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise CatsimError(f"number of samples n must be a whole number >= 1, got {n!r}")
    c = np.asarray(num_correct)
    if c.size and (not np.all(np.isfinite(c)) or np.any(c != np.round(c)) or np.any(c < 0) or np.any(c > n)):
        raise CatsimError(f"numbers of correct samples must be whole numbers in [0, n={int(n)}]")
    return c.astype(np.int64)


def pass_at_k(n: int, num_correct, k: int) -> np.ndarray:
    """Unbiased pass@k = 1 − C(n−c, k)/C(n, k) for each c in `num_correct` (any shape).

    Args:
      n: samples drawn per prompt (n ≥ k).
      num_correct: c, correct samples per prompt, whole numbers in [0, n]; any shape.
      k: 1 ≤ k ≤ n.

    Returns:
      float64 array of `num_correct`'s shape, exact to rounding (product form).
    """
    c = _check_counts(n, num_correct)
    n = int(n)
    if isinstance(k, bool) or int(k) != k or not 1 <= k <= n:
        raise CatsimError(f"k must be a whole number in [1, n={n}], got {k!r}")
    k = int(k)
    out = np.empty(c.shape, np.float64)
    for value in np.unique(c):
        if n - value < k:
            result = 1.0
        else:
            i = np.arange(n - value + 1, n + 1, dtype=np.float64)
            result = 1.0 - float(np.prod(1.0 - k / i))
        out[c == value] = result
    return out


def pass_at_k_curve(n: int, num_correct_P, ks) -> np.ndarray:
    """Mean over prompts of pass@k for each k in `ks`: [P], [K] -> [K]."""
    c = np.asarray(num_correct_P)
    if c.ndim != 1 or c.size == 0:
        raise CatsimError("num_correct_P must be a non-empty 1-D array (one count per prompt)")
    return np.asarray([pass_at_k(n, c, k).mean() for k in ks])


def bootstrap_interval(values_P, *, num_resamples: int = 2000, confidence: float = 0.95,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of per-prompt values (prompts resampled)."""
    v = np.asarray(values_P, np.float64)
    if v.ndim != 1 or v.size == 0:
        raise CatsimError("bootstrap needs a non-empty 1-D array of per-prompt values")
    if not 0 < confidence < 1:
        raise CatsimError(f"confidence must be in (0, 1), got {confidence}")
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, v.size, size=(num_resamples, v.size))].mean(axis=1)
    alpha = (1.0 - confidence) / 2
    lo, hi = np.quantile(means, [alpha, 1 - alpha])
    return float(lo), float(hi)


def paired_subsample_test(n: int, correct_a_P, correct_b_P, *, k: int, m: int,
                          iterations: int = 50_000, seed: int = 0, confidence: float = 0.95) -> dict:
    """Paired m-out-of-n subsampling test of mean pass@k, model B minus model A (F-GRPO §5.3).

    Each iteration draws, for every prompt, m of the n samples of A and (independently) m of the
    n samples of B without replacement, and computes Δ = mean pass@k(B) − mean pass@k(A) with the
    unbiased estimator on m samples. Prompts are paired (the same prompt set for both models).

    Returns:
      dict with delta (full-sample Δ on n samples), delta_mean (mean Δ over iterations),
      interval (percentile interval of Δ), p_value (two-sided: 2·min(Pr(Δ ≤ 0), Pr(Δ ≥ 0)), ≤ 1),
      and the settings n, m, k, iterations.
    """
    ca, cb = _check_counts(n, correct_a_P), _check_counts(n, correct_b_P)
    if ca.ndim != 1 or ca.shape != cb.shape or ca.size == 0:
        raise CatsimError("paired test needs two equal-length 1-D arrays of per-prompt counts")
    if not 1 <= k <= m <= n:
        raise CatsimError(f"need 1 <= k <= m <= n, got k={k}, m={m}, n={n}")
    if iterations < 1:
        raise CatsimError("iterations must be >= 1")
    rng = np.random.default_rng(seed)
    table = pass_at_k(m, np.arange(m + 1), k)  # pass@k on m samples for every possible count
    deltas = np.empty(iterations)
    chunk = max(1, 2_000_000 // ca.size)
    for start in range(0, iterations, chunk):
        size = min(chunk, iterations - start)
        sub_a = rng.hypergeometric(ca, n - ca, m, size=(size, ca.size))
        sub_b = rng.hypergeometric(cb, n - cb, m, size=(size, cb.size))
        deltas[start:start + size] = table[sub_b].mean(axis=1) - table[sub_a].mean(axis=1)
    alpha = (1.0 - confidence) / 2
    lo, hi = np.quantile(deltas, [alpha, 1 - alpha])
    p_value = min(1.0, 2.0 * min(np.mean(deltas <= 0), np.mean(deltas >= 0)))
    return {
        "delta": float(pass_at_k(n, cb, k).mean() - pass_at_k(n, ca, k).mean()),
        "delta_mean": float(deltas.mean()),
        "interval": [float(lo), float(hi)],
        "p_value": float(p_value),
        "n": int(n), "m": int(m), "k": int(k), "iterations": int(iterations),
    }


def passk_by_level(n: int, num_correct_P, levels_P, ks) -> dict:
    """Mean unbiased pass@k over the prompts of each difficulty level.

    Args:
      n: samples per prompt; num_correct_P: correct samples per prompt [P]; levels_P: level of
      each prompt [P] (any integers); ks: k values, each in [1, n].

    Returns:
      {level: {"prompts": count, "pass_at_k": {k: mean pass@k}}}, levels ascending.
    """
    c = _check_counts(n, num_correct_P)
    lv = np.asarray(levels_P)
    if c.ndim != 1 or lv.shape != c.shape or c.size == 0:
        raise CatsimError("passk_by_level needs equal-length, non-empty 1-D counts and levels")
    out = {}
    for level in sorted({int(x) for x in lv}):
        sel = c[lv == level]
        out[level] = {"prompts": int(sel.size),
                      "pass_at_k": {int(k): float(pass_at_k(n, sel, int(k)).mean()) for k in ks}}
    return out


def steps_to_target(values, target: float, window: int = 1) -> int | None:
    """The first 1-based step s ≥ window with mean(values[s − window : s]) ≥ target; None if none.

    `values` is a per-step curve (e.g. mean training reward of RL steps 1, 2, …); the trailing
    mean over `window` steps keeps one lucky batch from counting as convergence.
    """
    v = np.asarray(values, np.float64)
    if v.ndim != 1 or not np.all(np.isfinite(v)):
        raise CatsimError("steps_to_target needs a 1-D curve of finite values")
    if isinstance(window, bool) or int(window) != window or window < 1:
        raise CatsimError(f"window must be a whole number >= 1, got {window!r}")
    if v.size < window:
        return None
    means = np.convolve(v, np.ones(int(window)) / window, mode="valid")  # means[i] ends at step i + window
    hit = np.flatnonzero(means >= target - 1e-12)
    return int(hit[0]) + int(window) if hit.size else None
