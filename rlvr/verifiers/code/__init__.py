"""Reward for Python programs: run the completion's last ```python block on tests, sandboxed.

``tests`` (the answer) is one of python_code's four spec forms, as a dict or its JSON text:

* ``{"asserts": ["assert f(2) == 4", ...], "setup": "import math"}``: each entry is
  one ``assert`` statement calling the program's functions; ``setup`` runs after the
  program (put helpers there, never expected answers);
* ``{"io": [{"stdin": "1 2\\n", "stdout": "3\\n"}, ...]}``: the program runs as
  ``__main__`` per test; it passes when it exits 0 and its output is the expected one by
  :func:`rlvr.verifiers.code.formats.same_output` (lines stripped, numbers as decimals);
* ``{"check": "def check(candidate): ...", "entry_point": "f"}``: trusted test code with
  statements, interpreted here with ``candidate`` bound to the program's ``f``
  (:mod:`rlvr.verifiers.code.testcode`); the whole check is one test;
* ``{"calls": [{"args": [1, 2], "output": 3}, ...], "fn_name": "f"}``: each call
  ``f(*args)`` (``Solution().f`` when the program defines ``class Solution``) is one test,
  its result compared here with the output.

or the shape a dataset ships (HumanEval's ``test`` with the row's ``entry_point``, MBPP's
``test_list`` with ``test_setup_code`` and ``test_imports``, APPS/TACO ``input_output``,
CodeContests ``public_tests``, LiveCodeBench ``public_test_cases``), which
:mod:`rlvr.verifiers.code.formats` rewrites into one of the four; the row's fields reach
python_code as keyword arguments (the reward contract).

Judged outside the sandbox (:mod:`rlvr.verifiers.code.sandbox` runs the code,
:mod:`rlvr.verifiers.code.judge` judges): only the calls into the program (``f(2)`` in
``assert abs(f(2) - 4.0) < 1e-9``) run in the sandbox; their values come back as plain
data (built-in types; a subclass such as an always-equal ``int`` comes back as its plain
base value, and any other object is not data) and
the rest of the assert, expected value, ``abs``, ``-`` and ``<`` included, is evaluated
here with the real built-ins. The program never sees an expected value and cannot
shadow a function the test judges with, so searching the stack or ``gc``, patching the
test machinery or forging the report cannot make a pass; a test passes only on results
for its own probes, so exiting early fails every test left. An assert the judge cannot
evaluate safely is refused when the tests are loaded (ValueError naming the test).

The package, in the order of a verdict: ``formats`` (a dataset's shape -> one of the four
forms); ``judge`` with ``trusted``, ``methods`` and ``host_modules`` (each assert split at load
into calls into the program and what the host evaluates, with what the host may call);
``testcode`` (trusted check code with statements, on the judge's interpreter); ``sandbox`` with
``seccomp`` and ``cgroups`` (the jail a job runs in) and ``served`` (many jobs through one jail);
``_runner`` (what runs inside: standard library only, sent as source, never imported by rlvr);
``results`` (the jail's untrusted values, decoded); this file holds the reward.

>>> tests = {"asserts": ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]}
>>> python_code("```python\\ndef add(a, b):\\n    return a + b\\n```", tests)
1.0
"""

from __future__ import annotations

import ast
import functools
import json
import re
import time
import typing
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from rlvr.verifiers.code.formats import NATIVE_KEYS, ROW_FIELDS, call_target, native_spec, same_output, same_result
from rlvr.verifiers.code.judge import CompiledAssert, JudgeError, ProbeFailed, compile_assert, evaluate
from rlvr.verifiers.code.results import decode_value, encode_value
from rlvr.verifiers.code.sandbox import Limits, SandboxUnavailable, run_job, warm_up
from rlvr.verifiers.code.served import MAX_JOBS_PER_SANDBOX, can_serve, plan_servers, run_jobs_served
from rlvr.verifiers.code.testcode import MAX_ROUNDS, TestCode, assert_names, compile_test_code, interpret_round, trusted_helpers

