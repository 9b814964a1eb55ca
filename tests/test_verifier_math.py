"""Adversarial tests for the strict boxed-math verifier (rlvr.verifiers.math)."""

from __future__ import annotations

import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlvr.verifiers.math as verifier_math
from rlvr.verifiers.math import equal
from rlvr.verifiers.math import boxed_math, extract_last_boxed

REPO = Path(__file__).resolve().parents[1]


def box(content: str, before: str = "Reasoning... so the answer is ", after: str = ".") -> str:
    return f"{before}\\boxed{{{content}}}{after}"


@pytest.fixture(scope="module", autouse=True)
def warm_sympy() -> None:
    # Importing sympy takes a few hundred ms once per process; the 1 s bounds below are
    # about the verifier, not the import, so pay it before any timed test.
    boxed_math(box(r"\sqrt{8}"), r"2\sqrt{2}")


# ------------------------------------------------------------------ correct answers

CORRECT = [
    # plain integers and decimals (fast path)
    (box("42"), "42"),
    (box(" 42 "), "42"),
    (box("-7"), "-7"),
    (box("042"), "42"),
    (box("42.0"), "42"),
    (box("42.00"), "42"),
    (box("42"), "42.0"),
    (box("-0"), "0"),
    (box("0.5"), "0.50"),
    (box(".5"), "0.5"),
    (box("123456789012345678901234567890"), "123456789012345678901234567890"),
    # fractions, in every spelling
    (box(r"\frac{1}{2}"), "0.5"),
    (box("1/2"), r"\frac{1}{2}"),
    (box(r"\dfrac{1}{2}"), "1/2"),
    (box(r"\tfrac{1}{2}"), "0.5"),
    (box(r"\frac12"), "0.5"),
    (box(r"-\frac{3}{4}"), "-0.75"),
    (box(r"\frac{-3}{4}"), "-3/4"),
    (box(r"\frac{6}{8}"), r"\frac{3}{4}"),
    (box(r"\frac{10}{2}"), "5"),
    # LaTeX noise
    (box("$42$"), "42"),
    (box(r"\$18.90"), "18.9"),
    (box(r"\left(1, 2\right)"), "(1,2)"),
    (box(r"\displaystyle \frac{1}{2}"), "0.5"),
    (box(r"1\,000"), r"1\,000"),
    (box(r"\! 42 \;"), "42"),
    (box(r"\quad 42 \qquad"), "42"),
    (box("~42~"), "42"),
    (box(r"\text{42}"), "42"),
    # leading assignment
    (box("x = 5"), "5"),
    (box("n=5"), "5"),
    (box("y = 2x+1"), "2x + 1"),
    (box("5"), "x = 5"),
    # thousands separators (gold is one number)
    (box("1,000"), "1000"),
    (box("1{,}000"), "1000"),
    (box("1,234,567"), "1234567"),
    (box("-1,000.5"), "-1000.5"),
    (box("1000"), "1,000"),
    # units, degrees, percent after a number (the number is kept as written)
    (box(r"5\text{ cm}"), "5"),
    (box(r"5 \text{cm}^2"), "5"),
    (box(r"30^\circ"), "30"),
    (box(r"30^{\circ}"), "30"),
    (box(r"12\%"), "12"),
    (box("12%"), "12"),
    (box(r"12\%"), r"12\%"),
    # symbolic equality (sympy)
    (box(r"\sqrt{8}"), r"2\sqrt{2}"),
    (box(r"2\sqrt{2}"), r"\sqrt{8}"),
    (box("(x+1)^2"), "x^2+2x+1"),
    (box(r"x^2 + 2 \cdot x + 1"), "(x+1)^2"),
    (box(r"\frac{x^2-1}{x-1}"), "x+1"),
    (box(r"\frac{1}{1+\sqrt{2}}"), r"\sqrt{2}-1"),
    (box(r"\sqrt{3+2\sqrt{2}}"), r"1+\sqrt{2}"),
    (box(r"\frac{\sqrt{2}}{2}"), r"\frac{1}{\sqrt{2}}"),
    (box(r"\sqrt[3]{27}"), "3"),
    (box("2^{10}"), "1024"),
    (box("2^10"), "1024"),
    (box("2^{-1}"), "0.5"),
    (box("5!"), "120"),
    (box(r"2 \times 3"), "6"),
    (box(r"12 \div 4"), "3"),
    (box(r"\frac{\pi}{2}"), r"\dfrac{\pi}{2}"),
    (box(r"2\pi"), r"\pi \cdot 2"),
    (box(r"\frac{\pi}{3}"), r"\frac{1}{3}\pi"),
    (box(r"\theta + 1"), r"1 + \theta"),
    (box("--5"), "5"),
    (box("1000!"), "1000!"),
    # big integers, exactly
    (box("1" * 400), "1" * 400),
    (box("9" * 450), "9" * 450 + ".000"),
    # tuples, element-wise and in order
    (box("(1, 2)"), "(1,2)"),
    (box(r"\left( \frac{1}{2}, -3 \right)"), "(0.5, -3)"),
    (box("(1, 2, 3)"), "(1,2,3)"),
    (box("[0, 1]"), "[0,1]"),
    (box("1, 2"), "1,2"),
    # box forms
    (r"\boxed{42}", "42"),
    (r"\fbox{42}", "42"),
    (r"\boxed {42}", "42"),
    ("\\boxed\n{42}", "42"),
    (r"\boxed{\boxed{42}}", "42"),
    (r"\boxed{ \fbox{ \boxed{42} } }", "42"),
    (r"$x = \boxed{42}$", "42"),
    (r"\boxed{\{1, 2\}}", r"\{1,2\}"),
    # hedging guard: repeats, equivalent spellings and empty boxes are fine
    (r"Put the answer in \boxed{}. ... \boxed{42}", "42"),
    (r"\boxed{42} so again \boxed{42}", "42"),
    (r"\boxed{42.0} i.e. \boxed{42}", "42"),
    (r"\boxed{\frac{1}{2}} i.e. \boxed{0.5}", "0.5"),
    (r"\boxed{ } \boxed{\,} \boxed{7}", "7"),
    # the gold may be written in any of the same forms
    ("\\boxed{42}", r"\boxed{42}"),
    ("\\boxed{0.75}", r"$\frac{3}{4}$"),
]


