"""Decoding what the sandbox sends back: a flat token list, rebuilt strictly and with bounds.

The runner encodes a probe's value in prefix order (a container is its tag and its length, then
its items), so the host decodes without recursion. The line is untrusted (the program shares the
sandbox with the runner): decoding bounds tokens, depth, integer width and hashing work, and any
failure is a `JudgeError` that fails the test, never an exception out of the verifier.
"""

from __future__ import annotations

from typing import Any

from rlvr.verifiers.trusted import MAX_DEPTH, MAX_INT_BITS, MAX_NODES, JudgeError, check_hashes


_CONTAINERS: dict[str, type] = {"l": list, "t": tuple, "S": set, "z": frozenset, "d": dict}


def decode_value(tokens: Any) -> Any:
    """Rebuild a value from the runner's flat tokens, strictly; raises JudgeError on anything
    malformed, too deep, too large or built to be slow (colliding hashes)."""
    if not isinstance(tokens, list) or not tokens or len(tokens) > 3 * MAX_NODES:
        raise JudgeError("malformed value")
    pos = 0

    def take() -> Any:
        nonlocal pos
        if pos >= len(tokens):
            raise JudgeError("malformed value")
        pos += 1
        return tokens[pos - 1]

    def text() -> str:
        value = take()
        if type(value) is not str:
            raise JudgeError("malformed value")
        return value

    # An explicit stack of [kind, expected count, items]: no recursion, whatever the depth.
    stack: list[list] = []
    nodes = work = 0
    result: Any = None
    while True:
        nodes += 1
        if nodes > MAX_NODES:
            raise JudgeError("value too large")
        tag = text()
        try:
            if tag == "N":
                value: Any = None
            elif tag in ("T", "F"):
                value = tag == "T"
            elif tag == "i":
                digits = text()
                if len(digits) > MAX_INT_BITS // 4 + 2:
                    raise JudgeError("integer too large")
                value = int(digits, 16)
            elif tag == "f":
                value = float.fromhex(text())
            elif tag == "c":
                value = complex(float.fromhex(text()), float.fromhex(text()))
            elif tag == "s":
                value = text()
            elif tag == "b":
                value = bytes.fromhex(text())
            elif tag in _CONTAINERS:
                count = take()
                if type(count) is not int or not 0 <= count <= MAX_NODES:
                    raise JudgeError("malformed value")
                if len(stack) >= MAX_DEPTH:
                    raise JudgeError("value too deep")
                stack.append([tag, count * (2 if tag == "d" else 1), [], nodes])
                value = _EMPTY
            else:
                raise JudgeError("malformed value")
        except (ValueError, OverflowError):
            raise JudgeError("malformed value") from None
        while True:  # close every container this value completes
            if value is not _EMPTY:
                if not stack:
                    result = value
                    break
                stack[-1][2].append(value)
            if not stack or len(stack[-1][2]) < stack[-1][1]:
                break
            kind, _, items, opened = stack.pop()
            if kind in "Sdz":  # hashing the members walks their subtrees again: charged
                work += nodes - opened
                if work > 4 * MAX_NODES:
                    raise JudgeError("value too costly to rebuild")
            value = _build(kind, items)
        if not stack and value is not _EMPTY:
            if pos != len(tokens):
                raise JudgeError("malformed value")
            return result


_EMPTY = object()


def _build(kind: str, items: list) -> Any:
    try:
        if kind == "l":
            return items
        if kind == "t":
            return tuple(items)
        if kind == "d":
            keys = items[0::2]
            return dict(zip(check_hashes(keys, "dict"), items[1::2]))
        return _CONTAINERS[kind](check_hashes(items, "set"))
    except TypeError:  # an unhashable member: a forged line
        raise JudgeError("malformed value") from None
