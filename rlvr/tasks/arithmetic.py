"""Integer arithmetic with graded difficulty: the lab's task.

Difficulty level = number of operators (2 to 5 by default). Operands are 0..max_operand and
`*` binds tighter than `+`/`-`, evaluated left to right. A worked solution rewrites the whole
expression one operation at a time, then boxes the result:

    prompt  "7+3*2="     worked  "7+6=13\\n\\boxed{13}"     bare  "\\boxed{13}"

Each step is a local edit a small transformer can learn; guessing the value of a 3-operator
expression in one shot is much harder. That gap is what RL exploits in the lab. With
`task.max_value` (19 in the lab) only problems whose every written number lies in 0..max_value
are drawn, so each step is an operation the model sees often (docs/lab.md says why).

The held-out split is drawn first, per level, and never appears in train.
"""

from __future__ import annotations

import functools
import itertools
import random
import re
from typing import Iterator

from rlvr.config import Config, TaskConfig
from rlvr.data import Example, boxed
from rlvr.tasks.registry import Task, refuse_data_paths, register_task, require

Tokens = list  # alternating [int, op, int, op, int, ...]


def random_expression(rng: random.Random, num_ops: int, max_operand: int, operators: str) -> Tokens:
    tokens: Tokens = [rng.randint(0, max_operand)]
    for _ in range(num_ops):
        tokens += [rng.choice(operators), rng.randint(0, max_operand)]
    return tokens


def render(tokens: Tokens) -> str:
    return "".join(str(t) for t in tokens)


def reduce_once(tokens: Tokens) -> Tokens:
    """Apply one operation: the first `*` if any, else the leftmost `+`/`-`."""
    ops = tokens[1::2]
    i = 2 * ops.index("*") + 1 if "*" in ops else 1
    a, op, b = tokens[i - 1], tokens[i], tokens[i + 1]
    value = a * b if op == "*" else a + b if op == "+" else a - b
    return tokens[: i - 1] + [value] + tokens[i + 2 :]


def solve(tokens: Tokens) -> tuple[int, list[str]]:
    """The value and the intermediate expressions, one per operation."""
    steps = []
    while len(tokens) > 1:
        tokens = reduce_once(tokens)
        steps.append(render(tokens))
    return tokens[0], steps


THINK, NO_THINK = "think", "no_think"
FLAGS = {THINK: " /think", NO_THINK: " /no_think"}  # Qwen3's soft switches, at the end of a fused-format prompt
OPEN, CLOSE = "<think>", "</think>"


def worked(steps: str, answer: str, fmt: str) -> str:
    """The worked solution in a format: 'plain' writes the working on its own line before the box;
    'think' and 'fused' put it inside the thinking block."""
    return steps + "\n" + boxed(answer) if fmt == "plain" else OPEN + steps + CLOSE + boxed(answer)


def direct(answer: str, fmt: str) -> str:
    """The direct answer in a format: the bare box, after an empty thinking block in 'think' and
    'fused' (as Qwen3's non-thinking mode writes it)."""
    return boxed(answer) if fmt == "plain" else OPEN + CLOSE + boxed(answer)


def make_example(tokens: Tokens, template: str, fmt: str = "plain", mode: str | None = None) -> Example:
    """One problem; in the 'fused' format its prompt ends in the mode's flag and its solution is
    that mode's (worked when thinking, direct when not)."""
    value, steps = solve(tokens)
    answer = str(value)
    info = {"expr": render(tokens)} if mode is None else {"expr": render(tokens), "mode": mode}
    return Example(
        prompt=template.format(expr=render(tokens)) + (FLAGS[mode] if mode else ""),
        answer=answer,
        solution=direct(answer, fmt) if mode == NO_THINK else worked("=".join(steps), answer, fmt),
        level=len(tokens) // 2,
        info=info,
    )


def pool_size(num_ops: int, max_operand: int, num_operators: int) -> int:
    return (max_operand + 1) ** (num_ops + 1) * num_operators**num_ops


def within(tokens: Tokens, max_value: int) -> bool:
    """Whether every number the worked solution writes (each intermediate result and the answer)
    lies in 0..max_value; always, when max_value < 0 (unbounded)."""
    if max_value < 0:
        return True
    while len(tokens) > 1:
        tokens = reduce_once(tokens)
        if not all(0 <= v <= max_value for v in tokens[::2]):
            return False
    return True


