"""Local math-file task: loading, splits, exact-match and math-verify rewards, missing extras."""

from __future__ import annotations

import json
import sys
import threading
import time

import pytest

from catsim.errors import CatsimError
from catsim.llm.tasks import make_task
from catsim.llm.tasks.math_file import final_answer, normalise_answer


@pytest.fixture
def math_file(tmp_path):
    path = tmp_path / "math.jsonl"
    rows = [{"question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(30)]
    rows.append({"question": "What is 3/4 as a decimal?", "answer": "\\frac{3}{4}"})
    rows.append({"question": "What is 0 + 0?", "answer": "0"})  # a duplicate question
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    return path


def test_load_and_split(math_file):
    task = make_task("math", path=str(math_file), checker="exact", heldout_fraction=0.2)
    train = list(task.prompts("train", 0))
    held = list(task.prompts("heldout", 0))
    assert len(train) + len(held) == 32
    assert {p.text for p in train}.isdisjoint({p.text for p in held})
    assert len({p.text for p in held}) == 6  # 20% of 31 distinct questions
    dup = [p for p in train + held if p.text == "What is 0 + 0?"]
    assert len(dup) == 2 and dup[0].split == dup[1].split  # duplicates stay on one side
    assert [p.text for p in held] == [p.text for p in task.prompts("heldout", 0)]
    assert [p.text for p in held] != [p.text for p in task.prompts("heldout", 1)]
    assert task.correct_answers(held[0]) is None


def test_prompt_template(math_file):
    task = make_task("math", path=str(math_file), checker="exact", prompt_template="Q: {question}\nA:")
    assert task.prompt("train", 0, 0).text.startswith("Q: What is")


def test_exact_checker(math_file):
    task = make_task("math", path=str(math_file), checker="exact", heldout_fraction=0.0)
    p = next(p for p in task.prompts("train", 0) if p.answers == ("14",))
    assert task.reward(p, "7 + 7 makes \\boxed{14}.") == 1.0
    assert task.reward(p, "so the answer is\n 14 .\n") == 1.0
    assert task.reward(p, "\\boxed{14} no wait \\boxed{15}") == 0.0
    assert task.reward(p, "\\boxed{7+7}") == 0.0  # strings, never evaluated
    assert final_answer("x \\boxed{\\frac{1}{2}} y") == "\\frac{1}{2}"
    assert normalise_answer(" $ 1 2 $.") == "12"


def test_math_verify_checker(math_file):
    task = make_task("math", path=str(math_file), heldout_fraction=0.0)
    frac = next(p for p in task.prompts("train", 0) if p.answers == ("\\frac{3}{4}",))
    assert task.reward(frac, "It is \\boxed{0.75}") == 1.0
    assert task.reward(frac, "It is $\\frac{6}{8}$") == 1.0
    assert task.reward(frac, "It is \\boxed{0.8}") == 0.0
    p14 = next(p for p in task.prompts("train", 0) if p.answers == ("14",))
    assert task.reward(p14, "The final answer is 14") == 1.0


def test_missing_math_verify_is_a_clear_error(math_file, monkeypatch):
    monkeypatch.setitem(sys.modules, "math_verify", None)  # makes `import math_verify` fail
    with pytest.raises(CatsimError, match=r"catsim\[math\]"):
        make_task("math", path=str(math_file))
    make_task("math", path=str(math_file), checker="exact")  # the fallback needs nothing


def test_parquet(tmp_path):
    import pandas as pd

    path = tmp_path / "m.parquet"
    try:
        pd.DataFrame({"problem": ["1+1?"], "solution": ["2"]}).to_parquet(path)
    except ImportError:  # no parquet engine: reading must then fail with a one-line CatsimError
        path.write_bytes(b"PAR1")
        with pytest.raises(CatsimError, match="pyarrow"):
            list(make_task("math", path=str(path), checker="exact").prompts("train", 0))
        return
    task = make_task("math", path=str(path), checker="exact", question_field="problem",
                     answer_field="solution", heldout_fraction=0.0)
    assert [p.answers for p in task.prompts("train", 0)] == [("2",)]


@pytest.mark.parametrize(
    "content, match",
    [("{not json", "not valid JSON"), ('{"question": "q"}', "lacks field"), ("[1, 2]", "JSON object"), ("", "no records")],
)
def test_bad_files(tmp_path, content, match):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(CatsimError, match=match):
        list(make_task("math", path=str(path), checker="exact").prompts("train", 0))


def test_missing_file_and_bad_options(tmp_path):
    with pytest.raises(CatsimError, match="not found"):
        list(make_task("math", path=str(tmp_path / "nope.jsonl"), checker="exact").prompts("train", 0))
    with pytest.raises(CatsimError):
        make_task("math")  # path is required
    with pytest.raises(CatsimError):
        make_task("math", path="x.jsonl", checker="eval")
    with pytest.raises(CatsimError):
        make_task("math", path="x.jsonl", prompt_template="no placeholder")


def test_math_verify_time_is_bounded(math_file):
    """Hostile completions score 0 and cost at most the worker's hard deadline (3·1 + 2 s here)
    plus, after a kill, one worker restart (slack for a busy CPU); the worker keeps serving."""
    task = make_task("math", path=str(math_file), heldout_fraction=0.0, timeout_seconds=1)
    p = task.prompt("train", 0, 0)
    assert task.reward(p, "\\boxed{" + task.reference(p) + "}") == 1.0  # starts the worker
    for evil in ["\\boxed{9^{9^{9^{9^{9}}}}}", "\\boxed{" + "(" * 2000 + "1" + ")" * 2000 + "}",
                 "$" + "\\frac{1}{" * 300 + "2" + "}" * 300 + "$"]:
        t0 = time.perf_counter()
        assert task.reward(p, evil) == 0.0
        assert time.perf_counter() - t0 < 5.0 + 30.0
    assert task.reward(p, "\\boxed{" + task.reference(p) + "}") == 1.0


def test_math_verify_runs_off_the_main_thread(math_file):
    """Rewards computed from a worker thread get the same verdicts (no signal-based limit needed)."""
    task = make_task("math", path=str(math_file), heldout_fraction=0.0, timeout_seconds=2)
    p = task.prompt("train", 0, 0)
    out = []
    t = threading.Thread(target=lambda: out.extend(
        task.reward(p, c) for c in ["\\boxed{" + task.reference(p) + "}", "\\boxed{-12345}"]))
    t.start()
    t.join(120)
    assert out == [1.0, 0.0]
