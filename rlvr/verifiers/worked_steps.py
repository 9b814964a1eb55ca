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
* **One false equation voids it.** Any `a op b = c` in the completion that is arithmetically false
  (division included: inexact or by zero is false) makes the term 0, so a slip is never paid for
  the steps around it.
* **Numbers are whole tokens.** `2.5 + 1 = 3.5` is not read as `5 + 1 = 3`; a number glued to a
  decimal point or another digit is not an operand.

What it cannot see: arithmetic written in words (`25 minus 19 is 12`) or chained past its first
`=` (`5 * 5 = 25 - 19 = 6` is read as `5 * 5 = 25`). Neither earns a gold step, but neither voids
the term either; the lab's completions write the trained one-equation-per-line form.

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
# signs, the middle dots, the letter x between numbers, and the Unicode minus and en dash. (Not
# ":", which is as often a label or a ratio as a division.)
OPERATORS = {"+": "+", "-": "-", "\u2212": "-", "\u2013": "-", "*": "*", "x": "*", "X": "*", "\u00d7": "*",
             "\u00b7": "*", "\u22c5": "*", "/": "/", "\u00f7": "/"}
_NUMBER = r"(?<![\d.])(\d+)(?!\.\d)"
EQUATION = re.compile(_NUMBER + r"\s*([" + re.escape("".join(OPERATORS)) + r"])\s*" + _NUMBER + r"\s*=\s*" + r"(\d+)(?![\d]|\.\d)")

Equation = tuple[int, str, int, int]


def equations(text: str) -> list[Equation]:
    """Every `a op b = c` written in `text`, in order, with the operator in ASCII."""
    return [(int(a), OPERATORS[op], int(b), int(c)) for a, op, b, c in EQUATION.findall(text)]


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
        if matched < len(gold) and _same(eq, gold[matched]):
            matched += 1
    return matched / len(gold)
