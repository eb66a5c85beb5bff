"""catsim's rules as verl advantage estimators: verl's own `compute_advantage` on a CPU DataProto,
GRPO equivalence at γ = 0, F-GRPO = GRPO × (1 − μ̂)^γ, and verl's two plug-in loaders.

Runs where verl is installed (`pip install -e ".[verl]"`; tested with verl 0.9.1), skips elsewhere.
"""

import os
import subprocess
import sys
import textwrap
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.objectives import advantages, focal, registry

pytest.importorskip("verl", reason="verl is not installed (pip install -e '.[verl]')")
ray_trainer = pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="verl's ray_trainer does not import here")
torch = pytest.importorskip("torch")
from omegaconf import OmegaConf  # noqa: E402 - verl's dependency
from verl import DataProto  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402

from catsim.integrations import host  # noqa: E402
from catsim.integrations import verl as cverl  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# 4 groups (uids interleaved, as after verl's shuffle-free repeat + a reorder), T = 3 tokens
UID_B = np.array(["a", "b", "a", "c", "b", "a", "c", "d", "b", "a", "c", "d", "d", "b", "c", "d"], dtype=object)
SCORE_B = np.array([1, 0, 0, 1, 1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 1], np.float32)


def _batch(scores_B=SCORE_B, uid_B=UID_B) -> DataProto:
    """Outcome reward on the last valid token, as verl's reward managers write it."""
    B, T = len(scores_B), 3
    mask = torch.ones(B, T)
    mask[::3, 2] = 0  # some responses are shorter
    last = mask.sum(-1).long() - 1
    rewards = torch.zeros(B, T)
    rewards[torch.arange(B), last] = torch.as_tensor(scores_B)
    return DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                               non_tensors={"uid": uid_B})


def _advantage(name, algorithm: dict, batch=None):
    config = OmegaConf.create({"adv_estimator": name, "norm_adv_by_std_in_grpo": True, **algorithm})
    data = ray_trainer.compute_advantage(batch or _batch(), adv_estimator=name,
                                         norm_adv_by_std_in_grpo=config.norm_adv_by_std_in_grpo, config=config)
    return data.batch["advantages"].numpy(), data.batch["response_mask"].numpy()


def _reference(rule_name, gamma, options, scores_B=SCORE_B, uid_B=UID_B):
    """The registry rule × the focal weight, group by group (no plug-in code)."""
    rule, want = registry.get(rule_name), np.zeros(len(scores_B), np.float32)
    # B of a batch-level rule (A-GRAE): the mean over the batch's groups of each group's mean input
    batch_mean = np.mean([(scores_B[uid_B == uid] > 0.5 if rule.binary else scores_B[uid_B == uid]).mean()
                          for uid in dict.fromkeys(uid_B)])
    for uid in dict.fromkeys(uid_B):
        pos = np.flatnonzero(uid_B == uid)
        r = jnp.asarray(scores_B[pos])
        x = (r > 0.5).astype(jnp.float32) if rule.binary else r
        g = focal.focal_weight(advantages.success_rate(r), gamma)
        want[pos] = np.asarray(g * rule.advantages(x, options, batch_mean))
    return want


def test_every_catsim_name_is_registered_and_verl_keeps_grpo():
    assert set(cverl.NAMES) == set(host.estimator_names()) - {"grpo"}
    assert {"fgrpo", "maxrl", "passk_training", "pkpo", "f-maxrl", "f-pkpo"} <= set(cverl.NAMES)
    assert core_algos.get_adv_estimator_fn("grpo") is core_algos.compute_grpo_outcome_advantage


@pytest.mark.parametrize("name", cverl.NAMES)
def test_compute_advantage_runs_each_name_through_the_registry(name):
    got, mask = _advantage(name, {"fgrpo": {"gamma": 0.5, "k": 2}})
    est = host.resolve(name, 0.5, registry.Options(k=2, ddof=1, eps=1e-6))
    want = _reference(est.rule, est.gamma, est.options)
    np.testing.assert_allclose(got, want[:, None] * mask, rtol=1e-5, atol=1e-6)
    assert got.dtype == np.float32


