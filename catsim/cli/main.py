"""Entry point of the `catsim` console script."""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence

from catsim.errors import CatsimError, CatsimWarning
from catsim.signals import Terminated, on_sigterm


class _ArgumentParser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line (exit code 2), without the usage dump, with
    the closest flag or command when one was mistyped ("did you mean --group-size?")."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and self._subparsers is None:  # a command's own flags: it knows the close ones
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    def error(self, message: str) -> None:  # type: ignore[override]
        from catsim.cli.vocabulary import suggestion

        self.exit(2, f"{self.prog}: error: {message}{suggestion(self, message)}\n")


def register_package(subparsers: argparse._SubParsersAction, package: str,
                     argv: Sequence[str] | None = None) -> None:
    """Import the modules of `package` that define `register` and let them add their parsers.

    argv: the words after this level's command. When the first one names a command of the package
    (`mass-step` is module `mass_step`), only that module is imported — `catsim simulate` then does
    not import the trainer, SciPy or the plotting code; otherwise (no command, `--help`, a typo)
    every module is, so that help and "invalid choice" list them all. A subpackage's `register`
    (`catsim llm`) gets the words after its own command the same way."""
    pkg = importlib.import_module(package)
    names = [info.name for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name)
             if not info.name.startswith("_") and info.name != "main"]
    words = list(argv or ())
    wanted = words[0].replace("-", "_") if words else ""
    rest = None
    if wanted in names:
        names, rest = [wanted], words[1:]
    for name in names:
        module = importlib.import_module(f"{package}.{name}")
        register = getattr(module, "register", None)
        if register is None:
            continue
        if hasattr(module, "__path__"):  # a subpackage of commands
            register(subparsers, argv=rest)
        else:
            register(subparsers)


def check_output_path(path: str | os.PathLike, flag: str) -> None:
    """Fail (CatsimError) before any work when `path` cannot be written: its folder must exist or
    be creatable, and must be writable; `path` itself must not be a directory."""
    target = os.path.abspath(os.fspath(path))
    if os.path.isdir(target):
        raise CatsimError(f"{flag}: {path} is a directory")
    parent = os.path.dirname(target)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
        raise CatsimError(f"{flag}: cannot write {path} ({parent} is not a writable folder)")


def stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has gone (`catsim lemma ... | head -1`). If so, stdout
    is pointed at /dev/null, as Python's documentation of SIGPIPE advises, so that the flush at
    exit neither fails nor prints: the command ends quietly, like any Unix tool in a pipe."""
    import select

    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        gone = any(event & (select.POLLERR | select.POLLHUP) for _, event in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no file descriptor (captured), no poll (Windows)
        return False
    if gone:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    return gone


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The `catsim` parser: every command, or with `argv` only the command it names (faster
    start-up; see `register_package`)."""
    parser = _ArgumentParser(
        prog="catsim",
        description="Why group-relative RL forgets rare correct solutions: theory, simulator, trainer.",
    )
    from catsim import __version__

    parser.add_argument("--version", action="version", version=f"catsim {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_ArgumentParser)
    register_package(subparsers, "catsim.cli", argv)
    return parser


def compile_cache_env(environ=os.environ) -> None:
    """Turn on JAX's persistent compilation cache for this process (before JAX is imported): in
    $JAX_COMPILATION_CACHE_DIR if set, else $XDG_CACHE_HOME/catsim/jax (~/.cache/catsim/jax), every
    program cached however fast it compiled. CATSIM_NO_COMPILE_CACHE=1 leaves it off. The library
    itself never sets it (notebooks and tests choose their own)."""
    if environ.get("CATSIM_NO_COMPILE_CACHE", "") not in ("", "0"):
        return
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(base, "catsim", "jax"))
    environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")


def main(argv: Sequence[str] | None = None) -> int:
    # The CLI only writes figure files: use the non-interactive backend unless the user chose one.
    # (Library code never switches backends, so notebooks keep their inline backend.)
    os.environ.setdefault("MPLBACKEND", "Agg")
    compile_cache_env()
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    name = " ".join(x for x in (args.command, getattr(args, "llm_command", None)) if x)
    import signal
    import threading
    import warnings

    def one_line(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, CatsimWarning):
            print(f"catsim {name}: warning: {message}", file=sys.stderr)
        else:
            default_show(message, category, filename, lineno, file, line)

    default_show, warnings.showwarning = warnings.showwarning, one_line
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, on_sigterm)  # a clean stop between steps
    try:
        code = int(func(args) or 0)
        sys.stdout.flush()  # a reader that has gone shows here, not in Python's flush at exit
        return code
    except BrokenPipeError as err:
        if not stdout_reader_gone():  # another pipe than stdout: an error like any OSError
            print(f"catsim {name}: error: {err.strerror or err}", file=sys.stderr)
            return 2
        return 128 + 13  # what a shell reports for a writer stopped by SIGPIPE (`set -o pipefail`)
    except CatsimError as err:
        print(f"catsim {name}: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a path that cannot be read or written: one line, no traceback
        where = f": {err.filename}" if getattr(err, "filename", None) else ""
        print(f"catsim {name}: error: {err.strerror or err}{where}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:
        what = "terminated (SIGTERM)" if isinstance(err, Terminated) else "interrupted"
        print(f"catsim {name}: {what}; rerun the same command to resume", file=sys.stderr)
        return 143 if isinstance(err, Terminated) else 130
    finally:
        warnings.showwarning = default_show
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    raise SystemExit(main())
