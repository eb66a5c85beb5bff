"""Maze task: perfect mazes, unique paths (exhaustive search), verifier, seeded disjoint splits."""

from __future__ import annotations

import collections
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catsim.errors import CatsimError
from catsim.llm.tasks import grid, make_task
from catsim.llm.tasks.base import instance_rng
from catsim.llm.tasks.maze import MazeConfig, MazeTask, carve


def all_simple_paths(rows, start, goal):
    """Every simple start->goal path, by exhaustive depth-first search (independent of `solve`)."""
    found = []

    def dfs(cell, visited, moves):
        if cell == goal:
            found.append(moves)
            return
        for move, (dr, dc) in grid.MOVES.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            r, c = nxt
            if 0 <= r < len(rows) and 0 <= c < len(rows[0]) and rows[r][c] != "#" and nxt not in visited:
                dfs(nxt, visited | {nxt}, moves + move)

    dfs(start, {start}, "")
    return found


@pytest.mark.parametrize("size", [5, 7, 9])
@pytest.mark.parametrize("algorithm", ["dfs", "wilson"])
def test_exactly_one_simple_path_and_it_is_the_target(size, algorithm):
    task = MazeTask(MazeConfig(size=size, algorithm=algorithm, n_heldout=8))
    for prompt in itertools.islice(task.prompts("train", seed=3), 40):
        rows, start, goal = grid.parse(prompt.text)
        paths = all_simple_paths(rows, start, goal)
        assert paths == [prompt.answers[0]]
        assert task.reward(prompt, paths[0]) == 1.0


@pytest.mark.parametrize("algorithm", ["dfs", "wilson"])
def test_maze_is_a_spanning_tree_of_the_cells(algorithm):
    for index in range(20):
        rows = carve(11, algorithm, instance_rng(0, "train", index))
        open_sq = {(r, c) for r in range(11) for c in range(11) if rows[r][c] != "#"}
        edges = sum(1 for (r, c) in open_sq for (dr, dc) in ((0, 1), (1, 0)) if (r + dr, c + dc) in open_sq)
        assert edges == len(open_sq) - 1  # a connected graph with V-1 edges is a tree
        reached = grid.bfs_distances(tuple("".join(row) for row in rows), (1, 1))
        assert set(reached) == open_sq
        assert all(rows[0][c] == rows[-1][c] == "#" for c in range(11))


def test_wilson_is_uniform_over_the_four_spanning_trees_of_a_2x2_maze():
    counts = collections.Counter(
        "".join("".join(r) for r in carve(5, "wilson", instance_rng(1, "train", i))) for i in range(4000)
    )
    assert len(counts) == 4
    freq = np.array(list(counts.values())) / 4000
    assert np.all(np.abs(freq - 0.25) < 0.03)  # 4000 draws: sd 0.0068, so 0.03 is > 4 sd


def test_prompt_format_and_paper_size():
    task = MazeTask(MazeConfig(size=17, n_heldout=4))
    prompt = next(task.prompts("heldout", seed=0))
    lines = prompt.text.split("\n")
    # the 15x15 interior (outer wall implied), then the separator
    assert len(lines) == 16 and all(len(line) == 15 for line in lines[:15]) and lines[15] == ">"
    assert prompt.text.count("S") == 1 and prompt.text.count("G") == 1
    assert set(prompt.text) <= set(task.alphabet) and set(prompt.answers[0]) <= set("UDLR")
    rows, start, goal = grid.parse(prompt.text)
    assert start[0] % 2 == 0 and start[1] % 2 == 0 and goal[0] % 2 == 0 and goal[1] % 2 == 0  # cells


def test_documented_example_is_verified():
    task = MazeTask(MazeConfig(size=7))
    text = "S....\n####.\n.....\n.###.\nG..#.\n>"
    from catsim.llm.tasks.base import Prompt

    prompt = Prompt("maze", "train", 0, text, ("RRRRDDLLLLDD",))
    assert all_simple_paths(*grid.parse(text)) == ["RRRRDDLLLLDD"]
    assert task.reward(prompt, "RRRRDDLLLLDD") == 1.0
    assert task.reward(prompt, "L") == 0.0  # off the shown grid = into the outer wall


def test_splits_are_deterministic_disjoint_and_layout_free():
    task = MazeTask(MazeConfig(size=5, n_heldout=20, n_train=600))
    held = [p.text for p in task.prompts("heldout", seed=0)]
    assert held == [p.text for p in MazeTask(MazeConfig(size=5, n_heldout=20, n_train=600)).prompts("heldout", 0)]
    assert len(set(held)) == 20
    train = [p.text for p in task.prompts("train", seed=0)]
    assert not set(train) & set(held)  # 48 instances exist at size 5, so this is a real test
    assert len(set(train)) == 48 - 20
    assert task.prompt("train", 0, 123).text == train[123]  # random access = iteration
    other = [p.text for p in task.prompts("heldout", seed=1)]
    assert other != held


