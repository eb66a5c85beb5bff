"""The Maze study's arms, one row each: the table that the runs (`catsim.experiments.maze.arms`), the
report's rows (arms.json keeps the arms in this order) and the docs' table (`markdown_table`;
docs/llm-maze-study.md quotes it, a test keeps the two equal) all read. Adding an arm is one row;
the article's claims about them (`CLAIMS`) name arms of the table.

An arm is a named method configuration — method, γ or γ schedule, entropy / KL coefficient (the
`options` of `RLConfig.from_flat`), optimizer updates per step, RL steps — at a group size N, over
some seeds, tested against the arms it names (`compare`). An arm that *is* a study run names it
(`study_run`) and is read from the study, never trained.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from catsim.errors import CatsimError
from catsim.experiments.maze.presets import StudyPreset, run_label


@dataclass(frozen=True)
class Arm:
    """A named method configuration of the Maze study."""

    name: str
    options: dict = field(default_factory=dict)  # RLConfig.from_flat options (method, gamma, schedule, coefs)
    group_size: int = 8  # N
    seeds: int = 3  # seeds 0 … seeds − 1 (each from its own warm-up)
    updates: int = 0  # optimizer updates per step, mini-batches of whole groups (0 = the preset's)
    steps: int = 0  # RL steps (0 = the preset's)
    curve_every: int = 0  # steps between the snapshots scored for pass@k against step (0 = the preset's)
    study_run: tuple = ()  # (method, γ) of the study run this arm is: read, never trained
    compare: tuple = ("grpo", "f-grpo-g0.5")  # the arms each is tested against
    what: str = field(default="", compare=False)  # one line for the docs' table; makes no run
    rule: str = field(default="", compare=False)  # a rule-zoo arm: the rule it trains (leaderboard)
    screen: str = field(default="", compare=False)  # its row of the simulator's methods study ("" = none)
    carry: bool = field(default=False, compare=False)  # its state and log pieces are committed (maze.carry)

    def settings(self) -> dict:
        """What makes the arm's runs (their eval.json records it; another is recomputed)."""
        return {"options": dict(sorted(self.options.items())), "group_size": self.group_size,
                "updates": self.updates, "steps": self.steps, "curve_every": self.curve_every}

    def label(self) -> str:
        """The run directory's name under s<seed>/."""
        return run_label(*self.study_run[:1], self.group_size, *self.study_run[1:]) if self.study_run \
            else f"arm-{self.name}-N{self.group_size}"

    def method(self) -> str:
        return self.study_run[0] if self.study_run else self.options.get("method", "grpo")

    def gamma(self) -> float:
        return float(self.study_run[1]) if self.study_run else float(self.options.get("gamma", 0.0))


