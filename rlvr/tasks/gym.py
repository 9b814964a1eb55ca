"""Problems from reasoning-gym's procedural generators (data.source = "reasoning_gym").

Each task in data.gym_tasks gives data.gym_size training problems and data.gym_eval_size held-out
ones, generated from run.seed (a held-out question is never also a training one). A row keeps its
task, the generator's metadata and the question, names `reasoning_gym` as the term that judges it
(reward.route_field), and has level = the task's place in data.gym_tasks, so evaluation reports
each task on its own. `reasoning_gym` is imported only here (`pip install rlvr[gym]`).
"""

from __future__ import annotations

import random

from rlvr.config import Config, DataConfig
from rlvr.data import DataError, Example
from rlvr.tasks.mix import interleave
from rlvr.tasks.registry import Task, register_task, require

JUDGE = "reasoning_gym"  # the reward term (rlvr.verifiers.gym) every row names: it holds the task's own scorer


def gym_splits(cfg: DataConfig, seed: int, route_field: str = "verifier") -> tuple[list[Example], list[Example]]:
    try:
        import reasoning_gym
    except ImportError:
        raise DataError("data.source = 'reasoning_gym' needs the reasoning-gym package: pip install 'rlvr[gym]'") from None
    train: list[Example] = []
    held: list[Example] = []
    for level, task in enumerate(cfg.gym_tasks, start=1):
        try:
            dataset = reasoning_gym.create_dataset(task, size=cfg.gym_size + cfg.gym_eval_size, seed=seed + 1000 * level)
        except (ValueError, KeyError) as err:
            raise DataError(f"data.gym_tasks: {task!r} is not a reasoning-gym task ({err})") from None
        rows = [dataset[i] for i in range(len(dataset))]
        held_rows = rows[: cfg.gym_eval_size]
        seen = {r["question"] for r in held_rows}
        train += [_example(r, task, level, cfg, route_field) for r in rows[cfg.gym_eval_size:] if r["question"] not in seen]
        held += [_example(r, task, level, cfg, route_field) for r in held_rows]
    random.Random(f"gym:{seed}").shuffle(train)  # tasks interleaved
    return train, interleave(held, [e.info["task"] for e in held])  # eval.max_problems covers every task


def _example(entry: dict, task: str, level: int, cfg: DataConfig, route_field: str) -> Example:
    info = {route_field: JUDGE, "task": task, "question": entry["question"], "metadata": entry["metadata"]}
    return Example(prompt=cfg.gym_prompt.replace("{question}", entry["question"]), answer=str(entry["answer"]), level=level, info=info,
                   solution="\\boxed{" + str(entry["answer"]) + "}")


@register_task("reasoning_gym")
class GymTask(Task):
    """data.gym_tasks from reasoning-gym's generators, each row scored by its task's own scorer."""

    routes_to = JUDGE

    def splits(self, cfg: Config, skipped=None) -> tuple[list[Example], list[Example]]:
        return gym_splits(cfg.data, cfg.run.seed, cfg.reward.route_field)

    def check_data(self, data: DataConfig) -> None:
        require(bool(data.gym_tasks), "data.gym_tasks", "is required when data.source = 'reasoning_gym'")
        require(data.gym_size >= 1 and data.gym_eval_size >= 1, "data.gym_size", "gym_size and gym_eval_size must be >= 1")
        require("{question}" in data.gym_prompt, "data.gym_prompt", "must contain {question}")
