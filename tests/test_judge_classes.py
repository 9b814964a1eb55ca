"""python_code's judge, tested over whole classes (issue 33): THE rule that only values returned by
calls into the program cross the sandbox, as plain data, and everything else runs on the host.

* every public method and attribute of every built-in data type, called on a returned subclass
  instance whose method lies, cannot turn a wrong answer into a pass; the plain value passes
  where the host offers the method;
* every built-in name and every standard-library module name is the host's (works or is refused
  when the tests load), never a probe;
* every hash-building operation on returned colliding hashes fails fast;
* the values tests convert (generators, views, ranges, Fraction, Decimal, deque) arrive as data,
  data arguments round-trip, and ``exit()``/``quit()`` work.
"""

from __future__ import annotations

import builtins
import collections
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.verifiers.code import _runner, run_python_tests
from rlvr.verifiers.code.host_modules import HOST_MODULES
from rlvr.verifiers.code.judge import HOST_BUILTINS, JudgeError, compile_assert, evaluate, host_names
from rlvr.verifiers.code.methods import DATA_ATTRIBUTES, METHODS, MUTATING
from rlvr.verifiers.code.results import ReturnedIterator, decode_value, encode_value
from rlvr.verifiers.code.sandbox import Limits, run_job
from rlvr.verifiers.code.trusted import LANGUAGE_BUILTINS, REFUSED_BUILTINS

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("CI"), reason="bubblewrap missing")
FAST = Limits(test_s=1.0, total_s=20.0)


def fenced(source: str) -> str:
    return "```python\n" + textwrap.dedent(source).strip("\n") + "\n```\n"


# ------------------------------------------------------------------ methods of returned values

VALUES = {
    str: "Hello World 42\tx", bytes: b"Hello World 42\tx", list: [3, 1, 2, 1], tuple: (3, 1, 2, 1),
    dict: {"a": 1, "b": 2}, set: {1, 2, 3}, frozenset: frozenset({1, 2, 3}), int: 42, float: 2.5, complex: 1 + 2j,
}
TEXT_ARGS = {
    "center": (20,), "count": ("l",), "endswith": ("x",), "expandtabs": (4,), "find": ("o",), "format_map": ({},),
    "index": ("o",), "join": (["a", "b"],), "ljust": (20,), "lstrip": ("H",), "maketrans": ("a", "b"),
    "partition": (" ",), "removeprefix": ("He",), "removesuffix": ("x",), "replace": ("l", "L"), "rfind": ("o",),
    "rindex": ("o",), "rjust": (20,), "rpartition": (" ",), "rstrip": ("x",), "startswith": ("He",), "strip": ("Hx",),
    "translate": ({72: "J"},), "zfill": (20,), "fromhex": ("61 62",),
}
ARGS = {
    list: {"count": (1,), "index": (2,)}, tuple: {"count": (1,), "index": (2,)},
    dict: {"fromkeys": (["x"],), "get": ("a",)},
    int: {"from_bytes": (b"\x01", "big"), "to_bytes": (2, "big")}, float: {"fromhex": ("0x1p1",)},
    **{kind: {"difference": ([1],), "intersection": ([1, 5],), "isdisjoint": ([5],), "issubset": ([1, 2, 3, 4],),
              "issuperset": ([1],), "symmetric_difference": ([1, 5],), "union": ([5],)} for kind in (set, frozenset)},
}


def call_args(kind: type, name: str) -> tuple:
    if kind in (str, bytes):
        args = TEXT_ARGS.get(name, ())
        if kind is bytes and name == "translate":
            return (bytes.maketrans(b"H", b"J"),)
        if kind is bytes and name != "fromhex":
            return tuple(a.encode() if isinstance(a, str) else [x.encode() for x in a] if isinstance(a, list) else a for a in args)
        return args
    return ARGS.get(kind, {}).get(name, ())


def public_names(kind: type) -> list[str]:
    return sorted(n for n in dir(kind) if not n.startswith("_"))


def test_the_host_offers_every_non_mutating_method_of_the_data_types() -> None:
    for kind in VALUES:
        for name in public_names(kind):
            offered = name in METHODS[kind] or name in DATA_ATTRIBUTES.get(kind, ())
            assert offered != (name in MUTATING.get(kind, ())), (kind, name)


def lying_program(kind: type) -> str:
    """f() returns a subclass of ``kind`` whose every public method and attribute says 'LIE'."""
    lines = [f"class Liar({kind.__name__}):"]
    for name in public_names(kind):
        if callable(getattr(kind, name)):
            lines.append(f"    def {name}(self, *a, **k):\n        return 'LIE'")
        else:
            lines.append(f"    {name} = property(lambda self: 'LIE')")
    lines.append(f"    __hash__ = {kind.__name__}.__hash__")
    lines.append(f"def f():\n    return Liar({VALUES[kind]!r})")
    return "\n".join(lines)


