"""`catsim llm sft`: supervised warm-up of a small model from scratch on a built-in task.

Trains a small Llama-style model on (prompt, answer) pairs of the task's train split (prompt tokens
masked), resumably, and writes a Hugging Face model directory that `catsim llm rl` starts from.
Rerunning the same command in the same --out resumes. Example:

    catsim llm sft --task maze --size 7 --out runs/sft --steps 300
"""

from __future__ import annotations

import argparse
import json

from catsim.cli.llm._distributed import (
    add_distributed_options,
    check_distributed_args,
    initialize_from_args,
    mesh_from_args,
    writer_print,
)
from catsim.cli.llm._task_args import add_task_arguments, task_options
from catsim.cli.vocabulary import add_format_argument, add_progress_argument, record_printer
from catsim.errors import CatsimError


def register(subparsers: argparse._SubParsersAction) -> None:
    from catsim.llm.sft import ModelSize, SFTConfig

    d_sft, d_size = SFTConfig(), ModelSize()
    p = subparsers.add_parser(
        "sft", help="supervised warm-up from scratch on maze/paths; writes a HF model dir",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_task_arguments(p, required=True)
    p.add_argument("--out", required=True, help="output directory (model, state, log, loss.png, eval.json)")
    g = p.add_argument_group("training")
    g.add_argument("--steps", type=int, default=d_sft.steps, help="optimizer steps (default: %(default)s; paper 1500)")
    g.add_argument("--batch-size", type=int, default=d_sft.batch_size, help="sequences per step (default: %(default)s; paper 32)")
    g.add_argument("--lr", type=float, default=d_sft.learning_rate, help="peak AdamW learning rate (default: %(default)s; paper 5e-4)")
    g.add_argument("--warmup-steps", type=int, default=d_sft.warmup_steps,
                   help="linear lr warm-up steps (default: %(default)s)")
    g.add_argument("--schedule", choices=["cosine", "constant"], default=d_sft.lr_schedule,
                   help="lr after the warm-up: cosine decay to 10%% of the peak, or constant (default: %(default)s)")
    g.add_argument("--weight-decay", type=float, default=d_sft.weight_decay,
                   help="AdamW decoupled weight decay on matrices (default: %(default)s)")
    g.add_argument("--grad-clip", type=float, default=d_sft.grad_clip,
                   help="global gradient-norm clip (default: %(default)s)")
    g.add_argument("--seed", type=int, default=d_sft.seed, help="initialisation and batch order (default: %(default)s)")
    g.add_argument("--data-seed", type=int, default=d_sft.data_seed, help="the task's train/held-out split seed (default: %(default)s)")
    g.add_argument("--save-every", type=int, default=d_sft.save_every, help="steps between training-state saves (default: %(default)s)")
    g.add_argument("--stop-after", type=int, default=None,
                   help="stop once this many steps are done (state saved; rerun to resume)")
    g.add_argument("--overwrite", action="store_true", help="discard a previous run in --out")
    m = p.add_argument_group("model")
    m.add_argument("--hidden", type=int, default=d_size.hidden_size, help="hidden size D (default: %(default)s)")
    m.add_argument("--layers", type=int, default=d_size.num_layers, help="transformer blocks (default: %(default)s)")
    m.add_argument("--heads", type=int, default=d_size.num_heads, help="attention heads (default: %(default)s)")
    m.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                   help="compute dtype; weights and optimizer state stay float32 (default: %(default)s)")
    m.add_argument("--intermediate", type=int, default=d_size.intermediate_size, help="MLP width, 0 = 4·D (default: %(default)s)")
    e = p.add_argument_group("evaluation")
    e.add_argument("--eval-prompts", type=int, default=128, help="held-out prompts scored at the end, 0 = none (default: %(default)s)")
    e.add_argument("--eval-samples", type=int, default=4, help="temperature-1 samples per held-out prompt (default: %(default)s)")
    add_distributed_options(p)
    add_progress_argument(p, default="shown")
    add_format_argument(p, what="the summary")
    from catsim.tracking import add_log_to_argument

    add_log_to_argument(p)
    from catsim.progress import SFT_FIELDS, fields_help

    p.epilog = fields_help(SFT_FIELDS)  # what the progress shows
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from catsim.experiments.warm_up import run_warm_up
    from catsim.llm.sft import ModelSize, SFTConfig
    from catsim.llm.tasks import make_task

    for flag, value in (("--hidden", args.hidden), ("--layers", args.layers), ("--heads", args.heads)):
        if value < 1:
            raise CatsimError(f"{flag} must be a positive integer, got {value}")
    if args.intermediate < 0:
        raise CatsimError(f"--intermediate must be >= 0 (0: 4 x hidden), got {args.intermediate}")
    check_distributed_args(args)
    task = make_task(args.task, **task_options(args))
    cfg = SFTConfig(steps=args.steps, batch_size=args.batch_size, learning_rate=args.lr,
                    warmup_steps=args.warmup_steps, lr_schedule=args.schedule,
                    weight_decay=args.weight_decay, grad_clip=args.grad_clip, seed=args.seed,
                    data_seed=args.data_seed, save_every=args.save_every)
    size = ModelSize(hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
                     intermediate_size=args.intermediate)
    initialize_from_args(args)
    result = run_warm_up(task, cfg, size, args.out, stop_after=args.stop_after, overwrite=args.overwrite,
                         eval_prompts=args.eval_prompts, eval_samples=args.eval_samples,
                         progress=args.progress is not False, dtype=args.dtype, log_to=args.log_to,
                         mesh=mesh_from_args(args))
    say = writer_print()
    final_loss = _final_loss(result)
    summary = {"out": result.out_dir, "steps_done": result.steps_done, "finished": result.finished,
               "final_loss": final_loss, "seconds": round(result.seconds, 1), "eval": result.eval}
    if args.format == "json":
        say(json.dumps(summary, allow_nan=False))
    elif args.format == "csv":
        flat = {k: v for k, v in summary.items() if k != "eval"}
        record_printer("csv", say)({**flat, **{f"eval_{k}": v for k, v in (result.eval or {}).items()}})
    else:
        state = "finished" if result.finished else f"stopped at step {result.steps_done} (rerun to resume)"
        loss = "no step logged" if final_loss is None else f"final loss {final_loss:.4f}"
        say(f"sft {state}: {result.steps_done} steps, {loss}, "
            f"{result.seconds:.0f} s, output in {result.out_dir}")
        if result.eval:
            ev = result.eval
            line = f"held-out ({ev['heldout_prompts']} prompts): greedy pass rate {ev['greedy_pass_rate']:.3f}"
            if "sampled_pass_at_1" in ev:
                line += f", sampled pass@1 {ev['sampled_pass_at_1']:.3f} (T=1, {ev['samples_per_prompt']}/prompt)"
            say(line)
    return 0


def _final_loss(result) -> float | None:
    """The loss of the run's last step: this call's, or, when the call ran none (a finished run
    rerun), the last one in the step log; None when there is none. (Reported as NaN before: a
    "final loss nan" and a JSON summary that was not JSON.)"""
    import math
    from pathlib import Path

    from catsim.llm.sft import LOG_FILE
    from catsim.llm.steplog import read_log

    if math.isfinite(result.final_loss):
        return result.final_loss
    log = Path(result.out_dir) / LOG_FILE
    records = read_log(log) if log.is_file() else []
    losses = [r["loss"] for r in records if isinstance(r.get("loss"), (int, float))]
    return float(losses[-1]) if losses and math.isfinite(losses[-1]) else None
