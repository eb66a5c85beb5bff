"""One CLI vocabulary (catsim.cli.vocabulary): one visible flag per concept in every parser, one
`--format` with the same choices wherever a table is printed, older spellings as hidden aliases that
still work and print one deprecation line, "did you mean" for a mistyped flag or command, the
f-grpo / f-dapo / f-cispo method names, and a `catsim --help` that names every llm command."""

from __future__ import annotations

import argparse
import json
import pkgutil

import pytest

from catsim.cli import vocabulary
from catsim.cli.main import build_parser, main

PARSER = build_parser()


def _parsers(parser: argparse.ArgumentParser, path: tuple = ()):
    """(command words, parser) of `parser` and of every subcommand below it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


PARSERS = list(_parsers(PARSER))
LEAVES = [(path, p) for path, p in PARSERS if p._subparsers is None and path]

# spellings one concept has had: at most one of each group may be visible, across the whole CLI
SYNONYMS = [
    {"--n", "--group-size", "--group-sizes"},  # group size N
    {"--n", "--samples"},  # samples per prompt of a model being measured
    {"--lr", "--learning-rate", "--eta"},
    {"--progress", "--no-progress", "--quiet"},
    {"--chat", "--chat-template", "--raw"},
    {"--json", "--format"},
    {"--method", "--objective"},
    {"--figures", "--figures-dir"},
    {"--gamma", "--gammas"},
    {"--eval-samples", "--eval-n"},
    {"--rare-samples", "--rare-n"},
    {"--reward-correct", "--rc"},
    {"--reward-wrong", "--rw"},
    {"--adv-eps", "--eps"},
    {"--micro-batch-size", "--micro-batch"},
    {"--max-new-tokens", "--new-tokens"},
]


def _visible(parser: argparse.ArgumentParser) -> dict[str, str]:
    """{option spelling: the first spelling of its option} of the options --help shows."""
    return {s: a.option_strings[0] for a in parser._actions
            if a.option_strings and a.help != argparse.SUPPRESS for s in a.option_strings}


def test_the_walk_sees_every_command():
    import catsim.cli.llm

    llm = {m.name.replace("_", "-") for m in pkgutil.iter_modules(catsim.cli.llm.__path__) if not m.name.startswith("_")}
    assert {path[1] for path, _ in LEAVES if path[0] == "llm"} == llm
    assert {"simulate", "sweep", "lemma", "mass-step"} <= {path[0] for path, _ in LEAVES}


@pytest.mark.parametrize("group", SYNONYMS, ids=lambda g: ",".join(sorted(g)))
def test_one_concept_has_one_visible_spelling(group):
    where: dict[str, list[str]] = {}
    for path, parser in PARSERS:
        for spelling, option in _visible(parser).items():
            if spelling in group:
                where.setdefault(option, []).append(" ".join(path))
    assert len(where) <= 1, f"one concept, several spellings: {where}"


def test_every_format_has_the_same_choices():
    seen = {}
    for path, parser in PARSERS:
        action = parser._option_string_actions.get("--format")
        if action is not None:
            seen[" ".join(path)] = tuple(action.choices)
    assert len(seen) >= 9 and set(seen.values()) == {vocabulary.FORMATS}, seen


def test_progress_and_dual_clip_take_one_form_everywhere():
    forms = {}
    for path, parser in LEAVES:
        for flag in ("--progress", "--dual-clip"):
            action = parser._option_string_actions.get(flag)
            if action is not None and action.help != argparse.SUPPRESS:
                forms.setdefault(flag, {})[" ".join(path)] = (type(action).__name__, action.nargs, action.type)
    assert len(forms["--progress"]) >= 10 and len(set(forms["--progress"].values())) == 1, forms["--progress"]
    assert {"simulate", "sweep", "llm rl"} <= set(forms["--dual-clip"])
    assert len(set(forms["--dual-clip"].values())) == 1, forms["--dual-clip"]


def _dummy(action: argparse.Action) -> list[str]:
    if action.choices:
        return [str(next(iter(action.choices)))]
    return ["2"] if action.nargs in (None, "?") else ["2"]


def _required(parser: argparse.ArgumentParser) -> list[str]:
    """Arguments that satisfy `parser`'s required options and positionals."""
    words = []
    for action in parser._actions:
        if not action.option_strings and not isinstance(action, argparse._SubParsersAction):
            words += _dummy(action)
        elif action.required:
            words += [action.option_strings[0], *_dummy(action)]
    return words


