"""`catsim verify`: run every theory check (SymPy, mpmath, enumeration, Monte Carlo) and report."""

from __future__ import annotations

import argparse
import sys
import time

from catsim.checks import CheckResult, collect


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "verify",
        help="run all symbolic and numeric checks of the theory; non-zero exit if any fails",
        description="Runs every check in catsim.checks and prints check / max error / tolerance / pass.",
        epilog="example:\n  catsim verify --quick        # about 10 s on 2 CPU cores",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true",
                        help="smaller grids and fewer Monte Carlo samples (default: full)")
    parser.set_defaults(func=run)


def format_row(result: CheckResult, width: int) -> str:
    status = "pass" if result.passed else "FAIL"
    return (f"{result.name:<{width}}  {float(result.max_error):>10.3g}  "
            f"{float(result.tolerance):>9.3g}  {result.kind:>5}  {status}")


def run(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    width = 72
    print(f"{'check':<{width}}  {'max error':>10}  {'tolerance':>9}  {'kind':>5}  pass")
    failures = total = 0
    for result in collect(quick=args.quick):
        total += 1
        failures += not result.passed
        print(format_row(result, width), flush=True)
    elapsed = time.perf_counter() - start
    summary = f"{total - failures}/{total} checks passed in {elapsed:.1f} s"
    print(summary if not failures else f"{summary}; {failures} FAILED", file=sys.stderr if failures else sys.stdout)
    return 1 if failures else 0
