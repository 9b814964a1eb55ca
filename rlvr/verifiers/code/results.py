"""Decoding what the sandbox sends back: a flat token list, rebuilt strictly and with bounds.

The runner encodes a probe's value in prefix order (a container is its tag and its length, then
its items), so the host decodes without recursion. The line is untrusted (the program shares the
sandbox with the runner): decoding bounds tokens, depth, integer width and hashing work, and any
failure is a `JudgeError` that fails the test, never an exception out of the verifier.

Besides built-in scalars and containers, the values tests convert arrive as data of the host's
own types: ``range``, ``Fraction``, ``Decimal``, ``deque``, dict views (rebuilt over a plain
dict) and iterators (a `ReturnedIterator` over the items the sandbox took from it).
`encode_value` is the other direction: the host's data arguments of a probe ``{"call", "args",
"kwargs"}``, in the same tokens (built-in scalars and containers only).
"""

from __future__ import annotations

from collections import deque
from decimal import Decimal
from fractions import Fraction
from typing import Any

from rlvr.verifiers.code.trusted import (
    MAX_DECIMAL_DIGITS,
    MAX_DEPTH,
    MAX_FRACTION_BITS,
    MAX_INT_BITS,
    MAX_LENGTH,
    MAX_NODES,
    JudgeError,
    check_hashes,
    checked,
)


# Tags followed by a count and that many members (a dict and an items view: 2 per entry).
_CONTAINERS: dict[str, type] = {"l": list, "t": tuple, "S": set, "z": frozenset, "d": dict}
_CONTAINER_LIKE = {"K", "V", "W", "q", "I", "J"}  # keys/values/items views, deque, iterators (see _runner._tag_other)
_PAIRED = {"d", "W"}
_HASHED = {"S", "z", "d", "K", "W"}  # rebuilding hashes every member: the work is charged


class ReturnedIterator:
    """An iterator the program returned (a generator, ``map``, ``zip``...): the items the sandbox
    took from it, in order. The sandbox stops at a bound (an infinite generator never ends), so
    reading past the items of one it cut fails the test instead of ending the iteration."""

    def __init__(self, items: list, complete: bool) -> None:
        self._items, self._complete, self._pos = items, complete, 0

    def __iter__(self) -> "ReturnedIterator":
        return self

    def __next__(self) -> Any:
        if self._pos < len(self._items):
            self._pos += 1
            return self._items[self._pos - 1]
        if self._complete:
            raise StopIteration
        raise JudgeError(f"the test reads past the {len(self._items)} items the sandbox took from the program's iterator")

    def fresh(self) -> "ReturnedIterator":
        """The same result unread: each evaluation of a probe is a new call in Python."""
        return ReturnedIterator(self._items, self._complete)


def decode_value(tokens: Any) -> Any:
    """Rebuild a value from the runner's flat tokens, strictly; raises JudgeError on anything
    malformed, too deep, too large or built to be slow (colliding hashes). The runner's
    ``_untag`` is its unbounded twin for the host's own data arguments."""
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
                value = _int(text())
            elif tag == "f":
                value = float.fromhex(text())
            elif tag == "c":
                value = complex(float.fromhex(text()), float.fromhex(text()))
            elif tag == "s":
                value = text()
            elif tag == "b":
                value = bytes.fromhex(text())
            elif tag == "R":
                value = _range(_int(text()), _int(text()), _int(text()))
            elif tag == "Q":
                numerator, denominator = text(), text()
                if len(numerator) + len(denominator) > MAX_FRACTION_BITS // 4 + 4:  # before the gcd that normalises it
                    raise JudgeError("fraction too large")
                value = Fraction(_int(numerator), _int(denominator))
            elif tag == "D":
                value = _decimal(text())
            elif tag in _CONTAINERS or tag in _CONTAINER_LIKE:
                count = take()
                if type(count) is not int or not 0 <= count <= MAX_NODES:
                    raise JudgeError("malformed value")
                if len(stack) >= MAX_DEPTH:
                    raise JudgeError("value too deep")
                stack.append([tag, count * (2 if tag in _PAIRED else 1), [], nodes])
                value = _EMPTY
            else:
                raise JudgeError("malformed value")
        except (ValueError, OverflowError, ZeroDivisionError, ArithmeticError):
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
            if kind in _HASHED:  # hashing the members walks their subtrees again: charged
                work += nodes - opened
                if work > 4 * MAX_NODES:
                    raise JudgeError("value too costly to rebuild")
            value = _build(kind, items)
        if not stack and value is not _EMPTY:
            if pos != len(tokens):
                raise JudgeError("malformed value")
            return result