ALIASES = [(path, old, new) for path, parser in LEAVES for old, new in vocabulary.aliases(parser).items()]


def test_the_alias_table_holds_the_agreed_renames():
    table = {(" ".join(path), old): new for path, old, new in ALIASES}
    assert table[("simulate", "--n")] == "--group-size"
    assert table[("llm sample", "--json")] == "--format json"
    assert table[("llm rl", "--learning-rate")] == "--lr"
    assert table[("llm rl", "--quiet")] == "--no-progress"
    assert table[("llm sample", "--chat")] == "--chat-template"
    assert table[("llm maze-study", "--group-sizes")] == "--group-size"


@pytest.mark.parametrize("path,old,new", ALIASES, ids=[f"{' '.join(p)} {o}" for p, o, _ in ALIASES])
def test_an_old_spelling_works_and_says_once_what_to_use(path, old, new, capsys):
    parser = dict(LEAVES)[path]
    takes = parser._option_string_actions[old].nargs != 0
    value = _dummy(parser._option_string_actions[old]) if takes else []
    base = [*path, *_required(parser)]
    with_old = PARSER.parse_args([*base, old, *value])
    err = capsys.readouterr().err
    assert err == f"catsim {' '.join(path)}: {old} is deprecated; use {new}\n"
    with_new = PARSER.parse_args([*base, *new.split(), *value])
    assert capsys.readouterr().err == ""
    assert vars(with_old) == vars(with_new)


def test_an_old_format_value_is_read_as_table_with_one_line(capsys):
    args = PARSER.parse_args(["llm", "sft", "--task", "maze", "--out", "o", "--format", "text"])
    assert args.format == "table"
    assert capsys.readouterr().err == "catsim llm sft: --format text is deprecated; use --format table\n"


def test_old_spellings_still_run_a_command(capsys):
    argv = ["simulate", "--num-actions", "64", "--num-correct", "8", "--steps", "2", "--format", "json"]
    assert main([*argv, "--n", "4", "--objective", "reinforce", "--learning-rate", "0.1"]) == 0
    old = capsys.readouterr()
    assert main([*argv, "--group-size", "4", "--method", "reinforce", "--lr", "0.1"]) == 0
    new = capsys.readouterr()
    assert old.out == new.out and new.err == ""
    assert old.err.splitlines() == ["catsim simulate: --n is deprecated; use --group-size",
                                    "catsim simulate: --objective is deprecated; use --method",
                                    "catsim simulate: --learning-rate is deprecated; use --lr"]


