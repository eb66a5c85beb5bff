"""`catsim llm ...`: the transformer trainer's commands, one module per subcommand."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction, argv=None) -> None:
    """argv: the words after `llm` (only the subcommand they name is imported; see
    `catsim.cli.main.register_package`)."""
    from catsim.cli.main import _ArgumentParser, register_package

    parser = subparsers.add_parser("llm", help="JAX transformer trainer: sample, sft, rl, eval, pipeline")
    llm_sub = parser.add_subparsers(dest="llm_command", metavar="LLM_COMMAND", parser_class=_ArgumentParser)
    register_package(llm_sub, "catsim.cli.llm", argv)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])
