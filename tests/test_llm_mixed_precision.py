"""Mixed precision: float32 master weights, gradients and optimizer state around bfloat16 compute.

At a small learning rate (1e-6, the 7B recipe's) an Adam step moves each weight by about lr, far
below bfloat16's spacing near typical weights (2^-8 relative: ~1e-4 at 0.02, ~4e-3 at 1): pure
bfloat16 parameters round almost every such step away; float32 masters keep all of them."""

import jax
import jax.numpy as jnp
import numpy as np

from catsim.llm.model.config import ModelConfig
from catsim.llm.model.transformer import init_params
from catsim.llm.rl import RLConfig
from catsim.llm.rl.step import make_functions

LR = 1e-6


def _setup():
    cfg = ModelConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                      num_kv_heads=2, head_dim=8, qkv_bias=True)
    params = init_params(cfg, jax.random.key(0))
    rl = RLConfig.from_flat(learning_rate=LR, group_size=4, prompts_per_step=2, max_new_tokens=8)
    rng = np.random.default_rng(0)
    b, t = 8, 12
    tokens = rng.integers(0, cfg.vocab_size, size=(b, t)).astype(np.int32)
    real = np.ones((b, t), bool)
    real[:4, :2] = False  # left-padded prompts
    loss_mask = np.zeros((b, t - 1), np.float32)
    loss_mask[:, 3:] = 1.0
    adv = rng.choice([-1.0, 1.0], size=(b, 1)).astype(np.float32) * loss_mask
    batch = {"tokens": tokens, "real": real, "loss_mask": loss_mask, "adv": adv}
    return cfg, params, rl, batch


def _step(model_cfg, params, rl, batch):
    fns = make_functions(model_cfg, rl)
    old_logp, _ = fns.logp(params, batch["tokens"], batch["real"])
    batch = dict(batch, old_logp=old_logp)
    opt_state = fns.optimizer.init(params)
    grads, _ = fns.grads(params, batch)
    # the update donates its parameters and optimizer state: give it copies, the caller keeps `params`
    new_params, opt_state, _ = fns.update(jax.tree.map(jnp.copy, params), opt_state, batch)
    return grads, new_params, opt_state


def _leaves(tree):
    return [np.asarray(x, np.float32) for x in jax.tree.leaves(tree)]


def test_small_lr_step_moves_every_weight_with_float32_masters():
    cfg, params32, rl, batch = _setup()
    grads32, new32, _ = _step(cfg, params32, rl, batch)
    mixed_cfg = cfg.replace(dtype="bfloat16", weight_dtype="float32")
    grads_mixed, new_mixed, opt_mixed = _step(mixed_cfg, params32, rl, batch)

    # masters, gradients and every floating optimizer leaf (Adam moments) stay float32
    for tree in (new_mixed, grads_mixed, opt_mixed):
        floats = [x for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.floating)]
        assert floats and all(x.dtype == jnp.float32 for x in floats)

    should_move = np.concatenate([np.abs(g).ravel() > 0 for g in _leaves(grads32)])
    old = np.concatenate([p.ravel() for p in _leaves(params32)])
    delta32 = np.concatenate([p.ravel() for p in _leaves(new32)]) - old
    delta_mixed = np.concatenate([p.ravel() for p in _leaves(new_mixed)]) - old
    assert should_move.mean() > 0.5  # the batch reaches most weights
    # bfloat16 compute reaches the same weights (a handful of gradient sums can cancel to exactly
    # 0 in bfloat16), and every weight with a gradient moved: no update was rounded away
    has_grad = np.concatenate([np.abs(g).ravel() > 0 for g in _leaves(grads_mixed)])
    assert has_grad[should_move].mean() > 0.999
    assert np.all(delta_mixed[has_grad] != 0)
    # ... by about lr, as the float32 run's (Adam's first step is ~lr·sign(g)); bf16 compute flips
    # the sign of some tiny gradients, so compare the updates as vectors
    assert np.median(np.abs(delta_mixed[should_move])) > 0.5 * LR
    cosine = delta_mixed @ delta32 / (np.linalg.norm(delta_mixed) * np.linalg.norm(delta32))
    assert cosine > 0.9

    # the failure this prevents: pure bfloat16 parameters keep almost none of the step
    bf_cfg = cfg.replace(dtype="bfloat16")
    params_bf = jax.tree.map(lambda p: p.astype(jnp.bfloat16), params32)
    _, new_bf, opt_bf = _step(bf_cfg, params_bf, rl, batch)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(new_bf))
    moved_bf = np.concatenate([(a != b).ravel() for a, b in zip(_leaves(new_bf), _leaves(params_bf))])
    assert moved_bf[should_move].mean() < 0.05


def test_sft_state_stays_float32_under_bfloat16_compute():
    from catsim.llm.sft import Batch, SFTConfig, init_state, train_step

    cfg, _, _, batch = _setup()
    model_cfg = cfg.replace(dtype="bfloat16", weight_dtype="float32")
    state = init_state(model_cfg, SFTConfig())
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state.params))
    target = np.pad(batch["loss_mask"], ((0, 0), (1, 0))).astype(bool)
    sft_batch = Batch(jnp.asarray(batch["tokens"]), jnp.asarray(batch["real"]), jnp.asarray(target))
    new, metrics = train_step(state, sft_batch, jnp.asarray(LR, jnp.float32), model_cfg=model_cfg,
                              grad_clip=1.0, weight_decay=0.0)
    floats = [x for x in jax.tree.leaves((new.params, new.opt_state))
              if jnp.issubdtype(x.dtype, jnp.floating)]
    assert all(x.dtype == jnp.float32 for x in floats)
    assert np.isfinite(float(metrics["loss"]))
