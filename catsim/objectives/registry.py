"""The one list of group-advantage rules: name -> its function, its counts form, whether it needs
k, the paper it comes from and the public code it was checked against.

The simulator (`catsim.sim`), the LLM trainer (`catsim.llm.rl`), the CLIs' choices, the trainer
plug-ins (`catsim.integrations`) and the table in docs/objectives.md all read `RULES`; adding a
rule is one entry here.

    rule = registry.get("pkpo")
    A_N = rule.advantages(rewards_N, registry.Options(k=4))           # [N] one group
    A_c, A_w = rule.class_advantages(num_correct, n, registry.Options(k=4))   # from counts
    note = registry.check_k("pkpo", k=4, group_size=n)                # raises for k > n

A rule that `reads_batch_mean` (A-GRAE) also reads B, the batch's mean over groups of each group's
mean input (`batch_mean`): a caller with several groups passes it,
`rule.advantages(r_N, o, batch_mean=registry.batch_mean(inputs_GxN, mask_G))`; without it B is
the group's own mean, a batch of one group (the simulator's, one prompt per step). Every rule
accepts the argument; only those that read it use it.

`binary` rules read 0/1 success indicators (the trainer passes score > 1/2); the others take the
rewards as given (their counts form uses the reward levels Rc, Rw of `Options`).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable

import jax.numpy as jnp

from catsim.errors import CatsimError, CatsimWarning
from catsim.objectives import advantages as adv
from catsim.objectives import agrae as agrae_
from catsim.objectives import binary as bin_
from catsim.objectives import calibration as cal

__all__ = ["Options", "Rule", "RULES", "NAMES", "EPS_NAMES", "DDOF_NAMES", "get", "check_k", "warn_k",
           "markdown_table", "batch_mean"]

batch_mean = agrae_.batch_mean  # [G, N] inputs, optional [G] mask -> [] B (the batch-level input)


@dataclasses.dataclass(frozen=True)
class Options:
    """Hyper-parameters a rule may read (each rule reads only its own)."""

    k: int = 4  # pass@k rules (passk_training, pkpo, pkpo_mean)
    eps: float = 1e-6  # ε of the GRPO std, of MaxRL's p̂ + ε and of passk_best's std + ε
    ddof: int = 0  # GRPO's std: 0 population (the theory), 1 sample (verl, TRL); counts forms use 0
    w_reinforce_lambda: float = 0.1  # λ of W-REINFORCE (the paper recommends 0.1)
    reward_correct: float = 1.0  # Rc of the counts form of mean_centred / grpo / dr_grpo
    reward_wrong: float = 0.0  # Rw < Rc


@dataclasses.dataclass(frozen=True)
class Rule:
    """One advantage rule (see the module docstring)."""

    name: str
    formula: str  # one line, for tables
    paper: str
    reference: str  # the public code it was checked against ("" = the paper's equations only)
    group: Callable  # (rewards_N, Options) -> [N]; (rewards_N, Options, B) if reads_batch_mean
    counts: Callable  # (num_correct, group_size, Options) -> (A_correct, A_wrong); (..., B) likewise
    binary: bool = True  # reads 0/1 success indicators
    needs_k: bool = False
    baseline_free: bool = False  # an all-equal group still gets a non-zero advantage
    moves_at_k_equal_n: bool = True  # some group of n samples gets credit at k = n (needs_k rules)
    reads_eps: bool = False  # reads Options.eps (an option given to another rule never acts)
    reads_ddof: bool = False  # reads Options.ddof (GRPO's std), likewise
    reads_batch_mean: bool = False  # reads B = `batch_mean` of the step's groups besides its own group

    def advantages(self, rewards_N, options: Options = Options(), batch_mean=None):
        """[N] advantages of one group; `batch_mean` [] is B (default: this group's mean)."""
        if not self.reads_batch_mean:
            return self.group(rewards_N, options)
        if batch_mean is None:
            batch_mean = jnp.mean(jnp.asarray(rewards_N, float))
        return self.group(rewards_N, options, batch_mean)

    def class_advantages(self, num_correct, group_size, options: Options = Options(), batch_mean=None):
        """(A_correct, A_wrong) of a binary group with `num_correct` correct samples of `group_size`;
        `batch_mean` [] is B (default: num_correct/group_size, a batch of this one group)."""
        if not self.reads_batch_mean:
            return self.counts(num_correct, group_size, options)
        if batch_mean is None:
            batch_mean = adv.safe_divide(jnp.asarray(num_correct, float), jnp.asarray(group_size, float))
        return self.counts(num_correct, group_size, options, batch_mean)

    def can_move(self, group_size: int, k: int | None = None) -> bool:
        """Whether some group of `group_size` samples gets a non-zero advantage (at this k)."""
        if self.baseline_free:
            return group_size >= 1
        if group_size < 2:
            return False
        if self.needs_k:
            return k < group_size or (k == group_size and self.moves_at_k_equal_n)
        return True


def _grpo_counts(c, n, o: Options):
    return adv.binary_group_advantages(c, n, reward_correct=o.reward_correct, reward_wrong=o.reward_wrong,
                                       normalise_std=True, eps=o.eps)


def _centred_counts(c, n, o: Options):
    return adv.binary_group_advantages(c, n, reward_correct=o.reward_correct, reward_wrong=o.reward_wrong)


_RULES = (
    Rule("mean_centred", "A = r − r̄", "F-GRPO 2602.06717 App. J", "",
         lambda r, o: adv.mean_centred(r), _centred_counts, binary=False),
    Rule("grpo", "A = (r − r̄)/(std + ε)", "DeepSeekMath 2402.03300", "verl, TRL (ddof 1)",
         lambda r, o: adv.grpo(r, eps=o.eps, ddof=o.ddof), _grpo_counts, binary=False, reads_eps=True,
         reads_ddof=True),
    Rule("dr_grpo", "A = r − r̄", "Dr.GRPO 2503.20783", "",
         lambda r, o: adv.dr_grpo(r), _centred_counts, binary=False),
    Rule("maxrl", "A = (r − p̂)/(p̂ + ε)", "MaxRL 2602.02710", "prime-rl max_rl.py, SkyRL",
         lambda r, o: bin_.maxrl(r, eps=o.eps), lambda c, n, o: bin_.maxrl_counts(c, n, eps=o.eps),
         reads_eps=True),
    Rule("passk_training", "A = (1 − ρ − q·[wrong])/σ over k-subsets", "Pass@k Training 2508.10751",
         "RUCAIBox/Passk_Training code/passk_adv.py",
         lambda r, o: bin_.passk_training(r, o.k), lambda c, n, o: bin_.passk_training_counts(c, n, o.k),
         needs_k=True, moves_at_k_equal_n=False),
    Rule("pkpo", "A = n·s_i^(loo−1): correct k·C(n−c,k−1)/C(n−1,k−1), wrong 0", "PKPO 2505.15201 Eq. 33",
         "the paper's Listing 1 (sloo_minus_one)",
         lambda r, o: bin_.pkpo(r, o.k), lambda c, n, o: bin_.pkpo_counts(c, n, o.k), needs_k=True),
    Rule("pkpo_mean", "A = k·(share of passing k-subsets − ρ)", "PKPO 2505.15201, mean-centred",
         "rllm PR #743", lambda r, o: bin_.pkpo(r, o.k, baseline="mean"),
         lambda c, n, o: bin_.pkpo_counts(c, n, o.k, baseline="mean"), needs_k=True, moves_at_k_equal_n=False),
    Rule("passk_best", "best sample only: (r₁ − r₂)/(std + ε)", "2503.19595", "verl grpo_passk",
         lambda r, o: bin_.passk_best(r, eps=o.eps), lambda c, n, o: bin_.passk_best_counts(c, n, eps=o.eps),
         reads_eps=True),
    Rule("w_reinforce", "A = λ (correct), −1 (wrong), no baseline", "W-REINFORCE 2506.01347",
         "TianHongZXY/RLVR-Decomposed compute_psr_nsr_outcome_advantage('weighted')",
         lambda r, o: bin_.w_reinforce(r, positive_weight=o.w_reinforce_lambda),
         lambda c, n, o: bin_.w_reinforce_counts(c, n, positive_weight=o.w_reinforce_lambda),
         baseline_free=True),
    Rule("nsr", "A = −1 (wrong), 0 (correct)", "NSR 2506.01347", "RLVR-Decomposed ('negative')",
         lambda r, o: bin_.nsr(r), lambda c, n, o: bin_.nsr_counts(c, n), baseline_free=True),
    Rule("psr", "A = 1 (correct), 0 (wrong)", "PSR 2506.01347", "RLVR-Decomposed ('positive')",
         lambda r, o: bin_.psr(r), lambda c, n, o: bin_.psr_counts(c, n), baseline_free=True),
    Rule("inverse_success", "GRPO's A; A > 0 × (n − c)^α, α = 1", "inverse-success calibration 2601.15609",
         "no public code; the paper's method text was not reachable (see objectives/calibration.py)",
         lambda r, o: cal.inverse_success(r, eps=o.eps, ddof=o.ddof),
         lambda c, n, o: cal.inverse_success_counts(c, n, eps=o.eps), reads_eps=True, reads_ddof=True),
    Rule("agrae", "GRPO's A (ddof 1) × ½[(1−B)/(1−√p) + B/√p], A > 0 × min(1, B); B batch accuracy",
         "A-GRAE 2602.05548", "Yu7-code/A-GRAE compute_grpo_outcome_advantage (applied every step)",
         lambda r, o, b: agrae_.agrae(r, b, eps=o.eps), lambda c, n, o, b: agrae_.agrae_counts(c, n, b, eps=o.eps),
         reads_eps=True, reads_batch_mean=True),
)
RULES = {rule.name: rule for rule in _RULES}
NAMES = tuple(RULES)
EPS_NAMES = tuple(rule.name for rule in _RULES if rule.reads_eps)  # the rules an ε option acts on
DDOF_NAMES = tuple(rule.name for rule in _RULES if rule.reads_ddof)  # the rules a std (ddof) option acts on


def get(name: str) -> Rule:
    """The rule called `name` (CatsimError naming the choices otherwise)."""
    try:
        return RULES[name]
    except (KeyError, TypeError):
        raise CatsimError(f"unknown advantage {name!r}; choose one of {', '.join(NAMES)}") from None


def check_k(name: str, k: int, group_size: int) -> str | None:
    """Refuse a k-rule whose k exceeds the group size; return a warning at k = N (else None).

    At k > N every group gets zero advantage under Pass@k Training and PKPO (no k-subset exists),
    so the run would train nothing. At k = N Pass@k Training and the mean-centred PKPO still give
    zero to every group, and PKPO's s^(loo−1) credits only groups with exactly one correct sample.
    """
    rule = get(name)
    if not rule.needs_k:
        return None
    if k > group_size:
        raise CatsimError(f"passk_k = {k} exceeds the group size N = {group_size}: {name} gives every group "
                          f"zero advantage when k > N, so the run would train nothing; choose k < N")
    if k == group_size:
        if not rule.can_move(group_size, k):
            return (f"passk_k = N = {k}: {name} gives every group zero advantage at k = N, "
                    "so this run trains nothing; choose k < N")
        return f"passk_k = N = {k}: {name} credits only groups with exactly one correct sample at k = N"
    return None


def warn_k(name: str, k: int, group_size: int) -> None:
    """`check_k` for a run being configured: k > N raises, k = N warns (`CatsimWarning`, one line
    in the CLI)."""
    note = check_k(name, k, group_size)
    if note:
        warnings.warn(note, CatsimWarning, stacklevel=4)


def markdown_table() -> str:
    """The rules as a Markdown table (docs/objectives.md quotes it; a test keeps the two equal)."""
    lines = ["| rule | advantage | needs k | 0/1 rewards | paper | checked against |",
             "|---|---|---|---|---|---|"]
    for r in _RULES:
        lines.append(f"| `{r.name}` | {r.formula} | {'yes' if r.needs_k else ''} | "
                     f"{'yes' if r.binary else ''} | {r.paper} | {r.reference or 'the paper'} |")
    return "\n".join(lines)
