"""Supervised warm-up from scratch on a built-in task (the paper's Maze SFT, §5.2 / App. K).

A small Llama-style model (catsim.llm.model.transformer) is trained with optax AdamW on (prompt, target) pairs
drawn from the task's train split: the loss is the token-mean cross-entropy of the target tokens
(answer + <eos>); prompt tokens are masked out of the loss. Paper reference: 1,500 steps, batch 32,
AdamW 5e-4, a ~3M-parameter model on 17×17 mazes; the defaults here are a CPU-sized version.

Output directory (`run_sft(..., out_dir)`):
    config.json, model.safetensors, tokenizer.json, tokenizer_config.json   Hugging Face model dir
    catsim_task.json      the task name and config (so sampling / RL rebuild the same task)
    sft_config.json       the SFT and model settings of the run
    provenance.json       commit, CPU, ISA, XLA flags and threads of each piece of the run
    train_state/<step>/    params + optimizer state + step: orbax checkpoints, the newest 2 kept
    train_log.jsonl       one line per step: step, loss, token accuracy, lr, grad norm, seconds
    loss.png              the loss curve, drawn by the caller (`catsim.experiments.warm_up`: the CLI and
                          the experiments), not here: the runner draws nothing
    eval.json             held-out pass rates (greedy and sampled) at the end

Determinism: the batch of step t is a pure function of (seed, t), and initialisation of `seed`, so
a run stopped after k steps and resumed ends with the same parameters as an uninterrupted run.

Sharding and multiple processes (`mesh=`, `catsim.llm.model.sharding`): parameters and optimizer
state are FSDP-sharded, each step's batch is split over ("data", "fsdp"). Under `jax.distributed`
every process builds the same global batches and runs the same steps; metrics come back to every
process (`to_host`), each process writes its own shards of the training state, and process 0
alone writes the model, logs and eval.json (the others wait for it at a barrier).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from catsim import provenance, signals
from catsim.errors import CatsimError
from catsim.llm import rundir, safeguards
from catsim.llm.model.config import ModelConfig
from catsim.llm.model.sharding import barrier, to_host, whole_rows
from catsim.llm.model.transformer import Params, forward, init_params
from catsim.llm.rollout import encode_answer, encode_prompt
from catsim.llm.tasks.base import Task
from catsim.llm.tasks.char_tokenizer import (
    BOS,
    BOS_ID,
    EOS,
    EOS_ID,
    PAD,
    PAD_ID,
    build_char_tokenizer,
)

STATE_FILE = "train_state"  # directory of orbax checkpoints <step>/
LOG_FILE = "train_log.jsonl"
CONFIG_FILE = "sft_config.json"
SCHEDULES = ("cosine", "constant")


@dataclass(frozen=True)
class SFTConfig:
    """Supervised warm-up settings."""

    steps: int = 300  # optimizer steps (paper: 1,500)
    batch_size: int = 32  # sequences per step (paper: 32)
    learning_rate: float = 1e-3  # peak AdamW learning rate (paper: 5e-4)
    warmup_steps: int = 20  # linear warm-up from 0 to the peak
    lr_schedule: str = "cosine"  # after warm-up: "cosine" (decay to 10% of peak) or "constant"
    weight_decay: float = 0.01  # AdamW decoupled weight decay on matrices (not norms, not biases)
    grad_clip: float = 1.0  # global gradient-norm clip
    seed: int = 0  # parameter initialisation and batch order
    data_seed: int = 0  # the task's split seed: training uses its train split only
    save_every: int = 25  # write the training state every this many steps (and at the end)

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "save_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CatsimError(f"sft {name} must be a positive integer, got {value!r}")
        if not (self.learning_rate > 0 and np.isfinite(self.learning_rate)):
            raise CatsimError(f"learning rate must be positive, got {self.learning_rate}")
        if self.warmup_steps < 0 or self.weight_decay < 0 or not self.grad_clip > 0:
            raise CatsimError("warmup_steps and weight_decay must be >= 0 and grad_clip > 0")
        if self.lr_schedule not in SCHEDULES:
            raise CatsimError(f"lr schedule must be one of {SCHEDULES}, got {self.lr_schedule!r}")
        if self.seed < 0 or self.data_seed < 0:
            raise CatsimError("seeds must be non-negative")


@dataclass(frozen=True)
class ModelSize:
    """Shape of the Llama-style model trained from scratch."""

    hidden_size: int = 64  # D (paper's ~3M-parameter model: about D = 256, 4 layers)
    num_layers: int = 3  # L transformer blocks
    num_heads: int = 4  # H attention heads (no grouping: K = H)
    intermediate_size: int = 0  # SwiGLU width F; 0 means 4·D
    max_position_embeddings: int = 1024  # longest sequence the config.json claims

    def model_config(self, vocab_size: int) -> ModelConfig:
        if self.hidden_size % self.num_heads or (self.hidden_size // self.num_heads) % 2:
            raise CatsimError(
                f"hidden size {self.hidden_size} must split into {self.num_heads} heads of even width")
        return ModelConfig(
            vocab_size=vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size or 4 * self.hidden_size,
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            num_kv_heads=self.num_heads,
            head_dim=self.hidden_size // self.num_heads,
            rms_norm_eps=1e-6,
            max_position_embeddings=self.max_position_embeddings,
            architecture="LlamaForCausalLM",
            bos_token_id=BOS_ID,
            eos_token_ids=(EOS_ID,),
            pad_token_id=PAD_ID,
        )


class TrainState(NamedTuple):
    """Everything a resumed run needs: the step count, parameters and optimizer state."""

    step: jax.Array  # int32 scalar: optimizer steps taken
    params: Params
    opt_state: Any


class Batch(NamedTuple):
    tokens_BxT: jax.Array  # int32 ids: <bos> prompt answer <eos> <pad>...
    real_BxT: jax.Array  # bool: not padding
    target_BxT: jax.Array  # bool: token is part of the supervised target (answer or <eos>)


# ----------------------------------------------------------------------------- data
def task_tokenizer(task: Task):
    """The character tokenizer of a built-in task, wrapped as a catsim `Tokenizer` for saving."""
    from catsim.llm.model.tokenizer import Tokenizer

    if task.alphabet is None:
        raise CatsimError(f"task {task.name!r} has no fixed alphabet; SFT from scratch supports maze and paths")
    return Tokenizer(backend=build_char_tokenizer(task.alphabet), bos_token=BOS, eos_token=EOS,
                     pad_token=PAD, add_bos_token=True)


def make_batch(task: Task, tokenizer, cfg: SFTConfig, step: int, pad_to: int = 32) -> Batch:
    """The training batch of step `step` (numpy arrays): a pure function of (cfg.seed, step, task,
    data_seed), so every process of a multi-process run builds the same one.

    Rows are right-padded to a multiple of `pad_to` so few shapes are compiled.
    """
    rng = np.random.default_rng([cfg.seed, 0x5F7, step])
    n_train = task.num_prompts("train")
    rows = []
    for index in rng.integers(0, n_train, size=cfg.batch_size):
        prompt = task.prompt("train", cfg.data_seed, int(index))
        target = task.sft_target(prompt, rng)
        p, a = encode_prompt(tokenizer, prompt.text), encode_answer(tokenizer, target) + [EOS_ID]
        rows.append((p, a))
    width = -(-max(len(p) + len(a) for p, a in rows) // pad_to) * pad_to
    tokens = np.full((cfg.batch_size, width), PAD_ID, np.int32)
    real = np.zeros((cfg.batch_size, width), bool)
    target = np.zeros((cfg.batch_size, width), bool)
    for i, (p, a) in enumerate(rows):
        tokens[i, : len(p) + len(a)] = p + a
        real[i, : len(p) + len(a)] = True
        target[i, len(p) : len(p) + len(a)] = True
    return Batch(tokens, real, target)


# ----------------------------------------------------------------------------- loss and step
def sft_loss(params: Params, model_cfg: ModelConfig, batch: Batch,
             activation_sharding=None) -> tuple[jax.Array, jax.Array]:
    """(token-mean cross-entropy over target tokens, token accuracy). Prompt tokens carry no loss.

    Logits at position t predict token t+1, so the target mask is shifted by one.
    activation_sharding: the residual stream's sharding on a mesh (None: one device).
    """
    logits_BxTxV = forward(params, model_cfg, batch.tokens_BxT, mask_BxT=batch.real_BxT,
                           activation_sharding=activation_sharding)
    logp_BxTxV = jax.nn.log_softmax(logits_BxTxV[:, :-1].astype(jnp.float32))
    next_BxT = batch.tokens_BxT[:, 1:]
    nll_BxT = -jnp.take_along_axis(logp_BxTxV, next_BxT[..., None], axis=-1)[..., 0]
    weight_BxT = batch.target_BxT[:, 1:].astype(jnp.float32)
    count = jnp.maximum(jnp.sum(weight_BxT), 1.0)
    correct_BxT = (jnp.argmax(logp_BxTxV, axis=-1) == next_BxT).astype(jnp.float32)
    return jnp.sum(nll_BxT * weight_BxT) / count, jnp.sum(correct_BxT * weight_BxT) / count


def learning_rate_schedule(cfg: SFTConfig) -> optax.Schedule:
    warm = max(cfg.warmup_steps, 0)
    if cfg.lr_schedule == "constant":
        rest = optax.constant_schedule(cfg.learning_rate)
    else:
        rest = optax.cosine_decay_schedule(cfg.learning_rate, max(cfg.steps - warm, 1), alpha=0.1)
    if warm == 0:
        return rest
    return optax.join_schedules([optax.linear_schedule(0.0, cfg.learning_rate, warm), rest], [warm])


def _decay_mask(params: Params) -> Params:
    return jax.tree.map(lambda p: p.ndim >= 2, params)  # matrices decay; norms and biases do not


def make_optimizer(grad_clip: float, weight_decay: float, learning_rate: float | jax.Array):
    """Global-norm clipping, then AdamW (0.9, 0.999) with decoupled decay on matrices only.

    Written as optax defines `adamw` (scale_by_adam → add_decayed_weights → scale by −lr) so the
    learning rate can be a traced scalar: the compiled step does not depend on the schedule.
    """
    return optax.chain(
        optax.clip_by_global_norm(grad_clip),
        optax.scale_by_adam(b1=0.9, b2=0.999, eps=1e-8),
        optax.add_decayed_weights(weight_decay, mask=_decay_mask),
        optax.scale_by_learning_rate(learning_rate),
    )


@functools.partial(jax.jit, static_argnames=("model_cfg", "grad_clip", "weight_decay", "activation_sharding"),
                   donate_argnums=0)
def train_step(state: TrainState, batch: Batch, learning_rate: jax.Array, *, model_cfg: ModelConfig,
               grad_clip: float, weight_decay: float,
               activation_sharding=None) -> tuple[TrainState, dict[str, jax.Array]]:
    """One AdamW step on the SFT loss: a pure function of (state, batch, lr). Only the model shape,
    the optimizer constants and the activation sharding are static, so runs that differ in steps,
    lr or seed share one compiled program."""
    optimizer = make_optimizer(grad_clip, weight_decay, learning_rate)
    (loss, acc), grads = jax.value_and_grad(sft_loss, has_aux=True)(state.params, model_cfg, batch,
                                                                    activation_sharding)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = {"loss": loss, "token_accuracy": acc, "grad_norm": optax.tree.norm(grads)}
    return TrainState(state.step + 1, params, opt_state), metrics


@functools.partial(jax.jit, static_argnames=("model_cfg", "grad_clip", "weight_decay"))
def _init_state(key: jax.Array, *, model_cfg: ModelConfig, grad_clip: float,
                weight_decay: float) -> TrainState:
    params = init_params(model_cfg, key)
    opt_state = make_optimizer(grad_clip, weight_decay, 0.0).init(params)
    return TrainState(jnp.zeros((), jnp.int32), params, opt_state)


def init_state(model_cfg: ModelConfig, cfg: SFTConfig, mesh=None) -> TrainState:
    """Step 0: parameters from `cfg.seed` and a fresh optimizer state; with a mesh, parameters
    and Adam moments FSDP-sharded over it and the scalars replicated (the same values as on one
    device: every process initialises from the same key, then keeps its own slices)."""
    state = _init_state(jax.random.key(cfg.seed), model_cfg=model_cfg, grad_clip=cfg.grad_clip,
                        weight_decay=cfg.weight_decay)
    if mesh is None:
        return state
    from catsim.llm.model.sharding import place_on_mesh, shard_params

    params = shard_params(jax.tree.map(np.asarray, state.params), model_cfg, mesh)
    opt_state = place_on_mesh(make_optimizer(cfg.grad_clip, cfg.weight_decay, 0.0).init(params), mesh)
    return TrainState(place_on_mesh(np.asarray(state.step), mesh), params, opt_state)


def step_fn(model_cfg: ModelConfig, cfg: SFTConfig, mesh=None):
    """`(state, batch) -> (state, metrics)` for run `cfg`: the jitted step at the scheduled lr.
    `batch` holds host (numpy) arrays; with a mesh they are split over it, and the metrics come
    back as numpy scalars on every process."""
    from catsim.llm.model.sharding import activation_sharding, shard_batch

    schedule = learning_rate_schedule(cfg)
    act = None if mesh is None else activation_sharding(mesh)

    def step(state: TrainState, batch: Batch):
        lr = np.asarray(schedule(int(to_host(state.step))), np.float32)
        batch = Batch(*(shard_batch(x, mesh) if mesh is not None else jnp.asarray(x) for x in batch))
        state, metrics = train_step(state, batch, lr, model_cfg=model_cfg, grad_clip=cfg.grad_clip,
                                    weight_decay=cfg.weight_decay, activation_sharding=act)
        return state, to_host(metrics)

    return step


# ----------------------------------------------------------------------------- settings fingerprint
def run_settings(task: Task, cfg: SFTConfig, model_cfg: ModelConfig) -> dict:
    """Everything that changes the trajectory (not save_every): what the resume fingerprint hashes,
    kept with each saved state so that a rerun with other settings is told which differ."""
    settings = {
        "task": task.name,
        "task_config": rundir.task_spec(task)["config"],
        "sft": {k: v for k, v in dataclasses.asdict(cfg).items() if k != "save_every"},
        "model": model_cfg.to_hf_dict(),
    }
    if model_cfg.dtype != model_cfg.param_dtype:  # mixed precision (float32 runs hash as before)
        settings["compute_dtype"] = model_cfg.dtype
    return settings


def fingerprint(task: Task, cfg: SFTConfig, model_cfg: ModelConfig) -> str:
    """A run's resume fingerprint (of `run_settings`)."""
    return rundir.fingerprint(run_settings(task, cfg, model_cfg))