def cpu_arms() -> tuple[Arm, ...]:
    """The CPU preset's arms (N = 8, 3 seeds, 2,000 steps unless said), in the order they run."""
    switch = {"gamma": 0.5, "gamma_schedule": "switch", "gamma_switch_step": 1000}
    ramp = {"gamma": 1.5, "gamma_schedule": "step_ramp", "gamma_start": 0.5, "gamma_ramp_start": 1000,
            "gamma_ramp_steps": 2000}  # the article's get_gamma: 0.5, then +1 per 2,000 steps past 1,000, ≤ 1.5
    clip = "its clip 0.2/0.28 does not act here, see below"
    return (
        Arm("grpo", study_run=("grpo", 0.0), compare=("f-grpo-g0.5",), what="the study's GRPO run"),
        Arm("f-grpo-g0.5", study_run=("f-grpo", 0.5), compare=("grpo",), what="the study's F-GRPO γ = 0.5 run"),
        Arm("f-grpo-g1", study_run=("f-grpo", 1.0), what="the study's F-GRPO γ = 1 run"),
        Arm("grpo-N32", study_run=("grpo", 0.0), group_size=32, seeds=1, what="the study's GRPO run at N = 32"),
        Arm("grpo-entropy", {"entropy_coef": 0.001}, what="GRPO + entropy bonus 0.001"),
        Arm("grpo-kl", {"kl_coef": 0.001, "kl_estimator": "k3"}, what="GRPO + KL penalty 0.001 to the warm-up (k3)"),
        Arm("dapo", {"method": "dapo"},
            what=f"`--method dapo` (dynamic sampling, token mean, overlong shaping; {clip})"),
        Arm("f-dapo-g0.5", {"method": "dapo", "gamma": 0.5}, compare=("grpo", "f-grpo-g0.5", "dapo"),
            what="`--method dapo` with the focal weight, γ = 0.5"),
        Arm("cispo", {"method": "cispo"}, what="`--method cispo` (its weight clip does not act here, see below)"),
        Arm("f-cispo-g0.5", {"method": "cispo", "gamma": 0.5}, compare=("grpo", "f-grpo-g0.5", "cispo"),
            what="`--method cispo` with the focal weight, γ = 0.5"),
        Arm("switch-1000", switch, what="GRPO, F-GRPO γ = 0.5 from step 1,000 (`--gamma-schedule switch`)"),
        Arm("gamma-ramp", ramp,
            what="the article's `get_gamma`: γ = 0.5 to step 1,000, then +1 per 2,000 steps, ≤ 1.5 (`step_ramp`)"),
        Arm("grpo-4updates", updates=4,
            what="App. K's four optimizer updates a step: mini-batches of 8 of the 32 prompts, same rollouts"),
        Arm("f-grpo-g0.5-4updates", {"gamma": 0.5}, updates=4, compare=("grpo", "f-grpo-g0.5", "grpo-4updates"),
            what="F-GRPO γ = 0.5 with App. K's four updates a step"),
        # the horizon pair ran 2 seeds, then a third: at 6,000 steps the two seeds disagreed in sign on
        # F-GRPO − GRPO at k = 1 (−1.8, +3.1), so seed 2 was added before it was run, whatever it shows
        Arm("grpo-6000", steps=6000, seeds=3, curve_every=500, compare=("grpo",),
            what="the horizon: GRPO for 6,000 steps, pass@k every 500 steps (2 seeds, then a third: see below)"),
        Arm("f-grpo-g0.5-6000", {"gamma": 0.5}, steps=6000, seeds=3, curve_every=500,
            compare=("grpo-6000", "f-grpo-g0.5"),
            what="the horizon: F-GRPO γ = 0.5 for 6,000 steps, pass@k every 500 steps (as `grpo-6000`)"),
        # App. K's horizon, added before any of its runs: too long for one sitting, so each run goes in
        # pieces (--stop-after) and commits its state at each piece's end (`carry`)
        Arm("grpo-20000", steps=20000, seeds=3, curve_every=1000, compare=("grpo-6000",), carry=True,
            what="App. K's horizon: GRPO for 20,000 steps, pass@k every 1,000 steps, in pieces whose state is committed"),
        Arm("f-grpo-g0.5-20000", {"gamma": 0.5}, steps=20000, seeds=3, curve_every=1000,
            compare=("grpo-20000", "f-grpo-g0.5-6000"), carry=True,
            what="App. K's horizon: F-GRPO γ = 0.5 for 20,000 steps (as `grpo-20000`)"),
        *zoo_arms(),
    )


# the registry's rules the zoo does not train as an arm of their own, and why
NOT_IN_ZOO = {"grpo": "the study's GRPO run is the zoo's reference",
              "mean_centred": "the same r − r̄ as dr_grpo, which the arm dr-grpo trains"}


