"""The reward contract: how a reward spec becomes a function, and how that function is called.

One resolver (:func:`resolve_reward`) serves training (`rlvr.reward`), the worker pool
(`rlvr.verifiers.pool`) and `rlvr audit-reward`, so a function is called the same way in all
three. A spec is a registered name (`boxed_math`, or a name your module registers with
``@rlvr.verifiers.registry.register`` and lists in ``reward.imports``) or an import path
``module:function`` (a function, an ``async def``, a callable object; ``module:obj.attr`` works), or
``reward_model:<where>``: a sequence-classification reward model (a directory, hub id or run;
:mod:`rlvr.verifiers.reward_model`), a TRL-batched term, or ``judge``: an LLM judge over an
OpenAI-compatible endpoint, its settings the reward section's ``[reward.judge]``
(:mod:`rlvr.verifiers.judge`). A reward may say it is learned or judged (a reward model, an LLM
judge) with ``learned = True`` on its function: :attr:`Reward.learned`.

Two signatures, told apart once, from the parameter names (:func:`is_batched`):

- **per item** ``f(completion, answer, **fields) -> float | None``: called once per completion
  with its text and the gold answer (text). The example's other fields (``solution``,
  ``level``, every column of the data row) reach it through ``**kwargs``, or through a
  parameter *without a default* named like the field. A parameter with a default is a setting
  (python_code's ``sandbox``) and is never filled from data.
- **TRL-batched** ``f(prompts, completions, **columns) -> list[float | None]``: any function that
  takes ``prompts``, ``completions`` or ``completion_ids`` (TRL calls reward functions by
  keyword), or only ``**kwargs``. Called once per batch, as TRL's GRPOTrainer calls it:
  ``prompts``; ``completions`` (chat messages ``[{"role": "assistant", "content": ...}]`` when
  the prompt went through a chat template, else text); ``completion_ids`` (the sampled token
  ids, EOS included, when the caller has them); and one list per column: ``answer``,
  ``solution``, ``level``, ``completion_lengths`` and every field of the data rows (a field
  missing from a row is None there). TRL's own ``prompt``, ``completion`` and ``completion_ids``
  names are never taken from data.

A value is a real number (bool, NumPy scalars and one-element tensors included) or, for "this
function does not score this row", None or NaN (as in TRL). Anything else, an infinity, a raise
or a list of the wrong length is an *error* for that row, counted and never scored as 0. A batched
function may return an exception in a row's place to say why that row failed (an LLM judge whose
server did not answer); a ``TimeoutError``, returned or raised, counts as a timeout (:func:`is_timeout`).
``async def`` functions (and callables returning awaitables) are awaited; per-item ones
concurrently over a batch.

Verifiers may declare what they need (the registry's built-ins do):
``time_limit_s`` / ``timeout_score`` (the pool's timeouts), ``check_answer(answer)`` (raises
ValueError when a gold answer can never be matched: bad data, refused when the data loads) and
``preflight()`` (raises when the machine cannot run the verifier: checked before a model loads).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import importlib
import inspect
import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from rlvr.config import ConfigError, RewardConfig
from rlvr.errors import UsageError
from rlvr.verifiers.judge import NAME as JUDGE_NAME, Judge, SettingsError, is_judge  # the standard library only
from rlvr.verifiers.reward_model import NAME as REWARD_MODEL_NAME, is_reward_model, resolve_reward_model  # light: transformers loads in calls

__all__ = [
    "Item",
    "Reward",
    "as_reward",
    "batch_columns",
    "chat_completions",
    "example_fields",
    "import_modules",
    "is_batched",
    "is_timeout",
    "resolve_reward",
    "reward_from_callable",
]

TRL_ARGUMENTS = frozenset({"prompts", "completions", "completion_ids"})
# TRL never passes these dataset columns as keywords (they are its own arguments or their rows).
RESERVED_COLUMNS = frozenset({"prompt", "completion", "completion_ids", "prompts", "completions", "answer"})
# Attributes of a verifier that the worker pool reads (rlvr.verifiers.pool) or the pipeline uses.
# take_counts() -> {counter: n}: what a function counted since the last take (an LLM judge's cache hits,
# calls, retries), read by the reward term after each batch and logged as reward/<term>/<counter>.
DECLARED = ("time_limit_s", "timeout_score", "warm_up", "check_answer", "preflight", "answer_key", "take_counts")


@dataclass(frozen=True)
class Item:
    """One row, for a per-item call in a worker process: the gold answer, the row's other fields,
    and the prompt (used when a batched function is called one row at a time, as the audit does)."""

    answer: str
    fields: dict[str, Any] = field(default_factory=dict)
    prompt: str = ""


def as_reward(value: Any) -> float | None:
    """A finite float; None for "not scored" (None or NaN, as TRL reads both). Raises TypeError or
    ValueError for anything else (a string, an infinity)."""
    if value is None:
        return None
    if not isinstance(value, numbers.Real) and hasattr(value, "item"):
        size = value.numel() if callable(getattr(value, "numel", None)) else getattr(value, "size", None)
        if size == 1:  # a one-element torch tensor or NumPy array, np.bool_
            value = value.item()
    if not isinstance(value, numbers.Real):  # bool is a Real: True = 1.0, as TRL's reward functions may return
        raise TypeError(f"a reward must be a number or None, got {type(value).__name__}")
    value = float(value)
    if math.isnan(value):
        return None
    if math.isinf(value):
        raise ValueError(f"a reward must be finite, got {value}")
    return value


def is_batched(fn: Callable[..., Any]) -> bool:
    """True for TRL's signature (a ``prompts``, ``completions`` or ``completion_ids`` parameter,
    or only ``**kwargs``), False for per-item ``f(completion, answer, ...)``; TypeError for
    a function that takes neither.

    >>> is_batched(lambda prompts, completions, **kw: [0.0] * len(completions))
    True
    >>> is_batched(lambda completion, answer: 1.0)
    False
    """
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: called positionally
        return False
    if {p.name for p in params if p.kind not in (p.POSITIONAL_ONLY, p.VAR_POSITIONAL, p.VAR_KEYWORD)} & TRL_ARGUMENTS:
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params):
        return False
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return True
    shown = ", ".join(p.name for p in params)
    raise TypeError(
        f"takes ({shown}): neither per item f(completion, answer, **fields) nor TRL-batched "
        "f(prompts, completions, **columns)"
    )


def import_modules(modules: Sequence[str], where: str = "reward.imports") -> None:
    """Import the modules that register verifiers (``reward.imports``); ConfigError naming the entry."""
    for i, module in enumerate(modules):
        try:
            importlib.import_module(module)
        except Exception as err:  # an ImportError, or the module's own code failing
            raise ConfigError(f"{where}[{i}]: cannot import {module!r}: {type(err).__name__}: {err}") from None


def resolve_reward(spec: str, imports: Sequence[str] = (), where: str = "reward", imports_where: str = "reward.imports",
                   config: RewardConfig | None = None) -> Reward:
    """The reward a spec names: ``reward_model:<where>`` (read first), ``judge``, a registered name or
    ``module:function``. ``imports`` are imported first (their ``@register`` decorators run).
    ``config``: the reward section whose settings a reward model takes (reward.model_*; the defaults
    when None), or the judge ([reward.judge]); it travels with the spec to a worker. Raises ConfigError prefixed with ``where`` (or
    ``imports_where[i]`` for a module that does not import)."""
    import_modules(imports, imports_where)
    module_name, colon, attr = (part.strip() for part in spec.partition(":"))
    if is_reward_model(spec):  # before the module:function parse: a module named reward_model is shadowed
        try:
            fn, name = resolve_reward_model(spec, where, config), REWARD_MODEL_NAME
        except UsageError as err:  # the module sits below the config: its errors become the config's here
            raise ConfigError(str(err)) from None
    elif is_judge(spec):  # its settings are the reward section's [reward.judge], which travels with the spec to a worker
        try:
            fn, name = Judge((config if config is not None else RewardConfig()).judge, where=where), JUDGE_NAME
        except SettingsError as err:
            raise ConfigError(str(err)) from None
    elif colon:
        try:
            fn = functools.reduce(getattr, attr.split("."), importlib.import_module(module_name))
        except (ImportError, AttributeError) as err:
            raise ConfigError(f"{where}: cannot import {spec!r}: {err}") from None
        name = attr.split(".")[-1]
    else:
        # start-up time: the registry imports every built-in verifier (~0.15 s), which an
        # import path never needs
        from rlvr.verifiers.registry import VERIFIERS

        if spec not in VERIFIERS:
            hint = "" if imports else (
                " (a verifier your own module registers needs that module imported first: reward.imports, or --import for audit-reward)"
            )
            raise ConfigError(f"{where}: unknown verifier {spec!r}; registered: {sorted(VERIFIERS)}{hint}")
        fn, name = VERIFIERS[spec], spec
    if not callable(fn):
        raise ConfigError(f"{where}: {spec!r} is not callable")
    try:
        return reward_from_callable(fn, name, spec=spec, imports=tuple(imports), config=config)
    except TypeError as err:
        raise ConfigError(f"{where}: {spec!r} {err}") from None


def reward_from_callable(fn: Callable[..., Any], name: str | None = None, *, spec: str | None = None, imports: tuple[str, ...] = (),
                         config: RewardConfig | None = None) -> Reward:
    """A :class:`Reward` for a function already in hand (TypeError if its signature is neither)."""
    batched = is_batched(fn)
    closed, fills = frozenset(), frozenset()
    if not batched:
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            params = []
        positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][:2]
        named = [p for p in params if p.name not in positional and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        closed = frozenset(positional) | {p.name for p in named if p.default is not p.empty}
        fills = None if any(p.kind == p.VAR_KEYWORD for p in params) else frozenset(p.name for p in named if p.default is p.empty)
    return Reward(fn, batched, name or getattr(fn, "__name__", type(fn).__name__), spec, imports, closed, fills, config)


@dataclass(frozen=True)
class Reward:
    """A resolved reward function and how to call it. Picklable: a reward resolved from a spec
    travels to a worker process as its spec and imports and is resolved there the same way."""

    fn: Callable[..., Any]
    batched: bool
    name: str  # the metric name: the registered name or the function's name
    spec: str | None = None
    imports: tuple[str, ...] = ()
    closed: frozenset[str] = frozenset()  # per item: (completion, answer) and settings (defaults): never from data
    fills: frozenset[str] | None = frozenset()  # per item: the parameters filled from fields; None = any (**kwargs)
    config: RewardConfig | None = field(default=None, compare=False, repr=False)  # the reward section it was resolved under (resolve_reward)

    def __reduce__(self) -> tuple:
        if self.spec is not None:
            return resolve_reward, (self.spec, self.imports, "reward", "reward.imports", self.config)
        return reward_from_callable, (self.fn, self.name)

    @property
    def learned(self) -> bool:
        """A learned or judged reward (a reward model, an LLM judge), as its function says with
        ``learned = True``: the hack monitor watches it against the verifier (hack/<term>/wrong_over_right)."""
        return bool(getattr(self.fn, "learned", False))

    def __getattr__(self, name: str) -> Any:
        if name in DECLARED:  # what the verifier declares, read through the reward
            return getattr(self.fn, name)
        raise AttributeError(name)

    # ---------------------------------------------------------------- per item
    def item_kwargs(self, fields: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in fields.items() if k not in self.closed and k not in RESERVED_COLUMNS and (self.fills is None or k in self.fills)}

    def call_item(self, completion: str, answer: str, fields: dict[str, Any] | None = None) -> float | None:
        value = self.fn(completion, answer, **self.item_kwargs(fields or {}))
        return as_reward(run_awaitable(value) if inspect.isawaitable(value) else value)

    def score_items(self, completions: Sequence[str], answers: Sequence[str], fields: Sequence[dict[str, Any]]) -> tuple[list[float | None], list[str | None]]:
        """Per-item calls over a batch in this process: (values, error per row or None). Awaitables
        (``async def``) are gathered and run concurrently."""
        values: list[Any] = [None] * len(completions)
        errors: list[str | None] = [None] * len(completions)
        pending: dict[int, Any] = {}
        for i, (completion, answer, row) in enumerate(zip(completions, answers, fields)):
            try:
                values[i] = self.fn(completion, answer, **self.item_kwargs(row))
            except Exception as err:  # a verifier that raises on one sample must not stop the run
                errors[i] = _describe(err)
                continue
            if inspect.isawaitable(values[i]):
                pending[i] = values[i]
        if pending:
            done = run_awaitable(_gather(list(pending.values())))
            for i, value in zip(pending, done):
                if isinstance(value, BaseException):
                    errors[i], values[i] = _describe(value), None
                else:
                    values[i] = value
        return _as_rewards(values, errors)

    # ---------------------------------------------------------------- batched
    def call_batch(
        self, prompts: Sequence[Any], completions: Sequence[Any], columns: dict[str, list[Any]], completion_ids: Sequence[list[int]] | None = None
    ) -> tuple[list[float | None], list[str | None]]:
        """One TRL-style call: (values, error per row or None). A call that raises, or returns
        something that is not one value per completion, raises."""
        kwargs = dict(columns)
        if completion_ids is not None:
            kwargs["completion_ids"] = list(completion_ids)
        raw = self.fn(prompts=list(prompts), completions=list(completions), **kwargs)
        if inspect.isawaitable(raw):
            raw = run_awaitable(raw)
        if isinstance(raw, (str, bytes, dict)) or not hasattr(raw, "__len__"):
            raise TypeError(f"a batched reward must return a list, got {type(raw).__name__}")
        raw = list(raw)
        if len(raw) != len(completions):
            raise ValueError(f"returned {len(raw)} rewards for {len(completions)} completions")
        return _as_rewards(raw, [None] * len(raw))

    # ---------------------------------------------------------------- the pool's protocol
    def __call__(self, completion: str, gold: str | Item) -> float | None:
        """One row, as the worker pool calls a verifier: ``gold`` is the answer text or an
        :class:`Item`. A batched function gets a batch of one. Raises on an error."""
        item = gold if isinstance(gold, Item) else Item(gold)
        if not self.batched:
            return self.call_item(completion, item.answer, item.fields)
        columns = {"answer": [item.answer], **{k: [v] for k, v in item.fields.items() if k not in RESERVED_COLUMNS}}
        (value,), (error,) = self.call_batch([item.prompt], [completion], columns)
        if error:
            raise ValueError(error)
        return value


def example_fields(example: Any) -> dict[str, Any]:
    """What a per-item function may see besides (completion, answer): ``solution``, ``level`` and
    every field of the example's data row (``Example.info``), except the reserved names."""
    fields = {"solution": example.solution, "level": example.level}
    for key, value in example.info.items():
        if key not in RESERVED_COLUMNS:
            fields.setdefault(key, value)
    return fields


