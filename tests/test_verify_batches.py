"""Batch verification on a pool of killable workers: a time budget per batch, dead and bloated
workers replaced, unverified completions counted (catsim.llm.tasks.isolated.IsolatedPool and
MathFileTask.rewards)."""

from __future__ import annotations

import json
import os
import textwrap
import time

import pytest

from catsim.errors import CatsimError
from catsim.llm.tasks import make_task, math_file
from catsim.llm.tasks.base import score_batch, take_unscored
from catsim.llm.tasks.isolated import (
    TIMED_OUT,
    UNSCORED,
    IsolatedError,
    IsolatedFunction,
    IsolatedPool,
)

# Start-up of a worker process, a kill and its reap, on a CPU shared with other jobs.
SLACK = 20.0

FAKE_VERIFIER = textwrap.dedent('''
    """A stand-in for math-verify whose cost is chosen by the completion text."""
    import os
    import time

    HELD = []

    def check(gold, text, timeout):
        if text == "sleep":
            time.sleep(600)
        if text == "loop":
            while True:
                pass
        if text == "die":
            os._exit(3)
        return text == "yes"

    def hog(megabytes):
        HELD.append(b"\x01" * (megabytes << 20))  # written, so resident
        return len(HELD)

    def pid():
        return os.getpid()
''')


