"""Options given to an RL run that the run would never read, for `catsim llm rl` to refuse.

An option the chosen method never reads (the KL estimator without a KL penalty, DAPO's overlong
settings without the overlong punishment, a temperature schedule's floor without a schedule, an
asym-GRPO setting without its component, ...) would go into the run's config, fingerprint and
command line while changing nothing: a reader of the run would believe it acted. `unread_options`
names each such option with what would make it act; the CLI refuses the first in one line.

Only options *given* are judged (a default is not a claim): `RLConfig` has no notion of given, so
the caller passes the flat names it received. One default is judged too (`unread_defaults`): a method's own setting
that its run would never read while the run is still named after the method (DAPO's overlong
punishment under a binary rule). The Maze study's arms set their options in code
(`catsim.experiments.maze.arms`); each of them acts (tests/test_options_never_act.py).
"""

from __future__ import annotations

from catsim.errors import CatsimError
from catsim.llm.rl.config import RLConfig
from catsim.objectives import registry

EPS_RULES = registry.EPS_NAMES  # the rules that read registry.Options.eps (adv_eps)
STD_RULES = registry.DDOF_NAMES  # the rules that read registry.Options.ddof (adv_std)
K_RULES = tuple(name for name in registry.NAMES if registry.get(name).needs_k)
REWARD_RULES = tuple(name for name in registry.NAMES if not registry.get(name).binary)  # read Rc, Rw
# what the asym-GRPO baseline-free advantages w⁺·r − w⁻·(1 − r) replace: the rule and its settings
RULE_OPTIONS = ("advantage", "passk_k", "adv_eps", "adv_std", "w_reinforce_lambda", "positive_weight",
                "batch_renorm", "reward_correct", "reward_wrong", "unlikeliness_beta")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _conditions(cfg: RLConfig) -> dict[str, tuple[bool, str]]:
    """{flat option: (whether the run never reads it, what would make it act)}."""
    spec, o, r = cfg.method_spec(), cfg.objective, cfg.rollout
    free = cfg.components.advantage == "baseline_free"
    rule = registry.get(spec.advantage)
    # one update whose own forward pass gives π_old (`loop.needs_old_logp`): the ratio is exp(0) = 1, where
    # the clipped surrogates' gradient is REINFORCE's and CISPO's weight clip(1) is 1
    one_update = cfg.updates_per_step == 1 and not cfg.any_asym
    clip = ("acts only when a step makes several updates (--ppo-epochs 2 or more, or mini-batches below the "
            "step's rollouts): with one update the ratio π/π_old is 1, where no clip binds")
    overlong = (not spec.overlong_shaping or rule.binary,
                "is read by the soft overlong punishment only (--overlong-shaping, on for --method dapo), "
                "on a rule that reads rewards (binary rules read the 0/1 outcome)")
    mixed_or_recompose = (not (cfg.use("mixed") or cfg.use("recompose")),
                          "is read by asym-GRPO's mixed groups and recomposition only (--asym-mixed, "
                          "--asym-recompose; on for --method asym-grpo)")
    channels = (not cfg.use("channels"), "is read by the asym-GRPO channels only (--asym-channels; on for "
                                         "--method asym-grpo)")
    # μ̂ = (R̄ − Rw)/(Rc − Rw) is the mean verifier score whatever Rc, Rw; the logged reward is that score
    levels = (rule.binary, f"is read by the advantages on rewards only (--advantage {', '.join(REWARD_RULES)}): "
                           f"--advantage {spec.advantage} reads the 0/1 outcome, and μ̂ is the mean score "
                           "whatever the reward levels")
    tau_is_one = cfg.temperature_plan() == "constant" and r.temperature in (0.0, 1.0)
    return {
        "max_sampling_rounds": (not spec.dynamic_sampling, "is read by dynamic sampling only (--dynamic-sampling, "
                                                           "on for --method dapo)"),
        "kl_estimator": (o.kl_coef == 0, "is read by the KL penalty only (--kl-coef above 0)"),
        "kl_bias_correction": (o.kl_bias_correction and o.kl_coef == 0,
                               "is read by the KL penalty only (--kl-coef above 0)"),
        "clip_low": (one_update, clip), "clip_high": (one_update, clip), "clip_ratio_c": (one_update, clip),
        "overlong_shaping": (bool(o.overlong_shaping) and rule.binary, overlong[1]),
        "overlong_buffer": overlong, "overlong_penalty": overlong,
        "reward_correct": levels, "reward_wrong": levels,
        "unlikeliness_beta": (rule.binary, f"is read by the advantages on rewards only (--advantage "
                                           f"{', '.join(REWARD_RULES)}): --advantage {spec.advantage} reads the "
                                           "0/1 outcome, not the shaped scores"),
        "adv_eps": (spec.advantage not in EPS_RULES, f"is read by the {', '.join(EPS_RULES)} advantages only"),
        "adv_std": (spec.advantage not in STD_RULES, f"is read by the {', '.join(STD_RULES)} advantages only (the "
                    "method's grpo, or --advantage)"),
        "passk_k": (spec.advantage not in K_RULES, f"is read by --advantage {', '.join(K_RULES)} only"),
        "w_reinforce_lambda": (spec.advantage != "w_reinforce", "is read by --advantage w_reinforce only"),
        "temperature_min": (cfg.temperature_plan() == "constant", "is read by a temperature schedule only "
                            "(--temperature-schedule cosine or stepwise; cosine for --method asym-grpo)"),
        "temperature_fraction": (cfg.temperature_plan() == "constant", "is read by a temperature schedule only "
                                 "(--temperature-schedule cosine or stepwise; cosine for --method asym-grpo)"),
        "logprob_temperature": (o.logprob_temperature == "one" and tau_is_one,
                                "'one' differs from 'sampling' only when the rollout temperature is not 1 "
                                "(--temperature, or a temperature schedule)"),
        "dual_clip_lower": (not cfg.use("dual_clip"), "is read by the dual-threshold gradient clip only "
                            "(--dual-clip; on for --method asym-grpo)"),
        "dual_clip_amplification": (not cfg.use("dual_clip"), "is read by the dual-threshold gradient clip only "
                                    "(--dual-clip; on for --method asym-grpo)"),
        "positive_threshold": mixed_or_recompose, "mixed_delta": mixed_or_recompose,
        "negative_reading": channels, "negative_eps": channels, "asym_advantage": channels,
        "kl_direction": (not cfg.use("confidence"), "is read by the asym-GRPO confidence weight only "
                         "(--asym-confidence; on for --method asym-grpo)"),
        "heldout_prompts": (cfg.run.heldout_every == 0, "is read by the held-out accuracy only (--heldout-every "
                            "above 0)"),
        **{name: (True, "is not read with --asym-advantage baseline_free (its w⁺·r − w⁻·(1 − r) replaces the "
                        "rule's advantages)") for name in RULE_OPTIONS if free},
    }