DRAWS = 4000
ENUMERATE_UP_TO = 20_000  # 0..9 with three operators: levels 1 and 2 (300 and 9,000 problems)


@functools.lru_cache(maxsize=None)
def bounded_pool_size(num_ops: int, max_operand: int, operators: str, max_value: int) -> int:
    """Distinct problems of a level that `within` admits: counted exactly when the level's pool is
    small (where a third of it can bind the held-out quota; counting costs ~5 us a problem), else a
    lower bound, half the share admitted among DRAWS fixed draws. A level where under 1% of
    problems are admitted is refused: drawing it would take over 100 tries a problem."""
    full = pool_size(num_ops, max_operand, len(operators))
    if max_value < 0:
        return full
    if full <= ENUMERATE_UP_TO:
        admitted, tried = sum(
            within([nums[0]] + [x for op, n in zip(ops, nums[1:]) for x in (op, n)], max_value)
            for nums in itertools.product(range(max_operand + 1), repeat=num_ops + 1)
            for ops in itertools.product(operators, repeat=num_ops)
        ), full
    else:
        rng = random.Random("pool")
        admitted, tried = sum(within(random_expression(rng, num_ops, max_operand, operators), max_value) for _ in range(DRAWS)), DRAWS
    if admitted * 100 < tried:
        raise ValueError(
            f"task.max_value={max_value}: only {admitted} of {tried} {num_ops}-operator problems write numbers in "
            f"0..{max_value}; raise task.max_value or lower task.max_ops"
        )
    return admitted if tried == full else full * admitted // (2 * DRAWS)


def draw(rng: random.Random, num_ops: int, cfg: TaskConfig) -> Tokens:
    """A random problem of `num_ops` operators that `within` admits (rejection sampling)."""
    while True:
        tokens = random_expression(rng, num_ops, cfg.max_operand, cfg.operators)
        if within(tokens, cfg.max_value):
            return tokens