# ----------------------------------------------------------------------------- the run
@dataclass(frozen=True)
class SFTResult:
    """Summary of a finished (or stopped) warm-up run."""

    out_dir: str  # output directory
    steps_done: int  # optimizer steps in the saved state
    finished: bool  # reached cfg.steps and wrote the model directory
    final_loss: float  # loss of the last step run in this call (NaN if none ran)
    seconds: float  # wall time of this call
    eval: dict | None  # held-out evaluation (None unless finished and evaluation was asked for)


def run_sft(
    task: Task,
    cfg: SFTConfig,
    size: ModelSize,
    out_dir: str | Path,
    *,
    stop_after: int | None = None,
    overwrite: bool = False,
    eval_prompts: int = 128,
    eval_samples: int = 4,
    progress: bool | None = True,
    dtype: str = "float32",
    log_to: tuple[str, ...] = (),
    mesh=None,
) -> SFTResult:
    """Train (or resume) a warm-up run in `out_dir`; see the module docstring for the files.

    stop_after: stop once this many total steps are done (state saved, no model written) — for
    splitting a run across sessions or testing resume. eval_prompts: held-out prompts to score at
    the end (0 skips evaluation); eval_samples: temperature-1 samples per prompt.
    dtype: compute dtype, "float32" or "bfloat16" (mixed precision: parameters, gradients and
    optimizer state stay float32; the forward pass casts each block's weights to bfloat16).
    log_to: extra sinks of the step metrics besides the JSONL log ("tensorboard", "wandb").
    progress: steps done on stderr (True, False or None = automatic: `catsim.progress.progress_bar`).
    mesh: optional `jax.sharding.Mesh` (FSDP-sharded state, batches split over it; the batch size
    and the evaluation's sample rows are padded / must divide by its device count); multi-process
    runs pass a mesh over every process's devices (see the module docstring).
    """

    t_start = time.perf_counter()
    tokenizer = task_tokenizer(task)
    model_cfg = size.model_config(tokenizer.vocab_size).replace(dtype=dtype, weight_dtype="float32")
    if mesh is not None and cfg.batch_size % mesh.devices.size:
        raise CatsimError(f"batch size {cfg.batch_size} is not divisible by the {mesh.devices.size} mesh devices")
    make_batch(task, tokenizer, cfg, 0)  # a task setting that cannot make prompts is refused before any file
    settings = run_settings(task, cfg, model_cfg)
    run = rundir.RunDir(out_dir, state_dir=STATE_FILE, log_file=LOG_FILE,
                        fingerprint=rundir.fingerprint(settings), what="run", settings=settings)
    with run.locked():
        if overwrite:
            run.clear(files=("eval.json", "loss.png"))
        state, _ = run.resume(init_state(model_cfg, cfg, mesh))
        start = int(to_host(state.step))
        safeguards.check_resumed("SFT run", start, state.params, run.state_path)
        run.write_json(CONFIG_FILE, {"sft": dataclasses.asdict(cfg), "model_size": dataclasses.asdict(size),
                                     "num_params": model_cfg.num_params, "fingerprint": run.fingerprint})
        end = cfg.steps if stop_after is None else min(cfg.steps, max(stop_after, start))
        if run.primary and start < end:  # where each piece of the run is computed (`catsim.provenance`)
            provenance.record_run_piece(run.path, start)
        state, last_loss = _train(run, task, tokenizer, model_cfg, cfg, state, start, end, progress, log_to,
                                  mesh)
        done = int(to_host(state.step))
        evaluation = None
        if done == cfg.steps:
            run.save_model("", model_cfg, state.params, tokenizer,
                           extra={rundir.TASK_FILE: rundir.task_spec(task, cfg.data_seed)})
            if eval_prompts > 0:
                evaluation = evaluate_heldout(state.params, model_cfg, tokenizer, task, cfg.data_seed,
                                              eval_prompts, eval_samples, seed=cfg.seed, mesh=mesh)
                run.write_json("eval.json", evaluation)
    barrier(f"catsim-sft-end-{run.fingerprint}-{done}")  # the others wait for process 0's files
    return SFTResult(str(run.path), done, done == cfg.steps, last_loss, time.perf_counter() - t_start, evaluation)


