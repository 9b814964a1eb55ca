"""The tests code datasets ship, as they ship them, turned into python_code's own spec.

python_code's answer is a tests spec in one of its own four forms (docs/verifiers.md):
``{"asserts": [...], "setup": ...}``, ``{"io": [{"stdin", "stdout"}, ...]}``,
``{"check": source, "entry_point": name}`` and ``{"calls": [{"args": [...], "output": value}, ...],
"fn_name": name}``. A dataset's own shape is recognised from the answer field and the row's
other fields, and rewritten into one of them here, before anything runs:

=====================  ==========================================  =================================
dataset                answer field (``data.answer_field``)        row fields read
=====================  ==========================================  =================================
HumanEval              ``test``: code defining ``check(candidate)``  ``entry_point`` (``prompt``)
MBPP                   ``test_list``: a list of asserts            ``test_setup_code``, ``test_imports``
(any)                  asserts as Python source, one per line
APPS / TACO            ``input_output``: ``{"inputs", "outputs"}``   ``fn_name`` inside: call-based
CodeContests           ``public_tests`` / ``private_tests``:
                       ``{"input": [...], "output": [...]}``
LiveCodeBench          ``public_test_cases``: a JSON list of          ``metadata`` (``func_name``) or
                       ``{"input", "output", "testtype"}``            ``fn_name`` for "functional"
=====================  ==========================================  =================================

An MBPP assert that calls nothing the program defines (``assert True``; the judge's rule,
`judge.CallsNothing`) passes whatever the program does: it is not counted as a test (a spec left
with none is refused). Output of stdin/stdout tests is compared by :func:`same_output`.
"""

from __future__ import annotations

import ast
import json
from decimal import Decimal, InvalidOperation
from typing import Any

from rlvr.verifiers.code.judge import CallsNothing, compile_assert
from rlvr.verifiers.code.testcode import assert_names

__all__ = ["NATIVE_KEYS", "ROW_FIELDS", "call_target", "native_spec", "same_output", "same_result"]

# The row fields python_code reads besides its answer (anything else in a row is ignored).
ROW_FIELDS = ("entry_point", "fn_name", "metadata", "prompt", "test_imports", "test_setup_code")
NATIVE_KEYS = frozenset(["asserts", "io", "check", "calls"])


def native_spec(tests: Any, fields: dict[str, Any] | None = None) -> dict:
    """python_code's own spec for ``tests`` (a dict, a list, or their JSON text, or Python test
    source) and the row's ``fields``; ValueError naming the field for anything unrecognised."""
    fields = {k: v for k, v in (fields or {}).items() if k in ROW_FIELDS and v is not None}
    value = tests
    if isinstance(tests, str):
        try:
            value = json.loads(tests)
        except ValueError:
            return _from_source(tests, fields)
        except RecursionError:
            raise ValueError("code tests are nested too deeply") from None
    if isinstance(value, dict):
        if NATIVE_KEYS & value.keys():
            return _with_row_fields(value, fields)
        if {"inputs", "outputs"} <= value.keys():
            return _from_apps(value, fields)
        if {"input", "output"} <= value.keys():
            return _from_code_contests(value)
        raise ValueError(f"code tests must be a dict with one of {sorted(NATIVE_KEYS)}, or a dataset's own shape (APPS' "
                         f"inputs/outputs, CodeContests' input/output); got keys {sorted(value)[:8]}")
    if isinstance(value, list) and value and all(isinstance(x, str) for x in value):
        return _from_mbpp(value, fields)
    if isinstance(value, list) and value and all(isinstance(x, dict) and {"input", "output"} <= x.keys() for x in value):
        return _from_livecodebench(value, fields)
    if isinstance(value, str):  # a JSON string holding the source
        return _from_source(value, fields)
    raise ValueError(f"code tests must be a dict, a non-empty list of asserts or of LiveCodeBench test cases, or Python "
                     f"test source; got {type(value).__name__} {str(value)[:80]!r}")


def _with_row_fields(spec: dict, fields: dict) -> dict:
    """A native spec that needs a name takes it from the row when it does not give one itself: a
    ``check`` its ``entry_point`` (and ``prompt``), ``calls`` its ``fn_name`` (docs/verifiers.md:
    a spec without the field is scored with the row's)."""
    wanted = ("entry_point", "prompt") if "check" in spec else ("fn_name",) if "calls" in spec else ()
    missing = {name: fields[name] for name in wanted if name not in spec and name in fields}
    return {**spec, **missing} if missing else spec


# ------------------------------------------------------------------------ code tests


