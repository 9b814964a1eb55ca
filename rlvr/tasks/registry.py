"""What a task is, and the registry `data.source` names one from.

A task is where a run's problems come from: a procedural generator (arithmetic, code, word
problems, reasoning-gym) or the user's data (jsonl, hf). It answers five questions, each a method
of `Task`; only `splits` has no default:

- `splits(cfg, skipped)`: the (train, held-out) examples, deterministic in the config and run.seed;
- `sft_targets(cfg, train)`: the cold-start SFT pairs, endlessly (default: each row's own solution);
- `check_data(data)` and `check(cfg)`: the config rules that concern this task alone, run by
  `rlvr.tasks.task_for` before the task is used (`check_data` sees the data section only, so it
  also checks each data.mix part);
- `tiny_tokenizer(cfg)`: the options of the tiny lab model's character tokenizer;
- `held_out_label(cfg)`: where the held-out problems come from, as `rlvr eval` reports it.

A new task is one file that subclasses `Task` and registers it, plus its import line in
`rlvr/tasks/__init__.py` (a task outside the package registers when its module is imported, before
the config naming it is loaded; tests/test_tasks.py does that):

    @register_task("countdown")
    class Countdown(Task):
        '''Reach a target number from a few others.'''

        def splits(self, cfg, skipped=None):
            return make_countdown_splits(cfg.task.num_train, cfg.task.num_eval, cfg.run.seed)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any, Callable

from rlvr.algorithms.registry import Registry
from rlvr.config import Config, ConfigError, DataConfig
from rlvr.data import Example, Problem, solution_targets

Splits = tuple[Sequence[Example], Sequence[Example]]  # (train, held-out)


class Task(ABC):
    """A source of problems; the first line of a subclass's docstring is its entry in `rlvr config`."""

    # The reward term every row names in reward.route_field, when the rows choose their own judge:
    # task_for then requires it in reward.functions (also for a data.mix entry of this task).
    routes_to: str | None = None

    @abstractmethod
    def splits(self, cfg: Config, skipped: list[Problem] | None = None) -> Splits:
        """(train, held-out); bad rows a file source leaves out (data.skip_bad_rows) are appended to `skipped`."""

    def sft_targets(self, cfg: Config, train: Sequence[Example]) -> Iterator[tuple[Example, str]]:
        """(example, target) pairs for cold-start SFT, drawn from run.seed, endlessly."""
        return solution_targets(train, cfg.sft.batch_size, cfg.run.seed)

    def check_data(self, data: DataConfig) -> None:
        """Raise ConfigError for data.* settings this task cannot run with."""

    def check(self, cfg: Config) -> None:
        """Raise ConfigError for settings across sections that contradict this task."""

    def tiny_tokenizer(self, cfg: Config) -> dict[str, Any]:
        """Keywords of `models.build_char_tokenizer` for the tiny lab model (model.path empty)."""
        return {"thinking": cfg.task.format != "plain", "code": False, "tools": False}

    def held_out_label(self, cfg: Config) -> str:
        """Where the held-out problems come from, for a report: by default a split the task draws from run.seed."""
        return f"{cfg.data.source} held-out split (seed {cfg.run.seed})"


TASKS: Registry[Task] = Registry("data.source")


def register_task(name: str) -> Callable[[type[Task]], type[Task]]:
    """Class decorator: make the task selectable as `data.source = name` (one instance serves every run)."""

    def add(cls: type[Task]) -> type[Task]:
        TASKS.register(name)(cls())
        return cls

    return add


def require(ok: bool, name: str, why: str) -> None:
    """A task's config rule, worded as Config.validate words the config's own: 'name: why'."""
    if not ok:
        raise ConfigError(f"{name}: {why}")


def held_out_of(rows: str, cfg: Config) -> str:
    """The label of held-out rows a file source takes from its training rows (data.eval_fraction, from run.seed)."""
    return f"{cfg.data.eval_fraction:g} of {rows} held out (seed {cfg.run.seed})"


def refuse_data_paths(cfg: Config) -> None:
    """A procedural task makes its own problems: a data file set beside it would be silently unused."""
    for name in ("train_path", "eval_path"):
        require(not getattr(cfg.data, name), f"data.{name}",
                f"is set but data.source = {cfg.data.source!r} would ignore it; set data.source = 'jsonl' or 'hf'")
