"""(2) Verifiers: completion text + gold answer -> reward, deterministic.

A verifier is any function `f(completion: str, answer: str) -> float`. The registry
maps config names (`reward.verifier = "boxed_math"`) to functions; `register` adds your own.
"""

from __future__ import annotations

from typing import Callable, Protocol

from rlvr.verifiers.math import boxed_math, extract_last_boxed


class Verifier(Protocol):
    def __call__(self, completion: str, answer: str) -> float: ...


VERIFIERS: dict[str, Verifier] = {"boxed_math": boxed_math}


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


__all__ = ["VERIFIERS", "Verifier", "boxed_math", "extract_last_boxed", "get_verifier", "register"]
