"""`catsim lemma`: Lemma 3.1 figures (paper Fig. 3 and Fig. 5), tables and the peak table."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

from catsim.cli.args import parse_float_list, parse_int_list
from catsim.cli.vocabulary import add_format_argument, alias, write_csv
from catsim.errors import CatsimError
from catsim.experiments.theory import (
    custom_lemma_figure,
    peak_table,
    reproduce_figures,
    tail_miss_table,
)

__all__ = ["register", "run"]

DEFAULT_PEAK_TAU = (0.001, 0.01, 0.05)
DEFAULT_PEAK_MU = (0.2, 0.5, 0.8)
TABLE_COLUMNS = ("n", "tau", "mu_pos", "pr_tail_miss", "pr_active")
PEAK_COLUMNS = ("tau", "mu_pos", "n_star", "n_argmax", "max_value", "half_max_lo", "half_max_hi",
                "n_active", "n_cover")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "lemma",
        help="print or plot Lemma 3.1's tail-miss probability: Fig. 3 and 5, tables, peak table",
        description=textwrap.fill(
            "Pr(group active and rare correct subset unsampled) = (1-tau)^N - (mu-tau)^N - (1-mu)^N. "
            "Without --format/--peaks: write Fig. 3 (panels per --mu-pos, curves per --rho or --tau, "
            "N on a log2 axis) and Fig. 5 (mu=0.64, tau=6.3e-5, N=2^0..2^17) as PNG and PDF to --out. "
            "Lists accept commas and ranges: 1:512, 2^0:2^17, 0.1:0.5:0.1."
        , width=80, break_on_hyphens=False),
        epilog="examples:\n  catsim lemma --out figures                  # Fig. 3 and Fig. 5\n"
               "  catsim lemma --peaks --tau 0.01 --mu-pos 0.5 --format csv",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--group-size", dest="n", help="group sizes N (default: 1:512)")
    alias(parser, "--n", "--group-size")
    parser.add_argument("--tau", help="rare-subset masses tau, instead of --rho (default: from --rho)")
    parser.add_argument("--rho", help="tau as a fraction of mu_pos, rho = tau/mu (default: 0.01,0.05,0.1,0.2)")
    parser.add_argument("--mu-pos", dest="mu_pos", help="correct mass mu_pos per panel (default: 0.8,0.5,0.2)")
    add_format_argument(parser, default=None, shown="no table: write the figures",
                        what="the tail-miss (or --peaks) table instead of plotting it")
    parser.add_argument("--peaks", action="store_true",
                        help="print the peak table instead (tau 0.001,0.01,0.05 x mu_pos 0.2,0.5,0.8 "
                             "unless given; default: off)")
    parser.add_argument("--out", default="figures", help="directory for figures (default: figures)")
    parser.set_defaults(func=run)


def _curve_taus(args: argparse.Namespace, mus: list[float]) -> list[tuple[float, float]]:
    """(tau, mu_pos) pairs from --tau or --rho."""
    if args.tau is not None and args.rho is not None:
        raise CatsimError("give --tau or --rho, not both")
    if args.tau is not None:
        return [(t, m) for m in mus for t in parse_float_list(args.tau, "--tau")]
    rhos = parse_float_list(args.rho, "--rho") if args.rho is not None else [0.01, 0.05, 0.1, 0.2]
    for rho in rhos:
        if not 0 < rho < 1:
            raise CatsimError(f"--rho: need 0 < rho < 1, got {rho:g}")
    return [(rho * m, m) for m in mus for rho in rhos]


def _print_rows(rows: list[dict], columns: tuple[str, ...], fmt: str | None) -> None:
    if fmt == "json":
        json.dump(rows, sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif fmt == "csv":
        write_csv([{k: (repr(v) if isinstance(v, float) else v) for k, v in r.items()} for r in rows], columns)
    else:
        cells = [[_readable(r[c]) for c in columns] for r in rows]
        widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
        print("  ".join(c.rjust(w) for c, w in zip(columns, widths)))
        for row in cells:
            print("  ".join(v.rjust(w) for v, w in zip(row, widths)))


def _readable(value) -> str:
    if isinstance(value, int):
        return str(value)
    return f"{value:.6g}" if abs(value) < 1e6 else f"{value:.4g}"


def run(args: argparse.Namespace) -> int:
    if args.peaks:
        if args.n is not None:  # it was ignored: the table holds each curve's peak over every N
            raise CatsimError("--peaks: the peak table spans every N; --group-size does not apply")
        if args.tau is not None and args.rho is not None:  # --rho was ignored
            raise CatsimError("give --tau or --rho, not both")
        taus = parse_float_list(args.tau, "--tau") if args.tau is not None else None
        mus = parse_float_list(args.mu_pos, "--mu-pos") if args.mu_pos is not None else list(DEFAULT_PEAK_MU)
        if args.rho is not None and taus is None:
            pairs = _curve_taus(args, mus)
        else:
            pairs = [(t, m) for t in (taus or DEFAULT_PEAK_TAU) for m in mus]
        _print_rows(peak_table(pairs), PEAK_COLUMNS, args.format)
        return 0

    mus = parse_float_list(args.mu_pos, "--mu-pos") if args.mu_pos is not None else [0.8, 0.5, 0.2]
    ns = parse_int_list(args.n, "--group-size") if args.n is not None else list(range(1, 513))
    pairs = _curve_taus(args, mus)
    if args.format is not None:
        _print_rows(tail_miss_table(ns, pairs), TABLE_COLUMNS, args.format)
        return 0

    # Validate the whole grid before drawing anything.
    tail_miss_table(ns, pairs)
    out = Path(args.out)
    custom = any(v is not None for v in (args.n, args.tau, args.rho, args.mu_pos))
    if custom:
        taus = parse_float_list(args.tau, "--tau") if args.tau is not None else None
        rhos = None if taus is not None else sorted({round(t / m, 15) for t, m in pairs}, key=float)
        if args.rho is not None:
            rhos = parse_float_list(args.rho, "--rho")
        paths = custom_lemma_figure(out, mus=mus, ns=ns, rhos=rhos, taus=taus)
    else:
        paths = reproduce_figures(out)
    for path in paths:
        print(path)
    return 0
