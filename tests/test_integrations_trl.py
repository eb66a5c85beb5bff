"""F-GRPO inside TRL's GRPOTrainer: two real `train()` steps of a tiny random Qwen2 on the CPU.

The advantages the trainer uses must be TRL's × (1 − μ̂)^γ per group; at γ = 0 the subclass must
reproduce a plain GRPOTrainer step bit for bit (loss and parameters, same seed); a replacing rule
must give the registry's values; with TRL's format + accuracy recipe μ̂ must be the accuracy's
success rate. Skips where trl is absent (`pip install -e ".[trl]"`). Runs on both ends of the `trl`
extra's range: the suite's trl 1.16.0, and trl 1.0.0 in .ci/run (PYTHONPATH=<a --no-deps install>).
"""

import collections

import jax.numpy as jnp
import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.objectives import advantages as adv_lib
from catsim.objectives import focal, registry

trl = pytest.importorskip("trl", reason="trl is not installed (pip install -e '.[trl]')")
torch = pytest.importorskip("torch")
datasets = pytest.importorskip("datasets", reason="trl's datasets dependency is missing")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from catsim.integrations import trl as ctrl  # noqa: E402

G = 4  # completions per prompt
WORDS = ["<pad>", "<eos>", "<unk>"] + [f"w{i}" for i in range(29)]


def _tokenizer():
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.decoder = tokenizers.decoders.WordPiece(prefix="##")  # joins words with spaces
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>",
                                                unk_token="<unk>")


def _model():
    torch.manual_seed(0)
    config = transformers.Qwen2Config(vocab_size=len(WORDS), hidden_size=16, intermediate_size=32,
                                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                      max_position_embeddings=64, pad_token_id=0, eos_token_id=1, bos_token_id=1)
    return transformers.Qwen2ForCausalLM(config)


def first_token_even(completion_ids, **kwargs):
    """1 when the first completion token's id is even: groups with mixed outcomes at random init."""
    return [float(bool(ids) and ids[0] % 2 == 0) for ids in completion_ids]


def _recording(base, tag):
    """`base` that records the advantages it returns (and, tagged "trl", the gathered rewards)."""

    class Recording(base):
        def __init__(self, *args, **kwargs):
            self.seen = getattr(self, "seen", collections.defaultdict(list))
            super().__init__(*args, **kwargs)

        def _calculate_rewards(self, *args, **kwargs):
            rewards = super()._calculate_rewards(*args, **kwargs)
            if tag == "trl":
                self.seen["rewards"].append(rewards.clone())
            return rewards

        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            self.seen[tag].append(out["advantages"].clone())
            return out

    return Recording


def _trainer(trainer_cls, config_cls=ctrl.FGRPOConfig, tmp_path=None, reward=first_token_even, **options):
    args = config_cls(output_dir=str(tmp_path), use_cpu=True, report_to="none", max_steps=2, logging_steps=1,
                      save_strategy="no", per_device_train_batch_size=2 * G, num_generations=G,
                      max_completion_length=3, learning_rate=1e-2, seed=7, bf16=False, beta=0.0,
                      disable_tqdm=True, **options)
    prompts = datasets.Dataset.from_dict({"prompt": [f"w{i} w{i + 1} w{i + 2}" for i in range(3, 11)]})
    return trainer_cls(model=_model(), reward_funcs=reward, args=args, train_dataset=prompts,
                       eval_dataset=prompts.select(range(4)), processing_class=_tokenizer())


def _train(trainer_cls, config_cls=ctrl.FGRPOConfig, tmp_path=None, **options):
    trainer = _trainer(trainer_cls, config_cls, tmp_path, **options)
    trainer.train()
    return trainer


def _plain_and_focal():
    plain = _recording(trl.GRPOTrainer, "trl")  # records TRL's advantages
    return plain, _recording(ctrl.make_trainer(plain), "used")  # records the ones used


