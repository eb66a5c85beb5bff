"""Options shared by `catsim simulate` and `catsim sweep`: a scenario plus overrides -> SimConfig.

Every update option's destination is the `UpdateConfig` field of the same name (the names the
LLM trainer uses too), so overrides are copied field by field without a translation table.
"""

from __future__ import annotations

import argparse
import dataclasses

from catsim.cli.args import parse_float_list, parse_int_list
from catsim.cli.vocabulary import add_dual_clip_arguments, alias
from catsim.errors import CatsimError
from catsim.objectives import focal, registry
from catsim.objectives._validate import finite32
from catsim.objectives.asymmetric import KL_DIRECTIONS, NEGATIVE_READINGS, AsymmetricConfig
from catsim.objectives.focal import GammaSchedule
from catsim.sim import config as C

UPDATES = ("standard", "asym-grpo")
ASYM_GRPO_DUAL_CLIP = 1.0  # max-norm of --update asym-grpo (the article gives no number)
POLICY_FIELDS = ("init", "num_actions", "num_correct", "target_qpos")
UPDATE_FIELDS = ("surrogate", "advantage", "adv_eps", "optimizer", "learning_rate", "weight_decay",
                 "ppo_epochs", "clip_low", "clip_high", "entropy_coef", "kl_coef", "passk_k",
                 "unlikeliness_beta", "positive_weight", "w_reinforce_lambda")
_PAPER = C.scenario("paper")
DEFAULT_GAMMAS = "0,1"  # sweep's γ grid (--gamma's default is None: --study methods refuses a given --gamma)


def _default(field: str, owner: str = "update") -> str:
    """Help suffix naming the default: the scenario's value (the paper scenario's, for example)."""
    value = getattr(getattr(_PAPER, owner), field)
    return f"(default: the scenario's; paper: {value:g})" if isinstance(value, float) else \
        f"(default: the scenario's; paper: {value})"


