"""Character grids shared by the Maze and shortest-paths tasks: rendering, parsing, walking.

A grid is a tuple of equal-length row strings over WALL, FREE, START and GOAL. A prompt is the
rows, each followed by a newline, then the answer separator SEP. An answer is a string of moves
over "UDLR", one grid cell per move (U = row − 1, D = row + 1, L = column − 1, R = column + 1).
"""

from __future__ import annotations

import functools

WALL, FREE, START, GOAL, SEP = "#", ".", "S", "G", ">"
MOVES = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
ALPHABET = "\n#.>DGLRSU"
"""Every character of a grid prompt or answer (sorted; the character tokenizer's vocabulary)."""

Cell = tuple[int, int]


def render(rows: list[list[str]]) -> str:
    """Prompt text of a grid given as a list of rows of single characters."""
    return "".join("".join(row) + "\n" for row in rows) + SEP


@functools.lru_cache(maxsize=4096)
def parse(text: str) -> tuple[tuple[str, ...], Cell, Cell]:
    """(rows, start, goal) of a prompt made by `render` (trusted text: prompts come from the task)."""
    if not text.endswith("\n" + SEP):
        raise ValueError("not a grid prompt")
    rows = tuple(text[: -len(SEP)].split("\n")[:-1])
    start = goal = None
    for r, row in enumerate(rows):
        if START in row:
            start = (r, row.index(START))
        if GOAL in row:
            goal = (r, row.index(GOAL))
    if start is None or goal is None or len({len(row) for row in rows}) != 1:
        raise ValueError("grid prompt lacks a start or goal, or is not rectangular")
    return rows, start, goal


def is_open(rows: tuple[str, ...], cell: Cell) -> bool:
    r, c = cell
    return 0 <= r < len(rows) and 0 <= c < len(rows[0]) and rows[r][c] != WALL


def neighbours(rows: tuple[str, ...], cell: Cell) -> list[tuple[str, Cell]]:
    """(move, next cell) for every open neighbour of `cell`, in the order U, D, L, R."""
    out = []
    for move, (dr, dc) in MOVES.items():
        nxt = (cell[0] + dr, cell[1] + dc)
        if is_open(rows, nxt):
            out.append((move, nxt))
    return out


def walk(rows: tuple[str, ...], start: Cell, moves: str) -> list[Cell] | None:
    """Cells visited by `moves` from `start` (start included); None if a move is not one of UDLR
    or leaves the grid or enters a wall. The caller bounds len(moves)."""
    cells = [start]
    r, c = start
    for ch in moves:
        step = MOVES.get(ch)
        if step is None:
            return None
        r, c = r + step[0], c + step[1]
        if not is_open(rows, (r, c)):
            return None
        cells.append((r, c))
    return cells


def bfs_distances(rows: tuple[str, ...], source: Cell) -> dict[Cell, int]:
    """Shortest move count from `source` to every reachable open cell."""
    dist = {source: 0}
    frontier = [source]
    while frontier:
        nxt_frontier = []
        for cell in frontier:
            for _, nxt in neighbours(rows, cell):
                if nxt not in dist:
                    dist[nxt] = dist[cell] + 1
                    nxt_frontier.append(nxt)
        frontier = nxt_frontier
    return dist