def unread_options(cfg: RLConfig, given) -> list[tuple[str, str]]:
    """[(flag, what would make it act)] of the flat options in `given` that `cfg`'s run never reads."""
    conditions = _conditions(cfg)
    return [(_flag(name), conditions[name][1]) for name in given
            if name in conditions and conditions[name][0]]


def unread_defaults(cfg: RLConfig) -> list[tuple[str, str]]:
    """[(flag, why)] of what `cfg`'s method turns on by default that its run would never read: DAPO's
    soft overlong punishment (on for --method dapo, so never given) under a binary rule, which reads the
    0/1 outcome, not the shaped rewards; the run would still be called DAPO."""
    spec = cfg.method_spec()
    if cfg.objective.overlong_shaping is None and spec.overlong_shaping and registry.get(spec.advantage).binary:
        return [(f"--method {cfg.method}", f"turns on the soft overlong punishment, which --advantage "
                 f"{spec.advantage} never reads (a binary rule reads the 0/1 outcome, not the shaped rewards); "
                 f"give --no-overlong-shaping to run without it, or an --advantage on rewards "
                 f"({', '.join(REWARD_RULES)})")]
    return []


def check_options_act(cfg: RLConfig, given) -> None:
    """CatsimError (one line) naming the first option in `given` the run would never read, or else a
    setting its method turns on that it would never read (`unread_defaults`)."""
    unread = unread_options(cfg, given)
    if unread:
        flag, why = unread[0]
        more = f" (and {len(unread) - 1} more: {', '.join(f for f, _ in unread[1:])})" if len(unread) > 1 else ""
        raise CatsimError(f"{flag} {why}; this run would not use it (leave it out){more}")
    for flag, why in unread_defaults(cfg)[:1]:
        raise CatsimError(f"{flag} {why}")
