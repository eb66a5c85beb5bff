"""Where the RL step's time goes at a Qwen2.5-0.5B shape: catsim's parts beside PyTorch's.

    python benchmarks/profile_llm_step.py                   # 4 layers, 4 x 256 tokens, both sides
    python benchmarks/profile_llm_step.py --side catsim     # one side only
    python benchmarks/profile_llm_step.py --json out.json

Each side runs in its own fresh process on the same random `Qwen2ForCausalLM` directory (written
by `bench_llm_scale.write_model`) and times, after a warm-up call, the best of `--repeat` calls of:

- layers forward: embedding, blocks and final norm -> hidden states (B x T x D);
- layers forward + backward: the same with the gradient of a fixed linear function of the hidden
  states with respect to every parameter;
- head forward: log π(target) of every position from the hidden states (catsim:
  `chunked_logps.tempered_logps`; PyTorch: `lm_head`, `log_softmax`, `gather`);
- head forward + backward: the same with the gradient with respect to the hidden states and the
  output projection (catsim: whole logits within `chunked_logps.WHOLE_LOGITS_ELEMENTS`; "sliced":
  vocabulary slices, the path beyond that budget, which forms the logits again in the backward pass);
- optimizer: global-norm clipping and one AdamW update of every parameter from given gradients;
- step: the whole RL step as `bench_llm_scale.py` times it (catsim: `make_functions(...).update`).

The parts do not add up to the step exactly (the step also forms the PPO loss and reads old
log-probabilities), but they say which part costs what on each side. docs/llm-scale.md quotes a run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_llm_scale import write_model  # noqa: E402

PARTS = ("layers_fwd", "layers_fwd_bwd", "head_fwd", "head_fwd_bwd", "head_fwd_bwd_sliced", "optimizer", "step")


def _best(fn, repeat: int) -> float:
    fn()  # warm-up (compiles)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _inputs(args, vocab: int):
    import numpy as np

    rng = np.random.default_rng(0)
    tokens = rng.integers(0, vocab, size=(args.batch, args.seq), dtype=np.int32)
    weights = rng.standard_normal((args.batch, args.seq - 1)).astype(np.float32)
    return tokens, weights


def catsim_parts(model: Path, args) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from catsim.llm.chunked_logps import tempered_logps
    from catsim.llm.model.checkpoint import load_model
    from catsim.llm.model.transformer import hidden_states, output_projection
    from catsim.llm.rl import RLConfig
    from catsim.llm.rl.step import make_functions

    cfg, params = load_model(model, donatable=True)
    tokens, weights = _inputs(args, cfg.vocab_size)
    tokens, weights, real = jnp.asarray(tokens), jnp.asarray(weights), jnp.ones(tokens.shape, bool)
    probe = jnp.asarray(np.random.default_rng(1).standard_normal((args.batch, args.seq, cfg.hidden_size)),
                        jnp.float32)
    ready = jax.block_until_ready
    out = {}

    layers = jax.jit(lambda p: hidden_states(p, cfg, tokens, mask_BxT=real))
    out["layers_fwd"] = _best(lambda: ready(layers(params)), args.repeat)
    layers_grad = jax.jit(jax.grad(lambda p: jnp.sum(hidden_states(p, cfg, tokens, mask_BxT=real) * probe)))
    out["layers_fwd_bwd"] = _best(lambda: ready(layers_grad(params)), args.repeat)

    h = layers(params)[:, :-1]
    w, axis = output_projection(params, cfg)

    def head(h, w):
        return jnp.sum(tempered_logps(h, w, tokens[:, 1:], vocab_axis=axis, entropy=False)[0] * weights)

    head_fwd = jax.jit(head)
    out["head_fwd"] = _best(lambda: ready(head_fwd(h, w)), args.repeat)
    head_grad = jax.jit(jax.grad(head, argnums=(0, 1)))
    out["head_fwd_bwd"] = _best(lambda: ready(head_grad(h, w)), args.repeat)

    def sliced(h, w):  # vocabulary slices whatever the size (the path beyond the whole-logits budget)
        return jnp.sum(tempered_logps(h, w, tokens[:, 1:], vocab_axis=axis, entropy=False, whole_budget=0)[0]
                       * weights)

    sliced_grad = jax.jit(jax.grad(sliced, argnums=(0, 1)))
    out["head_fwd_bwd_sliced"] = _best(lambda: ready(sliced_grad(h, w)), args.repeat)

    rl = RLConfig.from_flat(prompts_per_step=args.batch, group_size=1, adv_std="population", kl_coef=0.0,
                            entropy_coef=0.0, learning_rate=1e-6, grad_clip=1.0, clip_low=0.2, clip_high=0.2)
    fns = make_functions(cfg, rl)
    opt_state = fns.optimizer.init(params)
    grads = jax.tree.map(lambda a: a * 1e-3, params)

    @jax.jit
    def optimize(params, opt_state, grads):
        import optax

        updates, opt_state = fns.optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    out["optimizer"] = _best(lambda: ready(optimize(params, opt_state, grads)), args.repeat)

    loss_mask = np.zeros((args.batch, args.seq - 1), np.float32)
    loss_mask[:, args.seq // 2 - 1:] = 1.0
    old = fns.logp(params, tokens, real)[0]
    batch = {"tokens": tokens, "real": real, "loss_mask": jnp.asarray(loss_mask),
             "adv": weights * jnp.asarray(loss_mask), "old_logp": old, "ref_logp": old}
    state = [jax.tree.map(jnp.copy, params), opt_state]

    def step():
        p, o, metrics = fns.update(*state, batch)
        ready((p, o, metrics))
        state[:] = [p, o]

    out["step"] = _best(step, args.repeat)
    return out


def torch_parts(model: Path, args) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    net = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    net.train()
    tokens, weights = _inputs(args, net.config.vocab_size)
    ids, weights = torch.as_tensor(tokens, dtype=torch.long), torch.as_tensor(weights)
    probe = torch.randn(args.batch, args.seq, net.config.hidden_size, generator=torch.Generator().manual_seed(1))
    out = {}

    def layers():
        with torch.no_grad():
            return net.model(ids, attention_mask=torch.ones_like(ids)).last_hidden_state

    out["layers_fwd"] = _best(layers, args.repeat)

    def layers_bwd():
        net.zero_grad(set_to_none=True)
        (net.model(ids, attention_mask=torch.ones_like(ids)).last_hidden_state * probe).sum().backward()

    out["layers_fwd_bwd"] = _best(layers_bwd, args.repeat)
    h0 = layers()[:, :-1].detach()

    def head(grad: bool):
        h = h0.clone().requires_grad_(grad)
        logits = net.lm_head(h).float()
        loss = (torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0] * weights).sum()
        if grad:
            net.zero_grad(set_to_none=True)
            loss.backward()
        return loss

    with torch.no_grad():
        out["head_fwd"] = _best(lambda: head(False), args.repeat)
    out["head_fwd_bwd"] = _best(lambda: head(True), args.repeat)
    out["head_fwd_bwd_sliced"] = out["head_fwd_bwd"]  # PyTorch forms the whole logits

    opt = torch.optim.AdamW(net.parameters(), lr=1e-6, betas=(0.9, 0.999), weight_decay=0.0)
    for p in net.parameters():
        p.grad = p.detach() * 1e-3

    def optimize():
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()

    out["optimizer"] = _best(optimize, args.repeat)

    mask = torch.zeros(args.batch, args.seq - 1)
    mask[:, args.seq // 2 - 1:] = 1.0
    advantage = weights * mask

    def logp_of():
        logits = net(ids, attention_mask=torch.ones_like(ids)).logits[:, :-1].float()
        return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]

    with torch.no_grad():
        old = logp_of()

    def step():
        opt.zero_grad(set_to_none=True)
        ratio = torch.exp(logp_of() - old)
        per_token = -torch.minimum(ratio * advantage, torch.clamp(ratio, 0.8, 1.2) * advantage)
        ((per_token * mask).sum() / mask.sum()).backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()

    out["step"] = _best(step, args.repeat)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4, help="transformer blocks (default 4)")
    parser.add_argument("--batch", type=int, default=4, help="rows (default 4)")
    parser.add_argument("--seq", type=int, default=256, help="tokens per row (default 256)")
    parser.add_argument("--repeat", type=int, default=3, help="timed calls per part, best kept (default 3)")
    parser.add_argument("--side", choices=["both", "catsim", "torch"], default="both")
    parser.add_argument("--model", default=None, help="use this model directory instead of writing one")
    parser.add_argument("--json", default=None, help="also write the numbers to this file")
    parser.add_argument("--worker", choices=["catsim", "torch"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        fn = catsim_parts if args.worker == "catsim" else torch_parts
        print(json.dumps(fn(Path(args.model), args)))
        return 0
    sides = ("catsim", "torch") if args.side == "both" else (args.side,)
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(args.model) if args.model else Path(tmp) / "qwen25-05b-shape"
        if not args.model:
            write_model(model, args.layers)
        results = {}
        for side in sides:
            cmd = [sys.executable, __file__, "--worker", side, "--model", str(model), "--batch", str(args.batch),
                   "--seq", str(args.seq), "--repeat", str(args.repeat)]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
            if proc.returncode != 0:
                raise SystemExit(f"{side} failed:\n{proc.stderr[-3000:]}")
            results[side] = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"Qwen2.5-0.5B shape, {args.layers} layers, {args.batch} x {args.seq} tokens; best of {args.repeat} (s)")
    print(f"{'part':16s}" + "".join(f"{s:>10s}" for s in sides) + ("     ratio" if len(sides) == 2 else ""))
    for part in PARTS:
        row = [results[s][part] for s in sides]
        ratio = f"{row[0] / row[1]:10.2f}" if len(sides) == 2 else ""
        print(f"{part:16s}" + "".join(f"{x:10.3f}" for x in row) + ratio)
    if args.json:
        from catsim.files import write_text

        write_text(args.json, json.dumps({"args": vars(args), "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