def method_assert(kind: type, name: str, expected: str) -> str:
    if not callable(getattr(kind, name)):
        return f"assert f().{name} == {expected}"
    args = ", ".join(repr(a) for a in call_args(kind, name))
    return f"assert f().{name}({args}) == {expected}"


@needs_bwrap
@pytest.mark.parametrize("kind", list(VALUES), ids=lambda k: k.__name__)
def test_a_returned_subclass_whose_methods_lie_never_passes(kind: type) -> None:
    asserts = [method_assert(kind, name, "'LIE'") for name in public_names(kind)]
    report = run_python_tests(fenced(lying_program(kind)), {"asserts": asserts}, limits=FAST)
    assert report.score == 0.0, [(a, r.detail) for a, r in zip(asserts, report.results) if r.passed]


def expected_source(value: object) -> str:
    if isinstance(value, type({}.keys())) or isinstance(value, type({}.items())) or isinstance(value, type({}.values())):
        raise TypeError
    return repr(value)


@needs_bwrap
@pytest.mark.parametrize("kind", list(VALUES), ids=lambda k: k.__name__)
def test_the_plain_value_passes_every_method_the_host_offers_and_mutating_ones_fail(kind: type) -> None:
    plain = VALUES[kind]
    asserts, offered = [], []
    for name in public_names(kind):
        if name in MUTATING.get(kind, ()):
            asserts.append(f"assert f().{name}() is None")  # refused before any argument is looked at
            offered.append(False)
            continue
        attribute = getattr(plain, name)
        expected = attribute(*call_args(kind, name)) if callable(attribute) else attribute
        if isinstance(expected, (type({}.keys()), type({}.items()), type({}.values()))):
            test = f"assert list(f().{name}()) == {list(expected)!r}"
        else:
            test = method_assert(kind, name, repr(expected))
        asserts.append(test)
        offered.append(True)
    program = f"def f():\n    return {plain!r}"
    report = run_python_tests(fenced(program), {"asserts": asserts}, limits=FAST)
    for test, ok, result in zip(asserts, offered, report.results):
        assert result.passed == ok, (test, result.detail)
        if not ok:
            assert "changes its receiver" in result.detail


def test_the_cut_keeps_data_links_on_the_host() -> None:
    names = host_names("")
    for test, probe in [
        ("assert slug('a').startswith('hello')", "slug('a')"),
        ("assert primes(10).issubset({2, 3, 5, 7})", "primes(10)"),
        ("assert half(4).is_integer()", "half(4)"),
        ("assert Solution().two_sum([2, 7], 9)[0] == 0", "Solution().two_sum([2, 7], 9)"),
        ("assert root(1).val == 1", "root(1).val"),  # a program attribute: the sandbox's
        ("assert f(1).__len__() == 3", "f(1)"),  # dunders of data too: refused on the host
        ("assert CONST[0].real == 1", "CONST"),
    ]:
        probes: list = []
        compile_assert(0, test, names, probes)
        assert probes == [probe], test
    setup_names = host_names("string = 'abc'\ndef random(n):\n    return [n]")
    for test, probe in [("assert string.upper() == f(0)", ["string", "f(0)"]), ("assert random(3)[0] == 3", ["random(3)"]),
                        ("assert token(8).isalnum()", ["token(8)"])]:
        probes = []
        compile_assert(0, test, setup_names, probes)
        assert probes == probe, test  # names the setup binds, and calls, are the program's even when a module has the name


# ------------------------------------------------------------------ names


def test_every_builtin_name_is_provided_or_refused() -> None:
    fresh = subprocess.run([sys.executable, "-I", "-c", "import builtins; print(' '.join(dir(builtins)))"],
                           capture_output=True, text=True, check=True).stdout.split()
    assert set(fresh) == LANGUAGE_BUILTINS  # what a fresh interpreter holds, whatever this process put there since
    for name in LANGUAGE_BUILTINS:
        assert (name in HOST_BUILTINS) != (name in REFUSED_BUILTINS) or name in ("True", "False", "None"), name


