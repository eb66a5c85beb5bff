"""Options shared by `catsim simulate` and `catsim sweep`: a scenario plus overrides -> SimConfig."""

from __future__ import annotations

import argparse
import dataclasses

from catsim.cli.args import parse_float_list, parse_int_list
from catsim.errors import CatsimError
from catsim.objectives.asymmetric import AsymmetricConfig
from catsim.objectives.focal import GammaSchedule
from catsim.sim import config as C


def add_config_arguments(parser: argparse.ArgumentParser, *, default_steps: int | None = None):
    """Scenario, policy and update-rule options (defaults: the scenario's values)."""
    g = parser.add_argument_group("scenario and policy")
    g.add_argument("--scenario", default="paper", help=f"preset: {', '.join(C.SCENARIOS)} (default paper)")
    g.add_argument("--steps", type=int, default=default_steps, help="policy updates T (default 1000)")
    g.add_argument("--log-every", type=int, default=None, help="record metrics every k steps")
    g.add_argument("--init", choices=C.INIT_KINDS, default=None, help="initial logits (default paper)")
    g.add_argument("--num-actions", type=int, default=None, help="V (default 128000)")
    g.add_argument("--num-correct", type=int, default=None, help="correct actions C (default 10000)")
    g.add_argument("--target-qpos", type=float, default=None, help="initial Qpos for --init target_qpos")
    g.add_argument("--sampler", choices=C.SAMPLERS, default=None, help="group sampler (default auto)")
    u = parser.add_argument_group("update rule")
    u.add_argument("--objective", choices=C.SURROGATES, default=None,
                   help="surrogate: linear (eq. 5), reinforce (log-prob), grpo, dapo, cispo")
    u.add_argument("--advantage", choices=C.ADVANTAGES, default=None, help="mean_centred or grpo (÷ std)")
    u.add_argument("--optimizer", choices=C.OPTIMISERS, default=None, help="sgd, adam, adamw")
    u.add_argument("--lr", type=float, default=None, help="learning rate η")
    u.add_argument("--weight-decay", type=float, default=None, help="AdamW weight decay")
    u.add_argument("--ppo-epochs", type=int, default=None, help="optimiser steps per group")
    u.add_argument("--clip-low", type=float, default=None, help="ε_low of grpo/dapo/cispo")
    u.add_argument("--clip-high", type=float, default=None, help="ε_high of grpo/dapo/cispo")
    u.add_argument("--entropy-coef", type=float, default=None, help="entropy bonus coefficient")
    u.add_argument("--kl-coef", type=float, default=None, help="KL(π‖π0) penalty coefficient")
    u.add_argument("--low-lr-control", action="store_true", help="App. N: lr × m_γ")
    u.add_argument("--dynamic-sampling", action="store_true", help="DAPO: redraw all-equal groups")
    u.add_argument("--gamma-schedule", choices=("constant", "warmup", "curriculum", "switch"),
                   default="constant", help="how γ evolves (target γ from --gamma)")
    u.add_argument("--gamma-warmup-steps", type=int, default=0, help="warm-up steps (warmup)")
    u.add_argument("--gamma-switch-step", type=int, default=0, help="first F-GRPO step (switch)")
    a = parser.add_argument_group("asymmetric GRPO (issue 9, docs/asymmetric-grpo.md)")
    a.add_argument("--update", choices=UPDATES, default="standard",
                   help="asym-grpo = --asym-channels --asym-confidence --asym-recompose "
                        "--dual-clip 1.0 on top of the scenario's update (default standard)")
    a.add_argument("--asym-channels", action="store_true", help="w⁺ on A > 0, w⁻(π) on A < 0")
    a.add_argument("--asym-confidence", action="store_true",
                   help="negatives × b + (1−b)·sigmoid(−KL) of the policy")
    a.add_argument("--asym-recompose", action="store_true",
                   help="loss over the draws kept by the batch recomposition")
    a.add_argument("--dual-clip", type=float, default=None, metavar="MAX_NORM",
                   help="dual-threshold gradient clip (×1.5 below 0.1) before the optimiser")
    a.add_argument("--negative-reading", choices=("text", "formula"), default=None,
                   help="w⁻ reading: text (falls with π, default) or formula (grows with π)")
    a.add_argument("--kl-direction", choices=("uniform_to_policy", "policy_to_uniform"),
                   default=None, help="KL of the confidence weight (default uniform_to_policy)")


UPDATES = ("standard", "asym-grpo")
ASYM_GRPO_DUAL_CLIP = 1.0  # max-norm of --update asym-grpo (the article gives no number)


def _asymmetric_overrides(args) -> dict:
    """UpdateConfig fields of the asymmetric-GRPO options (empty when none is given)."""
    full = args.update == "asym-grpo"
    upd = {}
    for name in ("asym_channels", "asym_confidence", "asym_recompose"):
        if full or getattr(args, name):
            upd[name] = True
    if args.dual_clip is not None or full:
        upd["dual_clip"] = args.dual_clip if args.dual_clip is not None else ASYM_GRPO_DUAL_CLIP
    asym = {}
    if args.negative_reading is not None:
        asym["negative_reading"] = args.negative_reading
    if args.kl_direction is not None:
        asym["kl_direction"] = args.kl_direction
    if asym:
        upd["asym"] = AsymmetricConfig(**asym)
    return upd


_POLICY = {"init": "init", "num_actions": "num_actions", "num_correct": "num_correct",
           "target_qpos": "target_qpos"}
_UPDATE = {"objective": "surrogate", "advantage": "advantage", "optimizer": "optimiser",
           "lr": "learning_rate", "weight_decay": "weight_decay", "ppo_epochs": "ppo_epochs",
           "clip_low": "clip_low", "clip_high": "clip_high", "entropy_coef": "entropy_coef",
           "kl_coef": "kl_coef"}


def config_from_args(args) -> C.SimConfig:
    """The scenario with every given override applied (validated: CatsimError on bad values)."""
    base = C.scenario(args.scenario)
    pol = {v: getattr(args, k) for k, v in _POLICY.items() if getattr(args, k) is not None}
    upd = {v: getattr(args, k) for k, v in _UPDATE.items() if getattr(args, k) is not None}
    if args.low_lr_control:
        upd["low_lr_control"] = True
    if args.dynamic_sampling:
        upd["dynamic_sampling"] = True
    upd.update(_asymmetric_overrides(args))
    upd["gamma"] = GammaSchedule(kind=args.gamma_schedule, warmup_steps=args.gamma_warmup_steps,
                                 switch_step=args.gamma_switch_step)
    top = {}
    for name in ("steps", "log_every", "sampler"):
        if getattr(args, name) is not None:
            top[name] = getattr(args, name)
    custom = bool(pol or set(upd) - {"gamma"} or args.low_lr_control or args.dynamic_sampling
                  or args.gamma_schedule != "constant")
    update = dataclasses.replace(base.update, **upd)
    cfg = dataclasses.replace(base, policy=dataclasses.replace(base.policy, **pol), update=update, **top)
    if custom:  # a modified scenario gets a label that says so
        cfg = dataclasses.replace(cfg, method=f"{args.scenario}+{update.label}")
    return cfg


def group_sizes(text: str) -> list[int]:
    sizes = parse_int_list(text, "--n")
    if any(n < 1 for n in sizes):
        raise CatsimError(f"--n: group sizes must be >= 1, got {text!r}")
    return sizes


def gammas(text: str) -> list[float]:
    values = parse_float_list(text, "--gamma")
    if any(g < 0 for g in values):
        raise CatsimError(f"--gamma: values must be >= 0, got {text!r}")
    return values
