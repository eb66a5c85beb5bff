"""`catsim llm advise`: sample a model on a task's prompts and turn Lemma 3.1 into advice on the
group size N and the focal γ (`catsim.theory.planning.advise` does the mathematics).

    advice, meta = advise_model("runs/warmup", n=64, group_sizes=[2, 4, 8, 16, 32, 64])
    print(advice.reasoning)

Answer labels (which samples are "the same answer"): for tasks that enumerate their correct
answers (paths, maze) the cleaned completion, which is one of the enumerated answers when correct;
for other tasks (math) the whitespace-normalised completion, i.e. distinct written solutions, since
every correct final answer is equivalent to the one reference.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from catsim.errors import CatsimError
from catsim.theory import planning


def answer_labels(task, prompts, texts_PxN) -> np.ndarray:
    """[P, n] answer labels of the sampled completions (see the module docstring)."""
    enumerable = task.correct_answers(prompts[0]) is not None
    cap = getattr(task, "max_answer_chars", 4096)
    out = np.empty((len(prompts), len(texts_PxN[0])), dtype=object)
    for i, row in enumerate(texts_PxN):
        for j, text in enumerate(row):
            text = text if isinstance(text, str) else ""
            out[i, j] = text.strip()[: cap + 1] if enumerable else " ".join(text.split())
    return out


def sample_answers(model_dir, *, task_name: str | None = None, task_options: dict | None = None,
                   split: str = "train", n_prompts: int = 64, n: int = 64, seed: int = 0,
                   max_new_tokens: int | None = None, batch_size: int = 256, data_seed: int | None = None):
    """Sample `n` completions of the first `n_prompts` prompts of `split` of the model's task (its
    task file; `task_name`/`task_options` override it): (labels [P, n], correct [P, n] bool, prompts, task)."""
    from catsim.llm.evaluate import eval_prompts, load_policy, sample
    from catsim.llm.rundir import task_for_model

    task, seed_of_split = task_for_model(model_dir, task_name, task_options or {}, data_seed)
    prompts = eval_prompts(task, split, seed_of_split, n_prompts)
    if not prompts:
        raise CatsimError(f"task {task.name!r} has no {split} prompts")
    if max_new_tokens is not None and not (isinstance(max_new_tokens, int) and max_new_tokens >= 1):
        raise CatsimError(f"max_new_tokens must be an integer >= 1 (None: the task's longest answer + 1), "
                          f"got {max_new_tokens!r}")
    cap = getattr(task, "max_answer_chars", None)
    max_new = max_new_tokens or ((cap + 1) if cap else 64)
    policy = load_policy(model_dir)
    groups = sample(policy, task, prompts, n, max_new_tokens=max_new, seed=seed, batch_size=batch_size)
    texts = [groups.texts[i * n:(i + 1) * n] for i in range(len(prompts))]
    return answer_labels(task, prompts, texts), np.asarray(groups.scores) >= 1.0, prompts, task


def advise_model(model_dir, *, group_sizes, n: int = 64, n_prompts: int = 64, split: str = "train",
                 rule: planning.RareRule | None = None, n_boot: int = 200, seed: int = 0,
                 target_risk: float = 0.1, max_new_tokens: int | None = None, batch_size: int = 256,
                 task_name: str | None = None, task_options: dict | None = None):
    """Sample, estimate and advise: (planning.Advice, meta dict with the task and prompt indices)."""
    if not Path(model_dir).is_dir():
        raise CatsimError(f"{model_dir}: no such model directory")
    labels, correct, prompts, task = sample_answers(model_dir, task_name=task_name, task_options=task_options,
                                                    split=split, n_prompts=n_prompts, n=n, seed=seed,
                                                    max_new_tokens=max_new_tokens, batch_size=batch_size)
    advice = planning.advise(labels, correct, group_sizes, rule=rule or planning.RareRule(), n_boot=n_boot, seed=seed,
                             target_risk=target_risk)
    meta = {"model": str(model_dir), "task": task.name, "split": split,
            "prompt_indices": [int(p.index) for p in prompts], "seed": seed}
    return advice, meta
