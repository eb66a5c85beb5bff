"""After `catsim reproduce`: compare what it regenerated with the published numbers.

`check_reproduction` reads the published numbers (figures/reference/*.json, and in a full run the
published Fig. 2 table and LLM results), reads or recomputes the regenerated ones, prints the
agreement table (`catsim.experiments.agreement`) with its summary line, and with
--write-references makes this run the published one. What produced each published step is
recorded with it (`catsim.experiments.provenance`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

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


def published_numbers(pub: Path, quick: bool, steps: Iterable[str]
                      ) -> tuple[dict[str, dict[str, Published]], list[str]]:
    """({step: {quantity: Published}}, notes on steps without published numbers)."""
    from catsim.experiments import published as src

    steps = list(steps)
    out: dict[str, dict[str, Published]] = {}
    notes = []
    refs: dict[str, dict[str, Published]] = {}
    for ref in (THEORY_REFERENCE, QUICK_REFERENCE if quick else None):
        if ref is not None and (pub / ref).exists():
            refs.update(load_reference(pub / ref))
    for step in steps:
        if step in refs and (step in THEORY_STEPS or quick):
            out[step] = refs[step]
        elif step in PUBLISHED_FULL and not quick and (pub / PUBLISHED_FULL[step]).exists():
            path = pub / PUBLISHED_FULL[step]
            out[step] = (src.fig2_published(path.read_text()) if step == "sim"
                         else src.llm_published(read_json(path)))
        elif step in THEORY_STEPS or step in RUN_OUTPUTS:
            notes.append(f"{step}: no published numbers in {pub}")
    return out, notes


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
             log) -> None:
    """Make this run's numbers the published ones (`catsim reproduce --write-references`)."""
    import shutil

    from catsim.experiments import provenance
    from catsim.experiments import published as src

    record = provenance.collect()  # before writing: the files written here do not make it dirty
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
                shutil.copyfile(source, target)
                write_json(target.with_name(target.stem + "_provenance.json"), record)
            log(f"wrote {target}")


def check_reproduction(runs: Path | str, *, quick: bool, steps: Iterable[str], strict: bool = False,
                       write: bool = False, pub: Path | None = None, log=print) -> int:
    """Compare what `catsim reproduce` regenerated (`steps` that ran, outputs under `runs`) with
    the published numbers; print the agreement table and its summary line. With `write`, then
    make this run's numbers the published ones. Returns 1 when `strict` and a number disagrees
    or is missing (or nothing could be compared), else 0."""
    pub = published_dir() if pub is None else Path(pub)
    runs, steps = Path(runs), list(steps)
    if pub is None:
        log("agreement: no published figures/ next to the catsim package (a source checkout has "
            "them): not checked")
        return 1 if strict else 0
    published, notes = published_numbers(pub, quick, steps)
    now, more = regenerated_numbers(runs, quick, steps)
    rows = [row for step in steps if step in published for row in compare(published[step], now.get(step, {}))]
    extra = sum(len(unpublished(published.get(s, {}), now[s])) for s in now if s in published)
    log(f"== agreement with the published numbers in {pub} ({'quick' if quick else 'full'} run)")
    if rows:
        log(format_table(rows))
    for note in notes + more:
        log(f"note: {note}")
    if extra:
        log(f"note: {extra} regenerated numbers have no published value (not compared)")
    _log_provenance(pub, quick, published, log)
    identical = sum(r.identical for r in rows)
    log(f"{summary(rows)} ({identical} identical to the published digits)")
    if write:
        _publish(pub, runs, quick, now, log)
    failed = not rows or any(not r.agrees for r in rows)
    return 1 if strict and failed else 0


def published_provenance(pub: Path, quick: bool) -> dict[str, dict | None]:
    """What produced each step's published numbers, where that was recorded."""
    records: dict[str, dict | None] = {}
    for ref in (THEORY_REFERENCE, QUICK_REFERENCE if quick else None):
        if ref is not None and (pub / ref).exists():
            records.update(reference_provenance(pub / ref))
    if not quick:
        table = pub / PUBLISHED_FULL["sim"]
        sidecar = table.with_name(table.stem + "_provenance.json")
        records["sim"] = read_json(sidecar) if sidecar.exists() else None
        results = pub / PUBLISHED_FULL["llm"]
        records["llm"] = read_json(results).get("provenance") if results.exists() else None
    return records


def _log_provenance(pub: Path, quick: bool, published: Mapping, log) -> None:
    """Say whether bit-identical numbers can be expected: which determining fields differ."""
    from catsim.experiments import provenance

    records = published_provenance(pub, quick)
    here = provenance.collect()
    for step in published:
        diff = provenance.differences(records.get(step), here)
        setup = [d for d in diff if not d.startswith("git_commit:")]
        if setup:
            log(f"note: {step} published on another set-up ({'; '.join(setup)}): "
                "agreement within tolerance, not identity, is expected")
        elif diff:
            log(f"note: {step} published from another commit ({diff[0]})")
