"""Running the simulator over grids: `simulate` and the resumable `sweep` (no plotting; the
regimes and tables of Fig. 2 are in `catsim.sim.analysis`, the figure in `catsim.plots.fig2`).

A *cell* is one (method, N): all γ values × seeds of it run as one vmapped batch (one compiled
program per N). `sweep` stores each finished cell in `<out>/cells/` and skips it on a re-run, so
an interrupted sweep resumes where it stopped; `sweep(part=(I, P))` computes one part's share of
the cells (job arrays, `jax.distributed` processes; `catsim.sim.sweep_parts`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import time
from collections.abc import Sequence
from pathlib import Path

import jax
import numpy as np

from catsim.errors import CatsimError
from catsim.files import write_text
from catsim.objectives._validate import check_nonnegative
from catsim.objectives.focal import low_lr_multiplier
from catsim.sim import engine, sweep_parts
from catsim.sim.config import PAPER_GAMMAS, PAPER_GROUP_SIZES, SimConfig
from catsim.sim.metrics import ALL_METRICS
from catsim.sim.results import SimResults, combine

CHUNK_STEPS = 100  # steps per compiled chunk of the host loop (progress granularity)


def _seed_list(seeds) -> tuple[int, ...]:
    if isinstance(seeds, int):
        if seeds < 1:
            raise CatsimError(f"seeds must be >= 1, got {seeds}")
        return tuple(range(seeds))
    out = tuple(int(s) for s in seeds)
    if not out or any(s < 0 for s in out) or len(set(out)) != len(out):
        raise CatsimError(f"seeds must be distinct whole numbers >= 0, got {list(seeds)}")
    return out


def _gamma_list(gammas) -> tuple[float, ...]:
    out = tuple(float(g) for g in gammas)
    for g in out:  # γ meets the rules in float32: 1e39 would be inf there (no update)
        check_nonnegative("gamma", g)
    return out


def _check_k(configs: Sequence[SimConfig]) -> None:
    """k of the pass@k rules against every N of a run, before any work (once per distinct N)."""
    for config in {c.group_size: c for c in configs}.values():
        config.check_k()


def _records_per_chunk(num_records: int, log_every: int) -> int:
    target = max(1, CHUNK_STEPS // log_every)
    return max(d for d in range(1, min(target, num_records) + 1) if num_records % d == 0)


def learning_rate_for(config: SimConfig) -> float:
    """η of a run: the configured rate, times m_G under the App. N control (G = low_lr_gamma > 0).

    The control is GRPO at a reduced rate: G only sets the rate; the focal γ of the run is
    whatever the run's γ says (normally 0)."""
    lr = config.update.learning_rate
    if config.update.low_lr_gamma > 0:
        lr *= low_lr_multiplier(config.update.low_lr_gamma)
    return lr


def low_lr_variants(config: SimConfig, low_lr_gammas: Sequence[float] | None) -> list[SimConfig]:
    """One config per App. N control value G in `low_lr_gammas` (0 = no control), each with its
    own method label (`<method>+lowlr<G>`, or `update.label` when `method` is unset); None keeps
    `config` alone. Validates every G (CatsimError)."""
    if low_lr_gammas is None:
        return [config]
    values = tuple(dict.fromkeys(float(g) for g in low_lr_gammas))
    if not values:
        raise CatsimError("no low-lr control values given")
    out = []
    for g in values:
        update = dataclasses.replace(config.update, low_lr_gamma=g)
        method = f"{config.method}+lowlr{g:g}" if config.method and g > 0 else config.method
        out.append(dataclasses.replace(config, update=update, method=method))
    return out


