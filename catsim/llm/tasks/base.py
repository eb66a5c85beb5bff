"""The common protocol of catsim's verifiable tasks, and helpers for untrusted model output.

A task is a frozen, typed configuration plus four questions a trainer asks of it:

- `prompts(split, seed)`: the prompts of a split, in a fixed order. The train and held-out splits of
  one `seed` never share a prompt; both are deterministic functions of the seed and the config
  (nothing is downloaded, nothing depends on batch layout).
- `reference(prompt)`: the canonical answer (the supervised target for single-solution tasks).
- `reward(prompt, completion_text) -> float in [0, 1]`: the verifier. The completion is untrusted
  text: it is measured, parsed and compared, never evaluated; long inputs are rejected before any
  parsing, so time and memory are bounded.
- `correct_answers(prompt)`: every correct answer when the task can enumerate them, else None.

Batches: a task may also define `rewards(prompts, completion_texts) -> list[float]` (one verdict per
pair, checked together, e.g. on a pool of worker processes under one time budget) and
`take_unscored() -> int` (completions its budget left unverified and scored 0); `score_batch` and
`take_unscored` below use them when present and fall back to `reward` one pair at a time.

Text conventions: `Prompt.text` ends with the answer separator; a completion is the text the model
wrote after the prompt, with its end-of-sequence token already removed by the caller.
"""

from __future__ import annotations

import functools
from collections.abc import Container, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from catsim.errors import CatsimError

SPLITS = ("train", "heldout")
"""The split names every task accepts."""

_SPLIT_CODE = {"train": 0, "heldout": 1}


@dataclass(frozen=True)
class Prompt:
    """One task instance."""

    task: str  # name of the task that made it ("maze", "paths", "math")
    split: str  # "train" or "heldout"
    index: int  # position within its split (0-based)
    text: str  # the prompt text the model is conditioned on; ends with the answer separator
    answers: tuple[str, ...]  # correct answers: all of them (enumerable tasks) or the references


@runtime_checkable
class Task(Protocol):
    """What trainers, samplers and evaluators need from a task (see the module docstring)."""

    name: str

    @property
    def alphabet(self) -> str | None:
        """Characters of every prompt and correct answer (for a character tokenizer); None = open text."""
        ...

    def prompts(self, split: str, seed: int = 0) -> Iterator[Prompt]:
        """The prompts of `split` for dataset seed `seed`, in order."""
        ...

    def prompt(self, split: str, seed: int, index: int) -> Prompt:
        """Prompt number `index` of `split` (random access; equals the index-th item of `prompts`)."""
        ...

    def num_prompts(self, split: str) -> int:
        """How many prompts `prompts(split, seed)` yields."""
        ...

    def reference(self, prompt: Prompt) -> str:
        """The canonical correct answer."""
        ...

    def reward(self, prompt: Prompt, completion_text: str) -> float:
        """Verifier: 1.0 for a correct completion, 0.0 otherwise (graded tasks may return [0, 1])."""
        ...

    def correct_answers(self, prompt: Prompt) -> tuple[str, ...] | None:
        """Every correct answer, when the task can enumerate them exactly; else None."""
        ...

    def sft_target(self, prompt: Prompt, rng: np.random.Generator) -> str:
        """One supervised target for `prompt` drawn from the warm-up answer distribution."""
        ...


def score_batch(task: Task, prompts: Sequence[Prompt], completion_texts: Sequence[str]) -> list[float]:
    """`task`'s verdicts on (prompts[i], completion_texts[i]): its batch `rewards` when it has one."""
    if not prompts:
        return []
    batch = getattr(task, "rewards", None)
    scores = (list(batch(prompts, completion_texts)) if batch is not None
              else [task.reward(p, t) for p, t in zip(prompts, completion_texts)])
    if len(scores) != len(prompts):
        raise CatsimError(f"task {task.name!r} returned {len(scores)} rewards for {len(prompts)} completions")
    for score in scores:
        if not 0.0 <= float(score) <= 1.0:
            raise CatsimError(f"task {task.name!r} returned a reward {score} outside [0, 1]")
    return [float(x) for x in scores]


def take_unscored(task: Task) -> int:
    """Completions `task` left unverified (scored 0) since the last call; 0 for tasks without a budget."""
    take = getattr(task, "take_unscored", None)
    return int(take()) if take is not None else 0


