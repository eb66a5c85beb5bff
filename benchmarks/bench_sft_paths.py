"""Many-solution warm-up: does the SFT model reproduce the stated Zipf distribution over correct
answers? Trains `catsim llm sft --task paths` (or reuses --model) and reports, per answer rank k,
the mean teacher-forced share π(y_k | x) / Σ_j π(y_j | x) against the warm-up weight w_k, plus the
total correct mass Σ_j π(y_j | x), on train and held-out prompts.

    PYTHONPATH=. python benchmarks/bench_sft_paths.py --out /tmp/bench-paths [--steps 300] [--model DIR]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import numpy as np


def rank_shares(task, params, cfg, tok, prompts):
    from catsim.llm.scoring import answer_logprob_fn as model_logprob_fn
    from catsim.llm.tasks.answer_mass import answer_probabilities
    from catsim.llm.tasks.char_tokenizer import EOS_ID

    fn = model_logprob_fn(params, cfg)
    shares, weights, mass = defaultdict(list), defaultdict(list), []
    for prompt in prompts:
        probs = np.array(list(answer_probabilities(fn, tok.backend, task, prompt, EOS_ID).values()))
        w = task.answer_weights(prompt)
        mass.append(probs.sum())
        for k, (p, wk) in enumerate(zip(probs / probs.sum(), w)):
            shares[k].append(p)
            weights[k].append(wk)
    return {
        "correct_mass_mean": float(np.mean(mass)),
        "by_rank": [{"rank": k + 1, "prompts": len(shares[k]), "model_share": float(np.mean(shares[k])),
                     "warmup_weight": float(np.mean(weights[k]))} for k in sorted(shares)],
    }


def main() -> int:
    from catsim.llm.model.checkpoint import load_model
    from catsim.llm.model.tokenizer import Tokenizer
    from catsim.llm.rundir import task_for_model as load_task_for_model
    from catsim.llm.sft import ModelSize, SFTConfig, run_sft
    from catsim.llm.tasks import make_task

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="/tmp/bench-paths")
    parser.add_argument("--steps", type=int, default=SFTConfig().steps)
    parser.add_argument("--model", default=None, help="reuse a trained model dir instead of training")
    parser.add_argument("--prompts", type=int, default=64)
    args = parser.parse_args()
    model_dir = args.model
    if model_dir is None:
        result = run_sft(make_task("paths"), SFTConfig(steps=args.steps), ModelSize(), args.out,
                         overwrite=True, progress=True)
        print(json.dumps({"eval": result.eval, "seconds": round(result.seconds, 1)}))
        model_dir = args.out
    task, seed = load_task_for_model(model_dir, None, {})
    cfg, params = load_model(model_dir)
    tok = Tokenizer.from_dir(model_dir)
    for split in ("train", "heldout"):
        n = min(args.prompts, task.num_prompts(split))
        prompts = [task.prompt(split, seed, i) for i in range(n)]
        print(json.dumps({"split": split, **rank_shares(task, params, cfg, tok, prompts)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
