"""When does the focal weight change an RL update? F-GRPO multiplies a group's advantages by
g = (1 − μ̂)^γ, i.e. its loss gradient by g. The optimizer then removes a scale that is uniform over
a mini-batch in two ways:

- global-norm clipping (1.0): when the mini-batch gradient norm exceeds the clip — the usual case at
  these learning rates — the clipped gradient is G/‖G‖ whatever g is;
- Adam: the first update from a fresh state is lr·m̂/(√v̂ + ε) = lr·G/(|G| + ε/g), the same for any
  g up to ε.

So with ONE group per mini-batch F-GRPO gives the GRPO update (here: two updates with the clip
active agree to 1e-3 of the largest parameter move; one unclipped Adam step agrees to 1e-3 of the
move on all but < 2% of the entries, those whose gradient is of order ε), and the focal weight
only acts when groups with different μ̂ share a mini-batch (then it re-weights them against each
other: Adam's first step ≈ lr·sign(g₁G₁ + g₂G₂) flips on > 4% of the entries, by up to 2·lr). Later
Adam steps with a different g per step are not scale-free either (m and v mix steps), but that only
re-weights steps against each other. Hence the pipeline's
mini-batches hold several groups (docs/llm-rl.md).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from catsim.llm import rl
from catsim.llm.model.checkpoint import load_model
from catsim.llm.rl import step as rl_step

N = 4
SCORES = np.array([[1, 0, 0, 0], [1, 1, 1, 0]], np.float32)  # μ̂ = 0.25 (g = 0.87) and 0.75 (g = 0.5)


def _batch(fns, params, adv_PxN):
    rng = np.random.default_rng(3)
    rows, t = adv_PxN.size, 10
    tokens = rng.integers(4, 7, (rows, t)).astype(np.int32)
    real = np.ones((rows, t), bool)
    loss_mask = np.zeros((rows, t - 1), np.float32)
    loss_mask[:, 4:] = 1.0
    adv = np.asarray(adv_PxN, np.float32).reshape(-1)[:, None] * loss_mask
    old = np.asarray(fns.logp(params, jnp.asarray(tokens), jnp.asarray(real))[0])
    return {"tokens": tokens, "real": real, "loss_mask": loss_mask, "adv": adv, "old_logp": old}


def _train(params, model_cfg, gamma, mini_batch, grad_clip, groups=(1.0, 1.0)):
    """One RL step's updates on the fixed two-group batch (`groups`: per-group loss weight, 0 drops
    a group); returns (flat params, pre-clip gradient norm of each update)."""
    cfg = rl.RLConfig.from_flat(prompts_per_step=2, group_size=N, mini_batch_size=mini_batch, learning_rate=1e-2,
                      grad_clip=grad_clip, gamma=gamma)
    fns = rl_step.make_functions(model_cfg, cfg)
    adv, _, _ = rl_step.compute_advantages(SCORES, cfg, gamma, np.asarray(groups, np.float32))
    params = jax.tree.map(jnp.copy, params)  # the update donates what it is given
    batch = _batch(fns, params, adv)
    state = fns.optimizer.init(params)
    norms = []
    for s0 in range(0, 2 * N, mini_batch):
        mini = {k: jnp.asarray(v[s0:s0 + mini_batch]) for k, v in batch.items()}
        params, state, metrics = fns.update(params, state, mini)
        norms.append(float(metrics["grad_norm"]))
    return np.concatenate([np.ravel(x) for x in jax.tree.leaves(params)]), norms


def test_focal_weight_cancels_per_group_minibatch_and_acts_across_groups(tmp_path):
    from llm_rl_helpers import make_base_model

    model_cfg, params = load_model(make_base_model(tmp_path / "base", init_std=0.3))
    p0 = np.concatenate([np.ravel(x) for x in jax.tree.leaves(params)])
    g = (1 - SCORES.mean(axis=1)) ** 0.5

    # one group per mini-batch, clip active in every update (pre-clip norm × g > 1): F-GRPO == GRPO
    plain, norms = _train(params, model_cfg, 0.0, N, 1.0)
    focal, _ = _train(params, model_cfg, 0.5, N, 1.0)
    assert min(n * w for n, w in zip(norms, g)) > 1.0, norms  # the premise: clipping is active
    move = np.max(np.abs(plain - p0))
    assert move > 1e-3
    assert np.max(np.abs(focal - plain)) < 1e-3 * move, (np.max(np.abs(focal - plain)), move)

    # no clipping, one Adam step from a fresh state, only the first group carries loss: equal up to
    # Adam's ε, i.e. on every entry whose gradient is not itself of order ε (all but < 2% here)
    one_plain, _ = _train(params, model_cfg, 0.0, 2 * N, 1e9, groups=(1.0, 0.0))
    one_focal, _ = _train(params, model_cfg, 0.5, 2 * N, 1e9, groups=(1.0, 0.0))
    move1 = np.max(np.abs(one_plain - p0))
    assert np.mean(np.abs(one_focal - one_plain) > 1e-3 * move1) < 0.02

    # both groups in one mini-batch: the focal weight re-weights them, the update changes
    both_plain, _ = _train(params, model_cfg, 0.0, 2 * N, 1e9)
    both_focal, _ = _train(params, model_cfg, 0.5, 2 * N, 1e9)
    move2 = np.max(np.abs(both_plain - p0))
    # (Adam's first step is ≈ lr·sign(g₁G₁ + g₂G₂): entries whose sign the re-weighting flips move
    # by ≈ 2·lr the other way; 7% of them here, against < 2% rounding in the one-group case)
    assert np.mean(np.abs(both_focal - both_plain) > 1e-3 * move2) > 0.04
    assert np.max(np.abs(both_focal - both_plain)) > 0.5 * move2


def test_pipeline_default_minibatches_mix_groups_for_the_focal_runs():
    from catsim.experiments.llm_pipeline import PipelineConfig, _rl_config, parse_run

    pc = PipelineConfig()
    for spec in pc.runs:
        name, fields = parse_run(spec, pc.gamma)
        cfg = _rl_config(pc, fields, seed=0, max_new=8)
        if cfg.gamma.gamma > 0:
            assert cfg.mini_batch // cfg.group_size >= 2, (spec, cfg.mini_batch, cfg.group_size)