def add_config_arguments(parser: argparse.ArgumentParser, *, default_steps: int | None = None,
                         default_log_every: int | None = None):
    """Scenario, policy and update-rule options (defaults: the scenario's values)."""
    g = parser.add_argument_group("scenario and policy")
    g.add_argument("--scenario", default="paper", choices=tuple(C.SCENARIOS),
                   help="preset set-up; every option below overrides one of its fields (default: paper)")
    g.add_argument("--steps", type=int, default=default_steps,
                   help=f"policy updates T (default: {default_steps or _PAPER.steps})")
    g.add_argument("--log-every", type=int, default=default_log_every,
                   help="record metrics every k steps; steps must be a multiple "
                        f"(default: {default_log_every or _PAPER.log_every})")
    g.add_argument("--init", choices=C.INIT_KINDS, default=None,
                   help=f"initial logits {_default('init', 'policy')}")
    g.add_argument("--num-actions", type=int, default=None,
                   help=f"V, the number of actions {_default('num_actions', 'policy')}")
    g.add_argument("--num-correct", type=int, default=None,
                   help=f"C, correct actions {_default('num_correct', 'policy')}")
    g.add_argument("--target-qpos", type=float, default=None,
                   help=f"initial Qpos for --init target_qpos {_default('target_qpos', 'policy')}")
    g.add_argument("--sampler", choices=C.SAMPLERS, default=None,
                   help="group sampler: auto picks by N (default: auto)")
    u = parser.add_argument_group("update rule")
    names = ", ".join(focal.focal_names(C.SURROGATES))
    u.add_argument("--method", dest="surrogate", choices=C.SURROGATES + focal.focal_names(C.SURROGATES),
                   default=None,
                   help=f"surrogate loss: linear (eq. 5), reinforce (log-prob), the clipped grpo, dapo, cispo; "
                        f"{names} = the same with the focal weight (1 − μ̂)^γ on, at --gamma "
                        f"(default {focal.NAMED_GAMMA:g}; 0 refused) {_default('surrogate')}")
    alias(parser, "--objective", "--method")
    u.add_argument("--advantage", choices=C.ADVANTAGES, default=None,
                   help="group advantage rule (docs/objectives.md has the table): mean_centred (r − mean), "
                        "grpo (÷ std + adv-eps), maxrl, passk_training / pkpo / pkpo_mean (pass@k, --passk-k), "
                        "passk_best, w_reinforce / nsr / psr (no baseline) "
                        f"{_default('advantage')}")
    u.add_argument("--passk-k", type=int, default=None, metavar="K",
                   help=f"k of the pass@k rules, at most N {_default('passk_k')}")
    u.add_argument("--w-reinforce-lambda", type=float, default=None, metavar="LAMBDA",
                   help=f"λ of --advantage w_reinforce (paper 0.1) {_default('w_reinforce_lambda')}")
    u.add_argument("--unlikeliness-beta", type=float, default=None, metavar="B",
                   help="unlikeliness reward r·(1 − B·rank/N) on the correct draws (paper 0.25) "
                        f"{_default('unlikeliness_beta')}")
    u.add_argument("--positive-weight", type=float, default=None, metavar="LAMBDA",
                   help="catsim's variant: λ × the positive advantages of the rule (the published "
                        "W-REINFORCE is --advantage w_reinforce) "
                        f"{_default('positive_weight')}")
    u.add_argument("--adv-eps", type=float, default=None,
                   help=f"ε in the GRPO std denominator {_default('adv_eps')}")
    u.add_argument("--optimizer", choices=C.OPTIMIZERS, default=None,
                   help=f"optax optimizer {_default('optimizer')}")
    u.add_argument("--lr", dest="learning_rate", type=float, default=None, metavar="LR",
                   help=f"learning rate η {_default('learning_rate')}")
    alias(parser, "--learning-rate", "--lr")
    u.add_argument("--weight-decay", type=float, default=None,
                   help=f"AdamW decoupled weight decay {_default('weight_decay')}")
    u.add_argument("--ppo-epochs", type=int, default=None,
                   help=f"optimizer steps per group {_default('ppo_epochs')}")
    u.add_argument("--clip-low", type=float, default=None,
                   help="ε_low of grpo/dapo/cispo (default: the objective's, 0.2 / 0.2 / 1.0)")
    u.add_argument("--clip-high", type=float, default=None,
                   help="ε_high of grpo/dapo/cispo (default: the objective's, 0.2 / 0.28 / 5.0)")
    u.add_argument("--entropy-coef", type=float, default=None,
                   help=f"entropy bonus coefficient {_default('entropy_coef')}")
    u.add_argument("--kl-coef", type=float, default=None,
                   help=f"KL(π‖π0) penalty coefficient {_default('kl_coef')}")
    u.add_argument("--low-lr-gamma", default=None, metavar="G[,G...]",
                   help="App. N control: run at lr × m_G (the focal γ stays --gamma, normally 0); "
                        "a list runs one method per value, 0 = no control (default: 0)")
    u.add_argument("--dynamic-sampling", action="store_true",
                   help="DAPO: redraw all-equal groups (default: off)")
    u.add_argument("--gamma-schedule", choices=focal.GAMMA_SCHEDULES, default="constant",
                   help="how γ evolves during a run; the target γ is --gamma (default: constant)")
    u.add_argument("--gamma-warmup-steps", type=int, default=0,
                   help="steps of the linear γ warm-up, for --gamma-schedule warmup (default: 0)")
    u.add_argument("--gamma-switch-step", type=int, default=0,
                   help="first F-GRPO step, for --gamma-schedule switch (default: 0)")
    u.add_argument("--gamma-start", type=float, default=0.0,
                   help="γ at step 0 (warmup, epoch_increment, step_ramp) or below --gamma-success-low "
                        "(success_ramp) (default: 0)")
    u.add_argument("--gamma-success-low", type=float, default=0.3,
                   help="success_ramp: success rate at or below which γ = --gamma-start (default: 0.3)")
    u.add_argument("--gamma-success-high", type=float, default=0.7,
                   help="success_ramp: success rate at or above which γ = --gamma (default: 0.7)")
    u.add_argument("--gamma-steps-per-epoch", type=int, default=1,
                   help="epoch_increment: steps per epoch (the simulator has one prompt; default: 1)")
    u.add_argument("--gamma-warmup-epochs", type=int, default=0,
                   help="epoch_increment: epochs before γ grows (default: 0)")
    u.add_argument("--gamma-increment", type=float, default=0.1,
                   help="epoch_increment: γ added per epoch, capped at --gamma (default: 0.1)")
    u.add_argument("--gamma-ramp-start", type=int, default=0,
                   help="step_ramp: last step at --gamma-start (article: 1000; default: 0)")
    u.add_argument("--gamma-ramp-steps", type=int, default=1,
                   help="step_ramp: steps per unit of γ, capped at --gamma (article: 2000; default: 1)")
    a = parser.add_argument_group("asymmetric GRPO (docs/asymmetric-grpo.md)")
    a.add_argument("--update", choices=UPDATES, default="standard",
                   help="asym-grpo = --asym-channels --asym-confidence --asym-recompose "
                        f"--dual-clip {ASYM_GRPO_DUAL_CLIP:g} on top of the scenario's update "
                        "(default: standard)")
    a.add_argument("--asym-channels", action="store_true",
                   help="w⁺ on A > 0, w⁻(π) on A < 0 (default: off)")
    a.add_argument("--asym-confidence", action="store_true",
                   help="negatives × b + (1−b)·sigmoid(−KL) of the policy (default: off)")
    a.add_argument("--asym-recompose", action="store_true",
                   help="loss over the draws kept by the batch recomposition (default: off)")
    add_dual_clip_arguments(a, f"on for --update asym-grpo at max-norm {ASYM_GRPO_DUAL_CLIP:g}, off otherwise")
    a.add_argument("--negative-reading", choices=NEGATIVE_READINGS, default=None,
                   help="w⁻ reading: text (falls with π) or formula (grows with π) (default: text)")
    a.add_argument("--kl-direction", choices=KL_DIRECTIONS, default=None,
                   help="KL of the confidence weight (default: uniform_to_policy)")