__all__ = ["CodeReport", "TestResult", "check_tests", "extract_program", "parse_tests", "python_code", "python_code_batched",
           "run_python_tests", "run_python_tests_batch", "sandbox_preflight"]

_FENCE = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE | re.ASCII)


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
class _Spec:
    mode: str  # "asserts" | "io" | "check" | "calls"
    checks: tuple[CompiledAssert, ...] = ()
    probes: tuple[str, ...] = ()
    names: dict[str, Any] = field(default_factory=dict, compare=False)  # what asserts resolve on the host
    setup: str = ""
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    test_code: TestCode | None = None  # "check": the trusted test code ...
    entry_point: str = ""  # ... the program's function bound to its `candidate` ...
    helpers: ast.Module | None = field(default=None, compare=False)  # ... and the prompt's functions it calls
    call_args: tuple[tuple[Any, ...], ...] = ()  # "calls": each test's arguments ...
    expected: tuple[Any, ...] = ()  # ... and expected result
    fn_name: str = ""
    wrapped_outputs: bool = False  # APPS/TACO: an expected list's first item also counts
    key: str = field(default="", compare=False)  # one text per problem: programs for it never share a sandbox

    def __len__(self) -> int:
        if self.mode == "asserts":
            return len(self.checks)
        if self.mode == "check":
            return 1
        return len(self.inputs) if self.mode == "io" else len(self.call_args)


def extract_program(completion: str) -> str | None:
    """The last fenced block tagged ``python`` (or ``py``, ``python3``); None if none.

    >>> extract_program("try\\n```python\\nx = 1\\n```\\nthen\\n```python\\nx = 2\\n```")
    'x = 2\\n'
    """
    if not isinstance(completion, str):
        return None
    blocks = _FENCE.findall(completion)
    return blocks[-1] if blocks else None


_TYPING_NAMES = frozenset(typing.__all__)


def typing_names(program: str) -> list[str]:
    """The names of ``typing`` (``List``, ``Optional``...) the program reads but never binds.

    The rule: a program judged by its functions (asserts, check, calls) runs with these bound, as
    the harnesses it is written for run it: LeetCode's and LiveCodeBench's import ``typing`` for
    a ``class Solution``, HumanEval's prompt (``from typing import List``) precedes the completion.
    An I/O program runs as the script it is."""
    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    read, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.ImportFrom) and node.module == "typing" and any(a.name == "*" for a in node.names):
            return []  # the program binds them all itself
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return sorted((read & _TYPING_NAMES) - bound)


def parse_tests(tests: dict | list | str, fields: dict[str, Any] | None = None, *, need_fields: bool = True) -> _Spec:
    """Validate a tests spec, in any form python_code reads (see the module docstring), with the
    row's ``fields`` (``entry_point``, ``test_setup_code``...); raises ValueError with the reason
    (bad data is not a 0). ``need_fields=False`` checks what the answer alone shows (the data
    check, which sees no other field): a spec that needs a field it lacks passes there."""
    row = {k: fields[k] for k in ROW_FIELDS if fields and fields.get(k) is not None}
    text = tests if isinstance(tests, str) else json.dumps(tests, sort_keys=True)
    return _parse_cached(text, json.dumps(row, sort_keys=True, default=str), need_fields)


@functools.lru_cache(maxsize=1024)  # the same gold answer is scored G times per prompt
def _parse_cached(text: str, row_json: str, need_fields: bool) -> _Spec:
    spec = native_spec(text, json.loads(row_json))
    if not isinstance(spec, dict) or len(NATIVE_KEYS & spec.keys()) != 1:
        raise ValueError(f"code tests must be a dict with exactly one of {sorted(NATIVE_KEYS)}")
    key = json.dumps(spec, sort_keys=True)
    for mode, parse in _PARSERS.items():
        if mode in spec:
            return parse(spec, key, need_fields)
    raise AssertionError("unreachable")


