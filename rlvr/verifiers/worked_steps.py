"""A process reward on written arithmetic: how much of the gold working a completion writes, and
none of it when any equation it writes is false (a term for a reward mix beside boxed_math).

    worked_steps(completion, answer, solution) = 0          if any equation written is false
                                               = k / n      otherwise: n gold equations, of which the
                                                            first k are written in order (others may
                                                            come between)

A task whose rows carry a worked solution (the real-model lab's word problems: one equation per
step, `5 * 5 = 25`) makes every step checkable, so a completion that gets the answer wrong can still
be told apart from another by how far its working went right. Outcome rewards give both 0; this
term gives the one with two of three steps right 2/3 and the one with a slip 0, which is the
signal the lab's remaining failures (`25 - 19 = 12`) call for.

Each rule closes a way of earning it without doing the working:

* **Only the gold equations pay.** Extra true equations (`1 + 1 = 2`, a step restated) add
  nothing, so padding the working with easy arithmetic earns no more than leaving it out.
* **In order, from the first.** k counts the gold steps from the first that the written equations
  hold as a subsequence: the working is paid as far as it went right, and a later step written
  without the ones before it (copied from nowhere) earns nothing. `+` and `*` match either order
  of their operands.
* **One answer per step.** The first equation written on a step's two numbers is its answer: one
  with another operation (`25 + 19 = 44` before `25 - 19 = 6`) ends the count there, so writing
  every operation on the story's numbers (all true) cannot hold the gold step by luck. A step
  corrected after a wrong operation earns nothing from it on, as a slip does.
* **One false equation voids it.** Any `a op b = c` in the completion that is arithmetically false
  (division included: inexact or by zero is false) makes the term 0, so a slip is never paid for
  the steps around it. Every common spelling of the operators (fullwidth, Unicode, LaTeX's
  `\\times`) and of `=` (`==`, `&=`, `＝`) is read, and invisible characters are dropped first,
  so none hides a false equation.
* **Numbers are whole tokens.** `2.5 + 1 = 3.5` is not read as `5 + 1 = 3`; a number glued to a
  decimal point or another digit is not an operand, `1,200` is one number, a result glued to an
  exponent or fraction (`5^2`, `5²`, `3/4`) is not read, nor is a number past 100 digits (int()
  raises past 4300, which would drop the row's reward).
* **An equation is read whole or not at all.** One whose first number continues an expression
  (`10 - 3 - 2 = 5`, `7 * 4 + 6 = 34`, `-6 + 10 = 4`, `3^2 + 4 = 13`) is not read: its tail
  (`3 - 2 = 5`) is false when the whole is true, and true (`25 - 19 = 6` in `100 - 25 - 19 = 6`)
  when it is false.

What it cannot see: arithmetic written in words (`25 minus 19 is 12`), chained past its first
`=` (`5 * 5 = 25 - 19 = 6` is read as `5 * 5 = 25`) or of more than two numbers. None earns a gold
step, but none voids the term either; the lab's completions write the trained
one-equation-per-line form.

It does not judge the answer: a completion that writes every gold step and then boxes another
number keeps this term and loses boxed_math's. Weight it below the correctness term
(`reward.functions = ["boxed_math", "worked_steps"]`, `reward.weights = [1.0, 0.5]`,
`reward.correctness = "boxed_math"`), so that a right answer always outscores right working.
Rows without a worked solution (no equation in `solution`, or none at all) are not scored (None).
`solution` has no default on purpose: the reward contract fills a parameter from the row only
when it has none (a default marks a setting).

>>> worked_steps("5 * 5 = 25\\n25 - 19 = 6\\n\\\\boxed{6}", "6", "5 * 5 = 25\\n25 - 19 = 6\\n\\\\boxed{6}")
1.0
>>> worked_steps("5 * 5 = 25\\n25 - 19 = 12\\n\\\\boxed{12}", "6", "5 * 5 = 25\\n25 - 19 = 6\\n\\\\boxed{6}")
0.0
>>> worked_steps("5 * 5 = 25\\n25 - 9 = 16\\n\\\\boxed{16}", "6", "5 * 5 = 25\\n25 - 19 = 6\\n\\\\boxed{6}")
0.5
"""

from __future__ import annotations

import re

__all__ = ["worked_steps", "equations"]

