"""The CLI's one vocabulary: a flag per concept, spelled the same in every command.

    --progress / --no-progress   progress on stderr (default: automatic)
    --format {table,csv,json}    how a table or records are printed (table: the human one)
    --group-size                 group size N (a comma list where a command takes several)
    --samples                    samples per prompt of a model being measured
    --lr                         learning rate
    --chat-template              wrap prompts in the tokenizer's chat template
    --method                     the update rule, f-grpo / f-dapo / f-cispo included

An older spelling stays as a hidden alias (`alias`): it still works and prints one line on stderr,
`catsim <cmd>: --old is deprecated; use --new`. `suggestion` gives the "did you mean" of a mistyped
flag or command.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys

FORMATS = ("table", "csv", "json")
_OLD_FORMATS = {"text": "table"}  # an older --format value -> its name now


class _Formats(tuple):
    """FORMATS, which also holds the older values (argparse checks membership; help lists FORMATS)."""

    def __contains__(self, value) -> bool:
        return tuple.__contains__(self, value) or value in _OLD_FORMATS


def _say_deprecated(prog: str, old: str, new: str) -> None:
    print(f"{prog}: {old} is deprecated; use {new}", file=sys.stderr)


class _FormatAction(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        if values in _OLD_FORMATS:
            _say_deprecated(parser.prog, f"{option_string} {values}", f"{option_string} {_OLD_FORMATS[values]}")
            values = _OLD_FORMATS[values]
        setattr(namespace, self.dest, values)


def add_format_argument(parser, *, default: str | None = "table", what: str = "the table",
                        shown: str | None = None) -> None:
    """`--format {table,csv,json}`: how `what` is printed (csv and json for programs); `shown`: the
    default as --help names it (when `default` is None: what the command does without --format)."""
    shown = shown or default
    parser.add_argument("--format", choices=_Formats(FORMATS), default=default, action=_FormatAction,
                        help=f"print {what} as a table, CSV or JSON (default: {shown})")


def write_csv(rows: list[dict], columns=None) -> None:
    """`rows` as CSV on stdout (a header, then one line per row)."""
    import csv

    writer = csv.DictWriter(sys.stdout, fieldnames=list(columns or (rows[0] if rows else ())), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)


def record_printer(fmt: str, say=print):
    """A function that prints one record (a dict) per call: a JSON object a line (fmt json), or CSV
    lines, the header before the first record (fmt csv)."""
    import csv
    import io
    import json

    header: list = []

    def emit(record: dict) -> None:
        if fmt == "json":
            say(json.dumps(record))
            return
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=list(record), lineterminator="\n")
        if not header:
            header.append(True)
            writer.writeheader()
        writer.writerow(record)
        say(text.getvalue().rstrip("\n"))

    return emit


def markdown_records(lines: list[str]) -> list[dict]:
    """The rows of a markdown table (`| a | b |` lines, the second the `|---|` rule) as records."""
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines if line.startswith("|")]
    return [dict(zip(cells[0], row)) for row in cells[2:]]


def add_progress_argument(parser, *, default: str = "shown when stderr is a terminal") -> None:
    """`--progress/--no-progress` (None when neither is given: the command decides)."""
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help=f"progress on stderr (default: {default})")


class _DualClip(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, True if values is None else values)


def add_dual_clip_arguments(parser, default: str, below: str = "×1.5 below norm 0.1") -> None:
    """`--dual-clip [MAX_NORM]` / `--no-dual-clip` (dest dual_clip: None, True, a max-norm, or False)."""
    parser.add_argument("--dual-clip", dest="dual_clip", nargs="?", type=float, action=_DualClip, default=None,
                        metavar="MAX_NORM",
                        help=f"dual-threshold gradient clip before the optimizer: the gradient norm clipped "
                             f"to MAX_NORM, {below} (default: {default})")
    parser.add_argument("--no-dual-clip", dest="dual_clip", action="store_false", default=None,
                        help="no dual-threshold gradient clip, e.g. asym-GRPO without it (default: see --dual-clip)")


class _Alias(argparse.Action):
    """A hidden older spelling of `target`: does what `target` does, after one deprecation line."""

    def __init__(self, option_strings, dest, target=None, value=None, shown="", **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.target, self.value, self.shown = target, value, shown

    def __call__(self, parser, namespace, values, option_string=None):
        _say_deprecated(parser.prog, option_string, self.shown)
        if self.nargs == 0:
            setattr(namespace, self.target.dest, self.value)
        else:
            self.target(parser, namespace, values, self.shown.split()[0])


_TAKES_VALUE = object()


def alias(parser: argparse.ArgumentParser, old: str, new: str, value=_TAKES_VALUE) -> None:
    """Add `old` to `parser` as a hidden, deprecated spelling of `new` (an option `parser` has).

    `old` takes a value as `new` does; or, for a switch (`--quiet` -> `--no-progress`) or a fixed
    value (`--json` -> `--format json`), sets what `new` would set."""
    target = parser._option_string_actions[new]
    if value is _TAKES_VALUE and target.nargs == 0:  # a switch: what this spelling of it stores
        value = (not new.startswith("--no-")) if isinstance(target, argparse.BooleanOptionalAction) else target.const
        shown = new
    elif value is _TAKES_VALUE:
        shown = new
    else:
        shown = f"{new} {value}"
    takes = value is _TAKES_VALUE
    parser.add_argument(old, dest=f"_alias_{old.lstrip('-').replace('-', '_')}", action=_Alias, target=target,
                        value=None if takes else value, shown=shown, nargs=target.nargs if takes else 0,
                        type=target.type if takes else None, choices=target.choices if takes else None,
                        metavar=target.metavar, help=argparse.SUPPRESS,
                        default=argparse.SUPPRESS)


def aliases(parser: argparse.ArgumentParser) -> dict[str, str]:
    """{old spelling: what to write instead} of `parser`'s hidden aliases."""
    return {s: a.shown for a in parser._actions if isinstance(a, _Alias) for s in a.option_strings}


def _visible_options(parser: argparse.ArgumentParser) -> dict[str, str]:
    """{spelling: the spelling to suggest} of every option, an alias suggesting its replacement."""
    out = {}
    for action in parser._actions:
        for spelling in action.option_strings:
            if isinstance(action, _Alias):
                out[spelling] = action.shown.split()[0]
            elif action.help != argparse.SUPPRESS:
                out[spelling] = spelling
    return out


def suggestion(parser: argparse.ArgumentParser, message: str) -> str:
    """"; did you mean X?" for an argparse error `message` about a mistyped flag or choice ("" when
    nothing is close)."""
    wrong = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
    if wrong:
        choices = re.findall(r"'([^']*)'", wrong.group(2))
        close = difflib.get_close_matches(wrong.group(1), choices, n=1)
        return f"; did you mean {close[0]}?" if close else ""
    if not message.startswith("unrecognized arguments:"):
        return ""
    options = _visible_options(parser)
    guesses = []
    for word in message.split(":", 1)[1].split():
        if word.startswith("--"):
            close = difflib.get_close_matches(word.split("=", 1)[0], list(options), n=1)
            if close and options[close[0]] not in guesses:
                guesses.append(options[close[0]])
    return f"; did you mean {' or '.join(guesses)}?" if guesses else ""
