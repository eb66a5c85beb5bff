"""The trainer's --advantage maxrl|passk_training|pkpo|passk_best and --positive-weight: the shared
objectives code per group, in the label, the flat options (fingerprint, log) and the CLI."""

import jax.numpy as jnp
import numpy as np
import pytest

from catsim.errors import CatsimError, CatsimWarning
from catsim.llm.rl.config import RLConfig
from catsim.llm.rl.step import compute_advantages
from catsim.objectives import losses, registry

SCORES = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], np.float32)


@pytest.mark.parametrize("name", [n for n in registry.NAMES if registry.get(n).binary])
def test_binary_advantages_come_from_the_registry(name):
    cfg = RLConfig.from_flat(group_size=4, advantage=name, passk_k=2, w_reinforce_lambda=0.2)
    got, _, _ = compute_advantages(SCORES, cfg, 0.0)
    rule = registry.get(name)
    # the trainer's GRPO std is the sample one (ddof 1) by default: rules that read it get it too
    opts = registry.Options(k=2, w_reinforce_lambda=0.2, eps=cfg.objective.adv_eps,
                            ddof=1 if cfg.objective.adv_std == "sample" else 0)
    batch_mean = registry.batch_mean(jnp.asarray(SCORES))  # B of a batch-level rule (A-GRAE): every group
    want = np.stack([np.asarray(rule.advantages(jnp.asarray(r), opts, batch_mean)) for r in SCORES])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    if not rule.baseline_free:
        np.testing.assert_array_equal(got[2:], 0.0)  # all-equal groups: exactly zero
    else:
        assert np.all(got[2] <= 0) and np.all(got[3] >= 0)  # signed rules learn from them too
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


def test_k_equal_n_warns():
    with pytest.warns(CatsimWarning, match="trains nothing"):
        RLConfig.from_flat(group_size=4, advantage="passk_training", passk_k=4)


@pytest.mark.parametrize("options, message", [
    (dict(advantage="nope"), "unknown advantage"),
    (dict(group_size=1, advantage="passk_best", adv_std="population"), "group_size >= 2"),
    (dict(group_size=4, advantage="pkpo", passk_k=5), "exceeds the group size"),
    (dict(w_reinforce_lambda=-1.0), "w_reinforce_lambda"),
    (dict(positive_weight=-1.0), "positive_weight"),
])
def test_bad_settings(options, message):
    with pytest.raises(CatsimError, match=message):
        RLConfig.from_flat(**options)


def test_cli_refuses_k_above_the_group_size_in_one_line(capsys, tmp_path):
    from catsim.cli.main import main

    assert main(["llm", "rl", "--base", str(tmp_path), "--out", str(tmp_path / "rl"), "--group-size", "4",
                 "--advantage", "pkpo", "--passk-k", "16"]) == 2
    err = capsys.readouterr().err.strip()
    assert "exceeds the group size N = 4" in err and "\n" not in err
