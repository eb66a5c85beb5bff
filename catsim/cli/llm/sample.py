"""`catsim llm sample`: draw completions from a Hugging Face model directory.

Prompts come from --prompt (repeatable), or from a task's split with --task (each completion
printed with its verifier reward). --format json prints one JSON object per completion. Example:

    catsim llm sample --model DIR --prompt "What is 2+2?" --n 4 --max-new-tokens 128
"""

from __future__ import annotations

import argparse
import sys

from catsim.cli.llm._distributed import (
    add_distributed_options,
    check_distributed_args,
    initialize_from_args,
    mesh_from_args,
    writer_print,
)
from catsim.cli.vocabulary import add_format_argument, add_progress_argument, alias, record_printer
from catsim.errors import CatsimError


def add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by every command that samples from a model (sample, eval, rl)."""
    parser.add_argument("--model", required=True, help="Hugging Face model directory (config.json, "
                        "*.safetensors, tokenizer.json)")
    parser.add_argument("--samples", dest="n", type=int, default=1, help="samples per prompt (default 1)")
    alias(parser, "--n", "--samples")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="completion length cap (default 256)")
    parser.add_argument("--temperature", type=float, default=1.0, help="0 = greedy (default 1.0)")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus mass (default 1 = off)")
    parser.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens (default 0 = off)")
    parser.add_argument("--seed", type=int, default=0, help="PRNG seed (default 0)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default=None,
                        help="compute dtype (default: the checkpoint's)")
    parser.add_argument("--chat-template", dest="chat", action=argparse.BooleanOptionalAction, default=None,
                        help="wrap prompts in the tokenizer's chat template; --no-chat-template: raw text "
                             "(default: when the tokenizer has one)")
    alias(parser, "--chat", "--chat-template")
    alias(parser, "--raw", "--no-chat-template")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("sample", help="sample completions from a model directory",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sampling_arguments(parser)
    parser.add_argument("--prompt", action="append", default=[], help="prompt text (repeatable)")
    add_format_argument(parser, what="the completions (csv, json: one record per completion)")
    alias(parser, "--json", "--format", "json")
    add_progress_argument(parser)
    alias(parser, "--quiet", "--no-progress")
    from catsim.cli.llm._task_args import add_task_arguments, add_task_sampling_arguments

    add_task_arguments(parser, required=False, task_default="none: sample the --prompt texts")
    add_task_sampling_arguments(parser)
    add_distributed_options(parser)
    parser.set_defaults(func=run)


def prompt_sources(args: argparse.Namespace) -> list[str]:
    """The prompts to sample, from the command line (extension point for other sources)."""
    if not args.prompt:
        raise CatsimError("give at least one --prompt")
    return list(args.prompt)


def sampling_config(args: argparse.Namespace, cfg, tokenizer):
    """SamplingConfig from the shared options; stop at the tokenizer's and config's EOS ids."""
    from catsim.llm.rollout import SamplingConfig

    stops = set(cfg.eos_token_ids)
    if tokenizer.eos_token_id is not None:
        stops.add(tokenizer.eos_token_id)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else cfg.pad_token_id
    return SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                          top_p=args.top_p, top_k=args.top_k, stop_tokens=tuple(sorted(stops)),
                          pad_token=int(pad or 0))


def progress_bar(rows: int, args: argparse.Namespace):
    """The sampling progress (rollouts) on stderr: --progress / --no-progress, else a bar on a terminal
    only (a short command whose output is read from a pipe: no lines there unless asked)."""
    from catsim.llm.evaluate import rollout_progress_bar

    return rollout_progress_bar(rows, "sample", args.progress, long=False)


def run(args: argparse.Namespace) -> int:
    import jax

    check_distributed_args(args)
    if args.task is not None:  # prompts from a built-in task, each completion with its reward
        from catsim.cli.llm._task_args import run_task_sampling

        initialize_from_args(args)
        return run_task_sampling(args, sampling_config, progress_bar, mesh=mesh_from_args(args),
                                 say=writer_print())

    from catsim.llm.model.checkpoint import load_model
    from catsim.llm.model.sharding import whole_rows
    from catsim.llm.model.tokenizer import Tokenizer
    from catsim.llm.rollout import bucket, decode_params, encode_prompt, sample_groups

    prompts = prompt_sources(args)
    if args.n < 1:
        raise CatsimError(f"--samples must be a positive integer, got {args.n}")
    initialize_from_args(args)  # every process samples the same rows over one mesh; process 0 prints
    mesh, say = mesh_from_args(args), writer_print()
    cfg, params = load_model(args.model, dtype=args.dtype, mesh=mesh)
    params = decode_params(params)  # only generate reads them: split once, not held twice
    tokenizer = Tokenizer.from_dir(args.model)
    sampling = sampling_config(args, cfg, tokenizer)
    chat = tokenizer.chat_template is not None if args.chat is None else args.chat
    # power-of-two widths and row counts: a few compiled programs serve every request
    with progress_bar(len(prompts) * args.n, args) as bar:
        groups = sample_groups(params, cfg, tokenizer, None, prompts, args.n, sampling, jax.random.key(args.seed),
                               mesh=mesh, chat_template=chat, pad_rows=True,
                               batch_size=whole_rows(bucket(len(prompts) * args.n, floor=8), mesh),
                               width=bucket(max(len(encode_prompt(tokenizer, p, chat)) for p in prompts)),
                               progress=bar)
    emit = record_printer(args.format, say)
    for row in range(len(prompts) * args.n):
        ids = [int(t) for t in groups.tokens[row][groups.mask[row]]]
        finished = bool(groups.finished[row])
        text = tokenizer.decode(ids[:-1] if finished else ids)  # special tokens kept
        pid, sid = row // args.n, row % args.n
        if args.format != "table":
            emit({"prompt_id": pid, "sample_id": sid, "text": text, "tokens": ids,
                  "logprob": float(groups.logprob[row]), "finished": finished})
        else:
            end = "stop" if finished else "length"
            say(f"--- prompt {pid} sample {sid} ({len(ids)} tokens, {end}, logprob {groups.logprob[row]:.3f})")
            say(text)
    sys.stdout.flush()
    return 0