_EMPTY = object()


def _int(digits: str) -> int:
    if len(digits) > MAX_INT_BITS // 4 + 2:
        raise JudgeError("integer too large")
    return int(digits, 16)


def _range(start: int, stop: int, step: int) -> range:
    value = range(start, stop, step)
    if len(value) > MAX_LENGTH:  # lazy here, but list(), sorted() or a comparison walk it all
        raise JudgeError(f"range of more than {MAX_LENGTH} items")
    return value


def _decimal(text: str) -> Decimal:
    if len(text) > MAX_DECIMAL_DIGITS + 32:  # digits, a sign, a point and an exponent
        raise JudgeError("decimal too long")
    return checked(Decimal(text))  # exponent and digits within the judge's bounds


def _build(kind: str, items: list) -> Any:
    try:
        if kind == "l":
            return items
        if kind == "t":
            return tuple(items)
        if kind == "d":
            keys = items[0::2]
            return dict(zip(check_hashes(keys, "dict"), items[1::2]))
        if kind == "W":
            return dict(zip(check_hashes(items[0::2], "dict view"), items[1::2])).items()
        if kind == "K":
            return dict.fromkeys(check_hashes(items, "dict view")).keys()
        if kind == "V":
            return dict(enumerate(items)).values()
        if kind == "q":
            return deque(items)
        if kind in "IJ":
            return ReturnedIterator(items, complete=kind == "I")
        return _CONTAINERS[kind](check_hashes(items, "set"))
    except TypeError:  # an unhashable member: a forged line
        raise JudgeError("malformed value") from None


_ENCODED_SCALARS: dict[type, str] = {type(None): "N", int: "i", float: "f", complex: "c", str: "s", bytes: "b"}
_ENCODED_CONTAINERS: dict[type, str] = {list: "l", tuple: "t", set: "S", frozenset: "z", dict: "d"}


def encode_value(value: Any) -> list:
    """The host's data (a probe's arguments) as the runner's flat tokens: built-in scalars and
    containers (a subclass, such as ``Counter``, as its base type's value), at most `MAX_NODES`
    values and `MAX_DEPTH` levels. Anything else (a function, a class instance, a ``Fraction``)
    is not data the program can receive: `JudgeError` naming its type, which fails the test.

    The twin of the runner's ``_tag`` for built-in data (the runner is standard library only and
    imports nothing of rlvr): both write the same tokens, tested token for token."""
    out: list = []
    todo, nodes = [(value, 0)], 0
    while todo:
        item, depth = todo.pop()
        nodes += 1
        if nodes > MAX_NODES or depth > MAX_DEPTH:
            raise JudgeError("argument too large to send to the program")
        kind = type(item)
        if kind is bool:
            out.append("T" if item else "F")
            continue
        base = kind if kind in _ENCODED_SCALARS or kind in _ENCODED_CONTAINERS else next(
            (b for b in (*_ENCODED_SCALARS, *_ENCODED_CONTAINERS) if b is not type(None) and isinstance(item, b)), None)
        if base is None:
            raise JudgeError(f"an argument of type {kind.__name__} is not data a call into the program can receive "
                             "(built-in scalars and containers only)")
        if base in _ENCODED_SCALARS:
            out.append(_ENCODED_SCALARS[base])
            if base is int:
                out.append(format(int(item), "x"))
            elif base is float:
                out.append(float(item).hex())
            elif base is complex:
                out += [item.real.hex(), item.imag.hex()]
            elif base is str:
                out.append(str.__str__(item))
            elif base is bytes:
                out.append(bytes(item).hex())
            continue
        if nodes + len(item) * (2 if base is dict else 1) > MAX_NODES:
            raise JudgeError("argument too large to send to the program")
        out += [_ENCODED_CONTAINERS[base], len(item)]
        members = [x for kv in dict.items(item) for x in kv] if base is dict else list(item)
        todo.extend((m, depth + 1) for m in reversed(members))
    return out
