"""After `catsim reproduce`: compare what it regenerated with the published numbers.

`load_published` reads the published numbers before the run (figures/reference/*.json, and in a
full run the published Fig. 2 table and LLM results); after it, `check_reproduction` reads or
recomputes the regenerated ones, prints the agreement table (`catsim.experiments.agreement`) with
its summary line, and with --write-references makes this run the published one. What produced
each published step is recorded with it (`catsim.experiments.provenance`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from catsim.errors import CatsimError
from catsim.experiments.agreement import (
    Published,
    compare,
    format_table,
    load_reference,
    read_json,
    reference_provenance,
    summary,
    unpublished,
    write_json,
    write_reference,
)

# Where each step's regenerated output lies under --runs ({quick: path}); lemma and mass numbers
# are recomputed (closed forms and a seeded Monte Carlo, seconds).
RUN_OUTPUTS = {
    "sim": {True: "sim-quick/fig2_table.txt", False: "sim-full/fig2_table.txt"},
    "llm": {True: "llm-quick/results.json", False: "llm-default/results.json"},
}
# The published full-run outputs, relative to the published figures/ directory.
PUBLISHED_FULL = {"sim": "fig2_paper_table.txt", "llm": "llm-rl/results.json"}
THEORY_REFERENCE = "reference/theory.json"  # lemma and mass (the same in both modes)
QUICK_REFERENCE = "reference/quick.json"  # sim and llm of `catsim reproduce --quick`
THEORY_STEPS = ("lemma", "mass")


def published_dir() -> Path | None:
    """The published figures/ of the source checkout this package runs from, if there is one."""
    path = Path(__file__).resolve().parents[2] / "figures"
    return path if path.is_dir() else None


@dataclass(frozen=True)
class PublishedNumbers:
    """The published numbers a reproduction is checked against, read before it runs (so that a
    step writing into figures/ cannot change them, and a malformed file stops it before any work).
    """

    pub: Path | None  # the published figures/ directory (None: not a source checkout)
    quick: bool  # `catsim reproduce --quick` (quick references) or the full run
    numbers: dict[str, dict[str, Published]]  # {step: {quantity: Published}}
    records: dict[str, dict | None]  # {step: provenance record of the published numbers}
    notes: list[str]  # steps without published numbers
    # provenance of this checkout and machine, taken before the run: a step that writes into
    # figures/ (the LLM report and plots) must not make the record of a clean checkout "+dirty"
    here: dict | None = None


def load_published(quick: bool, steps: Iterable[str], *, pub: Path | None = None,
                   writing: bool = False) -> PublishedNumbers:
    """Read the published numbers of `steps` from `pub` (default `published_dir()`); with
    `writing` (--write-references) a missing published directory is an error."""
    from catsim.experiments import published as src

    pub = published_dir() if pub is None else Path(pub)
    if pub is None:
        if writing:
            raise CatsimError("--write-references needs a source checkout (figures/ next to catsim/)")
        return PublishedNumbers(None, quick, {}, {}, [])
    refs: dict[str, dict[str, Published]] = {}
    records: dict[str, dict | None] = {}
    for ref in (THEORY_REFERENCE, QUICK_REFERENCE if quick else None):
        if ref is not None and (pub / ref).exists():
            refs.update(load_reference(pub / ref))
            records.update(reference_provenance(pub / ref))
    from catsim.experiments import provenance

    here = provenance.collect()
    numbers: dict[str, dict[str, Published]] = {}
    notes = []
    for step in steps:
        path = pub / PUBLISHED_FULL.get(step, "-")
        if step in refs and (step in THEORY_STEPS or quick):
            numbers[step] = refs[step]
        elif step in PUBLISHED_FULL and not quick and path.exists():
            if step == "sim":
                numbers[step] = src.fig2_published(path.read_text())
                sidecar = path.with_name(path.stem + "_provenance.json")
                records[step] = read_json(sidecar) if sidecar.exists() else None
            else:
                results = read_json(path)
                numbers[step] = src.llm_published(results)
                records[step] = results.get("provenance")
        elif step in THEORY_STEPS or step in RUN_OUTPUTS:
            notes.append(f"{step}: no published numbers in {pub}")
    return PublishedNumbers(pub, quick, numbers, records, notes, here)


def regenerated_numbers(runs: Path, quick: bool, steps: Iterable[str]
                        ) -> tuple[dict[str, dict[str, float]], list[str]]:
    """({step: {quantity: value}}, notes on steps whose output is missing)."""
    from catsim.experiments import published as src

    out: dict[str, dict[str, float]] = {}
    notes = []
    for step in steps:
        if step == "lemma":
            out[step] = src.lemma_values()
        elif step == "mass":
            out[step] = src.mass_values()
        elif step in RUN_OUTPUTS:
            path = runs / RUN_OUTPUTS[step][quick]
            if not path.exists():
                notes.append(f"{step}: {path} not found")
                out[step] = {}
            else:
                out[step] = (src.fig2_values(path.read_text()) if step == "sim"
                             else src.llm_values(read_json(path)))
    return out, notes


def _publish(pub: Path, runs: Path, quick: bool, now: Mapping[str, Mapping[str, float]],
             log, record: dict | None = None) -> None:
    """Make this run's numbers the published ones (`catsim reproduce --write-references`).
    record: the provenance taken before the run (default: now)."""
    from catsim.experiments import provenance
    from catsim.experiments import published as src
    from catsim.files import copy_file

    if record is None:
        record = provenance.collect()
    theory = {s: src.theory_published(now[s]) for s in THEORY_STEPS if s in now}
    if theory:
        write_reference(pub / THEORY_REFERENCE, theory, "Lemma 3.1 peaks and mass-step numbers",
                        record)
        log(f"wrote {pub / THEORY_REFERENCE}")
    runs_steps = [s for s in RUN_OUTPUTS if s in now and now[s]]
    if quick and runs_steps:
        full_table = pub / PUBLISHED_FULL["sim"]
        spread = full_table.read_text() if full_table.exists() else None
        steps = {}
        for step in runs_steps:
            path = runs / RUN_OUTPUTS[step][True]
            steps[step] = (src.fig2_published(path.read_text(), spread_from=spread) if step == "sim"
                           else src.llm_published(read_json(path)))
        write_reference(pub / QUICK_REFERENCE, steps, "catsim reproduce --quick", record)
        log(f"wrote {pub / QUICK_REFERENCE}")
    elif runs_steps:
        for step in runs_steps:
            source, target = runs / RUN_OUTPUTS[step][False], pub / PUBLISHED_FULL[step]
            if step == "llm":
                write_json(target, {**read_json(source), "provenance": record})
            else:
                copy_file(source, target)
                write_json(target.with_name(target.stem + "_provenance.json"), record)
            log(f"wrote {target}")


def check_reproduction(published: PublishedNumbers, runs: Path | str, steps: Iterable[str], *,
                       strict: bool = False, write: bool = False, log=print) -> int:
    """Compare what `catsim reproduce` regenerated (`steps` that ran, outputs under `runs`) with
    `published`; print the agreement table and its summary line. With `write`, then make this
    run's numbers the published ones. Returns 1 when `strict` and a number disagrees or is
    missing (or nothing could be compared), else 0."""
    pub, quick = published.pub, published.quick
    runs, steps = Path(runs), list(steps)
    if pub is None:
        log("agreement: no published figures/ next to the catsim package (a source checkout has "
            "them): not checked")
        return 1 if strict else 0
    expected = {s: published.numbers[s] for s in steps if s in published.numbers}
    now, missing = regenerated_numbers(runs, quick, steps)
    rows = [row for step, numbers in expected.items() for row in compare(numbers, now[step])]
    extra = sum(len(unpublished(expected[s], now[s])) for s in expected)
    log(f"== agreement with the published numbers in {pub} ({'quick' if quick else 'full'} run)")
    if rows:
        log(format_table(rows))
    for note in [n for n in published.notes if n.split(":")[0] in steps] + missing:
        log(f"note: {note}")
    if extra:
        log(f"note: {extra} regenerated numbers have no published value (not compared)")
    _log_provenance(expected, published.records, log, published.here)
    identical = sum(r.identical for r in rows)
    log(f"{summary(rows)} ({identical} identical to the published digits)")
    if write:
        _publish(pub, runs, quick, now, log, published.here)
    failed = not rows or any(not r.agrees for r in rows)
    return 1 if strict and failed else 0


def _log_provenance(expected: Mapping, records: Mapping[str, dict | None], log,
                    here: dict | None = None) -> None:
    """Say whether bit-identical numbers can be expected: which determining fields differ."""
    from catsim.experiments import provenance

    here = provenance.collect() if here is None else here
    for step in expected:
        diff = provenance.differences(records.get(step), here)
        setup = [d for d in diff if not d.startswith("git_commit:")]
        if setup:
            log(f"note: {step} published on another set-up ({'; '.join(setup)}): "
                "agreement within tolerance, not identity, is expected")
        elif diff:
            log(f"note: {step} published from another commit ({diff[0]})")
