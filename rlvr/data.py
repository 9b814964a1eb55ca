"""Examples, prompt formatting and JSONL sources.

An `Example` is one problem: the prompt text, the gold final answer, and optionally a worked
solution (for SFT) and a difficulty level (for per-level evaluation). Every source, built-in or
user JSONL, produces the same type, and every JSONL line is validated before training starts.
"""

from __future__ import annotations

import functools
import json
import re
import random
from dataclasses import dataclass, field
from pathlib import Path
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

if TYPE_CHECKING:  # annotations only: reading data (and `rlvr config`, which lists the tasks) needs no transformers
    from transformers import PreTrainedTokenizerBase

from rlvr.config import DataConfig
from rlvr.errors import UsageError


class DataError(UsageError):
    """A data file is unusable; the message names the file and line."""


@dataclass(frozen=True)
class Example:
    prompt: str
    answer: str
    solution: str | None = None  # a worked solution ending in \boxed{answer}
    level: int | None = None  # difficulty level, for per-level evaluation
    info: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    # A chat-format prompt: its (role, content) turns, system and few-shot included; `prompt` is then
    # the last user turn (what logs and samples show).
    messages: tuple[tuple[str, str], ...] | None = None


def boxed(answer: str) -> str:
    """The bare final-answer form every verifier and SFT target shares: \\boxed{answer}."""
    return "\\boxed{" + answer + "}"


def uses_chat_template(tokenizer: PreTrainedTokenizerBase, cfg: DataConfig) -> bool:
    return bool(cfg.use_chat_template and (cfg.chat_template or getattr(tokenizer, "chat_template", None)))


@functools.lru_cache(maxsize=8)
def _template_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"data.chat_template: cannot read {path}: {err}") from None


def chat_template_text(cfg: DataConfig) -> str | None:
    """The template file data.chat_template names, read (None: the tokenizer's own)."""
    return _template_text(cfg.chat_template) if cfg.chat_template else None


def prompt_messages(prompt: Example | str, cfg: DataConfig) -> list[dict[str, str]]:
    """The chat messages a prompt becomes under a chat template: a chat-format example's own turns
    (data.system_prompt first when they have no system turn), or the system prompt and one user turn."""
    turns = prompt.messages if isinstance(prompt, Example) else None
    if turns is not None:
        messages = [{"role": role, "content": content} for role, content in turns]
        if cfg.system_prompt and messages[0]["role"] != "system":
            messages.insert(0, {"role": "system", "content": cfg.system_prompt})
        return messages
    messages = [{"role": "system", "content": cfg.system_prompt}] if cfg.system_prompt else []
    messages.append({"role": "user", "content": prompt.prompt if isinstance(prompt, Example) else prompt})
    return messages


def _renders_as_chat(tokenizer: PreTrainedTokenizerBase, prompt: Example | str, cfg: DataConfig) -> bool:
    if isinstance(prompt, Example) and prompt.messages is not None:
        if not (cfg.chat_template or getattr(tokenizer, "chat_template", None)):
            raise DataError("a prompt is a list of chat messages but the tokenizer has no chat template: set data.chat_template "
                            "to a template file, or give prompts as strings")
        return True
    return uses_chat_template(tokenizer, cfg)


def format_prompt(tokenizer: PreTrainedTokenizerBase, prompt: Example | str, cfg: DataConfig) -> str:
    """The exact text the model is conditioned on: chat messages through the chat template; a
    string through it too when data.use_chat_template and the tokenizer has one, else as written."""
    if _renders_as_chat(tokenizer, prompt, cfg):
        template = _template_text(cfg.chat_template) if cfg.chat_template else None
        return tokenizer.apply_chat_template(prompt_messages(prompt, cfg), tokenize=False, add_generation_prompt=True, chat_template=template,
                                             **cfg.chat_template_kwargs)
    return prompt.prompt if isinstance(prompt, Example) else prompt