def test_names_put_into_builtins_at_run_time_change_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # gettext.install and the interactive interpreter put `_` (gettext also `ngettext`, ...) into
    # builtins: what an assert or a setup means must not depend on what the process ran before.
    import gettext

    translations = gettext.NullTranslations()
    monkeypatch.setattr(builtins, "_", translations.gettext, raising=False)
    monkeypatch.setattr(builtins, "ngettext", translations.ngettext, raising=False)
    import importlib

    from rlvr.verifiers.code import trusted

    monkeypatch.setattr(builtins, "print", lambda *args: None)  # a library that replaces a built-in
    assert trusted.language_builtins() == LANGUAGE_BUILTINS and {"_", "ngettext"}.isdisjoint(LANGUAGE_BUILTINS)
    names = host_names("for _ in range(3):\n    pass\ndef ngettext(n):\n    return [n]")  # a setup may bind them
    probes: list = []
    compile_assert(0, "assert ngettext(f(0)) == [1]", names, probes)
    assert probes == ["ngettext(f(0))"]  # the setup's helper, beside the program, as any setup name
    assert importlib.import_module("rlvr.verifiers.code.judge").LANGUAGE_BUILTINS is LANGUAGE_BUILTINS


@pytest.mark.parametrize("name", sorted(LANGUAGE_BUILTINS - {"True", "False", "None"}))
def test_a_builtin_name_in_an_assert_is_never_a_probe(name: str) -> None:
    names = host_names("")
    for test in (f"assert f(0) == {name}", f"assert f(0) == {name}(1)"):
        probes: list = []
        if name in REFUSED_BUILTINS:
            with pytest.raises(ValueError, match=f"{name!r} is a built-in the judge does not provide"):
                compile_assert(0, test, names, probes)
        else:
            compile_assert(0, test, names, probes)
            assert probes == ["f(0)"]


STDLIB = sorted(n for n in sys.stdlib_module_names if not n.startswith("_"))


@pytest.mark.parametrize("module", STDLIB)
def test_a_stdlib_module_used_in_an_assert_is_provided_or_refused(module: str) -> None:
    names = host_names("")
    member = next(iter(HOST_MODULES[module].members)) if module in HOST_MODULES else "anything"
    probes: list = []
    test = f"assert f(0) == {module}.{member}"
    if module in HOST_MODULES:
        compile_assert(0, test, names, probes)
        assert probes == ["f(0)"]
        with pytest.raises(ValueError, match="is not provided"):
            compile_assert(0, f"assert f(0) == {module}.no_such_member", names, [])
    else:
        with pytest.raises(ValueError, match=f"module {module!r}, which the judge does not provide"):
            compile_assert(0, test, names, probes)


@needs_bwrap
def test_names_the_program_defines_do_not_change_the_hosts() -> None:
    program = fenced(
        """
        import statistics
        statistics.mean = lambda xs: 99
        def format(*a):
            return '0'
        def hash(x):
            return 0
        def next(*a):
            return 0
        def iter(x):
            return [0]
        def getattr(*a):
            return 0
        def to_bin(n):
            return '0'
        def avg(xs):
            return 99
        def first(xs):
            return 0
        """
    )
    tests = ["assert to_bin(5) == format(5, 'b')", "assert hash(to_bin(5)) == hash('101')", "assert first([1]) == next(iter([1]))",
             "assert avg([1, 2, 3]) == statistics.mean([1, 2, 3])", "assert getattr(avg([1]), 'real') == 2"]
    assert run_python_tests(program, {"asserts": tests}, limits=FAST).score == 0.0
    honest = fenced("def to_bin(n):\n    return format(n, 'b')\ndef avg(xs):\n    return sum(xs) / len(xs)\n"
                    "def first(xs):\n    return xs[0]")
    tests[-1] = "assert getattr(avg([1, 3]), 'real') == 2"
    assert run_python_tests(honest, {"asserts": tests}, limits=FAST).score == 1.0


def test_provided_modules_work_on_the_host() -> None:
    names = host_names("from collections import Counter\nimport random")
    cases = [
        "assert f(0) == statistics.mean([1, 2, 3]) - 2",
        "assert f(0) == fractions.Fraction(0, 3)",
        "assert f(0) == decimal.Decimal('0.0')",
        "assert Counter('aab')['a'] == 2 + f(0)",
        "assert collections.deque([1, 2])[0] == 1 + f(0)",
        "assert string.digits[f(0)] == '0'",
        "assert random.Random(1).randint(1, 6) == random.Random(1).randint(1, 6) + f(0)",
        "assert copy.deepcopy([[f(0)]]) == [[0]]",
        "assert list(itertools.islice(itertools.count(), 3)) == [0, 1, 2] and f(0) == 0",
        "assert operator.add(f(0), 2) == 2",
        "assert functools.reduce(lambda a, b: a + b, [1, 2, f(0)]) == 3",
        "assert heapq.nlargest(2, [1, 3, 2, f(0)]) == [3, 2]",
        "assert dict.fromkeys([f(0)], 1) == {0: 1}",
        "assert sorted(map(str.upper, ['b', 'a'])) == ['A', 'B'] and f(0) == 0",
        "assert isinstance(f(0), int) and type(f(0)) is int and not isinstance(f(0), (set, dict))",
        "assert '{:>4}|{}'.format(f(0), 'x') == '   0|x'",
    ]
    for test in cases:
        compiled = compile_assert(0, test, names, [])
        assert evaluate(compiled, names, lambda i: 0, deadline=time.monotonic() + 5), test


