"""Progress of a long run on stderr: a bar on a terminal, plain lines when stderr is a file.

    with progress_bar(500, "rl", mode, unit="step") as bar:
        for step in range(500):
            ...
            bar.set_postfix(reward=f"{reward:.3f}")  # the fields of the step just done
            bar.update(1)

`mode` is the CLI's `--progress/--no-progress`: False shows nothing; True and None (automatic) draw
a tqdm bar where one can be drawn (a terminal, a notebook) and otherwise write plain lines, so a run
whose output goes to a file still says how far it is:

    rl: 120/500 steps (24%), 01:02 elapsed, 03:17 left, reward=0.610 active=0.50

A line is written when the work passes the next 5% of the total (at most one line per 5 s), after
30 s without one, and at the end. A short command (`long=False`: one that prints results others
read from a pipe) stays silent in automatic mode when stderr is not a terminal; `--progress` still
gives it the lines.

`RL_FIELDS` and `SFT_FIELDS` name the fields the trainers' progress shows (their --help lists them).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping

STEP_FRACTION = 0.05  # a plain line each time the work passes another 5% of the total ...
MIN_SECONDS = 5.0  # ... but not more often than this
EVERY_SECONDS = 30.0  # and at least this often while the work advances

# the trainers' progress fields, each one of the step log's metrics (`catsim.llm.rl.STEP_METRICS`)
RL_FIELDS = {
    "reward": "mean verifier score of the step's rollouts (rl_log.jsonl: reward)",
    "active": "share of the step's groups whose rewards are not all equal, the groups that carry a "
              "learning signal (active_fraction)",
    "pred": "the active share Lemma 3.1 predicts from the step's mean success rate μ̄: "
            "1−μ̄^N−(1−μ̄)^N (active_pred_pooled)",
    "H": "token-mean policy entropy over the response tokens, nats (entropy)",
    "len": "mean generated tokens per rollout (response_length)",
}
SFT_FIELDS = {
    "loss": "the warm-up step's cross-entropy on the answer tokens (train_log.jsonl: loss)",
    "acc": "the warm-up step's share of answer tokens the model predicts right (token_accuracy)",
}


def fields_help(*field_sets: Mapping[str, str]) -> str:
    """The --help paragraph (a command's epilog) that names each field its progress shows."""
    import textwrap

    fields = {name: text for fields in field_sets for name, text in fields.items()}
    width = max(map(len, fields))
    lines = ["progress fields (stderr: a bar on a terminal; otherwise a plain line every 5% of the run or",
             "30 s, e.g. `rl: 120/500 steps (24%), 01:02 elapsed, 03:17 left, reward=0.610 ...`):"]
    for name, text in fields.items():
        lines += textwrap.wrap(text, 96, initial_indent=f"  {name:<{width}}  ",
                               subsequent_indent=" " * (width + 4))
    return "\n".join(lines)


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _in_notebook() -> bool:
    """Whether this process is a Jupyter kernel's (an imported ipykernel alone is not: a test
    runner or a library may import it without being a notebook)."""
    ipython = sys.modules.get("IPython")
    try:
        shell = ipython.get_ipython() if ipython is not None else None
    except Exception:  # an IPython that cannot say
        return False
    return type(shell).__name__ == "ZMQInteractiveShell"


def draws_bars(stream=None) -> bool:
    """Whether a redrawn bar can be shown on `stream` (default stderr): a terminal or a notebook."""
    return _isatty(sys.stderr if stream is None else stream) or _in_notebook()


def progress_bar(total: int | None, desc: str | None = None, mode: bool | None = None, *, unit: str = "it",
                 unit_scale: bool = False, initial: int = 0, leave: bool = True, long: bool = True,
                 clock: Callable[[], float] = time.monotonic):
    """A progress display on stderr with tqdm's `update`, `set_postfix`, `write`, `close` and `with`.

    total: the amount of work (None: unknown; plain lines then come by time only). desc: its name.
    mode: True, False or None (automatic; see the module docstring). unit, unit_scale, initial,
    leave: as tqdm's (a resumed run starts at `initial`). long: whether automatic mode writes plain
    lines when stderr is not a terminal. clock: seconds (the tests' stand-in for time).
    """
    from tqdm.auto import tqdm

    stream = sys.stderr
    bars = draws_bars(stream)
    if mode is False or (mode is None and not long and not bars):
        return tqdm(total=total, disable=True)
    if bars:
        return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit_scale, initial=initial, leave=leave,
                    file=stream, dynamic_ncols=True, smoothing=0.1)
    return PlainProgress(total, desc, unit=unit, unit_scale=unit_scale, initial=initial, clock=clock)


class PlainProgress:
    """Progress as plain lines on stderr (see the module docstring); tqdm's interface, in part."""

    def __init__(self, total: int | None, desc: str | None = None, *, unit: str = "it",
                 unit_scale: bool = False, initial: int = 0, clock: Callable[[], float] = time.monotonic):
        self.total, self.desc, self.unit, self.unit_scale = total, desc, unit, unit_scale
        self.n = self._shown = self._initial = initial
        self._clock = clock
        self._start = self._last = clock()
        self._every = max(1, math.ceil(total * STEP_FRACTION)) if total else None
        self._postfix = ""

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self._clock()
        passed = self._every is not None and self.n // self._every > self._shown // self._every
        done = self.total is not None and self.n >= self.total
        if done or (passed and now - self._last >= MIN_SECONDS) or now - self._last >= EVERY_SECONDS:
            self._line(now)

    def set_postfix(self, ordered_dict=None, refresh: bool = True, **fields) -> None:
        fields = {**(ordered_dict or {}), **fields}
        self._postfix = " ".join(f"{k}={v}" for k, v in fields.items())

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        self.desc = desc

    @staticmethod
    def write(text: str, file=None, end: str = "\n") -> None:
        print(text, file=sys.stderr if file is None else file, end=end, flush=True)

    def close(self) -> None:
        if self.n != self._shown:  # the last line says where the work stopped
            self._line(self._clock())

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _count(self, n: float) -> str:
        if self.unit_scale:
            from tqdm import tqdm

            return tqdm.format_sizeof(n)
        return f"{n:,}"

    def _line(self, now: float) -> None:
        from tqdm import tqdm

        unit = self.unit if self.unit.endswith("s") else self.unit + "s"
        done = self._count(self.n) + (f"/{self._count(self.total)}" if self.total else "")
        parts = [f"{done} {unit}" + (f" ({100 * self.n / self.total:.0f}%)" if self.total else "")]
        elapsed = now - self._start
        parts.append(f"{tqdm.format_interval(elapsed)} elapsed")
        if self.total and self.n < self.total and self.n > self._initial and elapsed > 0:
            left = (self.total - self.n) * elapsed / (self.n - self._initial)
            parts.append(f"{tqdm.format_interval(left)} left")
        if self._postfix:
            parts.append(self._postfix)
        prefix = f"{self.desc}: " if self.desc else ""
        print(prefix + ", ".join(parts), file=sys.stderr, flush=True)
        self._shown, self._last = self.n, now