@pytest.mark.parametrize("normalise_std", [True, False])
def test_fgrpo_at_gamma_zero_is_verls_grpo(normalise_std):
    algo = {"norm_adv_by_std_in_grpo": normalise_std, "fgrpo": {"gamma": 0.0}}
    got, _ = _advantage("fgrpo", algo)
    config = OmegaConf.create({"adv_estimator": "grpo", **algo})
    data = ray_trainer.compute_advantage(_batch(), adv_estimator=core_algos.AdvantageEstimator.GRPO,
                                         norm_adv_by_std_in_grpo=normalise_std, config=config)
    np.testing.assert_allclose(got, data.batch["advantages"].numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("gamma", [0.5, 2.0])
def test_fgrpo_is_grpo_times_the_focal_weight_per_group(gamma):
    got, mask = _advantage("fgrpo", {"fgrpo": {"gamma": gamma}})
    config = OmegaConf.create({"adv_estimator": "grpo"})
    grpo = ray_trainer.compute_advantage(_batch(), adv_estimator="grpo", config=config).batch["advantages"].numpy()
    for uid in dict.fromkeys(UID_B):
        pos = UID_B == uid
        mu = SCORE_B[pos].mean()
        np.testing.assert_allclose(got[pos], grpo[pos] * (1 - mu) ** gamma, rtol=1e-5, atol=1e-6)
    assert np.any(got != grpo)  # the weight is not 1 at this γ


def test_graded_rewards_need_their_levels_and_bad_options_fail_in_one_line():
    graded = SCORE_B * 2.0  # rewards 0/2
    with pytest.raises(CatsimError, match="reward_correct"):
        _advantage("fgrpo", {"fgrpo": {"gamma": 0.5}}, _batch(graded))
    got, mask = _advantage("fgrpo", {"fgrpo": {"gamma": 0.5, "reward_correct": 2.0}}, _batch(graded))
    want = _reference("grpo", 0.5, registry.Options(ddof=1, eps=1e-6), SCORE_B)
    np.testing.assert_allclose(got, want[:, None] * mask, rtol=1e-5, atol=1e-6)  # GRPO is scale-free
    with pytest.raises(CatsimError, match="unknown catsim option"):
        _advantage("fgrpo", {"fgrpo": {"gama": 0.5}})
    with pytest.raises(CatsimError, match="use_kl_in_reward"):
        _advantage("fgrpo", {"use_kl_in_reward": True})
    with pytest.raises(CatsimError, match="exceeds the group size"):
        _advantage("pkpo", {"fgrpo": {"k": 5}})
    with pytest.raises(CatsimError, match="uid"):
        core_algos.get_adv_estimator_fn("fgrpo")(token_level_rewards=torch.ones(2, 1), response_mask=torch.ones(2, 1))


def test_registering_twice_does_not_raise():
    import importlib

    assert cverl.register() == cverl.NAMES
    importlib.reload(cverl)  # new function objects: verl's registry must not refuse them
    assert cverl.register() == cverl.NAMES


def _fresh(code: str, **env) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_")} | env
    return subprocess.run([sys.executable, "-W", "ignore", "-c", textwrap.dedent(code)], env=full_env,
                          capture_output=True, text=True, timeout=180, cwd=ROOT)


RESOLVES = """
    import verl
    from verl.trainer.ppo import core_algos
    print("fgrpo" in core_algos.ADV_ESTIMATOR_REGISTRY, core_algos.get_adv_estimator_fn("f-maxrl").__name__)
"""


def _entry_point_env(tmp_path) -> dict:
    """PYTHONPATH holding a dist-info with pyproject's `verl.plugins` entry point, unless installed."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["verl.plugins"]
    assert declared == {"catsim": "catsim.integrations.verl_plugin"}
    if any(ep.value == declared["catsim"] for ep in entry_points(group="verl.plugins")):
        return {}
    info = tmp_path / "catsim_verl_probe-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: catsim-verl-probe\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[verl.plugins]\ncatsim = {declared['catsim']}\n")
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])}


def test_the_entry_point_makes_the_names_resolvable_in_a_fresh_verl(tmp_path):
    out = _fresh(RESOLVES, **_entry_point_env(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "catsim_f_maxrl"]
    off = _fresh(RESOLVES.replace('.get_adv_estimator_fn("f-maxrl").__name__', ".__name__"),
                 VERL_USE_EXTERNAL_PLUGINS="none")
    assert off.stdout.split()[0] == "False", off.stderr[-2000:]  # without a loader the name is unknown


def test_the_environment_variable_makes_the_names_resolvable_in_a_fresh_verl():
    out = _fresh(RESOLVES, VERL_USE_EXTERNAL_PLUGINS="none", VERL_USE_EXTERNAL_MODULES="catsim.integrations.verl")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "catsim_f_maxrl"]


def test_a_failed_plugin_import_is_logged_at_warning(tmp_path):
    code = "import sys; sys.modules['catsim.integrations.verl'] = None\n" + textwrap.dedent(RESOLVES).replace(
        '.get_adv_estimator_fn("f-maxrl").__name__', ".__name__")
    out = _fresh(code, **_entry_point_env(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[0] == "False"
    assert "WARNING" in out.stderr and "catsim: the verl plug-in did not load" in out.stderr, out.stderr[-2000:]


# --- groups of one, unscorable and infinite scores, bad option values (issue 50) ---------------

def test_a_group_of_one_gets_zero_where_verls_grpo_gives_its_reward():
    uid = np.concatenate([UID_B, ["solo"]]).astype(object)
    scores = np.concatenate([SCORE_B, [1.0]]).astype(np.float32)
    batch = _batch(scores, uid)  # used to abort: "the sample std (ddof=1) needs a group of at least 2"
    got, mask = _advantage("fgrpo", {"fgrpo": {"gamma": 0.0}}, batch)
    np.testing.assert_array_equal(got[-1], 0.0)
    grpo = ray_trainer.compute_advantage(_batch(scores, uid), adv_estimator="grpo",
                                         config=OmegaConf.create({"adv_estimator": "grpo"})).batch["advantages"].numpy()
    assert grpo[-1].max() == pytest.approx(1.0)  # verl's own grpo: the reward itself (the documented difference)
    np.testing.assert_allclose(got[:-1], grpo[:-1], rtol=1e-5, atol=1e-6)
    for name in ("maxrl", "f-passk_best", "mean_centred"):
        np.testing.assert_array_equal(_advantage(name, {"fgrpo": {"gamma": 0.5}}, _batch(scores, uid))[0][-1], 0.0)


@pytest.mark.parametrize("name", ["maxrl", "fgrpo", "pkpo", "w_reinforce"])
def test_a_nan_score_zeroes_its_group_at_gamma_zero(name):
    scores = SCORE_B.copy()
    scores[1] = np.nan  # uid "b"; maxrl [1, NaN, 0, 0] at γ = 0 used to give [3, −1, −1, −1]
    got, _ = _advantage(name, {"fgrpo": {"gamma": 0.0, "k": 2}}, _batch(scores))
    b = UID_B == "b"
    np.testing.assert_array_equal(got[b], 0.0)
    clean, _ = _advantage(name, {"fgrpo": {"gamma": 0.0, "k": 2}})
    np.testing.assert_array_equal(got[~b], clean[~b])


def test_an_infinite_score_is_refused():
    scores = SCORE_B.copy()
    scores[4] = np.inf  # used to zero uid "b" silently
    with pytest.raises(CatsimError, match="reward inf at position 4 .*group 'b'"):
        _advantage("maxrl", {"fgrpo": {"gamma": 0.5}}, _batch(scores))


@pytest.mark.parametrize("block, shown", [
    ({"k": 2.7}, "algorithm.fgrpo.k must be an integer >= 1, got 2.7"),  # was read as k = 2
    ({"ddof": 0.5}, "algorithm.fgrpo.ddof must be 0 (population std) or 1 (sample std), got 0.5"),
    ({"ddof": 2}, "algorithm.fgrpo.ddof must be 0"),
    ({"gamma": True}, "algorithm.fgrpo.gamma must be a finite number >= 0, got True"),  # was γ = 1
    ({"gamma": "abc"}, "algorithm.fgrpo.gamma must be a finite number >= 0, got 'abc'"),
    ({"gamma": None}, "algorithm.fgrpo.gamma must be a finite number >= 0, got None"),
    ({"k": "x"}, "algorithm.fgrpo.k must be an integer >= 1, got 'x'"),
    ({"eps": -1}, "algorithm.fgrpo.eps must be a finite number >= 0, got -1"),
    ({"w_reinforce_lambda": -1}, "algorithm.fgrpo.w_reinforce_lambda must be a finite number >= 0, got -1"),
    (1, "algorithm.fgrpo must be a mapping of catsim options"),  # `+algorithm.fgrpo=1`
])
def test_bad_option_values_are_one_line_errors_naming_the_option(block, shown):
    # Hydra's command line gives these types: `+algorithm.fgrpo.gamma=true` is a bool, `=null` None
    with pytest.raises(CatsimError) as e:
        _advantage("pkpo", {"fgrpo": block})
    assert str(e.value).startswith(shown) and "\n" not in str(e.value), str(e.value)
