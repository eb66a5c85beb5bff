"""The plug-ins' one computation (`catsim.integrations.host`): registry rule × focal weight per group,
and JAX kept on the CPU platform inside a torch trainer's process (no accelerator backend started,
so nothing preallocated). Needs no trainer package."""

import os
import re
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
    # B of a batch-level rule (A-GRAE): the mean over the batch's groups of each group's mean
    batch_mean = np.mean([R_B[[u == uid for u in UID_B]].mean() for uid in dict.fromkeys(UID_B)])
    for uid in dict.fromkeys(UID_B):
        pos = [i for i, u in enumerate(UID_B) if u == uid]
        r = jnp.asarray(R_B[pos])
        g = focal.focal_weight(advantages.success_rate(r), est.gamma)
        want[pos] = np.asarray(g * rule.advantages(r, options, batch_mean))
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



# --- groups of one, unscorable and infinite rewards, bad option values (issue 50) --------------

@pytest.mark.parametrize("name", host.estimator_names())
def test_a_group_of_one_gets_zero_where_the_rule_compares_samples(name):
    # "s" holds one correct sample. ddof = 1 (verl's, TRL's, Tunix's std) used to abort the whole
    # batch ("the sample std (ddof=1) needs a group of at least 2"); k = 1 lets pass@k take N = 1.
    uid, r = ["s", *UID_B], np.concatenate([[1.0], R_B]).astype(np.float32)
    options = registry.Options(k=1, ddof=1)
    est = host.resolve(name, 0.5, options)
    rule = registry.get(est.rule)
    got, mu, g = host.group_advantages(r, uid, est)
    want = 0.0  # nothing to compare the sample with
    if rule.baseline_free:  # w_reinforce, nsr, psr score each sample alone: it keeps its value
        want = float(focal.focal_weight(1.0, est.gamma) * rule.advantages(jnp.asarray([1.0]), options)[0])
    assert got[0] == pytest.approx(want, abs=1e-7)
    assert mu[0] == 1.0 and g[0] == (0.0 if est.gamma > 0 else 1.0)
    np.testing.assert_array_equal(got[1:], host.group_advantages(R_B, UID_B, est)[0])  # the others unchanged


def test_a_group_of_one_gets_zero_from_grpo_as_from_trls_grpo():
    est = host.resolve("grpo", 0, registry.Options(ddof=1))
    got, _, _ = host.group_advantages([0.0, 1.0, 1.0, 0.0, 1.0], [0, 1, 2, 2, 2], est)
    np.testing.assert_array_equal(got[:2], [0.0, 0.0])  # TRL: (r − r)/(0 + 1e-4) = 0 (verl's grpo: r)
    with pytest.raises(CatsimError, match="exceeds the group size N = 1"):  # k > N stays refused
        host.group_advantages([1.0, 0.0], [0, 1], host.resolve("pkpo", 0, registry.Options(k=2)))


@pytest.mark.parametrize("gamma", [0.0, 0.5])
@pytest.mark.parametrize("name", host.estimator_names())
def test_a_nan_reward_zeroes_its_group_under_every_rule_and_gamma(name, gamma):
    # maxrl [1, NaN, 0, 0] at γ = 0 used to read the NaN as a wrong answer: [3, −1, −1, −1]
    est = host.resolve(name, gamma, registry.Options(k=2, ddof=1))
    four, _, _ = host.group_advantages([1.0, np.nan, 0.0, 0.0], [0, 0, 0, 0], est)
    np.testing.assert_array_equal(four, 0.0)
    r = R_B.copy()
    r[1] = np.nan  # group "b"
    b = np.array([u == "b" for u in UID_B])
    got, mu, g = host.group_advantages(r, UID_B, est)
    np.testing.assert_array_equal(got[b], 0.0)
    assert np.all(np.isnan(mu[b])) and np.all(np.isnan(g[b])) and np.all(np.isfinite(got))
    if registry.get(est.rule).reads_batch_mean:  # the others as in a batch without the unscorable group
        keep = [i for i, u in enumerate(UID_B) if u != "b"]
        np.testing.assert_array_equal(got[~b], host.group_advantages(R_B[keep], [UID_B[i] for i in keep], est)[0])
    else:
        np.testing.assert_array_equal(got[~b], host.group_advantages(R_B, UID_B, est)[0][~b])


@pytest.mark.parametrize("name", ["fgrpo", "maxrl", "mean_centred", "nsr"])
@pytest.mark.parametrize("bad", [np.inf, -np.inf, 1e39])
def test_an_infinite_reward_is_refused_in_one_line(bad, name):
    r = R_B.astype(np.float64)
    r[4] = bad  # group "b"
    for gamma in (0.0, 0.5):  # it used to zero its group silently (γ > 0: NaN; 0/1 rules: correct)
        shown = "^" + re.escape(f"reward {bad:g} at position 4 of the batch (group 'b')")
        with pytest.raises(CatsimError, match=shown) as e:
            host.group_advantages(r, UID_B, host.resolve(name, gamma))
        assert "\n" not in str(e.value) and "NaN for an unscorable sample" in str(e.value)