def _from_source(source: str, fields: dict) -> dict:
    """HumanEval's ``test`` (code defining check(candidate)), or bare asserts, one per line."""
    try:
        module = ast.parse(source)
    except SyntaxError as err:
        raise ValueError(f"code tests are neither JSON nor valid Python: {err.msg} (line {err.lineno})") from None
    except (MemoryError, RecursionError):
        raise ValueError("code tests are nested too deeply to parse") from None
    if any(isinstance(n, ast.FunctionDef) and n.name == "check" for n in module.body):
        spec = {"check": source}
        spec.update({name: fields[name] for name in ("entry_point", "prompt") if name in fields})
        return spec
    imports = [n for n in module.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    asserts = [n for n in module.body if isinstance(n, ast.Assert)]
    if asserts and len(imports) + len(asserts) == len(module.body):
        lines = [ast.get_source_segment(source, n) or ast.unparse(n) for n in asserts]
        setup = "\n".join(ast.unparse(n) for n in imports)
        return _from_mbpp(lines, {**fields, "test_imports": [setup, *_listed(fields.get("test_imports"))]} if setup else fields)
    raise ValueError("code tests given as Python source must define check(candidate) (HumanEval's test field) or be "
                     "assert statements (and imports) only")


def _listed(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except ValueError:
            return [value]
        value = decoded
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ValueError(f"field 'test_imports' must be a list of import statements, got {str(value)[:80]!r}")
    return value


def _from_mbpp(asserts: list[str], fields: dict) -> dict:
    """MBPP: ``test_list`` + ``test_imports`` + ``test_setup_code`` (the imports first, then the setup)."""
    setup_code = fields.get("test_setup_code", "")
    if not isinstance(setup_code, str):
        raise ValueError(f"field 'test_setup_code' must be a string, got {type(setup_code).__name__}")
    setup = "\n".join([*_listed(fields.get("test_imports")), setup_code]).strip()
    try:
        names = assert_names(setup)
    except ValueError:
        names = None  # the judge reports the setup's problem when the spec is parsed
    counted = [a for a in asserts if names is None or not _judges_nothing(a, names)]
    if not counted:
        raise ValueError("every assert calls nothing the program defines (such as `assert True`), so it passes whatever "
                         "the program does: no test left to judge with")
    return {"asserts": counted, "setup": setup} if setup else {"asserts": counted}


def _judges_nothing(source: str, names: dict[str, Any]) -> bool:
    """True for an assert that calls nothing the program defines (``assert True``, ``assert
    math.pi > 3``): it cannot tell one program from another. The judge's own rule
    (`judge.CallsNothing`), so literals, built-ins, provided modules and the assert's own lambda and
    comprehension variables all count as the judge's."""
    try:
        compile_assert(0, source, names, [])
    except CallsNothing:
        return True
    except ValueError:
        return False  # the judge reports the problem when the spec is parsed, naming the test
    return False


# ------------------------------------------------------------------------ stdin/stdout tests


def _text(value: Any, what: str) -> str:
    """One test's stdin or stdout: a string, or a list of lines (APPS writes both)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
        return "\n".join(value)
    raise ValueError(f"{what} must be a string or a list of lines, got {type(value).__name__}")


def _io(inputs: Any, outputs: Any, where: str) -> dict:
    if not isinstance(inputs, list) or not isinstance(outputs, list) or not inputs or len(inputs) != len(outputs):
        raise ValueError(f"{where}: inputs and outputs must be non-empty lists of the same length")
    return {"io": [{"stdin": _text(i, f"{where} input {k}"), "stdout": _text(o, f"{where} output {k}")}
                   for k, (i, o) in enumerate(zip(inputs, outputs))]}


def _from_code_contests(value: dict) -> dict:
    """CodeContests' ``public_tests`` / ``private_tests``: ``{"input": [...], "output": [...]}``."""
    if not set(value) <= {"input", "output"}:
        raise ValueError(f"CodeContests tests take only 'input' and 'output', got {sorted(value)}")
    return _io(value["input"], value["output"], "CodeContests tests")


def _from_apps(value: dict, fields: dict) -> dict:
    """APPS / TACO ``input_output``: stdin/stdout, or call-based with ``fn_name``."""
    fn_name = value.get("fn_name") or fields.get("fn_name")
    if not fn_name:
        return _io(value["inputs"], value["outputs"], "input_output")
    inputs, outputs = value["inputs"], value["outputs"]
    if not isinstance(inputs, list) or not isinstance(outputs, list) or not inputs or len(inputs) != len(outputs):
        raise ValueError("input_output: inputs and outputs must be non-empty lists of the same length")
    cases = []
    for k, (args, output) in enumerate(zip(inputs, outputs)):
        if not isinstance(args, list):
            raise ValueError(f"input_output: inputs[{k}] must be the list of the call's arguments")
        cases.append({"args": args, "output": output})
    # APPS' and TACO's judges accept the result or, when the expected value is a list, its first item
    return {"calls": cases, "fn_name": fn_name, "wrapped_outputs": True}


def _from_livecodebench(cases: list[dict], fields: dict) -> dict:
    """LiveCodeBench's ``public_test_cases``: stdin tests, or "functional" ones (one JSON value
    per input line, the function named by the row's ``metadata`` func_name or ``fn_name``)."""
    kinds = {case.get("testtype", "stdin") for case in cases}
    if len(kinds) != 1 or not kinds <= {"stdin", "functional"}:
        raise ValueError(f"LiveCodeBench test cases must all have testtype 'stdin' or all 'functional', got {sorted(map(str, kinds))}")
    if kinds == {"stdin"}:
        return _io([c["input"] for c in cases], [c["output"] for c in cases], "LiveCodeBench test cases")
    fn_name = fields.get("fn_name")
    metadata = fields.get("metadata")
    if not fn_name and metadata is not None:
        try:
            meta = json.loads(metadata) if isinstance(metadata, str) else metadata
        except ValueError:
            raise ValueError("field 'metadata' is not valid JSON") from None
        fn_name = meta.get("func_name") if isinstance(meta, dict) else None
    calls = []
    for k, case in enumerate(cases):
        try:
            args = [json.loads(line) for line in _text(case["input"], f"test case {k} input").split("\n")]
            output = json.loads(_text(case["output"], f"test case {k} output"))
        except ValueError:
            raise ValueError(f"LiveCodeBench functional test case {k}: each input line and the output must be JSON") from None
        calls.append({"args": args, "output": output})
    spec: dict = {"calls": calls}
    if fn_name:
        spec["fn_name"] = fn_name
    return spec


# ------------------------------------------------------------------------ comparisons


def same_output(actual: str, expected: str) -> bool:
    """The stdin/stdout rule (LiveCodeBench's grade_stdio, with APPS' token split): both outputs
    stripped, split into lines, each line stripped; the line counts must match (blank lines inside
    count, trailing ones and ``\\r`` do not), and each pair of lines must be equal, or equal as
    whitespace-separated tokens (``1  2`` is ``1 2``), or, when every token is a number, equal as
    decimals (``1.50`` is ``1.5``, ``2`` is ``2.0``; no tolerance: ``0.333`` is not ``0.3333``).

    >>> same_output("3 \\r\\n4\\n\\n", "3\\n4")
    True
    >>> same_output("1.50  2", "1.5 2.0")
    True
    >>> same_output("3\\n\\n4", "3\\n4")
    False
    """
    got, want = _stripped_lines(actual), _stripped_lines(expected)
    return len(got) == len(want) and all(_same_line(g, w) for g, w in zip(got, want))


def _stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _same_line(got: str, want: str) -> bool:
    if got == want:
        return True
    got_tokens, want_tokens = got.split(), want.split()
    if got_tokens == want_tokens:
        return True
    if len(got_tokens) != len(want_tokens):
        return False
    try:
        return all(Decimal(g) == Decimal(w) for g, w in zip(got_tokens, want_tokens) if g != w)
    except (InvalidOperation, ValueError):
        return False


def same_result(result: Any, expected: Any, wrapped: bool = False) -> bool:
    """The call-based rule (LiveCodeBench's grade_call_based, APPS' testing_util): the result,
    tuples read as lists (the expected value is JSON, which has none), equals the expected value;
    with ``wrapped`` (APPS, TACO) it may equal the expected list's first item instead."""
    result = _as_json_shape(result)
    if result == expected:
        return True
    return wrapped and isinstance(expected, list) and len(expected) > 0 and result == expected[0]


def _as_json_shape(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return [_as_json_shape(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_json_shape(v) for k, v in value.items()}
    return value


def call_target(program: str, fn_name: str) -> str:
    """What the sandbox calls for a call-based test: ``Solution().<fn>`` when the program defines a
    top-level ``class Solution`` (LeetCode's form, as LiveCodeBench and APPS call it), else ``<fn>``."""
    try:
        module = ast.parse(program)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return fn_name
    if any(isinstance(n, ast.ClassDef) and n.name == "Solution" for n in module.body):
        return f"Solution().{fn_name}"
    return fn_name