@pytest.mark.parametrize(("completion", "answer"), CORRECT)
def test_correct_answers_score_one(completion: str, answer: str) -> None:
    assert boxed_math(completion, answer) == 1.0


# -------------------------------------------------------------------- wrong answers

WRONG = [
    # no box, or the answer only in prose
    ("The answer is 42.", "42"),
    ("The answer is boxed{42}.", "42"),
    (r"The answer is \boxed 42.", "42"),
    (r"\boxed42", "42"),
    (r"\boxedd{42}", "42"),
    ("", "42"),
    # substrings and near misses
    (box("142"), "42"),
    (box("4"), "42"),
    (box("42"), "4"),
    (box("-42"), "42"),
    (box("42x"), "42"),
    (box("0.42"), "42"),
    (box(r"\frac{1}{2}"), "2"),
    (box("x"), "5"),
    (box("x"), "y"),
    (box("(x+1)^2"), "x^2+1"),
    (box(r"\sqrt{x^2}"), "x"),
    # unclosed, empty, whitespace-only and oversized boxes
    (r"\boxed{42", "42"),
    (r"\boxed{42} then \boxed{42", "42"),
    (r"\boxed{}", "42"),
    (r"\boxed{   }", "42"),
    (r"\boxed{\,\;\quad~}", "42"),
    (r"\boxed{42} \boxed{}", "42"),
    (r"\boxed{$$}", "42"),
    (box("0" * 499 + "42"), "42"),
    (box("42" + " " * 500), "42"),
    # two different boxed answers (hedging)
    (r"\boxed{41} or \boxed{42}", "42"),
    (r"\boxed{42} or \boxed{41}", "42"),
    (r"\boxed{42} \boxed{43} \boxed{42}", "42"),
    (r"\boxed{x} \boxed{42}", "42"),
    (r"\boxed{42} \boxed 41", "42"),
    ("".join(f"\\boxed{{{i}}}" for i in range(100)) + r"\boxed{42}", "42"),
    # several candidates inside one box
    (box("41 or 42"), "42"),
    (box(r"41 \text{ or } 42"), "42"),
    (box("42 and 43"), "42"),
    (box("41, 42"), "42"),
    (box("42, 42"), "42"),
    (box("41,42"), "42"),
    (box(r"\pm 3"), "3"),
    (box(r"3 \pm 1"), "3"),
    (box(r"\mp 3"), "-3"),
    (box("3, -3"), "3"),
    (box("42 43"), "42"),
    # thousands separators only with groups of exactly three digits, only for one number
    (box("1,00"), "100"),
    (box("10,00"), "1000"),
    (box("1,0000"), "10000"),
    (box("1,000"), "(1,0)"),
    # tuples: element-wise, in order, same delimiters
    (box("(2, 1)"), "(1,2)"),
    (box("(1, 2)"), "(1,2,3)"),
    (box("[1, 2]"), "(1,2)"),
    (box("1, 2"), "(1,2)"),
    (box("(1, 3)"), "(1,2)"),
    # percent keeps the number as written
    (box(r"0.12"), r"12\%"),
    (box(r"12\%"), "0.12"),
    (box(r"x\%"), "x"),
    # units only after a number
    (box(r"\text{five}"), "5"),
    # float approximations: no tolerance
    (box("3.14159265358979"), r"\pi"),
    (box("3.14"), r"\pi"),
    (box("0.3333"), r"\frac{1}{3}"),
    (box("0.3333333333333333333333333333333333"), r"\frac{1}{3}"),
    (box("1.4142135623730951"), r"\sqrt{2}"),
    (box("0.6666666666666666"), "2/3"),
    (box("41.99999999999999999"), "42"),
    # Python syntax is not math
    (box("int('42')"), "42"),
    (box("0x2A"), "42"),
    (box("1_000"), "1000"),
    (box("42j"), "42"),
    (box("4.2e1"), "42"),
    (box("42e0"), "42"),
    (box("2**5"), "32"),
    (box("6**2"), "36"),
    (box("sqrt(4)"), "2"),
    (box("42."), "42"),
    (box("True"), "1"),
    (box("__import__('os')"), "0"),
    # Unicode look-alikes are not folded
    (box("４２"), "42"),
    (box("٤٢"), "42"),
    (box("\u221242"), "-42"),  # minus sign U+2212
    (box("42"), "４２"),
    ("\\boxed{4\u200b2}", "42"),  # zero-width space
    ("\\bоxed{42}", "42"),  # Cyrillic o in the command
    # division by zero and undefined expressions
    (box("1/0"), "1"),
    (box(r"\frac{1}{0}"), "1"),
    (box("0^{-1}"), "1"),
    # unsupported LaTeX is never guessed at
    (box(r"\sin x"), r"\cos x"),
    (box(r"\infty"), "42"),
    (box(r"\boxed{42} \cdot 2"), "84"),
    (box(r"42_{10}"), "42"),
]


@pytest.mark.parametrize(("completion", "answer"), WRONG)
def test_wrong_answers_score_zero(completion: str, answer: str) -> None:
    assert boxed_math(completion, answer) == 0.0


# ----------------------------------------------------------------------- extraction

