"""`catsim verify` checks of mass redistribution (Prop. 3.2, eq. 17, App. C-H, J, N; BroRL).

References, independent of the code path being checked:
- SymPy derivations (catsim.theory.mass_symbolic), exact;
- the closed forms (numpy, with weights computed here from scratch) vs the gradient path
  (jax.grad of the shared objectives + subset-mass identity);
- the exact one-step softmax change vs first order: error/η² constant as η -> 0;
- expectations over groups by full enumeration vs Monte Carlo averages of one-step updates;
- published values (worked example of THEORY.md §2, m_0.5 ≈ 0.679).

Two one-step update paths are compared with the theory: `catsim.theory.mass.logit_step` (jax.grad
of the shared surrogate from catsim.objectives) and the simulator's own update,
`catsim.sim.engine.apply_update` with plain SGD (`simulator_logit_step`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Iterator

import numpy as np

from catsim.checks import CheckResult
from catsim.theory import mass

# THEORY.md §2 worked example: p = (.4,.1,.1 | .2,.1,.1), P = {0,1,2}, draws (0,0,3,4).
WORKED_PROBS = (0.4, 0.1, 0.1, 0.2, 0.1, 0.1)
WORKED_CORRECT = (0, 1, 2)
WORKED_DRAWS = (0, 0, 3, 4)
# Published first-order coefficients of η (per rule) and the tolerance implied by their digits.
WORKED_PUBLISHED = {
    "logprob": {"dqpos": (0.125, 5e-4), "dqupos": (-0.025, 5e-4)},
    "paper": {"dqpos": (0.0124, 5e-5), "dqupos": (-0.0052, 5e-5)},
}
PUBLISHED_M_HALF = (0.679, 5e-4)  # App. N: m_0.5 ≈ 0.679
MC_Z_TOL = 4.5  # |z| accepted for each Monte Carlo comparison (false alarm < 7e-6 per test)
SLOPE_ETAS = (1e-2, 3e-3, 1e-3)
SLOPE_TOL = 0.05  # (max/min of error/η² over SLOPE_ETAS) - 1


def worked_example(rule: str, eta: float = 1e-6) -> mass.MassStepResult:
    """The THEORY.md §2 example under `rule` (GRPO weights for logprob, Rc=1, Rw=0 for paper)."""
    config = mass.MassStepConfig(rule=rule, reward_correct=1.0, reward_wrong=0.0, eta=eta)
    return mass.mass_step(WORKED_PROBS, WORKED_CORRECT, WORKED_DRAWS, config)


def numpy_weights(correct_draws: np.ndarray, config: mass.MassStepConfig) -> np.ndarray:
    """Per-draw weights written from the paper's formulas in NumPy (independent of objectives)."""
    rewards = np.where(correct_draws, config.reward_correct, config.reward_wrong).astype(float)
    kind = config.resolved_advantage()
    if kind == "raw":
        adv = rewards
    else:
        adv = rewards - rewards.mean()
        if kind == "grpo":
            std = rewards.std()
            adv = adv / (std + config.eps) if std + config.eps > 0 else np.zeros_like(adv)
    rate = (rewards.mean() - config.reward_wrong) / (config.reward_correct - config.reward_wrong)
    return (1.0 - rate) ** config.gamma * adv


def closed_form_numpy(p, mask, draws, config) -> tuple[float, float]:
    """First-order (ΔQpos, ΔQu,pos) from the closed forms with numpy weights."""
    w = numpy_weights(mask[draws], config)
    if config.rule == "paper":
        stats = mass.group_stats(p, mask, draws)
        g = (1.0 - mask[draws].mean()) ** config.gamma  # focal weight scales Rc and Rw alike
        rc, rw = g * config.reward_correct, g * config.reward_wrong
        return mass.hu_eq17_dqpos(stats, rc, rw, config.eta), mass.prop32_dqupos(stats, rc, rw, config.eta)
    if config.rule == "linear":
        return mass.linear_rule_first_order(p, mask, draws, w, config.eta)
    return mass.logprob_rule_first_order(p, mask, draws, w, config.eta)