def _train(run: rundir.RunDir, task: Task, tokenizer, model_cfg: ModelConfig, cfg: SFTConfig, state: TrainState,
           start: int, end: int, progress: bool | None, log_to=(), mesh=None) -> tuple[TrainState, float]:
    """Steps start..end-1 with the step log and periodic saves; returns (state, last loss). progress:
    steps done on stderr with `catsim.progress.SFT_FIELDS` (`catsim.progress.progress_bar`'s mode)."""
    from catsim.progress import progress_bar

    step_once = step_fn(model_cfg, cfg, mesh)
    schedule = learning_rate_schedule(cfg)
    last_loss = float("nan")
    bar = progress_bar(cfg.steps, "sft", progress if run.primary else False, unit="step", initial=start)
    logged = saved = start  # the last step whose record is in the log / whose state is saved
    try:
        with run.open_log(start, log_to=log_to, config=dataclasses.asdict(cfg)) as log:
            record = None  # a finished step's record not yet in the log
            try:
                for step in range(start, end):
                    with signals.defer_termination():  # SIGTERM stops at the end of the step
                        t0 = time.perf_counter()
                        batch = make_batch(task, tokenizer, cfg, step)
                        state, metrics = step_once(state, batch)
                        metrics = {k: float(v) for k, v in metrics.items()}
                        safeguards.check_step("SFT", step + 1, metrics, saved, run.state_path)  # NaN: stop here
                        last_loss = metrics["loss"]
                        record = {"step": step + 1, **metrics, "lr": float(schedule(step)),
                                  "seconds": round(time.perf_counter() - t0, 4)}
                        log.write(record)
                        record, logged = None, step + 1
                        bar.set_postfix(loss=f"{last_loss:.3f}", acc=f"{metrics['token_accuracy']:.2f}")  # SFT_FIELDS
                        bar.update(1)
                        if (step + 1) % cfg.save_every == 0 or step + 1 == end:
                            safeguards.check_params("SFT", step + 1, state.params, saved, run.state_path)
                            run.save_state(state, step + 1)
                            saved = step + 1
                    signals.check()
            except KeyboardInterrupt:  # Ctrl-C or SIGTERM: keep what was done; rerun to resume
                if record is not None:  # the step finished: its line goes in with its state
                    if log.last_step is None or record["step"] > log.last_step:
                        log.write(record)
                    logged = record["step"]
                try:
                    if int(to_host(state.step)) == logged:  # log and state agree (else an update was cut short)
                        run.save_state(state, logged)
                except RuntimeError:  # Ctrl-C inside a step whose input buffers were donated:
                    pass  # the last periodic save stands
                raise
    finally:
        bar.close()
    run.save_state(state, int(to_host(state.step)))
    return state, last_loss


