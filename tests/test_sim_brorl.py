"""BroRL Fig. 3 set-up (`brorl` scenario): the final numbers docs/simulator.md reports.

Full size (V = 128,000, C = 10,000, 1000 steps, seed 0, γ = 0) at the two ends of BroRL's grid,
N = 4 and N = 51200, where the documented claims are made: at small N most correct actions lose
probability and Qpos falls below its start; at N = 51200 every correct action gains. Tolerance:
half a unit of the last digit printed in the docs table, plus float32 slack, except worst_drop.

Measured spread across instruction sets (XLA level 0 as in the suite, 2026-12-02): this Intel
Xeon by default and with --xla_cpu_max_isa=AVX2 give identical bits; SSE4_2 moves Qpos and Mret
by ≤ 1.2e-7 and worst_drop at N = 51200 from −3.346e-7 to −3.253e-7; an AMD EPYC without AVX-512
gave −3.64e-7. That last number is the difference of two probabilities near 6e-5 after 1000 float32
steps, so its relative spread is large: −3.25e-7 … −3.64e-7, up to 7.1 % from the documented
−3.4e-7. Its tolerance is 15 % there (about twice that spread); at N = 4 (6.7e-5, identical bits on
all three) it stays 5 %. The claim the docs make, worst_drop < 0, is tested exactly below.
"""

import dataclasses

import numpy as np
import pytest

from catsim.sim import config as C
from catsim.sim import sweep as S

pytestmark = pytest.mark.published

# docs/simulator.md, "BroRL's Fig. 3 set-up": N -> (Qpos, share_rose, worst_drop, Mret).
DOCUMENTED = {
    4: (0.6013, 0.120, 6.7e-05, 0.9505),
    51200: (0.6472, 1.000, -3.4e-07, 1.0000),
}
# relative tolerance of worst_drop per N, from the measured cross-CPU spread (module docstring)
WORST_DROP_REL = {4: 0.05, 51200: 0.15}
QPOS_START = 0.6301


@pytest.fixture(scope="module")
def brorl_final():
    cfg = dataclasses.replace(C.scenario("brorl"), steps=1000, log_every=1000)
    out = {}
    for n in DOCUMENTED:
        cell = S.run_cell(dataclasses.replace(cfg, group_size=n), (0.0,), (0,))
        out[n] = {name: cell[name][0, 0] for name in ("qpos", "share_rose", "worst_drop", "mret")}
    return out


@pytest.mark.parametrize("n", sorted(DOCUMENTED))
def test_brorl_documented_final_values(brorl_final, n):
    qpos, share, drop, mret = DOCUMENTED[n]
    m = brorl_final[n]
    assert m["qpos"][0] == pytest.approx(QPOS_START, abs=5e-5)
    assert m["qpos"][-1] == pytest.approx(qpos, abs=5e-5 + 1e-6)
    assert m["share_rose"][-1] == pytest.approx(share, abs=5e-4 + 1e-6)
    # worst_drop is printed with 2 significant digits; its spread across CPUs is in the docstring.
    assert m["worst_drop"][-1] == pytest.approx(drop, abs=WORST_DROP_REL[n] * abs(drop) + 1e-9)
    assert m["mret"][-1] == pytest.approx(mret, abs=5e-5 + 1e-6)


def test_brorl_direction_claims(brorl_final):
    small, large = brorl_final[4], brorl_final[51200]
    # Small N: knowledge shrinkage — most correct actions lost probability, Qpos fell.
    assert small["share_rose"][-1] < 0.5 and small["qpos"][-1] < small["qpos"][0]
    assert small["worst_drop"][-1] > 0 and small["mret"][-1] < 1
    # Large N: every correct action gained (worst "drop" negative), no correct mass lost.
    assert large["share_rose"][-1] == 1.0 and large["worst_drop"][-1] < 0
    assert large["mret"][-1] == 1.0 and large["qpos"][-1] > large["qpos"][0]
    assert np.all(np.isfinite(large["qpos"]))
