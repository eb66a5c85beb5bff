"""Reading the Maze study's finished pieces back (`catsim.experiments.maze.study`).

A piece is a warm-up's evaluation (`s<seed>/base_eval.json`) or an RL run's (`s<seed>/<run>/eval.json`).
One that cannot be used — missing, empty, truncated, not JSON, or written with other settings (another
n, other k, another number of mazes, another run) — reads as None, with one line saying why when the
file was there: the study then recomputes it, as the simulator's sweep does with a damaged cell.

    base = read_piece(path, lambda d: eval_problem(d, n=256, prompts=256, ks=ks), say=print)
    run = read_run(sp, out / "s0", "grpo", 8, 0.0, 0, say=print)   # the same, with a preset's settings

Also here: what an RL run's resume fingerprint holds of its warm-up (`base_identity`, its content, so a
moved or copied study resumes; `rl_base_id` accepts a state of the earlier path fingerprint where it
was made), and whether a results.json can make a report (`results_problem`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path

from catsim.errors import CatsimError
from catsim.experiments.maze.presets import StudyPreset, run_label, run_names


def read_piece(path: Path, problem: Callable[[dict], str | None], say=print) -> dict | None:
    """The JSON object in `path` when `problem(data)` finds nothing wrong with it, else None (one line
    to `say` when the file exists but cannot be used)."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        why = problem(data) if isinstance(data, dict) else "not a JSON object"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        why = f"unreadable ({type(err).__name__}: {err})" if path.stat().st_size else "empty"
    if why is None:
        return data
    say(f"{path}: {why}; recomputing it")
    return None


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _prob(x) -> bool:
    return _finite(x) and 0.0 <= x <= 1.0


def eval_problem(d: dict, *, n: int, prompts: int, ks, solution_mass: bool = True) -> str | None:
    """What is wrong with an evaluation (`study.evaluate`'s dict) for these settings, or None."""
    want_ks = [str(k) for k in ks if k <= n]
    if d.get("n") != n:
        return f"evaluated with n = {d.get('n')!r} samples per maze, not {n}"
    passk = d.get("pass_at_k")
    if not isinstance(passk, dict) or sorted(passk) != sorted(want_ks):
        return f"pass@k for k = {list(passk) if isinstance(passk, dict) else passk!r}, not {want_ks}"
    if not all(_prob(v) for v in passk.values()):
        return "a pass@k value outside [0, 1]"
    counts = d.get("num_correct")
    if not isinstance(counts, list) or len(counts) != prompts:
        return f"{len(counts) if isinstance(counts, list) else 'no'} per-maze counts, not {prompts}"
    if not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= n for c in counts):
        return f"a per-maze count outside 0…{n}"
    if not _prob(d.get("greedy_solve_rate")):
        return "no greedy solve rate in [0, 1]"
    if solution_mass:
        mass = d.get("solution_prob")
        if not isinstance(mass, list) or len(mass) != prompts or not all(_prob(m) for m in mass):
            return f"π(solution) is not {prompts} probabilities"
    return None


def run_problem(d: dict, *, method: str, group_size: int, gamma: float, seed: int, label: str, steps: int,
                n: int, prompts: int, ks, curve_n: int, checkpoints: int) -> str | None:
    """What is wrong with an RL run's eval.json for this run and these settings, or None."""
    want = {"method": method, "group_size": group_size, "gamma": gamma, "seed": seed, "label": label}
    other = sorted(k for k, v in want.items() if d.get(k) != v)
    if other:
        return f"holds another run ({', '.join(f'{k} = {d.get(k)!r}' for k in other)})"
    final = d.get("final")
    if not isinstance(final, dict):
        return "no final evaluation"
    why = eval_problem(final, n=n, prompts=prompts, ks=ks)
    if why:
        return f"final evaluation: {why}"
    curve = d.get("curve")
    if not isinstance(curve, list) or len(curve) != checkpoints:
        return f"{len(curve) if isinstance(curve, list) else 'no'} checkpoint evaluations, not {checkpoints}"
    want_ks = sorted(str(k) for k in ks if k <= curve_n)
    for c in curve:
        if (not isinstance(c, dict) or not isinstance(c.get("step"), int) or not isinstance(c.get("pass_at_k"), dict)
                or sorted(c["pass_at_k"]) != want_ks or not all(_prob(v) for v in c["pass_at_k"].values())):
            return "a damaged checkpoint evaluation"
    rewards = d.get("reward_curve")
    if not isinstance(rewards, list) or len(rewards) != steps:
        return f"{len(rewards) if isinstance(rewards, list) else 'no'} RL steps logged, not {steps}"
    if not all(map(_finite, rewards)):
        return "a reward that is not a number"
    return None