EXTRACT = [
    (r"\boxed{42}", "42"),
    (r"a \boxed{1} b \boxed{2} c", "2"),
    (r"\fbox{7}", "7"),
    (r"\boxed {7}", "7"),
    (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
    (r"\boxed{\{1,2\}}", r"\{1,2\}"),
    (r"\boxed{a{b}c}", "a{b}c"),
    (r"\boxed{\boxed{5}}", "5"),
    (r"\boxed{ \boxed{5} }", "5"),
    (r"\boxed{\boxed{5} + 1}", r"\boxed{5} + 1"),
    (r"\boxed{}", ""),
    (r"\boxed{ }", " "),
    (r"\boxed{42", None),
    (r"\boxed{1} \boxed{42", None),
    (r"\boxed 42", None),
    ("no box here", None),
    ("", None),
    (r"\boxed{" + "1" * 501 + "}", None),
    (r"\boxed{" + "1" * 500 + "}", "1" * 500),
    (r"\boxed{a\}b}", r"a\}b"),
    (r"\boxed{a\\}b", r"a\\"),
    # other box-drawing commands, with their optional and colour arguments
    (r"\framebox{7}", "7"),
    (r"\framebox[2cm][l]{7}", "7"),
    (r"\colorbox{yellow}{8}", "8"),
    (r"\colorbox[rgb]{1,0,0}{8}", "8"),
    (r"\fcolorbox{red}{white}{9}", "9"),
    (r"\boxed{\framebox{5}}", "5"),
    (r"\framebox{1} \boxed{2", None),
    (r"\colorbox{yellow}", None),
    (r"\fcolorbox{red}{white", None),
    (r"\boxed[2cm]{7}", None),
]


@pytest.mark.parametrize(("text", "expected"), EXTRACT)
def test_extract_last_boxed(text: str, expected: str | None) -> None:
    assert extract_last_boxed(text) == expected


def test_extract_never_raises() -> None:
    assert extract_last_boxed(None) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("completion", "answer"), [(None, "42"), (box("42"), None), (b"\\boxed{42}", "42"), (42, 42)]
)
def test_non_string_inputs_score_zero(completion: object, answer: object) -> None:
    assert boxed_math(completion, answer) == 0.0  # type: ignore[arg-type]


# ----------------------------------------------- hedges hidden in text, other boxes

HIDDEN_HEDGES = [
    # text after a number is dropped only when it names units; otherwise it stays, the
    # answer does not parse, and the hedge scores 0 whichever number the gold is
    (box(r"42\text{ (or 43)}"), "42"),
    (box(r"42\text{ (or 43)}"), "43"),
    (box(r"41\text{ -- no wait, 42}"), "41"),
    (box(r"41\text{ -- no wait, 42}"), "42"),
    (box(r"-3\text{, 3}"), "-3"),
    (box(r"-3\text{, 3}"), "3"),
    (box(r"42 \text{ or } 43"), "42"),
    (box(r"42\mathrm{~or~43}"), "42"),
    (box(r"42\text{ OR 43}"), "42"),
    (box(r"42\text{ maybe}"), "42"),
    (box(r"3\text{ up to sign}"), "3"),
    (box(r"3\text{ squared}"), "3"),
    (box(r"5\text{ million}"), "5"),
    (box(r"5\text{ cm or 6 cm}"), "5"),
    (box(r"5\text{ cm}\text{ (or 6)}"), "5"),
    # an earlier box that hedges inside text is not the same answer as the last one
    (r"\boxed{42\text{ (or 43)}} so \boxed{42}", "42"),
    (r"\boxed{42\text{, 41}} hence \boxed{42}", "42"),
    # every box-drawing command is a box for the hedging guard
    (r"\framebox{41} or \boxed{42}", "42"),
    (r"\framebox[2cm][c]{41} or \boxed{42}", "42"),
    (r"\boxed{42} or \framebox{41}", "42"),
    (r"\fbox{41} or \boxed{42}", "42"),
    (r"\colorbox{yellow}{41} or \boxed{42}", "42"),
    (r"\fcolorbox{red}{white}{41} or \boxed{42}", "42"),
    # a plain-text plus-minus is a plus-minus
    (box("+-3"), "-3"),
    (box("+-3"), "3"),
    (box("-+3"), "-3"),
    (box("+ - 3"), "-3"),
    (box("3 +- 1"), "3"),
    (box("2+-3"), "-1"),  # refused too: "+-" is never read as "+ (-3)"
    # a mixed number is never a product
    (box(r"2\frac{1}{2}"), "1"),
    (box(r"2\frac12"), "1"),
    (box(r"2\frac{1}{2}"), "2"),
]


@pytest.mark.parametrize(("completion", "answer"), HIDDEN_HEDGES)
def test_hedges_hidden_in_text_or_other_boxes_score_zero(completion: str, answer: str) -> None:
    assert boxed_math(completion, answer) == 0.0


# ---------------------------------------------------- common notations, both ways

