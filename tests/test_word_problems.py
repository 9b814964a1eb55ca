"""The real-model lab's task (data.source = "word_problems"): every worked solution is true
arithmetic that ends in the gold answer, stays in 0..max_value, and no held-out problem's
arithmetic is also a training problem's."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.tasks import load_splits, task_for
from rlvr.tasks.word_problems import Step, draw, make_word_splits, render, solve
from rlvr.verifiers.math import boxed_math

EQUATION = re.compile(r"^(\d+) ([-+*/]) (\d+) = (\d+)$")


def _check_solution(solution: str, answer: str, max_value: int) -> None:
    *lines, last = solution.split("\n")
    assert last == "\\boxed{" + answer + "}"
    previous = None
    for line in lines:
        parts = line.split(", ")  # "3 * 2 = 6, 4 + 6 = 10": a group bought and added
        for part in parts:
            a, op, b, result = EQUATION.match(part).groups()
            a, b, result = int(a), int(b), int(result)
            assert {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op] == result
            assert op != "/" or a % b == 0, part
            assert all(0 <= n <= max_value for n in (a, b, result)), part
        previous = result
    assert previous is None or str(previous) == answer


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_solution_is_true_arithmetic_ending_in_its_answer(seed):
    train, held = make_word_splits(2, 4, 99, 3000, 150, seed)
    for e in train + held:
        _check_solution(e.solution, e.answer, 99)
        assert boxed_math(e.solution, e.answer) == 1.0
        assert 0 <= int(e.answer) <= 99


def test_a_lower_bound_bounds_every_number_written():
    train, held = make_word_splits(2, 4, 30, 2000, 60, 0)
    for e in train + held:
        _check_solution(e.solution, e.answer, 30)


def test_held_out_arithmetic_is_never_trained_on_and_levels_are_even():
    train, held = make_word_splits(2, 4, 99, 20000, 300, 0)
    assert Counter(e.level for e in held) == {2: 100, 3: 100, 4: 100}
    assert {e.level for e in train} == {2, 3, 4}
    # the equations write every number and operation of a problem, so equal arithmetic = equal solution text
    assert not {e.solution for e in held} & {e.solution for e in train}
    assert len({e.solution for e in held}) == 300


def test_splits_are_deterministic_in_the_seed():
    a = make_word_splits(2, 4, 99, 500, 30, 3)
    assert a == make_word_splits(2, 4, 99, 500, 30, 3)
    assert a != make_word_splits(2, 4, 99, 500, 30, 4)


def test_the_story_says_what_the_equations_do():
    import random

    steps = (Step("start", 12), Step("+", 5), Step("-", 3), Step("+group", 2, 4), Step("/", 2))
    question, solution, answer = render(steps, random.Random(0))
    assert solution == "12 + 5 = 17\n17 - 3 = 14\n2 * 4 = 8, 14 + 8 = 22\n22 / 2 = 11\n\\boxed{11}" and answer == 11
    assert question.startswith(tuple(f"{n} has 12 " for n in ("Mia", "Leo", "Ava", "Sam", "Zoe", "Omar", "Lily", "Ben", "Nora",
                                                                 "Ravi", "Emma", "Kai", "Ivy", "Tom", "Lena", "Max")))
    assert " 5 more." in question and "2 " in question and "equally among 2 friends" in question
    assert question.endswith("does each friend get?")
    assert [v for _, v in solve(steps)] == [12, 17, 14, 22, 11]


def test_draw_gives_the_asked_number_of_steps():
    import random

    rng = random.Random(5)
    for n in (1, 2, 3, 4, 5):
        for _ in range(50):
            steps = draw(rng, n, 99)
            assert len(steps) == n and steps[0].op in ("start", "group")
            assert all(s.op != "/" for s in steps[:-1])


def test_a_level_with_too_few_problems_is_refused():
    with pytest.raises(ValueError, match="level 1 has too few distinct word problems"):
        make_word_splits(1, 1, 99, 10, 100, 0)


def test_the_source_loads_through_the_config_and_refuses_what_it_would_ignore(tmp_path):
    cfg = load_config(None, ["data.source=word_problems", "task.min_ops=2", "task.max_ops=3", "task.max_value=60",
                             "task.num_train=200", "task.num_eval=20"])
    train, held = load_splits(cfg)
    assert len(train) == 200 and len(held) == 20 and all(e.solution for e in train)
    with pytest.raises(ConfigError, match="task.max_value"):  # the task's own rules: task_for, before any use
        task_for(load_config(None, ["data.source=word_problems", "task.max_value=19"]))
    with pytest.raises(ConfigError, match="data.train_path"):
        load_splits(load_config(None, ["data.source=word_problems", "task.max_value=99", f"data.train_path={tmp_path}/x.jsonl"]))


def test_held_out_problems_that_leave_nothing_to_train_on_are_refused():
    with pytest.raises(ValueError, match="leave none of levels"):
        make_word_splits(1, 1, 99, 10, 64, 0)  # level 1 has 64 distinct problems (8 x 8 groups): all held out


def test_a_changed_before_sft_evaluation_cannot_resume():
    from rlvr.runtime import changes_breaking_resume

    saved = load_config(None, ["eval.before_sft=false"])
    assert any(c.startswith("eval.before_sft") for c in changes_breaking_resume(saved, load_config(None, ["eval.before_sft=true"])))
    assert changes_breaking_resume(saved, load_config(None, ["eval.before_sft=false", "eval.batch_size=7"])) == []