def chat_prompts(tokenizer: PreTrainedTokenizerBase, examples: list[Example], cfg: DataConfig) -> list[list[dict[str, str]]] | None:
    """The prompts as TRL hands them to reward functions when they went through a chat template
    (one message list per example), or None when they did not (the prompt text is what they get)."""
    if not examples or not any(_renders_as_chat(tokenizer, e, cfg) for e in examples):
        return None
    return [prompt_messages(e, cfg) for e in examples]


# A gold-answer check: True when the answer can be scored, else False or the reason (a string).
AnswerCheck = Callable[[str], "bool | str"]


class _BadRow(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def solution_targets(examples: list[Example], batch_size: int, seed: int) -> Iterator[tuple[Example, str]]:
    """SFT targets for a user's data: each sampled example's own solution, endlessly, drawn in
    batches of `batch_size` from the seed (the examples must have solutions)."""
    rng = random.Random(f"sft:{seed}")
    while True:
        for i in [rng.randrange(len(examples)) for _ in range(batch_size)]:
            yield examples[i], examples[i].solution or ""


def _field(record: dict[str, Any], name: str, required: bool, structured: bool = False) -> str | None:
    """The field as text. With `structured` a JSON object or array is accepted too and becomes its
    JSON text (python_code's gold tests may be written as an object in the data file, and MBPP ships
    its asserts as a list, `test_list`)."""
    if name not in record or record[name] is None:
        if required:
            raise _BadRow(f"missing field {name!r}", f"missing field {name!r} (fields present: {sorted(record)})")
        return None
    value = record[name]
    if structured and isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        kinds = "a string, number, JSON object or array" if structured else "a string or number"
        raise _BadRow(f"wrong type of field {name!r}", f"field {name!r} must be {kinds}, got {type(value).__name__}")
    text = str(value)
    if required and not text.strip():
        raise _BadRow(f"empty field {name!r}", f"field {name!r} is empty")
    return text


def _prompt(record: dict[str, Any], name: str) -> tuple[str, tuple[tuple[str, str], ...] | None]:
    """The prompt field: a string, or a list of chat messages (-> the last user turn and all turns)."""
    value = record.get(name)
    if not isinstance(value, list):
        return _field(record, name, required=True), None
    turns = []
    for i, message in enumerate(value):
        if not (isinstance(message, dict) and isinstance(message.get("role"), str) and isinstance(message.get("content"), str)):
            raise _BadRow(f"bad chat message in {name!r}", f"field {name!r}[{i}] must be an object with string 'role' and 'content', got {message!r:.80}")
        turns.append((message["role"], message["content"]))
    users = [content for role, content in turns if role == "user"]
    if not users or turns[-1][0] != "user":
        raise _BadRow(f"bad chat messages in {name!r}", f"field {name!r} must end with a user turn (roles: {[r for r, _ in turns]})")
    return users[-1], tuple(turns)


_CALCULATOR = re.compile(r"<<[^<>]*>>")  # GSM8K's calculator annotations, e.g. <<48/2=24>>


def read_answer(text: str, answer_format: str, field_name: str) -> tuple[str, str | None]:
    """(gold answer, worked solution or None) from the answer field under data.answer_format."""
    if answer_format == "plain":
        return text, None
    if answer_format == "gsm8k":
        rationale, sep, final = text.rpartition("####")
        final = final.strip().replace(",", "") if re.fullmatch(r"\s*-?[0-9][0-9,]*(\.[0-9]+)?\s*", final) else final.strip()
        if not sep or not final:
            raise _BadRow(f"no '####' answer in {field_name!r}", f"field {field_name!r} has no final answer after '####' (data.answer_format = 'gsm8k')")
        solution = _CALCULATOR.sub("", rationale).strip()
        return final, (solution + "\n" if solution else "") + boxed(final)
    if answer_format == "boxed":
        from rlvr.verifiers.math.extract import extract_last_boxed  # start-up time: loads the math verifier, for boxed data only

        final = extract_last_boxed(text)
        if final is None or not final.strip():
            raise _BadRow(f"no \\boxed{{}} answer in {field_name!r}", f"field {field_name!r} has no (well-formed) \\boxed{{}} (data.answer_format = 'boxed')")
        return final.strip(), text
    raise ValueError(f"unknown answer format {answer_format!r}")


def parse_record(record: Any, cfg: DataConfig, need_solution: bool, answer_ok: AnswerCheck | None) -> Example:
    """One row (a JSONL object, a dataset row) as an Example, or _BadRow saying what is wrong."""
    if not isinstance(record, dict):
        raise _BadRow("not a JSON object", f"expected a JSON object, got {type(record).__name__}")
    level = _field(record, cfg.level_field, required=False)
    if level is not None:  # an integer, or MATH's "Level 5"
        found = re.fullmatch(r"(?:level\s*)?(-?[0-9]+)", level.strip(), re.IGNORECASE)
        if found is None:
            raise _BadRow(f"bad field {cfg.level_field!r}", f"field {cfg.level_field!r} must be an integer (or 'Level N'), got {level!r}")
        level = found.group(1)
    prompt, messages = _prompt(record, cfg.prompt_field)
    answer, worked = read_answer(_field(record, cfg.answer_field, required=True, structured=True), cfg.answer_format, cfg.answer_field)
    # A row that names its own reward term (reward.route_field, which the check carries) is checked by that term alone.
    route = record.get(getattr(answer_ok, "route_field", None) or "", None)
    verdict = True if answer_ok is None else answer_ok(answer, route=route) if isinstance(route, str) else answer_ok(answer)
    if isinstance(verdict, str) or not verdict:
        why = verdict if isinstance(verdict, str) else "cannot be matched by the verifier even against itself (not a final answer)"
        raise _BadRow(f"unparseable field {cfg.answer_field!r}", f"field {cfg.answer_field!r} = {answer[:80]!r} {why}")
    solution = _field(record, cfg.solution_field, required=need_solution and worked is None) or worked
    return Example(prompt=prompt, answer=answer, solution=solution, level=int(level) if level is not None else None, info=record,
                   messages=messages)


@dataclass
class Problem:
    where: str  # file:line
    kind: str  # what is counted, e.g. "missing field 'answer'"
    message: str


def _parse_line(raw: bytes, lineno: int, cfg: DataConfig, need_solution: bool, answer_ok: AnswerCheck | None) -> Example | None:
    try:
        # utf-8-sig on the first line accepts the BOM some editors write
        line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
    except UnicodeDecodeError as err:
        raise _BadRow("not UTF-8", f"not valid UTF-8 (byte {err.start + 1} of the line)") from None
    if not line.strip():
        return None
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise _BadRow("invalid JSON", f"invalid JSON ({err.msg} at column {err.colno})") from None
    return parse_record(record, cfg, need_solution, answer_ok)


def read_jsonl(
    path: str | Path,
    cfg: DataConfig,
    need_solution: bool = False,
    answer_ok: AnswerCheck | None = None,
    skipped: list[Problem] | None = None,
    limit: int = 0,
) -> list[Example]:
    """Read and validate every line (the first `limit` examples when > 0), then report every
    problem at once (`collect_examples`)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    with path.open("rb") as fh:
        rows = ((f"{path}:{lineno}", functools.partial(_parse_line, raw, lineno, cfg, need_solution, answer_ok))
                for lineno, raw in enumerate(fh, start=1))
        return collect_examples(path, rows, cfg, skipped, limit)


def collect_examples(source: str | Path, rows: Iterable[tuple[str, Callable[[], Example | None]]], cfg: DataConfig,
                     skipped: list[Problem] | None = None, limit: int = 0, keep: Callable[[int, Example], Any] | None = None) -> list:
    """Every row parsed (`where`, a thunk giving the Example, None for a blank row, or raising
    _BadRow), then every problem reported at once. Returns the good examples, or what `keep(row
    number, example)` keeps of each (an Arrow-backed source keeps only the row number).

    A bad row (invalid JSON or UTF-8, a missing, empty or wrong-typed field, a gold answer that
    `answer_ok` rejects, an `id` seen on an earlier row) raises DataError naming each row and
    counting each kind of problem, unless `cfg.skip_bad_rows`: then bad rows are left out and
    appended to `skipped` for the caller to report. With `limit` > 0 reading stops after that many
    good examples (data.max_rows).
    """
    examples, problems, seen_ids = [], [], {}
    for number, (where, parse) in enumerate(rows):
        if limit and len(examples) >= limit:
            break
        try:
            example = parse()
            if example is None:
                continue
            row_id = example.info.get(cfg.id_field) if cfg.id_field else None
            if row_id is not None:
                key = json.dumps(row_id, sort_keys=True, default=str)
                if key in seen_ids:
                    raise _BadRow(f"duplicate {cfg.id_field!r}", f"{cfg.id_field} {row_id!r} already {_place(seen_ids[key])}")
                seen_ids[key] = where
        except _BadRow as bad:
            problems.append(Problem(where, bad.kind, str(bad)))
            continue
        examples.append(example if keep is None else keep(number, example))
    if problems and not cfg.skip_bad_rows:
        raise DataError(describe_problems(Path(source), problems, len(examples)))
    if skipped is not None:
        skipped.extend(problems)
    if not examples:
        raise DataError(f"{source}: no examples" + (f" ({len(problems)} bad rows skipped)" if problems else ""))
    return examples


def _place(where: str) -> str:
    """'on line 3' for a JSONL line (path:3), 'at row #3' for a dataset row (name[split]#3)."""
    head, _, tail = where.rpartition(":")
    if head and tail.isdigit():
        return f"on line {tail}"
    return f"at row #{where.rpartition('#')[2]}"


def describe_problems(path: Path, problems: list[Problem], good: int, show: int = 10) -> str:
    counts = Counter(p.kind for p in problems)
    head = f"{path}: {len(problems)} bad rows of {len(problems) + good} (" + ", ".join(f"{n} {kind}" for kind, n in counts.most_common()) + ")"
    lines = [f"  {p.where}: {p.message}" for p in problems[:show]]
    more = [f"  ... and {len(problems) - show} more"] if len(problems) > show else []
    hint = ["  fix them, or set data.skip_bad_rows = true to train without them"]
    return "\n".join([head, *lines, *more, *hint])


def load_jsonl_splits(
    cfg: DataConfig,
    seed: int,
    need_solution: bool,
    answer_ok: AnswerCheck | None = None,
    skipped: list[Problem] | None = None,
) -> tuple[list[Example], list[Example]]:
    """Train and held-out examples from the user's files (held out from train when no eval file)."""
    train = read_jsonl(cfg.train_path, cfg, need_solution, answer_ok, skipped, limit=cfg.max_rows)
    if cfg.eval_path:
        return train, read_jsonl(cfg.eval_path, cfg, False, answer_ok, skipped)
    return hold_out(train, cfg, seed)


def hold_out(train: list[Example], cfg: DataConfig, seed: int) -> tuple[list[Example], list[Example]]:
    """(train, held-out): data.eval_fraction of the rows, chosen from the seed."""
    order = list(range(len(train)))
    random.Random(seed).shuffle(order)
    n_eval = max(1, int(len(train) * cfg.eval_fraction))
    if n_eval >= len(train):
        raise DataError(f"{cfg.train_path}: too few examples ({len(train)}) to hold out an eval split")
    held = set(order[:n_eval])
    kept, out = [i for i in range(len(train)) if i not in held], sorted(held)
    if hasattr(train, "subset"):  # Arrow-backed (tasks.hf.ArrowExamples): two views of the same file, nothing parsed
        return train.subset(kept), train.subset(out)
    return [train[i] for i in kept], [train[i] for i in out]