NOTATION = [
    # thin-space thousands separators (groups of three, like commas)
    (box(r"1\,000"), "1000"),
    (box(r"1\,000\,000"), "1000000"),
    (box("1000"), r"1\,000"),
    (box(r"1\,234.5"), "1234.5"),
    (box(r"-12\,345"), "-12345"),
    (box(r"(1\,000, 2)"), "(1000, 2)"),
    (box("1{,}000"), r"1\,000"),
    # a gold with \pm: the same two values, written with one \pm or \mp
    (box(r"\pm3"), r"\pm 3"),
    (box(r"\pm 3"), r"\pm3"),
    (box(r"1\pm\sqrt{2}"), r"1 \pm \sqrt{2}"),
    (box(r"\mp 3"), r"\pm 3"),
    (box(r"x = \pm 3"), r"\pm 3"),
    (box(r"\frac{2 \pm \sqrt{8}}{2}"), r"1 \pm \sqrt{2}"),
    (box(r"\pm\frac{1}{2}"), r"\pm 0.5"),
    # relations, unions and matrices compare part by part, never as squeezed text
    (box(r"x\le 3"), r"x \leq 3"),
    (box(r"x \leqslant 3"), r"x\le3"),
    (box(r"3 \geq x"), r"x \leq 3"),
    (box(r"x > -2"), r"-2 < x"),
    (box(r"x < \frac{1}{2}"), "x < 0.5"),
    (box(r"1<x\le3"), r"1 < x \leq 3"),
    (box("x+y=3"), "x + y = 3"),
    (box(r"x \neq 2"), r"x \ne 2"),
    (box(r"(-\infty,2)\cup(3,\infty)"), r"(-\infty, 2) \cup (3, \infty)"),
    (box(r"(3, \infty) \cup (-\infty, 2)"), r"(-\infty, 2) \cup (3, \infty)"),
    (box(r"(-\infty, 0.5] \cup [3, \infty)"), r"(-\infty, \frac{1}{2}] \cup [3, \infty)"),
    (box(r"[-2,\ 2]"), "[-2, 2]"),
    (box(r"\begin{pmatrix}1&2\\3&4\end{pmatrix}"), r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}"),
    (box(r"\begin{pmatrix} 0.5 & -1 \\ 0 & 2 \\ \end{pmatrix}"), r"\begin{pmatrix} \frac{1}{2} & -1 \\ 0 & 2 \end{pmatrix}"),
    (box(r"\begin{bmatrix} \sqrt{8} \\ x+1 \end{bmatrix}"), r"\begin{bmatrix} 2\sqrt{2} \\ 1+x \end{bmatrix}"),
    # units after any answer, degree signs in every spelling
    (box(r"45^\circ\text{ C}"), "45"),
    (box(r"45^{\circ}\mathrm{C}"), "45"),
    (box(r"2\sqrt{2}\text{ cm}"), r"2\sqrt{2}"),
    (box(r"3\text{ km/h}"), "3"),
    (box(r"3\text{ miles per hour}"), "3"),
    (box(r"20\text{ square units}"), "20"),
    (box(r"18\text{ dollars}"), "18"),
    (box(r"6\,\mathrm{cm}^{2}"), "6"),
    (box(r"12\text{ percent}"), "12"),
    # delimiters: null ones and sized ones
    (box(r"\left. 5 \right."), "5"),
    (box(r"\bigl(1, 2\bigr)"), "(1,2)"),
    (box(r"\Bigl[0, 1\Bigr]"), "[0,1]"),
    (box(r"\biggl(\frac{1}{2}, 3\biggr)"), "(0.5, 3)"),
    # continued fractions
    (box(r"\cfrac{1}{2}"), "0.5"),
    (box(r"\cfrac{1}{1+\cfrac{1}{2}}"), r"\frac{2}{3}"),
    # the last box may be any box
    (r"\framebox{42}", "42"),
    (r"\boxed{42} i.e. \framebox{42}", "42"),
    (r"\fcolorbox{red}{white}{42}", "42"),
]


@pytest.mark.parametrize(("completion", "answer"), NOTATION)
def test_common_notations_score_one(completion: str, answer: str) -> None:
    assert boxed_math(completion, answer) == 1.0


NOTATION_NEAR_MISSES = [
    # each is one of the notations above with a wrong part: still 0
    (box(r"1\,00"), "100"),
    (box(r"12\,345\,6"), "123456"),
    (box(r"\pm 4"), r"\pm 3"),
    (box("3"), r"\pm 3"),
    (box(r"1 \pm \sqrt{3}"), r"1 \pm \sqrt{2}"),
    (box(r"\pm 3 \pm 1"), r"\pm 3"),
    (box(r"\pm 3 \text{ or } 4"), r"\pm 3"),
    (box(r"\sqrt{2} \pm 1"), r"1 \pm \sqrt{2}"),
    (box("x < 3"), r"x \leq 3"),
    (box("x > 3"), "x < 3"),
    (box("3 > x"), "x > 3"),
    (box(r"x \leq 3"), "3"),
    (box("3"), r"x \leq 3"),
    (box(r"1 < x < 3"), r"1 < x \leq 3"),
    (box(r"(-\infty, 2] \cup (3, \infty)"), r"(-\infty, 2) \cup (3, \infty)"),
    (box(r"(-\infty, 2)"), r"(-\infty, 2) \cup (3, \infty)"),
    (box(r"(-\infty, 2) \cup (3, \infty) \cup (5, 6)"), r"(-\infty, 2) \cup (3, \infty)"),
    (box(r"\begin{bmatrix}1&2\\3&4\end{bmatrix}"), r"\begin{pmatrix}1&2\\3&4\end{pmatrix}"),
    (box(r"\begin{pmatrix}1&3\\2&4\end{pmatrix}"), r"\begin{pmatrix}1&2\\3&4\end{pmatrix}"),
    (box(r"\begin{pmatrix}1&2&3\\4\end{pmatrix}"), r"\begin{pmatrix}1&2\\3&4\end{pmatrix}"),
    (box(r"45^\circ\text{ K}"), "45"),
    (box(r"5\text{ apples}"), "5"),  # a counted noun outside the unit list is kept
    (box(r"\frac{\pi}{2}\text{ radians or 90 degrees}"), r"\frac{\pi}{2}"),
    (box(r"12\text{ percent}"), "0.12"),
    (box(r"\left. 5 \right."), "6"),
    (r"\framebox{41}", "42"),
]


@pytest.mark.parametrize(("completion", "answer"), NOTATION_NEAR_MISSES)
def test_notation_near_misses_score_zero(completion: str, answer: str) -> None:
    assert boxed_math(completion, answer) == 0.0