def _losses(trainer):
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def test_focal_advantages_are_trls_times_the_focal_weight_per_group(tmp_path):
    _, focal_cls = _plain_and_focal()
    gamma = 0.5
    trainer = _train(focal_cls, tmp_path=tmp_path, focal_gamma=gamma)
    trl_adv, used, rewards = trainer.seen["trl"], trainer.seen["used"], trainer.seen["rewards"]
    assert len(used) == len(trl_adv) == len(rewards) == 2
    mixed = 0
    for r_B, a_trl, a_used in zip(rewards, trl_adv, used):
        mu_G = r_B[:, 0].view(-1, G).mean(dim=1)
        mixed += int(((mu_G > 0) & (mu_G < 1)).sum())
        want = a_trl.view(-1, G) * (1 - mu_G[:, None]) ** gamma
        torch.testing.assert_close(a_used.view(-1, G), want, rtol=1e-6, atol=1e-7)
    assert mixed >= 1  # some group was active, so the weight changed something
    metrics = [h for h in trainer.state.log_history if "catsim/focal_weight/mean" in h]
    assert len(metrics) == 2 and all(0 <= h["catsim/focal_weight/mean"] <= 1 for h in metrics)


def test_gamma_zero_reproduces_a_plain_grpo_trainer_step_exactly(tmp_path):
    plain = _train(trl.GRPOTrainer, trl.GRPOConfig, tmp_path / "plain")
    focal_trainer = _train(ctrl.make_trainer(), tmp_path=tmp_path / "focal", focal_gamma=0.0)
    assert _losses(plain) == _losses(focal_trainer) and len(_losses(plain)) == 2
    for (name, p), (_, q) in zip(plain.model.named_parameters(), focal_trainer.model.named_parameters()):
        assert torch.equal(p, q), name
    assert any(not torch.equal(p, q) for p, q in zip(_model().parameters(), plain.model.parameters()))


def test_a_replacing_rule_gives_the_registry_values(tmp_path):
    _, cls = _plain_and_focal()
    trainer = _train(cls, tmp_path=tmp_path, advantage_rule="maxrl", focal_gamma=1.0)
    rule, options = registry.get("maxrl"), registry.Options(eps=1e-6, ddof=1)
    for r_B, a_used in zip(trainer.seen["rewards"], trainer.seen["used"]):
        for r_N, a_N in zip(r_B[:, 0].view(-1, G).numpy(), a_used.view(-1, G).numpy()):
            g = focal.focal_weight(adv_lib.success_rate(jnp.asarray(r_N)), 1.0)
            np.testing.assert_allclose(a_N, np.asarray(g * rule.advantages(jnp.asarray(r_N), options)), rtol=1e-6)


def test_the_lazy_export_and_bad_options(tmp_path):
    assert issubclass(ctrl.FGRPOTrainer, trl.GRPOTrainer) and ctrl.FGRPOTrainer is ctrl.FGRPOTrainer
    with pytest.raises(CatsimError, match="unknown advantage"):
        ctrl.FGRPOConfig(output_dir=str(tmp_path), use_cpu=True, advantage_rule="grpoo")
    with pytest.raises(CatsimError, match="gamma"):
        ctrl.FGRPOConfig(output_dir=str(tmp_path), use_cpu=True, focal_gamma=-1.0)
    with pytest.raises(CatsimError, match="exceeds the group size"):
        ctrl.FGRPOConfig(output_dir=str(tmp_path), use_cpu=True, advantage_rule="pkpo", passk_k=9, num_generations=4)



# --- construction-time checks, one generation in evaluation, unscorable completions (issue 50) --

@pytest.mark.parametrize("field, value, shown", [
    ("advantage_ddof", 2, "advantage_ddof must be 0 (population std) or 1 (sample std), got 2"),
    ("advantage_eps", -1.0, "advantage_eps must be a finite number >= 0, got -1.0"),
    ("w_reinforce_lambda", -1.0, "w_reinforce_lambda must be a finite number >= 0, got -1.0"),
    ("passk_k", 2.7, "passk_k must be an integer >= 1, got 2.7"),
    ("focal_gamma", True, "focal_gamma must be a finite number >= 0, got True"),
    ("focal_gamma", 1e39, "focal_gamma must be a finite number >= 0 within float32"),
    ("reward_wrong", 1.0, "reward_correct (1) must exceed reward_wrong (1)"),
    ("num_generations_eval", 1, "num_generations_eval = 1: passk_k = 2 exceeds the group size N = 1"),
])
def test_the_config_refuses_bad_values_at_construction(tmp_path, field, value, shown):
    # advantage_ddof=2, advantage_eps=-1 and w_reinforce_lambda=-1 used to fail at the first step,
    # after the model was loaded and completions generated
    with pytest.raises(CatsimError) as e:
        ctrl.FGRPOConfig(output_dir=str(tmp_path), use_cpu=True, num_generations=G,
                         **({"advantage_rule": "pkpo", "passk_k": 2} | {field: value}))
    assert str(e.value).startswith(shown) and "\n" not in str(e.value), str(e.value)