def make_splits(cfg: TaskConfig, seed: int) -> tuple[list[Example], list[Example]]:
    """(train, held_out), deterministic in (cfg, seed).

    Held-out problems are unique and split evenly across levels; a level whose pool of distinct
    problems is small (1 operator over 0..9 has only 300) gives at most a third of its pool, and
    the other levels make up the difference. Train is sampled uniformly over levels, excluding
    every held-out problem.
    """
    rng = random.Random(f"arithmetic:{seed}")
    levels = list(range(cfg.min_ops, cfg.max_ops + 1))
    caps = {n: bounded_pool_size(n, cfg.max_operand, cfg.operators, cfg.max_value) // 3 for n in levels}
    quota = {n: 0 for n in levels}
    remaining = cfg.num_eval
    while remaining > 0:
        open_levels = [n for n in levels if quota[n] < caps[n]]
        if not open_levels:
            raise ValueError(f"task.num_eval={cfg.num_eval} exceeds a third of all distinct problems")
        for n in open_levels[:remaining]:
            quota[n] += 1
            remaining -= 1

    held_out_tokens: list[Tokens] = []
    seen: set[str] = set()
    for n in levels:
        count = 0
        while count < quota[n]:
            tokens = draw(rng, n, cfg)
            if render(tokens) not in seen:
                seen.add(render(tokens))
                held_out_tokens.append(tokens)
                count += 1

    train_tokens: list[Tokens] = []
    while len(train_tokens) < cfg.num_train:
        tokens = draw(rng, rng.choice(levels), cfg)
        if render(tokens) not in seen:
            train_tokens.append(tokens)
    fmt, template = cfg.format, cfg.prompt_template
    if fmt != "fused":
        return [make_example(t, template, fmt) for t in train_tokens], [make_example(t, template, fmt) for t in held_out_tokens]
    # fused: a mode per training prompt (its own stream, so the problems are those of the other formats), and
    # every held-out problem in both modes, next to each other (so eval.max_problems keeps both)
    modes = random.Random(f"arithmetic-modes:{seed}")
    train = [make_example(t, template, fmt, THINK if modes.random() < cfg.think_fraction else NO_THINK) for t in train_tokens]
    return train, [make_example(t, template, fmt, mode) for t in held_out_tokens for mode in (THINK, NO_THINK)]


def sft_targets(examples: list[Example], batch_size: int, worked_fraction: float, seed: int, fmt: str = "plain") -> Iterator[tuple[Example, str]]:
    """The lab's cold-start mixture, endlessly: per batch of `batch_size` sampled problems, each
    target is the worked solution with probability `worked_fraction`, else the direct answer.
    The mix is the point of the lab: the model leaves SFT able both to reason and to guess, and
    RL then has a behaviour to select (RL steers toward reasoning the model can already do; it
    does not teach arithmetic from scratch). In the 'fused' format each prompt's flag decides
    instead (the example's own solution): mode fusion trains both behaviours, each on its switch."""
    rng = random.Random(f"sft:{seed}")
    while True:
        for i in [rng.randrange(len(examples)) for _ in range(batch_size)]:
            e = examples[i]
            if fmt == "fused":
                yield e, e.solution or ""
            else:
                yield e, e.solution if e.solution and rng.random() < worked_fraction else direct(e.answer, fmt)


@register_task("arithmetic")
class ArithmeticTask(Task):
    """Built-in procedural arithmetic with worked solutions (task.*): the CPU lab's task."""

    def splits(self, cfg: Config, skipped=None) -> tuple[list[Example], list[Example]]:
        return make_splits(cfg.task, cfg.run.seed)

    def sft_targets(self, cfg: Config, train: list[Example]) -> Iterator[tuple[Example, str]]:
        return sft_targets(train, cfg.sft.batch_size, cfg.sft.worked_fraction, cfg.run.seed, cfg.task.format)

    def check(self, cfg: Config) -> None:
        t = cfg.task
        require(t.max_value < 0 or t.max_operand <= t.max_value, "task.max_value",
                f"= {t.max_value} is below task.max_operand = {t.max_operand}: an operand is a number the worked solution "
                "writes; raise max_value (or -1 for any integer)")
        refuse_data_paths(cfg)


# ----------------------------------------------------------------------------- a process reward

_TOKEN = re.compile(r"[0-9]+|[-+*]")


def parse_expression(text: str) -> Tokens | None:
    """'-3+4*12' -> [-3, '+', 4, '*', 12], or None when `text` is not such an expression exactly
    (a sign is allowed on the first number only, as every intermediate expression writes it)."""
    parts = _TOKEN.findall(text)
    if len(parts) >= 2 and parts[0] == "-" and parts[1].isdigit():
        parts = [str(-int(parts[1]))] + parts[2:]
    if not parts or len(parts) % 2 == 0:
        return None
    try:
        tokens: Tokens = [int(parts[0])] + [p if i % 2 else int(p) for i, p in enumerate(parts[1:], start=1)]
    except ValueError:
        return None
    ok = all(isinstance(t, int) for t in tokens[::2]) and all(t in ("+", "-", "*") for t in tokens[1::2])
    return tokens if ok and render(tokens) == text else None


def worked_steps(completion: str, answer: str, expr: str) -> float:
    r"""A strict process reward for the arithmetic task: 1.0 when the working is exactly the
    problem's rewrite chain, one operation per step in the task's order (the first `*`, else the
    leftmost `+`/`-`), every intermediate expression right, and the final box holds its value;
    else 0.0 (a bare answer shows no working and scores 0).

    Correctness (boxed_math) pays a right final answer however it was reached; this pays only
    reasoning whose every step is right, so a lucky answer after a skipped or wrong step earns
    correctness but not this. It needs the problem's `expr` (every arithmetic example has it).

    >>> worked_steps("9-56+6=-47+6=-41\n\\boxed{-41}", "-41", "9-8*7+6")
    1.0
    >>> worked_steps("9-56+6=-41\n\\boxed{-41}", "-41", "9-8*7+6")  # two operations in one step
    0.0
    """
    head, sep, box = completion.rpartition("\\boxed{")
    current = parse_expression(expr)
    if not sep or current is None or not box.endswith("}") or box[:-1] != answer:
        return 0.0
    steps = head.rstrip("\n").split("=") if head.strip() else []
    if head.strip() and not head.endswith("\n"):
        return 0.0  # the working ends its line before the box, as every worked solution does
    for step in steps:
        if len(current) == 1:
            return 0.0  # working past the value
        current = reduce_once(current)
        if render(current) != step:
            return 0.0
    return 1.0 if steps and len(current) == 1 and render(current) == answer else 0.0
