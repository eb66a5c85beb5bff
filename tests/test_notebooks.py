"""Execute every notebook in notebooks/ at test size and check one computed value of each.

Each notebook reads CATSIM_NB_SCALE in its parameter cell; here it is "test" (small grids, few
steps). The kernel is this interpreter (`sys.executable -m ipykernel_launcher`, from a kernelspec
written to a temporary directory), so the test works in any virtual environment that has the
`notebooks` extra installed, without `ipykernel install`. A failing cell fails the test.
Every notebook ends by printing one line `catsim_result {json}`; the tests recompute what they can
with the library and compare.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402
from jupyter_client.manager import KernelManager  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
KERNEL = "catsim-notebook-test"
RESULT_PREFIX = "catsim_result "


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory):
    """A kernelspec that runs this interpreter with the test-size environment."""
    base = tmp_path_factory.mktemp("kernels")
    spec = base / KERNEL
    spec.mkdir()
    python_path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {
        "CATSIM_NB_SCALE": "test",
        "PYTHONPATH": python_path,
        # Programs compiled by one notebook are reused by the next one in this worker.
        "JAX_COMPILATION_CACHE_DIR": str(tmp_path_factory.mktemp("jax-cache")),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "MPLBACKEND": "Agg",
    }
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "catsim (test)",
        "language": "python",
        "env": env,
    }))
    return base


def execute(name: str, kernel_dir: Path, tmp_path: Path):
    """Run notebooks/<name> top to bottom in `tmp_path`; returns (notebook, catsim_result dict)."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    km = KernelManager(kernel_name=KERNEL,
                       kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernel_dir)]))
    client = nbclient.NotebookClient(nb, km=km, timeout=600,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError on the first failing cell
    results = [
        json.loads(line[len(RESULT_PREFIX):])
        for cell in nb.cells if cell.cell_type == "code"
        for out in cell.outputs if out.output_type == "stream"
        for line in out.text.splitlines() if line.startswith(RESULT_PREFIX)
    ]
    assert len(results) == 1, f"{name}: expected one '{RESULT_PREFIX}' line, got {len(results)}"
    assert results[0]["scale"] == "test"
    images = sum("image/png" in out.get("data", {})
                 for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs)
    return nb, results[0], images


def test_committed_notebooks_have_figures_and_no_errors():
    """The committed files render on GitHub: executed, with PNG figures and no error output."""
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(c.execution_count is not None for c in code), f"{path.name} is not fully executed"
        outputs = [o for c in code for o in c.outputs]
        assert not [o for o in outputs if o.output_type == "error"], f"{path.name} has an error output"
        assert sum("image/png" in o.get("data", {}) for o in outputs) >= 3, f"{path.name}: figures?"
        assert path.stat().st_size < 2_000_000, f"{path.name} is larger than 2 MB"
        text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
        assert f"{RESULT_PREFIX}" in text and '"scale": "default"' in text, (
            f"{path.name} must be committed as executed at its default size")


def test_tail_miss(kernel_dir, tmp_path):
    from catsim.sim.config import PolicyConfig
    from catsim.sim.policy import correct_mask, initial_probs
    from catsim.theory import regime_boundaries, tail_miss_peak, tail_miss_probability

    _, result, images = execute("tail_miss.ipynb", kernel_dir, tmp_path)
    assert images >= 5
    p0, mask = initial_probs(PolicyConfig()), correct_mask(PolicyConfig())
    tau, mu = float(p0[1]), float(p0[mask].sum())
    assert result["sim_tau"] == pytest.approx(tau, rel=1e-15)
    assert result["sim_mu_pos"] == pytest.approx(mu, rel=1e-15)
    peak = tail_miss_peak(tau, mu)
    assert result["n_argmax"] == peak.n_argmax == 19  # THEORY.md §1: argmax N ≈ 19
    assert result["n_star"] == pytest.approx(peak.n_star, rel=1e-12)
    assert result["max_value"] == pytest.approx(peak.max_value, rel=1e-12)
    n_active, n_cover = regime_boundaries(tau, mu)
    assert (result["n_active"], result["n_cover"]) == pytest.approx((n_active, n_cover), rel=1e-12)
    # Monte Carlo points agree with the closed form (seeded; 5 standard errors).
    points = np.array(result["mc_points"])
    assert len(points) >= 100
    exact = tail_miss_probability(points[:, 2], points[:, 1], points[:, 0])
    z = np.abs(points[:, 3] - exact) / points[:, 4]
    assert z.max() < 5, f"Monte Carlo disagrees with Lemma 3.1: max |z| = {z.max():.2f}"
    assert result["mc_max_abs_z"] < 5
