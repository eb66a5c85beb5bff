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


def _shared_dir(tmp_path_factory, name: str) -> Path:
    """A directory of this test session, shared by its pytest-xdist workers when there are any."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # .../pytest-N/popen-gwK -> .../pytest-N, common to the workers
    path = base / name
    path.mkdir(exist_ok=True)
    return path


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
        # Programs compiled by one notebook are reused by the others (across pytest-xdist workers).
        "JAX_COMPILATION_CACHE_DIR": str(_shared_dir(tmp_path_factory, "jax-cache")),
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
        assert sum("image/png" in o.get("data", {}) for o in outputs) >= 2, f"{path.name}: figures?"
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


def test_library_tour(kernel_dir, tmp_path):
    from catsim.sim.results import SimResults
    from catsim.theory.mass import MassStepConfig, mass_step

    _, result, images = execute("library_tour.ipynb", kernel_dir, tmp_path)
    assert images >= 2
    # The notebook's pandas pivot of final Mret equals the seed mean of the saved results file.
    saved = SimResults.load(result["results_file"])
    final_mret = saved.final("mret")[0]  # [gamma, n, seed]
    assert len(result["final_mret_mean"]) == len(saved.gammas) * len(saved.group_sizes)
    for key, value in result["final_mret_mean"].items():
        gamma, n = key.split(",")
        i, j = saved.gammas.index(float(gamma)), saved.group_sizes.index(int(n))
        assert value == pytest.approx(float(final_mret[i, j].mean()), rel=1e-6)
        assert 0.0 <= value <= 1.0
    # Worked example of THEORY.md §2 (hand-computed there): log-prob GRPO rule +0.125η / −0.025η,
    # paper eq. 5 +0.0124η / −0.0052η.
    assert result["mass_step_logprob"] == pytest.approx([0.125, -0.025], rel=1e-12)
    assert result["mass_step_paper"] == pytest.approx([0.0124, -0.0052], rel=1e-12)
    step = mass_step([0.4, 0.1, 0.1, 0.2, 0.1, 0.1], [0, 1, 2], [0, 0, 3, 4],
                     MassStepConfig(rule="paper", eta=1.0))
    assert result["mass_step_paper"] == pytest.approx([step.dqpos_first_order, step.dqupos_first_order])


def test_mret_vs_n(kernel_dir, tmp_path):
    from catsim.sim.analysis import regimes_of
    from catsim.sim.config import PolicyConfig
    from catsim.sim.policy import initial_probs
    from catsim.sim.results import SimResults

    _, result, images = execute("mret_vs_n.ipynb", kernel_dir, tmp_path)
    assert images >= 6
    saved = SimResults.load(result["results_file"])
    assert saved.methods == ("paper",) and saved.gammas == (0.0, 0.5, 1.0, 2.0)
    policy = PolicyConfig(**saved.attrs["paper"]["policy"])
    p0 = initial_probs(policy)
    # Lemma 3.1 point of the paper policy: every non-anchor correct action has the same mass.
    assert result["tau"] == pytest.approx(p0[1], rel=1e-12)
    assert result["mu_pos"] == pytest.approx(p0[: policy.num_correct].sum(), rel=1e-12)
    # Runs start from the initial policy: Mret = 1, Qpos = initial correct mass (float32 engine).
    np.testing.assert_allclose(saved.data["mret"][..., 0], 1.0, rtol=1e-6)
    np.testing.assert_allclose(saved.data["qpos"][..., 0], result["mu_pos"], rtol=1e-5)
    # The notebook's seed means and data regimes are those of the saved results.
    final_mret = saved.sel("mret", method="paper", gamma=0.0)[..., -1].mean(axis=-1)
    assert {int(n) for n in result["final_mret_gamma0"]} == set(saved.group_sizes)
    for n, value in result["final_mret_gamma0"].items():
        assert value == pytest.approx(float(final_mret[saved.group_sizes.index(int(n))]), rel=1e-6)
    regimes = regimes_of(saved)
    assert result["regimes"] == {k: regimes[k] for k in ("I", "II", "III")}
    # Lemma 3.1 points of the other initial distributions, by hand: uniform τ = 1/V, μ = C/V;
    # target Qpos: μ = 0.63 spread evenly over the C correct actions.
    v, c = policy.num_actions, policy.num_correct
    assert result["init_points"]["uniform"] == pytest.approx([1 / v, c / v], rel=1e-6)
    assert result["init_points"]["target Qpos=0.63"] == pytest.approx([0.63 / c, 0.63], rel=1e-5)
