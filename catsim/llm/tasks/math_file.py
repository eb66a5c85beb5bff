"""Math problems from a local JSONL or Parquet file, rewarded by math-verify or exact match.

Each record holds a question and a reference answer (field names configurable). The prompt text is
`prompt_template.format(question=...)`; the reward is 1.0 when the completion's final answer
matches the reference:

- checker "math-verify" (the paper's reward, App. L): `math_verify.parse` + `math_verify.verify`
  from the optional extra `math` (imported lazily; a clear CatsimError if absent). Model output is
  parsed (LaTeX and plain numeric expressions), never executed. A completion whose normalised final
  answer equals the normalised reference scores 1 in-process (the cheap check below); the others go
  to a pool of `verify_workers` separate worker processes (`catsim.llm.tasks.isolated`) as one
  batch: each stage has math-verify's own time limit there, a worker is killed when one check runs
  past 3 × `timeout_seconds` + 2 s (a signal cannot interrupt long C-level work), and the whole
  batch has `batch_budget_seconds`: completions not verified by then score 0 and are counted
  (`take_unscored`). Workers are recycled after `worker_max_calls` checks or past `worker_rss_mb`
  of resident memory, and run under an address-space limit of `worker_address_space_mb`. The
  completion is capped at `max_completion_chars` before any work.
- checker "exact": the last \\boxed{...} of the completion (else its last non-empty line),
  normalised (whitespace removed, surrounding $ and a trailing period stripped) and compared as a
  string with the normalised reference. No evaluation of any kind.

The split: records are shuffled once by the dataset seed; the last `heldout_fraction` of them (at
least one when there are two or more records) are held out. Duplicate questions are kept together
on one side, so the splits never share a question.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from catsim.errors import CatsimError
from catsim.llm.tasks.base import Prompt, check_seed, check_split, clean_completion
from catsim.llm.tasks.isolated import IsolatedPool

CHECKERS = ("math-verify", "exact")


@dataclass(frozen=True)
class MathFileConfig:
    """Local math-file task configuration."""

    path: str  # a .jsonl / .json (one object per line) or .parquet file
    question_field: str = "question"  # record field holding the problem text
    answer_field: str = "answer"  # record field holding the reference answer
    prompt_template: str = "{question}"  # how a question becomes prompt text ({question} placeholder)
    checker: str = "math-verify"  # "math-verify" (optional extra `math`) or "exact"
    heldout_fraction: float = 0.1  # share of distinct questions held out (by seeded shuffle)
    max_completion_chars: int = 65_536  # longer completions score 0 without being parsed
    timeout_seconds: int = 5  # math-verify time limit per stage; the worker is killed past 3× this + 2 s
    verify_workers: int = 2  # math-verify worker processes checking a batch in parallel
    batch_budget_seconds: float = 60.0  # wall time for one batch's checks; the rest score 0 (counted)
    worker_max_calls: int = 1000  # checks before a worker is replaced by a fresh one (0: never)
    worker_rss_mb: int = 1024  # resident memory past which a worker is replaced (0: never)
    worker_address_space_mb: int = 4096  # a worker's hard address-space limit, RLIMIT_AS (0: none)

    def __post_init__(self) -> None:
        if self.checker not in CHECKERS:
            raise CatsimError(f"math checker must be one of {CHECKERS}, got {self.checker!r}")
        if not 0.0 <= self.heldout_fraction < 1.0:
            raise CatsimError(f"heldout_fraction must be in [0, 1), got {self.heldout_fraction}")
        for name in ("max_completion_chars", "timeout_seconds", "verify_workers", "worker_max_calls",
                     "worker_rss_mb", "worker_address_space_mb"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise CatsimError(f"math task: {name} must be an integer, got {value!r}")
        if isinstance(self.batch_budget_seconds, bool) or not isinstance(self.batch_budget_seconds, int | float):
            raise CatsimError(f"math task: batch_budget_seconds must be a number, got {self.batch_budget_seconds!r}")
        if self.max_completion_chars < 1 or self.timeout_seconds < 1 or self.verify_workers < 1:
            raise CatsimError("max_completion_chars, timeout_seconds and verify_workers must be positive")
        if not self.batch_budget_seconds > 0:
            raise CatsimError(f"batch_budget_seconds must be positive, got {self.batch_budget_seconds}")
        if min(self.worker_max_calls, self.worker_rss_mb, self.worker_address_space_mb) < 0:
            raise CatsimError("worker_max_calls, worker_rss_mb and worker_address_space_mb must be >= 0 (0: no limit)")
        if "{question}" not in self.prompt_template:
            raise CatsimError("prompt_template must contain the placeholder {question}")


def load_records(path: str, question_field: str, answer_field: str) -> list[tuple[str, str]]:
    """(question, answer) pairs of a JSONL or Parquet file, in file order."""
    p = Path(path)
    if not p.is_file():
        raise CatsimError(f"math file not found: {path}")
    suffix = p.suffix.lower()
    rows: list[dict] = []
    if suffix in (".jsonl", ".json"):
        with p.open("rb") as fh:
            for lineno, raw in enumerate(fh, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    raise CatsimError(f"{path}:{lineno}: not UTF-8 text (byte {err.start}: {err.reason})") from None
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    raise CatsimError(f"{path}:{lineno}: not valid JSON ({err.msg})") from None
                if not isinstance(row, dict):
                    raise CatsimError(f"{path}:{lineno}: expected a JSON object per line")
                rows.append(row)
    elif suffix == ".parquet":
        try:
            import pandas as pd

            frame = pd.read_parquet(p)
        except ImportError as err:
            raise CatsimError(
                f"reading Parquet needs pandas with pyarrow ('catsim[data]' and pyarrow): {err}"
            ) from None
        except Exception as err:  # noqa: BLE001 - each engine has its own errors for a damaged file
            detail = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise CatsimError(f"{path}: not a readable Parquet file ({detail[:200]})") from None
        rows = frame.to_dict(orient="records")
    else:
        raise CatsimError(f"math file must be .jsonl, .json or .parquet, got {p.name}")
    out = []
    for i, row in enumerate(rows):
        if question_field not in row or answer_field not in row:
            raise CatsimError(
                f"{path}: record {i} lacks field {question_field!r} or {answer_field!r}"
            )
        out.append((str(row[question_field]), str(row[answer_field])))
    if not out:
        raise CatsimError(f"{path}: no records")
    return out


def _strip_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} with balanced braces, or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None


def normalise_answer(text: str) -> str:
    """Whitespace removed, surrounding $ and a trailing period stripped (string only, no eval)."""
    text = "".join(text.split())
    text = text[:-1] if text.endswith(".") else text
    return text.strip("$")


def final_answer(completion: str) -> str:
    """The last \\boxed{...} content, else the last non-empty line."""
    boxed = _strip_boxed(completion)
    if boxed is not None:
        return boxed
    lines = [line for line in completion.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _math_verify():
    try:
        import math_verify
    except ImportError:
        raise CatsimError(
            "checker 'math-verify' needs the optional extra: pip install 'catsim[math]' "
            "(or use checker 'exact')"
        ) from None
    return math_verify


@dataclass(frozen=True)
class MathFileTask:
    """Local math-file task (see the module docstring)."""

    config: MathFileConfig
    # completions the batch budget left unverified (scored 0), since the last `take_unscored`
    unscored: _Counter = field(default_factory=lambda: _Counter(), compare=False, repr=False)
    name: ClassVar[str] = "math"

    def __post_init__(self) -> None:
        if self.config.checker == "math-verify":
            _math_verify()  # fail at construction, not at the first reward

    @property
    def alphabet(self) -> None:
        return None

    def _records(self) -> list[tuple[str, str]]:
        return _records_cached(self.config.path, self.config.question_field, self.config.answer_field)

    def _split(self, split: str, seed: int) -> list[tuple[str, str]]:
        check_split(split)
        records = self._records()
        questions = sorted({q for q, _ in records})
        if self.config.heldout_fraction > 0 and len(questions) < 2:
            raise CatsimError(f"{self.config.path}: {len(questions)} distinct question, too few to split into "
                              "train and held-out prompts (give at least 2, or heldout_fraction 0)")
        order = np.random.default_rng([check_seed(seed), 7]).permutation(len(questions))
        n_held = int(round(self.config.heldout_fraction * len(questions)))
        if self.config.heldout_fraction > 0 and len(questions) >= 2:
            n_held = min(max(n_held, 1), len(questions) - 1)
        held = {questions[i] for i in order[len(questions) - n_held :]} if n_held else set()
        keep = (lambda q: q in held) if split == "heldout" else (lambda q: q not in held)
        return [r for r in records if keep(r[0])]

    def num_prompts(self, split: str, seed: int = 0) -> int:
        return len(self._split(split, seed))

    def prompt(self, split: str, seed: int, index: int) -> Prompt:
        records = self._split(split, seed)
        if not 0 <= index < len(records):
            raise CatsimError(f"{split} prompt index {index} out of range [0, {len(records)})")
        question, answer = records[index]
        return Prompt(
            task=self.name,
            split=split,
            index=int(index),
            text=self.config.prompt_template.format(question=question),
            answers=(answer,),
        )

    def prompts(self, split: str, seed: int = 0) -> Iterator[Prompt]:
        for index in range(self.num_prompts(split, seed)):
            yield self.prompt(split, seed, index)

    def reference(self, prompt: Prompt) -> str:
        return prompt.answers[0]

    def correct_answers(self, prompt: Prompt) -> None:
        return None

    def sft_target(self, prompt: Prompt, rng: np.random.Generator) -> str:
        return prompt.answers[0]

    def reward(self, prompt: Prompt, completion_text: str) -> float:
        return self.rewards([prompt], [completion_text])[0]

    def rewards(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> list[float]:
        """Scores of completion i against prompts[i], as one batch (see the module docstring)."""
        if len(prompts) != len(completions):
            raise CatsimError(f"{len(prompts)} prompts for {len(completions)} completions")
        scores = [0.0] * len(completions)
        pending: list[int] = []
        for i, (prompt, completion) in enumerate(zip(prompts, completions)):
            text = clean_completion(completion, self.config.max_completion_chars)
            if not text:
                continue
            if normalise_answer(final_answer(text)) == normalise_answer(prompt.answers[0]):
                scores[i] = 1.0
            elif self.config.checker == "math-verify":
                pending.append(i)
        if pending:
            cfg = self.config
            batch = _math_verify_pool(cfg).map(
                [(_as_latex(prompts[i].answers[0]), completions[i].strip(), cfg.timeout_seconds)
                 for i in pending], cfg.batch_budget_seconds)
            for i, answer in zip(pending, batch.values):
                scores[i] = 1.0 if answer is True else 0.0  # TIMED_OUT, UNSCORED, IsolatedError: wrong
            self.unscored.add(batch.unscored)
        return scores

    def take_unscored(self) -> int:
        """Completions left unverified by the batch budget since the last call (and reset)."""
        return self.unscored.take()


class _Counter:
    """A thread-safe running count, read and reset by `take`."""

    def __init__(self) -> None:
        self._n, self._lock = 0, threading.Lock()

    def add(self, n: int) -> None:
        with self._lock:
            self._n += int(n)

    def take(self) -> int:
        with self._lock:
            n, self._n = self._n, 0
        return n


def _math_verify_pool(cfg: MathFileConfig) -> IsolatedPool:
    """One pool per worker settings; a check's hard deadline covers the three stages plus slack."""
    key = (cfg.timeout_seconds, cfg.verify_workers, cfg.worker_max_calls, cfg.worker_rss_mb,
           cfg.worker_address_space_mb)
    with _POOLS_LOCK:
        if key not in _POOLS:
            _POOLS[key] = IsolatedPool(MATH_VERIFY_TARGET, deadline=3 * cfg.timeout_seconds + 2.0,
                                       workers=cfg.verify_workers, max_calls=cfg.worker_max_calls,
                                       max_rss_bytes=cfg.worker_rss_mb << 20,
                                       address_space_bytes=cfg.worker_address_space_mb << 20)
        return _POOLS[key]


