"""`catsim llm plan`: the memory of the real RL step from its compiled program, checked against
the published Qwen2.5-7B parameter count, against the arrays a real update allocates, and per device
over an 8-device mesh."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

from catsim.cli.main import main
from catsim.llm.model.config import ModelConfig
from catsim.llm.plan import abstract_params, plan_rl_step, read_model_config
from catsim.llm.rl import RLConfig

# Qwen2.5-7B's config.json, the values published with the model (written here, not downloaded)
QWEN25_7B = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
    "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
    "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "bos_token_id": 151643, "eos_token_id": 151643,
    "use_sliding_window": False, "sliding_window": 131072, "max_window_layers": 28, "hidden_act": "silu",
}


def qwen2_param_count(hf: dict) -> int:
    """Parameters of a Qwen2 model from its config.json: embeddings (+ untied head), per layer q/k/v
    with bias, o without, SwiGLU gate/up/down, two RMSNorms; the final norm."""
    d, f, v = hf["hidden_size"], hf["intermediate_size"], hf["vocab_size"]
    head = d // hf["num_attention_heads"]
    kv = hf["num_key_value_heads"] * head
    attention = (d * d + d) + 2 * (d * kv + kv) + d * d
    layer = attention + 3 * d * f + 2 * d
    return v * d * (1 if hf["tie_word_embeddings"] else 2) + hf["num_hidden_layers"] * layer + d


def test_the_plan_counts_qwen25_7b_exactly(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(QWEN25_7B))
    assert qwen2_param_count(QWEN25_7B) == 7_615_616_512
    code = main(["llm", "plan", "--model", str(tmp_path / "config.json"), "--batch", "1", "--seq", "8",
                 "--dtype", "bfloat16", "--format", "json", "--rollout", "64x8", "--max-new-tokens", "4096"])
    assert code == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["params"] == 7_615_616_512
    # the rollout's KV cache, by hand: 2 (k, v) x 28 layers x 4 KV heads x 128 x 2 bytes per token;
    # the static engine holds 512 rows x (512 + 4096) tokens, the cascade one 64 x 512 + 512 x 4096
    per_token = 2 * 28 * 4 * 128 * 2
    assert plan["rollout_kv_static_bytes_per_device"] == per_token * 512 * 4608
    assert plan["rollout_kv_bytes_per_device"] == per_token * (64 * 512 + 512 * 4096)
    # mixed precision: float32 master weights, bfloat16 compute
    assert plan["param_bytes"] == 4 * 7_615_616_512 and plan["param_dtype"] == "float32"
    assert plan["compute_dtype"] == "bfloat16"
    assert plan["optimizer_bytes"] >= plan["param_bytes"] * 2  # Adam: two moments per parameter


def _tiny(tmp_path) -> Path:
    from llm_rl_helpers import make_base_model

    make_base_model(tmp_path / "base")
    return tmp_path / "base"


def _live_now() -> list:
    """The live arrays, after collecting garbage. Keep the list while comparing: it holds the
    arrays, so their ids cannot be reused by new arrays (leftovers of earlier tests in the same
    process, collected mid-test, once gave a new array an old id and hid its bytes)."""
    gc.collect()
    return jax.live_arrays()


def _new_bytes(before: list) -> int:
    old = {id(x) for x in before}
    return sum(x.nbytes for x in jax.live_arrays() if id(x) not in old)


def test_the_plan_matches_a_real_update_of_a_tiny_model(tmp_path):
    from catsim.llm.model.checkpoint import load_model
    from catsim.llm.rl.step import make_functions

    base = _tiny(tmp_path)
    batch, seq = 4, 12
    cfg = RLConfig.from_flat(prompts_per_step=batch, group_size=1, micro_batch_size=2, adv_std="population")
    model_cfg = read_model_config(base)
    plan = plan_rl_step(model_cfg, cfg, seq=seq)

    before = _live_now()
    _, params = load_model(base)
    fns = make_functions(model_cfg, cfg)
    opt_state = fns.optimizer.init(params)
    param_bytes = sum(x.nbytes for x in jax.tree.leaves(params))
    assert plan.params == model_cfg.num_params
    assert plan.param_bytes == param_bytes == plan.param_bytes_per_device
    assert plan.optimizer_bytes == sum(np.asarray(x).nbytes for x in jax.tree.leaves(opt_state))

    rng = np.random.default_rng(0)
    tokens = rng.integers(0, model_cfg.vocab_size, (batch, seq)).astype(np.int32)
    real = np.ones((batch, seq), bool)
    old_logp = fns.logp(params, tokens, real)[0]
    data = {"tokens": tokens, "real": real, "loss_mask": np.ones((batch, seq - 1), np.float32),
            "adv": rng.normal(size=(batch, seq - 1)).astype(np.float32), "old_logp": old_logp}
    if plan.reference:
        data["ref_logp"] = old_logp + 0.0  # its own buffer, as the reference pass gives
    data = jax.tree.map(jax.numpy.asarray, data)
    # the same program: the real arguments compile to the plan's temporaries
    compiled = fns.update.lower(params, opt_state, data).compile()
    assert compiled.memory_analysis().temp_size_in_bytes == plan.update_temp_bytes
    del old_logp
    out = fns.update(params, opt_state, data)
    jax.block_until_ready(out)
    # live now: what the update read (unless donated) and what it wrote = the plan's peak less the
    # temporaries (freed when it returned) and the reference (not held in this test); XLA's output
    # size also counts the output tuple's table, one 8-byte pointer per output array
    measured = _new_bytes(before)
    expected = plan.update_peak_bytes - plan.update_temp_bytes - plan.reference_bytes_per_device
    assert 0 <= expected - measured <= 8 * len(jax.tree.leaves(out)), (expected, measured)
    assert plan.xla_temp_bytes > 0 and plan.per_device_bytes >= measured


MESH_CHILD = textwrap.dedent("""
    import json, sys
    import jax
    from catsim.llm.model.checkpoint import load_model
    from catsim.llm.model.sharding import place_on_mesh, shard_params
    from catsim.llm.rl.step import make_functions
    from catsim.llm.plan import parse_mesh, plan_rl_step, read_model_config
    from catsim.llm.rl import RLConfig

    base = sys.argv[1]
    cfg = RLConfig.from_flat(prompts_per_step=8, group_size=1, adv_std="population")
    model_cfg = read_model_config(base)
    mesh = parse_mesh("1x8")
    one = plan_rl_step(model_cfg, cfg, seq=16)
    eight = plan_rl_step(model_cfg, cfg, seq=16, mesh=mesh)
    _, params = load_model(base)
    sharded = shard_params(params, model_cfg, mesh)
    opt_state = place_on_mesh(make_functions(model_cfg, cfg).optimizer.init(sharded), mesh)  # as the run
    device0 = jax.devices()[0]

    def on_device0(tree):
        return sum(s.data.nbytes for x in jax.tree.leaves(tree) for s in x.addressable_shards
                   if s.device == device0)

    print(json.dumps({"one": one.to_dict(), "eight": eight.to_dict(), "params": on_device0(sharded),
                      "opt": on_device0(opt_state)}))
