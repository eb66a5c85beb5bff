"""The RL run: collect → score → update → record, one step at a time, in a resumable run directory.

Every step is a pure function of (base model, config, step), so a resumed run repeats an
uninterrupted one exactly:

1. collect: draw `prompts_per_step` train prompts (seeded by (seed, step)), sample N =
   `group_size` completions of each (`catsim.llm.rollout.sample_groups`; per-sample keys
   (step key, prompt index, sample index)) and score them with the task's verifier; DAPO's dynamic
   sampling draws further prompt batches until enough groups are active;
2. score: group success rates μ̂ (once), advantages (DAPO: of the overlong-shaped rewards; the
   unlikeliness reward: of the scores it shapes, by a scoring pass of `behaviour`) × the
   focal weight (1 − μ̂)^γ, DAPO's overlong filtering if on; the batch is cut to the longest
   completion rounded up to one of a few widths (`step.completion_widths`); behaviour-policy token
   log-probs only when the policy moves before the last update (more than one update per step) or
   asym-GRPO reads them, reference log-probs only when kl_coef > 0 (`catsim.llm.scoring`, at the
   rollout temperature by default), the asym-GRPO components if on;
3. update: `ppo_epochs` passes of mini-batch optimizer updates (`step.make_functions`; with one
   update per step the behaviour log-probs come out of the update's own forward pass); each
   group's prompt goes through the model once, its keys and values shared by the group's
   completions (`shares_prompts`, `step.shared_prompt_batch`);
4. record: one `rl_log.jsonl` line (`STEP_METRICS`), safeguard warnings, state saves, snapshots.
   A NaN or infinite loss, gradient norm or parameter is an error (`safeguards.NonFinite`): the
   run stops at that step, before its record or state is written, so the last saved state is good.

Files in the output directory:
    rl_config.json      the settings (and the base model path)
    rl_log.jsonl        one JSON line per step (see `STEP_METRICS`)
    provenance.json     commit, CPU, ISA, XLA flags and threads of each piece of the run (`catsim.provenance`)
    rl_state/<step>/      params + optimizer state + step: orbax checkpoints every `save_every` steps (newest 2 kept)
    checkpoints/step_NNNNNN/   Hugging Face model snapshots every `snapshot_every` steps
    model/              the final policy as a Hugging Face model dir (+ tokenizer, task file)

Sharding: pass a `jax.sharding.Mesh` (catsim.llm.model.sharding.make_mesh): parameters and optimizer
state are FSDP-sharded, rollout and training batches split over ("data", "fsdp"). Multi-process
(`jax.distributed`): every process runs this loop on the same global batches; sharded results come
back to every process through `sharding.to_host` (an all-gather), so all score the same rollouts;
process 0 alone writes files (the others wait at barriers), and a resume reads the state on every
process.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from catsim import provenance, signals
from catsim.errors import CatsimError
from catsim.llm import rundir, safeguards
from catsim.llm.model.sharding import barrier, shard_batch, to_host
from catsim.llm.rl.asym import asymmetric_batch
from catsim.llm.rl.behaviour import completion_logps, token_logps
from catsim.llm.rl.config import RLConfig
from catsim.llm.rl.programs import UpdatePrograms
from catsim.llm.rl.step import (
    Functions,
    batch_rows,
    build_batch,
    completion_width,
    compute_advantages,
    filter_overlong,
    lr_at,
    make_functions,
    select_active_groups,
    shared_prompt_batch,
    step_prompt_indices,
    success_rates,
    trim_completions,
    truncated_rows,
)
from catsim.llm.rollout import Groups, SamplingConfig, sample_groups, stop_and_pad
from catsim.llm.tasks.base import take_unscored
from catsim.progress import progress_bar
from catsim.theory import active_fraction_prediction

STATE_FILE = "rl_state"  # directory of orbax checkpoints <step>/
LOG_FILE = "rl_log.jsonl"
CONFIG_FILE = "rl_config.json"
# Compile the update of every completion width in the background once the first update has run
# (`programs.UpdatePrograms`)? False: each width compiles when its first batch arrives.
PRECOMPILE_WIDTHS = True

STEP_METRICS = {
    "step": "RL steps done (1-based)",
    "reward": "mean verifier score of the kept groups' rollouts",
    "success_rate": "mean group success rate μ̂ = (R̄ − Rw)/(Rc − Rw)",
    "active_fraction": "share of sampled groups whose rewards are not all equal",
    "active_pred_pooled": "Lemma 3.1 1 − μ̄^N − (1 − μ̄)^N at the batch-mean μ̄",
    "active_pred_groups": "mean over groups of 1 − μ̂^N − (1 − μ̂)^N (plug-in; biased low)",
    "gamma": "γ used this step",
    "mean_g": "mean focal weight (1 − μ̂)^γ over active kept groups (null if none)",
    "entropy": "token-mean policy entropy (nats) over response tokens",
    "clip_low_frac": "token share clipped at 1 − ε_low with A < 0 (PPO/DAPO); IS weight below 1 − ε_low (CISPO)",
    "clip_high_frac": "token share clipped at 1 + ε_high with A > 0 (PPO/DAPO); IS weight above 1 + ε_high (CISPO)",
    "kl": "token-mean k3 estimate of KL(π‖π_ref) (null when kl_coef = 0: no reference is kept)",
    "truncated_frac": "share of the kept groups' rollouts that hit max_new_tokens without a stop token",
    "response_length": "mean generated tokens per rollout (stop token included)",
    "grad_norm": "mean pre-clip global gradient norm over the step's updates",
    "loss": "mean mini-batch loss",
    "lr": "learning rate of this step",
    "sampling_rounds": "prompt batches drawn (> 1 only with dynamic sampling)",
    "groups_kept": "groups that carry loss this step",
    "tokens_per_second": "generated tokens per second of rollout time",
    "step_seconds": "wall time of the step",
    "temperature": "rollout temperature of this step (asym-GRPO schedule; constant otherwise)",
    "kept_rollouts": "rollouts carrying loss after batch recomposition (all kept ones otherwise)",
    "mixed_near_frac": "asym-GRPO mixed groups: share of their negatives within δ of a positive, the ones "
                       "the rule keeps (null when off or no group is mixed)",
    "heldout_accuracy": "share of held-out prompts solved, one sample each at τ = temperature, after this "
                        "step (every heldout_every steps; null otherwise)",
    "warnings": "safeguard warnings raised at this step (reward collapse, exploration stagnation) and "
                "completions the verifier's time budget left unscored",
}
# the TensorBoard / W&B group of the metrics not in train/ (`catsim.tracking.GROUPS`)
STEP_GROUPS = {"heldout_accuracy": "eval", **dict.fromkeys(
    ("gamma", "mean_g", "active_fraction", "active_pred_pooled", "active_pred_groups", "mixed_near_frac"), "catsim")}


@dataclass(frozen=True)
class RLResult:
    out_dir: str  # output directory
    steps_done: int  # RL steps in the saved state
    finished: bool  # reached cfg.steps and wrote model/
    seconds: float  # wall time of this call
    last: dict | None = None  # the rl_log.jsonl record of step `steps_done` (None before the first step)


@dataclass
class Collected:
    """One step's rollouts: the kept groups and what the whole sampled pool says."""

    groups: Groups  # the P groups that form the batch
    group_mask: np.ndarray  # [P] 1 for groups that carry loss
    success: np.ndarray  # [P] μ̂ of the kept groups
    active_pool: np.ndarray  # [pool] groups with unequal rewards, over every sampling round
    success_pool: np.ndarray  # [pool] μ̂ over every sampling round
    rounds: int  # prompt batches drawn
    tokens_per_second: float  # generated tokens per second of rollout time