def test_too_few_instances_for_the_heldout_split_is_a_clear_error():
    task = MazeTask(MazeConfig(size=5, n_heldout=60))  # only 4 trees x 12 (S, G) pairs = 48 exist
    with pytest.raises(CatsimError, match="too few distinct instances"):
        task.prompt("heldout", 0, 0)


@pytest.mark.parametrize(
    "options",
    [dict(size=8), dict(size=3), dict(size="9"), dict(algorithm="prim"), dict(n_heldout=0)],
)
def test_bad_configs(options):
    with pytest.raises(CatsimError):
        make_task("maze", **options)


def test_bad_split_seed_index():
    task = make_task("maze", size=7, n_heldout=4)
    with pytest.raises(CatsimError):
        next(task.prompts("test", 0))
    with pytest.raises(CatsimError):
        next(task.prompts("train", -1))
    with pytest.raises(CatsimError):
        task.prompt("heldout", 0, 4)


TASK = MazeTask(MazeConfig(size=9, n_heldout=4))
PROMPTS = [TASK.prompt("train", 0, i) for i in range(5)]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 4), st.text(alphabet="UDLR", max_size=40))
def test_reward_is_one_exactly_for_the_target(k, moves):
    prompt = PROMPTS[k]
    assert TASK.reward(prompt, moves) == float(moves == prompt.answers[0])


@pytest.mark.parametrize("k", range(5))
def test_reward_rejects_near_misses(k):
    prompt, target = PROMPTS[k], PROMPTS[k].answers[0]
    assert TASK.reward(prompt, target) == 1.0
    assert TASK.reward(prompt, f"  {target}\n") == 1.0  # surrounding whitespace is ignored
    assert TASK.reward(prompt, target[:-1]) == 0.0
    for i in range(len(target)):
        for ch in "UDLR":
            if ch != target[i]:
                assert TASK.reward(prompt, target[:i] + ch + target[i + 1 :]) == 0.0
    # reaching G and walking back and forth is not the target (a revisit)
    back = {"U": "D", "D": "U", "L": "R", "R": "L"}[target[-1]]
    assert TASK.reward(prompt, target + back + target[-1]) == 0.0


# --- difficulty levels (issue 9: accuracy by maze size) ---


def test_levels_draw_every_size_and_report_it():
    task = make_task("maze", sizes=[5, 7, 9, 11, 13], n_heldout=60)  # a JSON list, as from a task file
    assert task.config.sizes == (5, 7, 9, 11, 13) and hash(task.config)  # hashable (the split cache)
    assert task.num_levels == 5 and task.max_answer_chars == 11 * 11 - 1
    seen = collections.Counter()
    for prompt in task.prompts("heldout", 0):
        rows, start, goal = grid.parse(prompt.text)
        level = task.level(prompt)
        assert len(rows) + 2 == (5, 7, 9, 11, 13)[level - 1] and len(rows[0]) == len(rows)
        if level <= 3:  # exhaustive search is cheap enough up to size 9
            assert all_simple_paths(rows, start, goal) == [prompt.answers[0]]
        assert task.reward(prompt, prompt.answers[0]) == 1.0
        seen[level] += 1
    assert set(seen) == {1, 2, 3, 4, 5}
    # uniform over 5 levels: each count of 60 is Binomial(60, 0.2) (mean 12, sd 3.1); 2..24 is ±3.2 sd
    assert all(2 <= c <= 24 for c in seen.values())
    train = [task.prompt("train", 0, i) for i in range(40)]
    assert {task.level(p) for p in train} == {1, 2, 3, 4, 5}


def test_without_levels_instances_are_unchanged_and_level_is_one():
    plain = MazeTask(MazeConfig(size=7, n_heldout=4))
    one = MazeTask(MazeConfig(size=7, n_heldout=4, sizes=()))
    assert [p.text for p in plain.prompts("heldout", 0)] == [p.text for p in one.prompts("heldout", 0)]
    assert plain.num_levels == 1 and plain.level(plain.prompt("train", 0, 3)) == 1
    single = make_task("maze", sizes=[7], n_heldout=4)  # one level: a size draw is spent, level 1
    assert {single.level(p) for p in single.prompts("heldout", 0)} == {1}
    other = make_task("maze", sizes=[5, 9], n_heldout=4)
    with pytest.raises(CatsimError, match="not one of the levels"):
        other.level(plain.prompt("train", 0, 0))


@pytest.mark.parametrize("sizes", [[5, 8], [3], [5, 5], "5,7", [5, "7"]])
def test_bad_levels(sizes):
    with pytest.raises(CatsimError):
        make_task("maze", sizes=sizes)


def test_sizes_on_the_command_line():
    import argparse

    from catsim.cli.llm._task_args import add_task_arguments, task_options

    parser = argparse.ArgumentParser()
    add_task_arguments(parser, required=False)
    args = parser.parse_args(["--task", "maze", "--sizes", "5,7,9"])
    assert task_options(args) == {"sizes": (5, 7, 9)}
