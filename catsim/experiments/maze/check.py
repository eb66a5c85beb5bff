"""`--report`'s check of the Maze study's summary files against the runs they summarise.

`--report` publishes results.json, arms.json and trl.json, so it first rebuilds each from the runs on
disk and refuses, in one line naming the file and the first field that disagrees, when the file says
something else (`check_summaries`). It refuses rather than rebuilds: a summary that disagrees with its
runs was edited, or its runs changed after it was written, and the researcher has to know which
before anything is published; the line gives the command that rebuilds it (which trains nothing).
Every number is recomputed from the runs' eval.json files but the paired tests' subsampled fields
(`summaries.SUBSAMPLED`: Δ's mean over the draws, its interval, p), which are taken from the file —
drawing them again costs minutes on the CPU study; the rebuild draws them.

    check_summaries(out, results, arms, trl)   # CatsimError on a disagreement
"""

from __future__ import annotations

from pathlib import Path

from catsim.errors import CatsimError
from catsim.experiments.maze import arms as maze_arms
from catsim.experiments.maze import presets, study
from catsim.experiments.maze import trl as maze_trl
from catsim.experiments.maze.presets import StudyPreset
from catsim.experiments.maze.summaries import check


def study_command(out: Path, sp: StudyPreset) -> str:
    """The `catsim llm maze-study` command of the study `sp` in `out` (its preset, and the --group-size,
    --gamma and --seeds that make `sp` of it, where they do)."""
    name = sp.name.removesuffix("-paper-shapes")
    cmd = f"catsim llm maze-study --out {out} --preset {name}" + (" --paper-shapes" if name != sp.name else "")
    try:
        made = presets.tiny(True) if name != sp.name else presets.preset(name)
    except CatsimError:
        return cmd  # a preset made in code: no command names it
    options = {"group_sizes": [n for n, _ in sp.plan], "gammas": list(sp.gammas)}
    seeds = {s for _, s in sp.plan}
    for extra in ({}, {"seeds": min(seeds)}):
        if made.with_overrides(**options, **extra) == sp:
            flags = [f"--group-size {','.join(map(str, options['group_sizes']))}"
                     if [n for n, _ in made.plan] != options["group_sizes"] else "",
                     f"--gamma {','.join(f'{g:g}' for g in sp.gammas)}" if made.gammas != sp.gammas else "",
                     f"--seeds {extra['seeds']}" if extra else ""]
            return " ".join([cmd, *filter(None, flags)])
    return cmd


def check_summaries(out_dir: str | Path, results: dict, arms: dict | None, trl: dict | None) -> None:
    """Check the study's results.json (`results`), arms.json and trl.json (when there) against the
    runs in `out_dir` (see the module docstring); CatsimError, one line, on the first disagreement."""
    out = Path(out_dir)
    sp = StudyPreset(**results["preset"])  # results_problem has checked it
    cmd = study_command(out, sp)
    said: list[str] = []

    def rebuilt(name: str, make):
        try:
            return make()
        except CatsimError as err:
            raise CatsimError(f"{out / name}: its runs cannot be read back to check it ({err})") from None

    check(out / study.RESULTS_FILE, results,
          rebuilt(study.RESULTS_FILE, lambda: study.collect(out, sp, said.append, stored=results)), cmd)
    if arms is not None:
        every = rebuilt(maze_arms.ARMS_FILE, lambda: maze_arms.summarised_arms(sp, ()))
        check(out / maze_arms.ARMS_FILE, arms, rebuilt(maze_arms.ARMS_FILE, lambda: maze_arms.collect_arms(
            out, sp, every, said.append, tests=arms["tests"])), f"{cmd} --arms all --max-runs 0")
    if trl is not None:
        check(out / maze_trl.TRL_FILE, trl, rebuilt(maze_trl.TRL_FILE, lambda: maze_trl.collect(
            out, sp, said.append, stored=trl)), f"{cmd} --trainer trl --max-runs 0")
