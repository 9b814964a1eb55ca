"""python_code's judge: only calls into the program run in the sandbox; every expected value,
reference function and comparison is evaluated on the host, with bounded work; whatever the
sandbox sends back can fail a test but never raise, stall or flood the caller.

Each attack here is written by the project against the classes the second security review
found (issue 19); honest MBPP/HumanEval-style tests must still score right.
"""

from __future__ import annotations

import json
import os
import shutil
import textwrap
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlvr.verifiers.code as code_module
from rlvr.verifiers.code import parse_tests, run_python_tests
from rlvr.verifiers.code.judge import MAX_SAME_HASH, JudgeError, compile_assert, decode_value, evaluate, host_names
from rlvr.verifiers.code.sandbox import Limits, SandboxRun, parse_result_line

# "Fails fast" is asserted as the refusal; how fast, in CPU seconds, is bench/time_bounds.py's to measure.
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("CI"), reason="bubblewrap missing")
FAST = Limits(test_s=1.0, total_s=8.0)


def fenced(source: str) -> str:
    return "```python\n" + textwrap.dedent(source).strip("\n") + "\n```\n"


# ------------------------------------------------------------------ attacks on the judge

JUDGE_ATTACKS = {
    # The expected 2.0 and `abs` used to sit inside the probe, in the program's namespace.
    "shadow abs in a tolerance assert": (
        "def abs(x):\n    return 0\ndef mean(xs):\n    return 0",
        ["assert abs(mean([1, 2, 3]) - 2.0) < 1e-9"],
    ),
    "patch builtins.abs for the whole process": (
        "import builtins\nbuiltins.abs = lambda x: 0\ndef mean(xs):\n    return 0",
        ["assert abs(mean([1, 2, 3]) - 2.0) < 1e-9"],
    ),
    "shadow math.isclose": (
        "import math\nmath.isclose = lambda *a, **k: True\ndef mean(xs):\n    return 0",
        ["assert math.isclose(mean([1.0, 3.0]), 2.0)"],
    ),
    "read expected expressions from the caller's code": (
        """
        import sys
        def f(n):
            found = []
            frame = sys._getframe(1)
            while frame is not None:
                found += [c for c in frame.f_code.co_consts if isinstance(c, (int, float)) and not isinstance(c, bool)]
                frame = frame.f_back
            return [0] * 5 if n == 2 else (max(found) if found else 0)
        """,
        ["assert f(1) == 10**6 + 7", "assert f(2) == [0] * 6", "assert f(3) == float('inf')"],
    ),
    "shadow set on both sides (MBPP)": (
        "set = lambda *a: 1\ndef similar(a, b):\n    return [4, 6]",
        ["assert set(similar((3, 4, 5, 6), (5, 7, 4, 10))) == set((4, 5))"],
    ),
    "always-equal object below the top of the assert": (
        """
        class Anything:
            def __eq__(self, other):
                return True
            def __ne__(self, other):
                return False
            def __bool__(self):
                return True
            __hash__ = object.__hash__
        def f(x):
            return Anything()
        """,
        [
            "assert f(1) == 2 and f(2) == 3",
            "assert not f(1) != 2",
            "assert (f(1) == 2) is True",
            "assert all([f(1) == 2, f(2) == 3])",
            "assert f(1) in [2]",
            "assert f(1)",
        ],
    ),
    "patch math.isclose before the setup imports it": (
        "import math\nmath.isclose = lambda *a, **k: True\ndef f(x):\n    return 0",
        ["assert isclose(f(1), 2.0)"],  # the setup's `from math import isclose` means the host's
    ),
}


@needs_bwrap
@pytest.mark.parametrize("name", sorted(JUDGE_ATTACKS))
def test_judge_attacks_score_zero(name: str) -> None:
    program, asserts = JUDGE_ATTACKS[name]
    tests = {"asserts": asserts, "setup": "from math import isclose"}
    report = run_python_tests(fenced(program), tests, limits=FAST)
    assert report.score == 0.0, [r.detail for r in report.results]


