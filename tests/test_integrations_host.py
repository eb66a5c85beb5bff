"""The plug-ins' one computation (`catsim.integrations.host`): registry rule × focal weight per group,
and JAX kept on the CPU platform inside a torch trainer's process (no accelerator backend started,
so nothing preallocated). Needs no trainer package."""

import os
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.integrations import host
from catsim.objectives import advantages, focal, registry

# three groups of unequal size, interleaved: 0/1 rewards
UID_B = ["a", "b", "a", "c", "b", "a", "c", "c", "a", "b", "b", "c", "c"]
R_B = np.array([1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1], np.float32)


def _by_group(name, gamma, options):
    est = host.resolve(name, gamma, options)
    rule, want = registry.get(est.rule), np.zeros(len(R_B), np.float32)
    for uid in dict.fromkeys(UID_B):
        pos = [i for i, u in enumerate(UID_B) if u == uid]
        r = jnp.asarray(R_B[pos])
        g = focal.focal_weight(advantages.success_rate(r), est.gamma)
        want[pos] = np.asarray(g * rule.advantages(r, options))
    return est, want


@pytest.mark.parametrize("name", host.estimator_names())
def test_each_name_is_the_registry_rule_times_the_focal_weight(name):
    options = registry.Options(k=2, ddof=1, w_reinforce_lambda=0.3)
    est, want = _by_group(name, 0.7, options)
    got, mu, g = host.group_advantages(R_B, UID_B, est)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert mu[0] == mu[2] == pytest.approx(0.5) and g[1] == pytest.approx((1 - 0.5) ** est.gamma)
    assert est.gamma == (0.7 if name == "fgrpo" or name.startswith("f-") else 0.0)


def test_names_options_and_bad_input():
    assert host.resolve("fgrpo").rule == "grpo" and host.resolve("fgrpo", normalise_std=False).rule == "dr_grpo"
    assert host.resolve("f-pkpo", 1.0).gamma == 1.0 and host.resolve("pkpo", 1.0).gamma == 0.0
    assert set(registry.NAMES) < set(host.estimator_names())
    gamma, options = host.options_from({"gamma": 0.25, "k": "3", "eps": 1e-4})
    assert gamma == 0.25 and options.k == 3 and options.eps == 1e-4
    for bad, match in [(lambda: host.resolve("fgrpoo"), "unknown catsim estimator"),
                       (lambda: host.options_from({"gama": 1}), "unknown catsim option"),
                       (lambda: host.resolve("fgrpo", -0.5), "gamma"),
                       (lambda: host.group_advantages(R_B, UID_B[:-1], host.resolve("grpo")), "group ids"),
                       (lambda: host.group_advantages(R_B, UID_B, host.resolve("pkpo", 0, registry.Options(k=5))),
                        "exceeds the group size"),
                       (lambda: host.group_advantages(2 * R_B, UID_B, host.resolve("fgrpo")), "reward_correct"),
                       (lambda: host.contiguous_groups(10, 4), "does not split")]:
        with pytest.raises(CatsimError, match=match):
            bad()


def test_an_unscorable_sample_zeroes_its_group_only():
    r = R_B.copy()
    r[1] = np.nan  # group "b"
    got, _, _ = host.group_advantages(r, UID_B, host.resolve("fgrpo", 0.5))
    b = np.array([u == "b" for u in UID_B])
    np.testing.assert_array_equal(got[b], 0.0)
    assert np.all(np.isfinite(got)) and np.any(got[~b] != 0)


def _fresh(code: str, **env) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_PLATFORM", "XLA_PYTHON_CLIENT"))}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=clean | env, capture_output=True,
                          text=True, timeout=120)


PROBE = """
    import sys
    import jax
    from jax._src import xla_bridge
    from catsim.integrations import host
    for mod in {plugins}:  # importing a plug-in starts no backend
        try:
            __import__("catsim.integrations." + mod)
        except ImportError:
            pass
    started_on_import = xla_bridge.backends_are_initialized()
    {before}
    adv, _, _ = host.group_advantages([1.0, 0.0, 0.0, 0.0], [0, 0, 0, 0], host.resolve("fgrpo"){pin})
    print(started_on_import, jax.config.jax_platforms, sorted(xla_bridge._backends), adv.round(3).tolist())
"""


def test_a_torch_trainer_process_gets_only_the_cpu_backend():
    out = _fresh(PROBE.format(plugins=("trl", "verl", "tunix"), before="", pin=""))
    assert out.returncode == 0, out.stderr[-2000:]
    started, platforms, backends, adv = out.stdout.split(" ", 3)
    assert (started, platforms, backends) == ("False", "cpu", "['cpu']")
    assert adv.strip() == str([1.5, -0.5, -0.5, -0.5])  # (1 − 1/4)^½ · (r − 1/4)/sqrt(3/16)


def test_a_users_jax_choice_is_left_alone():
    started = _fresh(PROBE.format(plugins=(), before="jax.devices()", pin=""))  # a JAX user started its backends first
    assert started.returncode == 0, started.stderr[-2000:]
    assert started.stdout.split(" ")[1] == "None"
    tunix_like = _fresh(PROBE.format(plugins=(), before="", pin=", pin_platform=False"))  # JAX-native trainers
    assert tunix_like.returncode == 0, tunix_like.stderr[-2000:]
    assert tunix_like.stdout.split(" ")[1] == "None"
