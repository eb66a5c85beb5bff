"""`catsim llm ...`: the transformer trainer's commands, one module per subcommand."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction, argv=None) -> None:
    """argv: the words after `llm` (only the subcommand they name is imported; see
    `catsim.cli.main.register_package`)."""
    import pkgutil

    from catsim.cli.main import _ArgumentParser, register_package

    commands = [m.name.replace("_", "-") for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]
    parser = subparsers.add_parser("llm", help=f"JAX transformer trainer: {', '.join(sorted(commands))}",
                                   description="The transformer trainer's commands (catsim llm COMMAND --help).")
    llm_sub = parser.add_subparsers(dest="llm_command", metavar="LLM_COMMAND", parser_class=_ArgumentParser)
    register_package(llm_sub, "catsim.cli.llm", argv)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])