def evaluate_heldout(params: Params, model_cfg: ModelConfig, tokenizer, task: Task, data_seed: int,
                     n_prompts: int, n_samples: int, seed: int = 0, mesh=None) -> dict:
    """Held-out pass rates: greedy (temperature 0) and mean reward of temperature-1 samples.
    mesh: the parameters' mesh; sample rows are split over it (each row's randomness is keyed by
    its prompt and sample index, so the numbers do not depend on the layout)."""
    from catsim.llm.rollout import SamplingConfig, sample_groups

    n_prompts = min(n_prompts, task.num_prompts("heldout"))
    prompts = [task.prompt("heldout", data_seed, i) for i in range(n_prompts)]
    max_new = getattr(task, "max_answer_chars", 256) + 1
    key = jax.random.key(seed + 1)

    def scores(n: int, temperature: float) -> np.ndarray:  # [prompts, n], float64 like the rewards
        sampling = SamplingConfig(max_new_tokens=max_new, temperature=temperature, stop_tokens=(EOS_ID,),
                                  pad_token=PAD_ID)
        return sample_groups(params, model_cfg, tokenizer, task, prompts, n, sampling, key, mesh=mesh,
                             batch_size=whole_rows(min(256, n_prompts * n), mesh), pad_rows=True, pad_multiple=1).scores.astype(np.float64)

    result = {"heldout_prompts": n_prompts, "greedy_pass_rate": float(np.mean(scores(1, 0.0)))}
    if n_samples > 0:
        rewards = scores(n_samples, 1.0)
        result.update(samples_per_prompt=n_samples, sampled_pass_at_1=float(rewards.mean()),
                      sampled_any_correct=float(rewards.max(axis=1).mean()))
    return result
