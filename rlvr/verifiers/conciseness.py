"""Brevity: a correct answer in fewer characters scores more (a conciseness term for a reward mix).

    brevity(completion, answer) = boxed_math(completion, answer) * budget / (budget + len(completion))

Gated on correctness, as Kimi k1.5's length reward is (Kimi Team 2025, sec. 2.3.3: only correct
answers earn the length bonus): a length reward alone is won by writing nothing, and an ungated
one pays wrong short guesses. It falls smoothly with length and never reaches 0 for a right
answer (1/2 at `budget` characters), so a long honest answer still scores. Use it as a second term beside the correctness verifier with a
small weight (`reward.functions = ["boxed_math", "brevity"]`, `reward.weights = [1.0, 0.2]`,
`reward.correctness = "boxed_math"`), so that being right always outweighs being short: the most
brevity adds is its weight, and only to an answer that is already right. What it can change is
*how* a right answer is written: shorter reasoning where the model can afford it.

>>> brevity("2+3=5\\n\\\\boxed{5}", "5"), brevity("\\\\boxed{5}", "5"), brevity("\\\\boxed{6}", "5")
(0.810126582278481, 0.8767123287671232, 0.0)
"""

from __future__ import annotations

from rlvr.verifiers.math import boxed_math

__all__ = ["brevity"]

BUDGET_CHARS = 64


def brevity(completion: str, answer: str, budget: int = BUDGET_CHARS) -> float:
    """Correct (boxed_math) and short: budget / (budget + len(completion)); 0 when wrong."""
    if not isinstance(completion, str) or boxed_math(completion, answer) != 1.0:
        return 0.0
    return budget / (budget + len(completion))