@pytest.mark.parametrize("test", [
    "assert re.match('a', f(0))",
    "assert f(0) == eval('1')",
    "assert print(f(0)) is None",
    "assert vars(f(0)) == {}",
    "assert id(f(0)) == 1",
    "assert open('x') and f(0)",
])
def test_unsafe_host_names_are_refused_when_the_tests_load(test: str) -> None:
    with pytest.raises(ValueError, match="assert 0"):
        compile_assert(0, test, host_names(""), [])


# ------------------------------------------------------------------ hash-building on the host

COLLIDING = [k * (2**61 - 1) for k in range(10**5)]
HASH_BUILDERS = [
    *(f"assert s().{m}(f()) is None" for m in ("issubset", "issuperset", "isdisjoint", "union", "intersection",
                                               "difference", "symmetric_difference")),
    *(f"assert (s() {op} f()) is None" for op in ("|", "&", "-", "^")),
    *(f"assert (s() {op} set(f())) is None" for op in ("|", "&", "-", "^", "<=", ">=", "<", ">")),
    *(f"assert (d().keys() {op} f()) is None" for op in ("|", "&", "-", "^")),
    *(f"assert (d().items() {op} zip(f(), f())) is None" for op in ("|", "&", "-", "^")),
    *(f"assert (f() {op} d().keys()) is None" for op in ("|", "&", "-", "^")),
    "assert d().keys().isdisjoint(f()) is None",
    "assert dict.fromkeys(f()) is None", "assert d().fromkeys(f()) is None",
    "assert collections.Counter(f()) is None", "assert collections.OrderedDict(zip(f(), f())) is None",
    "assert {*f()} is None", "assert {x for x in f()} is None", "assert {x: 0 for x in f()} is None",
    "assert set(f()) is None", "assert frozenset(f()) is None", "assert dict(zip(f(), f())) is None",
    "assert statistics.mode(f()) is None", "assert statistics.multimode(f()) is None",
    "assert len(set(map(int, f()))) == 0",
]


def judged(test: str, values: dict[str, object], deadline_s: float = 5.0) -> object:
    """The verdict on one assert, or the exception its evaluation raised, its probes' values given
    by their source (``{"f()": ...}``). How fast a guard fails is bench/time_bounds.py's to measure."""
    names = host_names("")
    probes: list = []
    compiled = compile_assert(0, test, names, probes)
    try:
        return evaluate(compiled, names, lambda i: values[probes[i]], deadline=time.monotonic() + deadline_s)
    except Exception as err:  # JudgeError, or what Python raises (decimal.Overflow): the test fails
        return err


@pytest.mark.parametrize("test", HASH_BUILDERS)
def test_hash_building_on_returned_colliding_values_fails_fast(test: str) -> None:
    outcome = judged(test, {"f()": list(COLLIDING), "s()": {1, 2}, "d()": {1: 1}})
    assert isinstance(outcome, (JudgeError, TypeError)), (test, outcome)


def test_a_forged_colliding_result_line_fails_fast() -> None:
    for tag in ("S", "z", "K"):
        tokens = [tag, 20_000] + [t for k in COLLIDING[:20_000] for t in ("i", format(k, "x"))]
        with pytest.raises(JudgeError, match="colliding"):
            decode_value(tokens)


# ------------------------------------------------------------------ data across the boundary


@settings(max_examples=200, deadline=None)
@given(st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_subnormal=False), st.text(max_size=5), st.binary(max_size=5),
              st.complex_numbers(allow_nan=False, allow_subnormal=False)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner), st.dictionaries(st.text(max_size=3), inner, max_size=3),
                            st.frozensets(st.integers(), max_size=3), st.sets(st.integers(), max_size=3)),
    max_leaves=20))
def test_data_arguments_round_trip_through_both_encoders(value: object) -> None:
    # results.encode_value/decode_value and the runner's _tag/_untag are twins (the runner imports
    # nothing of rlvr): the same tokens both ways, every value read back as it was sent
    assert encode_value(value) == _runner._tag(value)
    tokens = json.loads(json.dumps(encode_value(value)))
    assert _runner._untag(tokens) == value
    assert decode_value(tokens) == value
    assert decode_value(json.loads(json.dumps(_runner._tag(value)))) == value


