"""Tasks: where a run's problems come from, one registered object each (`data.source` names one).

    arithmetic.py     the CPU lab's procedural arithmetic (worked solutions, formats plain/think/fused)
    code.py           small programs: write f from a few of its values (judged by python_code)
    word_problems.py  short stories with one-equation-per-line solutions: the real-model lab's task
    jsonl.py          the user's JSONL files
    hf.py             anything Hugging Face `datasets` opens (kept in Arrow, parsed when used)
    gym.py            reasoning-gym's generators, each row judged by its own task's scorer
    tool_arithmetic.py  arithmetic too big for one's head and a calculator tool: the tool lab's task
    mix.py            data.mix: several of the above as one weighted training set
    registry.py       what a task answers (`Task`), TASKS, and how to add one

`load_splits(cfg)` is what a run calls; `task_for(cfg)` gives the task behind it (its SFT targets,
its tiny-model tokenizer) once the config passes the task's own rules. Those rules live here, not in
`Config.validate`: the tasks read the config, so the config cannot know them. `hackable.py` is not a
task: a deliberately lenient reward for the monitor's demonstration.
"""

from __future__ import annotations

from rlvr.config import Config, ConfigError
from rlvr.data import Problem
from rlvr.tasks.registry import TASKS, Splits, Task, register_task

# Imported for their registration, in the order `rlvr config` and error messages list them.
from rlvr.tasks import arithmetic, code, word_problems, jsonl, hf, gym, tool_arithmetic  # noqa: F401
from rlvr.tasks.mix import MIXTURE

__all__ = ["TASKS", "Task", "load_splits", "register_task", "task_for"]


def task_for(cfg: Config) -> Task:
    """The task a run loads (the mixture when data.mix is set, else the one data.source names),
    after the config passed its rules: the name, `Task.check_data`, a judge its rows name
    (`Task.routes_to`) among reward.functions, `Task.check`; else ConfigError naming the setting.
    Every command calls this (through `load_splits`, or at once after loading its config) before
    any work, and a Config that skipped it can load no task."""
    if cfg.data.source not in TASKS:
        raise ConfigError(f"data.source: {cfg.data.source!r} is not one of {list(TASKS)}")
    task = MIXTURE if cfg.data.mix else TASKS[cfg.data.source]
    task.check_data(cfg.data)  # data.mix's entries are checked as each is read (mix.part_config)
    for source in dict.fromkeys([cfg.data.source] + [str(t.get("source", cfg.data.source)) for t in cfg.data.mix]):
        judge = getattr(TASKS.get(source), "routes_to", None)  # a mixture entry's unknown source is reported where it is read
        if judge is not None and judge not in cfg.reward.functions:
            raise ConfigError(f"reward.functions: = {cfg.reward.functions} has no {judge} term, but the rows of data.source = "
                              f"{source!r} are judged by it; add \"{judge}\"")
    task.check(cfg)
    return task


def load_splits(cfg: Config, skipped: list[Problem] | None = None) -> Splits:
    """(train, held-out) examples of the run's task; rows a file source skipped (data.skip_bad_rows) go to `skipped`."""
    return task_for(cfg).splits(cfg, skipped)
