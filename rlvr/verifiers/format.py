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

__all__ = ["mode_format", "think_format", "think_format_ok"]

OPEN, CLOSE = "<think>", "</think>"


def _one_block(completion: str) -> tuple[str, str] | None:
    """(thought, answer) when ``completion`` opens with its one and only think block, else None."""
    if not isinstance(completion, str):
        return None
    text = completion.lstrip()
    if not text.startswith(OPEN) or completion.count(OPEN) != 1 or completion.count(CLOSE) != 1:
        return None
    thought, _, answer = text[len(OPEN) :].partition(CLOSE)
    return thought, answer


def think_format_ok(completion: str) -> bool:
    """Whether ``completion`` is exactly one think block followed by an answer."""
    parts = _one_block(completion)
    return parts is not None and bool(parts[0].strip()) and bool(parts[1].strip())


def think_format(completion: str, answer: str = "") -> float:
    """1.0 if the completion is ``<think>reasoning</think> answer`` (see module doc), else 0.0."""
    return 1.0 if think_format_ok(completion) else 0.0


def empty_block_ok(completion: str) -> bool:
    """Whether ``completion`` is an empty think block (whitespace inside allowed), then an answer:
    how Qwen3's non-thinking mode writes (its template puts the empty block in place)."""
    parts = _one_block(completion)
    return parts is not None and not parts[0].strip() and bool(parts[1].strip())


def mode_format(completion: str, answer: str, mode: str) -> float | None:
    """The format the mode switch asks for (mode fusion, Qwen3 tech report sec. 4.3): for a
    ``think`` prompt, exactly one non-empty ``<think>`` block then an answer (as think_format); for
    a ``no_think`` prompt, an empty block ``<think></think>`` then the answer. ``mode`` is the
    example's field (the lab's fused task sets it); another mode is not this term's business (None).

    >>> mode_format("<think>7+6=13</think>13", "13", "think"), mode_format("<think></think>13", "13", "think")
    (1.0, 0.0)
    >>> mode_format("<think></think>13", "13", "no_think"), mode_format("<think>7+6=13</think>13", "13", "no_think")
    (1.0, 0.0)
    """
    if mode == "think":
        return think_format(completion)
    if mode == "no_think":
        return 1.0 if empty_block_ok(completion) else 0.0
    return None
