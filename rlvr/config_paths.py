"""Relative paths in a config or recipe file mean paths next to that file.

A user who writes `train_path = "gsm8k.jsonl"` beside the JSONL expects that file, wherever
`rlvr` runs from. The rule, for the fields that name something a run reads (INPUT_PATH_FIELDS):
a relative value written in a file becomes the absolute path next to the file *when that path
exists*; otherwise it stays as written, for what it then is: a hub id (Qwen/Qwen2.5-1.5B,
openai/gsm8k), a named preset (grpo), or a path from the working directory. A hub id is taken for
a path only when a directory of that name sits next to the file, and transformers and datasets
then load that local directory too. A keyword is never a path, whatever sits next to the file: a
named preset (algo.preset = "grpo"; a preset file ends in .toml), and in a recipe, an rft stage's
base = "start" and a distill stage's student = "tiny[:key=value,...]" (`is_keyword`).

A command-line override means a path from the working directory, as a shell user means it: it
becomes the absolute path there by the same rule (when that path exists; a hub id or a path that
does not exist stays as written). run.output_dir is never resolved (outputs go under the directory
rlvr runs in, as the default runs/<command>-<time> does). So a run's saved config.toml holds
absolute paths for everything that existed when it started, and resuming or evaluating it reads
the same files from wherever rlvr runs; a value left relative (a hub id) is read next to the run
directory only if something of that name is there.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

# Every config field whose value names a file, a directory, a model, a dataset or a run to read:
# (section, field). data.mix entries take data's fields, so theirs are resolved too; so is the <where> of
# reward.functions' reward_model:<where> entries, and reward.judge.rubric when it names a file.
INPUT_PATH_FIELDS = (
    ("model", "path"),  # a model directory or hub id
    ("data", "train_path"),  # a JSONL file, or (source = 'hf') a dataset file, directory or hub id
    ("data", "eval_path"),
    ("data", "chat_template"),  # a Jinja file
    ("distill", "teacher"),  # a model directory, hub id or run (runs/a@50)
    ("algo", "preset"),  # a named preset or a preset TOML file
)

# The values of a field (a config field "section.name", or a recipe stage's option) that are
# keywords, not paths.
KEYWORDS: dict[str, Callable[[str], bool]] = {
    "algo.preset": lambda value: not value.endswith(".toml"),  # grpo, dapo, ...: rlvr/presets/NAME.toml
    "base": lambda value: value == "start",  # a recipe's rft stage: the recipe's starting model
    "student": lambda value: value == "tiny" or value.startswith("tiny:"),  # a recipe's distill stage: a fresh tiny model
}


def is_keyword(name: str, value: str) -> bool:
    """Whether `value` of the field or recipe option `name` is one of its keywords (never a path).

    >>> is_keyword("base", "start"), is_keyword("student", "tiny:num_layers=1"), is_keyword("model.path", "start")
    (True, True, False)
    """
    return name in KEYWORDS and KEYWORDS[name](value)


def path_next_to(value: str, directory: Path, name: str = "") -> str:
    """`value` as the absolute path next to `directory` when that exists, else as written; a keyword
    of the field or recipe option `name` (`is_keyword`) stays as written. A run point (`runs/a@50`:
    see rlvr.sources) keeps its `@point` after the resolved run directory.

    >>> path_next_to("Qwen/Qwen2.5-1.5B", Path("/nonexistent"))
    'Qwen/Qwen2.5-1.5B'
    """
    if not value or Path(value).expanduser().is_absolute() or is_keyword(name, value):
        return value
    if (directory / value).exists():
        return os.path.abspath(directory / value)
    run, at, point = value.rpartition("@")
    if at and run and (directory / run).exists():
        return f"{os.path.abspath(directory / run)}@{point}"
    return value


def resolve_input_paths(table: dict[str, Any], directory: Path) -> dict[str, Any]:
    """A copy of a nested config table (as read from a TOML file in `directory`) with the values
    of INPUT_PATH_FIELDS, data.mix entries' included, read next to `directory` (`path_next_to`).
    Values of the wrong type are left for the config loader to refuse, naming the field."""
    out = dict(table)
    for section, name in INPUT_PATH_FIELDS:
        if isinstance(out.get(section), dict) and isinstance(out[section].get(name), str):
            out[section] = {**out[section], name: path_next_to(out[section][name], directory, f"{section}.{name}")}
    functions = out["reward"].get("functions") if isinstance(out.get("reward"), dict) else None
    if isinstance(functions, list):  # reward_model:<where> names a model or run, read by the same rule
        out["reward"] = {**out["reward"], "functions": [_reward_model_next_to(f, directory) for f in functions]}
    judge = out["reward"].get("judge") if isinstance(out.get("reward"), dict) else None
    rubric = judge.get("rubric") if isinstance(judge, dict) else None
    if isinstance(rubric, str) and "{" not in rubric and "\n" not in rubric:  # a rubric file (a template has placeholders)
        try:
            out["reward"] = {**out["reward"], "judge": {**judge, "rubric": path_next_to(rubric, directory)}}
        except OSError:  # not a name a file can have: the judge says so, naming reward.judge.rubric
            pass
    mix = out.get("data", {}).get("mix") if isinstance(out.get("data"), dict) else None
    if isinstance(mix, list):
        entries = [resolve_input_paths({"data": entry}, directory)["data"] if isinstance(entry, dict) else entry for entry in mix]
        out["data"] = {**out["data"], "mix": entries}
    return out


def _reward_model_next_to(spec: Any, directory: Path) -> Any:
    """A reward.functions entry `reward_model:<where>` with <where> read by `path_next_to`; any other entry as written.

    >>> _reward_model_next_to("boxed_math", Path("/nonexistent")), _reward_model_next_to("reward_model:org/rm", Path("/nonexistent"))
    ('boxed_math', 'reward_model:org/rm')
    """
    from rlvr.verifiers.reward_model import PREFIX, is_reward_model, location  # the contract's own prefix (a light module)

    if not isinstance(spec, str) or not is_reward_model(spec):
        return spec
    return PREFIX + path_next_to(location(spec), directory)
