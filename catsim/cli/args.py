"""Parsing of the CLI's list and range arguments.

Grammar of a list argument (e.g. `--n`, `--tau`): comma-separated items, each
  - a number: `8`, `1e-3`, `0.5`, or a power of two `2^17`
  - an inclusive arithmetic range `start:stop[:step]` (step 1 by default): `1:512`, `0.1:0.5:0.1`
  - a power-of-two range `2^a:2^b` (every power in between): `2^0:2^17`
"""

from __future__ import annotations

import argparse
import math
import sys

from catsim.errors import CatsimError


def show_progress(choice: bool | None = None) -> bool:
    """Whether a command draws progress bars: `choice` when given (--progress / --no-progress), else only
    when stderr is a terminal, so piped or logged output stays free of bar redraws."""
    if choice is not None:
        return bool(choice)
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def _number(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise CatsimError(f"{name}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise CatsimError(f"{name}: {text!r} is not a finite number")
    return value


MAX_ITEMS = 100_000  # a list longer than this is a typo (e.g. 1:1e9), not a plan
MAX_POWER = 62  # 2^a:2^b ranges stop at 2^62 (whole numbers exact in int64)


def _power_of_two(text: str, name: str) -> float:
    """`2^a` -> 2.0**a for a whole a in [−MAX_POWER, MAX_POWER] (CatsimError otherwise)."""
    try:
        power = float(text.strip()[2:])
    except ValueError:
        power = math.nan
    if not math.isfinite(power) or power != int(power):
        raise CatsimError(f"{name}: bad power of two {text.strip()!r} (want 2^a, a whole number)")
    if abs(power) > MAX_POWER:
        raise CatsimError(f"{name}: power of two {text.strip()!r} goes beyond 2^±{MAX_POWER}")
    return float(2.0 ** int(power))


def positive_int(text: str) -> int:
    """argparse type of a count that must be at least 1 (e.g. --cpu-devices): 0 or less is refused,
    not quietly read as 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"want a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"want a whole number >= 1, got {text!r}")
    return value


def _check_count(values: list[float], extra: float, name: str, text: str) -> None:
    if len(values) + extra > MAX_ITEMS:
        raise CatsimError(f"{name}: {text!r} expands to more than {MAX_ITEMS:,} values")


def parse_float_list(text: str, name: str) -> list[float]:
    """Parse a comma list of numbers and ranges (see module docstring) into floats; at most
    `MAX_ITEMS` values, powers of two up to 2^`MAX_POWER`."""
    items = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise CatsimError(f"{name}: empty value in {text!r}")
    values: list[float] = []
    for item in items:
        if ":" not in item:
            _check_count(values, 1, name, text)
            values.append(_power_of_two(item, name) if item.startswith("2^") else _number(item, name))
            continue
        parts = item.split(":")
        if len(parts) == 2 and all(p.strip().startswith("2^") for p in parts):
            lo, hi = (_number(p.strip()[2:], name) for p in parts)
            if lo != int(lo) or hi != int(hi) or hi < lo:
                raise CatsimError(f"{name}: bad power-of-two range {item!r} (want 2^a:2^b, a <= b)")
            if lo < -MAX_POWER or hi > MAX_POWER:
                raise CatsimError(f"{name}: power-of-two range {item!r} goes beyond 2^±{MAX_POWER}")
            _check_count(values, hi - lo + 1, name, text)
            values.extend(float(2 ** k) for k in range(int(lo), int(hi) + 1))
            continue
        if len(parts) not in (2, 3):
            raise CatsimError(f"{name}: bad range {item!r} (want start:stop[:step])")
        start, stop = _number(parts[0], name), _number(parts[1], name)
        step = _number(parts[2], name) if len(parts) == 3 else 1.0
        if step <= 0 or stop < start:
            raise CatsimError(f"{name}: bad range {item!r} (want start <= stop, step > 0)")
        count = int(math.floor((stop - start) / step + 1e-9)) + 1
        _check_count(values, count, name, text)
        values.extend(start + k * step for k in range(count))
    return values


def parse_int_list(text: str, name: str) -> list[int]:
    """Parse like `parse_float_list` and require whole numbers."""
    values = parse_float_list(text, name)
    for value in values:
        if value != int(value):
            raise CatsimError(f"{name}: {value:g} is not a whole number")
    return [int(v) for v in values]