@pytest.fixture
def fake_verifier(tmp_path, monkeypatch):
    """Workers import `fake_verifier` from tmp_path; math tasks get fresh pools that run its `check`."""
    (tmp_path / "fake_verifier.py").write_text(FAKE_VERIFIER, encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setattr(math_file, "MATH_VERIFY_TARGET", "fake_verifier:check")
    monkeypatch.setattr(math_file, "_POOLS", {})
    yield
    for pool in math_file._POOLS.values():
        pool.close()


@pytest.fixture
def math_task(tmp_path):
    path = tmp_path / "math.jsonl"
    rows = [{"question": f"q{i}", "answer": str(i)} for i in range(4)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")

    def make(**options):
        return make_task("math", path=str(path), heldout_fraction=0.0, **options)

    return make


def test_a_hostile_batch_ends_within_its_budget_and_is_counted(fake_verifier, math_task):
    task = math_task(timeout_seconds=1, batch_budget_seconds=3.0, verify_workers=2)
    p = task.prompt("train", 0, 0)
    hostile = ["sleep", "loop"] * 10
    t0 = time.perf_counter()
    scores = task.rewards([p] * len(hostile), hostile)
    elapsed = time.perf_counter() - t0
    assert scores == [0.0] * len(hostile)
    assert elapsed < 3.0 + SLACK  # one budget, not 20 × the 5 s per-check deadline
    assert task.take_unscored() == len(hostile)  # none finished: every one is counted
    assert task.take_unscored() == 0  # and the count was reset
    # the workers cut off at the budget are replaced: the next batch is scored normally
    assert task.rewards([p, p, p], ["yes", "no", "yes"]) == [1.0, 0.0, 1.0]
    assert take_unscored(task) == 0


def test_a_check_past_its_deadline_scores_zero_and_its_worker_is_replaced(fake_verifier, math_task):
    task = math_task(timeout_seconds=1, batch_budget_seconds=60.0, verify_workers=2)
    p = task.prompt("train", 0, 0)
    texts = ["loop", "yes", "no", "die", "yes", "yes", "no"]
    t0 = time.perf_counter()
    assert task.rewards([p] * len(texts), texts) == [0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    assert time.perf_counter() - t0 < 5.0 + SLACK  # the loop costs its deadline (3·1 + 2 s), once
    assert task.take_unscored() == 0  # the budget was enough for every check
    pool = next(iter(math_file._POOLS.values()))
    assert pool.kills == 2  # the looping worker (deadline) and the one that died
    assert task.rewards([p], ["yes"]) == [1.0]


def test_exact_matches_are_scored_in_process(fake_verifier, math_task):
    """A completion whose final answer equals the reference never reaches a worker: with every
    check forced to hang, it still scores 1 at once."""
    task = math_task(timeout_seconds=1, batch_budget_seconds=1.0)
    p = task.prompt("train", 0, 0)
    ref = task.reference(p)
    assert task.rewards([p, p], [f"so \\boxed{{{ref}}}", "sleep"]) == [1.0, 0.0]
    assert task.take_unscored() == 1
    assert task.rewards([p, p], [None, "x" * 10**6]) == [0.0, 0.0]  # rejected before any worker
    assert task.take_unscored() == 0


def test_math_verify_batches_score_like_single_calls(math_task):
    pytest.importorskip("math_verify")
    task = math_task(verify_workers=2)
    prompts = list(task.prompts("train", 0))
    p3 = next(p for p in prompts if p.answers == ("3",))
    p2 = next(p for p in prompts if p.answers == ("2",))
    pairs = [(p3, "It is \\boxed{3.0}"), (p3, "$\\frac{6}{2}$"), (p3, "\\boxed{4}"), (p2, "The answer is 2"),
             (p2, "\\boxed{\\sqrt{4}}"), (p2, "")]
    batch = task.rewards([p for p, _ in pairs], [t for _, t in pairs])
    assert batch == [1.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    assert batch == [task.reward(p, t) for p, t in pairs]
    assert score_batch(task, [p for p, _ in pairs], [t for _, t in pairs]) == batch


def test_score_batch_falls_back_to_single_rewards_and_checks_the_range():
    class OneAtATime:
        name = "one"

        def reward(self, prompt, text):
            return {"good": 1.0, "bad": 0.0, "broken": 2.0}[text]

    assert score_batch(OneAtATime(), ["p", "p"], ["good", "bad"]) == [1.0, 0.0]
    assert take_unscored(OneAtATime()) == 0
    with pytest.raises(Exception, match=r"outside \[0, 1\]"):
        score_batch(OneAtATime(), ["p"], ["broken"])


def test_workers_are_recycled_after_max_calls_and_past_their_memory_cap(fake_verifier):
    fn = IsolatedFunction("fake_verifier:pid", deadline=30.0, max_calls=2)
    try:
        first = [fn.call(), fn.call()]
        assert first[0] == first[1]
        assert fn.call() != first[0] and fn.recycles == 1  # a fresh worker after two answers
    finally:
        fn.close()
    fn = IsolatedFunction("fake_verifier:hog", deadline=30.0, max_rss_bytes=200 << 20)
    try:
        assert fn.call(16) == 1
        assert fn.call(16) == 2  # ~32 MiB held: under the cap, the same worker
        assert fn.call(300) == 3  # now past the cap: this worker is stopped after answering
        assert fn.recycles == 1
        assert fn.call(16) == 1  # a fresh worker holds nothing
    finally:
        fn.close()


def test_an_address_space_limit_turns_a_runaway_allocation_into_an_error(fake_verifier):
    fn = IsolatedFunction("fake_verifier:hog", deadline=30.0, address_space_bytes=1 << 30)
    try:
        answer = fn.call(4096)  # 4 GiB under a 1 GiB limit
        assert isinstance(answer, IsolatedError) and "MemoryError" in answer
        assert fn.call(16) == 1  # the worker keeps serving
    finally:
        fn.close()


def test_pool_map_edge_cases(fake_verifier):
    pool = IsolatedPool("fake_verifier:check", deadline=5.0, workers=1)
    try:
        assert pool.map([], budget=1.0).values == []
        out = pool.map([("g", "yes", 1), ("g", "sleep", 1), ("g", "yes", 1)], budget=2.0)
        assert out.values[0] is True and out.values[1] is UNSCORED and out.values[2] is UNSCORED
        assert (out.unscored, out.timed_out) == (2, 0)
        out = pool.map([("g", "loop", 1), ("g", "yes", 1)], budget=60.0)
        assert out.values == [TIMED_OUT, True] and (out.unscored, out.timed_out) == (0, 1)
        with pytest.raises(Exception, match="budget must be positive"):
            pool.map([("g", "yes", 1)], budget=0)
    finally:
        pool.close()
    with pytest.raises(Exception, match="workers must be a positive integer"):
        IsolatedPool("fake_verifier:check", deadline=5.0, workers=0)


@pytest.mark.parametrize("options, match", [
    ({"verify_workers": 0}, "must be positive"),
    ({"verify_workers": True}, "must be an integer"),
    ({"verify_workers": "2"}, "must be an integer"),
    ({"batch_budget_seconds": 0}, "must be positive"),
    ({"batch_budget_seconds": "60"}, "must be a number"),
    ({"worker_rss_mb": -1}, ">= 0"),
])
def test_bad_scoring_options_are_clear_errors(math_task, options, match):
    with pytest.raises(CatsimError, match=match):
        math_task(checker="exact", **options)


def test_rl_scores_each_sampling_batch_at_once_and_logs_unverified_completions(tmp_path):
    """sample_groups hands a task's `rewards` the whole batch; what the task reports as unverified
    becomes a warning in the RL step's log record."""
    import dataclasses

    from llm_rl_helpers import ToyTask, make_base_model

    from catsim.llm import rl

    @dataclasses.dataclass(frozen=True)
    class BudgetedToy(ToyTask):
        batches: list = dataclasses.field(default_factory=list, compare=False)  # sizes of the calls
        unverified: list = dataclasses.field(default_factory=lambda: [0], compare=False)

        def rewards(self, prompts, completions):
            self.batches.append(len(completions))
            self.unverified[0] += 1  # the budget "ran out" before the last completion
            return [self.reward(p, c) for p, c in zip(prompts[:-1], completions[:-1])] + [0.0]

        def take_unscored(self):
            count, self.unverified[0] = self.unverified[0], 0
            return count

    make_base_model(tmp_path / "base", init_std=0.3)
    task = BudgetedToy()
    cfg = rl.RLConfig.from_flat(steps=2, prompts_per_step=4, group_size=4, mini_batch_size=16,
                                max_new_tokens=3, score_truncated=True)
    rl.run_rl(tmp_path / "base", tmp_path / "run", cfg, task=task, progress=False)
    assert task.batches == [16, 16]  # one scoring call per step: 4 prompts x 4 samples
    records = rl.read_log(tmp_path / "run")
    assert [r["warnings"] for r in records] == [["1 completions not verified in time (scored 0)"]] * 2


def test_a_worker_that_cannot_start_is_a_clear_error(fake_verifier, tmp_path):
    """A worker that dies while starting is an error of the set-up (raised at once), not a
    hostile completion (scored 0) and not a wait for the 120 s start-up allowance."""
    (tmp_path / "dies_on_import.py").write_text("import os\nos._exit(3)\n", encoding="utf-8")
    pool = IsolatedPool("dies_on_import:check", deadline=5.0, workers=2)
    try:
        t0 = time.perf_counter()
        with pytest.raises(CatsimError, match="exited before answering"):
            pool.map([("g", "yes", 1)], budget=5.0)
        assert time.perf_counter() - t0 < SLACK
    finally:
        pool.close()