# Each decision documented in docs/verifiers.md ("Round-2 decisions"), both ways where
# the decision is to accept: (completion, gold, reward).
DECISIONS = [
    # Unicode minus: a look-alike, not folded (as full-width digits are not)
    (box("\u22123"), "-3", 0.0),
    (box("3\u22121"), "2", 0.0),
    # degree sign: U+00B0 and \degree are degree signs, dropped like ^\circ
    (box("45\u00b0"), "45", 1.0),
    (box("45\u00b0C"), "45", 1.0),
    (box(r"45\degree"), "45", 1.0),
    (box("45\u00b0"), "46", 0.0),
    # \textbf{(C)} is \text{(C)}: font commands around a whole answer are dropped
    (box(r"\textbf{(C)}"), r"\text{(C)}", 1.0),
    (box(r"\text{(C)}"), r"\textbf{(C)}", 1.0),
    (box("C"), r"\text{(C)}", 1.0),
    (box(r"\textbf{(D)}"), r"\text{(C)}", 0.0),
    # a trailing period inside the box is refused (as "42." always was)
    (box("42."), "42", 0.0),
    (box(r"\frac{1}{2}."), "0.5", 0.0),
    (box("x = 5."), "5", 0.0),
    # a repeating decimal is the exact fraction it denotes
    (box(r"0.\overline{3}"), r"\frac{1}{3}", 1.0),
    (box(r"0.1\overline{6}"), "1/6", 1.0),
    (box(r"-0.\overline{142857}"), r"-\frac{1}{7}", 1.0),
    (box(r"0.\overline{9}"), "1", 1.0),
    (box(r"\frac{4}{33}"), r"0.\overline{12}", 1.0),
    (box(r"0.\overline{3}"), "0.3333", 0.0),
    (box("0.3333"), r"0.\overline{3}", 0.0),
    (box(r"0.\overline{12}"), "0.12", 0.0),
    # sets and bare lists in any order (multisets); tuples and intervals in order
    (box(r"\{2, 1\}"), r"\{1,2\}", 1.0),
    (box(r"\{3, \frac{1}{2}, -1\}"), r"\{-1, 0.5, 3\}", 1.0),
    (box("-3, 3"), "3, -3", 1.0),
    (box(r"\{1, 1, 2\}"), r"\{1, 2, 2\}", 0.0),
    (box(r"\{1, 2\}"), r"\{1, 2, 3\}", 0.0),
    (box("(2, 1)"), "(1, 2)", 0.0),
    (box("3, -3"), r"\pm 3", 0.0),  # a list is not spelled \pm, and the other way round
    # real cube roots of negatives (odd roots of negative numbers are real)
    (box(r"\sqrt[3]{-8}"), "-2", 1.0),
    (box(r"\sqrt[5]{-32}"), "-2", 1.0),
    (box(r"\sqrt[3]{-2}"), r"-\sqrt[3]{2}", 1.0),
    (box(r"\sqrt[3]{-8}"), "2", 0.0),
    (box(r"\sqrt{-4}"), "-2", 0.0),
    # \cfrac and \bigl( \bigr): see NOTATION; a mixed number is its value as a whole
    # answer, and refused inside an expression (a product to TeX, a sum to a reader)
    (box(r"2\frac{1}{2}"), r"\frac{5}{2}", 1.0),
    (box(r"2 \frac{1}{2}"), "2.5", 1.0),
    (box(r"-2\frac{1}{2}"), "-2.5", 1.0),
    (box(r"2\frac{1}{2}\text{ inches}"), "5/2", 1.0),
    (box("13/4"), r"3\frac{1}{4}", 1.0),
    (box(r"1 + 2\frac{1}{2}"), "3.5", 0.0),
    (box(r"1 + 2\frac{1}{2}"), "2", 0.0),
    (box(r"2\frac{3}{2}"), "3.5", 0.0),
    (box(r"2\frac{x}{3}"), r"\frac{2x}{3}", 1.0),  # not a mixed number: a product
]


@pytest.mark.parametrize(("completion", "answer", "expected"), DECISIONS)
def test_documented_decisions(completion: str, answer: str, expected: float) -> None:
    assert boxed_math(completion, answer) == expected


# ------------------------------------------------------------- warm-up in the pool


def boxed_math_if_warm(completion: str, answer: str) -> float:
    """boxed_math, but -1.0 if sympy was not imported before this item came."""
    return boxed_math(completion, answer) if "sympy" in sys.modules else -1.0


boxed_math_if_warm.warm_up = boxed_math.warm_up  # type: ignore[attr-defined]


def warm_up_fails(completion: str, answer: str) -> float:
    return 1.0


def _broken_warm_up() -> None:
    raise RuntimeError("no model files")


warm_up_fails.warm_up = _broken_warm_up  # type: ignore[attr-defined]


