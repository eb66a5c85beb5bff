"""The simulator's engine: a pure `lax.scan` over policy-gradient steps, vmapped over runs.

`make_run(config)` does the host-side set-up and returns a pure function

    run(constants, key, gamma, learning_rate) -> Trajectory     one run: T steps, metrics every k

whose batched form `make_batched_run(config)` = jit(vmap(run)) runs R runs at once (R = γ values ×
seeds); its run axis may be sharded over devices (`run_sharding`). For long runs with a progress bar
the host loop calls the batched `chunk` of `make_chunked(config, records_per_chunk)` instead; the
two agree to float32 rounding (different compiled programs may fuse differently). One step (paper App. J, §4):

  1. draw a group of N actions i.i.d. from π = softmax(z)       (`sampler.sample_draws`)
  2. binary rewards → advantages from the counts                 (`objectives.advantages`)
  3. focal weight g = (1 − μ̂)^γ_t                                (`objectives.focal`)
  4. `ppo_epochs` optimiser steps (optax) on the surrogate loss  (`objectives.losses`), aggregated
     over the group's draws by `token_mean(loss_V, counts_V)` = (1/N)·Σ_j loss(o_j)
  5. metrics of the new policy                                   (`sim.metrics`)

Updates whose gradient has a closed form (one optimiser step, no entropy/KL term, no asymmetric
weights: every Fig. 2 method) take the lean path of `catsim.sim.lean` (the gradient from the N
draws and the carried π, no autodiff and no log-softmax in the step); the others differentiate
`make_loss` with `jax.grad`. The carry holds π = softmax(z) and the last group's draws; metrics
form log π and the counts at record time only.

Legend: V actions, N group size, R runs, S recorded steps.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from catsim.errors import CatsimError
from catsim.objectives import asymmetric, focal, losses
from catsim.objectives.grad_clip import dual_threshold_clip
from catsim.sim import metrics, policy, sampler
from catsim.sim.config import SimConfig, UpdateConfig
from catsim.sim.devices import (  # noqa: F401  (run_sharding, use_cpu_cores: engine API)
    over_runs,
    run_sharding,
    use_cpu_cores,
)
from catsim.sim.lean import class_advantages, lean_update, uses_lean_step


class Constants(NamedTuple):
    """Arrays shared by every run of a config (passed as arguments, not baked into the program)."""

    z0: jax.Array  # [V] initial logits
    correct: jax.Array  # [V] bool correct mask


class Trajectory(NamedTuple):
    """Recorded metrics of one run ([R, ...] for a batch): each metric [S+1] at steps 0, k, …, T.
    Group metrics at step 0 are NaN (no update has happened yet)."""

    metrics: dict  # name -> [S+1] float32
    final_logits: jax.Array  # [V] z_T


class State(NamedTuple):
    """Carry of the scan over steps (one run)."""

    z: jax.Array  # [V] logits
    p: jax.Array  # [V] softmax(z), the policy the next group is drawn from
    opt_state: optax.OptState
    group: dict  # scalar group metrics of the last update (GROUP_SCALARS)
    actions: jax.Array  # [N] int32 the last group's draws (`sampler.sample_draws`)
    weights: jax.Array  # [N] 1 for the draws that count, else 0
    p_before: jax.Array  # [V] probabilities before the last update


# Group metrics every step computes (scalars); the two unsampled-mass metrics are computed at
# record time from the carried counts and log-probabilities, so one step program serves all steps.
GROUP_SCALARS = ("mu_hat", "focal", "active", "draws")


def make_constants(config: SimConfig) -> Constants:
    """Initial logits and correct mask of `config.policy` as device arrays."""
    return Constants(*jax.device_put((policy.initial_logits(config.policy),
                                      policy.correct_mask(config.policy))))


def make_optimizer(update: UpdateConfig, learning_rate) -> optax.GradientTransformation:
    """optax optimiser for `update.optimizer`; `learning_rate` may be traced (one per run)."""
    if update.optimizer == "sgd":
        tx = optax.sgd(learning_rate)
    elif update.optimizer == "adam":
        tx = optax.adam(learning_rate, b1=update.b1, b2=update.b2, eps=update.adam_eps)
    else:
        tx = optax.adamw(
            learning_rate, b1=update.b1, b2=update.b2, eps=update.adam_eps,
            weight_decay=update.weight_decay,
        )
    if update.dual_clip is not None:  # asymmetric GRPO §3.3: clip/amplify the raw gradient first
        clip = dual_threshold_clip(
            update.dual_clip, update.dual_clip_lower, update.dual_clip_amplification
        )
        tx = optax.chain(clip, tx)
    return tx


def surrogate_fn(update: UpdateConfig):
    """Per-token loss f(logp, old_logp, advantages) of `update.surrogate` with its clip bounds."""
    base = losses.SURROGATES[update.surrogate]
    if update.surrogate in ("grpo", "dapo", "cispo"):
        kwargs = {}
        if update.clip_low is not None:
            kwargs["clip_low"] = update.clip_low
        if update.clip_high is not None:
            kwargs["clip_high"] = update.clip_high
        return functools.partial(base, **kwargs)
    return base


def per_action_advantages(update: UpdateConfig, counts_V, correct_V, gamma_t):
    """Advantage of every action for a group given by its counts (binary rewards).

    Returns (adv_V, mu_hat, g, active): adv_V = g·A_c on correct, g·A_w on incorrect actions.
    """
    group_size = jnp.sum(counts_V)
    num_correct = jnp.sum(jnp.where(correct_V, counts_V, 0.0))
    a_correct, a_wrong = class_advantages(update, num_correct, group_size)
    mu_hat = num_correct / group_size  # = advantages.success_rate for binary rewards
    g = focal.focal_weight(mu_hat, gamma_t)
    adv_V = g * jnp.where(correct_V, a_correct, a_wrong)
    active = (num_correct > 0) & (num_correct < group_size)
    return adv_V, mu_hat, g, active


# --- asymmetric GRPO (docs/asymmetric-grpo.md): the components that make sense for one-step categorical actions ---


def asymmetric_per_action(update: UpdateConfig, adv_V, correct_V, z_V):
    """Channel / confidence weights on per-action advantages (docs/asymmetric-grpo.md §1–2).

    Every draw of action a shares A_a, r_a = 1[a correct] (the article's r ∈ [0, 1]), π_a =
    softmax(z)_a (the behaviour policy) and one confidence weight c of the whole policy. [V] -> [V].
    """
    cfg = update.asym
    conf = None
    if update.asym_confidence:
        c = asymmetric.confidence_weight(z_V, baseline=cfg.baseline, kl_direction=cfg.kl_direction)
        conf = jnp.broadcast_to(c, adv_V.shape)
    if not update.asym_channels:
        return adv_V if conf is None else jnp.where(adv_V < 0, conf * adv_V, adv_V)
    return asymmetric.asymmetric_advantages(
        adv_V, correct_V.astype(adv_V.dtype), jax.nn.softmax(z_V), conf, config=cfg
    )


def recomposed_counts(update: UpdateConfig, counts_V, correct_V, logp_V, group_size: int):
    """Counts of the draws kept by `asymmetric.recompose_group` (article §3.2). [V] -> [V].

    The group is expanded to its N draws (action order), scored by log π(a) (the "best" positive is
    the most probable one; the kept negatives are the most probable wrong draws), recomposed, and
    counted back per action. `group_size` N must be static (it sizes the expansion).
    """
    num_actions = counts_V.shape[0]
    actions_N = jnp.repeat(
        jnp.arange(num_actions), counts_V.astype(jnp.int32), total_repeat_length=group_size
    )
    keep_N = asymmetric.recompose_group(correct_V[actions_N], logp_V[actions_N], config=update.asym)
    return jax.ops.segment_sum(keep_N.astype(counts_V.dtype), actions_N, num_segments=num_actions)


def make_loss(update: UpdateConfig, z0_V):
    """loss(z, old_logp_V, counts_V, adv_V) -> []: surrogate + entropy bonus + KL to π_0."""
    surrogate = surrogate_fn(update)

    def loss(z_V, old_logp_V, counts_V, adv_V):
        logp_V = jax.nn.log_softmax(z_V)
        value = losses.token_mean(surrogate(logp_V, old_logp_V, adv_V), counts_V)
        if update.entropy_coef:
            value = value - update.entropy_coef * losses.entropy(z_V)
        if update.kl_coef:
            value = value + update.kl_coef * losses.categorical_kl(z_V, z0_V)
        return value

    return loss


def apply_update(update: UpdateConfig, tx, consts, z_V, logp_V, opt_state, counts_V, gamma_t,
                 group_size: int | None = None):
    """One policy update on a sampled group (all `update.ppo_epochs` optimiser steps).

    Asymmetric GRPO: advantages are computed on the full group, then weighted by channel
    (`asymmetric_per_action`); with `asym_recompose` the loss averages over the kept draws only
    (`recomposed_counts`, needs the static `group_size`); the dual clip lives in `tx`.

    Args:
      update: the update rule; tx: its optax optimiser; consts: `Constants` (z_0 for the KL term,
        the correct mask).
      z_V: [V] logits before the update; logp_V: [V] their log-softmax (the behaviour policy π_old).
      opt_state: optimiser state; counts_V: [V] draws per action (Σ = N); gamma_t: [] focal γ.

    Returns:
      (z_V', opt_state', (mu_hat, g, active)).
    """
    adv_V, mu_hat, g, active = per_action_advantages(update, counts_V, consts.correct, gamma_t)
    loss_counts_V = counts_V
    if update.asym_channels or update.asym_confidence:
        adv_V = asymmetric_per_action(update, adv_V, consts.correct, z_V)
    if update.asym_recompose:
        if group_size is None:
            raise CatsimError("asym_recompose needs the static group_size")
        loss_counts_V = recomposed_counts(update, counts_V, consts.correct, logp_V, group_size)
    grad = jax.grad(make_loss(update, consts.z0))
    for _ in range(update.ppo_epochs):
        updates, opt_state = tx.update(grad(z_V, logp_V, loss_counts_V, adv_V), opt_state, z_V)
        z_V = optax.apply_updates(z_V, updates)
    return z_V, opt_state, (mu_hat, g, active)


def _nan_group(names=metrics.GROUP_METRICS):
    return {name: jnp.float32(jnp.nan) for name in names}


def _draw(update: UpdateConfig, method: str, n: int, key, p_V, correct_V, num_draws=None):
    """One group (DAPO dynamic sampling: redraw all-equal groups, capped).

    Returns ((actions_N, weights_N) of `sampler.sample_draws`, number of groups drawn).
    n: static number of draws; num_draws: optional traced group size <= n (`sampler.sample_counts`).
    """
    sample = functools.partial(sampler.sample_draws, group_size=n, method=method,
                               num_draws=num_draws)
    size = n if num_draws is None else num_draws
    group = sample(key, p_V)
    if not update.dynamic_sampling:
        return group, jnp.float32(1.0)

    def cond(val):
        (actions_N, weights_N), tries = val
        x = jnp.sum(jnp.where(correct_V[actions_N], weights_N, 0.0))
        return ((x == 0) | (x == size)) & (tries < update.max_resamples)

    def body(val):
        _, tries = val
        return sample(jax.random.fold_in(key, tries + 1), p_V), tries + 1

    group, tries = jax.lax.while_loop(cond, body, (group, jnp.int32(0)))
    return group, (tries + 1).astype(jnp.float32)


def make_chunked(config: SimConfig, records_per_chunk: int, shared_group_size: bool = False):
    """Pure per-run functions for a host loop over chunks of `records_per_chunk · log_every` steps:

      init(constants, learning_rate) -> State
      chunk(constants, state, key, gamma, learning_rate, first_record) -> (State, metrics)
          metrics: name -> [records_per_chunk], recorded after steps
          (first_record + i + 1)·log_every, i = 0 … records_per_chunk − 1.

    With `shared_group_size` the group size is a traced argument instead, so one compiled program
    serves every N <= config.group_size (`can_share_group_size`; counts are identical):
      chunk(constants, state, key, gamma, learning_rate, first_record, group_size)

    The key of step t is fold_in(run_key, t), so results do not depend on the chunking.
    """
    update = config.update
    n = config.group_size
    method = sampler.choose_sampler(config.sampler, n)
    k = config.log_every
    if shared_group_size and not can_share_group_size(config):
        raise CatsimError("this configuration needs a static group size (asym_recompose)")

    lean = uses_lean_step(update)
    if update.unlikeliness_beta > 0 and not lean:
        raise CatsimError("the unlikeliness reward runs on the lean step only (LEAN_STEP is off)")

    def init(consts: Constants, learning_rate) -> State:
        tx = make_optimizer(update, learning_rate)
        p0 = jnp.exp(jax.nn.log_softmax(consts.z0))
        return State(consts.z0, p0, tx.init(consts.z0), _nan_group(GROUP_SCALARS),
                     jnp.zeros((n,), jnp.int32), jnp.zeros((n,), p0.dtype), p0)

    def step(consts, tx, schedule, num_draws, state: State, t):
        key, step_index = t
        (actions_N, weights_N), draws = _draw(
            update, method, n, key, state.p, consts.correct, num_draws)
        size = n if num_draws is None else num_draws
        # The curriculum schedule reads this group's success rate (an O(N) sum over the draws);
        # the others only the step.
        num_correct = jnp.sum(jnp.where(consts.correct[actions_N], weights_N, 0.0))
        gamma_t = schedule(step_index, num_correct / size)
        if lean:
            z_V, opt_state, (mu_hat, g, active) = lean_update(
                update, tx, consts.correct, state.z, state.p, state.opt_state, actions_N,
                weights_N, gamma_t)
            p_V = jax.nn.softmax(z_V)
        else:
            counts_V = sampler.scatter_add(jnp.zeros_like(state.p), actions_N, weights_N)
            z_V, opt_state, (mu_hat, g, active) = apply_update(
                update, tx, consts, state.z, jax.nn.log_softmax(state.z), state.opt_state,
                counts_V, gamma_t, n)
            p_V = jnp.exp(jax.nn.log_softmax(z_V))
        group = {"mu_hat": mu_hat, "focal": g, "active": active.astype(jnp.float32),
                 "draws": draws}
        return State(z_V, p_V, opt_state, group, actions_N, weights_N, state.p), None

    def chunk(consts: Constants, state: State, key, gamma, learning_rate, first_record,
              group_size=None):
        if shared_group_size and group_size is None:
            raise CatsimError("a shared-group-size chunk needs its group_size argument")
        num_draws = group_size if shared_group_size else None
        tx = make_optimizer(update, learning_rate)
        schedule = dataclasses.replace(update.gamma, gamma=gamma)
        p0_V = jax.nn.softmax(consts.z0)
        one_step = functools.partial(step, consts, tx, schedule, num_draws)

        def record(state, r):
            steps = r * k + jnp.arange(k)
            keys = jax.vmap(lambda s: jax.random.fold_in(key, s))(steps)
            state, _ = jax.lax.scan(one_step, state, (keys, steps))
            counts_V = sampler.scatter_add(jnp.zeros_like(state.p), state.actions, state.weights)
            unsampled = {
                "qu_pos_before": metrics.unsampled_correct_mass(
                    state.p_before, counts_V, consts.correct),
                "qu_pos_after": metrics.unsampled_correct_mass(state.p, counts_V, consts.correct),
            }
            logp_V = jax.nn.log_softmax(state.z)
            return state, (metrics.state_metrics(logp_V, p0_V, consts.correct) | state.group
                           | unsampled)

        return jax.lax.scan(record, state, first_record + jnp.arange(records_per_chunk))

    return init, chunk


# Group sizes that share one compiled program (`program_group_size`): every N up to a bound runs
# the program of the bound, drawing bound-many uniforms and counting the first N. The bounds keep
# the wasted draws small against the compile time they save (≈ 1.3–1.8 s CPU per program; a
# draw costs ≈ 0.1 µs): N = 2…64, 128…512, 1024–2048 and 4096–8192 share one program each
# (`shares_program`: only when the job has another N of the same bound); larger N (where draws
# dominate a step) get their own.
SHARED_GROUP_SIZE_BOUNDS = (64, 512, 2048, 8192)


def can_share_group_size(config: SimConfig) -> bool:
    """True when one program may serve several group sizes with identical results: the draws of a
    key must be a prefix of a longer draw (JAX's default partitionable Threefry) and no part of
    the update may need N statically (asym_recompose does)."""
    return (not config.update.asym_recompose
            and bool(jax.config.jax_threefry_partitionable)
            and jax.config.jax_default_prng_impl == "threefry2x32")


def program_group_size(config: SimConfig) -> int:
    """The static group size of the program that runs `config`: the smallest bound in
    SHARED_GROUP_SIZE_BOUNDS >= N that uses the same sampler as N, else N itself."""
    n = config.group_size
    if not can_share_group_size(config):
        return n
    method = sampler.choose_sampler(config.sampler, n)
    for bound in SHARED_GROUP_SIZE_BOUNDS:
        if n <= bound and sampler.choose_sampler(config.sampler, bound) == method:
            return bound
    return n


def shares_program(config: SimConfig, group_sizes) -> bool:
    """True when the shared program of `config` (`program_group_size`) would also serve another N
    of `group_sizes`; otherwise compiling it saves nothing and only wastes draws."""
    if not can_share_group_size(config):
        return False
    bound = program_group_size(config)
    return any(int(n) != config.group_size
               and program_group_size(dataclasses.replace(config, group_size=int(n))) == bound
               for n in group_sizes)


@jax.jit
def initial_metrics(consts: Constants) -> dict:
    """Metrics of the initial policy (group metrics NaN): the step-0 record. One compiled program
    (run op by op, its ≈ 20 small operations each compiled on first use cost ≈ 1 s of start-up)."""
    logp0 = jax.nn.log_softmax(consts.z0)
    return metrics.state_metrics(logp0, jnp.exp(logp0), consts.correct) | _nan_group()


def make_run(config: SimConfig):
    """The pure single-run function `run(constants, key, gamma, lr) -> Trajectory` (all T steps)."""
    num_records = config.steps // config.log_every
    init, chunk = make_chunked(config, num_records)

    def run(consts: Constants, key, gamma, learning_rate) -> Trajectory:
        state, recs = chunk(consts, init(consts, learning_rate), key, gamma, learning_rate, 0)
        first = initial_metrics(consts)
        traj = {name: jnp.concatenate([first[name][None], recs[name]]) for name in metrics.ALL_METRICS}
        return Trajectory(traj, state.z)

    return run


def make_batched_run(config: SimConfig):
    """jit(vmap(run)) over runs: (constants, keys [R], gammas [R], lrs [R]) -> Trajectory [R, …]."""
    return jax.jit(jax.vmap(make_run(config), in_axes=(None, 0, 0, 0)))


def make_batched_chunked(config: SimConfig, records_per_chunk: int, shared_group_size: bool = False,
                         sharding=None):
    """Jitted, vmapped (init, chunk) of `make_chunked`: run axis R first in every per-run input.

    Cached per (config without its label, records_per_chunk, sharding), so repeated cells reuse
    the compiled programs. With `shared_group_size` the program is that of
    `program_group_size(config)` and `chunk` takes the group size N as a last (unbatched) argument.
    `sharding` (`run_sharding`): every output of both is placed on it, so the state init returns
    has the sharding chunk returns and one compiled chunk serves every call of a cell (left to
    JAX, init's state lands on one device — it does not read the sharded learning rates — and
    the second call compiled the chunk again for the state the first one returned)."""
    config = dataclasses.replace(config, method="")
    if shared_group_size:
        config = dataclasses.replace(config, group_size=program_group_size(config))
    return _batched_chunked(config, records_per_chunk, shared_group_size, sharding)


# XLA CPU backend optimisation level of the chunk program. Level 1 instead of the default
# (measured, N = 8, 8 runs, shared 2-core machine: compile 4.9 s -> 3.1 s CPU, run time unchanged
# within noise; level 0 made the run 3x slower). Compilation is a large share of a Fig. 2 sweep
# (one program per N). 512-bit vectors where the CPU has them (XLA's CPU default prefers 256, for
# processors that slow their clock on 512-bit work): one process, A/B, ms per run-step, 8 runs,
# AMD EPYC with AVX-512: N = 8 0.075 -> 0.067, 1024 0.105 -> 0.096, 4096 0.205 -> 0.190,
# 16384 0.330 -> 0.307, 65536 0.718 -> 0.679, 131072 1.28 -> 1.23; results identical. A CPU
# without AVX-512 uses the widest vectors it has; accelerators ignore the option.
CHUNK_COMPILER_OPTIONS = {"xla_backend_optimization_level": 1, "xla_cpu_prefer_vector_width": 512}


@functools.lru_cache(maxsize=64)
def _batched_chunked(config: SimConfig, records_per_chunk: int, shared_group_size: bool = False,
                     sharding=None):
    init, chunk = make_chunked(config, records_per_chunk, shared_group_size)
    in_axes = (None, 0, 0, 0, 0, None) + ((None,) if shared_group_size else ())
    placed = {} if sharding is None else {"out_shardings": sharding}
    return (
        jax.jit(jax.vmap(init, in_axes=(None, 0)), **placed),
        jax.jit(over_runs(chunk, in_axes, sharding), donate_argnums=(1,),
                compiler_options=CHUNK_COMPILER_OPTIONS, **placed),
    )


def run_keys(seeds, sharding=None) -> jax.Array:
    """One PRNG key per seed (`jax.random.key(seed)`): a run's draws depend on its seed only.

    For the default Threefry keys and seeds 0 … 2³¹ − 1 the key data [0, seed] is written
    directly (`jax.random.key` of such a seed gives exactly that; tested) and placed on
    `sharding` (`run_sharding`) at once, which saves compiling and running three small programs
    at every start."""
    seeds = [int(s) for s in seeds]
    if (jax.config.jax_default_prng_impl == "threefry2x32"
            and all(0 <= s < 2**31 for s in seeds)):
        data = np.array([[0, s] for s in seeds], np.uint32)
        return jax.random.wrap_key_data(jax.device_put(data, sharding))
    return jax.device_put(jnp.stack([jax.random.key(s) for s in seeds]), sharding)


# Largest group size whose runs `sweep.run_cell(shard=True)` splits over the host devices (None:
# every N). It was 2048 while the large-N draw (a bisection searched run by run, then guide
# tables) was work XLA's CPU runtime spread over the cores itself, so two programs competed for
# them (wall s, 1 vs 2 devices: N = 4096 3.39 vs 3.53, 16384 5.17 vs 6.35). The tree search's
# small batched gathers run on one core, and splitting the runs now pays at every N (AMD EPYC,
# 2 cores, 8 runs, steady-state ms per step, best of 3 processes, 1 vs 2 devices: N = 4096 0.89 vs
# 0.74, 8192 0.75 vs 0.67, 16384 1.36 vs 0.87, 32768 1.43 vs 1.08, 65536 2.21 vs 1.67, 131072
# 3.27 vs 2.08; since then each device runs its runs one after another, `devices.over_runs`).
# Results agree either way to float32 rounding (docs/simulator.md).
SHARD_MAX_GROUP_SIZE: int | None = None
