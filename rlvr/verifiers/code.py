"""Reward for Python programs: run the completion's last ```python block on tests, sandboxed.

``tests`` is a dict (or its JSON text, which is how the registry passes a gold answer):

* ``{"asserts": ["assert f(2) == 4", ...], "setup": "import math"}``: each entry is
  one ``assert`` statement calling the program's functions; ``setup`` runs after the
  program (put helpers there, never expected answers);
* ``{"io": [{"stdin": "1 2\\n", "stdout": "3\\n"}, ...]}``: the program runs as
  ``__main__`` per test; it passes when it exits 0 and its stdout has the same lines
  as the expected output (trailing whitespace of lines and of the output aside).

Judged outside the sandbox (:mod:`rlvr.verifiers.sandbox` runs the code): for
``assert LHS == 4`` (any comparison, any chain) only ``LHS`` enters the sandbox; its
value comes back as tagged plain data (exact built-in types, so an object whose
``==`` is always true is not data) and the comparison with the literal ``4`` happens
here. The program never sees an expected value, so searching the stack or ``gc`` for
it, patching the test machinery or forging the report cannot make a pass; a test
passes only on a result for its id, so exiting early fails every test left. An
``assert`` that compares no literal (``assert is_prime(7)``) is evaluated inside the
sandbox and passes when its value is truthy: that verdict is only as trustworthy as
the process the program also runs in.

>>> tests = {"asserts": ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]}
>>> python_code("```python\\ndef add(a, b):\\n    return a + b\\n```", tests)
1.0
"""

from __future__ import annotations

import ast
import functools
import json
import operator
import re
from dataclasses import dataclass
from typing import Any, Callable

from rlvr.verifiers.sandbox import Limits, run_job

__all__ = ["CodeReport", "TestResult", "extract_program", "parse_tests", "python_code", "run_python_tests"]

_FENCE = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE | re.ASCII)
_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
_MAX_DECODE_NODES = 1_000_000


@dataclass(frozen=True)
class TestResult:
    """The verdict on one test: ``detail`` says why it failed (``"ok"`` when it passed)."""

    id: int
    passed: bool
    detail: str


@dataclass(frozen=True)
class CodeReport:
    """All verdicts on one completion; ``status`` is how the sandbox run ended."""

    score: float
    results: tuple[TestResult, ...]
    status: str
    wall_s: float = 0.0


@dataclass(frozen=True)
class _Check:
    """One assert: operands are ("lit", value) or ("probe", index); ``ops`` between
    them, or a single operand that must be truthy (``negate``: falsy)."""

    operands: tuple[tuple[str, Any], ...]
    ops: tuple[type, ...]
    negate: bool = False


@dataclass(frozen=True)
class _Spec:
    mode: str
    checks: tuple[_Check, ...] = ()
    probes: tuple[str, ...] = ()
    setup: str = ""
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.checks) if self.mode == "asserts" else len(self.inputs)


def extract_program(completion: str) -> str | None:
    """The last fenced block tagged ``python`` (or ``py``, ``python3``); None if none.

    >>> extract_program("try\\n```python\\nx = 1\\n```\\nthen\\n```python\\nx = 2\\n```")
    'x = 2\\n'
    """
    if not isinstance(completion, str):
        return None
    blocks = _FENCE.findall(completion)
    return blocks[-1] if blocks else None


def parse_tests(tests: dict | str) -> _Spec:
    """Validate a tests spec; raises ValueError with the reason (bad data is not a 0)."""
    return _parse_cached(tests if isinstance(tests, str) else json.dumps(tests, sort_keys=True))


