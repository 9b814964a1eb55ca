"""Examples, prompt formatting and JSONL sources.

An `Example` is one problem: the prompt text, the gold final answer, and optionally a worked
solution (for SFT) and a difficulty level (for per-level evaluation). Every source, built-in or
user JSONL, produces the same type, and every JSONL line is validated before training starts.
"""

from __future__ import annotations

import json
import re
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from rlvr.config import DataConfig


class DataError(ValueError):
    """A data file is unusable; the message names the file and line."""


@dataclass(frozen=True)
class Example:
    prompt: str
    answer: str
    solution: str | None = None  # a worked solution ending in \boxed{answer}
    level: int | None = None  # difficulty level, for per-level evaluation
    info: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


def boxed(answer: str) -> str:
    """The bare final-answer form every verifier and SFT target shares: \\boxed{answer}."""
    return "\\boxed{" + answer + "}"


def format_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str, cfg: DataConfig) -> str:
    """The exact text the model is conditioned on: the chat template when the tokenizer has one."""
    if cfg.use_chat_template and getattr(tokenizer, "chat_template", None):
        messages = [{"role": "system", "content": cfg.system_prompt}] if cfg.system_prompt else []
        messages.append({"role": "user", "content": prompt})
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return prompt


def _field(record: dict[str, Any], name: str, where: str, required: bool) -> str | None:
    if name not in record or record[name] is None:
        if required:
            raise DataError(f"{where}: missing field {name!r} (fields present: {sorted(record)})")
        return None
    value = record[name]
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise DataError(f"{where}: field {name!r} must be a string or number, got {type(value).__name__}")
    text = str(value)
    if required and not text.strip():
        raise DataError(f"{where}: field {name!r} is empty")
    return text


def read_jsonl(path: str | Path, cfg: DataConfig, need_solution: bool = False) -> list[Example]:
    """Read and validate every line; the first bad line raises DataError with file:line."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    examples = []
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            where = f"{path}:{lineno}"
            try:
                # utf-8-sig on the first line accepts the BOM some editors write
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise DataError(f"{where}: not valid UTF-8 (byte {err.start + 1} of the line)") from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(f"{where}: invalid JSON ({err.msg} at column {err.colno})") from None
            if not isinstance(record, dict):
                raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}")
            level = _field(record, cfg.level_field, where, required=False)
            if level is not None and not re.fullmatch(r"-?[0-9]+", level.strip()):
                raise DataError(f"{where}: field {cfg.level_field!r} must be an integer, got {level!r}")
            examples.append(
                Example(
                    prompt=_field(record, cfg.prompt_field, where, required=True),
                    answer=_field(record, cfg.answer_field, where, required=True),
                    solution=_field(record, cfg.solution_field, where, required=need_solution),
                    level=int(level) if level is not None else None,
                    info=record,
                )
            )
    if not examples:
        raise DataError(f"{path}: no examples")
    return examples


def load_jsonl_splits(cfg: DataConfig, seed: int, need_solution: bool) -> tuple[list[Example], list[Example]]:
    """Train and held-out examples from the user's files (held out from train when no eval file)."""
    train = read_jsonl(cfg.train_path, cfg, need_solution)
    if cfg.eval_path:
        return train, read_jsonl(cfg.eval_path, cfg)
    order = list(range(len(train)))
    random.Random(seed).shuffle(order)
    n_eval = max(1, int(len(train) * cfg.eval_fraction))
    if n_eval >= len(train):
        raise DataError(f"{cfg.train_path}: too few examples ({len(train)}) to hold out an eval split")
    held = set(order[:n_eval])
    return [e for i, e in enumerate(train) if i not in held], [train[i] for i in sorted(held)]
