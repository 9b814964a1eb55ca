"""Word problems with worked solutions (data.source = "word_problems"): the real-model lab's task.

A problem is a short story about one person's count of things, told in task.min_ops..max_ops
steps (the difficulty level): a start ("Mia has 12 shells." or "Mia has 3 bags of 4 shells."),
then changes ("She finds 5 more.", "She gives 4 to a friend.", "She buys 2 bags of 6 more.",
"She shares them equally among 3 friends."), then the question. The worked solution writes one
equation per step and ends in \\boxed{answer}, so a cold start learns the format and the working,
and the strict boxed_math verifier judges the answer.

Every number in a solution lies in 0..task.max_value (the real-model lab uses 99: a 135M-parameter
model adds and subtracts two-digit numbers far more reliably than three-digit ones) and every
division is exact. Held-out problems are distinct by their arithmetic, not by their wording: a held-out
problem's chain of operations and numbers never appears in training under another name or noun.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterator

from rlvr.config import Config
from rlvr.data import Example, boxed
from rlvr.tasks.arithmetic import sft_targets
from rlvr.tasks.registry import Task, refuse_data_paths, register_task, require

NAMES = [("Mia", "she"), ("Leo", "he"), ("Ava", "she"), ("Sam", "he"), ("Zoe", "she"), ("Omar", "he"), ("Lily", "she"),
         ("Ben", "he"), ("Nora", "she"), ("Ravi", "he"), ("Emma", "she"), ("Kai", "he"), ("Ivy", "she"), ("Tom", "he"),
         ("Lena", "she"), ("Max", "he")]
THINGS = [("apples", "bag", "bags"), ("marbles", "jar", "jars"), ("stickers", "sheet", "sheets"), ("shells", "bucket", "buckets"),
          ("pencils", "box", "boxes"), ("cookies", "plate", "plates"), ("cards", "pack", "packs"), ("stamps", "book", "books"),
          ("eggs", "carton", "cartons"), ("books", "shelf", "shelves"), ("coins", "purse", "purses"), ("flowers", "vase", "vases")]
GAIN = ["finds {b} more", "buys {b} more", "gets {b} more from a friend", "picks up {b} more"]
LOSS = ["gives {b} to a friend", "loses {b}", "gives away {b}", "uses {b}"]


@dataclass(frozen=True)
class Step:
    op: str  # "start", "group", "+", "-", "+group", "/"
    a: int = 0  # the first number (a count, or the number of groups)
    b: int = 0  # the second (the size of a group); 0 when the step has one number


def solve(steps: tuple[Step, ...]) -> list[tuple[str, int]]:
    """Each step's equation (empty for a plain start) and the running count after it."""
    out: list[tuple[str, int]] = []
    value = 0
    for s in steps:
        if s.op == "start":
            value, eq = s.a, ""
        elif s.op == "group":
            value, eq = s.a * s.b, f"{s.a} * {s.b} = {s.a * s.b}"
        elif s.op == "+":
            eq, value = f"{value} + {s.a} = {value + s.a}", value + s.a
        elif s.op == "-":
            eq, value = f"{value} - {s.a} = {value - s.a}", value - s.a
        elif s.op == "+group":
            extra = s.a * s.b
            eq, value = f"{s.a} * {s.b} = {extra}, {value} + {extra} = {value + extra}", value + extra
        elif s.op == "/":
            eq, value = f"{value} / {s.a} = {value // s.a}", value // s.a
        else:
            raise ValueError(f"unknown step {s.op!r}")
        out.append((eq, value))
    return out