@pytest.mark.parametrize("argv,hint", [
    (["simulate", "--grop-size", "4"], "did you mean --group-size?"),
    (["simulate", "--learnig-rate", "0.1"], "did you mean --lr?"),  # an old spelling suggests the new one
    (["simulat"], "did you mean simulate?"),
    (["llm", "sampel"], "did you mean sample?"),
    (["llm", "rl", "--base", "b", "--out", "o", "--grup-size", "4"], "did you mean --group-size?"),
    (["simulate", "--method", "fgrpo"], "did you mean f-grpo?"),
])
def test_a_mistyped_flag_or_command_gets_the_closest_one(argv, hint, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.endswith(f"; {hint}\n") and err.count("\n") == 1, err


def test_catsim_help_names_every_llm_command(capsys):
    import catsim.cli.llm

    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for module in pkgutil.iter_modules(catsim.cli.llm.__path__):
        if not module.name.startswith("_"):
            assert module.name.replace("_", "-") in text.split("llm JAX transformer trainer:")[1], module.name


def test_every_command_summary_says_what_it_does():
    for path, _parser in PARSERS[1:]:
        action = next(a for a in dict(PARSERS)[path[:-1]]._actions if isinstance(a, argparse._SubParsersAction))
        summary = next(c.help for c in action._choices_actions if c.dest == path[-1])
        assert summary and len(summary.split()) >= 4, (path, summary)


SIM = ["simulate", "--num-actions", "64", "--num-correct", "8", "--steps", "2", "--group-size", "4",
       "--ppo-epochs", "2", "--format", "json"]


def _records(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.parametrize("name", ["f-grpo", "f-dapo", "f-cispo"])
def test_simulate_runs_a_focal_method_as_its_base_rule_with_the_focal_weight(name, capsys):
    base = name[2:]
    assert main([*SIM, "--method", name]) == 0
    named = _records(capsys)
    assert main([*SIM, "--method", base, "--gamma", "0.5"]) == 0
    assert named == _records(capsys)  # the same run, recorded at the γ that acted
    assert [r["gamma"] for r in named] == [0.5] and base in named[0]["method"]
    assert main([*SIM, "--method", name, "--gamma", "1,2"]) == 0
    assert [r["gamma"] for r in _records(capsys)] == [1.0, 2.0]


@pytest.mark.parametrize("argv", [
    [*SIM, "--method", "f-grpo", "--gamma", "0"],
    [*SIM, "--method", "f-dapo", "--gamma", "0,1"],
    ["llm", "rl", "--base", "no-such-base", "--out", "o", "--method", "f-cispo", "--gamma", "0"],
])
def test_a_focal_method_at_gamma_zero_is_refused_in_one_line(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the focal weight (1 − μ̂)^γ would never act" in err and err.count("\n") == 1, err
    assert not (tmp_path / "o").exists()


def test_sweep_methods_study_refuses_a_focal_method(capsys):
    assert main(["sweep", "--study", "methods", "--method", "f-grpo", "--group-size", "2", "--seeds", "1"]) == 2
    assert "--method f-grpo" in capsys.readouterr().err


@pytest.mark.parametrize("name,label", [("f-grpo", "F-GRPO γ=0.5"), ("f-dapo", "F-DAPO γ=1"),
                                        ("f-cispo", "F-CISPO γ=0.5")])
def test_llm_rl_reads_a_focal_method_as_its_base_method_with_the_focal_weight(name, label):
    from catsim.cli.llm.rl import rl_config_from_args

    gamma = ["--gamma", "1"] if name == "f-dapo" else []
    cfg = rl_config_from_args(PARSER.parse_args(["llm", "rl", "--base", "b", "--out", "o", "--method", name, *gamma]))
    assert cfg.method == name[2:] and cfg.label().startswith(label)


def test_llm_rl_dual_clip_takes_the_simulators_form():
    from catsim.cli.llm.rl import rl_config_from_args

    def cfg(*flags):
        return rl_config_from_args(PARSER.parse_args(["llm", "rl", "--base", "b", "--out", "o", *flags]))

    assert cfg("--dual-clip").use("dual_clip") and cfg("--dual-clip").optimizer.grad_clip == 1.0
    assert cfg("--dual-clip", "0.5").use("dual_clip") and cfg("--dual-clip", "0.5").optimizer.grad_clip == 0.5
    assert not cfg("--method", "asym-grpo", "--no-dual-clip").use("dual_clip")


def test_llm_rl_trains_f_grpo_and_records_what_acted(tmp_path, capsys):
    from llm_rl_helpers import make_paths_base

    base = make_paths_base(tmp_path / "base")
    out = tmp_path / "run"
    assert main(["llm", "rl", "--base", str(base), "--out", str(out), "--method", "f-grpo", "--steps", "1",
                 "--group-size", "4", "--prompts-per-step", "1", "--max-new-tokens", "4", "--no-progress"]) == 0
    assert "F-GRPO γ=0.5 N=4" in capsys.readouterr().out
    saved = json.loads((out / "rl_config.json").read_text())["rl"]
    assert saved["method"] == "grpo" and saved["gamma"]["gamma"] == 0.5


def test_a_markdown_table_reads_as_records():
    lines = ["| method | N | pass@1 |", "|---|---|---|", "| GRPO | 8 | 61.2 ± 1.0 |", "| F-GRPO γ=0.5 | 8 | 70.0 |"]
    assert vocabulary.markdown_records(lines) == [{"method": "GRPO", "N": "8", "pass@1": "61.2 ± 1.0"},
                                                  {"method": "F-GRPO γ=0.5", "N": "8", "pass@1": "70.0"}]


def test_maze_study_refuses_a_format_its_mode_does_not_print(tmp_path, capsys):
    assert main(["llm", "maze-study", "--out", str(tmp_path), "--report", str(tmp_path / "r"), "--format", "csv"]) == 2
    err = capsys.readouterr().err
    assert "--format csv reads the study's table, which --report does not print" in err and err.count("\n") == 1


def test_a_pipeline_f_run_at_gamma_zero_is_refused_before_any_work(tmp_path, capsys):
    assert main(["llm", "pipeline", "--out", str(tmp_path / "p"), "--quick", "--runs", "f-grpo:2", "--gamma", "0"]) == 2
    assert "would never act" in capsys.readouterr().err
    assert not any((tmp_path / "p").glob("*/base"))  # no warm-up was trained