@pytest.mark.parametrize("values, label, shown", [
    ({"k": 2.7}, "algorithm.fgrpo.k", "2.7"),  # was read as k = 2
    ({"ddof": 0.5}, "algorithm.fgrpo.ddof", "0.5"),  # was read as the population std
    ({"ddof": 2}, "algorithm.fgrpo.ddof", "2"),
    ({"gamma": True}, "algorithm.fgrpo.gamma", "True"),  # was read as γ = 1
    ({"gamma": "abc"}, "algorithm.fgrpo.gamma", "'abc'"),  # was a bare ValueError
    ({"gamma": None}, "algorithm.fgrpo.gamma", "None"),  # was a bare TypeError
    ({"gamma": float("nan")}, "algorithm.fgrpo.gamma", "nan"),
    ({"gamma": 1e39}, "algorithm.fgrpo.gamma", "1e+39"),  # inf in float32
    ({"k": "x"}, "algorithm.fgrpo.k", "'x'"),
    ({"k": 0}, "algorithm.fgrpo.k", "0"),
    ({"k": 10**400}, "algorithm.fgrpo.k", "within float32"),
    ({"eps": -1}, "algorithm.fgrpo.eps", "-1"),
    ({"w_reinforce_lambda": -1}, "algorithm.fgrpo.w_reinforce_lambda", "-1"),
    ({"w_reinforce_lambda": float("inf")}, "algorithm.fgrpo.w_reinforce_lambda", "inf"),
    ({"reward_correct": [1]}, "algorithm.fgrpo.reward_correct", "[1]"),
    ({"reward_wrong": 1.0}, "algorithm.fgrpo.reward_wrong", "(1)"),
    (1, "algorithm.fgrpo must be a mapping", "got 1"),  # `+algorithm.fgrpo=1`: was a bare TypeError
])
def test_every_bad_option_value_is_one_line_naming_the_option_and_value(values, label, shown):
    labels = {name: f"algorithm.fgrpo.{name}" for name in host.OPTION_NAMES}
    with pytest.raises(CatsimError) as e:
        host.options_from(values, labels=labels, where="algorithm.fgrpo")
    message = str(e.value)
    assert label in message and shown in message and "\n" not in message, message


def test_typed_estimators_refuse_what_options_from_refuses():
    gamma, options = host.options_from({"k": 4.0, "ddof": "0", "gamma": "0.25"})  # whole numbers are read
    assert (gamma, options.k, options.ddof) == (0.25, 4, 0) and type(options.k) is int
    for bad, match in [(registry.Options(k=2.7), "^k must be an integer >= 1, got 2.7$"),
                       (registry.Options(k=True), "^k must be"),
                       (registry.Options(ddof=2), "^ddof must be 0"),
                       (registry.Options(eps=-1.0), "^eps must be a finite number >= 0"),
                       (registry.Options(w_reinforce_lambda=-0.1), "^w_reinforce_lambda must be"),
                       (registry.Options(reward_correct=float("inf")), "^reward_correct must be")]:
        with pytest.raises(CatsimError, match=match):
            host.Estimator("grpo", 0.5, bad)
    for gamma, match in [(True, "True"), ("abc", "'abc'"), (None, "None"), (-0.5, "-0.5")]:
        with pytest.raises(CatsimError, match=f"^gamma must be a finite number >= 0, got {match}$"):
            host.resolve("fgrpo", gamma)
    host.Estimator("grpo", 0.0, registry.Options(eps=0.0))  # ε = 0 is allowed: every rule guards 0/0


def test_torch_rewards_of_any_float_dtype_and_tensor_ids_are_read():
    torch = pytest.importorskip("torch")
    est = host.resolve("fgrpo", 0.5)
    want = host.group_advantages(R_B, UID_B, est)
    ids = torch.tensor([ord(u) for u in UID_B])  # verl and TRL hand over tensors
    for dtype in (torch.bfloat16, torch.float16, torch.float32):  # 0/1 are exact in each
        rewards = torch.tensor(R_B, dtype=dtype, requires_grad=dtype != torch.bfloat16)
        for got, expected in zip(host.group_advantages(rewards, ids, est), want, strict=True):
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("rewards, ids, says", [
    (R_B[:4], [[0], [0], [1], [1]], "group id [0] at position 0 is not hashable (list)"),
    (R_B[:2], [{}, {}], "group id {} at position 0 is not hashable (dict)"),
    (R_B[:1], 0, "group ids must be a sequence of 1 ids (one per reward), got int"),
    (R_B[:2], "ab", "group ids must be a sequence of 2 ids (one per reward), got str"),
    (R_B[:3], ["a", "a"], "3 rewards but 2 group ids"),
    (["x", "y"], ["a", "a"], "rewards must be numbers"),
])
def test_group_ids_and_rewards_of_the_wrong_kind_are_one_line(rewards, ids, says):
    with pytest.raises(CatsimError, match=re.escape(says)) as e:
        host.group_advantages(rewards, ids, host.resolve("fgrpo"))
    assert "\n" not in str(e.value)
