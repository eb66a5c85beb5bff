"""Maze: the paper's single-solution task (§5.2, App. K).

A perfect maze (exactly one simple path between any two cells) on a `size`×`size` character grid:
cells sit at odd coordinates, the outer border is wall, and a carved passage joins neighbouring
cells. Start S and goal G are two distinct cells drawn uniformly. The target is the unique simple
path from S to G as moves over "UDLR" (one grid step each); the verifier accepts a completion iff
it walks from S through open squares without revisiting any and stops on G — which, because the
maze is a tree, is exactly the target string.

Compact prompt format: the outer wall carries no information, so the prompt shows only the
(size−2)×(size−2) interior, each row followed by a newline, then ">"; a move off the shown grid
is a move into the wall. Size 7, for instance::

    S....
    ####.
    .....
    .###.
    G..#.
    >

followed by the answer "RRRRDDLLLLDD". Generators: "dfs" (recursive backtracker: long corridors,
the classic maze look) or "wilson" (Wilson's algorithm: a uniformly random spanning tree).

Difficulty levels: with `sizes = (5, 7, 9, 11, 13)` every instance first draws its size uniformly
from `sizes` (overriding `size`), and `MazeTask.level(prompt)` is the 1-based position of the
prompt's size in `sizes` — "maze size as levels 1–5" for accuracy-by-level tables. With
`sizes = ()` (the default) every prompt is level 1 and the instances are those of `size` alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from catsim.errors import CatsimError
from catsim.llm.tasks import grid
from catsim.llm.tasks.base import GeneratedSplits, Instance, Prompt, clean_completion

ALGORITHMS = ("dfs", "wilson")


@dataclass(frozen=True)
class MazeConfig:
    """Maze task configuration."""

    size: int = 7  # side of the maze grid incl. its outer wall; odd, >= 5 (paper: 17; CPU default 7)
    algorithm: str = "dfs"  # maze generator: "dfs" (recursive backtracker) or "wilson" (uniform tree)
    n_train: int = 1_000_000  # train prompts per seed (paper: 1M); instances are drawn with replacement
    n_heldout: int = 256  # held-out prompts per seed (paper: 256), distinct, never in the train split
    sizes: tuple[int, ...] = ()  # difficulty levels: each instance draws its size from these (overrides size)

    def __post_init__(self) -> None:
        if isinstance(self.sizes, str | bytes) or not hasattr(self.sizes, "__iter__"):
            raise CatsimError(f"maze sizes must be a list of sizes, got {self.sizes!r}")
        object.__setattr__(self, "sizes", tuple(self.sizes))  # JSON gives a list; keep the config hashable
        if len(set(self.sizes)) != len(self.sizes):
            raise CatsimError(f"maze sizes must be distinct, got {list(self.sizes)}")
        for size in (self.size, *self.sizes):
            if isinstance(size, bool) or not isinstance(size, int):
                raise CatsimError(f"maze size must be an integer, got {size!r}")
            if size < 5 or size % 2 == 0 or size > 101:
                raise CatsimError(f"maze size must be odd and in [5, 101], got {size}")
        if self.algorithm not in ALGORITHMS:
            raise CatsimError(f"maze algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        if self.n_train < 1 or self.n_heldout < 1:
            raise CatsimError("n_train and n_heldout must be positive")


def carve(size: int, algorithm: str, rng: np.random.Generator) -> list[list[str]]:
    """A perfect maze as rows of characters (all wall, then passages carved between cells)."""
    m = (size - 1) // 2  # cells per side
    rows = [[grid.WALL] * size for _ in range(size)]
    for i in range(m):
        for j in range(m):
            rows[2 * i + 1][2 * j + 1] = grid.FREE

    def link(a: tuple[int, int], b: tuple[int, int]) -> None:
        rows[a[0] + b[0] + 1][a[1] + b[1] + 1] = grid.FREE  # the wall square between two cells

    def adjacent(cell: tuple[int, int]) -> list[tuple[int, int]]:
        i, j = cell
        return [(i + di, j + dj) for di, dj in ((-1, 0), (1, 0), (0, -1), (0, 1))
                if 0 <= i + di < m and 0 <= j + dj < m]

    if algorithm == "dfs":
        start = (int(rng.integers(m)), int(rng.integers(m)))
        visited = {start}
        stack = [start]
        while stack:
            fresh = [n for n in adjacent(stack[-1]) if n not in visited]
            if not fresh:
                stack.pop()
                continue
            nxt = fresh[int(rng.integers(len(fresh)))]
            link(stack[-1], nxt)
            visited.add(nxt)
            stack.append(nxt)
    else:  # Wilson: loop-erased random walks give a uniform spanning tree
        in_tree = {(int(rng.integers(m)), int(rng.integers(m)))}
        for i in range(m):
            for j in range(m):
                cell = (i, j)
                if cell in in_tree:
                    continue
                nxt_of: dict[tuple[int, int], tuple[int, int]] = {}
                cur = cell
                while cur not in in_tree:
                    options = adjacent(cur)
                    nxt_of[cur] = options[int(rng.integers(len(options)))]
                    cur = nxt_of[cur]
                cur = cell
                while cur not in in_tree:
                    link(cur, nxt_of[cur])
                    in_tree.add(cur)
                    cur = nxt_of[cur]
    return rows


def solve(rows: tuple[str, ...], start: grid.Cell, goal: grid.Cell) -> str:
    """The move string of the shortest path from start to goal (the unique simple path in a maze)."""
    dist = grid.bfs_distances(rows, goal)
    if start not in dist:
        raise ValueError("goal not reachable")
    moves, cell = [], start
    while cell != goal:
        move, cell = next((mv, n) for mv, n in grid.neighbours(rows, cell) if dist.get(n) == dist[cell] - 1)
        moves.append(move)
    return "".join(moves)


@dataclass(frozen=True)
class MazeTask(GeneratedSplits):
    """Maze task (see the module docstring). `reward` is 1.0 for the unique path, else 0.0."""

    config: MazeConfig = MazeConfig()
    name: ClassVar[str] = "maze"

    @property
    def alphabet(self) -> str:
        return grid.ALPHABET

    @property
    def max_answer_chars(self) -> int:
        """Upper bound on the length of a simple path: the number of interior squares minus one
        (of the largest size when there are levels)."""
        return (max(self.config.sizes or (self.config.size,)) - 2) ** 2 - 1

    @property
    def num_levels(self) -> int:
        """Difficulty levels: len(sizes), or 1 without levels."""
        return max(1, len(self.config.sizes))

    def level(self, prompt: Prompt) -> int:
        """Difficulty level of a prompt (1-based position of its size in `sizes`; 1 without levels)."""
        if not self.config.sizes:
            return 1
        size = len(grid.parse(prompt.text)[0]) + 2  # the prompt shows the interior only
        if size not in self.config.sizes:
            raise CatsimError(f"prompt of maze size {size} is not one of the levels {list(self.config.sizes)}")
        return self.config.sizes.index(size) + 1

    def _instance(self, rng: np.random.Generator) -> Instance:
        size = self.config.size
        if self.config.sizes:  # only then is a draw spent, so level-free instances are unchanged
            size = self.config.sizes[int(rng.integers(len(self.config.sizes)))]
        rows = carve(size, self.config.algorithm, rng)
        m = (size - 1) // 2
        a, b = rng.choice(m * m, size=2, replace=False)
        start = (2 * int(a // m) + 1, 2 * int(a % m) + 1)
        goal = (2 * int(b // m) + 1, 2 * int(b % m) + 1)
        rows[start[0]][start[1]] = grid.START
        rows[goal[0]][goal[1]] = grid.GOAL
        text = grid.render([row[1:-1] for row in rows[1:-1]])  # drop the implied outer wall
        parsed, start, goal = grid.parse(text)
        return text, (solve(parsed, start, goal),)

    def reference(self, prompt: Prompt) -> str:
        return prompt.answers[0]

    def correct_answers(self, prompt: Prompt) -> tuple[str, ...]:
        return prompt.answers

    def sft_target(self, prompt: Prompt, rng: np.random.Generator) -> str:
        return prompt.answers[0]

    def reward(self, prompt: Prompt, completion_text: str) -> float:
        moves = clean_completion(completion_text, self.max_answer_chars)
        if moves is None:
            return 0.0
        rows, start, goal = grid.parse(prompt.text)
        cells = grid.walk(rows, start, moves)
        if cells is None or cells[-1] != goal or len(set(cells)) != len(cells):
            return 0.0
        return 1.0
