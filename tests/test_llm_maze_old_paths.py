"""The Maze study's old import paths (catsim.experiments.maze_*) still work for a release, and warn."""

import importlib
import sys

import pytest

NEW = {"maze_study": "study", "maze_trl": "trl", "maze_arms": "arms", "maze_report": "report",
       "maze_pieces": "pieces", "maze_presets": "presets", "maze_arms_report": "arms_report",
       "maze_summaries": "summaries", "maze_check": "check", "maze_provenance": "provenance"}


@pytest.mark.parametrize("old", sorted(NEW))
def test_old_path_warns_and_hands_on_the_new_modules_names(old, monkeypatch):
    monkeypatch.delitem(sys.modules, f"catsim.experiments.{old}", raising=False)
    new = importlib.import_module(f"catsim.experiments.maze.{NEW[old]}")
    with pytest.warns(DeprecationWarning, match=f"catsim.experiments.maze.{NEW[old]}"):
        shim = importlib.import_module(f"catsim.experiments.{old}")
    public = [n for n in vars(new) if not n.startswith("_")]
    assert public and all(getattr(shim, n) is getattr(new, n) for n in public)


def test_maze_study_path_also_hands_on_the_statistics(monkeypatch):
    monkeypatch.delitem(sys.modules, "catsim.experiments.maze_study", raising=False)
    with pytest.warns(DeprecationWarning, match="catsim.experiments.maze.stats"):
        from catsim.experiments.maze_study import p_text, run_study, seed_stats
    from catsim.experiments.maze import stats, study

    assert (p_text, seed_stats, run_study) == (stats.p_text, stats.seed_stats, study.run_study)