@pytest.mark.parametrize(
    ("asserts", "secret"),
    [
        (["assert abs(mean([1, 2, 3]) - 2.0) < 1e-9"], "2.0"),
        (["assert f(1) == 10**6 + 7", "assert f(2) == [0] * 5", "assert f(3) == float('inf')"], "10"),
        (["assert set(f((3, 4))) == set((4, 5))"], "5"),
        (["assert math.isclose(g(1), 0.125, rel_tol=1e-6)"], "0.125"),
        (["assert sorted(h(3), key=lambda t: -t) == [3, 2, 1]"], "lambda"),
    ],
)
def test_probes_carry_no_expected_value_nor_reference_function(asserts: list[str], secret: str) -> None:
    spec = parse_tests({"asserts": asserts})
    sent = json.dumps(spec.probes)
    assert secret not in sent
    for name in ("abs", "set", "math", "isclose", "sorted", "float"):
        assert name not in sent, sent


# ------------------------------------------------------------------ honest tests still pass

HONEST = [
    ("def mean(xs):\n    return sum(xs) / len(xs)", "assert abs(mean([1, 2, 3]) - 2.0) < 1e-9"),
    ("def mean(xs):\n    return sum(xs) / len(xs)", "assert math.isclose(mean([0.1, 0.2]), 0.15)"),
    ("def mean(xs):\n    return sum(xs) / len(xs)", "assert isclose(mean([0.1, 0.2]), 0.15, rel_tol=1e-9)"),
    ("def f(x):\n    return 10**6 + x", "assert f(7) == 10**6 + 7"),
    ("def f(n):\n    return [0] * n", "assert f(5) == [0] * 5"),
    ("def f():\n    return float('inf')", "assert f() == float('inf')"),
    ("def similar(a, b):\n    return tuple(set(a) & set(b))", "assert set(similar((3, 4, 5, 6), (5, 7, 4, 10))) == set((4, 5))"),
    ("def f(x):\n    return x + 1\ndef g(x):\n    return 1 + x", "assert f(3) == g(3)"),
    ("def f(x):\n    return [x, x]", "assert f(1) == [1, 1] and len(f(2)) == 2 and not f(0) == [1]"),
    ("def f(x):\n    return [x, x - 1]", "assert sorted(f(3), key=lambda t: -t) == [3, 2]"),
    ("def f(x):\n    return [x, x]", "assert {k: v for k, v in enumerate(f(4))} == {0: 4, 1: 4}"),
    ("def f(x):\n    return 'Ab'", "assert f(1).lower() == 'ab' and f(1).upper().startswith('A')"),
    ("def f(x):\n    return 3", "assert type(f(1)) is int and isinstance(f(1), (int, float))"),
    ("def f(x):\n    return None", "assert f(1) is None"),
    ("def is_prime(n):\n    return n in (2, 3, 5, 7)", "assert is_prime(7) and not is_prime(8)"),
    ("def f(xs):\n    return xs[::-1]", "assert all(a == b for a, b in zip(f([1, 2, 3]), [3, 2, 1]))"),
    ("class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]", "assert Solution().twoSum([2, 7, 11], 9) == [0, 1]"),
    ("def has_close_elements(xs, t):\n    return any(abs(a - b) < t for a in xs for b in xs if a is not b)",
     "assert candidate([1.0, 2.0, 3.9, 4.0], 0.3) == True"),
    ("def depth(tree):\n    return 0 if tree is None else 1 + max(depth(tree.left), depth(tree.right))",
     "assert depth(build([3, 9, 20])) == 2"),
    ("def f(x):\n    return {'a': 1.5, 'b': (2, 3)}", "assert f(0)['b'][1] == 3 and round(f(0)['a'] * 2) == 3"),
    ("def f(x):\n    return 2**200", "assert f(0) % 7 == 2**200 % 7 and f(0) // 2**199 == 2"),
]
HONEST_SETUP = """
from math import isclose
import math
candidate = has_close_elements if 'has_close_elements' in globals() else None
class Node:
    def __init__(self, value, left=None, right=None):
        self.value, self.left, self.right = value, left, right
def build(values):
    return Node(values[0], Node(values[1]), Node(values[2])) if values else None
"""


