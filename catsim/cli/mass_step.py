"""`catsim mass-step`: first-order and exact change of Qpos and Qu,pos under one update."""

from __future__ import annotations

import argparse
import json
import textwrap

from catsim.cli.args import parse_float_list, parse_int_list
from catsim.cli.vocabulary import add_format_argument, alias, write_csv
from catsim.errors import CatsimError
from catsim.theory import mass

WORKED = {"probs": "0.4,0.1,0.1,0.2,0.1,0.1", "correct": "0,1,2", "draws": "0,0,3,4"}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "mass-step",
        help="one policy-gradient step on a categorical policy: dQpos, dQu,pos (first order, exact)",
        description=textwrap.fill(
            "Apply one SGD step (gradient of the shared surrogate, step --lr) to the policy --probs "
            "for the group --draws, and print the first-order (subset-mass identity) and exact "
            "(softmax of z+dz) changes of Qpos and Qu,pos with their terms. Defaults are the worked "
            "example of docs/theory.md. Rules: paper = eq. 5 (distinct sampled sets, raw rewards), "
            "linear = App. J surrogate with repeated draws, logprob = REINFORCE."
        , width=80, break_on_hyphens=False),
        epilog="examples:\n  catsim mass-step                              # the worked example\n"
               "  catsim mass-step --rule linear --gamma 1 --format json\n"
               "  catsim mass-step --figure --groups 300 --out figures",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--probs", help=f"policy probabilities, sum to 1 (default: {WORKED['probs']})")
    parser.add_argument("--correct", help=f"indices of correct actions (default: {WORKED['correct']})")
    parser.add_argument("--draws", help=f"sampled action indices, repeats allowed (default: {WORKED['draws']})")
    parser.add_argument("--rule", choices=mass.RULES,
                        help="update rule (default: logprob)")
    parser.add_argument("--advantage", choices=mass.ADVANTAGES,
                        help="per-draw weights (default: raw for paper, centered for linear, grpo for logprob)")
    parser.add_argument("--reward-correct", dest="rc", type=float, help="reward of a correct draw Rc (default: 1)")
    parser.add_argument("--reward-wrong", dest="rw", type=float, help="reward of a wrong draw Rw (default: 0)")
    parser.add_argument("--gamma", type=float, help="focal exponent: weights x (1 - mu_hat)^gamma (default: 0)")
    parser.add_argument("--adv-eps", dest="eps", type=float, help="ε in the GRPO std denominator (default: 0)")
    parser.add_argument("--lr", dest="eta", type=float, help="learning rate (step size) η (default: 0.01)")
    add_format_argument(parser, default=None, shown="table", what="the step's changes and terms")
    for old, new in (("--rc", "--reward-correct"), ("--rw", "--reward-wrong"), ("--eps", "--adv-eps"),
                     ("--eta", "--lr")):
        alias(parser, old, new)
    parser.add_argument("--figure", action="store_true",
                        help="instead: write the (dQpos, dQu,pos) figure at the paper init, N in {8, 256, 131072} "
                             "(default: off)")
    parser.add_argument("--derivations", action="store_true",
                        help="instead: print every SymPy residual (0 = proved) and the REINFORCE vs Prop. 3.2 "
                             "residual (default: off)")
    parser.add_argument("--groups", type=int, help="groups per N for --figure (default: 300; other values are "
                        "written as mass_step_joint_groups<N>, never over the published mass_step_joint)")
    parser.add_argument("--out", help="directory for --figure (default: figures)")
    parser.set_defaults(func=run)


# every option given a value, with the mode that reads it (the table is the default mode)
DEFAULTS = {"probs": WORKED["probs"], "correct": WORKED["correct"], "draws": WORKED["draws"], "rule": "logprob",
            "rc": 1.0, "rw": 0.0, "gamma": 0.0, "eps": 0.0, "eta": 0.01, "format": None,
            "groups": 300, "out": "figures"}
FLAGS = {"rc": "--reward-correct", "rw": "--reward-wrong", "eps": "--adv-eps", "eta": "--lr"}  # dest -> flag
READ_BY = {"table": ("probs", "correct", "draws", "rule", "advantage", "rc", "rw", "gamma", "eps", "eta", "format"),
           "--figure": ("groups", "out"), "--derivations": ()}


