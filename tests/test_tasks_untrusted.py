"""Verifiers treat model output as untrusted text: malformed, huge, unicode and injection-like
completions score 0 quickly and execute nothing."""

from __future__ import annotations

import json
import time

import pytest

from catsim.llm.tasks import make_task

EVIL = [
    "",
    "   \n\t ",
    "__import__('os').system('touch {canary}')",
    "exec(\"open('{canary}', 'w').write('x')\")",
    "eval('1')",
    "${{__import__('os').system('touch {canary}')}}",
    "\\boxed{{__import__('os').system('touch {canary}')}}",
    "\x00\x00UDLR\x00",
    "ＵＤＬＲ",  # full-width letters
    "U\u0301D\u0301",  # combining accents
    "\u202eRLDU",  # right-to-left override
    "\ud800",  # lone surrogate
    "UDLR" * 5 + "\n" + "G" * 10,
    "{{}}{{}}\\boxed{{" * 100,
    "\\boxed{{" * 5000,
    "1" * 100_000,
    "U" * 10_000_000,
    "R" * 100 + "é" * 100,
]
NOT_TEXT = [None, b"UDLR", 123, ["U", "D"], object()]


@pytest.fixture(params=["maze", "paths", "math-exact", "math-verify"])
def task_and_prompt(request, tmp_path):
    name = request.param
    if name.startswith("math"):
        path = tmp_path / "m.jsonl"
        path.write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\n")
        task = make_task("math", path=str(path), checker="exact" if name == "math-exact" else "math-verify",
                         heldout_fraction=0.0, max_completion_chars=50_000)
    else:
        task = make_task(name, n_heldout=2)
    return task, task.prompt("train", 0, 0)


@pytest.mark.parametrize("template", EVIL)
def test_malicious_completions_score_zero_and_run_nothing(task_and_prompt, template, tmp_path):
    task, prompt = task_and_prompt
    canary = tmp_path / "canary"
    text = template.format(canary=canary) if "{" in template and len(template) < 1000 else template
    t0 = time.perf_counter()
    assert task.reward(prompt, text) == 0.0
    assert time.perf_counter() - t0 < 6.0
    assert not canary.exists()


@pytest.mark.parametrize("value", NOT_TEXT)
def test_non_text_completions_score_zero(task_and_prompt, value):
    task, prompt = task_and_prompt
    assert task.reward(prompt, value) == 0.0


def test_huge_strings_are_rejected_before_parsing():
    task = make_task("maze", size=9, n_heldout=2)
    prompt = task.prompt("train", 0, 0)
    huge = prompt.answers[0] + " " * 10 + "U" * 50_000_000
    t0 = time.perf_counter()
    assert task.reward(prompt, huge) == 0.0
    assert time.perf_counter() - t0 < 0.01  # length check first: O(1), no scan of the string


def test_every_task_follows_the_protocol(task_and_prompt):
    from catsim.llm.tasks import Task

    task, prompt = task_and_prompt
    assert isinstance(task, Task)
    assert task.reward(prompt, task.reference(prompt)) == 1.0
    answers = task.correct_answers(prompt)
    assert answers is None or task.reference(prompt) in answers
    with pytest.raises(Exception):  # noqa: B017 - frozen configs cannot be mutated
        task.config.n_heldout = 3  # type: ignore[misc]
