"""worked_steps, the process reward on written arithmetic: hand-worked scores, and each rule that
keeps it from paying for anything but the gold working, tested across its whole class."""

import random

import pytest

from rlvr.config import load_config
from rlvr.data import Example
from rlvr.reward import build_reward_terms, score_completions
from rlvr.tasks.word_problems import make_word_splits
from rlvr.verifiers.registry import get_verifier
from rlvr.verifiers.worked_steps import OPERATORS, equations, worked_steps

GOLD = "5 * 5 = 25\n25 - 19 = 6\n6 / 2 = 3\n\\boxed{3}"


def test_hand_worked_scores():
    assert worked_steps(GOLD, "3", GOLD) == 1.0
    assert worked_steps("5 * 5 = 25\n25 - 19 = 6\n\\boxed{6}", "3", GOLD) == pytest.approx(2 / 3)  # stopped early, nothing false
    assert worked_steps("5 * 5 = 25\n25 - 9 = 16\n16 / 2 = 8\n\\boxed{8}", "3", GOLD) == pytest.approx(1 / 3)  # misread 19 as 9
    assert worked_steps("5 * 5 = 25\n25 - 19 = 12\n12 / 2 = 6\n\\boxed{6}", "3", GOLD) == 0.0  # the lab's slip voids it
    assert worked_steps("\\boxed{3}", "3", GOLD) == 0.0  # a bare right answer writes no working
    assert get_verifier("worked_steps") is worked_steps


def test_the_answer_is_not_its_business():
    # every step right and another number boxed: the term stays, boxed_math is what refuses it
    assert worked_steps("5 * 5 = 25\n25 - 19 = 6\n6 / 2 = 3\n\\boxed{4}", "3", GOLD) == 1.0


def test_a_row_without_worked_equations_is_not_scored_and_a_non_string_completion_scores_0():
    assert worked_steps("2 + 2 = 4", "4", "") is None
    assert worked_steps("2 + 2 = 4", "4", "\\boxed{4}") is None
    assert worked_steps("2 + 2 = 4", "4", None) is None
    assert worked_steps(None, "3", GOLD) == 0.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_gold_solution_of_the_lab_task_scores_1_and_is_read_whole(seed):
    # the task's every form (a group start, +group's two equations on one line, division) parses
    train, held_out = make_word_splits(2, 6, 99, 300, 60, seed)
    for ex in train + held_out:
        gold = equations(ex.solution)
        assert len(gold) == ex.solution.count("=") and gold
        assert worked_steps(ex.solution, ex.answer, ex.solution) == 1.0


@pytest.mark.parametrize("seed", range(5))
def test_padding_with_true_arithmetic_never_raises_the_score(seed):
    rng = random.Random(seed)
    train, _ = make_word_splits(2, 4, 99, 200, 30, seed)
    for ex in train:
        lines = ex.solution.split("\n")[:-1]
        partial = "\n".join(lines[: rng.randrange(len(lines) + 1)])
        base = worked_steps(partial, ex.answer, ex.solution)
        for _ in range(5):
            a, b = rng.randrange(50), rng.randrange(1, 50)
            true_eq = rng.choice([f"{a} + {b} = {a + b}", f"{a * b} / {b} = {a}", f"{a} * {b} = {a * b}"])
            if any(worked_steps(true_eq, "", f"{x} {op} {y} = {z}") == 1.0 for x, op, y, z in equations(ex.solution)):
                continue  # a gold step (either way round for + and *) is working, not padding
            padded = "\n".join([true_eq, partial, true_eq, true_eq])
            assert worked_steps(padded, ex.answer, ex.solution) <= base + 1e-12
            assert worked_steps(padded, ex.answer, ex.solution) >= base - 1e-12  # and does not cost a right step either