def test_non_data_arguments_are_refused_with_the_type() -> None:
    for value in (lambda: 0, object(), [Fraction(1, 2)], {1: len}):
        with pytest.raises(JudgeError, match="is not data a call into the program can receive"):
            encode_value(value)
    assert encode_value(collections.Counter("ab")) == encode_value({"a": 1, "b": 1})


def test_converted_values_decode_as_host_data() -> None:
    def gen():
        yield from (1, 2)

    def forever():
        while True:
            yield 0

    for value, expected in [
        (range(2, 9, 3), range(2, 9, 3)), (Fraction(-1, 3), Fraction(-1, 3)), (Decimal("0.10"), Decimal("0.10")),
        (collections.deque([1, 2]), collections.deque([1, 2])), ({"a": 1}.keys(), {"a": 1}.keys()),
        ({"a": 1}.items(), {"a": 1}.items()),
    ]:
        decoded = decode_value(json.loads(json.dumps(_runner._tag(value))))
        assert decoded == expected and type(decoded) is type(expected)
    assert list(decode_value(_runner._tag({"a": 1}.values()))) == [1]
    it = decode_value(_runner._tag(gen()))
    assert isinstance(it, ReturnedIterator) and list(it) == [1, 2]
    cut = decode_value(_runner._tag(forever(), lazy=(5.0, 1 << 16)))
    assert [next(cut) for _ in range(3)] == [0, 0, 0]
    with pytest.raises(JudgeError, match="reads past"):
        list(cut)
    for forged in (["R", "0", "f" * 20, "1"], ["D", "1e999999"], ["Q", "1", "0"], ["Q", "f" * 3000, "1"]):
        with pytest.raises(JudgeError):
            decode_value(forged)


@needs_bwrap
def test_results_the_tests_convert_arrive_as_data() -> None:
    program = fenced(
        """
        from collections import deque
        from decimal import Decimal
        from fractions import Fraction
        def gen(n):
            for i in range(n):
                yield i * i
        def naturals():
            n = 0
            while True:
                n += 1
                yield n
        def d():
            return {"b": 2, "a": 1}
        def range_fn(n):
            return range(n)
        def map_fn(xs):
            return map(lambda x: x + 1, xs)
        def zip_fn(xs):
            return zip(xs, xs)
        def half():
            return Fraction(1, 2)
        def tenth():
            return Decimal("0.1")
        def window():
            return deque([1, 2, 3], maxlen=3)
        """
    )
    tests = [
        "assert list(gen(6)) == [0, 1, 4, 9, 16, 25]", "assert next(naturals()) == 1",
        "assert [x for _, x in zip(range(3), naturals())] == [1, 2, 3]", "assert sorted(d().keys()) == ['a', 'b']",
        "assert sorted(d().values()) == [1, 2] and sorted(d().items()) == [('a', 1), ('b', 2)]",
        "assert list(range_fn(3)) == [0, 1, 2] and range_fn(3) == range(3)", "assert list(map_fn([1, 2])) == [2, 3]",
        "assert dict(zip_fn([1])) == {1: 1}", "assert half() == 0.5 and half().denominator == 2",
        "assert tenth() * 3 == Decimal('0.3')", "assert window()[0] == 1 and list(window()) == [1, 2, 3]",
        "assert sum(gen(3)) == 5 and sum(gen(3)) == 5",  # each evaluation of a probe is a new call
    ]
    report = run_python_tests(program, {"asserts": tests, "setup": "from decimal import Decimal"}, limits=FAST)
    assert report.score == 1.0, [(t, r.detail) for t, r in zip(tests, report.results) if not r.passed]
    wrong = ["assert len(list(naturals())) > 0", "assert half() ** 10**9 == 0"]
    report = run_python_tests(program, {"asserts": wrong}, limits=FAST)
    assert report.score == 0.0
    assert "reads past" in report.results[0].detail and "too large" in report.results[1].detail


@needs_bwrap
def test_data_probes_call_the_program_on_host_data() -> None:
    probes = [{"call": "f", "args": encode_value([[1, 2], {"k": (3,)}]), "kwargs": encode_value({"x": 2.5})}, {"call": "f"},
              {"call": "exit", "args": encode_value([0])}]
    run = run_job({"mode": "asserts", "program": "def f(*a, **k):\n    return [list(a), k]", "setup": "", "probes": probes}, FAST)
    assert decode_value(run.lines[0]["value"]) == [[[1, 2], {"k": (3,)}], {"x": 2.5}]
    assert decode_value(run.lines[1]["value"]) == [[], {}]
    assert run.lines[2] == {"id": 2, "error": "SystemExit"}