@dataclass
class Trainer:
    """What every step uses: the run's settings, task, model and jitted functions (built once)."""

    cfg: RLConfig
    task: Any
    model_cfg: Any
    tokenizer: Any
    fns: Functions
    sampling: SamplingConfig
    base_key: jax.Array
    mesh: Any = None
    chat_template: bool = False

    def put(self, batch):
        """A host batch on the device(s): sharded over the mesh, or plain arrays."""
        return shard_batch(batch, self.mesh) if self.mesh is not None else jax.device_put(batch, jax.devices()[0])

    def sample(self, params, prompts, n: int, sampling: SamplingConfig, key) -> Groups:
        return sample_groups(params, self.model_cfg, self.tokenizer, self.task, prompts, n, sampling, key,
                             mesh=self.mesh, chat_template=self.chat_template,
                             batch_size=self.cfg.rollout.batch_size,
                             score_truncated=self.cfg.rollout.score_truncated)


def collect(tr: Trainer, params, step: int, sampling: SamplingConfig) -> Collected:
    """Sample the step's groups (more prompt batches under dynamic sampling) and keep P of them."""
    cfg, spec = tr.cfg, tr.cfg.method_spec()
    step_key = jax.random.fold_in(tr.base_key, step)
    parts, kept, t0 = [], 0, time.perf_counter()
    for round_ in range(cfg.objective.max_sampling_rounds if spec.dynamic_sampling else 1):
        idx = step_prompt_indices(cfg, step, round_, tr.task.num_prompts("train"))
        prompts = [tr.task.prompt("train", cfg.run.data_seed, int(i)) for i in idx]
        parts.append(tr.sample(params, prompts, cfg.group_size, sampling, jax.random.fold_in(step_key, round_)))
        kept += int(np.sum(parts[-1].scores.max(axis=1) > parts[-1].scores.min(axis=1)))
        if not spec.dynamic_sampling or kept >= cfg.rollout.prompts_per_step:
            break
    seconds = time.perf_counter() - t0
    pool = Groups.concat(parts)
    active_pool = pool.scores.max(axis=1) > pool.scores.min(axis=1)
    success_pool = success_rates(pool.scores, cfg.objective)
    if spec.dynamic_sampling:
        chosen, group_mask = select_active_groups(active_pool, cfg.rollout.prompts_per_step)
    else:
        chosen, group_mask = np.arange(len(active_pool)), np.ones(cfg.rollout.prompts_per_step, np.float32)
    return Collected(pool.take(chosen, cfg.group_size) if spec.dynamic_sampling else pool, group_mask,
                     success_pool[chosen], active_pool, success_pool, len(parts),
                     int(pool.mask.sum()) / max(seconds, 1e-9))