def batch_columns(examples: Sequence[Any], lengths: Sequence[int]) -> dict[str, list[Any]]:
    """TRL's ``**columns`` for a batch: one list per field (None where a row lacks it)."""
    rows = [example_fields(e) for e in examples]
    columns: dict[str, list[Any]] = {"answer": [e.answer for e in examples]}
    for key in dict.fromkeys(k for row in rows for k in row):
        columns[key] = [row.get(key) for row in rows]
    columns["completion_lengths"] = list(lengths)
    return columns


def chat_completions(completions: Sequence[str]) -> list[list[dict[str, str]]]:
    """Completions as TRL passes them when the prompt went through a chat template."""
    return [[{"role": "assistant", "content": c}] for c in completions]


def run_awaitable(awaitable: Any) -> Any:
    """The result of an awaitable, from synchronous code (in a thread of its own when this thread
    already runs an event loop)."""

    async def wait() -> Any:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wait())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, wait()).result()


def _as_rewards(raw: list[Any], errors: list[str | None]) -> tuple[list[float | None], list[str | None]]:
    """Each row's value through :func:`as_reward`; a value that is not a reward is that row's error, and
    an exception in a row's place is that row's error as it says (a TimeoutError: a timeout)."""
    values: list[float | None] = []
    for i, value in enumerate(raw):
        if isinstance(value, BaseException) and not errors[i]:
            values.append(None)
            errors[i] = _describe(value)
            continue
        try:
            values.append(None if errors[i] else as_reward(value))
        except (TypeError, ValueError) as err:
            values.append(None)
            errors[i] = _describe(err)
    return values, errors


async def _gather(awaitables: list[Any]) -> list[Any]:
    return await asyncio.gather(*awaitables, return_exceptions=True)


class RowError(str):
    """A row's error message (a str), which remembers whether the row timed out (:func:`is_timeout`)."""

    timeout: bool = False


def is_timeout(error: str | None) -> bool:
    """Whether a row's error from :meth:`Reward.call_batch` or :meth:`Reward.score_items` is a timeout: the
    function raised or returned a ``TimeoutError`` for the row (``reward/<term>/timeouts``, not ``/errors``)."""
    return bool(getattr(error, "timeout", False))


def _describe(err: BaseException) -> RowError:
    message = RowError(f"{type(err).__name__}: {err}"[:300])
    message.timeout = isinstance(err, TimeoutError)
    return message
