"""Reward for Python programs: run the completion's last ```python block on tests, sandboxed.

``tests`` is a dict or its JSON text (a data file may hold either: a JSON object in the answer
field reaches the verifier as its JSON text):

* ``{"asserts": ["assert f(2) == 4", ...], "setup": "import math"}``: each entry is
  one ``assert`` statement calling the program's functions; ``setup`` runs after the
  program (put helpers there, never expected answers);
* ``{"io": [{"stdin": "1 2\\n", "stdout": "3\\n"}, ...]}``: the program runs as
  ``__main__`` per test; it passes when it exits 0 and its stdout has the same lines
  as the expected output (trailing whitespace of lines and of the output aside).

Judged outside the sandbox (:mod:`rlvr.verifiers.sandbox` runs the code,
:mod:`rlvr.verifiers.judge` judges): only the calls into the program (``f(2)`` in
``assert abs(f(2) - 4.0) < 1e-9``) run in the sandbox; their values come back as plain
data (built-in types; a subclass such as an always-equal ``int`` comes back as its plain
base value, and any other object is not data) and
the rest of the assert, expected value, ``abs``, ``-`` and ``<`` included, is evaluated
here with the real built-ins. The program never sees an expected value and cannot
shadow a function the test judges with, so searching the stack or ``gc``, patching the
test machinery or forging the report cannot make a pass; a test passes only on results
for its own probes, so exiting early fails every test left. An assert the judge cannot
evaluate safely is refused when the tests are loaded (ValueError naming the test).

>>> tests = {"asserts": ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]}
>>> python_code("```python\\ndef add(a, b):\\n    return a + b\\n```", tests)
1.0
"""

from __future__ import annotations

import functools
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from rlvr.verifiers.judge import CompiledAssert, JudgeError, ProbeFailed, compile_assert, decode_value, evaluate, host_names
from rlvr.verifiers.sandbox import Limits, SandboxUnavailable, run_job
from rlvr.verifiers.served import MAX_JOBS_PER_SANDBOX, can_serve, plan_servers, run_jobs_served

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
    mode: str
    checks: tuple[CompiledAssert, ...] = ()
    probes: tuple[str, ...] = ()
    names: dict[str, Any] = field(default_factory=dict, compare=False)  # what asserts resolve on the host
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
    names = host_names(spec.get("setup", ""))
    checks = tuple(compile_assert(k, source, names, probes) for k, source in enumerate(spec["asserts"]))
    return _Spec("asserts", checks=checks, probes=tuple(probes), setup=spec.get("setup", ""), names=names)


def run_python_tests(
    completion: str, tests: dict | str, *, limits: Limits | None = None, sandbox: str | None = None
) -> CodeReport:
    """Run the completion's program on ``tests`` and return typed per-test verdicts.

    Raises ValueError for a malformed ``tests`` spec and
    :class:`~rlvr.verifiers.sandbox.SandboxUnavailable` when code cannot be run safely.
    """
    limits = limits or Limits()
    spec, job = _job_for(completion, tests, limits)
    if job is None:
        return _not_run(spec, completion, limits)
    deadline = time.monotonic() + limits.total_s  # judging here counts against the job's limit
    return _judge(spec, run_job(job, limits, sandbox), deadline)