@needs_bwrap
@pytest.mark.parametrize(("ending", "status"), [
    ("exit()", 0), ("quit()", 0), ("exit(0)", 0), ("quit(0)", 0), ("exit(1)", 1), ("quit(3)", 3), ("exit('bye')", 1),
    ("sys.exit()", 0), ("raise SystemExit", 0),
])
def test_exit_and_quit_end_an_io_program_with_their_status(ending: str, status: int) -> None:
    run = run_job({"mode": "io", "program": f"import sys\nprint(input())\n{ending}\nprint('after')", "inputs": ["hi\n"]}, FAST)
    assert run.lines[0]["exit"] == status and run.lines[0]["stdout"] == "hi\n"
    tests = {"io": [{"stdin": "hi\n", "stdout": "hi\n"}]}
    assert run_python_tests(fenced(f"import sys\nprint(input())\n{ending}"), tests, limits=FAST).score == float(status == 0)


@needs_bwrap
def test_exit_in_an_asserts_program_is_a_load_error_like_sys_exit() -> None:
    for ending in ("exit()", "quit()", "exit(0)"):
        report = run_python_tests(fenced(f"def f():\n    return 1\n{ending}"), {"asserts": ["assert f() == 1"]}, limits=FAST)
        assert report.score == 0.0 and "SystemExit" in report.results[0].detail


@pytest.mark.parametrize("test", [
    "assert math.floor(d() ** 100) == 1", "assert format(d() ** 100, 'f') == ''", "assert int(d() * d() * d()) == 1",
    "assert d().scaleb(10**6) == 1", "assert fractions.Fraction(d()) ** 10**6 == 1", "assert q() ** 10**9 == 1",
    "assert q() ** fractions.Fraction(10**9) == 1", "assert sum(q() ** k for k in range(10**4)) == 1",
    "assert decimal.Decimal('1e999999999') == d()", "assert fractions.Fraction('1e999999999') == q()",
    "assert len(list(itertools.count())) == q()", "assert list(itertools.product(range(10), repeat=10**6)) == q()",
    "assert list(itertools.permutations(range(100))) == q()", "assert collections.deque([q()]) * 10**9 == 1",
    "assert len(random.Random(1).choices([1], k=10**9)) == q()", "assert copy.deepcopy([[q()] * 10**3] * 10**4) == 1",
    "assert '{:>1000000000}'.format(q()) == ''", "assert '{0.__class__}'.format(q()) == ''", "assert format(q(), '>1000000000') == ''",
    "assert ('a' * 10**5).expandtabs(10**9) == q()", "assert ('\\t' * 10**5).expandtabs(10**5) == q()",
    "assert ('a' * 10**5).translate({97: 'b' * 10**5}) == q()", "assert 'a'.encode('punycode') == q()",
    "assert q().numerator.to_bytes(10**9, 'big') == 1",
])
def test_converted_and_module_values_stay_bounded(test: str) -> None:
    outcome = judged(test, {"d()": Decimal("1e9999"), "q()": Fraction(3, 2)})
    assert outcome is not True, (test, outcome)


# ------------------------------------------------------------------ review R1: setup helpers, exact sums, the clock

SETUP_HELPERS = "import math\ndef is_prime(n):\n    if n < 2:\n        return False\n    for d in range(2, math.isqrt(n) + 1):\n" \
    "        if n % d == 0:\n            return False\n    return True\ndef all_prime(xs):\n    return all(is_prime(x) for x in xs)\n" \
    "def is_sorted(xs):\n    return xs == sorted(xs)\ndef expected(n):\n    return sorted(range(n), reverse=True)\n"
HELPER_ASSERTS = ["assert all_prime(primes(20))", "assert is_sorted(primes(20))", "assert len(primes(20)) == len(expected(8))",
                  "assert all(map(is_prime, primes(20)))"]
PRIMES = "def primes(n):\n    return [p for p in range(2, n) if all(p % d for d in range(2, p))]"


@needs_bwrap
@pytest.mark.parametrize("cheat", [
    "class L(list):\n    def __eq__(self, other):\n        return True\ndef primes(n):\n    return L([9, 4, 1])",  # a liar
    "import builtins\nbuiltins.sorted = lambda xs, **k: list(xs)\nbuiltins.all = lambda xs: True\nbuiltins.len = lambda xs: 8\n"
    "def primes(n):\n    return [9, 4, 1]",  # patching what the helper uses
    "import math\nmath.isqrt = lambda n: 0\ndef primes(n):\n    return [21, 15, 9]",
], ids=["lying value", "patched builtins", "patched math"])
def test_setup_helpers_judge_on_the_host(cheat: str) -> None:
    # a top-level def of the setup is trusted test code: it runs on the host when the host can
    # interpret it on data, so the program can neither patch what it uses nor hand it a liar
    native = {"asserts": HELPER_ASSERTS, "setup": SETUP_HELPERS}
    assert run_python_tests(fenced(PRIMES), native, limits=FAST).score == 1.0
    assert run_python_tests(fenced(cheat), native, limits=FAST).score == 0.0
    mbpp = run_python_tests(fenced(cheat), HELPER_ASSERTS, limits=FAST, fields={"test_setup_code": SETUP_HELPERS})
    assert mbpp.score == 0.0