def _asymmetric_overrides(args) -> dict:
    """UpdateConfig fields of the asymmetric-GRPO options (empty when none is given)."""
    full = args.update == "asym-grpo"
    upd = {}
    for name in ("asym_channels", "asym_confidence", "asym_recompose"):
        if full or getattr(args, name):
            upd[name] = True
    on = args.dual_clip if args.dual_clip is not None else full
    if on is not False:  # True: the default max-norm; a number: that max-norm
        upd["dual_clip"] = ASYM_GRPO_DUAL_CLIP if on is True else float(on)
    asym = {}
    if args.negative_reading is not None:
        asym["negative_reading"] = args.negative_reading
    if args.kl_direction is not None:
        asym["kl_direction"] = args.kl_direction
    if asym:
        upd["asym"] = AsymmetricConfig(**asym)
    return upd


def config_from_args(args, sizes=None) -> C.SimConfig:
    """The scenario with every given override applied (validated: CatsimError on bad values; with
    the run's group sizes `sizes`, the pass@k rules' k > N refused for every N before any work).

    `--low-lr-gamma` is not part of it: pass `low_lr_gammas(args)` to simulate / sweep."""
    base = C.scenario(args.scenario)
    pol = {k: getattr(args, k) for k in POLICY_FIELDS if getattr(args, k) is not None}
    upd = {k: getattr(args, k) for k in UPDATE_FIELDS if getattr(args, k) is not None}
    if args.dynamic_sampling:
        upd["dynamic_sampling"] = True
    upd.update(_asymmetric_overrides(args))
    custom = bool(pol or upd or args.gamma_schedule != "constant")
    upd["gamma"] = GammaSchedule(
        kind=args.gamma_schedule, gamma_start=args.gamma_start, warmup_steps=args.gamma_warmup_steps,
        switch_step=args.gamma_switch_step, success_low=args.gamma_success_low,
        success_high=args.gamma_success_high, steps_per_epoch=args.gamma_steps_per_epoch,
        warmup_epochs=args.gamma_warmup_epochs, increment=args.gamma_increment,
        ramp_start=args.gamma_ramp_start, ramp_steps=args.gamma_ramp_steps)
    top = {}
    for name in ("steps", "log_every", "sampler"):
        if getattr(args, name) is not None:
            top[name] = getattr(args, name)
    update = dataclasses.replace(base.update, **upd)
    for n in sorted(set(sizes or ())):  # k > N refused here; k = N warned by the run, once per N
        registry.check_k(update.advantage, update.passk_k, n)
    cfg = dataclasses.replace(base, policy=dataclasses.replace(base.policy, **pol), update=update, **top)
    _check_read(args, cfg)
    if custom:  # a modified scenario gets a label that says so
        cfg = dataclasses.replace(cfg, method=f"{args.scenario}+{update.label}")
    return cfg