def check_split(split: str) -> int:
    """Validate a split name and return its code for seeding."""
    if split not in _SPLIT_CODE:
        raise CatsimError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    return _SPLIT_CODE[split]


def check_seed(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise CatsimError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def instance_rng(seed: int, split: str, index: int, attempt: int = 0) -> np.random.Generator:
    """The generator of one instance: a pure function of (seed, split, index, attempt).

    Seeding by a list of integers goes through NumPy's SeedSequence, so nearby seeds give
    independent streams and an instance never depends on how many others were generated.
    """
    return np.random.default_rng([check_seed(seed), check_split(split), int(index), int(attempt)])


def clean_completion(completion_text: object, max_chars: int) -> str | None:
    """Bound and normalise untrusted model output before parsing.

    Returns the text with surrounding whitespace removed, or None when it is not a `str` or is
    longer than `max_chars` (checked before any other work, so a huge string costs O(1)).
    """
    if not isinstance(completion_text, str):
        return None
    if len(completion_text) > max_chars:
        return None
    return completion_text.strip()


Instance = tuple[str, tuple[str, ...]]
"""A generated instance: (prompt text, correct answers)."""


class GeneratedSplits:
    """Train/held-out splits of a procedural task, deterministic in (task config, seed).

    Subclasses implement `_instance(rng) -> Instance | None` (None rejects the draw, e.g. a grid
    whose answer count is out of range). Held-out instances are drawn first, distinct from each
    other; a train draw that equals a held-out instance is redrawn, so the splits never overlap.
    Train prompts may repeat among themselves (draws with replacement, as from a large pool).
    The split sizes come from the subclass's `config` (fields `n_train`, `n_heldout`).
    """

    name: str
    config: Any
    max_attempts: int = 1000  # redraws allowed per prompt before giving up with a CatsimError

    @property
    def n_train(self) -> int:
        return self.config.n_train

    @property
    def n_heldout(self) -> int:
        return self.config.n_heldout

    def _instance(self, rng: np.random.Generator) -> Instance | None:
        raise NotImplementedError

    def _draw(self, seed: int, split: str, index: int, exclude: Container[str]) -> Instance:
        for attempt in range(self.max_attempts):
            inst = self._instance(instance_rng(seed, split, index, attempt))
            if inst is not None and inst[0] not in exclude:
                return inst
        raise CatsimError(
            f"{self.name}: no new {split} instance after {self.max_attempts} draws "
            f"(index {index}); the configuration allows too few distinct instances: "
            "use a larger grid or fewer held-out prompts"
        )

    def _heldout(self, seed: int) -> tuple[tuple[Instance, ...], frozenset[str]]:
        return _heldout_cached(self, check_seed(seed))

    def num_prompts(self, split: str) -> int:
        check_split(split)
        return self.n_train if split == "train" else self.n_heldout

    def prompt(self, split: str, seed: int, index: int) -> Prompt:
        check_split(split)
        if isinstance(index, bool) or not isinstance(index, int | np.integer):
            raise CatsimError(f"prompt index must be an integer, got {index!r}")
        if not 0 <= index < self.num_prompts(split):
            raise CatsimError(
                f"{split} prompt index {index} out of range [0, {self.num_prompts(split)})"
            )
        held, held_texts = self._heldout(seed)
        text, answers = held[index] if split == "heldout" else self._draw(
            seed, "train", int(index), held_texts
        )
        return Prompt(task=self.name, split=split, index=int(index), text=text, answers=answers)

    def prompts(self, split: str, seed: int = 0) -> Iterator[Prompt]:
        check_split(split)
        check_seed(seed)
        for index in range(self.num_prompts(split)):
            yield self.prompt(split, seed, index)


@functools.lru_cache(maxsize=32)
def _heldout_cached(task: GeneratedSplits, seed: int) -> tuple[tuple[Instance, ...], frozenset[str]]:
    instances: list[Instance] = []
    seen: set[str] = set()
    for index in range(task.n_heldout):
        inst = task._draw(seed, "heldout", index, seen)
        instances.append(inst)
        seen.add(inst[0])
    return tuple(instances), frozenset(seen)