def test_one_generation_per_prompt_in_evaluation_gets_zero(tmp_path):
    # a group of one used to abort the first evaluation (the sample std needs N >= 2); TRL's own
    # GRPO gives it (r − r)/(0 + 1e-4) = 0, and so does every catsim rule that compares samples
    plain, focal_cls = _plain_and_focal()
    for rule in ("grpo", "maxrl"):
        trainer = _trainer(focal_cls, tmp_path=tmp_path / rule, advantage_rule=rule, num_generations_eval=1,
                           per_device_eval_batch_size=4)
        metrics = trainer.evaluate()
        assert "eval_loss" in metrics and len(trainer.seen["used"]) >= 1
        for used in trainer.seen["used"]:
            torch.testing.assert_close(used, torch.zeros_like(used))
        assert all(torch.equal(a, torch.zeros_like(a)) for a in trainer.seen["trl"])  # TRL's own: 0 too


def sometimes_unscorable(completion_ids, **kwargs):
    """`first_token_even`, but the batch's first completion is unscorable (None)."""
    return [None, *first_token_even(completion_ids[1:])]


def test_an_unscorable_completion_zeroes_its_group_at_gamma_zero(tmp_path):
    # a 0/1 rule at γ = 0 used to read the unscorable completion as a wrong answer
    _, cls = _plain_and_focal()
    trainer = _trainer(cls, tmp_path=tmp_path, reward=sometimes_unscorable, advantage_rule="maxrl",
                       focal_gamma=0.0)
    trainer.train()
    rule, options = registry.get("maxrl"), registry.Options(eps=1e-6, ddof=1)
    for r_B, a_used in zip(trainer.seen["rewards"], trainer.seen["used"]):
        r_GxN, a_GxN = r_B[:, 0].view(-1, G).numpy(), a_used.view(-1, G).numpy()
        assert np.isnan(r_GxN[0, 0])
        np.testing.assert_array_equal(a_GxN[0], 0.0)
        for r_N, a_N in zip(r_GxN[1:], a_GxN[1:]):
            np.testing.assert_allclose(a_N, np.asarray(rule.advantages(jnp.asarray(r_N), options)), rtol=1e-6)


# --- a catsim field the chosen rule never reads is refused, not silently ignored ---------------

@pytest.mark.parametrize("options, ignored", [
    ({"advantage_ddof": 0}, "advantage_ddof = 0"),  # read by no rule here: "grpo" is TRL's own
    ({"advantage_eps": 0.1}, "advantage_eps = 0.1"),  # TRL's own GRPO has its own ε
    ({"advantage_rule": "maxrl", "passk_k": 2}, "passk_k = 2"),
    ({"advantage_rule": "pkpo", "w_reinforce_lambda": 0.5}, "w_reinforce_lambda = 0.5"),
])
def test_a_field_the_rule_never_reads_is_refused(tmp_path, options, ignored):
    """Before: FGRPOConfig(advantage_ddof=0) was accepted and trained with TRL's sample std."""
    with pytest.raises(CatsimError, match="does not read " + ignored) as e:
        ctrl.FGRPOConfig(output_dir=str(tmp_path), use_cpu=True, num_generations=G, **options)
    assert "\n" not in str(e.value)
    ctrl.FGRPOConfig(output_dir=str(tmp_path), use_cpu=True, num_generations=G, advantage_rule="maxrl",
                     advantage_eps=0.1)  # read: accepted


def test_read_fields_match_what_each_rule_reads():
    """Each rule's advantages change with an option exactly when `read_fields` names it."""
    groups = [jnp.asarray([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]), jnp.asarray([1.0] + [0.0] * 7)]
    changed = {"advantage_eps": {"eps": 0.5}, "passk_k": {"k": 2}, "w_reinforce_lambda": {"w_reinforce_lambda": 0.7},
               "advantage_ddof": {"ddof": 1}}
    for name in registry.NAMES:
        if name == ctrl.TRL_OWN:
            continue
        rule = registry.get(name)
        for field, option in changed.items():
            moved = any(not np.allclose(np.asarray(rule.advantages(r, registry.Options())),
                                        np.asarray(rule.advantages(r, registry.Options(**option)))) for r in groups)
            assert moved == (field in ctrl.read_fields(name)), (name, field)