@needs_bwrap
@pytest.mark.parametrize(("program", "test"), HONEST, ids=[t for _, t in HONEST])
def test_honest_tests_still_pass(program: str, test: str) -> None:
    report = run_python_tests(fenced(program), {"asserts": [test], "setup": HONEST_SETUP}, limits=FAST)
    assert report.score == 1.0, report.results


@needs_bwrap
def test_wrong_programs_still_fail_the_honest_tests() -> None:
    wrong = fenced("def mean(xs):\n    return 2.1\ndef f(x):\n    return [x]\ndef similar(a, b):\n    return (4, 6)")
    tests = {"asserts": ["assert abs(mean([1, 2, 3]) - 2.0) < 1e-9", "assert f(5) == [0] * 5",
                         "assert set(similar((3, 4, 5, 6), (5, 7, 4, 10))) == set((4, 5))"]}
    report = run_python_tests(wrong, tests, limits=FAST)
    assert [r.detail for r in report.results] == ["assertion failed"] * 3


# ------------------------------------------------------------------ refused when loaded


@pytest.mark.parametrize(
    ("test", "reason"),
    [
        ("assert all(f(x) == y for x, y in [(1, 2)])", "comprehension or lambda variable 'x'"),
        ("assert sorted([3, 1], key=lambda t: f(t)) == [1, 3]", "lambda variable 't'"),
        ("assert f'{f(1)}' == '1'", "f-string"),
        ("assert (y := f(1)) == 1", "assignment expression"),
        ("assert math.nope(f(1))", "math.nope is not provided"),
        ("assert f(1) == 1 if True else 0 ; x = 1", "exactly one assert"),
        ("assert sorted([3, 1]) == [1, 3]", "calls nothing the program defines"),
        ("assert sum([1, 2, 3]) == 6", "bind it in setup"),  # a program's own `sum` is not the one tested
        ("assert " + "-" * 100_000 + "f(1) == 1", "nested too deeply"),
        ("assert f(1) == " + "+".join(["1"] * 3000), "nested too deeply"),
    ],
)
def test_asserts_the_judge_cannot_evaluate_are_refused_with_the_test_number(test: str, reason: str) -> None:
    with pytest.raises(ValueError, match="assert 1") as err:
        parse_tests({"asserts": ["assert f(0) == 0", test]})
    assert reason in str(err.value)


def test_checks_in_setup_are_refused() -> None:
    with pytest.raises(ValueError, match="setup line 2: an assert in setup"):
        parse_tests({"asserts": ["assert f(1) == 1"], "setup": "def check(x):\n    assert x == 1"})
    with pytest.raises(ValueError, match="math.nope"):
        parse_tests({"asserts": ["assert f(1) == 1"], "setup": "from math import nope"})


def test_values_computed_with_other_setup_imports_are_refused() -> None:
    # The program can patch a module the judge does not provide before the setup imports it: an
    # expected value computed with it would be the program's to choose. Passing such a value *into*
    # the program is fine (an input). Modules the judge provides (statistics, fractions) are the host's.
    with pytest.raises(ValueError, match="'bisect' is imported by the setup"):
        parse_tests({"asserts": ["assert pos([1, 2, 3]) == bisect.bisect([1, 2, 3], 2)"], "setup": "import bisect"})
    with pytest.raises(ValueError, match="'insort' is imported by the setup"):
        parse_tests({"asserts": ["assert half(1) == insort([], 1)"], "setup": "from bisect import insort"})
    spec = parse_tests({"asserts": ["assert total(bisect([1], 1)) == 0.5"], "setup": "from bisect import bisect"})
    assert spec.probes == ("total(bisect([1], 1))",)
    spec = parse_tests({"asserts": ["assert half(1) == Fraction(1, 2) == statistics.mean([0, 1])"], "setup": "from fractions import Fraction"})
    assert spec.probes == ("half(1)",)


