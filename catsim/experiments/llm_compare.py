"""GRPO vs F-GRPO vs asym-GRPO on Maze with difficulty levels, several seeds (the evaluation of
docs/asymmetric-grpo.md §10): the LLM pipeline with `PipelineConfig.compare()`, whose report adds
steps to a target training reward (and held-out accuracy), pass@1/10/16, pass@k by level, the
article's `--k 10` lines, paired tests and safeguard warnings; optionally published to a folder.

    from catsim.experiments.llm_compare import run_compare
    report, published = run_compare("runs/asym-compare", publish="figures/asym-grpo")
"""

from __future__ import annotations

from pathlib import Path

from catsim.errors import CatsimError
from catsim.experiments.llm_pipeline import PipelineConfig, run_pipeline
from catsim.files import copy_file

PUBLISHED = ("report.md", "results.json", "comparison.png", "passk_curves.png", "training_dynamics.png")


def run_compare(out_dir, *, config: PipelineConfig | None = None, quick: bool = False,
                base_models: dict | None = None, publish=None,
                progress: bool = True) -> tuple[Path, list[Path]]:
    """Run the comparison (`config`, default `PipelineConfig.compare()` or, with quick,
    `compare_quick()`) into `out_dir`; copy PUBLISHED into `publish` when given.

    Returns (path of report.md, the published paths)."""
    pc = config or (PipelineConfig.compare_quick() if quick else PipelineConfig.compare())
    target = publish_folder(out_dir, publish) if publish else None  # checked before the long run
    report = run_pipeline(out_dir, config=pc, base_models=base_models, progress=progress)
    if target is None:
        return report, []
    missing = [name for name in PUBLISHED if not (report.parent / name).is_file()]
    if missing:
        raise CatsimError(f"nothing published: {', '.join(missing)} missing in {report.parent}")
    return report, [copy_file(report.parent / name, target / name) for name in PUBLISHED]


def publish_folder(out_dir, publish) -> Path:
    """The folder `publish` names, created, after refusing one that cannot take the published
    files: --out itself (the files are there already), a file, or one whose entry of a published
    name is a folder. Checked before the run, so that a mistake costs no training."""
    target = Path(publish)
    if target.resolve() == Path(out_dir).resolve():
        raise CatsimError(f"--publish {publish} is --out itself: its report is there already; "
                          "publish into another folder")
    if target.exists() and not target.is_dir():
        raise CatsimError(f"--publish {publish} is a file, not a folder")
    taken = [name for name in PUBLISHED if (target / name).is_dir()]
    if taken:
        raise CatsimError(f"--publish {publish}: {', '.join(taken)} there is a folder, not a file")
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CatsimError(f"--publish {publish}: cannot create it ({err.strerror or err})") from None
    return target
