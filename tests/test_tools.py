"""The tool layer of multi-turn rollouts (rlvr.rollout.tools) and the built-in tools (rlvr.rollout.toolbox).

Adversarial where the model or the user writes the input: every way a call can be malformed, every
outcome of run_call (a tool that raises, hangs, floods, or is called with the wrong types), and the
calculator's refusals. The python tool's tests need bubblewrap, and skip without it as the code
verifier's do.
"""

from __future__ import annotations

import asyncio
import doctest
import os
import shutil
import sys
import textwrap
import time
from pathlib import Path

import pytest

import rlvr.rollout.toolbox as toolbox
import rlvr.rollout.tools as tools_module
from rlvr.config import ConfigError
from rlvr.rollout.toolbox import calculator
from rlvr.rollout.tools import (OUTCOMES, TOOL_FORMATS, Tool, ToolCall, ToolError, argument_problem, describe, environment_tools,
                                load_tools, parse_hermes, run_call)
from rlvr.verifiers.code.sandbox import Limits


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first
        b: the second
    """
    return a + b


def typed(n: int, x: float, s: str, flag: bool, items: list[int], mapping: dict[str, int], maybe: str | None = None,
          either: int | str = 0) -> str:
    """Echo every argument.

    Args:
        n: an integer
        x: a number
        s: a string
        flag: a boolean
        items: integers
        mapping: names to integers
        maybe: a string or nothing
        either: an integer or a string
    """
    return "fine"


def color(c: str) -> str:
    """Pick a color.

    Args:
        c: the color (choices: ["red", "green"])
    """
    return c


def fails(reason: str) -> str:
    """Always raise.

    Args:
        reason: why
    """
    raise RuntimeError(reason)


def hangs() -> str:
    """Sleep for half a minute."""
    time.sleep(30)
    return "woke"


def floods(n: int) -> str:
    """Return n characters.

    Args:
        n: how many
    """
    return "x" * n


def returns_dict() -> dict:
    """Return a dict."""
    return {"a": 1, "b": [2, 3]}


def returns_int() -> int:
    """Return an int."""
    return 42


async def waits(s: str) -> str:
    """Echo after awaiting.

    Args:
        s: the text
    """
    await asyncio.sleep(0.01)
    return s.upper()


def returns_awaitable(s: str):  # a plain function returning an awaitable (a coroutine made elsewhere)
    """Echo through a coroutine.

    Args:
        s: the text
    """
    return waits(s)


def exits() -> str:
    """Call sys.exit."""
    sys.exit(3)


def table(*fns) -> dict[str, Tool]:
    return {tool.name: tool for tool in (describe(fn, "test") for fn in fns)}


def call(name: str, **arguments) -> ToolCall:
    return ToolCall(name, arguments, f"<tool_call>{name}</tool_call>")


def hermes(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


# ------------------------------------------------------------------------- parsing


def test_parse_every_block_in_order_with_the_text_around_them() -> None:
    text = ("I will add, then multiply.\n" + hermes('{"name": "add", "arguments": {"a": 1, "b": 2}}') + "\nand\n"
            + hermes('{"name": "mul", "arguments": {"a": 3}}') + "\nDone.")
    calls = parse_hermes(text)
    assert [(c.name, c.arguments, c.error) for c in calls] == [("add", {"a": 1, "b": 2}, None), ("mul", {"a": 3}, None)]
    assert calls[0].text == hermes('{"name": "add", "arguments": {"a": 1, "b": 2}}')  # the raw block, tags included
    assert TOOL_FORMATS["hermes"] is parse_hermes


@pytest.mark.parametrize("text", ["", "no calls here", "</tool_call> a stray closing tag", "<tool_cal>{}</tool_cal>"])
def test_text_without_a_block_has_no_calls(text: str) -> None:
    assert parse_hermes(text) == []


def test_arguments_written_as_a_json_string_are_decoded() -> None:
    [parsed] = parse_hermes(hermes('{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}'))
    assert (parsed.name, parsed.arguments, parsed.error) == ("add", {"a": 1, "b": 2}, None)


def test_parameters_is_a_synonym_and_missing_arguments_are_empty() -> None:
    [llama] = parse_hermes(hermes('{"name": "add", "parameters": {"a": 1}}'))
    [bare] = parse_hermes(hermes('{"name": "now"}'))
    assert llama.arguments == {"a": 1} and bare.arguments == {} and llama.error is None and bare.error is None


@pytest.mark.parametrize("body, why", [
    ('{"name": "add", "arguments": {"a": 1}', "not valid JSON"),  # the closing brace lost
    ("add(1, 2)", "not valid JSON"),
    ("", "not valid JSON"),
    ('{"arguments": {"a": 1}}', '"name"'),
    ('{"name": 7, "arguments": {}}', '"name"'),
    ('{"name": "", "arguments": {}}', '"name"'),
    ('{"name": "add", "arguments": [1, 2]}', "object, got array"),
    ('{"name": "add", "arguments": null}', "object, got null"),
    ('{"name": "add", "arguments": "not json"}', "not valid JSON"),
    ('{"name": "add", "arguments": "[1, 2]"}', "object, got array"),
    ('["add", {"a": 1}]', "JSON object, got array"),
    ('"add"', "JSON object, got string"),
    ("[" * 100_000, "not valid JSON"),  # nesting deep enough to trip the decoder's recursion guard
])
def test_malformed_calls_say_why(body: str, why: str) -> None:
    [parsed] = parse_hermes(hermes(body))
    assert parsed.name is None and parsed.arguments is None and parsed.text == hermes(body)
    assert why in parsed.error


def test_a_block_never_closed_is_one_malformed_call_after_the_good_ones() -> None:
    good = hermes('{"name": "add", "arguments": {"a": 1, "b": 2}}')
    calls = parse_hermes(good + ' then <tool_call>\n{"name": "add", "argu')
    assert [c.name for c in calls] == ["add", None]
    assert calls[1].text == '<tool_call>\n{"name": "add", "argu' and "never closed" in calls[1].error


def test_a_malformed_block_does_not_hide_the_next_one() -> None:
    calls = parse_hermes(hermes("{oops") + hermes('{"name": "add", "arguments": {}}'))
    assert [c.name for c in calls] == [None, "add"]


def test_parsing_a_long_text_is_linear() -> None:
    block = hermes('{"name": "add", "arguments": {"a": 1, "b": 2}}')
    start = time.monotonic()
    calls = parse_hermes("filler " * 200_000 + block * 5_000 + "<tool_call>" + "y" * 1_000_000)
    assert len(calls) == 5_001 and time.monotonic() - start < 5  # a quadratic scan of 2.4 MB takes minutes


# ------------------------------------------------------------------------- schemas and loading


def test_schema_from_hints_and_docstring() -> None:
    tool = describe(add, "test")
    assert tool.name == "add" and tool.fn is add
    function = tool.schema["function"]
    assert tool.schema["type"] == "function" and function["name"] == "add" and function["description"] == "Add two integers."
    assert function["parameters"] == {"type": "object", "required": ["a", "b"], "properties": {
        "a": {"type": "integer", "description": "the first"}, "b": {"type": "integer", "description": "the second"}}}


def test_an_async_function_is_described_like_any_other() -> None:
    assert describe(waits, "test").schema["function"]["parameters"]["required"] == ["s"]


def no_docstring(a: int) -> int:
    return a


def no_hints(a):
    """Missing hints.

    Args:
        a: something
    """
    return a


def undocumented_argument(a: int, b: int) -> int:
    """Only a is documented.

    Args:
        a: something
    """
    return a


@pytest.mark.parametrize("fn, fix", [(no_docstring, "docstring"), (no_hints, "type hint"), (undocumented_argument, "'b'")])
def test_a_function_that_cannot_be_described_is_a_tool_error(fn, fix: str) -> None:
    with pytest.raises(ToolError, match="rollout.tools\\[0\\]") as caught:
        describe(fn, "rollout.tools[0]")
    assert f"{__name__}.{fn.__qualname__}" in str(caught.value) and fix in str(caught.value)
    assert isinstance(caught.value, ConfigError)


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module of the user's tools on sys.path, with a name no other test uses."""
    name = f"user_tools_{os.getpid()}_{time.monotonic_ns()}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent('''
        def lookup(key: str) -> str:
            """Look a key up.

            Args:
                key: the key
            """
            return key

        def calculator(expression: str) -> str:
            """Another calculator.

            Args:
                expression: the expression
            """
            return expression

        def undocumented(a: int) -> int:
            return a

        class Holder:
            def method(self, x: int) -> int:
                """A method.

                Args:
                    x: the x
                """
                return x

        NOT_CALLABLE = 3
    '''))
    (tmp_path / f"{name}_broken.py").write_text("raise RuntimeError('the module fails when imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_load_tools_reads_specs(user_module: str) -> None:
    loaded = load_tools(["rlvr.rollout.toolbox:calculator", f"{user_module}:lookup", "rlvr.rollout.toolbox:python"])
    assert [t.name for t in loaded] == ["calculator", "lookup", "python"]
    assert loaded[0].fn is calculator and loaded[1].fn("k") == "k"


@pytest.mark.parametrize("spec, says", [
    ("no_such_module_for_rlvr_tests:f", "cannot import 'no_such_module_for_rlvr_tests'"),
    ("{module}_broken:f", "RuntimeError: the module fails when imported"),
    ("{module}:missing", "has no 'missing'"),
    ("{module}:NOT_CALLABLE", "is a int, not a function"),
    ("{module}:undocumented", "docstring"),
    ("{module}", "'pkg.module:function'"),
    (":lookup", "'pkg.module:function'"),
    ("{module}:", "'pkg.module:function'"),
])
def test_load_tools_errors_name_the_field_and_the_spec(user_module: str, spec: str, says: str) -> None:
    spec = spec.format(module=user_module)
    with pytest.raises(ToolError) as caught:
        load_tools(["rlvr.rollout.toolbox:calculator", spec], where="rollout.tools")
    message = str(caught.value)
    assert message.startswith(f"rollout.tools[1] {spec!r}") and says in message


def test_load_tools_refuses_two_tools_of_one_name(user_module: str) -> None:
    with pytest.raises(ToolError, match=r"rollout.tools\[1\] .*second tool named 'calculator'.*rollout.tools\[0\]"):
        load_tools(["rlvr.rollout.toolbox:calculator", f"{user_module}:calculator"])


def test_load_tools_takes_a_method_path(user_module: str) -> None:
    [tool] = load_tools([f"{user_module}:Holder.method"])
    assert tool.name == "method" and list(tool.schema["function"]["parameters"]["properties"]) == ["x"]


# ------------------------------------------------------------------------- environments


class Counter:
    """An environment: the trainer calls reset and get_reward; the model calls the rest."""

    evaluated = 0

    def __init__(self) -> None:
        self.count = 0

    def reset(self, **kwargs) -> str:
        self.count = 0
        return "reset"

    def get_reward(self) -> float:
        return float(self.count)

    def increment(self, by: int) -> int:
        """Add to the counter.

        Args:
            by: how much
        """
        self.count += by
        return self.count

    async def peek(self) -> int:
        """Read the counter."""
        return self.count

    def _helper(self) -> None:
        raise AssertionError("private")

    @property
    def expensive(self) -> int:
        type(self).evaluated += 1
        raise AssertionError("a property must not be evaluated")


def test_environment_tools_are_its_public_methods_bound() -> None:
    env = Counter()
    found = environment_tools(env)
    assert [t.name for t in found] == ["increment", "peek"]  # no reset, get_reward, _helper, expensive; sorted
    assert Counter.evaluated == 0
    result = run_call(call("increment", by=5), {t.name: t for t in found}, timeout_s=5, max_chars=100)
    assert (result.outcome, result.content, env.count) == ("ok", "5", 5)  # bound: it changed this instance
    assert run_call(call("peek"), {t.name: t for t in found}, timeout_s=5, max_chars=100).content == "5"


def test_an_environment_method_that_cannot_be_described_names_the_class() -> None:
    class Broken:
        def reset(self) -> None:
            pass

        def act(self, x):
            return x

    with pytest.raises(ToolError, match=r"rollout.environment \(.*Broken\).act"):
        environment_tools(Broken())


# ------------------------------------------------------------------------- running calls


def test_every_outcome_is_reached() -> None:
    tools = table(add, fails, hangs, floods)
    cases = {
        "ok": call("add", a=1, b=2),
        "error": call("fails", reason="no"),
        "timeout": call("hangs"),
        "unknown_tool": call("subtract", a=1, b=2),
        "bad_arguments": call("add", a="1", b=2),
        "malformed": parse_hermes("<tool_call>{oops</tool_call>")[0],
        "truncated": call("floods", n=50),
    }
    assert set(cases) == set(OUTCOMES)
    for outcome, one in cases.items():
        assert run_call(one, tools, timeout_s=0.3, max_chars=20).outcome == outcome


def test_ok_returns_the_text_and_the_call() -> None:
    result = run_call(call("add", a=347, b=829), table(add), timeout_s=5, max_chars=100)
    assert (result.name, result.arguments, result.outcome, result.content) == ("add", {"a": 347, "b": 829}, "ok", "1176")
    assert 0 <= result.seconds < 5  # margins for a loaded CI machine


def test_a_raising_tool_is_an_error_in_trls_words() -> None:
    result = run_call(call("fails", reason="disk on fire"), table(fails), timeout_s=5, max_chars=1000)
    assert result.outcome == "error"
    assert result.content == str({"error": "RuntimeError: disk on fire"})


def test_an_error_message_is_bounded() -> None:
    result = run_call(call("fails", reason="z" * 100_000), table(fails), timeout_s=5, max_chars=10**9)
    assert result.outcome == "error" and len(result.content) < 1000


def test_sys_exit_in_a_tool_is_its_error_not_ours() -> None:
    result = run_call(call("exits"), table(exits), timeout_s=5, max_chars=100)
    assert result.outcome == "error" and "SystemExit" in result.content


def test_a_hanging_tool_times_out_quickly() -> None:
    start = time.monotonic()
    result = run_call(call("hangs"), table(hangs), timeout_s=0.3, max_chars=100)
    assert time.monotonic() - start < 5  # the tool sleeps far longer; margins for a loaded CI machine
    assert result.outcome == "timeout" and "0.3 s" in result.content and "error" in result.content
    assert 0.3 <= result.seconds < 5


def test_a_huge_result_is_capped_fast() -> None:
    start = time.monotonic()
    result = run_call(call("floods", n=10_000_000), table(floods), timeout_s=5, max_chars=1000)
    assert time.monotonic() - start < 5  # margins for a loaded CI machine
    assert result.outcome == "truncated"
    assert result.content == "x" * 1000 + "\n[output truncated: 10000000 characters in all]"


def test_exactly_max_chars_is_not_truncated() -> None:
    result = run_call(call("floods", n=1000), table(floods), timeout_s=5, max_chars=1000)
    assert (result.outcome, len(result.content)) == ("ok", 1000)


def test_an_unknown_tool_names_the_available_ones() -> None:
    result = run_call(call("sub", a=1), table(add, fails), timeout_s=5, max_chars=100)
    assert result.outcome == "unknown_tool" and "'sub'" in result.content and "add, fails" in result.content


def test_a_malformed_call_reads_as_an_error() -> None:
    [bad] = parse_hermes(hermes('{"name": "add", "arguments": [1]}'))
    result = run_call(bad, table(add), timeout_s=5, max_chars=100)
    assert (result.name, result.arguments, result.outcome) == ("", None, "malformed")
    assert result.content.startswith("{'error': ") and "object, got array" in result.content


@pytest.mark.parametrize("arguments, says", [
    ({"a": "1", "b": 2}, "argument 'a' must be integer, got string '1'"),
    ({"a": True, "b": 2}, "argument 'a' must be integer, got boolean True"),
    ({"a": 1.0, "b": 2}, "argument 'a' must be integer, got number 1.0"),
    ({"a": None, "b": 2}, "argument 'a' must be integer, got null"),
    ({"a": 1}, "missing required argument 'b'"),
    ({"a": 1, "b": 2, "c": 3}, "unknown argument 'c'; the arguments are: a, b"),
])
def test_wrong_arguments_are_refused_before_the_call(arguments: dict, says: str) -> None:
    calls = []
    tool = describe(add, "test")
    spy = Tool(tool.name, lambda **kw: calls.append(kw), tool.schema)
    result = run_call(ToolCall("add", arguments, ""), {"add": spy}, timeout_s=5, max_chars=200)
    assert result.outcome == "bad_arguments" and says in result.content and calls == []


GOOD = {"n": 1, "x": 2, "s": "s", "flag": False, "items": [1, 2], "mapping": {"k": 1}}


@pytest.mark.parametrize("change, says", [
    ({}, None),
    ({"x": 2.5, "maybe": None, "either": "word"}, None),  # int for number; nullable; one of a list of types
    ({"x": True}, "'x' must be number, got boolean"),
    ({"s": 3}, "'s' must be string"),
    ({"flag": 0}, "'flag' must be boolean, got integer"),
    ({"items": [1, "2"]}, "argument 'items'[1] must be integer, got string"),
    ({"items": {"0": 1}}, "'items' must be array, got object"),
    ({"mapping": {"k": "v"}}, "argument 'mapping'['k'] must be integer"),
    ({"mapping": [1]}, "'mapping' must be object, got array"),
    ({"maybe": 3}, "'maybe' must be string or null"),
    ({"either": 1.5}, "'either' must be integer or string, got number"),
])
def test_the_argument_checker_knows_the_json_types(change: dict, says: str | None) -> None:
    parameters = describe(typed, "test").schema["function"]["parameters"]
    problem = argument_problem({**GOOD, **change}, parameters)
    assert problem == says if says is None else says in problem


@pytest.mark.parametrize("value, says", [("red", None), ("green", None), ("blue", 'must be one of ["red", "green"]'), (1, "must be string")])
def test_enum(value, says: str | None) -> None:
    result = run_call(call("color", c=value), table(color), timeout_s=5, max_chars=100)
    assert result.outcome == ("ok" if says is None else "bad_arguments")
    assert says is None or says in result.content


def test_an_enum_tells_a_bool_from_an_integer() -> None:
    assert argument_problem({"n": True}, {"properties": {"n": {"enum": [1, 2]}}}) is not None
    assert argument_problem({"n": 1}, {"properties": {"n": {"enum": [1, 2]}}}) is None


def test_async_tools_run_to_completion() -> None:
    for fn in (waits, returns_awaitable):
        result = run_call(call(fn.__name__, s="hi"), table(fn), timeout_s=5, max_chars=100)
        assert (result.outcome, result.content) == ("ok", "HI")


def test_an_async_tool_that_hangs_times_out() -> None:
    async def stalls() -> str:
        """Never finish."""
        await asyncio.sleep(30)
        return "late"

    start = time.monotonic()
    assert run_call(call("stalls"), table(stalls), timeout_s=0.2, max_chars=100).outcome == "timeout"
    assert time.monotonic() - start < 5  # the tool sleeps 30 s; margins for a loaded CI machine


def test_values_that_are_not_text_are_read_with_str() -> None:
    assert run_call(call("returns_dict"), table(returns_dict), timeout_s=5, max_chars=100).content == str({"a": 1, "b": [2, 3]})
    assert run_call(call("returns_int"), table(returns_int), timeout_s=5, max_chars=100).content == "42"


def test_a_value_whose_str_raises_is_an_error() -> None:
    class Opaque:
        def __str__(self) -> str:
            raise ValueError("no text")

    def opaque() -> object:
        """Return something unprintable."""
        return Opaque()

    result = run_call(call("opaque"), table(opaque), timeout_s=5, max_chars=100)
    assert result.outcome == "error" and "ValueError: no text" in result.content


def test_the_module_doctests_hold() -> None:
    assert doctest.testmod(tools_module).failed == 0


# ------------------------------------------------------------------------- the calculator


@pytest.mark.parametrize("expression, value", [
    ("347*829", "287663"),
    ("347 * 829", "287663"),
    ("1 + 2 * 3", "7"),
    ("(1 + 2) * 3", "9"),
    ("2 ** 3 ** 2", "512"),  # ** is right-associative
    ("-2 ** 2", "-4"),  # and binds tighter than unary minus
    ("-3 - -2", "-1"),
    ("+5", "5"),
    ("6/3", "2"),
    ("1/3", repr(1 / 3)),
    ("1/3*3", "1"),  # exact: no 0.9999999999999999
    ("1/2", "0.5"),
    ("7 // 2", "3"),
    ("-7 // 2", "-4"),
    ("7 % 3", "1"),
    ("-7 % 3", "2"),
    ("2 ** -2", "0.25"),
    ("2 ** 100", str(2**100)),
    ("2.5 * 2", "5.0"),
    ("0.1 + 0.2", repr(0.1 + 0.2)),
    ("4 ** 0.5", "2.0"),
    ("1_000 + 0x10", "1016"),
    ("  12  ", "12"),
    ("7.5 // 2", "3.0"),
])
def test_calculator_values(expression: str, value: str) -> None:
    assert calculator(expression) == value


@pytest.mark.parametrize("expression, says", [
    ("__import__('os')", "function call"),
    ("x + 1", "name"),
    ("(1).real", "attribute"),
    ("'a' * 3", "only numbers"),
    ("b'a'", "only numbers"),
    ("lambda: 1", "lambda"),
    ("[1, 2]", "List"),
    ("1 < 2", "comparison"),
    ("True + 1", "only numbers"),
    ("1j", "only numbers"),
    ("1 if 1 else 2", "IfExp"),
    ("2 ** 10 ** 10", "exponents are limited"),
    ("10 ** 101", "exponents are limited"),
    ("9 ** 100 * 9 ** 100 * 9 ** 100 * 9 ** 100 * 9 ** 100 * 9 ** 100 * 9 ** 100 * 9 ** 100 * 9 ** 100 * 9 ** 100 * 9 ** 100", "1000 digits"),
    ("(2 ** 100) ** 100", "1000 digits"),
    ("1/0", "division by zero"),
    ("1 // 0", "division by zero"),
    ("1 % 0", "division by zero"),
    ("1.5 / 0.0", "division by zero"),
    ("0 ** -1", "division by zero"),
    ("1e308 * 10", "too large"),
    ("1e300 ** 2", "too large"),
    ("9 ** 100 * 9 ** 100 * 9 ** 100 * 9 ** 100 * 1.5", "too large"),  # an exact value too large for a float
    ("(-8) ** (1/3)", "not a real number"),
    ("1" * 1001, "longer than 1000"),
    ("-" * 999 + "1", "nests more than"),
    ("(" * 300 + "1" + ")" * 300, "not an arithmetic expression"),
    ("1 +", "not an arithmetic expression"),
    ("1\x00", "not an arithmetic expression"),
    ("import os", "not an arithmetic expression"),
])
def test_calculator_refuses(expression: str, says: str) -> None:
    start = time.monotonic()
    with pytest.raises(ValueError, match=None) as caught:
        calculator(expression)
    # 5 s is far above a loaded 2-core CI machine's worst case and far below what evaluating
    # 2 ** 10 ** 10 or recursing without a depth limit would take
    assert says in str(caught.value) and time.monotonic() - start < 5


def test_calculator_is_a_loadable_tool_whose_refusals_the_model_reads() -> None:
    [tool] = load_tools(["rlvr.rollout.toolbox:calculator"])
    assert tool.schema["function"]["description"].startswith("Evaluate an arithmetic expression.")
    tools = {tool.name: tool}
    [ok] = parse_hermes(hermes('{"name": "calculator", "arguments": {"expression": "347*829"}}'))
    assert run_call(ok, tools, timeout_s=5, max_chars=100).content == "287663"
    refused = run_call(call("calculator", expression="__import__('os').system('true')"), tools, timeout_s=5, max_chars=500)
    assert refused.outcome == "error" and "ValueError" in refused.content


# ------------------------------------------------------------------------- the python tool

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("CI"),
                                 reason="bubblewrap is not installed (CI installs it: make test)")


@needs_bwrap
def test_python_prints() -> None:
    assert toolbox.python("print(6*7)").strip() == "42"


@needs_bwrap
def test_python_shows_the_traceback_of_a_failure() -> None:
    out = toolbox.python("print('before')\nx = 1 / 0")
    assert out.startswith("before\n") and "ZeroDivisionError" in out and 'File "<code>", line 2' in out and "[exit status 1]" in out


@needs_bwrap
def test_python_cannot_read_this_checkout_or_this_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLVR_TOOL_TEST_SECRET", "s3cr3t-value")
    here = Path(__file__).resolve()
    code = textwrap.dedent(f"""
        import os
        print("env:", os.environ.get("RLVR_TOOL_TEST_SECRET"))
        print(open({str(here)!r}).read())
    """)
    out = toolbox.python(code)
    assert "env: None" in out and "s3cr3t-value" not in out
    assert "FileNotFoundError" in out and "test_python_cannot_read_this_checkout" not in out.split("Traceback")[0]


@needs_bwrap
def test_python_infinite_loop_ends_with_a_timeout_notice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(toolbox, "PYTHON_LIMITS", Limits(test_s=0.5, total_s=5.0, output_kb=64))
    start = time.monotonic()
    out = toolbox.python("print('spinning', flush=True)\nwhile True:\n    pass")
    assert out.startswith("spinning") and out.endswith("[timed out after 0.5 s]") and time.monotonic() - start < 4


@needs_bwrap
def test_python_through_run_call() -> None:
    tools = {t.name: t for t in load_tools(["rlvr.rollout.toolbox:python"])}
    [parsed] = parse_hermes(hermes('{"name": "python", "arguments": {"code": "print(sum(range(10)))"}}'))
    result = run_call(parsed, tools, timeout_s=30, max_chars=1000)
    assert (result.outcome, result.content.strip()) == ("ok", "45")


def test_python_refuses_a_program_too_long_before_any_sandbox() -> None:
    with pytest.raises(ValueError, match="longer than"):
        toolbox.python("#" * (toolbox.MAX_CODE_CHARS + 1))
