"""The task registry: data.source names one registered task, and a new task is one file (this one).

`Countdown` below is what a contributor writes to add a task: a `Task` subclass with its splits
(and, here, its own config check), registered by name. Nothing else in rlvr changes for it: the
config accepts the name, `load_splits` loads it, SFT draws its rows' solutions, the mixture mixes it.
A task's own config rules run in `task_for` (every command calls it before any work), not in
`Config.validate`: the tasks read the config, so the config cannot know them.
"""

from __future__ import annotations

import itertools
import random

import pytest

from rlvr.config import Config, ConfigError, DataConfig, load_config
from rlvr.data import Example
from rlvr.tasks import TASKS, Task, load_splits, register_task, task_for
from rlvr.tasks.arithmetic import make_splits


@register_task("test_countdown")
class Countdown(Task):
    """Add two numbers to reach the target (a task registered from a test file)."""

    def splits(self, cfg, skipped=None):
        rng = random.Random(f"countdown:{cfg.run.seed}")
        rows = []
        for _ in range(cfg.task.num_train + cfg.task.num_eval):
            a, b = rng.randint(0, 9), rng.randint(0, 9)
            rows.append(Example(prompt=f"{a} and {b} make", answer=str(a + b), solution=f"{a}+{b}={a + b}\n\\boxed{{{a + b}}}"))
        return rows[cfg.task.num_eval:], rows[: cfg.task.num_eval]

    def check(self, cfg):
        if cfg.task.num_eval > cfg.task.num_train:
            raise ConfigError("task.num_eval: countdown holds out fewer problems than it trains on")


SMALL = ["task.num_train=30", "task.num_eval=6"]


def test_a_task_registered_from_a_test_file_is_a_data_source():
    cfg = load_config(overrides=["data.source=test_countdown", *SMALL])
    train, held = load_splits(cfg)
    assert (len(train), len(held)) == (30, 6) and load_splits(cfg) == (train, held)  # from the seed
    assert held[0].prompt.endswith("make") and isinstance(task_for(cfg), Countdown)
    pairs = list(itertools.islice(task_for(cfg).sft_targets(cfg, train), 8))  # the default: each row's own solution
    assert all(target == e.solution for e, target in pairs)
    with pytest.raises(ConfigError, match="task.num_eval: countdown"):  # its own check runs before any use of the task
        load_splits(load_config(overrides=["data.source=test_countdown", "task.num_train=3", "task.num_eval=6"]))


def test_a_registered_task_mixes_with_the_built_in_ones():
    mix = 'data.mix=[{source = "arithmetic", name = "arith"}, {source = "test_countdown", weight = 2}]'
    train, held = load_splits(load_config(overrides=[mix, *SMALL]))
    sources = [e.info["source"] for e in train]
    assert sources.count("arith") == 20 and sources.count("test_countdown") == 40 and len(held) == 12


def test_an_unknown_source_names_the_registered_ones():
    with pytest.raises(ConfigError, match=r"data.source: 'countdwn' is not one of \['arithmetic', 'code', .*'test_countdown'"):
        task_for(load_config(overrides=["data.source=countdwn"]))
    with pytest.raises(ConfigError, match=r"data.mix\[0\].source: 'countdwn' is not one of"):
        load_splits(load_config(overrides=['data.mix=[{source = "countdwn"}]']))
    with pytest.raises(ConfigError, match=r"data.source: 'countdwn' is not one of"):
        task_for(Config(data=DataConfig(source="countdwn")))  # set from Python, not a file: still checked


def test_the_built_in_tasks_are_registered_in_their_documented_order():
    assert list(TASKS)[:6] == ["arithmetic", "code", "word_problems", "jsonl", "hf", "reasoning_gym"]
    cfg = load_config(overrides=SMALL)
    assert load_splits(cfg) == make_splits(cfg.task, cfg.run.seed)  # the registry adds nothing to a task's own splits


@pytest.mark.parametrize("overrides, message", [
    (["data.source=code", 'reward.functions=["python_code"]', "data.train_path=x.jsonl"],
     r"data.train_path: is set but data.source = 'code' would ignore it"),
    (["data.source=reasoning_gym", 'reward.functions=["reasoning_gym"]'], r"data.gym_tasks: is required when data.source = 'reasoning_gym'"),
    (['data.mix=[{source = "reasoning_gym", gym_tasks = ["chain_sum"]}]'], r"reward.functions: .* has no reasoning_gym term"),  # a mixture's entry
    (["data.source=word_problems", "task.max_value=9"], r"task.max_value: = 9 \(19 is the arithmetic lab's default\): word problems need"),
    (['data.mix=[{source = "arithmetic"}]', "task.max_operand=99"], r"task.max_value: .* below task.max_operand"),  # through the mixture
    (['data.mix=[{source = "arithmetic"}]', "data.source=jsonl"], r"data.train_path: is required when data.source = 'jsonl'"),
])
def test_a_tasks_config_checks_keep_their_messages(overrides, message):
    cfg = load_config(overrides=overrides)  # the config alone is valid: its task's rules are the tasks' to check
    with pytest.raises(ConfigError, match=message):
        task_for(cfg)
    with pytest.raises(ConfigError, match=message):
        load_splits(cfg)  # nothing loads a task past them


def test_the_code_task_asks_the_tiny_tokenizer_for_code_fences():
    code = load_config(overrides=["data.source=code", 'reward.functions=["python_code"]'])
    assert task_for(code).tiny_tokenizer(code) == {"thinking": False, "code": True, "tools": False}
    think = load_config(overrides=["task.format=think"])
    assert task_for(think).tiny_tokenizer(think) == {"thinking": True, "code": False, "tools": False}


MIX = 'data.mix=[{source = "arithmetic", name = "a"}, {source = "jsonl", name = "j", eval_path = "e.jsonl"}]'


@pytest.mark.parametrize("overrides, label", [
    ([], "arithmetic held-out split (seed 0)"),
    (["data.source=jsonl", "data.train_path=t.jsonl", "run.seed=3"], "0.05 of t.jsonl held out (seed 3)"),
    (["data.source=jsonl", "data.train_path=t.jsonl", "data.eval_path=e.jsonl"], "e.jsonl"),
    (["data.source=hf", "data.train_path=org/ds", "data.eval_split=test"], "org/ds[test]"),  # the dataset's own split: no seed
    (["data.source=hf", "data.train_path=org/ds", "data.eval_path=org/other"], "org/other[test]"),
    (["data.source=hf", "data.train_path=org/ds"], "0.05 of org/ds[train] held out (seed 0)"),
    # a mixture whose entries default to jsonl: each source's own held-out rows, not the [data] section's file
    ([MIX, "data.source=jsonl", "data.train_path=t.jsonl"], "data.mix: a: arithmetic held-out split (seed 0); j: e.jsonl"),
])
def test_each_task_names_its_held_out_split(overrides, label):
    """What `rlvr eval` reports as the source of its problems."""
    cfg = load_config(overrides=overrides)
    assert task_for(cfg).held_out_label(cfg) == label