# options added after runs were published, left out of the fingerprint at their default (off) so
# that those run directories still resume
LATER_OPTIONS = {"clip_ratio_c": None, "kl_bias_correction": False, "w_reinforce_lambda": 0.1,
                 "unlikeliness_beta": 0.0}


def fingerprint_settings(cfg: RLConfig) -> dict:
    """The flat options that change a run's trajectory (the run fingerprint's "rl" part)."""
    return {k: v for k, v in cfg.flat().items()
            if k not in ("steps", "save_every", "snapshot_every", "heldout_every", "heldout_prompts")
            and not (k in LATER_OPTIONS and v == LATER_OPTIONS[k])}


def run_settings(cfg: RLConfig, base: str, spec: dict) -> dict:
    """What a run's resume fingerprint hashes: the options that change its trajectory, the base
    model (`base`: its resolved path by default, or a caller's id of its content) and the task spec."""
    return {"rl": fingerprint_settings(cfg), "base": base, "task": spec}


def run_fingerprint(cfg: RLConfig, base: str, spec: dict) -> str:
    """A run's resume fingerprint (of `run_settings`)."""
    return rundir.fingerprint(run_settings(cfg, base, spec))


def needs_reference(cfg: RLConfig) -> bool:
    """Whether steps evaluate the frozen base model: only for a KL penalty (kl_coef > 0)."""
    return cfg.objective.kl_coef > 0


def needs_old_logp(cfg: RLConfig) -> bool:
    """Whether the behaviour log-probs need a pass of their own: when the policy moves before the
    last update (several updates per step) or asym-GRPO reads them. With one update
    the update's forward pass at the sampling parameters gives them exactly."""
    return cfg.updates_per_step > 1 or cfg.any_asym  # asym-GRPO ranks rollouts by log π̄


