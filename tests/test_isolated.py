"""The killable worker process that runs verifiers on untrusted model output."""

from __future__ import annotations

import time

import pytest

from catsim.errors import CatsimError
from catsim.llm.tasks.isolated import TIMED_OUT, IsolatedError, IsolatedFunction


def test_calls_return_values_and_errors():
    fn = IsolatedFunction("math:comb", deadline=30.0)
    try:
        assert fn.call(10, 3) == 120
        err = fn.call(-1, "x")
        assert isinstance(err, IsolatedError) and "TypeError" in err
        assert fn.call(5, 2) == 10  # still serving after an error
        assert fn.kills == 0
    finally:
        fn.close()


def test_a_call_past_the_deadline_is_killed_and_the_next_call_works():
    fn = IsolatedFunction("time:sleep", deadline=1.0)
    try:
        fn.start()  # start-up is not on the deadline
        t0 = time.perf_counter()
        assert fn.call(600) is TIMED_OUT
        assert time.perf_counter() - t0 < 1.0 + 4.0  # the deadline plus kill and reap (busy-CPU slack)
        assert fn.kills == 1
        assert fn.call(0) is None  # a fresh worker answers (time.sleep returns None)
        assert fn.kills == 1
    finally:
        fn.close()


def test_bad_targets_are_clear_errors():
    with pytest.raises(CatsimError, match="module:function"):
        IsolatedFunction("math.comb", deadline=1.0)
    with pytest.raises(CatsimError, match="positive"):
        IsolatedFunction("math:comb", deadline=0)
    fn = IsolatedFunction("catsim_no_such_module:f", deadline=1.0)
    with pytest.raises(CatsimError, match="did not start.*ModuleNotFoundError"):
        fn.call()