def random_case(rng: np.random.Generator, size: int, n: int):
    """A random softmax policy of `size` actions, a random correct set (not all), n draws."""
    logits = rng.normal(0.0, 1.5, size)
    p = np.exp(logits - logits.max())
    p /= p.sum()
    mask = np.zeros(size, bool)
    mask[rng.choice(size, rng.integers(1, size), replace=False)] = True
    draws = rng.choice(size, n, p=p)
    return p, mask, draws


CONFIGS = [
    mass.MassStepConfig(rule="paper", reward_correct=1.0, reward_wrong=0.0),
    mass.MassStepConfig(rule="paper", reward_correct=1.0, reward_wrong=-1.0, gamma=1.0),
    mass.MassStepConfig(rule="linear", advantage="centered", reward_correct=1.0, reward_wrong=-1.0),
    mass.MassStepConfig(rule="linear", advantage="raw", reward_correct=2.0, reward_wrong=0.5),
    mass.MassStepConfig(rule="logprob", advantage="grpo"),
    mass.MassStepConfig(rule="logprob", advantage="grpo", gamma=0.5, eps=1e-6),
    mass.MassStepConfig(rule="logprob", advantage="raw", reward_correct=1.0, reward_wrong=-0.5),
]


def closed_form_error(cases: int, seed: int = 0) -> float:
    """Worst relative gap between the gradient path (jax.grad of shared objectives + subset
    identity) and the closed forms, over random policies and all CONFIGS."""
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in range(cases):
        # One shape, so each rule compiles once.
        p, mask, draws = random_case(rng, 6, 5)
        for config in CONFIGS:
            result = mass.mass_step(p, mask, draws, config)
            ref = closed_form_numpy(p, mask, draws, config)
            for got, want in zip((result.dqpos_first_order, result.dqupos_first_order), ref):
                scale = max(abs(want), 1e-12 * config.eta)
                worst = max(worst, abs(got - want) / scale)
    return worst


def slope_spread(p, mask, draws, config, etas=SLOPE_ETAS) -> float:
    """(max/min over η of |exact - first order|/η²) - 1, worst of ΔQpos and ΔQu,pos.

    A first-order formula with an O(η²) remainder gives a constant ratio, so the spread -> 0."""
    ratios = {"pos": [], "upos": []}
    unit_dz = mass.logit_step(np.log(p), mask, draws, dataclasses.replace(config, eta=1.0))
    u_pos = mask.copy()
    u_pos[draws] = False
    for eta in etas:  # Δz is linear in η: one gradient serves every step size
        for key, subset in (("pos", mask), ("upos", u_pos)):
            first = mass.first_order_change(p, eta * unit_dz, subset)[0]
            exact = mass.exact_change(p, eta * unit_dz, subset)
            ratios[key].append(abs(exact - first) / eta**2)
    spread = 0.0
    for values in ratios.values():
        if max(values) == 0.0:  # e.g. an inactive group: no step at all
            continue
        spread = max(spread, max(values) / min(values) - 1.0)
    return spread


def expected_change_enumerated(p, mask, n, config) -> tuple[float, float]:
    """E over all V^n groups of the closed-form first-order (ΔQpos, ΔQu,pos)/η."""
    e_pos = e_upos = 0.0
    for seq in itertools.product(range(p.size), repeat=n):
        draws = np.array(seq)
        prob = float(np.prod(p[draws]))
        dpos, dupos = closed_form_numpy(p, mask, draws, dataclasses.replace(config, eta=1.0))
        e_pos += prob * dpos
        e_upos += prob * dupos
    return e_pos, e_upos


SIM_RULES = {("linear", "centered"): ("linear", "mean_centred"), ("logprob", "grpo"): ("reinforce", "grpo")}


