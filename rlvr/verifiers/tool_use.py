"""Tool-use success as reward terms, for runs with tools (rollout.tools, rollout.environment).

Each reads the row's `tool_calls` column, which only a multi-turn rollout has (rollout/multiturn.py:
one {"name", "arguments", "outcome"} per call, the outcome one of rollout/tools.py's OUTCOMES); in a
run without tools the column is absent and the term reports an error per row, not a silent 0.
The final answer's correctness stays the correctness term's (boxed_math reads the model's own
words; a tool's output is never judged as the model's answer):

* ``tool_calls_ok``: 1.0 when every call the completion made was well formed, named a tool of its
  rollout, passed arguments of the right types and ran (ok, or ok with its output cut), else 0.0;
  None (not scored) when it made no call: a rollout that needed no tool is not penalised;
* ``tool_used``: 1.0 when at least one call ran successfully, else 0.0 (a shaping term for a task
  that cannot be done without its tool; with a small weight, beside the correctness term).

Both are cheap to satisfy on their own (call a tool, correctly, about anything): weight them well
below the correctness term, and watch `hack/tool_failed` and `tools/*`.
"""

from __future__ import annotations

__all__ = ["tool_calls_ok", "tool_used"]

SUCCEEDED = ("ok", "truncated")  # the call ran; a cut output is the tool's size, not the model's fault


def tool_calls_ok(completion: str, answer: str, tool_calls: list) -> float | None:
    if not tool_calls:
        return None
    return float(all(call.get("outcome") in SUCCEEDED for call in tool_calls))


def tool_used(completion: str, answer: str, tool_calls: list) -> float:
    return float(any(call.get("outcome") in SUCCEEDED for call in tool_calls or []))
