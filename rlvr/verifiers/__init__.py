"""(2) Verifiers: completion text + gold answer -> reward, deterministic.

A verifier is any function `f(completion: str, answer: str) -> float`. The registry
maps config names (`reward.verifier = "boxed_math"`) to functions; `register` adds your own.

Built in (see docs/verifiers.md):

* ``boxed_math``: strict math on the last ``\\boxed{...}`` (:mod:`rlvr.verifiers.math`);
* ``python_code`` / ``python_code_all_or_nothing``: the last ```python block run on the
  gold tests (a dict, or its JSON text) in a bubblewrap sandbox (:mod:`rlvr.verifiers.code`);
* ``think_format``: exactly one ``<think>...</think>`` block, then an answer.

:mod:`rlvr.verifiers.pool` scores many items in worker processes with hard timeouts.
"""

from __future__ import annotations

from typing import Callable, Protocol

from rlvr.verifiers.code import python_code, python_code_all_or_nothing
from rlvr.verifiers.format import think_format
from rlvr.verifiers.math import boxed_math, extract_last_boxed


class Verifier(Protocol):
    def __call__(self, completion: str, answer: str) -> float: ...


VERIFIERS: dict[str, Verifier] = {
    "boxed_math": boxed_math,
    "python_code": python_code,
    "python_code_all_or_nothing": python_code_all_or_nothing,
    "think_format": think_format,
}


def register(name: str) -> Callable[[Verifier], Verifier]:
    """Decorator: make a verifier selectable by name in config."""

    def add(fn: Verifier) -> Verifier:
        if name in VERIFIERS:
            raise ValueError(f"verifier {name!r} is already registered")
        VERIFIERS[name] = fn
        return fn

    return add


def get_verifier(name: str) -> Verifier:
    try:
        return VERIFIERS[name]
    except KeyError:
        raise ValueError(f"unknown verifier {name!r}; registered: {sorted(VERIFIERS)}") from None


__all__ = [
    "VERIFIERS",
    "Verifier",
    "boxed_math",
    "extract_last_boxed",
    "get_verifier",
    "python_code",
    "python_code_all_or_nothing",
    "register",
    "think_format",
]