def simulator_logit_step(logits, mask, draws, config: mass.MassStepConfig) -> np.ndarray:
    """Δz of ONE simulator update (`catsim.sim.engine.apply_update`, optax SGD at lr η) in float64.

    Only the rules the simulator has: linear + centred rewards, log-prob + GRPO (see SIM_RULES)."""
    import jax.numpy as jnp

    from catsim.numerics import x64
    from catsim.sim.config import UpdateConfig

    surrogate, advantage = SIM_RULES[(config.rule, config.resolved_advantage())]
    update = UpdateConfig(surrogate=surrogate, advantage=advantage, adv_eps=config.eps,
                          reward_correct=config.reward_correct, reward_wrong=config.reward_wrong,
                          optimizer="sgd", learning_rate=config.eta)
    with x64():
        z = jnp.asarray(logits, jnp.float64)
        counts = jnp.asarray(np.bincount(draws, minlength=z.shape[0]), jnp.float64)
        new_z = _jitted_sim_step(update)(z, jnp.asarray(mask), counts, jnp.asarray(config.gamma, jnp.float64))
        return np.asarray(new_z - z)


@functools.cache
def _jitted_sim_step(update):
    """jit of one simulator update with SGD at the update's learning rate (compiled once per rule)."""
    import jax

    from catsim.sim import engine

    def step(z, mask, counts, gamma):
        tx = engine.make_optimizer(update, update.learning_rate)
        consts = engine.Constants(z, mask)
        logp = jax.nn.log_softmax(z)
        new_z, _, _ = engine.apply_update(update, tx, consts, z, logp, tx.init(z), counts, gamma)
        return new_z

    return jax.jit(step)


def simulator_step_error(cases: int = 3, seed: int = 5) -> float:
    """Worst relative gap between the simulator's one-step Δz and `mass.logit_step`'s."""
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in range(cases):
        p, mask, draws = random_case(rng, 6, 5)
        for config in (CONFIGS[2], CONFIGS[4], dataclasses.replace(CONFIGS[4], gamma=1.0)):
            ours = mass.logit_step(np.log(p), mask, draws, config)
            sim = simulator_logit_step(np.log(p), mask, draws, config)
            scale = max(float(np.max(np.abs(ours))), 1e-300)
            worst = max(worst, float(np.max(np.abs(ours - sim))) / scale)
    return worst


def monte_carlo_change_z(p, mask, n, config, groups, seed, eta=1e-5, simulator=False) -> float:
    """max |z| of the Monte Carlo mean of one-step EXACT changes (gradient step of size η, divided
    by η) against the enumerated expectation of the first-order closed forms. `simulator=True`
    takes the step with the simulator's update instead of `mass.logit_step`."""
    rng = np.random.default_rng(seed)
    exact = np.empty((groups, 2))
    config = dataclasses.replace(config, eta=eta)
    sampled_correct = np.empty(p.size, bool)
    step = simulator_logit_step if simulator else mass.logit_step
    for i in range(groups):
        draws = rng.choice(p.size, n, p=p)
        dz = step(np.log(p), mask, draws, config)
        sampled_correct[:] = mask
        sampled_correct[draws] = False
        exact[i] = (mass.exact_change(p, dz, mask) / eta, mass.exact_change(p, dz, sampled_correct) / eta)
    expected = expected_change_enumerated(p, mask, n, config)
    z = 0.0
    for k in range(2):
        se = exact[:, k].std(ddof=1) / math.sqrt(groups)
        z = max(z, abs(exact[:, k].mean() - expected[k]) / se)
    return z


def unsampled_second_moment_z(p, n, groups, seed) -> float:
    """|z| of the Monte Carlo mean of U2 against E[U2] = Σ p²(1-p)^N (BroRL)."""
    rng = np.random.default_rng(seed)
    draws = rng.choice(p.size, size=(groups, n), p=p)
    p2 = p * p
    u2 = np.empty(groups)
    for i, row in enumerate(draws):
        u2[i] = p2.sum() - p2[np.unique(row)].sum()
    se = u2.std(ddof=1) / math.sqrt(groups)
    return abs(u2.mean() - mass.expected_unsampled_second_moment(p, n)) / se


