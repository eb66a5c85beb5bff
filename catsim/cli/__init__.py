"""The `catsim` command line: a thin layer over the library.

Each module in this package that defines `register(subparsers)` adds one subcommand; `main`
discovers them, so adding a command never touches a central list. `register` must call
`parser.set_defaults(func=...)` with a function `func(args) -> int`.
"""
