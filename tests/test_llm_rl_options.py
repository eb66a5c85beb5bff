"""Each trainer option is described once, on its field (`options.option`): FLAT, the CLI and
`from_flat` come from the field metadata; the advantage program sees only its own settings."""

import dataclasses

import numpy as np

from catsim.cli.main import build_parser
from catsim.llm.rl import config as C
from catsim.llm.rl.step import AdvantageSettings, _advantages, compute_advantages


def test_flat_is_built_from_the_fields():
    own = {None: C.RLConfig, "objective": C.ObjectiveConfig, "rare": C.RareConfig, "optimizer": C.OptimizerConfig,
           "rollout": C.RolloutConfig, "run": C.RunConfig, "components": C.AsymComponents}
    described = {(s, f.name) for s, cls in own.items() for f in dataclasses.fields(cls) if "help" in f.metadata}
    in_flat = {(s, field) for s, field, _ in C.FLAT.values() if s in own}
    assert described == in_flat
    for name, (section, field, text) in C.FLAT.items():
        holder = C.RLConfig() if section is None else getattr(C.RLConfig(), section)
        assert hasattr(holder, field) and text, name
        if section in own:
            meta = {f.name: f.metadata for f in dataclasses.fields(own[section])}[field]
            assert meta["help"] == text and (meta["flag"] or field) == name
    # the shared dataclasses' options keep their own table, and only those
    assert {s for s, _, _ in C.SHARED_OPTIONS.values()} == {"gamma", "asym"}
    assert C.RLConfig.from_flat(w_reinforce_lambda=0.3).rare.w_reinforce_lambda == 0.3
    flags = {a.dest for a in _sub(build_parser(["llm", "rl"]), "rl")._actions}
    assert set(C.FLAT) <= flags


def _sub(parser, name):
    for action in parser._actions:
        if isinstance(getattr(action, "choices", None), dict):
            for key, sub in action.choices.items():
                if key == name:
                    return sub
                found = _sub(sub, name)
                if found is not None:
                    return found
    return None


def test_the_advantage_program_compiles_once_for_settings_it_does_not_read():
    scores = np.array([[1, 0, 0, 0], [1, 1, 0, 0]], np.float32)
    base = C.RLConfig.from_flat(group_size=4)
    others = [base.replace(learning_rate=3e-4), base.replace(kl_coef=0.1), base.replace(steps=7, seed=3)]
    assert all(AdvantageSettings.of(c) == AdvantageSettings.of(base) for c in others)
    compute_advantages(scores, base, 0.5)
    before = _advantages._cache_size()
    for cfg in others:
        compute_advantages(scores, cfg, 0.5)
    assert _advantages._cache_size() == before
    assert AdvantageSettings.of(base.replace(advantage="maxrl")) != AdvantageSettings.of(base)