def pass_at_k_z(qpos, k, trials, seed) -> float:
    rng = np.random.default_rng(seed)
    hits = rng.binomial(k, qpos, size=trials) > 0
    p = float(mass.pass_at_k(qpos, k))
    return abs(hits.mean() - p) / math.sqrt(p * (1 - p) / trials)


def app_h_enumeration_error(pc) -> float:
    """E[Ppos | X = k] by enumerating the k correct draws vs the App. H formula, k = 1..4."""
    pc = np.asarray(pc, float)
    q = pc / pc.sum()
    worst = 0.0
    for k in range(1, 5):
        total = 0.0
        for seq in itertools.product(range(pc.size), repeat=k):
            total += float(np.prod(q[list(seq)])) * float(pc[sorted(set(seq))].sum())
        worst = max(worst, abs(total - float(mass.expected_sampled_correct_mass(pc, k))) / total)
    return worst


def app_h_min_increment(pc, pw, n, rc, rw) -> float:
    """min over k of E[SR | X=k+1] - E[SR | X=k] (>= 0 claimed when Rc >= 0 >= Rw)."""
    ks = np.arange(0, n + 1)
    e_pos = mass.expected_sampled_correct_mass(pc, ks)
    e_neg = mass.expected_sampled_correct_mass(pw, n - ks)  # same formula on the wrong set
    sr = rc * e_pos + rw * e_neg
    return float(np.min(np.diff(sr)))


def low_lr_quadrature_error() -> tuple[float, float]:
    """(worst relative gap of shared low_lr_multiplier vs 30-digit quadrature, m_0.5)."""
    import mpmath

    from catsim.objectives.focal import low_lr_multiplier

    worst = 0.0
    with mpmath.workdps(30):
        base = mpmath.quad(lambda m: mpmath.sqrt(m * (1 - m)), [0, 1])
        for gamma in (0.0, 0.5, 1.0, 2.0, 3.7):
            ratio = mpmath.quad(lambda m, g=gamma: (1 - m) ** g * mpmath.sqrt(m * (1 - m)), [0, 1]) / base
            worst = max(worst, abs(low_lr_multiplier(gamma) - float(ratio)) / float(ratio))
    return worst, low_lr_multiplier(0.5)


def mean_abs_grpo_error() -> float:
    """mean |A| of the SHARED grpo() (ε = 0, population std) on binary groups vs 2 sqrt(μ(1-μ))."""
    import jax
    import jax.numpy as jnp

    from catsim.numerics import x64
    from catsim.objectives import advantages, focal

    worst = 0.0
    mean_abs = jax.jit(lambda r: jnp.mean(jnp.abs(advantages.grpo(r, eps=0.0))))
    with x64():
        for n in (2, 3, 8, 16):
            for x in range(1, n):
                rewards = jnp.asarray([1.0] * x + [0.0] * (n - x))
                got = float(mean_abs(rewards))
                mu = x / n
                want = 2 * math.sqrt(mu * (1 - mu))
                shared = float(focal.mean_abs_grpo_advantage(mu))
                worst = max(worst, abs(got - want) / want, abs(shared - want) / want)
    return worst


def paper_init_policy() -> tuple[np.ndarray, np.ndarray]:
    logits, mask = mass.paper_initial_logits()
    p = np.exp(logits - logits.max())
    return p / p.sum(), mask