""")


def test_a_plan_over_eight_devices_reports_per_device_bytes(tmp_path):
    base = _tiny(tmp_path)
    flags = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", MESH_CHILD, str(base)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    one, eight = result["one"], result["eight"]
    assert eight["devices"] == 8 and eight["mesh"] == "1x8" and one["devices"] == 1
    assert eight["params"] == one["params"] and eight["param_bytes"] == one["param_bytes"]
    # the shards a real placement holds on one device
    assert eight["param_bytes_per_device"] == result["params"]
    assert eight["optimizer_bytes_per_device"] == result["opt"]
    assert eight["param_bytes_per_device"] < one["param_bytes_per_device"] / 2
    assert eight["optimizer_bytes_per_device"] < one["optimizer_bytes_per_device"] / 2
    assert eight["batch_bytes_per_device"] * 8 == one["batch_bytes_per_device"]
    assert eight["per_device_bytes"] < one["per_device_bytes"]


@pytest.mark.parametrize("extra, message", [
    (["--batch", "0"], "--batch must be at least 1"),
    (["--seq", "1"], "--seq must be at least 2"),
    (["--micro-batch-size", "3"], "must divide --batch"),
    (["--mesh", "two"], "--mesh must be none or DATAxFSDP"),
    (["--mesh", "1x64"], "needs 64 devices"),
    (["--device-memory", "-1"], "--device-memory must be positive"),
    (["--device-memory", "inf"], "--device-memory must be positive and finite"),  # was a traceback
    (["--rollout", "64"], "--rollout must be PROMPTSxSAMPLES"),
    (["--rollout", "4x8", "--prompt-len", "8"], "rollout lengths must be positive"),
    (["--prompt-len", "16"], "--prompt-len: read only with --rollout"),  # were ignored without it
    (["--prompt-len", "16", "--max-new-tokens", "4"], "--prompt-len, --max-new-tokens: read only with --rollout"),
])
def test_bad_input_is_one_line(tmp_path, capsys, extra, message):
    (tmp_path / "config.json").write_text(json.dumps(QWEN25_7B))
    args = ["llm", "plan", "--model", str(tmp_path), "--batch", "4", "--seq", "8", *extra]
    args = args[:3] + args[3:]  # later flags override the defaults above
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


def test_a_missing_or_unsupported_config_is_one_line(tmp_path, capsys):
    assert main(["llm", "plan", "--model", str(tmp_path), "--batch", "1", "--seq", "8"]) == 2
    assert "no config.json" in capsys.readouterr().err
    (tmp_path / "config.json").write_text(json.dumps({**QWEN25_7B, "architectures": ["GPT2LMHeadModel"]}))
    assert main(["llm", "plan", "--model", str(tmp_path), "--batch", "1", "--seq", "8"]) == 2
    assert "GPT2LMHeadModel" in capsys.readouterr().err


def test_abstract_params_allocate_nothing():
    cfg = ModelConfig.from_hf_dict(QWEN25_7B)
    before = len(jax.live_arrays())
    shapes = abstract_params(cfg)
    assert len(jax.live_arrays()) == before
    assert sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes)) == cfg.num_params
