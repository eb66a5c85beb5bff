"""GRPO vs F-GRPO vs asym-GRPO on Maze with difficulty levels, several seeds (the evaluation of
docs/asymmetric-grpo.md §10): the LLM pipeline with `PipelineConfig.compare()`, whose report adds
steps to a target training reward (and held-out accuracy), pass@1/10/16, pass@k by level, the
article's `--k 10` lines, paired tests and safeguard warnings; optionally published to a folder.

    from catsim.experiments.llm_compare import run_compare
    report, published = run_compare("runs/asym-compare", publish="figures/asym-grpo")
"""

from __future__ import annotations

import shutil
from pathlib import Path

from catsim.experiments.llm_pipeline import PipelineConfig, run_pipeline

PUBLISHED = ("report.md", "results.json", "comparison.png", "passk_curves.png", "training_dynamics.png")


def run_compare(out_dir, *, config: PipelineConfig | None = None, quick: bool = False,
                base_models: dict | None = None, publish=None,
                progress: bool = True) -> tuple[Path, list[Path]]:
    """Run the comparison (`config`, default `PipelineConfig.compare()` or, with quick,
    `compare_quick()`) into `out_dir`; copy PUBLISHED into `publish` when given.

    Returns (path of report.md, the published paths)."""
    pc = config or (PipelineConfig.compare_quick() if quick else PipelineConfig.compare())
    report = run_pipeline(out_dir, config=pc, base_models=base_models, progress=progress)
    published = []
    if publish:
        target = Path(publish)
        target.mkdir(parents=True, exist_ok=True)
        for name in PUBLISHED:
            shutil.copyfile(report.parent / name, target / name)
            published.append(target / name)
    return report, published
