"""Does a reproduction agree with the published numbers?

Every published number is a `Published`: its value, the tolerance within which a regenerated
value counts as the same result, and the basis of that tolerance. `compare` pairs published and
regenerated numbers into `Row`s; `format_table` and `summary` print them.

Tolerances (docs/reproducibility.md):
- closed forms (Lemma 3.1 peaks, the mass-step worked examples): relative `EXACT_REL` (float64
  rounding; integers exactly);
- a mean over n seeds with sample standard deviation s (Fig. 2 table): a rerun on another CPU
  follows other sampling paths, so its mean is another draw: the difference has standard error
  s·sqrt(2/n), and the tolerance is the two-sided (1 − ALPHA) quantile of Student's t with n − 1
  degrees of freedom times that, plus the rounding of the two printed values; a one-seed run
  takes s from the published multi-seed table for the same cell;
- a pass@k or answer mass (LLM pipeline): the normal (1 − ALPHA) quantile times sqrt(2) times the
  larger of the seed-spread and the prompt-bootstrap standard error of the published value;
- a Monte Carlo share over G groups: the normal quantile times sqrt(2) times the binomial
  standard error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from catsim.errors import CatsimError
from catsim.files import write_text

ALPHA = 1e-3  # two-sided false-alarm rate of one comparison when the rerun is an independent draw
EXACT_REL = 1e-12  # closed forms: float64 rounding, amplified by root finding at most ~1e3-fold
BOOTSTRAP_CONFIDENCE = 0.95  # the level of the published bootstrap intervals (catsim.llm.metrics)


@dataclass(frozen=True)
class Published:
    """One published number and the tolerance a regenerated value must meet."""

    value: float
    tolerance: float  # |now - value| <= tolerance agrees
    basis: str  # how the tolerance was found, shown in the table

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping) -> Published:
        try:
            return cls(float(data["value"]), float(data["tolerance"]), str(data["basis"]))
        except (KeyError, TypeError, ValueError) as err:
            raise CatsimError(f"malformed published entry {dict(data)!r}: {err}") from None


@dataclass(frozen=True)
class Row:
    """One line of the agreement table; `now` is None when the rerun did not produce the number."""

    quantity: str
    published: float
    now: float | None
    tolerance: float
    basis: str

    @property
    def difference(self) -> float | None:
        return None if self.now is None else self.now - self.published

    @property
    def agrees(self) -> bool:
        diff = self.difference
        return diff is not None and math.isfinite(diff) and abs(diff) <= self.tolerance

    @property
    def identical(self) -> bool:
        return self.now is not None and self.now == self.published


def compare(published: Mapping[str, Published], now: Mapping[str, float]) -> list[Row]:
    """One Row per published quantity, in the published order; regenerated numbers that were
    never published are not rows (see `unpublished`)."""
    return [Row(name, p.value, None if now.get(name) is None else float(now[name]), p.tolerance,
                p.basis) for name, p in published.items()]


def unpublished(published: Mapping[str, Published], now: Mapping[str, float]) -> list[str]:
    """Regenerated quantities that have no published value."""
    return [name for name in now if name not in published]


# ---- tolerances -------------------------------------------------------------------------------


def _normal_quantile() -> float:
    from scipy import stats

    return float(stats.norm.ppf(1 - ALPHA / 2))


def exact(value: float, basis: str = "closed form") -> Published:
    """A closed-form number: integers exactly, floats to EXACT_REL relative."""
    value = float(value)
    tol = 0.0 if value.is_integer() and abs(value) < 2**53 else EXACT_REL * abs(value)
    return Published(value, tol, f"{basis}, rel {EXACT_REL:g}" if tol else f"{basis}, exact")


def seed_mean(value: float, sd: float, n: int, *, rounding: float = 0.0, sd_of: int | None = None
              ) -> Published:
    """A mean over n seeds whose seeds have sample standard deviation `sd` (estimated from
    `sd_of` seeds, default n); `rounding` is half a unit of the last printed digit."""
    sd_of = n if sd_of is None else sd_of
    if sd_of < 2:
        return Published(value, 2 * rounding, "printed digits (no seed spread)")
    from scipy import stats

    q = float(stats.t.ppf(1 - ALPHA / 2, sd_of - 1))
    sd = max(sd, rounding)  # a printed 0.00000 is an sd below half the last digit
    tol = q * sd * math.sqrt(2 / n) + 2 * rounding
    return Published(value, tol, f"t({sd_of - 1}) {q:.3g} × sd {sd:.2g} × √(2/{n})")


def standard_error(value: float, se: float, basis: str) -> Published:
    """A number with a normal standard error `se`: tolerance z · √2 · se."""
    z = _normal_quantile()
    return Published(value, z * math.sqrt(2) * se, f"{z:.3g} × √2 × se {se:.2g} ({basis})")


# ---- the table --------------------------------------------------------------------------------


def _num(x: float | None) -> str:
    if x is None:
        return "missing"
    if x == 0 or 1e-4 <= abs(x) < 1e6:
        return f"{x:.6g}"
    return f"{x:.4g}"


def format_table(rows: Iterable[Row]) -> str:
    """quantity | published | now | tolerance | agrees | basis of the tolerance."""
    header = ("quantity", "published", "now", "tolerance", "agrees", "basis of the tolerance")
    cells = [(r.quantity, _num(r.published), _num(r.now), f"{r.tolerance:.2g}",
              ("yes" if r.identical else "yes (≈)") if r.agrees else "NO", r.basis) for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h)
              for i, h in enumerate(header)]

    def line(parts) -> str:
        return "  ".join(parts).rstrip()

    out = [line(h.ljust(w) if i in (0, 5) else h.rjust(w)
                for i, (h, w) in enumerate(zip(header, widths)))]
    out += [line(c.ljust(w) if i in (0, 5) else c.rjust(w)
                 for i, (c, w) in enumerate(zip(cell, widths))) for cell in cells]
    return "\n".join(out)


def summary(rows: list[Row]) -> str:
    agree = sum(r.agrees for r in rows)
    return f"{agree} of {len(rows)} published numbers agree within tolerance"


# ---- files ------------------------------------------------------------------------------------


def write_json(path: Path, data: Mapping) -> None:
    """Write `data` as JSON atomically (temp file + rename)."""
    write_text(path, json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except OSError as err:
        raise CatsimError(f"cannot read {path}: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise CatsimError(f"{path} is not valid JSON: {err}") from None


def load_reference(path: Path) -> dict[str, dict[str, Published]]:
    """A reference file's published numbers, per step: {step: {quantity: Published}}."""
    return {step: {name: Published.from_json(entry) for name, entry in block["quantities"].items()}
            for step, block in _reference_steps(path).items()}


def reference_provenance(path: Path) -> dict[str, dict]:
    """What produced each step of a reference file: {step: provenance record}."""
    return {step: block.get("provenance") for step, block in _reference_steps(path).items()}


def _reference_steps(path: Path) -> dict[str, dict]:
    steps = read_json(path).get("steps")
    if not isinstance(steps, dict) or not all(
            isinstance(b, dict) and isinstance(b.get("quantities"), dict) for b in steps.values()):
        raise CatsimError(f"{path}: not a catsim reference file (no steps/<step>/quantities)")
    return steps


def write_reference(path: Path, steps: Mapping[str, Mapping[str, Published]], what: str,
                    record: Mapping | None = None) -> None:
    """Write (merge into) a reference file: the given steps replace theirs, with `record`, what
    produced them (default `provenance.collect()`); steps not given are kept as they were."""
    from catsim.experiments import provenance

    path = Path(path)
    record = provenance.collect() if record is None else dict(record)
    blocks = _reference_steps(path) if path.exists() else {}
    for step, quantities in steps.items():
        blocks[step] = {"provenance": record,
                        "quantities": {name: p.to_json() for name, p in quantities.items()}}
    write_json(path, {"what": what, "steps": blocks})