@needs_bwrap
def test_subclasses_of_data_come_back_as_their_base_values() -> None:
    # A Counter or defaultdict compares as the dict it is (as in plain Python); an int subclass
    # whose __eq__ says yes to everything comes back as the plain int and fails.
    program = fenced(
        """
        from collections import Counter, defaultdict
        class Int(int):
            def __eq__(self, other):
                return True
            __hash__ = int.__hash__
        def letters(s):
            return Counter(s)
        def tally(xs):
            d = defaultdict(int)
            for x in xs:
                d[x] += 1
            return d
        def add(a, b):
            return Int(0)
        """
    )
    tests = {"asserts": ["assert letters('aab') == {'a': 2, 'b': 1}", "assert tally([1, 1]) == {1: 2}", "assert add(2, 3) == 5"]}
    assert [r.detail for r in run_python_tests(program, tests, limits=FAST).results] == ["ok", "ok", "assertion failed"]


def test_setup_names_belong_to_the_sandbox_and_math_imports_to_the_host() -> None:
    names = host_names("from math import isclose as close\nimport math as m\ndef build(x):\n    return x")
    assert names["close"] is __import__("math").isclose and "set" in names
    probes: list[str] = []
    compile_assert(0, "assert close(sorted(f(build(1))), m.pi)", names, probes)
    assert probes == ["f(build(1))"]
    probes = []
    compile_assert(0, "assert build(1) == 1", names, probes)
    assert probes == ["build(1)"]  # the setup's own helper runs beside the program
    with pytest.raises(ValueError, match="setup binds 'sorted', a built-in name"):
        host_names("def sorted(x):\n    return x")


# ------------------------------------------------------------------ bounded work on the host


@pytest.mark.parametrize(
    "test",
    [
        "assert f() ** 10**9 == 1",
        "assert 'a' * f() * 10**9 == 'b'",
        "assert sum([[1]] * 1000, []) == [1]",
        "assert f() << 10**9 == 0",
        "assert round(5, -10**9) == 0",
        "assert len(list(range(10**12))) == 0",
        "assert ','.join([str(f())] * 10**6) == ''",
        "assert math.factorial(10**7) == 1",
        "assert math.prod(range(1, 10**5)) == 1",
        "assert set(k * (2**61 - 1) for k in range(10**5)) == {1}",
        "assert 'x'.center(10**9) == 'x'",
        "assert ('ab' * 1000).replace('', 'c' * 1000) == ''",
        "assert len([x for x in range(10**6) for y in range(10**6)]) == 0",
        "assert [[0] * 10**6] * 10**6 == [[0] * 10**6] * 10**6",
        "assert [a for a in [[0] * 10**6] for _ in range(3 * 10**5)] == []",
        "assert list(map(lambda _: [0] * 10**6, range(10**5))) == []",
        "assert str(['x' * 10**6] * 10**3) == ''",
        "assert type('X', (), {})() == 1",
        # found by a second review: C-level loops over aliased ranges, modular powers, set
        # builders over many colliding members, displays of large values
        "assert sum(map(len, map(list, [range(10**6)] * 2000))) == f(0)",
        "assert pow(3, 1 << 20000, (1 << 20000) - 1) == f(0)",
        "assert len(set().union(*[{k * (2**61 - 1) for k in range(32 * i, 32 * i + 32)} for i in range(1000)])) == f(0)",
        "assert len([" + "[0] * 10**6, " * 200 + "]) == f(0)",
        "assert len(list(map(list, [range(10**6)] * 20))) == f(0)",
    ],
)
def test_expensive_host_evaluation_fails_fast(test: str) -> None:
    names = host_names("")
    probes: list[str] = []
    # an assert must call into the program; the bomb comes first, so the probe is never read
    compiled = compile_assert(0, test if "f(" in test else test + " and f(0) == 3", names, probes)
    with pytest.raises(JudgeError):
        evaluate(compiled, names, lambda i: 3, deadline=time.monotonic() + 5)