# ----------------------------------------------------------------------------- an RL run's base
BASE_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "catsim_task.json")


def read_base(sp: StudyPreset, sdir: Path, say) -> dict | None:
    """A seed's warm-up evaluation, or None when missing or unusable (then recomputed)."""
    return read_piece(sdir / "base_eval.json", lambda d: eval_problem(
        d, n=sp.eval_n, prompts=sp.eval_prompts, ks=sp.ks), say)


def read_run(sp: StudyPreset, sdir: Path, method: str, n: int, gamma: float, seed: int, say) -> dict | None:
    """A finished RL run's eval.json, or None when missing or unusable (then recomputed)."""
    label = run_label(method, n, gamma)
    return read_piece(sdir / label / "eval.json", lambda d: run_problem(
        d, method=method, group_size=n, gamma=gamma, seed=seed, label=label, steps=sp.rl_steps, n=sp.eval_n,
        prompts=sp.eval_prompts, ks=sp.ks, curve_n=sp.curve_n,
        checkpoints=sp.rl_steps // sp.snapshot_every()), say)


def base_identity(base: Path) -> str:
    """What a warm-up model is, not where it lies: the SHA-256 of its weights, config, tokenizer and
    task files. The RL runs are fingerprinted with it (`run_rl(base_id=...)`), so a copied or moved
    study still resumes them."""
    digest = hashlib.sha256()
    for path in sorted([*(base / name for name in BASE_FILES), *base.glob("*.safetensors"),
                        base / "model.safetensors.index.json"]):
        if path.is_file():
            digest.update(f"{path.name}\0{path.stat().st_size}\0".encode())
            with open(path, "rb") as fh:
                digest.update(hashlib.file_digest(fh, "sha256").digest())
    return f"sha256:{digest.hexdigest()}"


def _has_state(rdir: Path) -> bool:
    from catsim.llm.rl import STATE_FILE

    state = rdir / STATE_FILE
    return (state.is_dir() and any(p.name.isdigit() for p in state.iterdir())) or \
        state.with_name(f"{STATE_FILE}.safetensors").is_file()


def rl_base_id(rdir: Path, base: Path, cfg, content: str) -> str | None:
    """The base id to run (or resume) the RL run in `rdir` under: `content` (`base_identity`), or
    None — the base's path, catsim's earlier fingerprint — for a state saved that way where the study
    lies now. Raises CatsimError for a state saved for another base (a study moved before the
    fingerprint held the content, or another warm-up): it cannot resume, and only that state stands
    in the way of rerunning the run."""
    from catsim.llm import rundir
    from catsim.llm.rl import CONFIG_FILE, STATE_FILE
    from catsim.llm.rl.loop import run_fingerprint

    if not _has_state(rdir):
        return content
    try:
        saved = json.loads((rdir / CONFIG_FILE).read_text())["fingerprint"]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
        return content  # no record to compare: run_rl compares the state's own
    spec = rundir.read_task_file(base)
    if saved == run_fingerprint(cfg, content, spec):
        return content
    if saved == run_fingerprint(cfg, str(base.resolve()), spec):
        return None
    raise CatsimError(f"{rdir}: its saved RL state was not made from {base} as it is now (another warm-up, or "
                      "this study in another folder under an earlier catsim, which fingerprinted the base by its "
                      f"path); finish the run in that folder, or delete {rdir / STATE_FILE} to redo it from step 0")


# ----------------------------------------------------------------------------- results.json
def _whole(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _preset(d) -> tuple[StudyPreset | None, str | None]:
    """The StudyPreset a results.json records, or (None, what is wrong with it)."""
    if not isinstance(d, dict):
        return None, "not a JSON object"
    fields = {f.name: f for f in dataclasses.fields(StudyPreset)}
    if set(d) - set(fields):
        return None, f"unknown settings {sorted(set(d) - set(fields))}"
    for name, value in d.items():
        kind = type(fields[name].default)
        ok = {str: lambda v: isinstance(v, str), int: _whole, float: _finite,
              tuple: lambda v: isinstance(v, list)}[kind](value)
        if not ok:
            return None, f"{name} = {value!r} is not a {kind.__name__ if kind is not tuple else 'list'}"
    try:
        return StudyPreset(**d), None
    except (CatsimError, TypeError, ValueError, KeyError, IndexError) as err:
        return None, f"{type(err).__name__}: {err}" if not isinstance(err, CatsimError) else str(err)


TEST_FIELDS = {"group_size": _whole, "gamma": _finite, "k": _whole, "units": _whole, "delta": _finite,
               "delta_mean": _finite, "p_value": _finite, "significant": lambda v: isinstance(v, bool),
               "iterations": lambda v: _whole(v) and v > 0, "n": _whole, "m": _whole, "alpha": _finite,
               "interval": lambda v: isinstance(v, list) and len(v) == 2 and all(map(_finite, v)),
               "delta_per_seed": lambda v: isinstance(v, dict) and all(k.isdigit() and _finite(x) for k, x in v.items())}


def _entries_problem(name: str, entries, fields: dict, keys, want: set, optional=()) -> str | None:
    """What is wrong with a list of test or summary entries: each has `fields` (name → check; those in
    `optional` may be missing), and their `keys` are exactly `want`, once each."""
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        return f"{name}: not a list of objects"
    for e in entries:
        bad = sorted(f for f, ok in fields.items() if (f in e and not ok(e[f])) or (f not in e and f not in optional))
        if bad:
            return f"{name}: an entry without a valid {', '.join(bad)}"
    have = [tuple(e[k] for k in keys) for e in entries]
    if len(have) != len(want) or set(have) != want:
        return f"{name}: not one entry per {', '.join(keys)} of the preset"
    return None


def results_problem(d) -> str | None:
    """What keeps a results.json (`study.collect`'s dict) from making a report, or None: its
    preset, each warm-up's and run's evaluation as the study checks its pieces, and the summary and
    tests as entries of the right fields for exactly the preset's runs."""
    if not isinstance(d, dict):
        return "not a JSON object"
    missing = [k for k in ("preset", "bases", "runs", "summary", "tests") if k not in d]
    if missing:
        return f"no {', '.join(missing)}"
    sp, why = _preset(d["preset"])
    if why:
        return f"preset: {why}"
    names = run_names(sp)
    seeds = sorted({seed for *_, seed in names})
    bases = d["bases"]
    if not isinstance(bases, dict) or sorted(bases) != sorted(str(s) for s in seeds):
        return f"bases: not one per seed {seeds}"
    for seed, base in bases.items():
        why = eval_problem(base, n=sp.eval_n, prompts=sp.eval_prompts, ks=sp.ks) if isinstance(base, dict) \
            else "not a JSON object"
        if why:
            return f"bases[{seed}]: {why}"
    runs = d["runs"]
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        return "runs: not a list of objects"
    have = [(r.get("method"), r.get("group_size"), r.get("gamma"), r.get("seed")) for r in runs]
    if sorted(map(repr, have)) != sorted(map(repr, names)):
        return f"runs: not the preset's {len(names)} runs"
    for r, (method, n, gamma, seed) in zip(runs, have):
        label = run_label(method, n, gamma)
        why = run_problem(r, method=method, group_size=n, gamma=gamma, seed=seed, label=label, steps=sp.rl_steps,
                          n=sp.eval_n, prompts=sp.eval_prompts, ks=sp.ks, curve_n=sp.curve_n,
                          checkpoints=sp.rl_steps // sp.snapshot_every())
        if why or not _finite(r.get("rl_seconds")):
            return f"run s{seed}/{label}: {why or 'no RL time'}"
    ks = sorted(str(k) for k in sp.ks)
    passk = lambda v: isinstance(v, dict) and sorted(v) == ks and all(map(_finite, v.values()))  # noqa: E731
    summary = {"method": lambda v: isinstance(v, str), "group_size": _whole, "gamma": _finite,
               "seeds": lambda v: isinstance(v, list), "pass_at_k": passk, "pass_at_k_std": passk,
               "greedy_solve_rate": _finite, "solution_prob_change": _finite}
    test_ks = [k for k in sp.ks if k <= sp.test_m]
    methods = [("grpo", 0.0)] + [("f-grpo", g) for g in sp.gammas]
    return (_entries_problem("summary", d["summary"], summary, ("method", "group_size", "gamma"),
                             {(m, n, g) for m, n, g, _ in names}, optional=("solution_prob_change",))
            or _entries_problem("tests", d["tests"], TEST_FIELDS, ("group_size", "gamma", "k"),
                                {(n, g, k) for n, _ in sp.plan for g in sp.gammas for k in test_ks},
                                optional=("delta_per_seed",))
            or _entries_problem("changes", d.get("changes") or [], {"method": summary["method"], **TEST_FIELDS},
                                ("method", "group_size", "gamma", "k"),
                                {(m, n, g, k) for n, _ in sp.plan for m, g in methods for k in test_ks}
                                if d.get("changes") else set(), optional=("delta_per_seed",)))
