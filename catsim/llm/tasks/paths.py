"""Shortest paths: a many-solution task for within-prompt rare solutions.

An `height`×`width` grid with random obstacles, a start S and a goal G. The correct answers are all
shortest S→G paths (move strings over "UDLR", one step each), enumerated exactly; a completion is
correct iff it walks from S through free squares and stops on G after exactly the shortest distance
— i.e. iff it is one of the enumerated answers. Instances are kept only when the number of shortest
paths lies in [min_answers, max_answers].

The warm-up data makes some correct answers common and others rare by a stated distribution: the
answers of a prompt are ranked (`ranking`: "turns" = fewest direction changes first, ties broken
lexicographically; or "lexicographic"), and the supervised target is drawn with Zipf weights
    w_k = k^(−s) / Σ_{j=1..K} j^(−s),   k = 1..K the rank, s = `zipf_exponent`
(s = 0 is uniform). `Prompt.answers` lists the answers in rank order, so `answers[0]` is the most
common one; `answer_weights(prompt)` gives the w_k. Because every correct answer is known, the
probability a model gives each one can be computed exactly by teacher forcing
(`catsim.llm.tasks.answer_mass.answer_probabilities`).

Prompt format: the grid rows (no outer wall; moving off the grid is invalid), each followed by a
newline, then ">".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from catsim.errors import CatsimError
from catsim.llm.tasks import grid
from catsim.llm.tasks.base import GeneratedSplits, Instance, Prompt, clean_completion

RANKINGS = ("turns", "lexicographic")


@dataclass(frozen=True)
class PathsConfig:
    """Shortest-paths task configuration."""

    height: int = 5  # grid rows (no outer wall)
    width: int = 5  # grid columns
    obstacle_density: float = 0.2  # probability each square other than S and G is an obstacle
    min_answers: int = 2  # keep instances with at least this many shortest paths
    max_answers: int = 6  # ... and at most this many
    zipf_exponent: float = 1.0  # s in the warm-up weights w_k ∝ k^-s over answer ranks (0 = uniform)
    ranking: str = "turns"  # rank order of answers: "turns" (fewest turns first) or "lexicographic"
    n_train: int = 2000  # train prompts per seed (each reused across SFT epochs)
    n_heldout: int = 256  # held-out prompts per seed, distinct, never in the train split

    def __post_init__(self) -> None:
        for name in ("height", "width", "min_answers", "max_answers", "n_train", "n_heldout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CatsimError(f"paths {name} must be a positive integer, got {value!r}")
        if self.height * self.width < 3 or max(self.height, self.width) > 64:
            raise CatsimError("paths grid must have at least 3 squares and sides <= 64")
        if not 0.0 <= self.obstacle_density < 1.0:
            raise CatsimError(f"obstacle_density must be in [0, 1), got {self.obstacle_density}")
        if self.min_answers > self.max_answers or self.max_answers > 10_000:
            raise CatsimError("need 1 <= min_answers <= max_answers <= 10000")
        if not (np.isfinite(self.zipf_exponent) and self.zipf_exponent >= 0):
            raise CatsimError(f"zipf_exponent must be finite and >= 0, got {self.zipf_exponent}")
        if self.ranking not in RANKINGS:
            raise CatsimError(f"ranking must be one of {RANKINGS}, got {self.ranking!r}")


def count_shortest_paths(rows: tuple[str, ...], start: grid.Cell, goal: grid.Cell) -> int:
    """Number of shortest start→goal paths (dynamic programming over BFS layers); 0 if unreachable."""
    dist = grid.bfs_distances(rows, start)
    if goal not in dist:
        return 0
    ways = {start: 1}
    for cell in sorted(dist, key=dist.get):
        for _, nxt in grid.neighbours(rows, cell):
            if dist[nxt] == dist[cell] + 1:
                ways[nxt] = ways.get(nxt, 0) + ways[cell]
    return ways[goal]


def shortest_paths(rows: tuple[str, ...], start: grid.Cell, goal: grid.Cell) -> list[str]:
    """Every shortest start→goal path as a move string (depth-first along the BFS layers)."""
    to_goal = grid.bfs_distances(rows, goal)
    if start not in to_goal:
        return []
    out: list[str] = []

    def extend(cell: grid.Cell, prefix: str) -> None:
        if cell == goal:
            out.append(prefix)
            return
        for move, nxt in grid.neighbours(rows, cell):
            if to_goal.get(nxt) == to_goal[cell] - 1:
                extend(nxt, prefix + move)

    extend(start, "")
    return out


def turns(moves: str) -> int:
    """Number of direction changes in a move string."""
    return sum(a != b for a, b in zip(moves, moves[1:]))


def zipf_weights(k: int, exponent: float) -> np.ndarray:
    """w_j = j^-s / Σ_i i^-s for j = 1..k, shape [k]."""
    w = np.arange(1, k + 1, dtype=np.float64) ** -float(exponent)
    return w / w.sum()


@dataclass(frozen=True)
class PathsTask(GeneratedSplits):
    """Shortest-paths task (see the module docstring). `reward` is 1.0 for any shortest path."""

    config: PathsConfig = PathsConfig()
    name: ClassVar[str] = "paths"

    @property
    def alphabet(self) -> str:
        return grid.ALPHABET

    @property
    def max_answer_chars(self) -> int:
        """Upper bound on a shortest path's length: free squares minus one."""
        return self.config.height * self.config.width - 1

    def _instance(self, rng: np.random.Generator) -> Instance | None:
        cfg = self.config
        n = cfg.height * cfg.width
        a, b = rng.choice(n, size=2, replace=False)
        blocked = rng.random(n) < cfg.obstacle_density
        blocked[[a, b]] = False
        rows = [[grid.WALL if blocked[r * cfg.width + c] else grid.FREE for c in range(cfg.width)]
                for r in range(cfg.height)]
        start, goal = divmod(int(a), cfg.width), divmod(int(b), cfg.width)
        rows[start[0]][start[1]] = grid.START
        rows[goal[0]][goal[1]] = grid.GOAL
        text = grid.render(rows)
        parsed, _, _ = grid.parse(text)
        count = count_shortest_paths(parsed, start, goal)
        if not cfg.min_answers <= count <= cfg.max_answers:
            return None
        answers = shortest_paths(parsed, start, goal)
        if cfg.ranking == "turns":
            answers.sort(key=lambda s: (turns(s), s))
        else:
            answers.sort()
        return text, tuple(answers)

    def answer_weights(self, prompt: Prompt) -> np.ndarray:
        """Warm-up probability of each answer in `prompt.answers` (rank order), shape [K]."""
        return zipf_weights(len(prompt.answers), self.config.zipf_exponent)

    def reference(self, prompt: Prompt) -> str:
        return prompt.answers[0]

    def correct_answers(self, prompt: Prompt) -> tuple[str, ...]:
        return prompt.answers

    def sft_target(self, prompt: Prompt, rng: np.random.Generator) -> str:
        k = int(rng.choice(len(prompt.answers), p=self.answer_weights(prompt)))
        return prompt.answers[k]

    def reward(self, prompt: Prompt, completion_text: str) -> float:
        moves = clean_completion(completion_text, self.max_answer_chars)
        if moves is None:
            return 0.0
        rows, start, goal = grid.parse(prompt.text)
        if len(moves) != len(prompt.answers[0]):
            return 0.0
        cells = grid.walk(rows, start, moves)
        return 1.0 if cells is not None and cells[-1] == goal else 0.0