@functools.lru_cache(maxsize=1024)  # the same gold answer is scored G times per prompt
def _parse_cached(text: str) -> _Spec:
    try:
        spec = json.loads(text)
    except ValueError as err:
        raise ValueError(f"code tests are not valid JSON: {err}") from None
    if not isinstance(spec, dict) or len({"asserts", "io"} & spec.keys()) != 1:
        raise ValueError('code tests must be a dict with exactly one of "asserts" or "io"')
    if "io" in spec:
        if set(spec) != {"io"} or not isinstance(spec["io"], list) or not spec["io"]:
            raise ValueError('"io" must be a non-empty list of {"stdin": ..., "stdout": ...}, alone')
        inputs, outputs = [], []
        for k, case in enumerate(spec["io"]):
            if not isinstance(case, dict) or not set(case) <= {"stdin", "stdout"} or not isinstance(case.get("stdout"), str):
                raise ValueError(f'io test {k}: expected {{"stdin": str, "stdout": str}}, got {case!r:.200}')
            if not isinstance(case.get("stdin", ""), str):
                raise ValueError(f"io test {k}: stdin must be a string")
            inputs.append(case.get("stdin", ""))
            outputs.append(case["stdout"])
        return _Spec("io", inputs=tuple(inputs), outputs=tuple(outputs))
    if not set(spec) <= {"asserts", "setup"} or not isinstance(spec.get("setup", ""), str):
        raise ValueError('assert tests take only "asserts" (a list of str) and "setup" (a str)')
    if not isinstance(spec["asserts"], list) or not spec["asserts"]:
        raise ValueError('"asserts" must be a non-empty list of assert statements')
    probes: list[str] = []
    checks = tuple(_compile_assert(k, source, probes) for k, source in enumerate(spec["asserts"]))
    return _Spec("asserts", checks=checks, probes=tuple(probes), setup=spec.get("setup", ""))


def _compile_assert(k: int, source: Any, probes: list[str]) -> _Check:
    """Split one assert into what the sandbox evaluates and what the judge compares."""
    if not isinstance(source, str):
        raise ValueError(f"assert {k}: expected a string, got {type(source).__name__}")
    try:
        body = ast.parse(source.strip()).body
    except SyntaxError as err:
        raise ValueError(f"assert {k}: not valid Python: {err.msg}") from None
    if len(body) != 1 or not isinstance(body[0], ast.Assert):
        raise ValueError(f"assert {k}: must be exactly one assert statement (put helpers in setup): {source!r:.200}")
    test = body[0].test

    def operand(node: ast.expr) -> tuple[str, Any]:
        try:
            return ("lit", ast.literal_eval(node))  # stays here: the sandbox never sees it
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            probes.append(ast.unparse(node))
            return ("probe", len(probes) - 1)

    if isinstance(test, ast.Compare):
        operands = (operand(test.left), *map(operand, test.comparators))
        return _Check(operands, tuple(type(op) for op in test.ops))
    negate = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    return _Check((operand(test.operand if negate else test),), (), negate)


def run_python_tests(
    completion: str, tests: dict | str, *, limits: Limits | None = None, sandbox: str | None = None
) -> CodeReport:
    """Run the completion's program on ``tests`` and return typed per-test verdicts.

    Raises ValueError for a malformed ``tests`` spec and
    :class:`~rlvr.verifiers.sandbox.SandboxUnavailable` when code cannot be run safely.
    """
    spec = parse_tests(tests)
    limits = limits or Limits()
    program = extract_program(completion)
    if program is None or len(program) > limits.source_chars:
        detail = "no ```python block" if program is None else f"program longer than {limits.source_chars} characters"
        return CodeReport(0.0, tuple(TestResult(i, False, detail) for i in range(len(spec))), "not_run")
    if spec.mode == "io":
        job = {"mode": "io", "program": program, "inputs": list(spec.inputs)}
    else:
        job = {"mode": "asserts", "program": program, "setup": spec.setup, "probes": list(spec.probes)}
    run = run_job(job, limits, sandbox)
    by_id: dict[int, dict] = {}
    for line in run.lines:
        if isinstance(line.get("id"), int) and line["id"] not in by_id:
            by_id[line["id"]] = line
    if spec.mode == "io":
        results = tuple(_judge_io(i, by_id.get(i), spec.outputs[i]) for i in range(len(spec)))
    else:
        results = tuple(_judge_assert(i, check, by_id) for i, check in enumerate(spec.checks))
    score = sum(r.passed for r in results) / len(results)
    return CodeReport(score, results, run.status, run.wall_s)