def test_boxed_math_warm_up_imports_sympy_in_a_fresh_process() -> None:
    script = """
import sys
from rlvr.verifiers.math import boxed_math
assert "sympy" not in sys.modules
boxed_math.warm_up()
assert "sympy" in sys.modules
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr


def test_pool_warms_a_worker_before_its_first_item() -> None:
    from rlvr.verifiers.pool import VerifierPool

    items = [box(r"\sqrt[3]{-8}+x"), box(r"\sqrt[3]{16}")]  # both need sympy
    with VerifierPool("test_verifier_math:boxed_math_if_warm", workers=1, timeout_s=30.0) as pool:
        result = pool.score(items, ["x-2", r"2\sqrt[3]{2}"])
    assert result.scores == [1.0, 1.0]  # boxed_math_if_warm scores -1.0 for an item that came before sympy


def test_a_failing_warm_up_fails_the_pool_start() -> None:
    from rlvr.verifiers.pool import VerifierPool

    with pytest.raises(RuntimeError, match="no model files"):
        with VerifierPool("test_verifier_math:warm_up_fails", workers=1, timeout_s=30.0) as pool:
            pool.score(["a"], ["a"])


# ----------------------------------------------------------- never evaluates the text

SYMBOLIC = [(c, a) for c, a in CORRECT if "sqrt" in c or "x" in c or "pi" in c]


def test_answers_are_never_evaluated_as_code(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    import sympy.parsing.sympy_parser as sympy_parser

    seen: list[str] = []
    real_eval, real_exec = builtins.eval, builtins.exec

    def spy(real: Callable[..., Any]) -> Callable[..., Any]:
        # sympy's polys exec code templates of their own: record, then run them
        def wrapped(source: Any, *args: Any, **kwargs: Any) -> Any:
            seen.append(source if isinstance(source, str) else repr(source))
            return real(source, *args, **kwargs)

        return wrapped

    def no_parse_expr(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("sympify/parse_expr of a string was called")

    monkeypatch.setattr(builtins, "eval", spy(real_eval))
    monkeypatch.setattr(builtins, "exec", spy(real_exec))
    monkeypatch.setattr(sympy_parser, "parse_expr", no_parse_expr)
    verifier_math.clear_caches()
    for completion, answer in SYMBOLIC:
        assert boxed_math(completion, answer) == 1.0
    marker = "__import__('os').getpid()"
    assert boxed_math(box(marker), "0") == 0.0
    assert boxed_math(box("1"), marker) == 0.0
    texts = [extract_last_boxed(c) or "" for c, _ in SYMBOLIC] + [marker]
    assert not [s for s in seen for t in texts if len(t) > 3 and t in s]


# -------------------------------------------------------------- pathological inputs

HUGE = "1" * 100_000
PATHOLOGICAL = [
    (r"\boxed{" + "{" * 10_000 + "5" + "}" * 10_000 + "}", "5", 0.0),
    (r"\boxed{" + "{" * 10_000 + "5", "5", 0.0),
    ("{" * 10_000 + r"\boxed{5}", "5", 1.0),
    ("}" * 10_000 + r"\boxed{5}" + "{" * 10_000, "5", 1.0),
    (r"\boxed{" + HUGE + "}", HUGE, 0.0),  # longer than 500 characters
    (r"\boxed{5}", HUGE, 0.0),
    (r"\boxed{" + "1" * 500 + "}", "1" * 500, 1.0),
    (r"\boxed{" + "1" * 500 + "}", "1" * 499 + "2", 0.0),
    (r"\boxed{5}", HUGE + "/" + HUGE, 0.0),
    (r"\boxed{1}", r"\frac{" + HUGE + "}{" + HUGE + "}", 0.0),
    (r"\boxed{9^{9^{9^9}}}", "1", 0.0),
    (r"\boxed{9^{9^{9^9}}}", r"9^{9^{9^9}}", 1.0),  # identical strings need no evaluation
    (r"\boxed{9^{9^{9^9}}}", r"9^{9^{9^{9}}}", 1.0),  # the same TeX up to optional braces
    (r"\boxed{9^{9^{9^9}}}", r"9^{9^{9^{9}}} + 0", 0.0),  # too big to compare: refused
    (r"\boxed{(10^{10})!}", "1", 0.0),
    (r"\boxed{(10^{10})!}", "(10^{10})! + 0", 0.0),
    (r"\boxed{10^{10^{10}}}", "0", 0.0),
    (r"\boxed{2^{10^{100}}}", "2", 0.0),
    (r"\boxed{x^{10^{10}}}", "x", 0.0),
    (r"\boxed{((x+1)^{60})^{60}}", "1", 0.0),
    (r"\boxed{(x+1)^{100}(x+2)^{100}}", "1", 0.0),
    (r"\boxed{(x+y+z+w)^{100}}", "(x+y+z+w)^{99}(w+x+y+z)", 1.0),  # sympy merges powers
    # equal, but proving it needs a huge expansion: refused, which scores 0
    (r"\boxed{(x+y+z+w)^{50}(x-y)^{50}}", "(x+y+z+w)^{50}(y-x)^{50}", 0.0),
    (r"\boxed{\sqrt{10^{1999}+7}}", r"\sqrt{10^{1999}+8}", 0.0),
    (r"\boxed{2^{x \cdot 10^{1000}}}", "1", 0.0),
    (r"\boxed{1001!}", "1", 0.0),
    (r"\boxed{(1000!)!}", "1", 0.0),
    (r"\boxed{" + "(" * 240 + "1" + ")" * 240 + "}", "1", 0.0),
    (r"\boxed{" + r"\sqrt{" * 80 + "2" + "}" * 80 + "}", "2", 0.0),
    (r"\boxed{" + "2^{" * 60 + "2" + "}" * 60 + "}", "4", 0.0),
    (r"\boxed{" + "-" * 490 + "1}", "1", 1.0),
    (r"\boxed{" + "x" * 490 + "}", "x" * 489 + "y", 0.0),
    (r"\boxed{" + "+".join(["(x+1)^{9}"] * 50) + "}", "50(x+1)^9", 1.0),
    (r"\boxed{(\sqrt{2}+\sqrt{3})^{20}(\sqrt{3}-\sqrt{2})^{20}}", "1", 1.0),
    (r"\boxed{(\sqrt{2}+\sqrt{3})^{40}(\sqrt{3}-\sqrt{2})^{40}}", "1", 0.0),  # too big to expand
    (r"\boxed{1}" * 50_000, "1", 1.0),
    ("".join(f"\\boxed{{{i}}}" for i in range(20_000)), "19999", 0.0),
    (r"\boxed{" * 10_000, "5", 0.0),
    ("\\" * 100_000 + r"\boxed{5}", "5", 1.0),  # 50,000 LaTeX line breaks, then a box
    ("x" * 1_000_000 + r"\boxed{5}", "5", 1.0),
    # lists compared in any order: pairing is not quadratic in sympy calls or time
    (r"\boxed{" + ",".join(map(str, range(129, -1, -1))) + "}", ",".join(map(str, range(130))), 1.0),
    (r"\boxed{" + ",".join(map(str, range(128, -1, -1))) + ",999}", ",".join(map(str, range(130))), 0.0),
    (r"\boxed{" + ",".join(f"0.{i}0" for i in range(10, 90)) + "}", ",".join(f"0.{i}" for i in range(89, 9, -1)), 1.0),
    (r"\boxed{\{" + ",".join(f"x+{i}" for i in range(60)) + r"\}}", r"\{" + ",".join(f"{i}+x" for i in range(60)) + r"\}", 0.0),
    (r"\boxed{" + r"\cup".join(f"({i},{i + 1})" for i in range(40)) + "}", r"\cup".join(f"({i},{i + 1})" for i in range(39, -1, -1)), 1.0),
]

# Inputs that once took seconds to minutes inside sympy (found by fuzzing), each with
# the verdict the bounds give now. 0.0 where the right verdict is 1 means "refused".
R4 = r"\sqrt{5+2\sqrt{6}}+\sqrt{7+4\sqrt{3}}+\sqrt{9+4\sqrt{5}}+\sqrt{11+2\sqrt{30}}"
TOWER = r"(\frac{1}{2})^{(\frac{3154+x}{2})^{14}}"
HEAVY = r"(\sqrt[3]{2}x+\sqrt[5]{3}y+\sqrt[7]{5}z)^{12}"
SYMPY_TRAPS = [
    # merged roots of big radicands are factored
    ("".join(rf"\sqrt{{10^{{290}}+{i}}}" for i in range(1, 16)), "1", 0.0),
    # 1/r^{1/q} is rationalised by factoring r^{q-1}
    (r"(\sqrt[7]{\sqrt[17]{\sqrt[35]{191066056}}})^{-81}", r"\pi", 0.0),
    (r"\frac{z}{\sqrt[331]{984017284} z}", "x", 0.0),
    (r"\frac{1}{\sqrt{191066056}\sqrt[3]{191066056}\sqrt[5]{191066056}}", "1", 0.0),
    # integer powers distribute over products: (85!)^{86 * 95 * 31}
    (r"\frac{\sqrt[8]{x} y}{(((\frac{85!}{z})^{86})^{95})^{31}}", "1", 0.0),
    # a symbolic power of a 2,000-digit number asks whether it is prime
    (r"x-((68123236063865213594779111169)^{76})^{x}+\pi", "x", 0.0),
    # deciding (b^k)^e = b^{ke} expands (re b + i im b)^k
    (r"\sqrt{(\frac{1}{2}-y^{80})^{2}}", r"\sqrt{(\frac{1}{2}-y^{80})^{2}}+0", 0.0),
    (r"\sqrt{((z-(\sqrt[36]{x})^{53})^{-86})^{z}}", "1", 0.0),
    # common denominators of big fractions
    (
        r"y-((\frac{y}{z})^{\sqrt{y}}-y)^{-61}-((\frac{z}{y})^{\sqrt{z}}-z)^{-61}"
        r"-((\frac{x}{y})^{\sqrt{x}}-x)^{-61}",
        "y",
        0.0,
    ),
    # evaluating a tower needs as many digits as its exponent has
    ("x^{30}", r"(x-z)^{(y^{\pi})^{4251\pi}}", 0.0),
    # expand() splits 2^{(x+3154)^{14}} into powers with 49-digit exponents
    (TOWER, rf"\frac{{2{TOWER}}}{{2}}", 0.0),
    # denesting many nested roots
    (rf"\sqrt{{{R4}}}", r"\sqrt{\sqrt{2}+2\sqrt{3}+4+2\sqrt{5}+\sqrt{6}}", 0.0),
    # within bounds: slow-ish but proven
    (rf"\frac{{{HEAVY}(x^3-y^3)}}{{x-y}}", rf"{HEAVY}(x^2+xy+y^2)", 1.0),
    # sixteen heavy boxes do not add up: the per-call budget runs out
    ("".join(rf"\boxed{{\frac{{{HEAVY}(x^3-y^3)}}{{x-y}}+{i}-{i}}}" for i in range(16)),
     rf"{HEAVY}(x^2+xy+y^2)", 0.0),
]


def boxed_unless_boxed(completion: str) -> str:
    return completion if "\\boxed" in completion else f"\\boxed{{{completion}}}"


@pytest.mark.parametrize(
    ("completion", "answer", "expected"),
    PATHOLOGICAL + [(boxed_unless_boxed(c), a, e) for c, a, e in SYMPY_TRAPS],
)
def test_pathological_inputs_finish_fast(completion: str, answer: str, expected: float) -> None:
    # The verdict the bounds give; their speed (under 1 s of CPU each) is bench/time_bounds.py's.
    verifier_math.clear_caches()  # the cold path, not a cached parse
    assert boxed_math(completion, answer) == expected


def test_caches_never_change_a_verdict() -> None:
    # The symbolic verdict cache stores (verdict, cost) and the caller still pays the
    # cost from its own budget, so a warm cache must give the cold verdicts, budget
    # traps included (the sixteen heavy boxes run out of budget either way).
    cases = [(boxed_unless_boxed(c), a) for c, a, _ in SYMPY_TRAPS + DECISIONS]
    cases += [(c, a) for c, a in CORRECT + WRONG + HIDDEN_HEDGES + NOTATION + NOTATION_NEAR_MISSES]
    cold = []
    for completion, answer in cases:
        verifier_math.clear_caches()
        cold.append(boxed_math(completion, answer))
    warm = [boxed_math(c, a) for c, a in cases]
    assert warm == cold == [boxed_math(c, a) for c, a in cases]


def test_int_digit_limit_is_left_alone() -> None:
    get_limit = getattr(sys, "get_int_max_str_digits", None)
    before = get_limit() if get_limit else None
    assert boxed_math(r"\boxed{5}", "9" * 100_000) == 0.0
    assert boxed_math(r"\boxed{0.5}", "0." + "5" + "0" * 100_000) == 1.0
    assert (get_limit() if get_limit else None) == before


def test_cached_exact_numbers_do_not_depend_on_the_int_digit_limit() -> None:
    # exact numbers of at most 600 characters are cached (a gold repeats G times): that
    # is fewer digits than any int() limit allows (640 at least), so every limit gives
    # the cached value, and a longer number is never cached
    from rlvr.verifiers.math.normalise import _exact_number, _exact_number_uncached

    get_limit, set_limit = getattr(sys, "get_int_max_str_digits", None), getattr(sys, "set_int_max_str_digits", None)
    if set_limit is None:
        pytest.skip("no int digit limit in this Python")
    before = get_limit()
    numbers = ["9" * 600, "-" + "9" * 599, "0." + "3" * 598, "1" * 300 + "/" + "7" * 299, "9" * 1000, "9" * 4001]
    verifier_math.clear_caches()
    try:
        for limit in (4300, 640, 0, 640):  # the cache is filled under one limit, read under the next
            set_limit(limit)
            assert [_exact_number(n) for n in numbers] == [_exact_number_uncached(n) for n in numbers]
    finally:
        set_limit(before)
    assert _exact_number("9" * 600) == int("9" * 600)


def test_huge_numbers_compare_by_canonical_digits() -> None:
    gold = "7" * 100_000
    # The candidate box cannot hold it (500 characters), but gold-vs-gold comparisons
    # of huge decimals still work and are exact: spelling variants normalise away.
    assert boxed_math(r"\boxed{" + "7" * 450 + "}", gold) == 0.0
    assert boxed_math(r"\boxed{" + "7" * 450 + "}", "0" * 10_000 + "7" * 450) == 1.0


# --------------------------------------------------------------- speed of fast path


def test_fast_path_does_not_import_sympy() -> None:
    # A fresh interpreter, so that nothing imported by other tests muddies the check.
    script = """