@needs_bwrap
def test_setup_helpers_that_read_program_objects_stay_beside_the_program() -> None:
    # LeetCode-style helpers walk the program's objects (node.val): they cannot run on data, so
    # they stay in the sandbox, where an honest program still passes
    setup = ("class Node:\n    def __init__(self, val, nxt=None):\n        self.val, self.next = val, nxt\n"
             "def build(xs):\n    head = None\n    for x in reversed(xs):\n        head = Node(x, head)\n    return head\n"
             "def to_list(node):\n    out = []\n    while node:\n        out.append(node.val)\n        node = node.next\n    return out\n")
    program = ("def reverse_list(head):\n    prev = None\n    while head:\n        head.next, prev, head = prev, head, head.next\n"
               "    return prev")
    tests = {"asserts": ["assert to_list(reverse_list(build([1, 2, 3]))) == [3, 2, 1]"], "setup": setup}
    assert run_python_tests(fenced(program), tests, limits=FAST).score == 1.0


def test_which_setup_functions_are_the_hosts() -> None:
    from rlvr.verifiers.code.testcode import SetupHelper, assert_names

    names = assert_names(SETUP_HELPERS + "def walks(node):\n    return node.val\ndef calls_program(n):\n    return primes(n)\n"
                         "def uses_walks(n):\n    return walks(n)\ndef twice(x):\n    return x\ntwice = None\n")
    hosts = {name for name, value in names.items() if isinstance(value, SetupHelper)}
    assert hosts == {"is_prime", "all_prime", "is_sorted", "expected"}  # not walks, calls_program, uses_walks, twice
    probes: list = []
    compiled = compile_assert(0, "assert is_sorted(primes(9))", names, probes)
    assert probes == ["primes(9)"]  # the helper's call is the host's, the program's result crosses
    assert evaluate(compiled, names, lambda i: [2, 3, 5, 7], time.monotonic() + 5) is True
    assert evaluate(compiled, names, lambda i: [7, 2], time.monotonic() + 5) is False
    spin = assert_names("def spin(n):\n    while n > 0:\n        n = n + 1\n    return n\n")
    compiled = compile_assert(0, "assert spin(f()) == 0", spin, [])
    with pytest.raises(JudgeError, match="too much work|Timeout"):  # a check's step budget and the assert's deadline
        evaluate(compiled, spin, lambda i: 1, time.monotonic() + 0.5)
    fib = assert_names("def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n")
    compiled = compile_assert(0, "assert f() == fib(20)", fib, [])  # computing the expected value the long way
    assert evaluate(compiled, fib, lambda i: 6765, time.monotonic() + 20) is True


FRACTIONS = [Fraction(1, (1 << 4000) + 1 + 2 * i) for i in range(300)]  # coprime denominators: the exact sum is huge
DIGITS = [Decimal("1." + "7" * 4000 + "e-9000")] * 20


@pytest.mark.parametrize("test", [
    *(f"assert statistics.{fn}(f()) == 0" for fn in ("mean", "median", "variance", "stdev", "pvariance", "pstdev",
                                                      "harmonic_mean", "median_grouped", "quantiles")),
    "assert statistics.mean(g()) == 0", "assert statistics.variance(g()) == 0",
    "assert [fractions.Fraction(x) for x in g()] == []",
])
def test_exact_sums_on_returned_fractions_and_decimals_stay_bounded(test: str) -> None:
    # statistics sums exactly: 300 fractions with coprime denominators took 5 s (variance: 39 s)
    outcome = judged(test, {"f()": FRACTIONS, "g()": DIGITS}, deadline_s=20)
    assert outcome is not True, (test, outcome)