def zoo_arms() -> tuple[Arm, ...]:
    """The rule zoo: every rare-solution rule that trains at N = 8, as GRPO with the rule in place of
    its advantage (or the rule's own method), at its authors' published defaults — the methods
    study's where they have none (k = 4, β = 0.25, λ = 0.1) — fixed before any held-out evaluation;
    3 seeds × 2,000 steps, tested against GRPO and F-GRPO γ = 0.5. `screen` names the rule's row of
    the simulator's methods study (`catsim.experiments.methods`), which the screen compares with.
    The registry's `grpo` is the study's GRPO run; its `mean_centred` is `dr_grpo`'s r − r̄ (the arm
    `dr-grpo` trains it, with Dr.GRPO's constant-sum loss)."""
    def rule(name, options, rule_name, screen, what):
        return Arm(name, options, rule=rule_name, screen=screen, what=what)

    return (
        rule("maxrl", {"advantage": "maxrl"}, "maxrl", "MaxRL", "MaxRL: A = (r − p̂)/(p̂ + ε)"),
        rule("passk-training-k4", {"advantage": "passk_training", "passk_k": 4}, "passk_training",
             "Pass@k Training", "Pass@k Training, k = 4"),
        rule("pkpo-k4", {"advantage": "pkpo", "passk_k": 4}, "pkpo", "PKPO", "PKPO s^(loo−1), k = 4"),
        rule("pkpo-mean-k4", {"advantage": "pkpo_mean", "passk_k": 4}, "pkpo_mean", "PKPO mean-centred",
             "PKPO mean-centred, k = 4"),
        rule("passk-best", {"advantage": "passk_best"}, "passk_best", "pass@k best",
             "the best-sample pass@k rule (moves only groups with one correct sample)"),
        rule("unlikeliness-b0.25", {"unlikeliness_beta": 0.25}, "unlikeliness", "unlikeliness β=0.25",
             "GRPO on the unlikeliness reward, β = 0.25"),
        rule("w-reinforce-l0.1", {"advantage": "w_reinforce", "w_reinforce_lambda": 0.1}, "w_reinforce",
             "W-REINFORCE λ=0.1", "W-REINFORCE, λ = 0.1"),
        rule("nsr", {"advantage": "nsr"}, "nsr", "NSR", "NSR: −1 on wrong samples only"),
        rule("psr", {"advantage": "psr"}, "psr", "PSR", "PSR: +1 on correct samples only"),
        rule("dr-grpo", {"method": "dr_grpo"}, "dr_grpo", "Dr.GRPO", "`--method dr_grpo`: r − r̄, constant-sum loss"),
        rule("asym-grpo", {"method": "asym-grpo"}, "asym-grpo", "",
             "`--method asym-grpo`: the second article's confidence-weighted GRPO, every component on"),
        rule("agrae", {"advantage": "agrae"}, "agrae", "A-GRAE", "A-GRAE (batch-accuracy mix, clamped positives)"),
        rule("inverse-success", {"advantage": "inverse_success"}, "inverse_success", "inverse-success α=1",
             "inverse-success calibration: positive GRPO advantages × (G − |S⁺|)"),
    )


def tiny_arms() -> tuple[Arm, ...]:
    """Seconds, for tests: the tiny preset's N = 2, one seed."""
    return (
        Arm("grpo", study_run=("grpo", 0.0), group_size=2, seeds=1, compare=("f-grpo-g0.5",)),
        Arm("f-grpo-g0.5", study_run=("f-grpo", 0.5), group_size=2, seeds=1, compare=("grpo",)),
        Arm("grpo-kl", {"kl_coef": 0.001}, group_size=2, seeds=1),
        Arm("f-dapo-g0.5", {"method": "dapo", "gamma": 0.5}, group_size=2, seeds=1, updates=1),
        Arm("grpo-4", steps=4, curve_every=2, group_size=2, seeds=1, compare=("grpo",), carry=True),
        Arm("f-grpo-g0.5-4", {"gamma": 0.5}, steps=4, curve_every=2, group_size=2, seeds=1,
            compare=("grpo-4", "f-grpo-g0.5"), carry=True),
    )


ARM_SETS = {"cpu": cpu_arms, "tiny": tiny_arms}

