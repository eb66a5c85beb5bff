"""The trainer's options are described once, on their dataclass fields: `option(default, help)`
keeps a field's CLI help (and its flat name, where it differs from the field's) in the field's
metadata, and `flat_table` builds the flat-name table (`catsim.llm.rl.config.FLAT`) from it."""

from __future__ import annotations

import dataclasses


def option(default, help: str, *, flag: str | None = None):
    """A config field with its help text (the CLI's) and, if not the field name, its flat name."""
    return dataclasses.field(default=default, metadata={"help": help, "flag": flag})


def flat_table(sections: dict) -> dict[str, tuple[str | None, str, str]]:
    """{flat name: (section, field, help)} of every `option` field of `sections`, a mapping of
    section name (None for the top level) to its dataclass, in the mapping's order."""
    table = {}
    for section, cls in sections.items():
        for f in dataclasses.fields(cls):
            if "help" in f.metadata:
                table[f.metadata["flag"] or f.name] = (section, f.name, f.metadata["help"])
    return table
