"""Built-in tools, named in config as ``"rlvr.rollout.toolbox:calculator"`` and ``"rlvr.rollout.toolbox:python"``.

Each is a plain function with type hints and a Google-style docstring (what the model is shown, through
:func:`rlvr.rollout.tools.describe`), and raises ValueError with a message meant for the model when it
refuses an input (:func:`rlvr.rollout.tools.run_call` turns that into the error text it reads).

* :func:`calculator` evaluates arithmetic over the expression's syntax tree, exactly where it can,
  with bounds on size; nothing is ever ``eval``'d.
* :func:`python` runs a program in the code verifier's bubblewrap sandbox
  (:mod:`rlvr.verifiers.code.sandbox`), never in this process.
"""

from __future__ import annotations

import ast
import math
import operator
from fractions import Fraction
from typing import Callable

from rlvr.verifiers.code.sandbox import Limits, run_job

__all__ = ["PYTHON_LIMITS", "calculator", "python"]

MAX_EXPRESSION_CHARS = 1000
MAX_EXPONENT = 100
MAX_BITS = 3322  # ~1000 decimal digits: any exact value the calculator holds, numerator and denominator alike
MAX_DEPTH = 100  # nested operations ("-" * 999 + "1" parses, and would otherwise recurse 999 deep)

_OPERATORS: dict[type, Callable] = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
                                    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Supports + - * / // % ** (powers up to 100), unary minus, parentheses, and integer and decimal
    numbers; nothing else (no names, functions or strings). Whole numbers and their quotients are
    exact: a whole result prints as an integer (6/3 gives 2, 1/3*3 gives 1), any other result as a
    decimal (1/3 gives 0.3333333333333333). A decimal number or a fractional power in the
    expression makes the result a decimal.

    Args:
        expression: the arithmetic to evaluate, e.g. "347 * 829" or "(2 + 3) ** 2 / 4".
    """
    if not isinstance(expression, str):
        raise TypeError(f"the expression must be a string, got {type(expression).__name__}")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:  # ValueError: a null byte
        raise ValueError(f"not an arithmetic expression: {getattr(err, 'msg', None) or err}") from None
    try:
        return _as_text(_evaluate(tree.body, depth=0))
    except OverflowError:  # a float too large for an exact value mixed with a decimal, or a float power
        raise ValueError("the result is too large") from None


def _evaluate(node: ast.AST, depth: int) -> Fraction | float:
    """The value of one node: ints are held as Fractions (exact), decimals as floats."""
    if depth > MAX_DEPTH:
        raise ValueError(f"the expression nests more than {MAX_DEPTH} operations deep")
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ValueError(f"only numbers are allowed, not {node.value!r}")
        return _checked(Fraction(node.value) if isinstance(node.value, int) else node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _evaluate(node.operand, depth + 1)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp) and (isinstance(node.op, ast.Pow) or type(node.op) in _OPERATORS):
        left, right = _evaluate(node.left, depth + 1), _evaluate(node.right, depth + 1)
        if isinstance(node.op, ast.Pow):
            return _power(left, right)
        if right == 0 and not isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
            raise ValueError("division by zero")
        return _checked(_OPERATORS[type(node.op)](left, right))
    raise ValueError(f"{_what(node)} is not allowed: only numbers, + - * / // % **, and parentheses")


def _power(base: Fraction | float, exponent: Fraction | float) -> Fraction | float:
    if abs(exponent) > MAX_EXPONENT:
        raise ValueError(f"exponents are limited to {MAX_EXPONENT} in magnitude, got {_as_text(exponent)}")
    if base == 0 and exponent < 0:
        raise ValueError("division by zero (zero to a negative power)")
    if isinstance(exponent, Fraction) and exponent.denominator == 1:
        if isinstance(base, Fraction):
            # Refused before computing: the result's size is the base's times the exponent.
            bits = max(base.numerator.bit_length(), base.denominator.bit_length()) * abs(exponent.numerator)
            if bits > MAX_BITS and abs(base) != 1:
                raise ValueError("the result would have more than 1000 digits")
        return _checked(base ** exponent.numerator)
    value = float(base) ** float(exponent)
    if isinstance(value, complex):
        raise ValueError("a fractional power of a negative number is not a real number")
    return _checked(value)


def _checked(value: Fraction | float) -> Fraction | float:
    if isinstance(value, int):  # Fraction // Fraction is an int: hold it as a Fraction like every exact value
        value = Fraction(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("the result is too large (not a finite number)")
    if isinstance(value, Fraction) and max(value.numerator.bit_length(), value.denominator.bit_length()) > MAX_BITS:
        raise ValueError("the result would have more than 1000 digits")
    return value


def _as_text(value: Fraction | float) -> str:
    if isinstance(value, Fraction):
        return str(value.numerator) if value.denominator == 1 else repr(float(value))
    return repr(value)


def _what(node: ast.AST) -> str:
    names = {ast.Name: "a name", ast.Call: "a function call", ast.Attribute: "attribute access", ast.Lambda: "a lambda",
             ast.Subscript: "indexing", ast.Compare: "a comparison", ast.BoolOp: "and/or", ast.JoinedStr: "a string"}
    for kind, words in names.items():
        if isinstance(node, kind):
            return f"{words} ({ast.unparse(node)[:40]})"
    return f"{type(node).__name__} ({ast.unparse(node)[:40]})"


# ------------------------------------------------------------------ python

PYTHON_LIMITS = Limits(test_s=5.0, total_s=15.0, output_kb=64)
"""The python tool's sandbox limits: a rollout's tool timeout (run_call's timeout_s) should exceed total_s,
so that the sandbox, which kills its jail, ends a long program before the caller abandons the thread."""
MAX_CODE_CHARS = 20_000

# The runner sends a program's stderr to /dev/null and reports only its exit status; the model
# learns more from the traceback, so the program runs under this wrapper, which prints it to stdout
# (without the wrapper's own frame, and with the program's lines, registered in linecache).
_WRAPPER = """\
import linecache, sys, traceback
_source = {source!r}
linecache.cache["<code>"] = (len(_source), None, _source.splitlines(True), "<code>")
try:
    exec(compile(_source, "<code>", "exec"), {{"__name__": "__main__"}})
except SystemExit:
    raise
except BaseException as _error:
    sys.stdout.flush()
    traceback.print_exception(type(_error), _error, _error.__traceback__.tb_next, file=sys.stdout)
    raise SystemExit(1)
"""


def python(code: str) -> str:
    """Run a Python program and return what it printed.

    The program runs as a script in a fresh sandboxed interpreter: standard library only, no network,
    no files but a private /tmp, a few seconds of time. Print what you want to see. When it fails,
    the traceback is shown.

    Args:
        code: the Python source to run, e.g. "print(sum(range(10)))".
    """
    if not isinstance(code, str):
        raise TypeError(f"the code must be a string, got {type(code).__name__}")
    if len(code) > MAX_CODE_CHARS:
        raise ValueError(f"the program is longer than {MAX_CODE_CHARS} characters")
    limits = PYTHON_LIMITS
    run = run_job({"mode": "io", "program": _WRAPPER.format(source=code), "inputs": [""]}, limits)
    line = next((line for line in run.lines if line.get("id") == 0), None)
    if line is None:
        return f"[the program did not run: the sandbox ended with {run.status!r}]"
    out = line.get("stdout") if isinstance(line.get("stdout"), str) else ""
    error, status = line.get("error"), line.get("exit")
    if error == "Timeout" or run.status == "timeout":
        return _with_notice(out, f"[timed out after {limits.test_s:g} s]")
    if error == "OutputLimit" or line.get("truncated"):
        return _with_notice(out, f"[output cut: more than {limits.output_kb} KiB]")
    if status != 0:
        return _with_notice(out, f"[exit status {status}]")
    return out


def _with_notice(out: str, notice: str) -> str:
    separator = "" if not out or out.endswith("\n") else "\n"
    return out + separator + notice
