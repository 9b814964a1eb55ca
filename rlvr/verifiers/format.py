"""Format reward: one ``<think>...</think>`` block first, then a non-empty answer.

A format term is cheap to game if it is lenient (a policy learns to emit empty or
nested think blocks, or to keep "thinking" after the answer), so this one is strict:

* the completion starts with ``<think>`` (leading whitespace aside);
* exactly one ``<think>`` and exactly one ``</think>``, in that order, nothing nested;
* the reasoning inside is not blank, and the answer after ``</think>`` is not blank.

It checks form only, never correctness: combine it with a correctness verifier (a
small weight) rather than use it alone. The gold answer is ignored.

>>> think_format("<think>2 + 2 is 4</think> The answer is 4.", "4")
1.0
>>> think_format("<think>hmm</think> 4 <think>or 5?</think>", "4")
0.0
"""

from __future__ import annotations

__all__ = ["think_format", "think_format_ok"]

OPEN, CLOSE = "<think>", "</think>"


def think_format_ok(completion: str) -> bool:
    """Whether ``completion`` is exactly one think block followed by an answer."""
    if not isinstance(completion, str):
        return False
    text = completion.lstrip()
    if not text.startswith(OPEN) or completion.count(OPEN) != 1 or completion.count(CLOSE) != 1:
        return False
    thought, _, answer = text[len(OPEN) :].partition(CLOSE)
    return bool(thought.strip()) and bool(answer.strip())


def think_format(completion: str, answer: str = "") -> float:
    """1.0 if the completion is ``<think>reasoning</think> answer`` (see module doc), else 0.0."""
    return 1.0 if think_format_ok(completion) else 0.0
