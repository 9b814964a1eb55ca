"""Small programming problems for the lab (data.source = "code"): write `f` from a few examples.

Each problem is a hidden function of one integer from a family of graded difficulty (level =
family), shown by its values at a few points; the model writes it as a Python program and the
sandboxed `python_code` verifier runs it on other points, comparing with integer literals:

    level 1  f(x) = x + b          prompt "f(0)=3 f(1)=4 f(2)=5 ->"
    level 2  f(x) = a*x + b        completion "```python\\ndef f(x):\\n    return 2*x+3\\n```"
    level 3  f(x) = a*x*x + b      tests {"asserts": ["assert f(5) == 53", "assert f(-3) == 21", ...]}
    level 4  f(x) = a*x + b if x > t else c   (shown at 0..4)

The tests check points the prompt never shows (a conditional's also the shown ones, so its
threshold must be right), so a program that only tabulates the examples fails; the held-out split
is drawn first and shares no function with train (compared by values, not by spelling).

The cold start mixes, as the arithmetic lab does, the bare reference program with the same
program showing its work in a comment (`# 51-44=7 58-51=7`: the differences that decide the family
and the slope), `sft.worked_fraction` of the time; RL then rewards programs that are right on the
hidden points (`reward.functions = ["python_code_batched"]`), and has a behaviour to select.
"""

from __future__ import annotations

import json
import random
from typing import Callable, Iterator

from rlvr.config import Config, TaskConfig
from rlvr.data import Example
from rlvr.tasks.registry import Task, refuse_data_paths, register_task, require

SHOWN = (0, 1, 2)  # the points a prompt shows
TESTED = (3, 5, -2, 7)  # the points the tests check (never shown)
LEVELS = 4
# Slopes are single digits; offsets go up to task.max_operand. A family must be large next to its
# held-out share, or the train set holds every other member of it and a model that memorises them
# scores 1.0 on train with nothing left to learn (measured: with offsets up to 9, levels 1-3 had
# 10-80 members, train reward was 1.0 from RL's first step and held-out 0-40%).
MAX_SLOPE = 9


def _function(level: int, rng: random.Random, limit: int) -> tuple[str, Callable[[int], int]]:
    """(the body's expression, the function) of a random member of the level's family."""
    a, b, c, t = rng.randint(2, MAX_SLOPE), rng.randint(0, limit), rng.randint(0, limit), rng.randint(0, 2)
    if level == 1:
        return f"x+{b}", lambda x: x + b
    if level == 2:
        return f"{a}*x+{b}", lambda x: a * x + b
    if level == 3:
        return f"{a}*x*x+{b}", lambda x: a * x * x + b
    return f"{a}*x+{b} if x>{t} else {c}", lambda x: a * x + b if x > t else c


# A conditional (threshold t in 0..2) is shown at 0..4, so two points past its threshold fix a and b
# and f(0) fixes c; its tests also check the shown points, so a program with the wrong threshold fails.
SHOWN_CONDITIONAL = (0, 1, 2, 3, 4)
TESTED_CONDITIONAL = (5, -2, 7, 6)


def signature(f: Callable[[int], int]) -> tuple[int, ...]:
    """What identifies a function whatever its spelling (`6*x+3 if x>1 else 9` is `... x>0 ...`)."""
    return tuple(f(x) for x in range(-10, 11))


def make_problem(level: int, rng: random.Random, limit: int) -> Example:
    """The problem; its solution is the bare program and ``info["worked"]`` the same program with
    the work shown in a comment (see `worked_comment`)."""
    expression, f = _function(level, rng, limit)
    points = SHOWN if level != 4 else SHOWN_CONDITIONAL
    prompt = " ".join(f"f({x})={f(x)}" for x in points) + " ->"
    tested = TESTED if level != 4 else SHOWN_CONDITIONAL + TESTED_CONDITIONAL
    tests = {"asserts": [f"assert f({x}) == {f(x)}" for x in tested]}
    program = f"```python\ndef f(x):\n    return {expression}\n```"
    worked = f"```python\ndef f(x):\n    {worked_comment(level, f)}\n    return {expression}\n```"
    return Example(prompt, json.dumps(tests), program, level, {"expression": expression, "signature": signature(f), "worked": worked})


