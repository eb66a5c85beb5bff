"""The trainer's --advantage maxrl|passk_training|pkpo|passk_best and --positive-weight: the shared
objectives code per group, in the label, the flat options (fingerprint, log) and the CLI."""

import jax.numpy as jnp
import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.llm.rl.config import RLConfig
from catsim.llm.rl.step import compute_advantages
from catsim.objectives import advantages as adv
from catsim.objectives import losses

SCORES = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], np.float32)


@pytest.mark.parametrize("name, rule", [
    ("maxrl", lambda r: adv.maxrl(r)), ("passk_best", lambda r: adv.passk_best(r)),
    ("pkpo", lambda r: adv.pkpo(r, 2)), ("passk_training", lambda r: adv.passk_training(r, 2)),
])
def test_binary_advantages_come_from_the_objectives(name, rule):
    cfg = RLConfig.from_flat(group_size=4, advantage=name, passk_k=2)
    got, _, _ = compute_advantages(SCORES, cfg, 0.0)
    want = np.stack([np.asarray(rule(jnp.asarray(r))) for r in SCORES])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_array_equal(got[2:], 0.0)  # all-equal groups: exactly zero
    assert name in cfg.label() and cfg.flat()["advantage"] == name
    # the focal weight composes: F-MaxRL etc.
    fgot, _, g = compute_advantages(SCORES, cfg, 1.0)
    np.testing.assert_allclose(fgot, g[:, None] * got, rtol=1e-6)


def test_positive_weight_scales_positive_advantages_only():
    base, _, _ = compute_advantages(SCORES, RLConfig.from_flat(group_size=4), 0.0)
    cfg = RLConfig.from_flat(group_size=4, positive_weight=0.1)
    got, _, _ = compute_advantages(SCORES, cfg, 0.0)
    np.testing.assert_allclose(got, base * np.asarray(losses.positive_sample_weight(base, 0.1)), rtol=1e-6)
    assert got[0, 0] == pytest.approx(0.1 * base[0, 0]) and got[0, 1] == base[0, 1]
    assert "λ+=0.1" in cfg.label()


@pytest.mark.parametrize("options, message", [
    (dict(advantage="nope"), "advantage must be one of"),
    (dict(group_size=1, advantage="passk_best", adv_std="population"), "group_size >= 2"),
    (dict(group_size=4, advantage="pkpo", passk_k=5), "must not exceed"),
    (dict(positive_weight=-1.0), "positive_weight"),
])
def test_bad_settings(options, message):
    with pytest.raises(CatsimError, match=message):
        RLConfig.from_flat(**options)
