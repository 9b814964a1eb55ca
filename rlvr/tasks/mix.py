"""Mixtures of data sources (data.mix): several sources, each with its own data settings and a
weight, as one training set whose rows remember where they came from.

Each `[[data.mix]]` table holds a source's `data.*` settings (source, train_path, prompt_field,
answer_format, gym_tasks, ...; unset ones are the `[data]` section's) plus `weight` (default 1)
and optionally `name` (default: the source and its path) and `verifier` (the reward term that
judges its rows: reward.route_field). The training set has the sources in proportion to their
weights: of N = all training rows together, source i contributes round(N * w_i / sum w) rows,
drawn from the seed without repeats while it has enough, cycling through it again when it has
fewer. Held-out rows of every source are all kept. Each row's `source` field names its source.

The mixture is a task of its own (`MIXTURE`, what `rlvr.tasks.task_for` gives when data.mix is
set) but not a name of data.source: that stays the task its parts default to, whose SFT targets,
config checks (`task_for` runs them through the mixture) and tiny-model tokenizer the mixture uses;
each part's own data rules are checked as it is read (`part_config`).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator, Sequence
from typing import Any

from rlvr.config import Config, ConfigError, DataConfig
from rlvr.data import Example, Problem
from rlvr.reward import term_names
from rlvr.tasks.registry import TASKS, Task

MIX_KEYS = {"weight", "name", "verifier"}


def part_config(cfg: Config, index: int, table: dict[str, Any]) -> tuple[Config, float, str, str | None]:
    """The config one source of the mixture is loaded with, its weight, name and verifier."""
    where = f"data.mix[{index}]"
    fields = {f.name for f in dataclasses.fields(DataConfig)} - {"mix"}
    unknown = set(table) - fields - MIX_KEYS
    if unknown:
        raise ConfigError(f"{where}: {sorted(unknown)} are not data settings (data.* fields, weight, name, verifier)")
    weight = table.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight <= 0:
        raise ConfigError(f"{where}.weight: must be a number > 0, got {weight!r}")
    settings = {k: v for k, v in table.items() if k not in MIX_KEYS}
    if settings.get("source", cfg.data.source) not in TASKS:  # replace() checks no field's value
        raise ConfigError(f"{where}.source: {settings.get('source')!r} is not one of {list(TASKS)}")
    try:
        data = dataclasses.replace(cfg.data, **settings, mix=[])
        data.validate()
        TASKS[data.source].check_data(data)  # its task's rules for the data section (Config.validate knows no task)
    except (TypeError, ConfigError) as err:
        raise ConfigError(f"{where}: {err}") from None
    name = str(table.get("name") or (f"{data.source}:{data.train_path}" if data.train_path else data.source))
    verifier = table.get("verifier")
    if verifier is not None and verifier not in term_names(cfg.reward):
        raise ConfigError(f"{where}.verifier: {verifier!r} names no reward term (the terms: {term_names(cfg.reward)})")
    return dataclasses.replace(cfg, data=data), float(weight), name, verifier


def load_mixture(cfg: Config, skipped: list[Problem] | None = None) -> tuple[list[Example], list[Example]]:
    """Train and held-out examples of every source in cfg.data.mix, each loaded by its task."""
    parts = [part_config(cfg, i, table) for i, table in enumerate(cfg.data.mix)]
    names = [name for _, _, name, _ in parts]
    if len(set(names)) != len(names):
        raise ConfigError(f"data.mix: two sources have the same name {names}; give each a `name`")
    loaded = [(TASKS[part_cfg.data.source].splits(part_cfg, skipped), weight, name, verifier) for part_cfg, weight, name, verifier in parts]
    total = sum(len(train) for (train, _), _, _, _ in loaded)
    weights = sum(weight for _, weight, _, _ in loaded)
    rng = random.Random(f"mix:{cfg.run.seed}")
    train_rows: list[Example] = []
    held_rows: list[Example] = []
    route = cfg.reward.route_field
    for (train, held), weight, name, verifier in loaded:
        want = max(1, round(total * weight / weights))
        order: list[int] = []
        while len(order) < want:  # without repeats while the source has rows, then again
            batch = list(range(len(train)))
            rng.shuffle(batch)
            order += batch
        train_rows += [_tagged(train[i], name, verifier, route) for i in order[:want]]
        held_rows += [_tagged(e, name, verifier, route) for e in held]
    rng.shuffle(train_rows)
    return train_rows, interleave(held_rows, [e.info["source"] for e in held_rows])


def interleave(rows: list[Example], keys: list[str]) -> list[Example]:
    """Rows of several groups taken in turn (first of each, second of each, ...), so that the first
    N held-out problems (eval.max_problems) cover every source, not only the first."""
    groups: dict[str, list[Example]] = {}
    for row, key in zip(rows, keys):
        groups.setdefault(key, []).append(row)
    out, lists = [], list(groups.values())
    for i in range(max((len(g) for g in lists), default=0)):
        out += [g[i] for g in lists if i < len(g)]
    return out


def _tagged(e: Example, name: str, verifier: str | None, route_field: str) -> Example:
    info = dict(e.info) if isinstance(e.info, dict) else {}
    info["source"] = name
    if verifier is not None and route_field:
        info.setdefault(route_field, verifier)
    return dataclasses.replace(e, info=info)


class Mixture(Task):
    """data.mix: several sources as one training set, in proportion to their weights."""

    def splits(self, cfg: Config, skipped: list[Problem] | None = None) -> tuple[list[Example], list[Example]]:
        return load_mixture(cfg, skipped)

    def sft_targets(self, cfg: Config, train: Sequence[Example]) -> Iterator[tuple[Example, str]]:
        return TASKS[cfg.data.source].sft_targets(cfg, train)

    def check_data(self, data: DataConfig) -> None:
        TASKS[data.source].check_data(data)

    def check(self, cfg: Config) -> None:
        TASKS[cfg.data.source].check(cfg)

    def tiny_tokenizer(self, cfg: Config) -> dict[str, Any]:
        return TASKS[cfg.data.source].tiny_tokenizer(cfg)

    def held_out_label(self, cfg: Config) -> str:
        parts = [part_config(cfg, i, table) for i, table in enumerate(cfg.data.mix)]
        return "data.mix: " + "; ".join(f"{name}: {TASKS[part.data.source].held_out_label(part)}" for part, _, name, _ in parts)


MIXTURE = Mixture()
