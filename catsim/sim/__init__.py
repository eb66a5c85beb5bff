"""catsim.sim — the categorical-policy simulator of the paper's §5.1 / App. J (Figure 2).

    from catsim.sim import scenario, simulate
    res = simulate(scenario("paper"), group_sizes=[2, 256, 131072], gammas=[0, 1], seeds=4)
    res.to_xarray()          # dims (method, gamma, n, seed, step)
    from catsim.sim.sweep import sweep     # resumable grid runs (not re-exported: the module's name)

Modules: config (frozen dataclasses, scenarios), policy (initial logits), sampler (exact group
sampling as counts), engine (jitted lax.scan, vmapped over runs), metrics, results, sweep
(simulate / resumable sweep; no plotting), analysis (Fig. 2 regimes and tables). The figure is
drawn by `catsim.plots.fig2`; `catsim.experiments.fig2` runs and draws it. Docs: docs/simulator.md.
"""

from catsim.sim.analysis import find_regimes, format_table, regimes_of
from catsim.sim.config import PolicyConfig, SimConfig, UpdateConfig, scenario
from catsim.sim.results import SimResults
from catsim.sim.sweep import simulate

__all__ = [
    "PolicyConfig",
    "SimConfig",
    "SimResults",
    "UpdateConfig",
    "find_regimes",
    "format_table",
    "regimes_of",
    "scenario",
    "simulate",
]