def run(quick: bool) -> Iterator[CheckResult]:
    from catsim.theory import mass_symbolic

    for name, residual in mass_symbolic.all_proofs().items():
        yield CheckResult(f"SymPy: {name}", 0.0 if residual == 0 else 1.0, 0.0, "exact")
    compact, _ = mass_symbolic.reinforce_vs_prop32_residual()
    yield CheckResult("SymPy: Prop. 3.2 form fails for REINFORCE (residual != 0)", 0.0 if compact != 0 else 1.0, 0.0, "exact")

    eta = 1e-6
    for rule, published in WORKED_PUBLISHED.items():
        r = worked_example(rule, eta)
        for key, (value, tol) in published.items():
            got = getattr(r, f"{key}_first_order") / eta
            yield CheckResult(f"Worked example ({rule}): {key}/eta = {value:+g}", abs(got - value), tol, "abs")

    yield CheckResult("Closed forms vs jax.grad of shared objectives (random policies)",
                      closed_form_error(1 if quick else 6), 1e-10)

    rng = np.random.default_rng(7)
    spread = 0.0
    for _ in range(2 if quick else 6):
        p, mask, draws = random_case(rng, 6, 5)
        for config in CONFIGS[::2]:
            spread = max(spread, slope_spread(p, mask, draws, config))
    yield CheckResult("Exact vs first order: spread of error/eta^2, random policies", spread, SLOPE_TOL)

    p_init, mask_init = paper_init_policy()
    spread = 0.0
    ns = (8,) if quick else (8, 256, 131072)
    for i, n in enumerate(ns):
        draws = np.random.default_rng(100 + i).choice(p_init.size, n, p=p_init)
        for config in (CONFIGS[0], CONFIGS[2], CONFIGS[4]):
            spread = max(spread, slope_spread(p_init, mask_init, draws, config))
    sizes = "/".join(map(str, ns))
    yield CheckResult(f"Exact vs first order: error/eta^2 spread, paper init, N={sizes}", spread, SLOPE_TOL)

    p_small = np.array([0.35, 0.05, 0.1, 0.25, 0.15, 0.1])
    mask_small = np.array([True, True, True, False, False, False])
    groups = 200 if quick else 2000
    z = 0.0
    for seed, config in enumerate((CONFIGS[0], CONFIGS[2], CONFIGS[4])):
        z = max(z, monte_carlo_change_z(p_small, mask_small, 4, config, groups, seed))
    yield CheckResult(f"E[dQpos], E[dQu,pos]: enumeration vs {groups} one-step updates (jax.grad)", z, MC_Z_TOL, "z")
    yield CheckResult("Simulator update (sim.engine.apply_update, SGD) = jax.grad path", simulator_step_error(), 1e-10)
    z = 0.0
    for seed, config in enumerate((CONFIGS[2], CONFIGS[4])):
        z = max(z, monte_carlo_change_z(p_small, mask_small, 4, config, groups, 10 + seed, simulator=True))
    yield CheckResult(f"E[dQpos], E[dQu,pos]: enumeration vs {groups} simulator updates (SGD)", z, MC_Z_TOL, "z")

    z = max(unsampled_second_moment_z(p_small, 5, 20_000, 1),
            unsampled_second_moment_z(p_init, 8, 2_000 if quick else 20_000, 2))
    yield CheckResult("BroRL E[U2] = sum p^2 (1-p)^N vs Monte Carlo", z, MC_Z_TOL, "z")
    z = max(pass_at_k_z(0.63, 4, 50_000, 3), pass_at_k_z(0.01, 64, 50_000, 4))
    yield CheckResult("pass@k = 1-(1-Qpos)^k vs Monte Carlo", z, MC_Z_TOL, "z")

    yield CheckResult("App. H: E[Ppos|X=k] formula vs enumeration", app_h_enumeration_error([0.3, 0.05, 0.15]), 1e-14)
    worst = max(-app_h_min_increment([0.3, 0.05, 0.15], [0.4, 0.1], 12, 1.0, rw) for rw in (0.0, -1.0))
    yield CheckResult("App. H: E[SR|X=k] non-decreasing (Rc=1, Rw in {0,-1})", max(worst, 0.0), 0.0, "abs")

    quad_err, m_half = low_lr_quadrature_error()
    yield CheckResult("App. N: m_gamma (shared) vs 30-digit quadrature", quad_err, 1e-12)
    yield CheckResult("App. N: m_0.5 = 0.679 (published)", abs(m_half - PUBLISHED_M_HALF[0]), PUBLISHED_M_HALF[1], "abs")
    yield CheckResult("App. N: mean |A_GRPO| = 2 sqrt(mu(1-mu)) (shared grpo)", mean_abs_grpo_error(), 1e-12)