def _check_read(args, cfg: C.SimConfig) -> None:
    """Refuse (CatsimError, one line) an option given to a run that never reads it: the run would
    go on without it while its command line says otherwise."""
    u = cfg.update
    unread = [(flag, why) for flag, given, why in (
        ("--target-qpos", args.target_qpos is not None and cfg.policy.init != "target_qpos",
         "is read by --init target_qpos only"),
        ("--weight-decay", args.weight_decay is not None and u.optimizer != "adamw",
         "is read by --optimizer adamw only"),
        ("--clip-low", args.clip_low is not None and u.surrogate not in ("grpo", "dapo", "cispo"),
         "is read by the grpo, dapo and cispo objectives only"),
        ("--clip-high", args.clip_high is not None and u.surrogate not in ("grpo", "dapo", "cispo"),
         "is read by the grpo, dapo and cispo objectives only"),
        ("--w-reinforce-lambda", args.w_reinforce_lambda is not None and u.advantage != "w_reinforce",
         "is read by --advantage w_reinforce only"),
        ("--passk-k", args.passk_k is not None and not registry.get(u.advantage).needs_k,
         f"is read by --advantage {', '.join(n for n in registry.NAMES if registry.get(n).needs_k)} only"),
        ("--adv-eps", args.adv_eps is not None and u.advantage not in C.EPS_RULES,
         f"is read by --advantage {', '.join(C.EPS_RULES)} only"),
        ("--negative-reading", args.negative_reading is not None and not u.asym_channels,
         "is read by the asymmetric channels only (--asym-channels)"),
        ("--kl-direction", args.kl_direction is not None and not u.asym_confidence,
         "is read by the confidence weight only (--asym-confidence)"),
    ) if given]
    clips = [f for f in ("--clip-low", "--clip-high") if getattr(args, f[2:].replace("-", "_")) is not None]
    if clips and u.surrogate in ("grpo", "dapo", "cispo") and u.ppo_epochs == 1:
        # the only epoch evaluates the gradient at π = π_old: ratio 1, inside every clip range, where the
        # clipped surrogate's gradient is REINFORCE's (CISPO's weight is clip(1) = 1)
        unread.append((clips[0], "acts from the second PPO epoch on (--ppo-epochs 2 or more): at the only "
                                 "epoch the ratio π/π_old is 1, where the clip never binds"))
    if unread:
        flag, why = unread[0]
        raise CatsimError(f"{flag} {why}; this run would not use it (leave it out)")


def low_lr_gammas(args) -> list[float] | None:
    """The App. N control values of --low-lr-gamma (None when not given)."""
    if args.low_lr_gamma is None:
        return None
    values = parse_float_list(args.low_lr_gamma, "--low-lr-gamma")
    if any(g < 0 for g in values):
        raise CatsimError(f"--low-lr-gamma: values must be >= 0, got {args.low_lr_gamma!r}")
    return values


MAX_GROUP_SIZE = 2**30  # counts and draws are int32 in the engine


def group_sizes(text: str) -> list[int]:
    sizes = parse_int_list(text, "--group-size")
    if any(n < 1 or n > MAX_GROUP_SIZE for n in sizes):
        raise CatsimError(f"--group-size: group sizes must lie in [1, 2^30], got {text!r}")
    return sizes


def method_gammas(args, default: str | None) -> list[float]:
    """The γ values of the run, from --gamma (or `default`) and --method: f-grpo, f-dapo, f-cispo run
    their base surrogate (`args.surrogate` is set to it) with the focal weight on, at
    `focal.NAMED_GAMMA` when --gamma is not given (γ = 0 refused: it would never act)."""
    given = tuple(gammas(args.gamma)) if args.gamma is not None else None
    if args.surrogate is None:
        return list(given) if given is not None else gammas(default)
    args.surrogate, values = focal.resolve_method(args.surrogate, given)
    return list(values) if values is not None else gammas(default)


def gammas(text: str) -> list[float]:
    values = parse_float_list(text, "--gamma")
    if any(not (finite32(g) and g >= 0) for g in values):  # float32: 1e39 would be inf
        raise CatsimError(f"--gamma: values must be finite numbers >= 0, got {text!r}")
    return values