def test_a_decimal_arrives_with_at_most_max_decimal_digits_and_honest_exact_data_averages() -> None:
    from rlvr.verifiers.code.trusted import MAX_DECIMAL_DIGITS

    digits = "1." + "7" * (MAX_DECIMAL_DIGITS - 1)
    assert decode_value(["D", digits]) == Decimal(digits)
    with pytest.raises(JudgeError):
        decode_value(["D", digits + "7"])
    names = host_names("")
    for values, mean in (([Fraction(1, 3), Fraction(1, 6), 2], "fractions.Fraction(5, 6)"),
                         ([Decimal("0.1"), Decimal("0.25")], "decimal.Decimal('0.175')"), ([0.5, 1.5, 1], "1.0")):
        compiled = compile_assert(0, f"assert statistics.mean(f()) == {mean}", names, [])
        assert evaluate(compiled, names, lambda i: values, time.monotonic() + 5), mean


@pytest.mark.parametrize("test", ["assert [f().count(x) for x in f()] == []", "assert [f().index(x) for x in f()] == []",
                                  "assert sorted(f(), key=lambda x: f().count(x)) == []"])
def test_a_quadratic_assert_stops_soon_after_its_deadline(test: str) -> None:
    # each step may do linear work on a returned value: the clock is read often enough that a
    # quadratic test overruns its deadline by a fraction of a second, not by seconds
    names = host_names("")
    probes: list = []
    compiled = compile_assert(0, test, names, probes)
    value = list(range(100_000))
    with pytest.raises(JudgeError, match="Timeout"):  # how soon after it: bench/time_bounds.py
        evaluate(compiled, names, lambda i: value, deadline=time.monotonic() + 0.2)


CONVERSION_LIARS = {  # a subclass whose conversion to its base type says the expected value, its data another
    int: ("class X(int):\n    def __int__(self):\n        return 5\n    def __index__(self):\n        return 5", "X(4)", "5"),
    float: ("class X(float):\n    def __float__(self):\n        return 5.0", "X(4.0)", "5.0"),
    complex: ("class X(complex):\n    def __complex__(self):\n        return 5j", "X(4j)", "5j"),
    str: ("class X(str):\n    def __str__(self):\n        return 'hello'", "X('zzz')", "'hello'"),
    bytes: ("class X(bytes):\n    def __bytes__(self):\n        return b'hello'", "X(b'zzz')", "b'hello'"),
    **{kind: (f"class X({kind.__name__}):\n    def __iter__(self):\n        return iter([5])", "X([4])", expected)
       for kind, expected in ((list, "[5]"), (tuple, "(5,)"), (set, "{5}"), (frozenset, "frozenset({5})"))},
    dict: ("class X(dict):\n    def keys(self):\n        return ['a']\n    def __getitem__(self, k):\n        return 1\n"
           "    def __iter__(self):\n        return iter(['a'])\n    def items(self):\n        return [('a', 1)]", "X(z=9)", "{'a': 1}"),
}


@needs_bwrap
@pytest.mark.parametrize("kind", list(CONVERSION_LIARS), ids=lambda k: k.__name__)
def test_a_subclass_crosses_as_the_data_it_holds_not_as_its_conversions_say(kind: type) -> None:
    # X(4) == 5 is False in Python, whatever X.__int__ says: the runner reads a subclass's data
    # with the base type's own code (int.__index__, str.__str__, list.__iter__, dict.items...)
    cls, value, expected = CONVERSION_LIARS[kind]
    program = fenced(f"{cls}\ndef f():\n    return {value}\ndef g():\n    return [{value}, {{'k': {value}}}]")
    tests = {"asserts": [f"assert f() == {expected}", f"assert g() == [{expected}, {{'k': {expected}}}]"]}
    assert run_python_tests(program, tests, limits=FAST).score == 0.0
    calls = {"calls": [{"args": [], "output": json.loads(json.dumps(eval(expected)))}] if kind in (int, float, str, list) else
             [{"args": [], "output": 5}], "fn_name": "f"}
    assert run_python_tests(program, calls, limits=FAST).score == 0.0


@needs_bwrap
@pytest.mark.parametrize(("program", "expected"), [
    ("import enum\nclass C(enum.IntEnum):\n    A = 1\ndef f():\n    return C.A", "1"),
    ("import enum\nclass C(str, enum.Enum):\n    A = 'a'\ndef f():\n    return C.A", "'a'"),  # was 'C.A'
    ("from collections import OrderedDict\ndef f():\n    d = OrderedDict(a=1, b=2)\n    d.move_to_end('a')\n    return d",
     "{'b': 2, 'a': 1} and list(f().items()) == [('b', 2), ('a', 1)]"),
    ("from collections import namedtuple\nP = namedtuple('P', 'x y')\ndef f():\n    return P(1, 2)", "(1, 2)"),
])
def test_honest_subclasses_cross_as_their_data(program: str, expected: str) -> None:
    assert run_python_tests(fenced(program), {"asserts": [f"assert f() == {expected}"]}, limits=FAST).score == 1.0