def worked_comment(level: int, f: Callable[[int], int]) -> str:
    """The differences that decide the program, written out: ``# 51-44=7 58-51=7`` (equal: a line
    of that slope; the second three times the first: a parabola); for a conditional the slope
    past the threshold and the offset, ``# 38-29=9 29-27=2`` (f(4)-f(3), then f(3)-3*slope)."""
    if level == 4:
        slope = f(4) - f(3)
        return f"# {f(4)}-{f(3)}={slope} {f(3)}-{3 * slope}={f(3) - 3 * slope}"
    return f"# {f(1)}-{f(0)}={f(1) - f(0)} {f(2)}-{f(1)}={f(2) - f(1)}"


def sft_targets(examples: list[Example], batch_size: int, worked_fraction: float, seed: int) -> Iterator[tuple[Example, str]]:
    """The code lab's cold-start mixture, as the arithmetic lab's: each sampled problem's worked
    program with probability `worked_fraction`, else the bare one; RL then has two behaviours to
    choose between, and showing the work is the more accurate one."""
    rng = random.Random(f"sft:{seed}")
    while True:
        for i in [rng.randrange(len(examples)) for _ in range(batch_size)]:
            e = examples[i]
            yield e, e.info["worked"] if rng.random() < worked_fraction else e.solution or ""


def family_size(level: int, limit: int) -> int:
    """How many distinct functions a level has (a in 2..MAX_SLOPE, b and c in 0..limit, t in 0..2)."""
    slopes = MAX_SLOPE - 1
    return {1: limit + 1, 2: slopes * (limit + 1), 3: slopes * (limit + 1)}.get(level, slopes * (limit + 1) ** 2 * 3)


def make_code_splits(cfg: TaskConfig, seed: int) -> tuple[list[Example], list[Example]]:
    """(train, held-out): the held-out functions drawn first, evenly per level but at most a quarter
    of a level's family (level 1 has only limit + 1 functions); train never holds a held-out one.
    Offsets go up to task.max_operand (at least 2), slopes 2..MAX_SLOPE."""
    rng = random.Random(f"code:{seed}")
    limit = max(2, cfg.max_operand)
    held, seen = [], set()
    for level in range(1, LEVELS + 1):
        want = min(max(1, cfg.num_eval // LEVELS), family_size(level, limit) // 4)
        while sum(e.level == level for e in held) < want:
            e = make_problem(level, rng, limit)
            if e.info["signature"] not in seen:
                seen.add(e.info["signature"])
                held.append(e)
    train = []
    while len(train) < cfg.num_train:
        e = make_problem(rng.randint(1, LEVELS), rng, limit)
        if e.info["signature"] not in seen:
            train.append(e)
    return train, held


@register_task("code")
class CodeTask(Task):
    """Built-in small programs: write f from a few of its values, judged in the sandbox by python_code(_batched)."""

    def splits(self, cfg: Config, skipped=None) -> tuple[list[Example], list[Example]]:
        return make_code_splits(cfg.task, cfg.run.seed)

    def sft_targets(self, cfg: Config, train: list[Example]) -> Iterator[tuple[Example, str]]:
        return sft_targets(train, cfg.sft.batch_size, cfg.sft.worked_fraction, cfg.run.seed)

    def check(self, cfg: Config) -> None:
        require(any(f.startswith("python_code") for f in cfg.reward.functions), "reward.functions",
                "has no python_code term but data.source = 'code' has tests, not answers: use [\"python_code_batched\"]")
        refuse_data_paths(cfg)

    def tiny_tokenizer(self, cfg: Config) -> dict:
        return {**super().tiny_tokenizer(cfg), "code": True}  # the code fences as tokens of their own