# The article's practical claims (F-GRPO article §3.2–4.2), each as (arm, reference, k, expected sign
# of arm − reference) parts; k "m" is the study's test m (64 on the CPU preset).
CLAIMS = (
    {"claim": "F-GRPO beats the entropy bonus", "article": "pass@1 / pass@256: F-GRPO 38.6 / 70.3, entropy 37.8 / 69.5",
     "parts": (("grpo-entropy", "f-grpo-g0.5", 1, "<"), ("grpo-entropy", "f-grpo-g0.5", "m", "<"))},
    {"claim": "F-GRPO has the better pass@1, the KL penalty the better pass@k",
     "article": "pass@1 / pass@256: F-GRPO 38.6 / 70.3, KL penalty 37.2 / 72.0",
     "parts": (("grpo-kl", "f-grpo-g0.5", 1, "<"), ("grpo-kl", "f-grpo-g0.5", "m", ">"))},
    {"claim": "the focal weight helps DAPO", "article": "pass@256 +3.2 on DAPO",
     "parts": (("f-dapo-g0.5", "dapo", "m", ">"),)},
    {"claim": "the focal weight helps CISPO", "article": "pass@256 +3.6 on CISPO",
     "parts": (("f-cispo-g0.5", "cispo", "m", ">"),)},
    {"claim": "F-GRPO at N = 8 matches or beats GRPO at N = 32",
     "article": "a 4× compute saving (here compute-matched: N = 32 has 8 prompts a step, N = 8 has 32; seed 0 only)",
     "parts": (("grpo-N32", "f-grpo-g0.5", 1, "<="), ("grpo-N32", "f-grpo-g0.5", "m", "<="))},
    {"claim": "a falling pass@1 means γ is too large", "article": "§4.3: pass@1 falls → lower γ by 0.2–0.5",
     "parts": (("f-grpo-g1", "f-grpo-g0.5", 1, "<"),)},
    {"claim": "GRPO first, F-GRPO switched on later keeps the early gains",
     "article": "§4.2: GRPO early to build the base, F-GRPO later for diversity",
     "parts": (("switch-1000", "grpo", 1, ">="), ("switch-1000", "grpo", "m", ">"))},
    {"claim": "the γ ramp (get_gamma) keeps pass@1 and gains pass@k", "article": "§5.2: γ = 0.5, then ramped to 1.5",
     "parts": (("gamma-ramp", "grpo", 1, ">="), ("gamma-ramp", "grpo", "m", ">"))},
    {"claim": "with App. K's four updates a step, F-GRPO gains pass@1 and pass@k over GRPO",
     "article": "App. K: F-GRPO above GRPO at pass@1 and pass@256 at every N",
     "parts": (("f-grpo-g0.5-4updates", "grpo-4updates", 1, ">"), ("f-grpo-g0.5-4updates", "grpo-4updates", "m", ">"))},
    # The horizon (added before any horizon run): each longer run against its own seeds' 2,000-step run
    # and F-GRPO against GRPO at the longer horizon, on the full evaluation.
    {"claim": "GRPO's pass@k loss grows as training lengthens",
     "article": "the simulator's horizons study (figures/horizons): the lost tail mass grows with t",
     "parts": (("grpo-6000", "grpo", "m", "<"),)},
    {"claim": "with longer training F-GRPO keeps its pass@k gain and its pass@1 cost goes",
     "article": "App. K (20,000 steps): F-GRPO above GRPO at pass@1 and pass@256",
     "parts": (("f-grpo-g0.5-6000", "grpo-6000", "m", ">"), ("f-grpo-g0.5-6000", "grpo-6000", 1, ">="))},
    # App. K's horizon (added before any 20,000-step run, by the same rule): F-GRPO against GRPO at
    # 20,000 steps, both parts strict — a gain of pass@1 and a pass@m lead, each significant
    {"claim": "at App. K's horizon (20,000 steps) F-GRPO γ = 0.5 gains pass@1 over GRPO and keeps its pass@k lead",
     "article": "App. K (20,000 steps, across N): pass@1 F-GRPO 74.4–93.6 %, GRPO 65.6–75.8 %; pass@256 75.9–96.5 "
                "against 67.3–76.9 %",
     "parts": (("f-grpo-g0.5-20000", "grpo-20000", 1, ">"), ("f-grpo-g0.5-20000", "grpo-20000", "m", ">"))},
)


def arm_set(preset_name: str, names=None) -> tuple[Arm, ...]:
    """The preset's arms (all, or those named: the study runs they are tested against come along)."""
    if preset_name not in ARM_SETS:
        raise CatsimError(f"the {preset_name!r} preset has no arms; arms exist for {', '.join(ARM_SETS)}")
    arms = ARM_SETS[preset_name]()
    if names is None:
        return arms
    known = {a.name: a for a in arms}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise CatsimError(f"unknown arm {unknown[0]!r}; the {preset_name} preset's arms: {', '.join(known)}")
    wanted = set(names) | {r for n in names for r in known[n].compare}
    return tuple(a for a in arms if a.name in wanted or a.study_run)


def _setting(k: str, v) -> str:
    return f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"


def markdown_table(sp: StudyPreset, arms) -> str:
    """The arms as a Markdown table, with the preset's steps and updates where an arm keeps them
    (docs/llm-maze-study.md quotes the CPU preset's; a test keeps the two equal)."""
    lines = ["| arm | what | settings | N | seeds | steps | updates a step | tested against |",
             "|---|---|---|---|---|---|---|---|"]
    for a in arms:
        settings = (f"study run: {a.study_run[0]}, γ = {a.gamma():g}" if a.study_run
                    else ", ".join(_setting(k, v) for k, v in a.options.items()) or "GRPO")
        lines.append(f"| `{a.name}` | {a.what} | {settings} | {a.group_size} | {a.seeds} | "
                     f"{a.steps or sp.rl_steps:,} | {a.updates or sp.updates(a.group_size)} | "
                     f"{', '.join(f'`{c}`' for c in a.compare)} |")
    return "\n".join(lines)