def test_steps_count_in_order_and_only_plus_and_times_commute():
    assert worked_steps("25 - 19 = 6\n5 * 5 = 25\n6 / 2 = 3", "3", GOLD) == pytest.approx(1 / 3)  # step 2 before step 1
    assert worked_steps("5 * 5 = 25\n6 / 2 = 3\n25 - 19 = 6", "3", GOLD) == pytest.approx(2 / 3)  # step 3 before step 2
    assert worked_steps("25 - 19 = 6\n6 / 2 = 3", "3", GOLD) == 0.0  # later steps without the first
    gold = "7 + 18 = 25\n3 * 25 = 75"
    assert worked_steps("18 + 7 = 25\n25 * 3 = 75", "75", gold) == 1.0
    gold = "25 - 19 = 6\n6 / 2 = 3"
    assert worked_steps("6 / 3 = 2", "3", gold) == 0.0  # true, but not the gold step
    assert worked_steps("31 - 25 = 6", "3", "25 - 19 = 6") == 0.0


@pytest.mark.parametrize("spelling", sorted(OPERATORS))
def test_a_false_equation_voids_the_term_in_every_spelling_of_every_operator(spelling):
    op = OPERATORS[spelling]
    false = {"+": "6 + 3 = 10", "-": "6 - 3 = 4", "*": "6 * 3 = 17", "/": "6 / 3 = 3"}[op].replace(f" {op} ", f" {spelling} ")
    true = {"+": "6 + 3 = 9", "-": "6 - 3 = 3", "*": "6 * 3 = 18", "/": "6 / 3 = 2"}[op].replace(f" {op} ", f" {spelling} ")
    assert equations(false) and equations(true)
    assert worked_steps(GOLD + "\n" + false, "3", GOLD) == 0.0
    assert worked_steps(GOLD + "\n" + true, "3", GOLD) == 1.0
    tight = false.replace(" ", "")  # no spaces around the sign
    assert worked_steps(GOLD + "\n" + tight, "3", GOLD) == 0.0


@pytest.mark.parametrize("text", ["7 / 2 = 3", "7 / 0 = 0", "0 / 0 = 0", "0 / 0 = 1"])
def test_inexact_division_and_division_by_zero_are_false(text):
    assert worked_steps(GOLD + "\n" + text, "3", GOLD) == 0.0


@pytest.mark.parametrize("text", ["2.5 + 1 = 3.5", "1 + 2.5 = 3.5", "0.5 * 4 = 2", "6 / 4 = 1.5", "3.5 - 1 = 2.5"])
def test_a_number_with_a_decimal_point_is_no_operand(text):
    # read naively each holds a false integer equation (5 + 1 = 3, 5 * 4 = 2, 6 / 4 = 1, 5 - 1 = 2)
    assert equations(text) == []
    assert worked_steps(GOLD + "\n" + text, "3", GOLD) == 1.0


def test_equations_inside_prose_and_at_a_sentence_end_are_read():
    assert equations("So 25 - 19 = 6. Then 6 / 2 = 3, giving \\boxed{3}") == [(25, "-", 19, 6), (6, "/", 2, 3)]
    assert worked_steps("First, 5 x 5 = 25. Next 25 \u2212 19 = 6; finally 6 \u00f7 2 = 3.", "3", GOLD) == 1.0


def test_scored_through_the_reward_contract_with_the_row_s_solution():
    cfg = load_config(overrides=['reward.functions=["boxed_math", "worked_steps"]', "reward.weights=[1.0, 0.5]",
                                 'reward.correctness="boxed_math"']).reward
    examples = [Example("story", "3", solution=GOLD, level=3), Example("story", "3", solution=GOLD, level=3),
                Example("story", "3", solution=GOLD, level=3)]
    completions = [GOLD, "5 * 5 = 25\n25 - 19 = 6\n6 / 2 = 4\n\\boxed{4}", "5 * 5 = 25\n25 - 9 = 16\n\\boxed{8}"]
    s = score_completions(build_reward_terms(cfg), cfg, [e.prompt for e in examples], completions, examples, [20, 20, 20], 80)
    assert s.total_B.tolist() == pytest.approx([1.5, 0.0, 0.5 / 3])
    assert s.correct_B.tolist() == [1.0, 0.0, 0.0]