def run_cell(config: SimConfig, gammas: Sequence[float], seeds: Sequence[int], *,
             progress=None, shard: bool = False, share_with: Sequence[int] | None = None) -> dict:
    """Run every (γ, seed) of one config (one N) as one batch.

    Returns metric name -> [len(gammas), len(seeds), steps/log_every + 1] float32 NumPy arrays.
    `progress`: an object with `update(n)` (e.g. tqdm), advanced by run-steps done.
    `share_with`: the other N of the same job; a program shared between group sizes is used only
    when one of them needs it too (None: whenever possible). `shard`: split the runs over the
    local devices (`engine.run_sharding`; only up to the program's N `engine.SHARD_MAX_GROUP_SIZE`
    when that is set), each device then running its runs one after another on the CPU
    (`devices.RUNS_ONE_BY_ONE`); results agree either way to float32 rounding (the programs fuse
    differently), which can move a run onto another sampling path: seed noise.
    """
    for g in gammas:
        if not (np.isfinite(g) and g >= 0):
            raise CatsimError(f"gamma must be a finite number >= 0, got {g}")
    runs = list(itertools.product(gammas, seeds))
    # NumPy, then placed once (below): no small programs to compile for them
    gamma_R = np.asarray([g for g, _ in runs], np.float32)
    lr_R = np.full((len(runs),), learning_rate_for(config), np.float32)
    num_records = config.steps // config.log_every
    per_chunk = _records_per_chunk(num_records, config.log_every)
    # One compiled program serves several N (engine.program_group_size): identical counts, fewer
    # compilations in a sweep.
    shared = (engine.can_share_group_size(config) if share_with is None
              else engine.shares_program(config, share_with))
    program_n = engine.program_group_size(config) if shared else config.group_size
    limit = engine.SHARD_MAX_GROUP_SIZE
    split = shard and (limit is None or program_n <= limit)
    sharding = engine.run_sharding(len(runs)) if split else None  # None: one device
    keys = engine.run_keys([s for _, s in runs], sharding)
    gamma_R, lr_R = jax.device_put((gamma_R, lr_R), sharding)
    init, chunk = engine.make_batched_chunked(config, per_chunk, shared_group_size=shared,
                                              sharding=sharding)
    extra = (np.int32(config.group_size),) if shared else ()
    consts = engine.make_constants(config)
    state = init(consts, lr_R)
    parts = []
    for c in range(num_records // per_chunk):
        state, recs = chunk(consts, state, keys, gamma_R, lr_R, c * per_chunk, *extra)
        parts.append(jax.device_get(recs))
        if progress is not None:
            progress.update(per_chunk * config.log_every * len(runs))
    first = jax.device_get(engine.initial_metrics(consts))
    out = {}
    for name in ALL_METRICS:
        body = np.concatenate([p[name] for p in parts], axis=1)  # [R, S]
        start = np.full((len(runs), 1), first[name], np.float32)
        out[name] = np.concatenate([start, body], axis=1).reshape(len(gammas), len(seeds), -1)
    return out


def _describe(config: SimConfig) -> dict:
    d = dataclasses.asdict(config)
    d.pop("group_size")
    return d


def simulate(config: SimConfig, *, group_sizes: Sequence[int] | None = None,
             gammas: Sequence[float] | None = None, seeds=1,
             low_lr_gammas: Sequence[float] | None = None, progress: bool | None = False,
             shard: bool = False) -> SimResults:
    """Run `config` for every N in `group_sizes` × γ in `gammas` × seed.

    Args:
      config: the simulation (its group_size / γ are used when the lists are None).
      group_sizes: N values; gammas: focal γ values (constant, or the schedule's target γ).
      seeds: K (seeds 0…K−1) or a list of seeds.
      low_lr_gammas: App. N control values G (lr × m_G; 0 = off), one method each
        (`low_lr_variants`); None = the config's own `update.low_lr_gamma`.
      progress: progress on stderr (`catsim.progress.progress_bar`'s mode: True, False, or None =
        a bar on a terminal only).
      shard: split the run axis over all local devices.

    Returns:
      SimResults with dims (method, gamma, n, seed, step).
    """
    sizes = tuple(group_sizes) if group_sizes is not None else (config.group_size,)
    gs = _gamma_list(gammas) if gammas is not None else (config.update.gamma.gamma,)
    seed_list = _seed_list(seeds)
    if not sizes:
        raise CatsimError("no group sizes given")
    configs = [dataclasses.replace(variant, group_size=int(n))  # validates N
               for variant in low_lr_variants(config, low_lr_gammas) for n in sizes]
    _check_k(configs)
    bar = _progress_bar(len(configs) * len(gs) * len(seed_list) * config.steps, progress, long=False)
    parts = []
    try:
        for cfg in configs:
            cell = run_cell(cfg, gs, seed_list, progress=bar, shard=shard, share_with=sizes)
            parts.append(_cell_results(cfg, gs, seed_list, cell))
    finally:
        if bar is not None:
            bar.close()
    return combine(parts)


def _cell_results(cfg: SimConfig, gammas, seeds, cell: dict) -> SimResults:
    steps = np.arange(0, cfg.steps + 1, cfg.log_every)
    data = {name: array[None, :, None] for name, array in cell.items()}
    return SimResults((cfg.method_label,), tuple(gammas), (cfg.group_size,), tuple(seeds), steps,
                      data, {cfg.method_label: _describe(cfg)})


def _progress_bar(total: int, mode: bool | None, long: bool = True):
    """Run-steps done, on stderr (`catsim.progress.progress_bar`; None when switched off)."""
    if mode is False:
        return None
    from catsim.progress import progress_bar

    return progress_bar(total, "simulator", mode, unit="run-step", unit_scale=True, long=long)


def _cell_key(cfg: SimConfig) -> tuple[str, int]:
    return cfg.method_label, cfg.group_size


def _cell_signature(cfg: SimConfig, gammas, seeds) -> str:
    text = json.dumps([dataclasses.asdict(cfg), list(gammas), list(seeds)], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


SWEEP_LOG = "sweep_log.jsonl"


def sweep_settings(config: SimConfig, group_sizes, gammas, seeds, low_lr_gammas=None) -> dict:
    """The settings that fix a sweep's cells (JSON-able; what the parts of one sweep must share)."""
    return {"config": dataclasses.asdict(config), "group_sizes": [int(n) for n in group_sizes],
            "gammas": [float(g) for g in gammas], "seeds": list(_seed_list(seeds)),
            "low_lr_gammas": None if low_lr_gammas is None else [float(g) for g in low_lr_gammas]}


def sweep(config: SimConfig, out_dir, *, group_sizes: Sequence[int] = PAPER_GROUP_SIZES,
          gammas: Sequence[float] = PAPER_GAMMAS, seeds=4,
          low_lr_gammas: Sequence[float] | None = None, resume: bool = True,
          progress: bool | None = True, shard: bool = False, log=None, log_to=(),
          part: tuple[int, int] | None = None) -> SimResults | None:
    """Resumable grid run: one cell file per (method, N) in `<out_dir>/cells/`, then
    `<out_dir>/results.npz`. `low_lr_gammas` adds one method per App. N control value, as in
    `simulate`.

    A finished cell is reused when its file can be read and holds this cell (its configuration
    signature, coordinates and metrics); a damaged one (truncated, empty, other shapes, another
    cell's file) is recomputed, with one line to `log`. A finished cell computed with other settings
    (the same method label and N; other steps, policy, γ values, seeds, ...) is not overwritten: the
    call is refused with a CatsimError naming them, before any work (`resume=False` recomputes it).
    Returns the combined SimResults of this call's grid. `log(msg)` receives one-line status
    messages.

    `<out_dir>/results.npz` and `timings.json` summarise every finished cell in `<out_dir>/cells/`,
    not only this call's: a researcher who sweeps two rules (or two sets of N) into one folder
    expects its results to hold both, and a call that reads everything back must not drop the
    cells it was not asked about (`sweep_parts.other_cells`). Cells that one array cannot hold
    together (other γ values, seeds or recorded steps), or a cell of one of this call's method
    labels computed with other settings, are refused before any work (CatsimError: another --out);
    a (method, N) never swept is NaN in the arrays (`combine`). This call's methods come first,
    then the others by file name; the seconds each cell took are kept in its file.

    Every cell of the call (cached or run) is one record appended to `<out_dir>/sweep_log.jsonl`
    (seed-mean final Mret and Qpos per γ, seconds computing it in this call or None), mirrored to
    the `log_to` sinks ("tensorboard", "wandb"); step = the record's number in the log, rising over
    calls (a log of every call, not a summary).

    `part=(I, P)`: compute only part I's share of the cells (`sweep_parts.cell_owners`, fixed by
    the grid) and return the results of that share (None when it has no cell); results.npz is
    not written (a later call without `part` finds every cell and only assembles). `<out_dir>/sweep.json` records the
    parts' settings; a part (or the assembling call) with other settings is refused with a
    CatsimError before any work. The log and timings go to `sweep_log.part<I>of<P>.jsonl` and
    `timings.part<I>of<P>.json`.
    """
    plan = plan_sweep(config, out_dir, group_sizes=group_sizes, gammas=gammas, seeds=seeds,
                      low_lr_gammas=low_lr_gammas, resume=resume, log=log, part=part)
    return _run_plan(plan, progress=progress, shard=shard, log_to=log_to)


@dataclasses.dataclass(frozen=True)
class SweepPlan:
    """What a `sweep` call will do, decided before any cell runs (`plan_sweep`)."""

    config: SimConfig  # the sweep's base config
    out: Path  # the sweep directory
    group_sizes: tuple[int, ...]
    gammas: tuple[float, ...]
    seeds: tuple[int, ...]
    configs: list  # every cell of the grid, in grid order (one SimConfig per (variant, N))
    mine: list  # the cells of this call's part (all of them without a part)
    done: dict  # {cell key: SimResults} read back from finished cell files
    others: dict  # {cell file: SimResults}: the finished cells on disk outside the grid
    todo: dict  # {cell key: (cell file, configuration signature)} to compute
    part: tuple[int, int] | None


def plan_sweep(config: SimConfig, out_dir, *, group_sizes: Sequence[int] = PAPER_GROUP_SIZES,
               gammas: Sequence[float] = PAPER_GAMMAS, seeds=4, low_lr_gammas: Sequence[float] | None = None,
               resume: bool = True, log=None, part: tuple[int, int] | None = None) -> SweepPlan:
    """The cells of a sweep, which of them are this part's, and which of those are finished (read
    back) or to compute; checks the settings against `<out_dir>/sweep.json` (CatsimError before
    any work), refuses a finished cell of other settings (`sweep_parts.other_settings`) and says
    with one line to `log` why a damaged cell file is recomputed."""
    part = sweep_parts.check_part(part) if part is not None else None
    out = Path(out_dir)
    cells_dir = out / "cells"
    gs = _gamma_list(gammas)
    seed_list = _seed_list(seeds)
    variants = low_lr_variants(config, low_lr_gammas)
    configs = [dataclasses.replace(variant, group_size=int(n))
               for variant in variants for n in group_sizes]
    if not configs:
        raise CatsimError("no group sizes given")
    _check_k(configs)
    settings = sweep_settings(config, group_sizes, gs, seed_list, low_lr_gammas)
    if part is not None:
        sweep_parts.claim_manifest(out, settings)
    elif resume:
        sweep_parts.check_manifest(out, settings)
    owners = sweep_parts.cell_owners(configs, part[1]) if part is not None else [0] * len(configs)
    mine = [cfg for cfg, owner in zip(configs, owners) if part is None or owner == part[0]]
    cells_dir.mkdir(parents=True, exist_ok=True)
    steps = np.arange(0, config.steps + 1, config.log_every)
    todo, done = {}, {}
    for cfg in mine:
        path = cells_dir / f"{cfg.method_label}_n{cfg.group_size}.npz"
        sig = _cell_signature(cfg, gs, seed_list)
        if resume and path.exists():
            try:
                cached = SimResults.load(path)
                problem = sweep_parts.cell_problem(cached, label=cfg.method_label, group_size=cfg.group_size,
                                                   gammas=gs, seeds=seed_list, steps=steps, signature=sig)
            except CatsimError as err:
                cached, problem = None, str(err).removeprefix(f"cannot read simulator results from {path}: ")
            differ = problem and cached is not None and sweep_parts.other_settings(
                cached, label=cfg.method_label, group_size=cfg.group_size, description=_describe(cfg),
                gammas=gs, seeds=seed_list)
            if differ:  # a finished cell of other settings: not overwritten (--no-resume recomputes it)
                raise CatsimError(f"{path} holds this cell computed with other settings ({differ}): use "
                                  f"another --out, or --no-resume to recompute it with these")
            if problem is None:
                done[_cell_key(cfg)] = cached
                continue
            if log:
                log(f"cell {path.name} cannot be used ({problem}): recomputing it")
        todo[_cell_key(cfg)] = (path, sig)
    own = {cells_dir / f"{cfg.method_label}_n{cfg.group_size}.npz" for cfg in configs}
    others = sweep_parts.other_cells(cells_dir, own, descriptions={v.method_label: _describe(v) for v in variants},
                                     gammas=gs, seeds=seed_list, steps=steps, log=log)
    if log and part is not None:
        log(f"part {part[0]}/{part[1]}: {len(mine)} of {len(configs)} cells are this part's, "
            f"{len(todo)} to compute")
    if log and done:
        log(f"resuming: {len(done)} of {len(mine)} cells already done in {cells_dir}")
    return SweepPlan(config, out, tuple(int(n) for n in group_sizes), gs, seed_list, configs, mine, done, others,
                     todo, part)


def _run_plan(plan: SweepPlan, *, progress: bool | None, shard: bool, log_to=()) -> SimResults | None:
    """Compute the plan's cells to do (grid order), log every cell of the part, assemble."""
    config, out, gs, seed_list, part = plan.config, plan.out, plan.gammas, plan.seeds, plan.part
    parts = dict(plan.done)
    bar = _progress_bar(len(plan.todo) * len(gs) * len(seed_list) * config.steps, progress)
    # the whole grid's N: a cell runs on the same program in every part and on every resume
    share_with = [c.group_size for c in plan.configs]
    suffix = f".part{part[0]}of{part[1]}" if part is not None else ""
    from catsim.tracking import MetricsWriter, read_records

    log_name = SWEEP_LOG.replace(".jsonl", f"{suffix}.jsonl")
    logged = [r["step"] for r in read_records(out / log_name)]
    offset = max(logged, default=0)  # appended: the records of earlier calls are kept
    writer = MetricsWriter(out, log_name, log_to=log_to, resume_step=offset or None, run_name=out.name + suffix,
                           groups={"mret": "catsim", "qpos": "catsim", "group_size": "catsim"},
                           config={"method": config.method_label, "group_sizes": list(plan.group_sizes),
                                   "gammas": list(gs), "seeds": list(seed_list), "steps": config.steps})
    try:
        with writer:
            for index, cfg in enumerate(plan.configs):  # cells in grid order, so the log's steps rise
                if _cell_key(cfg) not in parts and _cell_key(cfg) not in plan.todo:
                    continue  # another part's
                seconds = None
                if _cell_key(cfg) in plan.todo:
                    path, sig = plan.todo[_cell_key(cfg)]
                    t0 = time.perf_counter()
                    cell = run_cell(cfg, gs, seed_list, progress=bar, shard=shard, share_with=share_with)
                    seconds = time.perf_counter() - t0
                    res = _cell_results(cfg, gs, seed_list, cell)
                    res = dataclasses.replace(res, attrs=res.attrs | {"signature": sig, "seconds": seconds})
                    res.save(path)
                    parts[_cell_key(cfg)] = res
                writer.write(_cell_record(offset + index + 1, cfg, parts[_cell_key(cfg)], seconds))
    finally:
        if bar is not None:
            bar.close()
    if not plan.mine:
        return None  # a part with no cell (more parts than cells)
    cells = [parts[_cell_key(c)] for c in plan.mine]
    every = cells if part is not None else cells + list(plan.others.values())
    if part is None:
        _without_cell_attrs(combine(every)).save(out / "results.npz")
    timings = _timings(every)
    if timings:
        write_text(out / f"timings{suffix}.json", json.dumps(
            {"seconds_per_cell": timings, "total_seconds": sum(timings.values())}, indent=1))
    return _without_cell_attrs(combine(cells))


def _without_cell_attrs(results: SimResults) -> SimResults:
    """`results` less the attributes of one cell's file (its signature and seconds)."""
    return dataclasses.replace(
        results, attrs={k: v for k, v in results.attrs.items() if k not in ("signature", "seconds")})


def _timings(cells: Sequence[SimResults]) -> dict[str, float]:
    """Seconds per cell of the cells that recorded them: keyed by N when they share one method
    label, else by cell file stem (`<method>_n<N>`)."""
    timed = [c for c in cells if isinstance(c.attrs.get("seconds"), (int, float))]
    by_n = len({c.methods[0] for c in timed}) == 1
    return {str(c.group_sizes[0]) if by_n else f"{c.methods[0]}_n{c.group_sizes[0]}": float(c.attrs["seconds"])
            for c in timed}


def _cell_record(step: int, cfg: SimConfig, res: SimResults, seconds: float | None) -> dict:
    """One line of the sweep's log: a cell's seed-mean final metrics per γ (and its run time)."""
    record = {"step": step, "method": cfg.method_label, "group_size": cfg.group_size, "seconds": seconds}
    for metric in ("mret", "qpos"):
        final = res.final(metric)[0, :, 0, :]  # [gamma, seed]
        for g, row in zip(res.gammas, final):
            record[f"{metric}/gamma={g:g}"] = float(np.mean(row))
    return record