MATH_VERIFY_TARGET = "catsim.llm.tasks.math_file:math_verify_match"  # what the workers run
_POOLS: dict[tuple, IsolatedPool] = {}
_POOLS_LOCK = threading.Lock()


def math_verify_match(gold_latex: str, text: str, timeout_seconds: int) -> bool:
    """math-verify's verdict on `text` against the gold answer; runs inside the worker process.

    Each stage (parse gold, parse prediction, compare) has math-verify's own signal time limit (the
    worker calls this from its main thread); the parent's hard deadline covers what signals cannot
    interrupt. Any failure on untrusted text is a wrong answer.
    """
    mv = _math_verify()
    try:
        gold = mv.parse(gold_latex, parsing_timeout=timeout_seconds)
        pred = mv.parse(text, parsing_timeout=timeout_seconds)
        return bool(gold and pred and mv.verify(gold, pred, timeout_seconds=timeout_seconds))
    except Exception:  # noqa: BLE001 - untrusted text: any verifier failure scores 0
        return False


def _as_latex(reference: str) -> str:
    """References are often bare ("3/4"); wrap them so math-verify's LaTeX extraction sees them."""
    return reference if "$" in reference or "\\boxed" in reference else f"${reference}$"


def _records_cached(path: str, qf: str, af: str) -> list[tuple[str, str]]:
    p = Path(path)
    mtime = p.stat().st_mtime_ns if p.is_file() else 0
    return _load_cached(str(p.resolve()), mtime, qf, af)


@functools.lru_cache(maxsize=8)
def _load_cached(path: str, mtime_ns: int, qf: str, af: str) -> list[tuple[str, str]]:
    return load_records(path, qf, af)