# The spellings of the four operations a model writes: ASCII, the multiplication and division
# signs, the middle dots, the letter x between numbers, the Unicode minus, hyphens and en dash, the
# fullwidth and small forms, the math-block operators and LaTeX's. (Not ":", which is as often a
# label or a ratio as a division, nor the em dash, which is prose's.) A spelling left out hides a
# false equation: it is not read, so it cannot void the term.
OPERATORS = {"+": "+", "-": "-", "\u2212": "-", "\u2013": "-", "*": "*", "x": "*", "X": "*", "\u00d7": "*",
             "\u00b7": "*", "\u22c5": "*", "/": "/", "\u00f7": "/",
             "\uff0b": "+", "\ufe62": "+", "\uff0d": "-", "\ufe63": "-", "\u2010": "-", "\u2011": "-", "\u2012": "-",
             "\uff0a": "*", "\u2217": "*", "\u2219": "*", "\u2715": "*", "\u2716": "*", "\u2a09": "*", "\u2a2f": "*",
             "\uff0f": "/", "\u2215": "/", "\u2044": "/", "\\times": "*", "\\cdot": "*", "\\ast": "*", "\\div": "/"}
_OP = "|".join(re.escape(s) for s in sorted(OPERATORS, key=len, reverse=True))
_MINUS = re.escape("".join(s for s, op in OPERATORS.items() if op == "-"))
# A whole number: not glued to a decimal point, another digit or a thousands group (1,200 is one
# number), at most 100 digits (int() raises past 4300, and a raise drops the row's every term).
_NUMBER = r"(?<![\d.])(?!(?<=\d,)\d{3}(?!\d))(\d{1,3}(?:,\d{3}){1,30}|\d{1,100})(?!\d|\.\d|,\d{3}(?!\d))"
# What continues a number into an expression: to its left a minus or exponent glued to it (-6,
# 3^2) or an operator after a number or bracket on the same line (10 - 3 - 2, 7 * 4 + 6, 2 ** 3; a
# bullet's "- " and bold's "**" are none); to the right of the result an exponent, a fraction or a
# superscript.
_LEAD = r"(?:([\d)\]}][ \t]*(?:\*\*|\^|" + _OP + r")[ \t]*|[\^" + _MINUS + r"](?=\d)))?"
_TAIL = r"(?![\^\u00b2\u00b3\u00b9\u2070-\u2079\u00bc-\u00be\u2150-\u215e]|[/\u2044]\d)"
_EQUALS = r"(?:&\s*)?(?:==?|\uff1d|\ufe66)"
EQUATION = re.compile(_LEAD + _NUMBER + r"\s*(" + _OP + r")\s*" + _NUMBER + r"\s*" + _EQUALS + r"\s*" + _NUMBER + _TAIL)
# Characters that show nothing: removed first, so none splits a number or an operator from its
# operands (`6 +\u200b3 = 10` would hide a false equation; `1\u200b2 + 1 = 14` would read 2 + 1).
_INVISIBLE = re.compile("[\u00ad\u200b-\u200d\u2060\ufeff]")

Equation = tuple[int, str, int, int]


def equations(text: str) -> list[Equation]:
    """Every `a op b = c` written in `text`, in order, with the operator in ASCII."""
    found = EQUATION.findall(_INVISIBLE.sub("", text))
    return [(_int(a), OPERATORS[op], _int(b), _int(c)) for lead, a, op, b, c in found if not lead]


def _int(number: str) -> int:
    return int(number.replace(",", ""))


def _true(eq: Equation) -> bool:
    a, op, b, c = eq
    if op == "+":
        return a + b == c
    if op == "-":
        return a - b == c
    if op == "*":
        return a * b == c
    return b != 0 and a % b == 0 and a // b == c


def _same(written: Equation, gold: Equation) -> bool:
    if written == gold:
        return True
    a, op, b, c = written
    return op in "+*" and (b, op, a, c) == gold


def worked_steps(completion: str, answer: str, solution: str | None) -> float | None:
    """The share of the gold solution's equations written in order from the first; 0 when any written one is false."""
    gold = equations(solution or "")
    if not gold:
        return None
    if not isinstance(completion, str):
        return 0.0
    written = equations(completion)
    if not all(_true(eq) for eq in written):
        return 0.0
    matched = 0
    for eq in written:
        if matched == len(gold):
            break
        if _same(eq, gold[matched]):
            matched += 1
        elif {eq[0], eq[2]} == {gold[matched][0], gold[matched][2]} and not any(_same(eq, g) for g in gold[:matched]):
            break  # another operation on this step's numbers came first: a guess among them, not the working
    return matched / len(gold)
