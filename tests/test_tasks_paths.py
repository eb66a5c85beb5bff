"""Shortest-paths task: exact enumeration (brute force over all move strings), Zipf warm-up
distribution, teacher-forced per-answer probabilities."""

from __future__ import annotations

import collections
import itertools

import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.llm.tasks import grid, make_task
from catsim.llm.tasks.answer_mass import answer_probabilities
from catsim.llm.tasks.char_tokenizer import EOS_ID, build_char_tokenizer
from catsim.llm.tasks.paths import PathsConfig, PathsTask, turns, zipf_weights


def brute_force_correct(task, prompt, max_len):
    """Every string over UDLR of length <= max_len that the verifier accepts."""
    out = set()
    for n in range(max_len + 1):
        for moves in itertools.product("UDLR", repeat=n):
            s = "".join(moves)
            if task.reward(prompt, s) == 1.0:
                out.add(s)
    return out


def independent_shortest_paths(rows, start, goal, max_len):
    """Shortest walks found by exhaustive search over walks of increasing length."""
    for n in range(max_len + 1):
        found = []
        for moves in itertools.product("UDLR", repeat=n):
            cells = grid.walk(rows, start, "".join(moves))
            if cells is not None and cells[-1] == goal:
                found.append("".join(moves))
        if found:
            return set(found)
    return set()


@pytest.mark.parametrize("ranking", ["turns", "lexicographic"])
def test_answers_are_exactly_the_shortest_paths(ranking):
    task = PathsTask(PathsConfig(height=3, width=4, obstacle_density=0.15, max_answers=10,
                                 ranking=ranking, n_heldout=8))
    for prompt in task.prompts("heldout", seed=2):
        rows, start, goal = grid.parse(prompt.text)
        d = len(prompt.answers[0])
        assert d <= 5
        expected = independent_shortest_paths(rows, start, goal, d)
        assert set(prompt.answers) == expected and len(prompt.answers) == len(expected)
        assert brute_force_correct(task, prompt, d + 1) == expected
        assert 2 <= len(prompt.answers) <= 10
        keys = [(turns(a), a) for a in prompt.answers] if ranking == "turns" else list(prompt.answers)
        assert keys == sorted(keys)


def test_turns():
    assert [turns(s) for s in ["", "R", "RRDD", "RDRD", "DDRRUU"]] == [0, 0, 1, 3, 2]


def test_zipf_weights_match_the_stated_formula():
    w = zipf_weights(5, 1.0)
    np.testing.assert_allclose(w, [1, 1 / 2, 1 / 3, 1 / 4, 1 / 5] / np.sum([1, 1 / 2, 1 / 3, 1 / 4, 1 / 5]), rtol=1e-15)
    np.testing.assert_allclose(zipf_weights(4, 0.0), 0.25)
    np.testing.assert_allclose(zipf_weights(3, 2.0)[0] / zipf_weights(3, 2.0)[2], 9.0)


def test_sft_targets_follow_the_warm_up_distribution():
    task = PathsTask(PathsConfig(min_answers=4, max_answers=6, zipf_exponent=1.5, n_heldout=2))
    prompt = task.prompt("train", 0, 0)
    rng = np.random.default_rng(0)
    n = 20_000
    counts = collections.Counter(task.sft_target(prompt, rng) for _ in range(n))
    freq = np.array([counts[a] for a in prompt.answers]) / n
    w = task.answer_weights(prompt)
    assert np.all(np.abs(freq - w) < 4 * np.sqrt(w * (1 - w) / n) + 1e-3)
    assert sum(counts.values()) == n and set(counts) <= set(prompt.answers)


def test_splits_disjoint_and_deterministic():
    task = make_task("paths", height=3, width=3, n_train=400, n_heldout=10, obstacle_density=0.0)
    held = {p.text for p in task.prompts("heldout", 5)}
    train = [p.text for p in task.prompts("train", 5)]
    assert len(held) == 10 and not held & set(train)
    assert train == [p.text for p in make_task("paths", height=3, width=3, n_train=400, n_heldout=10,
                                               obstacle_density=0.0).prompts("train", 5)]


@pytest.mark.parametrize(
    "options",
    [dict(height=0), dict(min_answers=5, max_answers=2), dict(zipf_exponent=-1.0),
     dict(obstacle_density=1.0), dict(ranking="random"), dict(size=9)],
)
def test_bad_configs(options):
    with pytest.raises(CatsimError):
        make_task("paths", **options)


def test_answer_probabilities_by_teacher_forcing_with_a_known_model():
    """A character bigram 'model' whose sequence probabilities are computed here by hand."""
    task = make_task("paths", n_heldout=3)
    tok = build_char_tokenizer(task.alphabet)
    vocab = tok.get_vocab_size()
    rng = np.random.default_rng(0)
    table = rng.dirichlet(np.ones(vocab), size=vocab)  # P(next | previous token)

    def logprob_fn(prompt_ids, completions):
        out = []
        for comp in completions:
            seq = list(prompt_ids) + list(comp)
            start = len(prompt_ids)
            out.append(sum(np.log(table[seq[t - 1], seq[t]]) for t in range(start, len(seq))))
        return out

    for prompt in task.prompts("heldout", 0):
        probs = answer_probabilities(logprob_fn, tok, task, prompt, EOS_ID)
        assert list(probs) == list(prompt.answers)
        for answer, p in probs.items():
            ids = [tok.token_to_id(prompt.text[-1])] + [tok.token_to_id(c) for c in answer] + [EOS_ID]
            expected = np.prod([table[a, b] for a, b in zip(ids, ids[1:])])
            assert p == pytest.approx(expected, rel=1e-12)


def test_answer_probabilities_rejects_bad_log_probs():
    task = make_task("paths", n_heldout=1)
    tok = build_char_tokenizer(task.alphabet)
    prompt = task.prompt("heldout", 0, 0)
    with pytest.raises(CatsimError, match="positive or NaN"):
        answer_probabilities(lambda p, c: [0.5] * len(c), tok, task, prompt, EOS_ID)
    with pytest.raises(CatsimError, match="shape"):
        answer_probabilities(lambda p, c: [0.0], tok, task, prompt, EOS_ID, answers=["R", "D"])