def _parse_io(spec: dict, key: str, need_fields: bool) -> _Spec:
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
    return _Spec("io", inputs=tuple(inputs), outputs=tuple(outputs), key=key)


def _parse_asserts(spec: dict, key: str, need_fields: bool) -> _Spec:
    if not set(spec) <= {"asserts", "setup"} or not isinstance(spec.get("setup", ""), str):
        raise ValueError('assert tests take only "asserts" (a list of str) and "setup" (a str)')
    if not isinstance(spec["asserts"], list) or not spec["asserts"]:
        raise ValueError('"asserts" must be a non-empty list of assert statements')
    probes: list[str] = []
    names = assert_names(spec.get("setup", ""))
    checks = tuple(compile_assert(k, source, names, probes) for k, source in enumerate(spec["asserts"]))
    return _Spec("asserts", checks=checks, probes=tuple(probes), setup=spec.get("setup", ""), names=names, key=key)


def _parse_check(spec: dict, key: str, need_fields: bool) -> _Spec:
    if not set(spec) <= {"check", "entry_point", "prompt"}:
        raise ValueError(f'check tests take only "check" (test code defining check(candidate)), "entry_point" and "prompt", '
                         f'got {sorted(spec)}')
    entry_point = spec.get("entry_point")
    if entry_point is None and need_fields:
        raise ValueError("test code defining check(candidate) (HumanEval's test field) needs the row's 'entry_point' field: "
                         "the name of the program's function that candidate stands for")
    if entry_point is not None and not (isinstance(entry_point, str) and entry_point.isidentifier()):
        raise ValueError(f"field 'entry_point' must be a function name, got {entry_point!r:.80}")
    if not isinstance(spec.get("prompt", ""), str):
        raise ValueError(f"field 'prompt' must be text, got {type(spec['prompt']).__name__}")
    code = compile_test_code(spec["check"], "check", what="test code (the check field)")
    helpers = trusted_helpers(spec["prompt"], code, entry_point or "") if spec.get("prompt") else None
    return _Spec("check", test_code=code, entry_point=entry_point or "", helpers=helpers, key=key)


def _parse_calls(spec: dict, key: str, need_fields: bool) -> _Spec:
    if not set(spec) <= {"calls", "fn_name", "wrapped_outputs"}:
        raise ValueError(f'call tests take only "calls", "fn_name" and "wrapped_outputs", got {sorted(spec)}')
    fn_name = spec.get("fn_name")
    if fn_name is None and need_fields:
        raise ValueError("call-based tests need the function's name: 'fn_name' (in input_output or a row field), or "
                         "LiveCodeBench's 'metadata' field with func_name")
    if fn_name is not None and not (isinstance(fn_name, str) and all(p.isidentifier() for p in fn_name.split("."))):
        raise ValueError(f"'fn_name' must be a function name, got {fn_name!r:.80}")
    calls = spec["calls"]
    if not isinstance(calls, list) or not calls:
        raise ValueError('"calls" must be a non-empty list of {"args": [...], "output": value}')
    args, expected = [], []
    for k, case in enumerate(calls):
        if not isinstance(case, dict) or set(case) != {"args", "output"} or not isinstance(case["args"], list):
            raise ValueError(f'call test {k}: expected {{"args": [...], "output": value}}, got {case!r:.200}')
        try:
            encode_value(case["args"])
        except JudgeError as err:
            raise ValueError(f"call test {k}: {err}") from None
        args.append(tuple(case["args"]))
        expected.append(case["output"])
    return _Spec("calls", call_args=tuple(args), expected=tuple(expected), fn_name=fn_name or "",
                 wrapped_outputs=bool(spec.get("wrapped_outputs")), key=key)


_PARSERS: dict[str, Callable[[dict, str, bool], _Spec]] = {"asserts": _parse_asserts, "io": _parse_io, "check": _parse_check,
                                                            "calls": _parse_calls}


