"""The built-in arithmetic task: deterministic splits, held-out hygiene, correct answers and solutions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from rlvr.config import TaskConfig
from rlvr.tasks.arithmetic import make_splits

ROOT = Path(__file__).resolve().parents[1]

SMALL = TaskConfig(num_train=400, num_eval=60)


def boxed_math():
    """The verifier is written concurrently; give its import a little time before failing."""
    for attempt in range(10):
        try:
            from rlvr.verifiers.math import boxed_math as fn

            return fn
        except ImportError:
            if attempt == 9:
                raise
            time.sleep(3)


# ----------------------------------------------------------------------------- our own evaluator


def parse(text: str) -> list:
    """'-3+4*12' -> [-3, '+', 4, '*', 12]. A sign is allowed only on the first number."""
    tokens: list = []
    i = 0
    while i < len(text):
        sign = 1
        if i == 0 and text[i] == "-":
            sign, i = -1, i + 1
        j = i
        while j < len(text) and text[j].isdigit():
            j += 1
        assert j > i, f"expected a number at {i} in {text!r}"
        tokens.append(sign * int(text[i:j]))
        if j == len(text):
            return tokens
        assert text[j] in "+-*", f"unexpected {text[j]!r} in {text!r}"
        tokens.append(text[j])
        i = j + 1
        assert i < len(text), f"dangling operator in {text!r}"
    raise AssertionError(f"empty expression {text!r}")


def evaluate(tokens: list) -> int:
    """Multiplications first, then + and - left to right."""
    terms = [tokens[0]]
    for op, value in zip(tokens[1::2], tokens[2::2]):
        if op == "*":
            terms[-1] = (terms[-1][0], terms[-1][1] * value) if isinstance(terms[-1], tuple) else terms[-1] * value
        else:
            terms.append((op, value))
    total = terms[0]
    for op, value in terms[1:]:
        total = total + value if op == "+" else total - value
    return total


@pytest.mark.parametrize(
    "text, value",
    [("7+3*2", 13), ("2*3*4-5", 19), ("9-4-3", 2), ("1-2*3+4", -1), ("8*0+1*9", 9), ("-4+10", 6), ("5", 5), ("0-9*9-9", -90)],
)
def test_own_evaluator(text, value):
    assert evaluate(parse(text)) == value


def one_operation_rewrites(tokens: list) -> list[list]:
    """Every expression reachable from `tokens` by applying exactly one operator."""
    out = []
    for k in range(1, len(tokens), 2):
        a, op, b = tokens[k - 1], tokens[k], tokens[k + 1]
        value = a * b if op == "*" else a + b if op == "+" else a - b
        out.append(tokens[: k - 1] + [value] + tokens[k + 2 :])
    return out


def expression_of(example, template: str) -> str:
    head, tail = template.split("{expr}")
    assert example.prompt.startswith(head) and example.prompt.endswith(tail)
    return example.prompt[len(head) : len(example.prompt) - len(tail)]


# ----------------------------------------------------------------------------- splits


@pytest.fixture(scope="module")
def small_splits():
    return make_splits(SMALL, seed=0)


def test_splits_have_requested_sizes(small_splits):
    train, held = small_splits
    assert len(train) == SMALL.num_train
    assert len(held) == SMALL.num_eval


def test_deterministic_in_config_and_seed(small_splits):
    assert make_splits(SMALL, seed=0) == small_splits
    other_train, other_held = make_splits(SMALL, seed=1)
    assert [e.prompt for e in other_held] != [e.prompt for e in small_splits[1]]
    assert [e.prompt for e in other_train] != [e.prompt for e in small_splits[0]]


def test_deterministic_across_processes(small_splits):
    # a rerun in a fresh interpreter (other hash seed) must see the very same problems
    code = (
        "import json; from rlvr.config import TaskConfig; from rlvr.tasks.arithmetic import make_splits; "
        "tr, ho = make_splits(TaskConfig(num_train=400, num_eval=60), seed=0); "
        "print(json.dumps([[e.prompt for e in tr], [e.prompt for e in ho]]))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    train, held = small_splits
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [[e.prompt for e in train], [e.prompt for e in held]]


def test_held_out_unique_and_never_in_train(small_splits):
    train, held = small_splits
    held_prompts = [e.prompt for e in held]
    assert len(set(held_prompts)) == len(held_prompts) == SMALL.num_eval
    assert not set(held_prompts) & {e.prompt for e in train}


def test_levels_in_range_and_balanced_in_held_out(small_splits):
    train, held = small_splits
    levels = range(SMALL.min_ops, SMALL.max_ops + 1)
    counts = Counter(e.level for e in held)
    assert set(counts) == set(levels)
    assert max(counts.values()) - min(counts.values()) <= 1  # an even split
    assert {e.level for e in train} == set(levels)
    for e in train + held:
        # level = number of operators in the expression
        assert e.level == len(parse(expression_of(e, SMALL.prompt_template))) // 2


def test_small_level_is_capped_and_others_make_up_the_difference():
    # one operator over 0..9 with '+-*' has 300 distinct problems: at most 100 held out
    cfg = TaskConfig(min_ops=1, max_ops=2, max_value=-1, num_train=50, num_eval=300)
    train, held = make_splits(cfg, seed=0)
    assert Counter(e.level for e in held) == {1: 100, 2: 200}
    assert len({e.prompt for e in held}) == 300
    assert not {e.prompt for e in held} & {e.prompt for e in train}


def test_exactly_a_third_of_the_pool_is_allowed_but_not_more():
    cfg = TaskConfig(min_ops=1, max_ops=1, max_value=-1, num_train=10, num_eval=100)  # 300 // 3
    assert len(make_splits(cfg, seed=0)[1]) == 100
    with pytest.raises(ValueError, match="num_eval"):
        make_splits(TaskConfig(min_ops=1, max_ops=1, max_value=-1, num_train=10, num_eval=101), seed=0)
    tiny = TaskConfig(min_ops=1, max_ops=1, max_operand=1, operators="+", max_value=-1, num_train=5, num_eval=2)  # pool of 4
    with pytest.raises(ValueError):
        make_splits(tiny, seed=0)


def test_operands_operators_and_template_follow_the_config():
    cfg = TaskConfig(min_ops=2, max_ops=4, max_operand=5, operators="+*", num_train=200, num_eval=30, prompt_template="Compute {expr} ->")
    train, held = make_splits(cfg, seed=5)
    for e in train + held:
        expr = expression_of(e, cfg.prompt_template)
        assert e.prompt == f"Compute {expr} ->"
        tokens = parse(expr)
        assert all(0 <= t <= 5 for t in tokens[0::2])
        assert set(tokens[1::2]) <= {"+", "*"}
        assert 2 <= e.level <= 4
    assert Counter(e.level for e in held) == {2: 10, 3: 10, 4: 10}


# ----------------------------------------------------------------------------- answers and solutions


def check_example(example, template: str, verifier) -> None:
    expr = expression_of(example, template)
    tokens = parse(expr)
    value = evaluate(tokens)
    assert example.answer == str(value), example
    # the worked solution: one-operation rewrites, each keeping the value, then \boxed{answer}
    body, _, boxed = example.solution.rpartition("\n")
    assert boxed == "\\boxed{" + example.answer + "}", example.solution
    steps = body.split("=")
    assert len(steps) == example.level, example.solution  # one step per operator
    current = tokens
    for step in steps:
        nxt = parse(step)
        assert nxt in one_operation_rewrites(current), f"{render(current)} -> {step} is not one operation"
        assert evaluate(nxt) == value, f"{step} changed the value of {expr}"
        current = nxt
    assert current == [value]
    assert verifier(example.solution, example.answer) == 1.0
    assert verifier("\\boxed{" + example.answer + "}", example.answer) == 1.0
    assert verifier("\\boxed{" + str(value + 1) + "}", example.answer) == 0.0


def render(tokens: list) -> str:
    return "".join(str(t) for t in tokens)


def test_answers_and_worked_solutions_are_correct(small_splits):
    verifier = boxed_math()
    train, held = small_splits
    for e in held + train[:150]:
        check_example(e, SMALL.prompt_template, verifier)


def test_answers_correct_with_larger_operands_and_longer_expressions():
    verifier = boxed_math()
    cfg = TaskConfig(min_ops=3, max_ops=5, max_operand=30, max_value=-1, num_train=60, num_eval=30)
    train, held = make_splits(cfg, seed=2)
    assert any(int(e.answer) < 0 for e in train + held)  # subtraction makes negatives
    for e in train + held:
        check_example(e, cfg.prompt_template, verifier)


def test_max_value_bounds_every_number_a_worked_solution_writes():
    verifier = boxed_math()
    cfg = TaskConfig(max_value=19, num_train=300, num_eval=60)
    train, held = make_splits(cfg, seed=3)
    for e in train + held:
        check_example(e, cfg.prompt_template, verifier)  # still the true integer value, worked one operation at a time
        body = e.solution.rpartition("\n")[0]
        numbers = [t for step in body.split("=") for t in parse(step)[0::2]]
        assert all(0 <= n <= 19 for n in numbers), e.solution
    assert not {e.prompt for e in held} & {e.prompt for e in train}
    unbounded = make_splits(TaskConfig(max_value=-1, num_train=300, num_eval=60), seed=3)[0]
    assert any(not 0 <= int(e.answer) <= 19 for e in unbounded)  # the bound is what removed them


def test_a_bounded_level_caps_held_out_at_a_third_of_its_own_pool():
    # one operator over 0..9 with every result in 0..9: 152 problems (counted here by brute force)
    brute = sum(0 <= (a + b if op == "+" else a - b if op == "-" else a * b) <= 9 for a in range(10) for b in range(10) for op in "+-*")
    assert brute == 152
    cfg = TaskConfig(min_ops=1, max_ops=2, max_value=9, num_train=50, num_eval=200)
    held = make_splits(cfg, seed=0)[1]
    assert Counter(e.level for e in held) == {1: 152 // 3, 2: 200 - 152 // 3}
    with pytest.raises(ValueError, match="num_eval"):
        make_splits(TaskConfig(min_ops=1, max_ops=1, max_value=9, num_train=10, num_eval=51), seed=0)


def test_max_value_below_minus_one_or_below_the_operands_is_refused():
    from rlvr.config import ConfigError, load_config
    from rlvr.tasks import task_for

    with pytest.raises(ConfigError, match="task.max_value"):
        load_config(overrides=["task.max_value=-2"])
    with pytest.raises(ConfigError, match="task.max_value.*max_operand = 99"):  # no operand above it could ever be drawn
        task_for(load_config(overrides=["task.max_operand=99"]))  # the arithmetic task's own rule
    task_for(load_config(overrides=["task.max_operand=99", "task.max_value=-1"]))


@pytest.mark.parametrize("levels", [{"min_ops": 2, "max_ops": 3}, {"min_ops": 4, "max_ops": 5}])  # counted, sampled
def test_a_bound_that_admits_almost_nothing_is_refused_not_drawn_forever(levels):
    with pytest.raises(ValueError, match="task.max_value=0: only"):
        make_splits(TaskConfig(max_value=0, num_train=10, num_eval=8, **levels), seed=0)


# ----------------------------------------------------------------------------- the worked_steps process reward


def test_every_worked_solution_of_the_task_earns_the_process_reward(small_splits):
    from rlvr.tasks.arithmetic import worked_steps

    train, held = small_splits
    cfg = TaskConfig(min_ops=3, max_ops=5, max_operand=30, max_value=-1, num_train=60, num_eval=30)
    for e in held + train[:200] + sum(make_splits(cfg, seed=2), []):
        assert worked_steps(e.solution, e.answer, e.info["expr"]) == 1.0, e.solution


@pytest.mark.parametrize(
    "completion, why",
    [
        ("\\boxed{-41}", "a bare answer shows no working"),
        ("9-56+6=-41\n\\boxed{-41}", "two operations in one step"),
        ("9-56+6=-46+6=-41\n\\boxed{-41}", "a wrong intermediate step, right final answer"),
        ("9-56+6=-47+6=-40\n\\boxed{-41}", "the working ends on another value than the box"),
        ("9-8*7+6=9-56+6=-47+6=-41\n\\boxed{-41}", "an echo of the prompt is not a step"),
        ("9-56+6=-47+6=-41=-41\n\\boxed{-41}", "working past the value"),
        ("9-56+6=-47+6=-41\n\\boxed{-41} or \\boxed{-40}", "text after the box"),
        ("9-56+6=-47+6=-41\n\\boxed{-40}\\boxed{-41}", "a hedge before the last box"),
        ("9-56+6=-47+6=-41 \\boxed{-41}", "the working does not end its line"),
        ("9-56+6=\n-47+6=-41\n\\boxed{-41}", "a line break inside the working"),
        ("9 - 56 + 6 = -47 + 6 = -41\n\\boxed{-41}", "spaced rewrites are not the task's expressions"),
        ("-47+6=-41\n\\boxed{-41}", "a skipped first step"),
        ("", "nothing"),
    ],
)
def test_the_process_reward_refuses_working_that_is_not_exactly_right(completion, why):
    from rlvr.tasks.arithmetic import worked_steps

    assert worked_steps("9-56+6=-47+6=-41\n\\boxed{-41}", "-41", "9-8*7+6") == 1.0
    assert worked_steps(completion, "-41", "9-8*7+6") == 0.0, why


def test_the_process_reward_never_raises_on_any_text():
    from hypothesis import given, settings, strategies as st

    from rlvr.tasks.arithmetic import worked_steps

    @settings(max_examples=300, deadline=None)
    @given(st.text(alphabet="0123456789+-*=\n\\boxed{} ", max_size=40), st.sampled_from(["3+4*2", "7-9", "2*0-5+1"]))
    def never_raises(completion, expr):
        assert worked_steps(completion, "11", expr) in (0.0, 1.0)

    never_raises()