# --- success is what the user names: TRL's format + accuracy recipe ----------------------------

def format_reward(completions, **kwargs):
    """TRL's usual format reward, here one that every completion earns."""
    return [1.0 for _ in completions]


def accuracy(completion_ids, **kwargs):
    """The accuracy reward: 0/1, mixed within groups at random init."""
    return first_token_even(completion_ids)


def _recording_success(base):
    """`base` that also records each step's μ̂ and focal weight per group."""

    class RecordingSuccess(base):
        def _catsim_log(self, mode, advantages, mu_G, g_G):
            self.seen["mu"].append(np.array(mu_G))
            self.seen["g"].append(np.array(g_G))
            return super()._catsim_log(mode, advantages, mu_G, g_G)

    return RecordingSuccess


@pytest.mark.parametrize("rule, gamma", [("grpo", 0.5), ("maxrl", 1.0)])
def test_format_plus_accuracy_reads_success_from_accuracy(tmp_path, rule, gamma):
    """μ̂ = the accuracy's success rate per group (not the sum's, which the format reward keeps at
    >= 1: every group read as solved, weight 0, every advantage zeroed, or a range error at γ > 0)."""
    _, cls = _plain_and_focal()
    trainer = _trainer(_recording_success(cls), tmp_path=tmp_path, reward=[format_reward, accuracy],
                       success_reward_funcs=["accuracy"], advantage_rule=rule, focal_gamma=gamma)
    trainer.train()
    seen = trainer.seen
    assert len(seen["used"]) == len(seen["rewards"]) == len(seen["mu"]) == 2
    failed = 0
    for r_Bx2, a_trl, a_used, mu_G, g_G in zip(seen["rewards"], seen["trl"], seen["used"], seen["mu"], seen["g"]):
        assert torch.equal(r_Bx2[:, 0], torch.ones(len(r_Bx2)))  # the format reward: always earned
        acc_GxN = r_Bx2[:, 1].view(-1, G).numpy()
        want_mu = np.array([float(adv_lib.success_rate(jnp.asarray(r))) for r in acc_GxN])
        np.testing.assert_allclose(mu_G, acc_GxN.mean(axis=1), rtol=1e-6)
        np.testing.assert_allclose(mu_G, want_mu, rtol=1e-6)
        np.testing.assert_allclose(g_G, np.asarray(focal.focal_weight(jnp.asarray(want_mu), gamma)), rtol=1e-6)
        failed += int((mu_G < 1).sum())
        if rule == "grpo":  # TRL's advantages (of the summed reward) × the accuracy's focal weight
            want = a_trl.view(-1, G) * torch.as_tensor(g_G, dtype=a_trl.dtype)[:, None]
            torch.testing.assert_close(a_used.view(-1, G), want, rtol=1e-6, atol=1e-7)
        else:  # the rule on the accuracy, × the focal weight (catsim.objectives on the same rewards)
            options = registry.Options(eps=1e-6, ddof=1)
            for r_N, a_N, g in zip(acc_GxN, a_used.view(-1, G).numpy(), g_G):
                want = g * np.asarray(registry.get(rule).advantages(jnp.asarray(r_N), options))
                np.testing.assert_allclose(a_N, want, rtol=1e-5, atol=1e-7)
    assert failed >= 1 and any(a.abs().sum() > 0 for a in seen["used"])  # F-GRPO acted: not all zeroed
    logged = [h["catsim/success_rate/mean"] for h in trainer.state.log_history if "catsim/success_rate/mean" in h]
    np.testing.assert_allclose(logged, [mu.mean() for mu in seen["mu"]], rtol=1e-5)


def test_several_reward_functions_without_a_success_choice_are_refused(tmp_path):
    """Refused when the trainer is built, before the model is loaded (the model id here does not
    exist, so loading it would fail otherwise), in one line that says what to pass."""
    cls = ctrl.make_trainer()
    for options in ({}, {"success_threshold": 0.5}):
        args = ctrl.FGRPOConfig(output_dir=str(tmp_path), use_cpu=True, num_generations=G, **options)
        with pytest.raises(CatsimError) as e:
            cls(model="no-such-org/no-such-model", reward_funcs=[format_reward, accuracy], args=args)
        shown = str(e.value)
        assert "2 reward functions (format_reward, accuracy) and no success_reward_funcs" in shown, shown
        assert "success_reward_funcs=['accuracy']" in shown and "\n" not in shown