def _mode(args: argparse.Namespace) -> str:
    """The mode asked for, after refusing an option it would never read (they were ignored: a
    --figure with --gamma 1 drew the paper's step and printed nothing about it)."""
    if args.figure and args.derivations:
        raise CatsimError("give --figure or --derivations, not both")
    mode = "--figure" if args.figure else "--derivations" if args.derivations else "table"
    unread = [name for name in (*DEFAULTS, "advantage") if getattr(args, name) is not None
              and name not in READ_BY[mode]]
    if unread:
        where = {"table": "in the table (without --figure or --derivations)"}.get(mode, f"with {mode}")
        readers = sorted({m for name in unread for m, names in READ_BY.items() if name in names})
        shown = ", ".join(FLAGS.get(name, "--" + name) for name in unread)
        raise CatsimError(f"{shown}: not read {where}; read only "
                          + " or ".join("in the table" if m == "table" else f"with {m}" for m in readers))
    for name, value in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return mode


def run(args: argparse.Namespace) -> int:
    mode = _mode(args)
    if mode == "--figure":
        return _figure(args)
    if mode == "--derivations":
        return _derivations()
    probs = parse_float_list(args.probs, "--probs")
    correct = parse_int_list(args.correct, "--correct")
    draws = parse_int_list(args.draws, "--draws")
    config = mass.MassStepConfig(rule=args.rule, advantage=args.advantage, reward_correct=args.rc,
                                 reward_wrong=args.rw, gamma=args.gamma, eps=args.eps, eta=args.eta)
    config.validate()
    result = mass.mass_step(probs, correct, draws, config)
    if args.format == "json":
        out = result.as_dict()
        out["config"] = {**config.__dict__, "advantage": config.resolved_advantage()}
        print(json.dumps(out, indent=1))
        return 0
    if args.format == "csv":
        write_csv([{"quantity": key, "first_order": getattr(result, f"{key}_first_order"),
                    "exact": getattr(result, f"{key}_exact"), "closed_form": result.closed_form[key],
                    **result.terms[key]} for key in ("dqpos", "dqupos")])
        return 0
    print(format_table(result, config))
    return 0


def format_table(result: mass.MassStepResult, config: mass.MassStepConfig) -> str:
    closed = result.closed_form
    lines = [
        f"rule {config.rule} (advantage {config.resolved_advantage()}, Rc={config.reward_correct:g}, "
        f"Rw={config.reward_wrong:g}, gamma={config.gamma:g}, eta={config.eta:g}), N={result.stats.n}",
        f"Qpos = {result.stats.qpos:.6g}, Qu,pos = {result.stats.qupos:.6g}, success rate = {result.stats.success_rate:.6g}",
        "",
        f"{'':10}{'first order':>15}{'exact':>15}{'closed form':>15}{'per eta':>12}",
    ]
    for key, label in (("dqpos", "dQpos"), ("dqupos", "dQu,pos")):
        first = getattr(result, f"{key}_first_order")
        lines.append(f"{label:10}{first:>+15.6e}{getattr(result, f'{key}_exact'):>+15.6e}"
                     f"{closed[key]:>+15.6e}{first / config.eta:>+12.6g}")
    lines.append(f"closed form: {closed['name']}")
    lines.append("")
    for key, label in (("dqpos", "dQpos  "), ("dqupos", "dQu,pos")):
        t = result.terms[key]
        lines.append(f"{label} = direct drift {t['direct_drift']:+.6e} + normalisation coupling "
                     f"{t['normalisation_coupling']:+.6e}")
    if result.dqpos_exact > 0 > result.dqupos_exact:
        lines.append("=> Qpos rises while the unsampled correct mass Qu,pos falls.")
    return "\n".join(lines)


def _figure(args: argparse.Namespace) -> int:
    from catsim.experiments.theory import reproduce_mass_figure

    if args.groups < 1:
        raise CatsimError("--groups must be >= 1")
    paths, samples = reproduce_mass_figure(args.out, groups=args.groups, progress=True)
    for s in samples:
        print(f"N = {s.n:>6}: {100 * s.share_rise_fall:5.1f}% of {len(s.dqpos)} steps have Qpos up and Qu,pos down")
    for path in paths:
        print(path)
    return 0


def _derivations() -> int:
    from catsim.theory import mass_symbolic

    residuals = mass_symbolic.all_proofs()
    width = max(len(name) for name in residuals)
    for name, residual in residuals.items():
        print(f"{name:<{width}}  residual = {residual}")
    compact, _ = mass_symbolic.reinforce_vs_prop32_residual()
    print()
    print("dQu,pos(REINFORCE, w = R on each sampled action) - Prop. 3.2 =")
    print(f"  {compact}")
    print("(non-zero: Prop. 3.2 holds for the eq.-5 linear rule on distinct sets only)")
    return 0 if all(r == 0 for r in residuals.values()) else 1