def draw(rng: random.Random, num_steps: int, max_value: int) -> tuple[Step, ...]:
    """A problem of `num_steps` steps (the start is one), every number in 0..max_value."""
    while True:
        if num_steps == 1 or rng.random() < 0.3:
            a, b = rng.randint(2, 9), rng.randint(2, 9)
            steps = [Step("group", a, b)]
            value = a * b
        else:
            value = rng.randint(2, max_value // 2)
            steps = [Step("start", value)]
        for i in range(1, num_steps):
            last = i == num_steps - 1
            choices = ["+", "-", "+group"] + (["/"] if last else [])
            op = rng.choice(choices)
            if op == "+":
                b = rng.randint(2, 20)
                steps.append(Step("+", b))
                value += b
            elif op == "-":
                if value < 3:
                    break
                b = rng.randint(1, min(value - 1, 20))
                steps.append(Step("-", b))
                value -= b
            elif op == "+group":
                a, b = rng.randint(2, 5), rng.randint(2, 9)
                steps.append(Step("+group", a, b))
                value += a * b
            else:
                divisors = [k for k in range(2, 10) if value % k == 0 and value // k >= 1]
                if not divisors:
                    break
                k = rng.choice(divisors)
                steps.append(Step("/", k))
                value //= k
            if value > max_value:
                break
        else:
            if all(0 <= v <= max_value for _, v in solve(tuple(steps))):
                return tuple(steps)


def render(steps: tuple[Step, ...], rng: random.Random) -> tuple[str, str, int]:
    """(question, worked solution, answer): the wording drawn from `rng`, the numbers from `steps`."""
    name, pron = rng.choice(NAMES)
    many, _, boxes = rng.choice(THINGS)
    subject = pron.capitalize()
    sentences: list[str] = []
    for s in steps:
        if s.op == "start":
            sentences.append(f"{name} has {s.a} {many}.")
        elif s.op == "group":
            sentences.append(f"{name} has {s.a} {boxes} with {s.b} {many} in each.")
        elif s.op == "+":
            sentences.append(f"{subject} {rng.choice(GAIN).format(b=s.a)}.")
        elif s.op == "-":
            sentences.append(f"{subject} {rng.choice(LOSS).format(b=s.a)}.")
        elif s.op == "+group":
            sentences.append(f"{subject} buys {s.a} {boxes} with {s.b} {many} in each.")
        else:
            sentences.append(f"{subject} shares them equally among {s.a} friends.")
    if steps[-1].op == "/":
        question = f"How many {many} does each friend get?"
    elif len(steps) == 1:
        question = f"How many {many} does {name} have?"
    else:
        question = f"How many {many} does {name} have now?"
    work = solve(steps)
    answer = work[-1][1]
    # One equation per line, then the box: short, because every token of a target is paid for in
    # SFT, sampling and the update alike, and the equations already say which step did what.
    solution = "\n".join([eq for eq, _ in work if eq] + [boxed(str(answer))])
    return " ".join(sentences + [question]), solution, answer


def make_word_splits(min_steps: int, max_steps: int, max_value: int, num_train: int, num_eval: int,
                     seed: int, template: str = "{question}") -> tuple[list[Example], list[Example]]:
    """(train, held_out), deterministic in the arguments. Held-out problems are spread evenly over
    the levels and unique by their arithmetic; no training problem shares a held-out one's."""
    rng = random.Random(f"word_problems:{seed}")
    levels = list(range(min_steps, max_steps + 1))
    held: list[tuple[Step, ...]] = []
    seen: set[tuple[Step, ...]] = set()
    for i in range(num_eval):
        level = levels[i % len(levels)]
        for _ in range(10_000):
            steps = draw(rng, level, max_value)
            if steps not in seen:
                break
        else:
            raise ValueError(f"task.num_eval={num_eval}: level {level} has too few distinct word problems")
        seen.add(steps)
        held.append(steps)
    train: list[tuple[Step, ...]] = []
    misses = 0
    while len(train) < num_train:
        steps = draw(rng, rng.choice(levels), max_value)
        if steps not in seen:
            train.append(steps)
            misses = 0
        else:
            misses += 1
            if misses > 100_000:  # every problem of these levels is held out
                raise ValueError(f"task.num_eval={num_eval}: the held-out problems leave none of levels {levels} to train on")

    def example(steps: tuple[Step, ...]) -> Example:
        question, solution, answer = render(steps, rng)
        return Example(prompt=template.replace("{question}", question), answer=str(answer), solution=solution,
                       level=len(steps), info={"question": question})

    return [example(s) for s in train], [example(s) for s in held]


@register_task("word_problems")
class WordProblemsTask(Task):
    """Built-in stories of task.min_ops..max_ops steps with worked solutions, numbers in 0..task.max_value: the real-model lab's task."""

    def splits(self, cfg: Config, skipped=None) -> tuple[list[Example], list[Example]]:
        t = cfg.task
        return make_word_splits(t.min_ops, t.max_ops, t.max_value, t.num_train, t.num_eval, cfg.run.seed)

    def sft_targets(self, cfg: Config, train: list[Example]) -> Iterator[tuple[Example, str]]:
        # the arithmetic lab's worked / bare mixture; a story has no think or fused format
        return sft_targets(train, cfg.sft.batch_size, cfg.sft.worked_fraction, cfg.run.seed, "plain")

    def check(self, cfg: Config) -> None:
        require(cfg.task.max_value >= 20, "task.max_value",
                f"= {cfg.task.max_value} (19 is the arithmetic lab's default): word problems need a bound of at least 20, since they "
                "start from counts up to max_value / 2 and add up to 20 at a step; the real-model lab uses 99")
        refuse_data_paths(cfg)