@pytest.mark.parametrize("chosen, shown", [
    (["acc"], "no reward function is named 'acc'; they are format_reward, accuracy (or give an index, 0 to 1)"),
    ([2], "index 2 is out of range for 2 reward function(s) (format_reward, accuracy)"),
    (["accuracy", 1], "names a reward function twice"),
])
def test_success_reward_funcs_must_name_a_reward_function(chosen, shown, tmp_path):
    args = ctrl.FGRPOConfig(output_dir=str(tmp_path), use_cpu=True, success_reward_funcs=chosen)
    with pytest.raises(CatsimError, match="success_reward_funcs") as e:
        ctrl.success_columns(args, ["format_reward", "accuracy"])
    assert shown in str(e.value) and "\n" not in str(e.value)


def test_success_columns_and_thresholds(tmp_path):
    def config(**options):
        return ctrl.FGRPOConfig(output_dir=str(tmp_path), use_cpu=True, **options)

    assert ctrl.success_columns(config(), ["r"]) is None  # one function: its reward level, as before
    assert ctrl.success_columns(trl.GRPOConfig(output_dir=str(tmp_path), use_cpu=True), ["r"]) is None
    assert ctrl.success_columns(config(success_threshold=0.5), ["r"]) == ((0,), 0.5)
    names = ["format_reward", "accuracy", "length"]
    assert ctrl.success_columns(config(success_reward_funcs=["accuracy"]), names) == ((1,), 1.0)
    assert ctrl.success_columns(config(success_reward_funcs=[2, "accuracy"], success_threshold=0), names) == ((2, 1), 0.0)
    assert ctrl.success_columns(config(success_reward_funcs=["2"]), names) == ((2,), 1.0)  # a command line's index
    for bad, shown in ((dict(success_threshold=float("nan")), "success_threshold must be a finite number"),
                       (dict(success_reward_funcs=[]), "success_reward_funcs must be a non-empty list"),
                       (dict(success_reward_funcs=[True]), "is neither a reward function's name nor an index"),
                       (dict(success_reward_funcs=["accuracy"], reward_correct=2.0),
                        "does not read reward_correct = 2.0")):  # success is 0/1: the levels do nothing
        with pytest.raises(CatsimError, match=shown):
            config(**bad)


def test_success_of_a_hand_computed_batch():
    """1 where every success function that scored it reached the threshold; NaN where none scored it."""
    nan = float("nan")
    r_Bx3 = torch.tensor([[1.0, 1.0, 0.2], [0.0, 1.0, 0.9], [nan, 1.0, 0.0], [nan, nan, 1.0], [1.0, 0.5, nan]])
    got = ctrl.success_of(r_Bx3, (0,), 1.0)
    torch.testing.assert_close(got, torch.tensor([1.0, 0.0, nan, nan, 1.0]), equal_nan=True)
    got = ctrl.success_of(r_Bx3, (0, 1), 1.0)
    torch.testing.assert_close(got, torch.tensor([1.0, 0.0, 1.0, nan, 0.0]), equal_nan=True)
    got = ctrl.success_of(r_Bx3, (2,), 0.9)
    torch.testing.assert_close(got, torch.tensor([0.0, 1.0, 0.0, 1.0, nan]), equal_nan=True)


# --- the TRL release: the private methods are checked, never silently assumed ----------------------

def test_a_trl_without_the_overridden_methods_is_refused():
    class Renamed:  # a TRL that renamed the method
        def _generate_and_score_completions(self, inputs):
            pass

    class Reshaped(Renamed):  # a TRL that changed its parameters
        def _calculate_rewards(self, inputs, prompts, completions):
            pass

    with pytest.raises(CatsimError, match=r"GRPOTrainer._calculate_rewards is no such method") as e:
        ctrl.check_trl(Renamed)
    assert "trl>=1.0,<1.17" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(CatsimError, match=r"is \(self, inputs, prompts, completions\), not \(self, inputs, "
                                          r"prompts, completions, completion_ids_list\)"):
        ctrl.check_trl(Reshaped)
    ctrl.check_trl()  # the installed TRL passes
    with pytest.raises(CatsimError, match="base must be trl's GRPOTrainer"):
        ctrl.make_trainer(object)
