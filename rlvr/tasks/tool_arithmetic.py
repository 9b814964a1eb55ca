"""data.source = tool_arithmetic: arithmetic too big to do in one's head, with a calculator tool.

The tool lab's task (examples/tool_lab.toml, docs/tools.md). The problems are the arithmetic task's
(task.* draws them: operands up to task.max_operand, task.min_ops..task.max_ops operators, levels by
operator count), with operands large enough (the lab: 3 digits) that a model of the lab's size cannot
multiply them in its head, and a calculator it can call (rollout.tools =
["rlvr.rollout.toolbox:calculator"]). A right answer is then a well-formed call with the right
expression, then the tool's result copied into the box: tool-use success, verified by boxed_math.

The cold start mixes two behaviours, as the arithmetic lab mixes worked and bare answers: with
probability sft.worked_fraction a target is a tool trace (the call, the calculator's result as a tool
message, the boxed answer), else a direct answer (the box alone, a guess for a model that cannot
multiply). RL then has a behaviour to select: calling the tool.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

from rlvr.config import Config
from rlvr.data import Example, boxed
from rlvr.tasks.arithmetic import make_splits
from rlvr.tasks.registry import Task, refuse_data_paths, register_task, require

TOOL = "calculator"  # the name of rlvr.rollout.toolbox:calculator, which the lab's config lists in rollout.tools


def tool_trace(example: Example, fmt: str = "hermes") -> list[dict[str, Any]]:
    """The messages after the prompt of a right answer with the calculator: the call (as the model writes it, in
    Hermes' format), the tool's result (the calculator writes an integer result as the answer's digits), the box."""
    call = json.dumps({"name": TOOL, "arguments": {"expression": example.info["expr"]}}, separators=(",", ":"))  # compact: fewer tokens
    return [{"role": "assistant", "content": f"<tool_call>{call}</tool_call>"},
            {"role": "tool", "name": TOOL, "content": example.answer},
            {"role": "assistant", "content": boxed(example.answer)}]


def sft_targets(examples: list[Example], batch_size: int, tool_fraction: float, seed: int) -> Iterator[tuple[Example, Any]]:
    """The cold-start mixture, endlessly: per sampled problem a tool trace with probability `tool_fraction`, else
    the direct answer (text)."""
    rng = random.Random(f"sft:{seed}")
    while True:
        for i in [rng.randrange(len(examples)) for _ in range(batch_size)]:
            e = examples[i]
            yield e, tool_trace(e) if rng.random() < tool_fraction else boxed(e.answer)


@register_task("tool_arithmetic")
class ToolArithmeticTask(Task):
    """Arithmetic too big for one's head and a calculator tool (rollout.tools): the tool lab's task."""

    def splits(self, cfg: Config, skipped=None) -> tuple[list[Example], list[Example]]:
        train, held_out = make_splits(cfg.task, cfg.run.seed)
        return [_without_solution(e) for e in train], [_without_solution(e) for e in held_out]

    def sft_targets(self, cfg: Config, train: list[Example]) -> Iterator[tuple[Example, Any]]:
        return sft_targets(train, cfg.sft.batch_size, cfg.sft.worked_fraction, cfg.run.seed)

    def check(self, cfg: Config) -> None:
        require(cfg.task.format == "plain", "task.format", "must be 'plain' for data.source = 'tool_arithmetic'")
        require(not (cfg.sft.steps > 0 and cfg.sft.worked_fraction > 0 and not cfg.rollout.tools), "rollout.tools",
                "is empty, but the cold start's tool traces call the calculator: set rollout.tools = "
                "[\"rlvr.rollout.toolbox:calculator\"] (or sft.worked_fraction = 0 for direct answers only)")
        require(cfg.rollout.tool_format == "hermes", "rollout.tool_format", "must be 'hermes': the cold start writes Hermes calls")
        refuse_data_paths(cfg)

    def tiny_tokenizer(self, cfg: Config) -> dict[str, Any]:
        return {**super().tiny_tokenizer(cfg), "tools": True}  # the tool tags as tokens, and a template that renders tools


def _without_solution(e: Example) -> Example:
    """The arithmetic task's worked solution is no answer here: the model is to call the tool, not to reduce."""
    return Example(e.prompt, e.answer, None, e.level, e.info, e.messages)
