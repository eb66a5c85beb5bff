"""Checks run by `catsim verify`.

Every module in this package that defines `run(quick: bool) -> Iterable[CheckResult]`
contributes checks; `collect` discovers them, so a new theory result adds its checks by adding
a module here. A check compares a computed quantity against an independent reference (SymPy,
mpmath, enumeration, Monte Carlo) and reports the worst error it saw against its tolerance.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class CheckResult:
    """One verified claim.

    name: what was checked, readable in a table.
    max_error: the worst error observed (absolute or relative, as `kind` says).
    tolerance: the largest error accepted.
    kind: "abs", "rel", "z" (Monte Carlo z-score) or "exact" (0 means identical).
    """

    name: str
    max_error: float
    tolerance: float
    kind: str = "rel"

    @property
    def passed(self) -> bool:
        return bool(self.max_error <= self.tolerance)


def collect(quick: bool = False) -> Iterator[CheckResult]:
    """Run every check module in this package, in name order."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        run = getattr(module, "run", None)
        if run is not None:
            yield from run(quick)
