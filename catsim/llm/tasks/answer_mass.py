"""Exact probability a model gives each enumerated correct answer, by teacher forcing.

For a prompt x with correct answers y_1..y_K (all of them, from `task.correct_answers`), the
model's probability of answer y_k is the probability of its full token sequence followed by <eos>:
    π(y_k | x) = Π_t π(y_k,t | x, y_k,<t) · π(<eos> | x, y_k),
so Σ_k π(y_k | x) is the total correct mass Qpos of the prompt (THEORY.md §2) and each term is the
LLM counterpart of one correct action's probability in the categorical simulation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from catsim.errors import CatsimError
from catsim.llm.tasks.base import Prompt, Task

LogProbFn = Callable[[Sequence[int], Sequence[Sequence[int]]], Sequence[float]]
"""logprob_fn(prompt_ids, completions_ids) -> [K] log-probabilities: for each completion c (a list of
token ids, <eos> included), Σ_t log π(c_t | prompt, c_<t)."""


def answer_probabilities(
    logprob_fn: LogProbFn,
    tokenizer,
    task: Task,
    prompt: Prompt,
    eos_id: int,
    answers: Sequence[str] | None = None,
) -> dict[str, float]:
    """{answer: π(answer | prompt)} for every correct answer of `prompt` (or the given `answers`).

    `tokenizer` encodes text with its <bos> (as `build_char_tokenizer` does); completion ids are the
    answer's ids without <bos>, then `eos_id`.
    """
    if answers is None:
        answers = task.correct_answers(prompt)
        if answers is None:
            raise CatsimError(f"task {task.name!r} cannot enumerate its correct answers")
    if len(answers) == 0:
        return {}
    prompt_ids = list(tokenizer.encode(prompt.text).ids)
    completions = [list(tokenizer.encode(a, add_special_tokens=False).ids) + [eos_id] for a in answers]
    logps = np.asarray(logprob_fn(prompt_ids, completions), dtype=np.float64)
    if logps.shape != (len(answers),):
        raise CatsimError(f"logprob_fn returned shape {logps.shape}, expected ({len(answers)},)")
    if np.any(logps > 1e-6) or not np.all(np.isfinite(logps) | (logps == -np.inf)):
        raise CatsimError("logprob_fn returned a positive or NaN log-probability")
    return {a: float(np.exp(min(lp, 0.0))) for a, lp in zip(answers, logps)}
