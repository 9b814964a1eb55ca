"""Extraction: the answer a completion commits to, the content of its last box.

A linear scan with balanced-brace matching (no regex backtracking, no recursion), so
10,000 nested braces or a megabyte of text cost milliseconds.
"""

from __future__ import annotations

import re

__all__ = ["MAX_ANSWER_CHARS", "extract_last_boxed"]

MAX_ANSWER_CHARS = 500
_A = re.ASCII  # "\d", "\s" must never match full-width digits or other look-alikes

# Every command that draws a box around its last argument: a box anywhere is an answer
# the completion shows, so the hedging guard must see all of them. The number says how
# many colour arguments come before the boxed one (``\fcolorbox{frame}{fill}{...}``).
_BOX_CMD = re.compile(r"\\(boxed|fbox|framebox|colorbox|fcolorbox)(?![A-Za-z])\s*", _A)
_COLOUR_ARGS = {"boxed": 0, "fbox": 0, "framebox": 0, "colorbox": 1, "fcolorbox": 2}
_OPTIONAL_ARGS = {"boxed": 0, "fbox": 0, "framebox": 2, "colorbox": 1, "fcolorbox": 1}
_OPTIONAL_ARG = re.compile(r"\[[^\[\]{}]*\]\s*", _A)  # [width], [position], [colour model]


def _match_brace(text: str, open_at: int) -> int | None:
    """Index of the ``}`` closing the ``{`` at ``open_at``, or None if unclosed.

    A linear scan with a depth counter (no recursion, so 10,000 nested braces are
    fine). A backslash escapes the next character so ``\\{`` and ``\\}`` do not count.
    """
    depth = 0
    i, n = open_at, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def _content_brace(text: str, m: re.Match[str]) -> tuple[int | None, int]:
    """Where the boxed argument of the box command ``m`` opens, and where scanning goes on.

    Skips ``\\framebox``'s ``[width][position]`` and the colour arguments of
    ``\\colorbox``/``\\fcolorbox``. ``(None, pos)`` for a malformed command; ``pos`` is
    ``len(text)`` when an unclosed brace swallowed the rest of the text.
    """
    pos = m.end()
    for _ in range(_OPTIONAL_ARGS[m.group(1)]):
        opt = _OPTIONAL_ARG.match(text, pos)
        if opt is None:
            break
        pos = opt.end()
    for _ in range(_COLOUR_ARGS[m.group(1)]):
        if text[pos : pos + 1] != "{":
            return None, pos
        end = _match_brace(text, pos)
        if end is None:
            return None, len(text)
        pos = end + 1
        while pos < len(text) and text[pos].isspace():
            pos += 1
    if text[pos : pos + 1] != "{":
        return None, pos
    return pos, pos


def _boxes(text: str) -> list[str | None]:
    """Raw contents of the top-level boxes in order; None marks a malformed box.

    A malformed box is a box command without a ``{`` or with an unclosed one. An
    unclosed brace swallows the rest of the text, so it is always the last entry.
    """
    found: list[str | None] = []
    pos = 0
    while (m := _BOX_CMD.search(text, pos)) is not None:
        start, pos = _content_brace(text, m)
        if start is None:
            found.append(None)
            if pos >= len(text):
                break
            continue
        end = _match_brace(text, start)
        if end is None:
            found.append(None)
            break
        found.append(text[start + 1 : end])
        pos = end + 1
    return found


def _unwrap_nested(content: str) -> str:
    """``\\boxed{\\boxed{5}}`` -> ``5``: strip boxes that wrap the whole content."""
    while True:
        s = content.strip()
        m = _BOX_CMD.match(s)
        if m is None or not s.endswith("}"):
            return content
        start, _ = _content_brace(s, m)
        if start is None or _match_brace(s, start) != len(s) - 1:
            return content
        content = s[start + 1 : -1]


def extract_last_boxed(text: str) -> str | None:
    """Content of the last box in ``text``: ``\\boxed``, ``\\fbox``, ``\\framebox``,
    ``\\colorbox`` or ``\\fcolorbox`` (the argument they draw a box around).

    Returns None when there is no box, when the last box is malformed (no brace or an
    unclosed one) or when its content is longer than ``MAX_ANSWER_CHARS``. A box that
    wraps the whole content of the box around it is unwrapped. The content is returned
    as written (not normalised), so it may be empty.

    >>> extract_last_boxed(r"so $x = \\boxed{\\frac{1}{2}}$, i.e. \\boxed{ \\boxed{0.5} }")
    '0.5'
    >>> extract_last_boxed(r"\\boxed{1} then \\boxed{2") is None
    True
    """
    try:
        boxes = _boxes(text)
        if not boxes or boxes[-1] is None or len(boxes[-1]) > MAX_ANSWER_CHARS:
            return None
        return _unwrap_nested(boxes[-1])
    except Exception:  # a reward must never crash the training loop
        return None