def python_code(
    completion: str,
    tests: dict | str,
    *,
    all_or_nothing: bool = False,
    limits: Limits | None = None,
    sandbox: str | None = None,
) -> float:
    """Fraction of ``tests`` the completion's last ```python block passes (sandboxed).

    With ``all_or_nothing`` the reward is 1.0 only when every test passes. Raises on a
    malformed spec or a missing sandbox (see :func:`run_python_tests`) rather than
    return a silent 0.
    """
    report = run_python_tests(completion, tests, limits=limits, sandbox=sandbox)
    if all_or_nothing:
        return 1.0 if report.score == 1.0 else 0.0
    return report.score


def python_code_all_or_nothing(completion: str, tests: dict | str) -> float:
    """:func:`python_code` that pays only when every test passes."""
    return python_code(completion, tests, all_or_nothing=True)


# --------------------------------------------------------------------------- the judge


def _judge_io(i: int, line: dict | None, expected: str) -> TestResult:
    if line is None:
        return TestResult(i, False, "no result")
    if line.get("error"):
        return TestResult(i, False, str(line["error"]))
    if line.get("truncated") or not isinstance(line.get("stdout"), str):
        return TestResult(i, False, "output limit")
    if line.get("exit") != 0:
        return TestResult(i, False, f"exit status {line.get('exit')}")
    if _lines(line["stdout"]) != _lines(expected):
        return TestResult(i, False, "wrong output")
    return TestResult(i, True, "ok")


def _lines(text: str) -> list[str]:
    """Lines without trailing whitespace, trailing blank lines dropped: the line count
    must match, so printing only the first expected line fails."""
    return [line.rstrip() for line in text.rstrip().split("\n")]


def _judge_assert(i: int, check: _Check, by_id: dict[int, dict]) -> TestResult:
    values = []
    for kind, x in check.operands:
        if kind == "lit":
            values.append(x)
            continue
        line = by_id.get(x)
        if line is None:
            return TestResult(i, False, "no result")
        if "value" not in line:
            return TestResult(i, False, str(line.get("error", "no value")))
        try:
            values.append(_untag(line["value"], [_MAX_DECODE_NODES]))
        except (ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError):
            return TestResult(i, False, "malformed value")
    try:
        if not check.ops:
            passed = not values[0] if check.negate else bool(values[0])
        else:
            passed = all(_COMPARE[op](a, b) for op, a, b in zip(check.ops, values, values[1:]))
    except Exception as err:  # e.g. "<" between str and int: the test fails, as in Python
        return TestResult(i, False, type(err).__name__)
    return TestResult(i, passed, "ok" if passed else "assertion failed")


def _untag(tagged: Any, budget: list[int]) -> Any:
    """Rebuild plain data from the runner's tagged JSON, strictly (anything else raises)."""
    budget[0] -= 1
    if budget[0] < 0 or not isinstance(tagged, list) or not tagged or not isinstance(tagged[0], str):
        raise ValueError("malformed")
    tag, rest = tagged[0], tagged[1:]
    if tag == "none" and not rest:
        return None
    if tag == "bool" and len(rest) == 1 and type(rest[0]) is bool:
        return rest[0]
    if len(rest) == 1 and isinstance(rest[0], str):
        if tag == "int" and len(rest[0]) <= 100_000:
            return int(rest[0], 16)
        if tag == "float":
            return float.fromhex(rest[0])
        if tag == "str":
            return rest[0]
        if tag == "bytes":
            return bytes.fromhex(rest[0])
    if tag == "complex" and len(rest) == 2:
        return complex(float.fromhex(rest[0]), float.fromhex(rest[1]))
    if tag in ("list", "tuple", "set", "frozenset") and len(rest) == 1 and isinstance(rest[0], list):
        items = [_untag(v, budget) for v in rest[0]]
        return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
    if tag == "dict" and len(rest) == 1 and isinstance(rest[0], list):
        return {_untag(k, budget): _untag(v, budget) for k, v in rest[0]}
    raise ValueError(f"malformed {tag}")