import sys
from rlvr.verifiers.math import boxed_math
cases = [("\\\\boxed{42}", "42"), ("\\\\boxed{41}", "42"), ("\\\\boxed{1,000}", "1000"),
         ("\\\\boxed{0.5}", "\\\\frac{1}{2}"), ("\\\\boxed{1/2}", "0.5"),
         ("\\\\boxed{-3}", "-3.0")]
verdicts = [boxed_math(c, a) for c, a in cases]
assert verdicts == [1.0, 0.0, 1.0, 1.0, 1.0, 1.0], verdicts  # no sympy needed
assert "sympy" not in sys.modules, "fast path imported sympy"
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr


def test_fast_path_costs_microseconds() -> None:
    # What it costs is counted: no call reaches sympy's verdict. Its time (under 200 us a call,
    # typically ~10 us) is bench/time_bounds.py's.
    cases = [(box("42"), "42"), (box("17"), "42"), (box(r"\frac{3}{4}"), "0.75")] * 1000
    verifier_math.clear_caches()  # every verdict worked out, none recalled
    sympy_calls = 0
    real = equal._sympy_verdict

    def counted(*args, **kwargs):
        nonlocal sympy_calls
        sympy_calls += 1
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(equal, "_sympy_verdict", counted)
        assert [boxed_math(c, a) for c, a in cases] == [1.0, 0.0, 1.0] * 1000
    assert sympy_calls == 0


