"""Every advantage rule of the registry, and its focal form, on every surface that offers rules:
`catsim simulate`, `catsim sweep` (the Fig. 2 grid and the methods study), `catsim llm rl` (two
steps of a tiny model), the host function the trainer plug-ins share, and each plug-in whose
framework is installed here (verl, TRL, Tunix).

The names come from `registry.NAMES` and `host.estimator_names()`: a rule added to the registry
is taken through every surface without an edit here, so a rule cannot be half-wired again.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from catsim.cli.main import main
from catsim.experiments import methods as methods_study
from catsim.integrations import host
from catsim.objectives import registry

NAMES = registry.NAMES
FOCAL = tuple(host.FOCAL_PREFIX + name for name in NAMES)
K = 2  # k of the pass@k rules: below every group size used here (N = 4 and 8)
SIM = ["--num-actions", "64", "--num-correct", "8", "--steps", "2"]


def _k(name: str) -> list[str]:
    """--passk-k for the rules that read k (the others refuse it: it would never act)."""
    return ["--passk-k", str(K)] if registry.get(name.removeprefix(host.FOCAL_PREFIX)).needs_k else []


def _finite_rows(lines):
    rows = [json.loads(line) for line in lines if line.startswith("{")]
    assert rows and all(math.isfinite(r["qpos"]) and math.isfinite(r["mret"]) for r in rows)
    return rows


@pytest.mark.parametrize("name", NAMES)
def test_simulate_runs_the_rule_and_its_focal_form(name, capsys):
    """γ = 0 is the rule as published, γ = 0.5 its focal form (F-<rule>), in one command."""
    assert main(["simulate", *SIM, *_k(name), "--group-size", "8", "--gamma", "0,0.5", "--advantage", name,
                 "--format", "json"]) == 0
    rows = _finite_rows(capsys.readouterr().out.splitlines())
    assert sorted(r["gamma"] for r in rows) == [0.0, 0.5]


@pytest.mark.parametrize("name", NAMES)
def test_sweep_runs_the_rule_and_its_focal_form(name, tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["sweep", *SIM, *_k(name), "--group-size", "4,8", "--gamma", "0,0.5", "--seeds", "1", "--log-every", "1",
                 "--advantage", name, "--out", str(out), "--figures", str(out), "--no-progress"]) == 0
    assert (out / "results.npz").is_file()
    table = (out / "table.txt").read_text()
    assert "nan" not in table.lower()


@pytest.fixture(scope="module")
def methods_json(tmp_path_factory):
    out = tmp_path_factory.mktemp("methods")
    assert main(["sweep", "--study", "methods", "--num-actions", "64", "--num-correct", "8", "--steps", "4",
                 "--log-every", "1", "--group-size", "2,8", "--seeds", "1", "--out", str(out), "--no-progress"]) == 0
    return json.loads((out / "methods.json").read_text())


@pytest.mark.parametrize("name", NAMES)
def test_methods_study_has_a_row_of_the_rule(name, methods_json):
    """The study runs every registry rule under its own label (`--advantage` is refused there)."""
    rows = [m.name for m in methods_study.METHODS if dict(m.update).get("advantage", "mean_centred") == name]
    assert rows, f"no row of the methods study runs {name}"
    for row in rows:
        i = methods_json["methods"].index(row)
        assert all(math.isfinite(x) for x in np.ravel(methods_json["mret"][i])), row


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    from llm_rl_helpers import make_paths_base

    return make_paths_base(tmp_path_factory.mktemp("rules-base") / "base")


@pytest.mark.parametrize("name", NAMES + FOCAL)
def test_llm_rl_trains_two_steps(name, tiny_base, tmp_path, capsys):
    rule, gamma = name.removeprefix(host.FOCAL_PREFIX), "0.5" if name in FOCAL else "0"
    out = tmp_path / "rl"
    assert main(["llm", "rl", "--base", str(tiny_base), "--out", str(out), "--group-size", "4",
                 "--prompts-per-step", "2", "--max-new-tokens", "8", "--steps", "2", "--advantage", rule,
                 *_k(rule), "--gamma", gamma, "--no-progress"]) == 0
    assert "warning" not in capsys.readouterr().err
    records = [json.loads(line) for line in (out / "rl_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    assert all(math.isfinite(r["loss"]) for r in records)
    assert json.loads((out / "rl_config.json").read_text())["rl"]["rare"]["advantage"] == rule
    assert (out / "model" / "config.json").is_file()


SCORES = np.array([1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0], np.float32)
UIDS = np.repeat(np.arange(4), 4)


@pytest.mark.parametrize("name", host.estimator_names())
def test_host_function_is_the_rule_times_the_focal_weight(name):
    import jax.numpy as jnp

    est = host.resolve(name, gamma=0.5, options=registry.Options(k=K))
    adv, mu, g = host.group_advantages(SCORES, UIDS, est)
    rule = registry.get(est.rule)
    batch_mean = np.mean([SCORES[UIDS == group].mean() for group in range(4)])  # B of a batch-level rule
    for group in range(4):
        rows = UIDS == group
        want = np.asarray(rule.advantages(jnp.asarray(SCORES[rows]), est.options, batch_mean))
        weight = (1.0 - SCORES[rows].mean()) ** est.gamma
        np.testing.assert_allclose(adv[rows], weight * want, rtol=1e-6, atol=1e-7)
    assert est.gamma == (0.0 if name in NAMES else 0.5)


# ------------------------------------------------------------------------ the plug-ins
# Each plug-in test needs its framework (verl and Tunix live in their own CI environments, where
# `.ci/run` runs `-k plugin` of this file); without it the test is skipped, not passed.
GAMMA = 0.5


def _reference(name: str, options: registry.Options, scores=SCORES, uids=UIDS) -> np.ndarray:
    """The registry rule × (1 − μ̂)^γ, group by group, without plug-in code (γ = 0 for plain names)."""
    import jax.numpy as jnp

    rule_name = "grpo" if name == "fgrpo" else name.removeprefix(host.FOCAL_PREFIX)
    gamma = GAMMA if name not in NAMES else 0.0
    rule, want = registry.get(rule_name), np.zeros(len(scores), np.float32)
    groups = dict.fromkeys(uids.tolist())
    inputs = {uid: scores[uids == uid] > 0.5 if rule.binary else scores[uids == uid] for uid in groups}
    batch_mean = np.mean([x.mean() for x in inputs.values()])  # B of a batch-level rule (A-GRAE)
    for uid in groups:
        rows = uids == uid
        x = inputs[uid].astype(np.float32)
        want[rows] = (1.0 - scores[rows].mean()) ** gamma * np.asarray(rule.advantages(jnp.asarray(x), options,
                                                                                       batch_mean))
    return want


@pytest.mark.parametrize("name", host.estimator_names())
def test_plugin_verl_runs_the_name(name):
    pytest.importorskip("verl", reason="verl is not installed (its CI environment runs this)")
    ray_trainer = pytest.importorskip("verl.trainer.ppo.ray_trainer")
    import torch
    from omegaconf import OmegaConf
    from verl import DataProto

    from catsim.integrations import verl as cverl

    rewards = torch.zeros(len(SCORES), 2)
    rewards[:, 1] = torch.as_tensor(SCORES)
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": torch.ones(len(SCORES), 2)},
                               non_tensors={"uid": np.array([f"u{u}" for u in UIDS], dtype=object)})
    config = OmegaConf.create({"adv_estimator": name, "norm_adv_by_std_in_grpo": True,
                               cverl.CONFIG_KEY: {"gamma": GAMMA, "k": K}})
    got = ray_trainer.compute_advantage(data, adv_estimator=name, norm_adv_by_std_in_grpo=True,
                                        config=config).batch["advantages"].numpy()
    want = _reference(name, dataclasses.replace(cverl.VERL_OPTIONS, k=K))  # verl's own grpo: the same rule
    np.testing.assert_allclose(got, np.repeat(want[:, None], 2, axis=1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", host.estimator_names())
def test_plugin_tunix_runs_the_name(name):
    pytest.importorskip("tunix", reason="google-tunix is not installed (its CI environment runs this)")
    from tunix.rl import function_registry

    from catsim.integrations import tunix as ctunix

    name_here = ctunix.register(f"catsim-test-{name}", name, gamma=GAMMA, k=K)  # Tunix keeps its own names
    fn = function_registry.get_advantage_estimator(name_here)
    got = np.asarray(fn(rewards=SCORES, num_generations=4))
    np.testing.assert_allclose(got, _reference(name, dataclasses.replace(ctunix.TUNIX_OPTIONS, k=K)),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", host.estimator_names())
def test_plugin_trl_trains_with_the_name(name, tmp_path):
    """Two real `GRPOTrainer` steps of a tiny Qwen2 with the rule (advantage_rule) and γ (focal_gamma):
    the advantages used are the registry rule × the focal weight of the rewards TRL gathered."""
    pytest.importorskip("trl", reason="trl is not installed (pip install -e '.[trl]')")
    datasets = pytest.importorskip("datasets")
    import torch
    from test_integrations_trl import _model, _tokenizer, first_token_even

    from catsim.integrations import trl as ctrl

    seen = {"rewards": [], "used": []}

    class Recording(ctrl.make_trainer()):
        def _calculate_rewards(self, *args, **kwargs):
            out = super()._calculate_rewards(*args, **kwargs)
            seen["rewards"].append(out.clone())
            return out

        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            seen["used"].append(out["advantages"].clone())
            return out

    rule = "grpo" if name == "fgrpo" else name.removeprefix(host.FOCAL_PREFIX)
    args = ctrl.FGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", max_steps=2,
                            save_strategy="no", per_device_train_batch_size=8, num_generations=4,
                            max_completion_length=3, learning_rate=1e-2, seed=7, beta=0.0, disable_tqdm=True,
                            advantage_rule=rule, focal_gamma=GAMMA if name not in NAMES else 0.0,
                            **({"passk_k": K} if registry.get(rule).needs_k else {}))  # others refuse k
    prompts = datasets.Dataset.from_dict({"prompt": [f"w{i} w{i + 1} w{i + 2}" for i in range(3, 11)]})
    Recording(model=_model(), reward_funcs=first_token_even, args=args, train_dataset=prompts,
              processing_class=_tokenizer()).train()
    assert len(seen["used"]) == 2
    for r_B, a_B in zip(seen["rewards"], seen["used"]):
        scores = r_B[:, 0].numpy().astype(np.float32)
        if rule == "grpo":  # TRL's own advantages, scaled: (r − r̄)/(std_ddof1 + 1e-4) × g
            groups = scores.reshape(-1, 4)
            std = groups.std(axis=1, ddof=1, keepdims=True)
            g = (1.0 - groups.mean(axis=1, keepdims=True)) ** args.focal_gamma
            want = (g * (groups - groups.mean(axis=1, keepdims=True)) / (std + 1e-4)).reshape(-1)
        else:
            want = _reference(name, registry.Options(k=K, eps=1e-6, ddof=1), scores,
                              np.repeat(np.arange(len(scores) // 4), 4))
        torch.testing.assert_close(a_B, torch.as_tensor(want), rtol=1e-5, atol=1e-6)
