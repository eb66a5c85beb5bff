"""Tiny models and a toy task for the RL / evaluation tests (hidden 32, 2 layers, short sequences)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

import jax
import numpy as np

from catsim.llm.model.checkpoint import save_model
from catsim.llm.model.config import ModelConfig
from catsim.llm.model.tokenizer import Tokenizer
from catsim.llm.model.transformer import init_params
from catsim.llm.tasks.base import Prompt, check_split
from catsim.llm.tasks.char_tokenizer import (
    BOS,
    BOS_ID,
    EOS,
    EOS_ID,
    PAD,
    PAD_ID,
    build_char_tokenizer,
)


@dataclass(frozen=True)
class ToyConfig:
    n_train: int = 64  # train prompts
    n_heldout: int = 8  # held-out prompts


@dataclass(frozen=True)
class ToyTask:
    """Prompts are 3 letters over "UD"; a completion scores 1 when it starts with the prompt's first
    letter, else 0 — a random tiny model solves about a quarter of its samples, so groups mix."""

    config: ToyConfig = ToyConfig()
    name: ClassVar[str] = "toy"

    @property
    def alphabet(self) -> str:
        return "UD>"

    def num_prompts(self, split: str) -> int:
        check_split(split)
        return self.config.n_train if split == "train" else self.config.n_heldout

    def prompt(self, split: str, seed: int, index: int) -> Prompt:
        rng = np.random.default_rng([seed, check_split(split), index])
        text = "".join(rng.choice(list("UD"), size=3)) + ">"
        return Prompt("toy", split, index, text, (text[0],))

    def prompts(self, split, seed=0):
        for i in range(self.num_prompts(split)):
            yield self.prompt(split, seed, i)

    def reference(self, prompt):
        return prompt.answers[0]

    def correct_answers(self, prompt):
        return prompt.answers

    def reward(self, prompt, completion_text):
        return 1.0 if completion_text[:1] == prompt.text[0] else 0.0

    def sft_target(self, prompt, rng):
        return prompt.answers[0]


def char_tokenizer(alphabet: str) -> Tokenizer:
    return Tokenizer(backend=build_char_tokenizer(alphabet), bos_token=BOS, eos_token=EOS, pad_token=PAD,
                     add_bos_token=True)


def tiny_config(vocab_size: int) -> ModelConfig:
    return ModelConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2,
                       num_kv_heads=2, head_dim=16, max_position_embeddings=256, bos_token_id=BOS_ID,
                       eos_token_ids=(EOS_ID,), pad_token_id=PAD_ID)


def make_base_model(directory, alphabet: str = "UD>", seed: int = 0, task_spec: dict | None = None,
                    init_std: float = 0.5):
    """A random tiny model dir (config, weights, tokenizer, optional catsim_task.json)."""
    tok = char_tokenizer(alphabet)
    cfg = tiny_config(tok.vocab_size)
    params = init_params(cfg, jax.random.key(seed), init_std=init_std)
    save_model(directory, cfg, params, tok)
    if task_spec is not None:
        (directory / "catsim_task.json").write_text(json.dumps(task_spec))
    return directory


def make_paths_base(directory):
    """A random tiny model on the quick pipeline's `paths` task (catsim_task.json included): a base
    that `catsim llm rl --base` and `catsim llm advise --model` take without --task."""
    from catsim.experiments.llm_pipeline import PipelineConfig
    from catsim.llm.tasks import make_task

    options = dict(PipelineConfig.quick().tasks[0].options)
    return make_base_model(directory, alphabet=make_task("paths", **options).alphabet,
                           task_spec={"task": "paths", "config": options}, init_std=0.1)
