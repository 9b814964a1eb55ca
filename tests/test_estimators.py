"""The evaluation estimators (rlvr/stages/estimators.py) against hand-worked values and brute force.

Brute force enumerates every size-k subset of explicitly labelled samples, which is the
definition the estimators claim to compute exactly; the hand-worked cases show the arithmetic.
"""

from __future__ import annotations

import doctest
import itertools
import math
import sys
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlvr.stages.estimators as estimators
from rlvr.stages.estimators import bootstrap_intervals, default_ks, maj_at_k, pass_at_k


def test_docstring_examples_hold():
    assert doctest.testmod(estimators).failed == 0


# ------------------------------------------------------------------ pass@k


def brute_pass_at_k(n: int, c: int, k: int) -> float:
    """Share of size-k subsets of n labelled samples (the first c correct) holding a correct one."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in subset) for subset in subsets) / len(subsets)


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (10, 3, 4, 1 - 35 / 210),  # 1 - C(7,4)/C(10,4) = 1 - 35/210 = 5/6
        (8, 0, 4, 0.0),  # no correct sample: no subset passes
        (8, 8, 4, 1.0),  # every sample correct
        (8, 3, 1, 3 / 8),  # k = 1: the share of correct samples
        (8, 6, 3, 1.0),  # n - c = 2 < k = 3: every 3 samples include a correct one
        (4, 1, 4, 1.0),  # k = n: any correct among all samples
    ],
)
def test_pass_at_k_hand_worked(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@settings(deadline=None)
@given(st.integers(1, 10).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_is_the_mean_over_all_subsets(n_c_k):
    n, c, k = n_c_k
    assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_k_is_not_any_of_the_first_k():
    """Why the estimator: "any of the first k correct" depends on the order the samples came in
    (here 0, with the one correct sample last) and is right only on average over orders."""
    ordered = [False, False, False, True]  # n = 4, c = 1
    k = 2
    first_k = float(any(ordered[:k]))
    assert first_k == 0.0
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    orders = set(itertools.permutations(ordered))
    assert sum(any(order[:k]) for order in orders) / len(orders) == pytest.approx(pass_at_k(4, 1, 2))


@pytest.mark.parametrize(
    "n, c, k, words",
    [
        (8, 2, 16, ["k = 16 > n = 8", "at least k samples"]),
        (8, 2, 0, ["k >= 1", "k = 0"]),
        (8, 9, 2, ["c = 9", "n = 8"]),
        (8, -1, 2, ["c = -1", "n = 8"]),
    ],
)
def test_pass_at_k_refuses_impossible_inputs(n, c, k, words):
    with pytest.raises(ValueError) as error:
        pass_at_k(n, c, k)
    for word in words:
        assert word in str(error.value)


# ------------------------------------------------------------------ maj@k


def brute_maj_at_k(answer_counts, unanswered: int, k: int) -> float:
    """Mean over every size-k subset of labelled samples of the plurality answer's correctness,
    ties split uniformly, subsets with no answer scoring 0."""
    labels = [answer for answer, (count, _) in enumerate(answer_counts) for _ in range(count)]
    labels += [None] * unanswered
    scores = []
    for subset in itertools.combinations(labels, k):
        votes = Counter(label for label in subset if label is not None)
        if not votes:
            scores.append(0.0)
            continue
        top = max(votes.values())
        tied = [answer for answer, count in votes.items() if count == top]
        scores.append(sum(answer_counts[answer][1] for answer in tied) / len(tied))
    return sum(scores) / len(scores)


# No subnormals: tests/conftest.py flushes them (torch.set_flush_denormal), which hypothesis refuses.
correctness = st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0.0, 1.0, allow_subnormal=False))


@st.composite
def voting_problems(draw):
    answer_counts = draw(st.lists(st.tuples(st.integers(0, 4), correctness), max_size=4))
    unanswered = draw(st.integers(0, 3))
    while sum(count for count, _ in answer_counts) + unanswered > 9:
        answer_counts.pop()
    n = sum(count for count, _ in answer_counts) + unanswered
    if n == 0:
        unanswered = n = 1
    return answer_counts, unanswered, draw(st.integers(1, n))


@settings(deadline=None, max_examples=200)
@given(voting_problems())
def test_maj_at_k_is_the_mean_over_all_subsets(problem):
    answer_counts, unanswered, k = problem
    assert maj_at_k(answer_counts, unanswered, k) == pytest.approx(brute_maj_at_k(answer_counts, unanswered, k), abs=1e-12)


def test_maj_at_k_splits_a_tie_evenly():
    # k = n = 4: the only subset is all samples, a 2-2 tie between a right and a wrong answer.
    assert maj_at_k([(2, 1.0), (2, 0.0)], 0, 4) == 0.5


def test_maj_at_k_with_one_vote_is_the_accuracy_of_a_sample():
    # k = 1: the one sample drawn wins when it answered. 4 correct samples of n = 8:
    # mean accuracy of the answered (4/6) times the answered share (6/8) = 1/2.
    assert maj_at_k([(3, 1.0), (2, 0.0), (1, 1.0)], 2, 1) == pytest.approx(0.5, abs=1e-15)


def test_maj_at_k_hand_worked_subsets():
    # n = 3 (a, a, b), k = 2: {a, a} -> a (right, 1); {a, b} twice -> tie (1/2 each): (1 + 1/2 + 1/2) / 3.
    assert maj_at_k([(2, 1.0), (1, 0.0)], 0, 2) == pytest.approx(2 / 3, abs=1e-15)
    # Same with one unanswered sample, n = 4, k = 2 (6 subsets): {a,a} 1, {a,b} x2 1/2 each,
    # {a,-} x2 1 each, {b,-} 0: (1 + 1 + 2) / 6.
    assert maj_at_k([(2, 1.0), (1, 0.0)], 1, 2) == pytest.approx(4 / 6, abs=1e-15)


def test_maj_at_k_scores_zero_when_nobody_answers():
    assert maj_at_k([], 5, 3) == 0.0
    assert maj_at_k([(0, 1.0)], 5, 5) == 0.0


def test_maj_at_k_with_all_samples_follows_the_plurality():
    # k = n: one subset, the plurality of all samples decides with no chance involved.
    assert maj_at_k([(1, 1.0), (3, 0.0)], 0, 4) == 0.0  # the right minority answer loses
    assert maj_at_k([(3, 1.0), (2, 0.0), (2, 0.0)], 1, 8) == 1.0
    assert maj_at_k([(3, 0.0), (2, 1.0), (2, 1.0)], 1, 8) == 0.0


@pytest.mark.parametrize(
    "answer_counts, unanswered, k, words",
    [
        ([(3, 1.0)], 1, 5, ["k = 5 > n = 4"]),
        ([(3, 1.0)], 1, 0, ["k = 0"]),
        ([(-1, 1.0), (3, 0.0)], 0, 1, ["count", "-1"]),
        ([(3, 1.5)], 0, 1, ["correctness", "1.5"]),
        ([(3, float("nan"))], 0, 1, ["correctness"]),
        ([(3, 1.0)], -1, 1, ["unanswered", "-1"]),
    ],
)
def test_maj_at_k_refuses_impossible_inputs(answer_counts, unanswered, k, words):
    with pytest.raises(ValueError) as error:
        maj_at_k(answer_counts, unanswered, k)
    for word in words:
        assert word in str(error.value)


@pytest.mark.parametrize(
    "answer_counts",
    [[(1, float(i % 2)) for i in range(64)], [(30, 0.0), (20, 0.0), (14, 1.0)]],
    ids=["64 distinct answers", "30/20/14"],
)
def test_maj_at_k_at_64_samples_costs_what_its_docstring_says(answer_counts, monkeypatch):
    """O(n k^2) big-integer products in all, counted rather than timed: every product is made in
    _with_answer, one per (state, votes drawn); a marked and a plain pass per answer give the 2.
    Voting over every size-k subset would be C(64, 32) ~ 1.8e18 of them."""
    real, products = estimators._with_answer, 0

    def counted(states, below, at_level, k):
        nonlocal products
        products += len(states) * (len(below) + 1)
        return real(states, below, at_level, k)

    monkeypatch.setattr(estimators, "_with_answer", counted)
    n = sum(count for count, _ in answer_counts)
    for k in default_ks(64):
        products = 0
        assert 0.0 <= maj_at_k(answer_counts, 0, k) <= 1.0
        assert products <= 2 * n * (k + 1) ** 2, (k, products)


# ------------------------------------------------------------------ bootstrap


def test_bootstrap_is_deterministic_in_the_seed():
    column = {"pass@1": list(np.random.default_rng(1).random(50))}
    assert bootstrap_intervals(column, seed=3) == bootstrap_intervals(column, seed=3)
    assert bootstrap_intervals(column, seed=3) != bootstrap_intervals(column, seed=4)


def test_bootstrap_is_the_percentile_interval_of_resampled_means():
    # Pins the scheme: rounds x problems indices from default_rng(seed), percentiles of the means.
    values = np.random.default_rng(2).random(40)
    picks = np.random.default_rng(7).integers(0, 40, size=(200, 40))
    expected = np.quantile(values[picks].mean(axis=1), [0.05, 0.95])
    low, high = bootstrap_intervals({"score": values}, rounds=200, seed=7, level=0.9)["score"]
    assert (low, high) == pytest.approx(tuple(expected), abs=1e-12)


def test_bootstrap_interval_contains_the_mean():
    values = np.random.default_rng(5).random(100)
    low, high = bootstrap_intervals({"score": values})["score"]
    assert low < values.mean() < high


def test_bootstrap_of_a_constant_is_that_constant():
    assert bootstrap_intervals({"score": [0.1] * 30})["score"] == (0.1, 0.1)
    assert bootstrap_intervals({"score": [0.3]})["score"] == (0.3, 0.3)


def test_bootstrap_of_no_problems_is_nan():
    low, high = bootstrap_intervals({"score": []})["score"]
    assert math.isnan(low) and math.isnan(high)


def test_bootstrap_wider_level_gives_wider_interval():
    column = {"score": np.random.default_rng(6).random(80)}
    narrow_low, narrow_high = bootstrap_intervals(column, level=0.5)["score"]
    wide_low, wide_high = bootstrap_intervals(column, level=0.99)["score"]
    assert wide_low <= narrow_low and narrow_high <= wide_high
    assert wide_high - wide_low > narrow_high - narrow_low


def test_bootstrap_resamples_are_shared_across_columns():
    values = list(np.random.default_rng(8).random(60))
    intervals = bootstrap_intervals({"a": values, "b": values, "c": values[::-1]})
    assert intervals["a"] == intervals["b"]
    assert intervals["c"] != intervals["a"]  # same values, other problems: other resampled means


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"columns": {"pass@1": [1.0, 0.0], "maj@4": [1.0]}}, ["'maj@4'", "1 values", "2"]),
        ({"columns": {"a": [1.0]}, "level": 1.0}, ["level"]),
        ({"columns": {"a": [1.0]}, "level": 0.0}, ["level"]),
        ({"columns": {"a": [1.0]}, "rounds": 0}, ["rounds"]),
    ],
)
def test_bootstrap_refuses_bad_arguments(kwargs, words):
    with pytest.raises(ValueError) as error:
        bootstrap_intervals(**kwargs)
    for word in words:
        assert word in str(error.value)


def test_bootstrap_is_vectorised_over_rounds():
    """The Python calls made (profiled, so counted, not timed) are the same for 10 rounds as for 5,000:
    the rounds are array rows, never a Python loop."""
    rng = np.random.default_rng(9)
    columns = {f"metric {i}": rng.random(600) for i in range(10)}

    def python_calls(rounds: int) -> int:
        calls = 0

        def count(frame, event, arg):
            nonlocal calls
            calls += event in ("call", "c_call")

        sys.setprofile(count)
        try:
            bootstrap_intervals(columns, rounds=rounds)
        finally:
            sys.setprofile(None)
        return calls

    bootstrap_intervals(columns, rounds=2)  # numpy's first-call imports are not the bootstrap's
    assert python_calls(10) == python_calls(5000)


# ------------------------------------------------------------------ default ks


@pytest.mark.parametrize("n, ks", [(1, [1]), (2, [1, 2]), (8, [1, 2, 4, 8]), (12, [1, 2, 4, 8, 12]), (64, [1, 2, 4, 8, 16, 32, 64])])
def test_default_ks(n, ks):
    assert default_ks(n) == ks


def test_default_ks_refuses_no_samples():
    with pytest.raises(ValueError, match="n = 0"):
        default_ks(0)