def shares_prompts(tr: Trainer) -> bool:
    """Whether the update runs each group's prompt once (`step.shared_prompt_batch`): groups of
    more than one rollout, mini- and micro-batches of whole groups (on a mesh, a multiple of the
    device count of groups per micro-batch), and no remat (the shared pass keeps its activations)."""
    cfg, n = tr.cfg, tr.cfg.group_size
    if n < 2 or cfg.mini_batch % n or cfg.micro_batch % n or tr.model_cfg.remat:
        return False
    return tr.mesh is None or (cfg.micro_batch // n) % tr.mesh.devices.size == 0


def score(tr: Trainer, params, ref_params, batch: dict, temperature: float = 1.0) -> dict:
    """Behaviour-policy (if `needs_old_logp`) and reference (if `ref_params`) token log-probs of the
    batch at log-prob temperature τ, one micro-batch at a time (old_logp kept if the batch has it)."""
    old, ref = [], []
    want_old, tau = needs_old_logp(tr.cfg) and "old_logp" not in batch, np.float32(temperature)
    if not want_old and ref_params is None:
        return batch
    for s0 in range(0, batch["tokens"].shape[0], tr.cfg.micro_batch):
        chunk = tr.put({k: batch[k][s0:s0 + tr.cfg.micro_batch] for k in ("tokens", "real")})
        if want_old:
            old.append(to_host(tr.fns.logp(params, chunk["tokens"], chunk["real"], tau)[0]))
        if ref_params is not None:
            ref.append(to_host(tr.fns.logp(ref_params, chunk["tokens"], chunk["real"], tau)[0]))
    batch = {**batch, "old_logp": np.concatenate(old)} if old else batch
    return {**batch, "ref_logp": np.concatenate(ref)} if ref else batch


def update(tr: Trainer, params, opt_state, batch: dict, temperature: float = 1.0,
           programs: UpdatePrograms | None = None, width: int | None = None):
    """`ppo_epochs` passes of mini-batch updates at log-prob temperature τ; returns (params,
    opt_state, mean metrics). The params and opt_state passed in are consumed (donated).
    `programs` (with the batch's completion `width`): the update programs compiled ahead."""
    sums: dict[str, float] = {}
    updates, mb, tau = 0, tr.cfg.mini_batch, np.float32(temperature)
    for _ in range(tr.cfg.optimizer.ppo_epochs):
        for s0 in range(0, batch["tokens"].shape[0], mb):
            mini = tr.put(batch_rows(batch, s0, mb))
            fn = tr.fns.update if programs is None else programs.program(
                params, opt_state, mini, tau, width)
            params, opt_state, m = fn(params, opt_state, mini, tau)
            for k, v in to_host(m).items():
                sums[k] = sums.get(k, 0.0) + float(v)
            updates += 1
    return params, opt_state, {k: v / updates for k, v in sums.items()}


def _json_float(x) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None


def step_record(cfg: RLConfig, step: int, c: Collected, batch: dict, gamma: float, g_P, means: dict,
                temperature: float, seconds: float) -> dict:
    """The step's log line (`STEP_METRICS`), before the held-out accuracy and warnings."""
    n, scores = cfg.group_size, c.groups.scores
    active_kept = (c.group_mask > 0) & (scores.max(1) > scores.min(1))
    return {
        "step": step + 1,
        "reward": float(scores.mean()),
        "success_rate": float(np.mean(c.success)),
        "active_fraction": float(np.mean(c.active_pool)),
        "active_pred_pooled": float(active_fraction_prediction(float(np.mean(c.success_pool)), n)),
        "active_pred_groups": float(np.mean(active_fraction_prediction(c.success_pool, n))),
        "gamma": gamma,
        "mean_g": float(g_P[active_kept].mean()) if np.any(active_kept) else None,
        "entropy": _json_float(means.get("entropy", np.nan)),
        "clip_low_frac": _json_float(means["clip_low_frac"]),
        "clip_high_frac": _json_float(means["clip_high_frac"]),
        "kl": _json_float(means["kl"]) if "kl" in means else None,
        "truncated_frac": float(np.mean(truncated_rows(c.groups).reshape(scores.shape)[c.group_mask > 0]))
        if np.any(c.group_mask > 0) else None,
        "response_length": float(c.groups.mask.sum(axis=1).mean()),
        "grad_norm": _json_float(means["grad_norm"]),
        "loss": _json_float(means["loss"]),
        "lr": lr_at(cfg, step),
        "sampling_rounds": c.rounds,
        "groups_kept": int(c.group_mask.sum()),
        "tokens_per_second": c.tokens_per_second,
        "step_seconds": seconds,
        "temperature": temperature,
        "kept_rollouts": int(np.sum(np.any(batch["loss_mask"] > 0, axis=1))),
        "mixed_near_frac": None,
        "heldout_accuracy": None,
        "warnings": [],
    }


def heldout_accuracy(tr: Trainer, params, sampling: SamplingConfig, step: int) -> float:
    """Share of the first `heldout_prompts` held-out prompts solved (verifier score 1) by one
    sample each at the base temperature (not the scheduled one, so the signal is comparable across
    steps and methods)."""
    cfg = tr.cfg
    count = min(cfg.run.heldout_prompts, tr.task.num_prompts("heldout"))
    prompts = [tr.task.prompt("heldout", cfg.run.data_seed, i) for i in range(count)]
    at_base = dataclasses.replace(sampling, temperature=cfg.rollout.temperature)
    groups = tr.sample(params, prompts, 1, at_base, safeguards.heldout_key(tr.base_key, step))
    return float(np.mean(groups.scores >= 1.0))


def run_rl(base_dir: str | Path, out_dir: str | Path, cfg: RLConfig, *, task_spec: dict | None = None,
           task=None, mesh=None, stop_after: int | None = None, overwrite: bool = False, progress: bool | None = True,
           chat_template: bool = False, label: str = "rl", dtype: str | None = None,
           remat: bool = False, log_to: tuple[str, ...] = (), base_id: str | None = None,
           keep_states: int = 2) -> RLResult:
    """Train (or resume) an RL run from the Hugging Face model dir `base_dir` into `out_dir`.

    task_spec: {"task": name, "config": {...}}; default: the base dir's catsim_task.json.
    task: a task object (any `catsim.llm.tasks.base.Task`) used instead of the spec's task.
    mesh: optional Mesh for data/FSDP sharding. stop_after: stop once this many steps are done
    (state saved, no final model). The base model is the frozen KL reference (kept only when
    kl_coef > 0).
    dtype: compute dtype ("float32" or "bfloat16"; None keeps the checkpoint's); parameters and
    optimiser state are float32 whatever it is (mixed precision). remat: recompute
    block activations in the backward pass (memory for long responses on GPU).
    base_id: what the base model is, for the resume fingerprint (default: its resolved path); a
    content hash lets a moved or copied run directory resume (`catsim.experiments.maze.pieces`).
    progress: steps done on stderr with `catsim.progress.RL_FIELDS` (True, False or None = automatic:
    `catsim.progress.progress_bar`). keep_states: the newest training-state checkpoints kept on
    disk (1 for a state that is committed, `catsim.experiments.maze.carry`).
    """
    t_start = time.perf_counter()
    rundir.check_base_outside(base_dir, out_dir)
    tr, params, spec = _trainer(base_dir, cfg, task_spec, task, mesh, chat_template, dtype, remat)
    opt_state = tr.fns.optimizer.init(params)
    if mesh is not None:
        from catsim.llm.model.sharding import place_on_mesh

        opt_state = place_on_mesh(opt_state, mesh)
    else:  # committed to the device, as the update returns it: the second step reuses the first's program
        opt_state = jax.device_put(opt_state, jax.devices()[0])
    # a copy: the update donates (consumes) the parameters it is given
    ref_params = jax.tree.map(jnp.copy, params) if needs_reference(cfg) else None
    settings = run_settings(cfg, base_id or str(Path(base_dir).resolve()), spec)
    fp = rundir.fingerprint(settings)
    run = rundir.RunDir(out_dir, state_dir=STATE_FILE, log_file=LOG_FILE, fingerprint=fp, what="RL run",
                        settings=settings, keep=keep_states)
    end, sampling = cfg.steps, tr.sampling
    gamma_schedule = cfg.gamma_schedule(tr.task.num_prompts("train"))
    with run.locked():
        if overwrite:
            run.clear(dirs=("checkpoints", "model"))
        (params, opt_state), start = run.resume((params, opt_state))
        safeguards.check_resumed("RL run", start, params, run.state_path)
        run.write_json(CONFIG_FILE, {"rl": dataclasses.asdict(cfg), "base_model": str(base_dir), "task": spec,
                                     "label": cfg.label(), "fingerprint": fp})
        history = run.history()  # the safeguards' view of the run so far
        end = cfg.steps if stop_after is None else min(cfg.steps, max(stop_after, start))
        if run.primary and start < end:  # where each piece of the run is computed (a resume elsewhere adds one)
            provenance.record_run_piece(run.path, start)
        bar = progress_bar(cfg.steps, label, progress if run.primary else False, unit="step", initial=start)
        log = run.open_log(start, log_to=log_to, config=cfg.flat(), run_name=f"{Path(out_dir).name} {cfg.label()}",
                           groups=STEP_GROUPS)
        saved = logged = moved = start  # the step of the last state save / log record / `params`
        programs = UpdatePrograms(tr.fns.update, cfg.rollout.max_new_tokens, background=PRECOMPILE_WIDTHS)
        try:
            with bar, log:
                for step in range(start, end):
                    with signals.defer_termination():  # SIGTERM stops at the end of the step
                        t0 = time.perf_counter()
                        temperature = cfg.rollout_temperature(step)
                        if temperature != sampling.temperature:  # temperature_varies: no new compile
                            sampling = dataclasses.replace(sampling, temperature=temperature)
                        c = collect(tr, params, step, sampling)
                        gamma = float(gamma_schedule(step, success_rate=float(np.mean(c.success))))
                        lengths = c.groups.mask.sum(axis=1).reshape(c.groups.scores.shape)
                        tau = cfg.logprob_temperature(step)
                        width = completion_width(c.groups, cfg.rollout.max_new_tokens)
                        groups = trim_completions(c.groups, width)
                        old = (token_logps(tr.fns.logp, tr.put, params, groups, cfg.micro_batch, tau)
                               if cfg.rare.unlikeliness_beta > 0 else None)  # what the unlikeliness reward ranks by
                        adv, _, g = compute_advantages(c.groups.scores, cfg, gamma, c.group_mask, c.success, lengths,
                                                       logp_PxN=None if old is None else completion_logps(old, groups))
                        batch = filter_overlong(build_batch(groups, adv, c.group_mask), groups, cfg)
                        if old is not None and needs_old_logp(cfg):  # scored above: not twice
                            batch["old_logp"] = old
                        batch = score(tr, params, ref_params, batch, tau)
                        asym_stats = {}
                        if cfg.any_asym:
                            batch, asym_stats = asymmetric_batch(batch, groups, adv, c.group_mask, cfg, tr.fns, params,
                                                                 tr.put, focal_P=g)
                        if shares_prompts(tr):
                            batch = shared_prompt_batch(batch, groups.prompt_tokens.shape[1], cfg.group_size)
                        params, opt_state, means = update(tr, params, opt_state, batch, tau, programs, width)
                        moved = step + 1
                        safeguards.check_step("RL", step + 1, means, saved, run.state_path)  # NaN: stop here
                        record = step_record(cfg, step, c, batch, gamma, g, means, temperature, time.perf_counter() - t0)
                        record.update(asym_stats)
                        if cfg.run.heldout_every and (step + 1) % cfg.run.heldout_every == 0:
                            record["heldout_accuracy"] = heldout_accuracy(tr, params, sampling, step)
                        history.append(record)
                        record["warnings"] = list(safeguards.step_warnings(history, cfg))
                        if unverified := take_unscored(tr.task):  # the verifier's batch budget ran out
                            record["warnings"].append(f"{unverified} completions not verified in time (scored 0)")
                        for message in record["warnings"] if run.primary else []:
                            bar.write(f"warning: {label}: step {step + 1}: {message}", file=sys.stderr)
                        log.write(record)
                        logged = step + 1
                        save = (step + 1) % cfg.run.save_every == 0 or step + 1 == end
                        snapshot = cfg.run.snapshot_every and (step + 1) % cfg.run.snapshot_every == 0
                        if save or snapshot:  # nothing non-finite is written
                            safeguards.check_params("RL", step + 1, params, saved, run.state_path)
                        if save:
                            run.save_state((params, opt_state), step + 1)
                            saved = step + 1
                        if snapshot:
                            run.save_model(f"checkpoints/step_{step + 1:06d}", tr.model_cfg, params, tr.tokenizer)
                        bar.set_postfix(reward=f"{record['reward']:.3f}", active=f"{record['active_fraction']:.2f}",
                                        pred=f"{record['active_pred_pooled']:.2f}", H=f"{record['entropy'] or 0:.2f}",
                                        len=f"{record['response_length']:.1f}")  # progress.RL_FIELDS
                        bar.update(1)
                    signals.check()
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM (the CLI): keep the steps done, rerun to resume
            if logged > saved and moved == logged:  # `params` are those of the last logged step
                try:
                    run.save_state((params, opt_state), logged)
                except RuntimeError:  # Ctrl-C inside an update whose inputs were donated:
                    pass  # the last periodic save stands
            raise
        finally:
            programs.close()
        if end == cfg.steps:
            run.save_model("model", tr.model_cfg, params, tr.tokenizer, extra={rundir.TASK_FILE: spec})
    barrier(f"catsim-rl-end-{fp}-{end}")
    last = next((r for r in reversed(history) if r["step"] == end), None)
    return RLResult(str(run.path), end, end == cfg.steps, time.perf_counter() - t_start, last)


def _trainer(base_dir, cfg: RLConfig, task_spec, task, mesh, chat_template, dtype, remat):
    """(Trainer, params, task spec): the base model, tokenizer, task and jitted functions of a run."""
    from catsim.llm.model.checkpoint import load_model
    from catsim.llm.model.sharding import activation_sharding, shard_params
    from catsim.llm.model.tokenizer import Tokenizer

    if task is None:
        spec = task_spec or rundir.read_task_file(base_dir)
        task = rundir.task_from_spec(spec)
    else:
        spec = task_spec or rundir.task_spec(task)
    model_cfg, params = load_model(base_dir, dtype=dtype, mesh=mesh, weight_dtype="float32",
                                   donatable=True)  # the update donates them
    if remat:
        model_cfg = model_cfg.replace(remat=True)
    tokenizer = Tokenizer.from_dir(base_dir)
    if mesh is not None:
        devices = mesh.devices.size
        if cfg.rollouts_per_step % devices or cfg.micro_batch % devices:
            raise CatsimError(f"rollouts per step ({cfg.rollouts_per_step}) and micro-batch "
                              f"({cfg.micro_batch}) must be divisible by the {devices} devices")
        if cfg.run.heldout_every and cfg.run.heldout_prompts % devices:
            raise CatsimError(f"heldout_prompts ({cfg.run.heldout_prompts}) must be divisible by the "
                              f"{devices} devices")
        params = shard_params(params, model_cfg, mesh)
    fns = make_functions(model_cfg, cfg, None if mesh is None else activation_sharding(mesh))
    stops, pad = stop_and_pad(model_cfg, tokenizer)
    sampling = SamplingConfig(max_new_tokens=cfg.rollout.max_new_tokens, temperature=cfg.rollout.temperature,
                              top_p=cfg.rollout.top_p, stop_tokens=stops, pad_token=pad,
                              temperature_varies=cfg.temperature_plan() != "constant")
    return (Trainer(cfg, task, model_cfg, tokenizer, fns, sampling, jax.random.key(cfg.run.seed), mesh,
                    chat_template), params, spec)


def read_log(out_dir: str | Path) -> list[dict]:
    """The per-step records of a run's rl_log.jsonl."""
    return rundir.read_log(Path(out_dir) / LOG_FILE)
