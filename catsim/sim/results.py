"""Labelled results of simulator runs: dims (method, gamma, n, seed, step).

`SimResults` holds plain NumPy arrays; `to_xarray()` / `to_dataframe()` convert in one call
(the `data` extra: xarray, pandas). Files: `.npz` (always) and `.nc` (netCDF via xarray).
"""

from __future__ import annotations

import dataclasses
import json
import zipfile
import zlib
from pathlib import Path

import numpy as np

from catsim.errors import CatsimError
from catsim.files import replacing
from catsim.sim.metrics import ALL_METRICS

DIMS = ("method", "gamma", "n", "seed", "step")


def _require(module: str):
    try:
        return __import__(module)
    except ImportError:
        raise CatsimError(
            f"{module} is needed for this; install the data extra: pip install 'catsim[data]'"
        ) from None


@dataclasses.dataclass(frozen=True)
class SimResults:
    """Metrics of a grid of runs. Every array in `data` has shape
    [len(methods), len(gammas), len(group_sizes), len(seeds), len(steps)]; NaN marks values that
    do not exist (group metrics at step 0, cells not run)."""

    methods: tuple[str, ...]  # method labels (e.g. "paper", "paper-literal")
    gammas: tuple[float, ...]  # focal γ values
    group_sizes: tuple[int, ...]  # N values
    seeds: tuple[int, ...]  # seeds
    steps: np.ndarray  # [S] recorded steps 0, k, …, T
    data: dict  # metric name -> float32 array (dims DIMS)
    attrs: dict = dataclasses.field(default_factory=dict)  # JSON-able description of the configs

    def __post_init__(self):
        shape = (len(self.methods), len(self.gammas), len(self.group_sizes), len(self.seeds),
                 len(self.steps))
        for name, array in self.data.items():
            if array.shape != shape:
                raise CatsimError(f"metric {name} has shape {array.shape}, expected {shape}")

    # --- access ---

    def final(self, metric: str) -> np.ndarray:
        """[method, gamma, n, seed] values at the last recorded step."""
        return self.data[metric][..., -1]

    def sel(self, metric: str, *, method=None, gamma=None, n=None, seed=None) -> np.ndarray:
        """Slice `metric` by coordinate values (None keeps the axis)."""
        array = self.data[metric]
        for axis, (coords, value) in reversed(list(enumerate(
            [(self.methods, method), (self.gammas, gamma), (self.group_sizes, n),
             (self.seeds, seed)]))):
            if value is None:
                continue
            try:
                index = list(coords).index(value)
            except ValueError:
                raise CatsimError(f"{DIMS[axis]}={value!r} is not in the results") from None
            array = np.take(array, index, axis=axis)
        return array

    # --- conversion ---

    def to_xarray(self):
        """xarray.Dataset with dims (method, gamma, n, seed, step), one variable per metric."""
        xr = _require("xarray")
        coords = {"method": list(self.methods), "gamma": list(self.gammas),
                  "n": list(self.group_sizes), "seed": list(self.seeds), "step": self.steps}
        variables = {name: (DIMS, array) for name, array in self.data.items()}
        attrs = {key: json.dumps(value) for key, value in self.attrs.items()}
        return xr.Dataset(variables, coords=coords, attrs=attrs)

    def to_dataframe(self):
        """pandas DataFrame in long form: index (method, gamma, n, seed, step), a column per metric."""
        _require("pandas")
        return self.to_xarray().to_dataframe()

    def final_frame(self):
        """pandas DataFrame of final values: index (method, gamma, n, seed)."""
        pd = _require("pandas")
        index = pd.MultiIndex.from_product(
            [self.methods, self.gammas, self.group_sizes, self.seeds], names=DIMS[:-1])
        return pd.DataFrame({name: self.final(name).reshape(-1) for name in self.data}, index=index)

    # --- files ---

    def save(self, path) -> Path:
        """Write `path` (.npz, appended when missing) through a temporary file and a rename, so
        a reader never sees half a file; returns the path written."""
        path = Path(path)
        if path.suffix != ".npz":
            path = path.with_name(path.name + ".npz")
        with replacing(path, suffix=".npz") as tmp:  # np.savez appends .npz to other names
            np.savez_compressed(
                tmp,
                methods=np.array(self.methods), gammas=np.array(self.gammas, dtype=np.float64),
                group_sizes=np.array(self.group_sizes, dtype=np.int64),
                seeds=np.array(self.seeds, dtype=np.int64), steps=self.steps,
                attrs=np.array(json.dumps(self.attrs)),
                **{f"metric_{name}": array for name, array in self.data.items()},
            )
        return path

    @classmethod
    def load(cls, path) -> SimResults:
        """Read a file written by `save` (CatsimError for a file that is missing, damaged —
        truncated, empty, not an archive — or holds arrays of inconsistent shapes)."""
        try:
            with np.load(path, allow_pickle=False) as f:
                return cls(
                    methods=tuple(str(m) for m in f["methods"]),
                    gammas=tuple(float(g) for g in f["gammas"]),
                    group_sizes=tuple(int(n) for n in f["group_sizes"]),
                    seeds=tuple(int(s) for s in f["seeds"]),
                    steps=f["steps"],
                    data={key[len("metric_"):]: f[key] for key in f.files if key.startswith("metric_")},
                    attrs=json.loads(str(f["attrs"])),
                )
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as err:
            raise CatsimError(f"cannot read simulator results from {path}: {err}") from None

    def save_netcdf(self, path) -> Path:
        """Write a netCDF file (xarray + SciPy's netCDF3 writer); returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.to_xarray().to_netcdf(path, engine="scipy")
        return path


def combine(parts: list[SimResults]) -> SimResults:
    """Merge results on the union of their coordinates (NaN where a part has no value)."""
    if not parts:
        raise CatsimError("nothing to combine")
    methods = tuple(dict.fromkeys(m for p in parts for m in p.methods))
    gammas = tuple(sorted(set(g for p in parts for g in p.gammas)))
    sizes = tuple(sorted(set(n for p in parts for n in p.group_sizes)))
    seeds = tuple(sorted(set(s for p in parts for s in p.seeds)))
    steps = parts[0].steps
    if any(not np.array_equal(p.steps, steps) for p in parts):
        raise CatsimError("cannot combine results recorded at different steps")
    shape = (len(methods), len(gammas), len(sizes), len(seeds), len(steps))
    names = list(dict.fromkeys(name for p in parts for name in p.data))
    data = {name: np.full(shape, np.nan, np.float32) for name in names}
    for p in parts:
        ix = np.ix_([methods.index(m) for m in p.methods], [gammas.index(g) for g in p.gammas],
                    [sizes.index(n) for n in p.group_sizes], [seeds.index(s) for s in p.seeds],
                    np.arange(len(steps)))
        for name, array in p.data.items():
            data[name][ix] = array
    attrs = {}
    for p in parts:
        attrs.update(p.attrs)
    return SimResults(methods, gammas, sizes, seeds, steps, data, attrs)


__all__ = ["DIMS", "SimResults", "combine", "ALL_METRICS"]