# ------------------------------------------------------------------------- threads

ALL_CASES = (
    [(c, a, 1.0) for c, a in CORRECT + NOTATION]
    + [(c, a, 0.0) for c, a in WRONG + HIDDEN_HEDGES + NOTATION_NEAR_MISSES]
    + DECISIONS
    + [(c, a, e) for c, a, e in PATHOLOGICAL if len(c) + len(a) < 50_000]
)


def test_same_verdicts_from_a_thread() -> None:
    results: list[float] = []

    def run_all() -> None:
        results.extend(boxed_math(c, a) for c, a, _ in ALL_CASES)

    worker = threading.Thread(target=run_all)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive()
    assert results == [e for _, _, e in ALL_CASES]


def test_same_verdicts_from_a_thread_pool() -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda case: boxed_math(case[0], case[1]), ALL_CASES))
    assert results == [e for _, _, e in ALL_CASES]


def _score_cases(cases: list[tuple[str, str, float]]) -> list[float]:
    return [boxed_math(c, a) for c, a, _ in cases]


def test_same_verdicts_from_a_worker_process() -> None:
    # A spawned worker is what Ray or a process pool gives: no main-thread signal
    # handlers inherited, a fresh import of the verifier. Verdicts must not change.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = pool.submit(_score_cases, ALL_CASES).result(timeout=120)
    assert results == [e for _, _, e in ALL_CASES]


def test_pathological_inputs_finish_fast_in_a_thread() -> None:
    # The time bounds are size bounds, not signals, so they hold off the main thread.
    cases = PATHOLOGICAL + [(boxed_unless_boxed(c), a, e) for c, a, e in SYMPY_TRAPS]
    verdicts: list[float] = []

    def run_all() -> None:
        for completion, answer, _ in cases:
            verifier_math.clear_caches()
            verdicts.append(boxed_math(completion, answer))

    worker = threading.Thread(target=run_all)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive()
    assert verdicts == [e for _, _, e in cases]


# ------------------------------------------------------------------------- property


@settings(max_examples=200, deadline=None)
@given(a=st.integers(min_value=-(10**60), max_value=10**60), b=st.integers())
def test_integers_property(a: int, b: int) -> None:
    completion = f"Let me think step by step... so the result is \\boxed{{{a}}}."
    assert boxed_math(completion, str(a)) == 1.0
    if b != a:
        assert boxed_math(completion, str(b)) == 0.0
        assert boxed_math(f"... \\boxed{{{b}}}", str(a)) == 0.0


@settings(max_examples=100, deadline=None)
@given(
    p=st.integers(min_value=-1000, max_value=1000),
    q=st.integers(min_value=1, max_value=1000),
)
def test_fraction_spellings_property(p: int, q: int) -> None:
    sign = "-" if p < 0 else ""
    spellings = [f"{p}/{q}", f"{sign}\\frac{{{abs(p)}}}{{{q}}}", f"\\frac{{{p}}}{{{q}}}"]
    for spelling in spellings:
        assert boxed_math(f"\\boxed{{{spelling}}}", f"{p}/{q}") == 1.0
    assert boxed_math(f"\\boxed{{{p}/{q}}}", f"{p + 1}/{q}") == 0.0
