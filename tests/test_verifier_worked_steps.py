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
            (x, _, y, _), = equations(true_eq)
            if any({x, y} == {g[0], g[2]} for g in equations(ex.solution)):
                continue  # on a step's own numbers it is a rival answer to the step (the hedging test)
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


def test_hedging_every_operation_on_a_step_s_numbers_earns_nothing_for_that_step():
    # a shotgun of true equations on the step's two numbers holds the gold one whatever the story
    # says: the first equation written on a step's numbers is its answer, and a rival ends the count
    gold = "25 - 19 = 6\n6 / 2 = 3"
    assert worked_steps("25 + 19 = 44\n25 - 19 = 6\n6 / 2 = 3", "3", gold) == 0.0
    assert worked_steps("19 * 25 = 475\n25 - 19 = 6\n6 / 2 = 3", "3", gold) == 0.0  # in either order of the numbers
    assert worked_steps("25 - 19 = 6\n6 * 2 = 12\n6 / 2 = 3", "3", gold) == 0.5  # a later step hedged: paid up to it
    assert worked_steps("25 - 19 = 6\n25 + 19 = 44\n6 / 2 = 3", "3", gold) == 1.0  # committed first: later asides are free
    assert worked_steps("5 * 5 = 25\n5 * 5 = 25\n5 + 5 = 10", "10", "5 * 5 = 25\n5 + 5 = 10") == 1.0  # a step restated is no rival


@pytest.mark.parametrize("text", ["10 - 3 - 2 = 5", "7 * 4 + 6 = 34", "2 + 3 * 4 = 14", "3^2 + 4 = 13", "3 ^ 2 + 4 = 13",
                                  "2 ** 3 + 1 = 9", "-6 + 10 = 4", "\u22126 + 10 = 4", "3 \\times 4 + 2 = 14"])
def test_an_equation_is_read_whole_or_not_at_all(text):
    # true as written, but read from its second number on each held a false `a op b = c`
    assert equations(text) == []
    assert worked_steps(GOLD + "\n" + text, "3", GOLD) == 1.0


def test_a_sign_glued_to_the_first_number_is_not_dropped_and_a_bullet_is_no_sign():
    assert worked_steps("-5 * 5 = 25\n25 - 19 = 6\n6 / 2 = 3", "3", GOLD) == 0.0  # -5 * 5 is not 25
    assert worked_steps("- 5 * 5 = 25\n- 25 - 19 = 6\n* 6 / 2 = 3", "3", GOLD) == 1.0  # markdown bullets
    assert worked_steps("She has 25\n- 25 - 19 = 6", "3", "25 - 19 = 6") == 1.0
    assert worked_steps("**Step 1:** 5 * 5 = 25\n**25 - 19 = 6**\n*6 / 2 = 3*", "3", GOLD) == 1.0  # markdown bold, italics
    assert worked_steps("100 - 25 - 19 = 6\n6 / 2 = 3", "3", "25 - 19 = 6\n6 / 2 = 3") == 0.0  # no step cut out of a false one


@pytest.mark.parametrize("spelling,op", [("\\times", "*"), ("\\cdot", "*"), ("\\ast", "*"), ("\\div", "/"), ("\uff0b", "+"),
                                         ("\uff0d", "-"), ("\ufe63", "-"), ("\u2010", "-"), ("\u2011", "-"), ("\u2012", "-"),
                                         ("\uff0a", "*"), ("\u2217", "*"), ("\u2219", "*"), ("\u2715", "*"), ("\uff0f", "/"),
                                         ("\u2215", "/")])
def test_latex_fullwidth_and_unicode_operator_spellings_are_read(spelling, op):
    false = {"+": "6 + 3 = 10", "-": "6 - 3 = 4", "*": "6 * 3 = 17", "/": "6 / 3 = 3"}[op].replace(f" {op} ", f" {spelling} ")
    assert worked_steps(GOLD + "\n" + false, "3", GOLD) == 0.0
    assert worked_steps(GOLD.replace(f" {op} ", f" {spelling} "), "3", GOLD) in (1.0, pytest.approx(2 / 3))  # honest credit


@pytest.mark.parametrize("equals", ["==", "\uff1d", "&=", "\ufe66"])
def test_every_spelling_of_equals_is_read(equals):
    assert worked_steps(GOLD + "\n6 + 3 " + equals + " 10", "3", GOLD) == 0.0
    assert worked_steps(GOLD.replace(" = ", f" {equals} "), "3", GOLD) == 1.0
    assert equations("6 + 3 != 10") == equations("6 + 3 <= 10") == equations("6 + 3 \u2260 10") == []  # not equalities


def test_invisible_characters_hide_nothing():
    for mark in ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"]:
        assert worked_steps(GOLD + f"\n6 +{mark}3 = 10", "3", GOLD) == 0.0
        assert worked_steps(GOLD + f"\n1{mark}2 + 1 = 14", "3", GOLD) == 0.0  # nor split a number into a true equation


@pytest.mark.parametrize("text", ["1,200 + 300 = 1,500", "5 + 20 = 5\u00b2", "5 + 20 = 5^2", "3 / 2 = 1\u00bd", "6 / 8 = 3/4"])
def test_a_result_is_read_whole(text):
    # each is true, and was read as a false integer equation (200 + 300 = 1, 5 + 20 = 5, 3 / 2 = 1, 6 / 8 = 3)
    assert worked_steps(GOLD + "\n" + text, "3", GOLD) == 1.0
    assert equations("1,200 + 300 = 1,400") == [(1200, "+", 300, 1400)]


@pytest.mark.parametrize("digits", [4300, 4301, 100_000])
def test_a_number_too_long_to_parse_raises_nothing(digits):
    # int() refuses past 4300 digits, and a raise drops the row's every term (its reward goes missing)
    assert worked_steps(GOLD + "\n" + "1" * digits + " + 1 = 2", "3", GOLD) == 1.0
    assert worked_steps(GOLD + "\n2 + 2 = " + "4" * digits, "3", GOLD) == 1.0
    assert worked_steps(GOLD + "\n" + "1" * digits + ",000 + 1 = 2", "3", GOLD) == 1.0


def test_reading_stays_linear_on_long_adversarial_text():
    import time
    for text in ["1 + " * 50_000, "1 - 2 " * 50_000, "1" + " " * 200_000 + "a", "1,000" * 50_000, "\\times 1 " * 50_000,
                 "1 = " * 50_000, "-1 " * 50_000]:
        start = time.perf_counter()
        worked_steps(text + "\n" + GOLD, "3", GOLD)
        assert time.perf_counter() - start < 10.0  # linear: ~0.05-0.4 s here; a quadratic scan of these would take minutes


def test_unicode_digits_read_as_their_values():
    # \d matches every script's digits and int() reads them: the working is the same working
    assert worked_steps("\u0665 * \u0665 = \u0662\u0665\n\u0662\u0665 - \u0661\u0669 = \u0666\n\u0666 / \u0662 = \u0663", "3", GOLD) == 1.0
    assert worked_steps(GOLD + "\n\uff16 + \uff13 = \uff11\uff10", "3", GOLD) == 0.0
    assert equations("2\u00b2 + 1 = 5") == []  # a superscript is no digit: 2² is no operand