def run_python_tests(
    completion: str, tests: dict | str, *, limits: Limits | None = None, sandbox: str | None = None,
    fields: dict[str, Any] | None = None,
) -> CodeReport:
    """Run the completion's program on ``tests`` (with the row's ``fields``) and return typed
    per-test verdicts.

    Raises ValueError for a malformed ``tests`` spec and
    :class:`~rlvr.verifiers.code.sandbox.SandboxUnavailable` when code cannot be run safely.
    """
    limits = limits or Limits()
    judging = _Judging(parse_tests(tests, fields), extract_program(completion), limits)
    while judging.report is None:
        judging.take(run_job(judging.next_job(), judging.limits_left(), sandbox))
    return judging.report


def run_python_tests_batch(
    completions: list[str], tests: list[dict | str], *, limits: Limits | None = None, sandbox: str | None = None,
    sandboxes: int = 2, fields: list[dict[str, Any]] | None = None,
) -> list[CodeReport]:
    """`run_python_tests` for many completions, each program's report the one it gets alone,
    `sandboxes` sandboxes at a time (threads: the work is in the sandbox processes).

    A program that occurs several times for the same tests (G samples of one prompt often agree)
    runs once and is judged once: every copy gets that verdict; one that draws random numbers gets
    one draw for all its copies. Programs for different problems share a sandbox, one after another,
    each started from a process that never held another program, with the jail cleared between them
    (:mod:`rlvr.verifiers.code.served`); two programs for the same tests never share one, so nothing a
    program could learn from an earlier one is a sibling's answer to its own problem. Test code
    that needs several rounds of calls (``check`` tests) gets them batch-wide: each round runs the
    jobs of every program still waiting, together."""
    limits = limits or Limits()
    rows = fields if fields is not None else [{}] * len(completions)
    specs = [parse_tests(t, f) for t, f in zip(tests, rows, strict=True)]
    programs = [extract_program(c) for c in completions]
    if len(specs) != len(completions):
        raise ValueError(f"{len(completions)} completions for {len(specs)} tests")
    distinct: dict[tuple[str, str | None], _Judging] = {}
    for spec, program in zip(specs, programs):
        if (spec.key, program) not in distinct:
            distinct[(spec.key, program)] = _Judging(spec, program, limits)
    waiting = [j for j in distinct.values() if j.report is None]
    while waiting:
        runs = _run_many([(j.spec.key, j.next_job(), j.limits_left()) for j in waiting], limits, sandbox, sandboxes)
        for judging, run in zip(waiting, runs):
            judging.take(run)
        waiting = [j for j in waiting if j.report is None]
    return [distinct[(spec.key, program)].report for spec, program in zip(specs, programs)]  # type: ignore[misc]


