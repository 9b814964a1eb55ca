"""The verifiers a config names: ``reward.functions = ["boxed_math"]`` -> a function.

A verifier is any function `f(completion: str, answer: str, **fields) -> float | None`.
:data:`VERIFIERS` maps config names to the built-ins; :func:`register` adds your own (list its
module in `reward.imports` to name it from a config or the CLI). How a name or an import path
becomes a function, and how it is called, is :mod:`rlvr.verifiers.contract`.

Built in (see docs/verifiers.md):

* ``boxed_math``: strict math on the last ``\\boxed{...}`` (:mod:`rlvr.verifiers.math`);
* ``python_code`` / ``python_code_all_or_nothing``: the last ```python block run on the
  gold tests (a dict, or its JSON text) in a bubblewrap sandbox (:mod:`rlvr.verifiers.code`);
  ``python_code_batched``: the same scores for a whole batch (repeats run once, programs of
  different problems one after another in shared jails, :mod:`rlvr.verifiers.code.served`);
* ``think_format``: exactly one ``<think>...</think>`` block, then an answer;
* ``mode_format``: the format a prompt's mode switch asks for (``think``: as think_format;
  ``no_think``: an empty block, then the answer);
* ``brevity``: a correct boxed answer in fewer characters scores more (a conciseness term for a
  reward mix, gated on boxed_math);
* ``worked_steps``: a process reward on written arithmetic: the share of the row's worked
  solution's equations written in order, 0 when any written equation is false
  (:mod:`rlvr.verifiers.worked_steps`);
* ``reasoning_gym``: reasoning-gym's own scorer for its generated tasks;
* ``tool_calls_ok`` / ``tool_used``: tool-use success of a multi-turn rollout (every call well formed and run;
  at least one ran), from its `tool_calls` column (:mod:`rlvr.verifiers.tool_use`).

>>> get_verifier("boxed_math")(r"so \\boxed{4}", "4")
1.0
"""

from __future__ import annotations

from typing import Callable, Protocol

from rlvr.verifiers.code import python_code, python_code_all_or_nothing, python_code_batched
from rlvr.verifiers.conciseness import brevity
from rlvr.verifiers.format import mode_format, think_format
from rlvr.verifiers.gym import reasoning_gym
from rlvr.verifiers.math import boxed_math
from rlvr.verifiers.tool_use import tool_calls_ok, tool_used
from rlvr.verifiers.worked_steps import worked_steps

__all__ = ["VERIFIERS", "Verifier", "get_verifier", "register"]


class Verifier(Protocol):
    def __call__(self, completion: str, answer: str) -> float | None: ...


VERIFIERS: dict[str, Verifier] = {
    "boxed_math": boxed_math,
    "python_code": python_code,
    "python_code_all_or_nothing": python_code_all_or_nothing,
    "python_code_batched": python_code_batched,
    "think_format": think_format,
    "brevity": brevity,
    "mode_format": mode_format,
    "reasoning_gym": reasoning_gym,
    "tool_calls_ok": tool_calls_ok,
    "tool_used": tool_used,
    "worked_steps": worked_steps,
}


def register(name: str) -> Callable[[Verifier], Verifier]:
    """Decorator: make a verifier selectable by name in config.

    Registering the same function again (its module imported twice, or reloaded) is harmless and
    keeps the newest definition; another function under a taken name is refused."""

    def add(fn: Verifier) -> Verifier:
        taken = VERIFIERS.get(name)
        if taken is not None and _identity(taken) != _identity(fn):
            raise ValueError(f"verifier {name!r} is already registered to {'.'.join(_identity(taken))}")
        VERIFIERS[name] = fn
        return fn

    return add


def _identity(fn: object) -> tuple[str, str]:
    return getattr(fn, "__module__", None) or "?", getattr(fn, "__qualname__", None) or repr(fn)


def get_verifier(name: str) -> Verifier:
    try:
        return VERIFIERS[name]
    except KeyError:
        raise ValueError(f"unknown verifier {name!r}; registered: {sorted(VERIFIERS)}") from None
