"""The tool layer of multi-turn rollouts: which tools a rollout has, the calls a completion makes,
and what each call gives back.

Semantics follow TRL's GRPOTrainer (``tools=[fn, ...]``, ``environment_factory``):

* a tool is a plain function (or ``async def``, or a bound method of an environment) with type hints
  and a Google-style docstring; its JSON schema, what ``apply_chat_template(tools=[...])`` shows the
  model, comes from ``transformers.utils.get_json_schema`` (:func:`describe`). Config names tools as
  ``"pkg.module:function"`` (:func:`load_tools`); an environment's tools are the public functions of
  its class but ``reset`` and ``get_reward``, bound to the instance (:func:`environment_tools`);
* a completion's calls are read by a format's parser (:data:`TOOL_FORMATS`; Qwen/Hermes
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks: :func:`parse_hermes`);
* :func:`run_call` runs one call and never raises: whatever the model wrote and whatever the tool
  does, the model reads a text and the caller gets one of :data:`OUTCOMES` to count. Errors read
  as TRL writes them, ``str({"error": message})``.

Unlike TRL, the arguments are checked against the tool's schema before the call (a wrong type is
the model's mistake, "bad_arguments", not the tool's failure), every call has a wall-clock limit,
and the text a tool returns is capped.

>>> def add(a: int, b: int) -> int:
...     '''Add two integers.
...
...     Args:
...         a: the first
...         b: the second
...     '''
...     return a + b
>>> tools = {"add": describe(add, "example")}
>>> [call] = parse_hermes('<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>')
>>> run_call(call, tools, timeout_s=5, max_chars=100).content
'5'
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import json
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from transformers.utils import get_json_schema
from transformers.utils.chat_template_utils import DocstringParsingException, TypeHintParsingException

from rlvr.config import ConfigError

__all__ = ["OUTCOMES", "TOOL_FORMATS", "TOOL_WRITERS", "Tool", "ToolCall", "ToolError", "ToolResult", "argument_problem", "describe", "environment_tools", "load_tools",
           "parse_hermes", "run_call"]

OUTCOMES = ("ok", "error", "timeout", "unknown_tool", "bad_arguments", "malformed", "truncated")
# ok: ran and returned; error: the tool raised; timeout: did not return within timeout_s; unknown_tool: the name is not
# a tool of this rollout; bad_arguments: the arguments fail the tool's schema; malformed: the call text could not be
# parsed; truncated: ran and returned, but its output was cut at max_chars.

ENVIRONMENT_HOOKS = frozenset({"reset", "get_reward"})  # what the trainer calls on an environment; never a tool
_MAX_ERROR_CHARS = 500  # of an exception's message in the text the model reads


class ToolError(ConfigError):
    """A tool spec that cannot be loaded or described; the message names the config field and the spec."""


@dataclass(frozen=True)
class Tool:
    """A callable the model may call, and the schema it is shown."""

    name: str
    fn: Callable[..., Any]
    """A function or a bound method; may be ``async def``."""
    schema: dict
    """``{"type": "function", "function": {"name", "description", "parameters": {...}}}``: what goes to
    ``apply_chat_template(tools=[...])``."""


@dataclass(frozen=True)
class ToolCall:
    """One call as the completion wrote it: parsed (name and arguments), or malformed (``error`` says why)."""

    name: str | None
    arguments: dict | None
    text: str
    """The raw text of the call block, its tags included."""
    error: str | None = None


@dataclass
class ToolResult:
    """What one call gave: the text the model reads next, and how it ended (one of OUTCOMES)."""

    name: str
    """The called name ("" for a malformed call)."""
    arguments: dict | None
    outcome: str
    content: str
    seconds: float


# ------------------------------------------------------------------ which tools a rollout has


def describe(fn: Callable[..., Any], where: str) -> Tool:
    """``fn`` as a tool: its schema from its type hints and Google-style docstring (transformers'
    ``get_json_schema``, the one TRL and chat templates use). Raises ToolError naming ``where``, the
    function and what to fix."""
    try:
        schema = get_json_schema(fn)
    except TypeHintParsingException as err:
        raise ToolError(f"{where}: {_qualified_name(fn)} cannot be a tool: {err}. Give every argument a type hint "
                        "(the model is shown each argument's JSON type).") from None
    except DocstringParsingException as err:
        raise ToolError(f"{where}: {_qualified_name(fn)} cannot be a tool: {err}. Write a Google-style docstring: a "
                        "description, then 'Args:' with one 'name: description' line per argument.") from None
    except Exception as err:  # noqa: BLE001 - anything else get_json_schema trips on (a callable object, an odd hint)
        raise ToolError(f"{where}: {_qualified_name(fn)} cannot be a tool: {type(err).__name__}: {err}") from None
    return Tool(schema["function"]["name"], fn, schema)


def load_tools(specs: Sequence[str], where: str = "rollout.tools") -> list[Tool]:
    """The tools config names, each ``"pkg.module:function"`` (``module:Class.method`` works too).
    Raises ToolError naming ``where[i]`` and the spec: a module that does not import, a missing
    attribute, something not callable, a function that cannot be described, two tools of one name."""
    tools = []
    for i, spec in enumerate(specs):
        at = f"{where}[{i}] {spec!r}"
        module_name, colon, attr = (part.strip() for part in str(spec).partition(":"))
        if not (colon and module_name and attr):
            raise ToolError(f"{at}: a tool is named 'pkg.module:function' (e.g. 'rlvr.rollout.toolbox:calculator')")
        try:
            module = importlib.import_module(module_name)
        except Exception as err:  # noqa: BLE001 - an ImportError, or the module's own code failing
            raise ToolError(f"{at}: cannot import {module_name!r}: {type(err).__name__}: {err}") from None
        try:
            fn = functools.reduce(getattr, attr.split("."), module)
        except AttributeError:
            raise ToolError(f"{at}: module {module_name!r} has no {attr!r}") from None
        if not callable(fn):
            raise ToolError(f"{at}: {attr!r} is a {type(fn).__name__}, not a function")
        tools.append(describe(fn, at))
    _refuse_duplicates(tools, [f"{where}[{i}] {spec!r}" for i, spec in enumerate(specs)])
    return tools


def environment_tools(env: Any, where: str = "rollout.environment") -> list[Tool]:
    """An environment's tools, by TRL's rule: the public functions its class defines, but ``reset``
    and ``get_reward``, bound to this instance; sorted by name. Listed on the class, not the instance,
    so a property is never evaluated."""
    names = [name for name, _ in inspect.getmembers(type(env), inspect.isfunction)
             if not name.startswith("_") and name not in ENVIRONMENT_HOOKS]
    at = f"{where} ({type(env).__qualname__})"
    return [describe(getattr(env, name), f"{at}.{name}") for name in sorted(names)]


def _refuse_duplicates(tools: list[Tool], wheres: list[str]) -> None:
    """The model calls a tool by name, so two tools of one name would make one of them unreachable."""
    first: dict[str, str] = {}
    for tool, where in zip(tools, wheres, strict=True):
        if tool.name in first:
            raise ToolError(f"{where}: a second tool named {tool.name!r} (the first: {first[tool.name]}); tool names must be distinct")
        first[tool.name] = where


def _qualified_name(fn: Any) -> str:
    return f"{getattr(fn, '__module__', None) or '?'}.{getattr(fn, '__qualname__', None) or repr(fn)}"


# ------------------------------------------------------------------ the calls a completion makes


_OPEN, _CLOSE = "<tool_call>", "</tool_call>"


def parse_hermes(text: str) -> list[ToolCall]:
    """Every ``<tool_call>...</tool_call>`` block of ``text``, in order (Qwen/Hermes format), its body
    ``{"name": str, "arguments": object}``. ``arguments`` may also be a JSON string holding an object
    (some models write that), or be called ``parameters`` (Llama-style); missing, it is ``{}``. A
    block opened and never closed (the model stopped inside it) is one malformed call; text without
    a block has no calls.

    >>> parse_hermes('Let me add. <tool_call>\\n{"name": "add", "arguments": {"a": 1}}\\n</tool_call>')[0].arguments
    {'a': 1}
    """
    calls = []
    start = text.find(_OPEN)
    while start != -1:
        end = text.find(_CLOSE, start + len(_OPEN))
        if end == -1:
            calls.append(ToolCall(None, None, text[start:], error=f"the {_OPEN} block is never closed by {_CLOSE}"))
            break
        calls.append(_hermes_call(text[start + len(_OPEN):end], text[start:end + len(_CLOSE)]))
        start = text.find(_OPEN, end + len(_CLOSE))
    return calls


def _hermes_call(body: str, block: str) -> ToolCall:
    try:
        call = json.loads(body)
    except (ValueError, RecursionError) as err:
        return ToolCall(None, None, block, error=f"the call is not valid JSON ({_short(str(err))})")
    if not isinstance(call, dict):
        return ToolCall(None, None, block, error=f"the call must be a JSON object, got {_json_type(call)}")
    name = call.get("name")
    if not isinstance(name, str) or not name:
        return ToolCall(None, None, block, error='the call has no "name" string')
    arguments = call.get("arguments", call.get("parameters", {}))
    if isinstance(arguments, str):  # an object written as a JSON string, as OpenAI's API sends it
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError) as err:
            return ToolCall(None, None, block, error=f'"arguments" is a string that is not valid JSON ({_short(str(err))})')
    if not isinstance(arguments, dict):
        return ToolCall(None, None, block, error=f'"arguments" must be a JSON object, got {_json_type(arguments)}')
    return ToolCall(name, arguments, block)


TOOL_FORMATS: dict[str, Callable[[str], list[ToolCall]]] = {"hermes": parse_hermes}


def write_hermes(calls: list[dict[str, Any]]) -> str:
    """The text a model writes for `calls` (TRL's assistant `tool_calls`: {"type": "function", "function": {"name",
    "arguments"}}) in the Hermes format: what SFT on a conversation trains when a turn's call is only in tool_calls.

    >>> write_hermes([{"type": "function", "function": {"name": "add", "arguments": {"a": 1}}}])
    '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
    """
    out = []
    for call in calls:
        function = call.get("function", call)
        out.append(_OPEN + json.dumps({"name": function.get("name"), "arguments": function.get("arguments") or {}}) + _CLOSE)
    return "".join(out)


TOOL_WRITERS: dict[str, Callable[[list[dict[str, Any]]], str]] = {"hermes": write_hermes}  # one per TOOL_FORMATS entry


# ------------------------------------------------------------------ running one call


def run_call(call: ToolCall, tools: Mapping[str, Tool], *, timeout_s: float, max_chars: int) -> ToolResult:
    """Run one call and say what came of it; never raises, whatever the call or the tool does.

    The tool runs in a thread of its own, given ``timeout_s`` seconds (an ``async def`` tool, or one
    returning an awaitable, is run to completion with asyncio there). Its value is read as text
    (``str(value)``; TRL passes a list on as content blocks, we only do text), at most ``max_chars``
    characters of it."""
    start = time.monotonic()

    def result(outcome: str, content: str) -> ToolResult:
        return ToolResult(call.name or "", call.arguments, outcome, content, time.monotonic() - start)

    if call.error is not None or call.name is None or call.arguments is None:
        return result("malformed", _error(f"could not read the tool call: {call.error or 'no name or arguments'}"))
    tool = tools.get(call.name)
    if tool is None:
        available = ", ".join(sorted(tools)) or "none"
        return result("unknown_tool", _error(f"there is no tool {call.name!r}; the tools are: {available}"))
    problem = argument_problem(call.arguments, tool.schema["function"].get("parameters") or {})
    if problem is not None:
        return result("bad_arguments", _error(f"{call.name}: {problem}"))
    outcome, content = _run_with_timeout(tool.fn, call.arguments, timeout_s)
    if outcome == "timeout":
        return result("timeout", _error(f"{call.name} did not finish within {timeout_s:g} s"))
    if outcome == "ok" and len(content) > max_chars:
        return result("truncated", f"{content[:max_chars]}\n[output truncated: {len(content)} characters in all]")
    return result(outcome, content)


def _run_with_timeout(fn: Callable[..., Any], arguments: dict, timeout_s: float) -> tuple[str, str]:
    """("ok", the value as text) | ("error", the error as text) | ("timeout", "").

    A tool that overruns is abandoned, its thread left to finish on its own (a daemon, so it never
    holds up the interpreter's exit): Python cannot kill a thread, and the tool cannot run in
    another process instead, because an environment's methods must mutate the environment's own
    state, here. An abandoned environment call may still change that state later; the caller
    should treat such an environment as spoiled."""
    done: list[tuple[str, str]] = []

    def work() -> None:
        try:
            value = fn(**arguments)
            if inspect.isawaitable(value):
                value = asyncio.run(_awaited(value))
            done.append(("ok", str(value)))  # str() here too: a slow __str__ counts against the limit
        except BaseException as err:  # noqa: BLE001 - SystemExit, KeyboardInterrupt too: the tool's failure, not ours
            done.append(("error", _error(f"{type(err).__name__}: {_message(err)}")))

    thread = threading.Thread(target=work, name="rlvr-tool", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return done[0] if done else ("timeout", "")


async def _awaited(awaitable: Any) -> Any:
    return await awaitable  # asyncio.run takes a coroutine; a tool may return any awaitable


def _error(message: str) -> str:
    return str({"error": message})  # TRL's convention for what the model reads


def _message(err: BaseException) -> str:
    try:
        return _short(str(err))
    except Exception:  # noqa: BLE001 - an exception whose __str__ itself fails
        return "(its message could not be read)"


def _short(text: str, limit: int = _MAX_ERROR_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


# ------------------------------------------------------------------ the argument check
# A small checker of our own rather than a jsonschema dependency: get_json_schema writes only a few
# keywords (type, a list of types, nullable, enum, items, additionalProperties), and the messages
# are for the model to read and correct its call.

_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def argument_problem(arguments: dict, parameters: dict) -> str | None:
    """What is wrong with ``arguments`` for a tool whose parameters schema is ``parameters`` (the
    first problem, in words for the model), or None.

    >>> argument_problem({"n": "3"}, {"properties": {"n": {"type": "integer"}}, "required": ["n"]})
    "argument 'n' must be integer, got string '3'"
    """
    properties = parameters.get("properties") or {}
    unknown = [name for name in arguments if name not in properties]
    if unknown:
        return f"unknown argument {unknown[0]!r}; the arguments are: {', '.join(properties) or 'none'}"
    missing = [name for name in parameters.get("required") or () if name not in arguments]
    if missing:
        return f"missing required argument {missing[0]!r}"
    for name, value in arguments.items():
        problem = _value_problem(value, properties[name], repr(name))
        if problem is not None:
            return problem
    return None


def _value_problem(value: Any, schema: dict, path: str) -> str | None:
    """The schema describes at most a few levels of nesting, so this recursion is as shallow as the schema."""
    types = schema.get("type")
    if types is not None:
        allowed = [types] if isinstance(types, str) else list(types)
        if schema.get("nullable"):
            allowed.append("null")
        if not any(_JSON_TYPES.get(t, lambda v: True)(value) for t in allowed):
            return f"argument {path} must be {' or '.join(allowed)}, got {_json_type(value)} {_short(repr(value), 60)}"
    enum = schema.get("enum")
    if enum is not None and value is not None and not any(value == e and isinstance(value, bool) == isinstance(e, bool) for e in enum):
        return f"argument {path} must be one of {_short(json.dumps(enum), 200)}, got {_short(repr(value), 60)}"
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            if (problem := _value_problem(item, schema["items"], f"{path}[{i}]")) is not None:
                return problem
    if isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        for key, item in value.items():
            if (problem := _value_problem(item, schema["additionalProperties"], f"{path}[{key!r}]")) is not None:
                return problem
    return None


def _json_type(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):  # boolean before integer: True is an int
        if _JSON_TYPES[name](value):
            return name
    return type(value).__name__