def run_python_tests_batch(
    completions: list[str], tests: list[dict | str], *, limits: Limits | None = None, sandbox: str | None = None,
    sandboxes: int = 2,
) -> list[CodeReport]:
    """`run_python_tests` for many completions, each program's report the one it gets alone,
    `sandboxes` sandboxes at a time (threads: the work is in the sandbox processes).

    A program that occurs several times for the same tests (G samples of one prompt often agree)
    runs once and every copy gets its verdict; one that draws random numbers gets one draw for
    all its copies. Programs for different problems share a sandbox, one after another, each
    started from a process that never held another program, with the jail cleared between them
    (:mod:`rlvr.verifiers.served`); two programs for the same tests never share one, so nothing a
    program could learn from an earlier one is a sibling's answer to its own problem."""
    limits = limits or Limits()
    prepared = [_job_for(c, t, limits) for c, t in zip(completions, tests, strict=True)]
    item_keys = [None if job is None else (_problem_key(t), json.dumps(job, sort_keys=True)) for (_, job), t in zip(prepared, tests)]
    distinct = {key: job for key, (_, job) in zip(item_keys, prepared) if key is not None}
    keys = list(distinct)
    workers, serve = max(1, sandboxes), can_serve(limits, sandbox)
    if serve:  # at least one jail per worker when there are enough programs
        groups = plan_servers([problem for problem, _ in keys], cap=max(1, min(MAX_JOBS_PER_SANDBOX, -(-len(keys) // workers))))
    else:  # no bwrap or per-job cgroups: a sandbox per program, `sandboxes` at a time
        groups = [[i] for i in range(len(keys))]

    def execute(group: list[int]) -> list:
        jobs = [distinct[keys[i]] for i in group]
        return run_jobs_served(jobs, limits, sandbox) if serve else [run_job(jobs[0], limits, sandbox)]

    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        runs = {keys[i]: run for group, group_runs in zip(groups, pool.map(execute, groups)) for i, run in zip(group, group_runs)}
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)  # a missing sandbox: do not start the rest of the batch
        raise
    finally:
        pool.shutdown(wait=True)
    reports = []
    for (spec, _), completion, key in zip(prepared, completions, item_keys):
        if key is None:
            reports.append(_not_run(spec, completion, limits))
        else:
            run = runs[key]
            # Judging counts against the job's limit: each copy gets what the run left of it.
            reports.append(_judge(spec, run, time.monotonic() + limits.total_s - run.wall_s))
    return reports


def _problem_key(tests: dict | str) -> str:
    """One text per tests spec however it is written (a dict, its JSON text, other spacing or key
    order): programs with the same key are for the same problem and never share a sandbox."""
    return json.dumps(json.loads(tests) if isinstance(tests, str) else tests, sort_keys=True)


def _job_for(completion: str, tests: dict | str, limits: Limits) -> tuple[_Spec, dict | None]:
    """The parsed tests and the runner job for the completion's program (None: nothing to run)."""
    spec = parse_tests(tests)
    program = extract_program(completion)
    if program is None or len(program) > limits.source_chars:
        return spec, None
    if spec.mode == "io":
        return spec, {"mode": "io", "program": program, "inputs": list(spec.inputs)}
    return spec, {"mode": "asserts", "program": program, "setup": spec.setup, "probes": list(spec.probes)}


def _not_run(spec: _Spec, completion: str, limits: Limits) -> CodeReport:
    detail = "no ```python block" if extract_program(completion) is None else f"program longer than {limits.source_chars} characters"
    return CodeReport(0.0, tuple(TestResult(i, False, detail) for i in range(len(spec))), "not_run")


def _judge(spec: _Spec, run, deadline: float) -> CodeReport:
    """Typed per-test verdicts from a job's raw result lines (the values judged here, outside the sandbox)."""
    by_id: dict[int, dict] = {}
    for line in run.lines:
        if isinstance(line.get("id"), int) and line["id"] not in by_id:
            by_id[line["id"]] = line
    if spec.mode == "io":
        results = tuple(_judge_io(i, by_id.get(i), spec.outputs[i]) for i in range(len(spec)))
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


def python_code_batched(prompts: list, completions: list[str], answer: list[str], **_: Any) -> list[float]:
    """:func:`python_code` for a whole batch (TRL's batched signature; the tests are each row's
    answer) through `run_python_tests_batch`: repeats once, programs of different problems one after
    another in shared jails, two jails at a time, so a training process with reward.workers = 0
    still verifies on both cores."""
    return [report.score for report in run_python_tests_batch(list(completions), list(answer))]


def check_tests(tests: dict | str) -> None:
    """The data check: ValueError naming what is wrong with a gold tests spec."""
    try:
        parse_tests(tests)
    except ValueError as err:
        raise ValueError(f"is not a python_code tests spec: {err}") from None


def sandbox_preflight() -> None:
    """Run one known-good program through the sandbox before any work starts: without bubblewrap
    (or with a broken one) a run would otherwise load its model, train and only then find every
    reward missing. Raises :class:`~rlvr.verifiers.sandbox.SandboxUnavailable` with the reason."""
    report = run_python_tests("```python\ndef one():\n    return 1\n```", {"asserts": ["assert one() == 1"]})
    if report.score != 1.0:
        raise SandboxUnavailable(f"the code sandbox did not pass a known-good program ({report.status}: {report.results[0].detail})")


# What the verifiers declare (rlvr.verifiers.contract). The sandbox enforces the job's own time
# limit, so a pool waits for it; an item that still times out there scores 0 (the program's
# fault), not missing.
for _fn in (python_code, python_code_all_or_nothing, python_code_batched):
    _fn.time_limit_s = Limits().total_s  # type: ignore[attr-defined]
    _fn.timeout_score = 0.0  # type: ignore[attr-defined]
    _fn.check_answer = check_tests  # type: ignore[attr-defined]
    _fn.preflight = sandbox_preflight  # type: ignore[attr-defined]


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