def _run_many(jobs: list[tuple[str, dict, Limits]], limits: Limits, sandbox: str | None, sandboxes: int) -> list:
    """The runs of (problem key, job, its limits) triples, `sandboxes` at a time: jobs of different
    problems share a served sandbox one after another; two jobs of one problem never do. A job
    with limits of its own (a later round of test code, with what is left of its budget) runs
    alone: a served sandbox gives each job the same limits."""
    workers, serve = max(1, sandboxes), can_serve(limits, sandbox)
    shared = [i for i, (_, _, own) in enumerate(jobs) if serve and own == limits]
    alone = sorted(set(range(len(jobs))) - set(shared))  # a sandbox each
    alone_set = set(alone)
    # At least one jail per worker when there are enough programs.
    cap = max(1, min(MAX_JOBS_PER_SANDBOX, -(-len(shared) // workers)))
    served = [[shared[k] for k in group] for group in plan_servers([jobs[i][0] for i in shared], cap=cap)] if shared else []

    def execute(group: list[int]) -> list:
        if len(group) == 1 and group[0] in alone_set:
            return [run_job(jobs[group[0]][1], jobs[group[0]][2], sandbox)]
        return run_jobs_served([jobs[i][1] for i in group], limits, sandbox)

    groups = [[i] for i in alone] + served
    pool = ThreadPoolExecutor(max_workers=workers)
    runs: list = [None] * len(jobs)
    try:
        for group, group_runs in zip(groups, pool.map(execute, groups)):
            for i, run in zip(group, group_runs):
                runs[i] = run
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)  # a missing sandbox: do not start the rest of the batch
        raise
    finally:
        pool.shutdown(wait=True)
    return runs


class _Judging:
    """One (tests, program) pair on its way to a report: the sandbox jobs it needs, one at a time
    (one for asserts, io and calls; a round each for test code), and the verdicts on their runs."""

    def __init__(self, spec: _Spec, program: str | None, limits: Limits) -> None:
        self.spec, self.program, self.limits = spec, program, limits
        self.report: CodeReport | None = None
        self.known: dict[str, dict] = {}  # check tests: the runner's line of each call made so far
        self.calls: list[tuple[str, dict]] = []  # check tests: the current round's (key, probe), the job's probes in order
        self.rounds, self.wall_s, self.status = 0, 0.0, "ok"
        self.used_s = 0.0  # of the pair's one time budget (limits.total_s): every job's run and all judging
        self.typing_names = typing_names(program) if program and spec.mode != "io" else []
        if program is None or len(program) > limits.source_chars:
            detail = "no ```python block" if program is None else f"program longer than {limits.source_chars} characters"
            self.report = CodeReport(0.0, tuple(TestResult(i, False, detail) for i in range(len(spec))), "not_run")
        elif spec.mode == "check":
            started = time.monotonic()
            self.interpret(started + limits.total_s)
            self.used_s += time.monotonic() - started

    def limits_left(self) -> Limits:
        """The next job's limits: what the pair's budget has left. Test code that needs several
        rounds shares one `total_s` across them, so the time a verifier declares (`time_limit_s`)
        bounds the whole pair, however many rounds it takes."""
        if self.used_s == 0.0:
            return self.limits
        return replace(self.limits, total_s=max(0.1, self.limits.total_s - self.used_s))

    def next_job(self) -> dict:
        spec, program = self.spec, self.program
        if spec.mode == "io":
            return {"mode": "io", "program": program, "inputs": list(spec.inputs)}
        if spec.mode == "asserts":
            job = {"mode": "asserts", "program": program, "setup": spec.setup, "probes": list(spec.probes)}
        elif spec.mode == "calls":
            target = call_target(program or "", spec.fn_name)
            probes = [{"call": target, "args": encode_value(list(args)), "kwargs": encode_value({})} for args in spec.call_args]
            job = {"mode": "asserts", "program": program, "setup": "", "probes": probes}
        else:
            job = {"mode": "asserts", "program": program, "setup": "", "probes": [probe for _, probe in self.calls]}
        if self.typing_names:
            job["typing_names"] = self.typing_names
        return job

    def take(self, run: Any) -> None:
        """The verdicts on a job's run (for test code: the next round, or the verdict). Judging
        counts against the job's limit: it gets what the run's own clock left of it (the clock
        starts when the job does, after the sandbox's one-time preparation, so a cold first job
        is not charged for it)."""
        started = time.monotonic()
        self.wall_s += run.wall_s
        self.used_s += run.wall_s
        deadline = started + self.limits.total_s - self.used_s
        if self.spec.mode != "check":
            self.report = _judge(self.spec, run, deadline)
            return
        for line in run.lines:
            i = line.get("id")
            if isinstance(i, int) and 0 <= i < len(self.calls) and self.calls[i][0] not in self.known:
                self.known[self.calls[i][0]] = line
        for key, _ in self.calls:  # a call the run never reported (it timed out, the job died) failed
            self.known.setdefault(key, {"error": run.status if run.status != "ok" else "no result"})
        self.status = run.status
        self.interpret(deadline)
        self.used_s += time.monotonic() - started

    def interpret(self, deadline: float) -> None:
        assert self.spec.test_code is not None
        outcome = interpret_round(self.spec.test_code, self.spec.entry_point, self.known, deadline, self.spec.helpers)
        if outcome.passed is None and time.monotonic() >= deadline:  # no budget left for another round
            outcome.passed, outcome.detail = False, "Timeout"
        if outcome.passed is None and self.rounds >= MAX_ROUNDS:
            outcome.passed, outcome.detail = False, (f"the test code needs more than {MAX_ROUNDS} rounds of calls into the "
                                                     "program (each round's calls depend on the last one's results)")
        if outcome.passed and not self.known:  # it would pass whatever the program does
            outcome.passed, outcome.detail = False, "the test code made no call into the program"
        if outcome.passed is not None:
            self.report = CodeReport(float(outcome.passed), (TestResult(0, outcome.passed, outcome.detail),), self.status, self.wall_s)
            return
        self.rounds += 1
        self.calls = outcome.calls


def _judge(spec: _Spec, run, deadline: float) -> CodeReport:
    """Typed per-test verdicts from a job's raw result lines (the values judged here, outside the sandbox)."""
    by_id: dict[int, dict] = {}
    for line in run.lines:
        if isinstance(line.get("id"), int) and line["id"] not in by_id:
            by_id[line["id"]] = line
    if spec.mode == "io":
        results = tuple(_judge_io(i, by_id.get(i), spec.outputs[i]) for i in range(len(spec)))
    elif spec.mode == "calls":
        results = tuple(_judge_call(i, by_id.get(i), spec.expected[i], spec.wrapped_outputs) for i in range(len(spec)))
    else:
        judge = _AssertJudge(spec, by_id, deadline)
        results = tuple(judge.verdict(i, check) for i, check in enumerate(spec.checks))
    score = sum(r.passed for r in results) / len(results)
    return CodeReport(score, results, run.status, run.wall_s)


def python_code(
    completion: str,
    tests: dict | str,
    *,
    all_or_nothing: bool = False,
    limits: Limits | None = None,
    sandbox: str | None = None,
    **fields: Any,
) -> float:
    """Fraction of ``tests`` the completion's last ```python block passes (sandboxed).

    ``fields``: the data row's other fields, of which python_code reads ``entry_point``,
    ``test_setup_code``, ``test_imports``, ``fn_name`` and ``metadata`` (see
    :mod:`rlvr.verifiers.code.formats`). With ``all_or_nothing`` the reward is 1.0 only when every
    test passes. Raises on a malformed spec or a missing sandbox (see :func:`run_python_tests`)
    rather than return a silent 0.
    """
    report = run_python_tests(completion, tests, limits=limits, sandbox=sandbox, fields=fields)
    if all_or_nothing:
        return 1.0 if report.score == 1.0 else 0.0
    return report.score


def python_code_all_or_nothing(completion: str, tests: dict | str, **fields: Any) -> float:
    """:func:`python_code` that pays only when every test passes."""
    return python_code(completion, tests, all_or_nothing=True, **fields)


def python_code_batched(prompts: list, completions: list[str], answer: list[str], **columns: Any) -> list[float]:
    """:func:`python_code` for a whole batch (TRL's batched signature; the tests are each row's
    answer, the row fields python_code reads come from ``columns``) through
    `run_python_tests_batch`: a repeated (program, tests) pair runs and is judged once, programs
    of different problems one after another in shared jails, two jails at a time, so a training
    process with reward.workers = 0 still verifies on both cores."""
    rows = [{name: columns[name][i] for name in ROW_FIELDS if isinstance(columns.get(name), list)} for i in range(len(completions))]
    for row, prompt in zip(rows, prompts):  # the prompt shows the helpers a check may call (HumanEval/32, 38, 50)
        row["prompt"] = _prompt_text(prompt)
    return [report.score for report in run_python_tests_batch(list(completions), list(answer), fields=rows)]


def _prompt_text(prompt: Any) -> str | None:
    """A row's prompt as text: the text itself, or its chat turns' contents, one after another."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return "\n".join(m["content"] for m in prompt if isinstance(m, dict) and isinstance(m.get("content"), str))
    return None


def check_tests(tests: dict | str) -> None:
    """The data check: ValueError naming what is wrong with a gold tests spec. It sees the answer
    alone, so a spec that needs a row field (HumanEval's entry_point) is checked in everything
    else here and for that field when scored (an error naming the field, never a 0)."""
    try:
        parse_tests(tests, need_fields=False)
    except ValueError as err:
        raise ValueError(f"is not a python_code tests spec: {err}") from None


def sandbox_preflight() -> None:
    """Run one known-good program through the sandbox before any work starts: without bubblewrap
    (or with a broken one) a run would otherwise load its model, train and only then find every
    reward missing. Raises :class:`~rlvr.verifiers.code.sandbox.SandboxUnavailable` with the reason."""
    report = run_python_tests("```python\ndef one():\n    return 1\n```", {"asserts": ["assert one() == 1"]})
    if report.score != 1.0:
        raise SandboxUnavailable(f"the code sandbox did not pass a known-good program ({report.status}: {report.results[0].detail})")


# What the verifiers declare (rlvr.verifiers.contract). The sandbox enforces the job's own time
# limit, so a pool waits for it; an item that still times out there scores 0 (the program's
# fault), not missing. Test code of several rounds takes a job per round (at most MAX_ROUNDS).
for _fn in (python_code, python_code_all_or_nothing, python_code_batched):
    _fn.time_limit_s = Limits().total_s  # type: ignore[attr-defined]
    _fn.timeout_score = 0.0  # type: ignore[attr-defined]
    _fn.check_answer = check_tests  # type: ignore[attr-defined]
    _fn.preflight = sandbox_preflight  # type: ignore[attr-defined]
    _fn.warm_up = warm_up  # type: ignore[attr-defined]  (each pool worker walks /usr before its first item)


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
    if not same_output(line["stdout"], expected):
        return TestResult(i, False, "wrong output")
    return TestResult(i, True, "ok")


def _judge_call(i: int, line: dict | None, expected: Any, wrapped: bool) -> TestResult:
    if line is None:
        return TestResult(i, False, "no result")
    if "value" not in line:
        return TestResult(i, False, str(line.get("error", "no value"))[:100])
    try:
        result = decode_value(line["value"])
        passed = same_result(result, expected, wrapped)
    except JudgeError as err:
        return TestResult(i, False, str(err))
    except Exception as err:  # a comparison the values do not support fails the test, as in Python
        return TestResult(i, False, type(err).__name__)
    return TestResult(i, passed, "ok" if passed else "wrong result")


class _AssertJudge:
    """Verdicts on assert tests from the probes' reported values (decoded once each)."""

    def __init__(self, spec: _Spec, by_id: dict[int, dict], deadline: float) -> None:
        self.spec, self.by_id, self.deadline = spec, by_id, deadline
        self.values: dict[int, Any] = {}

    def probe(self, index: int) -> Any:
        if index not in self.values:
            line = self.by_id.get(index)
            try:
                if line is None:
                    raise ProbeFailed("no result")
                if "value" not in line:
                    raise ProbeFailed(str(line.get("error", "no value"))[:100])
                self.values[index] = decode_value(line["value"])
            except JudgeError as err:
                self.values[index] = err
        value = self.values[index]
        if isinstance(value, JudgeError):
            raise value
        return value

    def verdict(self, i: int, check: CompiledAssert) -> TestResult:
        if time.monotonic() > self.deadline:
            return TestResult(i, False, "Timeout")
        try:
            passed = evaluate(check, self.spec.names, self.probe, self.deadline)
        except JudgeError as err:
            return TestResult(i, False, str(err))
        except Exception as err:  # e.g. "<" between str and int: the test fails, as in Python
            return TestResult(i, False, type(err).__name__)
        return TestResult(i, passed, "ok" if passed else "assertion failed")