def test_judging_time_counts_against_the_jobs_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    names = host_names("")
    compiled = compile_assert(0, "assert sum(x for x in range(10**5)) > f(0)", names, [])
    with pytest.raises(JudgeError, match="Timeout"):
        evaluate(compiled, names, lambda i: 0, deadline=time.monotonic() - 1)
    limits = Limits(total_s=0.2)

    def slow_job(job: dict, limits: Limits, sandbox: object) -> SandboxRun:
        time.sleep(0.3)  # the sandbox used the whole budget: nothing is left for judging
        return SandboxRun(lines=[{"id": 0, "value": ["i", "5"]}], wall_s=0.3)

    monkeypatch.setattr(code_module, "run_job", slow_job)
    report = run_python_tests(fenced("def add(a, b):\n    return a + b"), {"asserts": ["assert add(2, 3) == 5"]}, limits=limits)
    assert [r.detail for r in report.results] == ["Timeout"]


# ------------------------------------------------------------------ what comes back is untrusted


def colliding(n: int) -> list:
    return ["S", n] + [t for k in range(n) for t in ("i", format(k * (2**61 - 1), "x"))]


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        (colliding(5000), "colliding hashes"),
        (["d", 2000] + [t for k in range(2000) for t in ("i", format(k * (2**61 - 1), "x"), "N")], "colliding hashes"),
        (["l", 1] * 5000 + ["N"], "too deep"),
        (["i", "f" * 100_000], "integer too large"),
        (["l", 10**9], "malformed"),
        (["l", 3, "N"], "malformed"),
        (["N", "N"], "malformed"),
        (["S", 1, "l", 0], "malformed"),  # an unhashable member
        (["x"], "malformed"),
        ([["nested"]], "malformed"),
        ("N", "malformed"),
    ],
)
def test_forged_values_fail_without_raising_or_stalling(tokens: object, message: str) -> None:
    with pytest.raises(JudgeError, match=message):
        decode_value(tokens)


def test_honest_values_round_trip_through_the_flat_encoding() -> None:
    from rlvr.verifiers.code import _runner

    for value in [None, True, -2**300, 2.5, float("-inf"), 1 - 2j, "é\n", b"\x00", [1, (2, {3})], {"a": frozenset({1})},
                  {(1, 2): [None, {}]}, [[[[]]]], (), {k * (2**61 - 1) for k in range(MAX_SAME_HASH)}]:
        decoded = decode_value(json.loads(json.dumps(_runner._tag(value))))
        assert decoded == value and type(decoded) is type(value)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(["N", "T", "F", "i", "f", "c", "s", "b", "l", "t", "S", "z", "d"]),
                          st.integers(-3, 5), st.text(max_size=4)), max_size=30))
def test_any_token_soup_decodes_or_fails_cleanly(tokens: list) -> None:
    try:
        decode_value(tokens)
    except JudgeError:
        pass


@pytest.mark.parametrize(
    "line",
    [
        b'{"id": 0, "value": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b"[" * 10**6,
        b'{"id": 0, "value": [' + b"[]," * 300_000 + b"[]]}",
        b'{"id": 0, "value": [' + b"0," * 300_000 + b"0]}",
        b"\xff\xfe not json",
    ],
)
def test_forged_lines_are_dropped_not_decoded(line: bytes) -> None:
    assert parse_result_line(line) is None


def test_forged_results_score_zero_end_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    forged = [
        {"id": 0, "value": colliding(20_000)},
        {"id": 1, "value": ["l", 1] * 90 + ["i", "f" * 40_000]},
        {"id": 2, "value": ["T"], "extra": 1},  # a pass for a test whose value is not 5
        {"id": 3, "error": "x" * 10**6},
    ]
    monkeypatch.setattr(code_module, "run_job", lambda job, limits, sandbox: SandboxRun(lines=forged))
    tests = {"asserts": ["assert set(add(0, 0)) == {1}", "assert add(1, 1) == [2]", "assert add(2, 3) == 5", "assert add(1, 2) == 3"]}
    report = run_python_tests(fenced("def add(a, b):\n    return a + b"), tests)
    assert report.score == 0.0 and all(len(r.detail) <= 100 for r in report.results), report.results
