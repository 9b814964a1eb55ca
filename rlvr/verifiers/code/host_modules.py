"""The standard-library modules an assert may use on the host, each member bounded.

A name in an assert that is a top-level standard-library module used as one (``statistics.mean``,
``random.Random(0)``) is the host's whether or not the setup imports it; the modules below are
provided, every other one is refused when the tests load (see `judge.py`). Each member either
costs at most about linear time in what it reads, or is checked before it runs:

* ``math``: see `trusted.MATH` (factorial, comb, perm, prod, lcm bounded);
* ``fractions.Fraction``, ``decimal.Decimal``: built from bounded text; ``Decimal`` arithmetic runs
  in a context of 28 digits and exponents within ``MAX_DECIMAL_EXPONENT`` (see ``judge.evaluate``);
* ``collections``: ``Counter``, ``OrderedDict``, ``defaultdict`` (hashes checked), ``deque``;
* ``string``: the constants and ``capwords``;
* ``random``: the module's functions on a private generator of the judge, and ``Random(seed)``;
  sizes (``k``, bits, bytes) bounded; ``shuffle`` and ``seed``-less state functions refused;
* ``copy``: ``copy``, ``deepcopy`` of values up to ``MAX_LENGTH`` items;
* ``itertools``: every iterator counts what it yields (``MAX_LENGTH`` at most, so ``count()`` and
  ``cycle()`` end in a failed test, not a stall) and checks each item; ``product``,
  ``permutations`` and ``combinations`` read bounded inputs;
* ``statistics``: the averages and spreads, on at most ``MAX_LENGTH`` values whose exact sum stays
  within ``MAX_FRACTION_BITS`` (`check_exact_sum`);
* ``operator``: the operators as the interpreter bounds them; no ``attrgetter``/``methodcaller``;
* ``functools``: ``reduce``, ``cmp_to_key``; ``heapq``: ``nlargest``, ``nsmallest``.

``re`` is refused: a pattern can backtrack for hours inside one C call that no deadline interrupts.
"""

from __future__ import annotations

import ast
import collections
import copy
import decimal
import fractions
import functools
import heapq
import itertools
import math
import operator
import random
import re
import statistics
import string
from typing import Any, Callable

from rlvr.verifiers.code.trusted import (
    BINARY,
    COMPARE,
    MATH,
    MAX_DECIMAL_DIGITS,
    MAX_DECIMAL_EXPONENT,
    MAX_FRACTION_BITS,
    MAX_INT_BITS,
    MAX_LENGTH,
    JudgeError,
    TrustedModule,
    check_hashes,
    checked,
    materialised,
    safe_pow,
    size_at_most,
)

_NUMBER_TEXT = re.compile(r"\s*[-+]?(\d[\d_]*)?(\.\d*)?([eE][-+]?\d+)?\s*|\s*[-+]?(inf(inity)?|nan)\s*|\s*[-+]?\d+\s*/\s*\d+\s*", re.I)


def _number_text(text: str, what: str) -> str:
    """Refuse text whose exponent would make a huge exact number (``Fraction('1e999999999')``)."""
    if len(text) > 10_000 or not _NUMBER_TEXT.fullmatch(text):
        raise JudgeError(f"{what} of unsupported text")
    exponent = re.search(r"[eE]([-+]?\d+)", text)
    if exponent and abs(int(exponent.group(1))) > MAX_DECIMAL_EXPONENT:
        raise JudgeError(f"{what} exponent out of range")
    return text


def safe_fraction(numerator: Any = 0, denominator: Any = None) -> fractions.Fraction:
    if isinstance(numerator, str):
        numerator = _number_text(numerator, "Fraction")
    if isinstance(numerator, decimal.Decimal):
        safe_decimal(numerator)
    value = fractions.Fraction(numerator) if denominator is None else fractions.Fraction(numerator, denominator)
    return checked(value)


def safe_decimal(value: Any = "0") -> decimal.Decimal:
    if isinstance(value, str):
        value = _number_text(value, "Decimal")
    if isinstance(value, int) and value.bit_length() > MAX_DECIMAL_DIGITS * 10 // 3:
        raise JudgeError("Decimal of an integer too large")
    return checked(decimal.Decimal(value))  # exponent and digits within the judge's bounds


def safe_counter(iterable: Any = (), **kwargs: Any) -> collections.Counter:
    if isinstance(iterable, dict):
        return collections.Counter(iterable, **kwargs)
    return collections.Counter(check_hashes(materialised(iterable, "Counter"), "Counter"), **kwargs)


def safe_ordered_dict(pairs: Any = ()) -> collections.OrderedDict:
    items = list(pairs.items()) if isinstance(pairs, dict) else [tuple(p) for p in materialised(pairs, "OrderedDict")]
    check_hashes([k for k, _ in items], "OrderedDict")
    return collections.OrderedDict(items)


def safe_defaultdict(factory: Any = None, pairs: Any = ()) -> collections.defaultdict:
    if factory is not None and not callable(factory):
        raise JudgeError("defaultdict needs a callable")
    return collections.defaultdict(factory, safe_ordered_dict(pairs))


def safe_deque(iterable: Any = (), maxlen: int | None = None) -> collections.deque:
    return collections.deque(materialised(iterable, "deque"), maxlen)


def bounded_iterator(iterator: Any, what: str) -> Any:
    """Yield items of ``iterator`` up to ``MAX_LENGTH`` in all, a tuple or list counting its
    length (``permutations(range(100))`` yields 100-tuples), each checked like any computed value."""
    count = 0
    for item in iterator:
        kind = type(item)
        if kind is int and item.bit_length() <= MAX_INT_BITS:  # the common case, kept cheap
            count += 1
        else:
            count += 1 + (len(item) if kind is tuple or kind is list else 0)
            item = checked(item)
        if count > MAX_LENGTH:
            raise JudgeError(f"{what} yields more than {MAX_LENGTH} items")
        yield item


def _lazy(fn: Callable) -> Callable:
    def bounded(*args: Any, **kwargs: Any) -> Any:
        return bounded_iterator(fn(*args, **kwargs), "itertools." + fn.__name__)
    bounded.__name__ = fn.__name__
    return bounded


def _product(*iterables: Any, repeat: int = 1) -> Any:
    pools = [materialised(it, "product") for it in iterables]
    if not isinstance(repeat, int) or repeat < 0 or sum(map(len, pools)) * repeat > MAX_LENGTH:
        raise JudgeError("itertools.product of too many inputs")
    return bounded_iterator(itertools.product(*pools, repeat=repeat), "itertools.product")


def _choosing(fn: Callable) -> Callable:
    def bounded(iterable: Any, r: int | None = None) -> Any:
        pool = materialised(iterable, fn.__name__)
        return bounded_iterator(fn(pool) if r is None else fn(pool, r), "itertools." + fn.__name__)
    bounded.__name__ = fn.__name__
    return bounded


def _repeat(value: Any, times: int | None = None) -> Any:
    return bounded_iterator(itertools.repeat(value) if times is None else itertools.repeat(value, times), "itertools.repeat")


ITERTOOLS = {name: _lazy(getattr(itertools, name)) for name in (
    "accumulate", "chain", "compress", "count", "cycle", "dropwhile", "filterfalse", "groupby", "islice",
    "pairwise", "starmap", "takewhile", "zip_longest")}
ITERTOOLS.update(product=_product, repeat=_repeat, permutations=_choosing(itertools.permutations),
                 combinations=_choosing(itertools.combinations),
                 combinations_with_replacement=_choosing(itertools.combinations_with_replacement))


def check_exact_sum(values: list, what: str) -> None:
    """``statistics`` sums its data exactly, as fractions: the common denominator of ``n``
    fractions with coprime denominators has all their bits, and each addition runs a gcd on it
    (300 values: seconds; variance: a minute). The rule, as for `sum` (whose running total is
    `checked`): the common denominator (the lcm, grown one value at a time and stopped at the
    bound) and each numerator stay within ``MAX_FRACTION_BITS``. Integers and floats (whose
    denominators are powers of two, below 2^1075) always pass."""
    common = 1
    for value in values:
        if not isinstance(value, (fractions.Fraction, decimal.Decimal)):
            continue
        if isinstance(value, decimal.Decimal) and not value.is_finite():
            continue
        numerator, denominator = value.as_integer_ratio()
        common = common // math.gcd(common, denominator) * denominator
        if common.bit_length() > MAX_FRACTION_BITS or numerator.bit_length() > MAX_FRACTION_BITS:
            raise JudgeError(f"{what} of fractions or decimals too large to sum exactly")


def _on_values(fn: Callable, hashed: bool = False, exact: bool = True) -> Callable:
    def bounded(data: Any, *args: Any, **kwargs: Any) -> Any:
        values = materialised(data, "statistics." + fn.__name__)
        if hashed:
            check_hashes(values, "statistics." + fn.__name__)
        if exact:
            check_exact_sum(values, "statistics." + fn.__name__)
        return checked(fn(values, *args, **kwargs))
    bounded.__name__ = fn.__name__
    return bounded


_NO_EXACT_SUM = frozenset(["fmean", "geometric_mean", "median_high", "median_low", "mode", "multimode"])  # floats, or picks
STATISTICS = {name: _on_values(getattr(statistics, name), hashed=name in ("mode", "multimode"), exact=name not in _NO_EXACT_SUM)
              for name in (
    "fmean", "geometric_mean", "harmonic_mean", "mean", "median", "median_grouped", "median_high", "median_low",
    "mode", "multimode", "pstdev", "pvariance", "quantiles", "stdev", "variance")}


def random_members(generator: random.Random) -> dict[str, Any]:
    """``random``'s functions bound to ``generator``, sizes bounded (test code seeds its own:
    `testcode.py` replays a check's draws alike in every round)."""
    def sized(fn: Callable, name: str, limit: int) -> Callable:
        def bounded(*args: Any, **kwargs: Any) -> Any:
            size = kwargs.get("k", args[-1] if args and name in ("sample", "getrandbits", "randbytes") else None)
            if name == "choices":
                size = kwargs.get("k", 1)
            if isinstance(size, int) and size > limit:
                raise JudgeError(f"random.{name} of more than {limit}")
            if name in ("sample", "choices") and args:
                args = (materialised(args[0], "random." + name), *args[1:])
            return fn(*args, **kwargs)
        return bounded

    members = {name: getattr(generator, name) for name in (
        "random", "uniform", "triangular", "randint", "randrange", "choice", "gauss", "normalvariate",
        "lognormvariate", "expovariate", "betavariate", "gammavariate", "paretovariate", "weibullvariate",
        "vonmisesvariate", "seed")}
    members.update(sample=sized(generator.sample, "sample", MAX_LENGTH), choices=sized(generator.choices, "choices", MAX_LENGTH),
                   getrandbits=sized(generator.getrandbits, "getrandbits", MAX_INT_BITS),
                   randbytes=sized(generator.randbytes, "randbytes", MAX_LENGTH))
    return members


def new_random(seed: Any = None) -> TrustedModule:
    """``random.Random(seed)``: a generator of its own, with the module's bounded functions."""
    if isinstance(seed, (str, bytes)) and len(seed) > MAX_LENGTH or isinstance(seed, int) and seed.bit_length() > MAX_INT_BITS:
        raise JudgeError("random seed too large")
    return TrustedModule("Random", random_members(random.Random(seed)))


def _copy_of(fn: Callable) -> Callable:
    def bounded(value: Any) -> Any:
        if size_at_most(value, MAX_LENGTH) > MAX_LENGTH:
            raise JudgeError(f"copy.{fn.__name__} of a value too large")
        return fn(value)
    bounded.__name__ = fn.__name__
    return bounded


def _nbest(fn: Callable) -> Callable:
    def bounded(n: int, iterable: Any, key: Any = None) -> list:
        return fn(n, materialised(iterable, "heapq." + fn.__name__), key=key)
    bounded.__name__ = fn.__name__
    return bounded


def _reduce(fn: Callable, iterable: Any, *initial: Any) -> Any:
    return functools.reduce(lambda a, b: checked(fn(a, b)), bounded_iterator(iter(iterable), "reduce"), *initial)


def _ast_op(name: str) -> Callable:
    return BINARY[getattr(ast, name)]


OPERATOR: dict[str, Any] = {
    name: getattr(operator, name) for name in (
        "truediv", "floordiv", "neg", "pos", "abs", "not_", "truth", "and_", "or_", "xor", "invert", "rshift",
        "getitem", "itemgetter", "index", "countOf", "indexOf", "is_", "is_not", "contains")}
OPERATOR.update(
    add=_ast_op("Add"), sub=_ast_op("Sub"), mul=_ast_op("Mult"), mod=_ast_op("Mod"), pow=safe_pow, lshift=_ast_op("LShift"),
    concat=_ast_op("Add"), **{name: COMPARE[getattr(ast, cls)] for name, cls in (
        ("eq", "Eq"), ("ne", "NotEq"), ("lt", "Lt"), ("le", "LtE"), ("gt", "Gt"), ("ge", "GtE"))})

HOST_MODULES: dict[str, TrustedModule] = {
    "math": TrustedModule("math", MATH),
    "fractions": TrustedModule("fractions", {"Fraction": fractions.Fraction}),
    "decimal": TrustedModule("decimal", {"Decimal": decimal.Decimal}),
    "collections": TrustedModule("collections", {"Counter": collections.Counter, "OrderedDict": collections.OrderedDict,
                                                  "defaultdict": collections.defaultdict, "deque": collections.deque}),
    "string": TrustedModule("string", {name: getattr(string, name) for name in (
        "ascii_letters", "ascii_lowercase", "ascii_uppercase", "digits", "hexdigits", "octdigits", "punctuation",
        "printable", "whitespace", "capwords")}),
    "random": TrustedModule("random", {**random_members(random.Random()), "Random": new_random}),
    "copy": TrustedModule("copy", {"copy": _copy_of(copy.copy), "deepcopy": _copy_of(copy.deepcopy)}),
    "itertools": TrustedModule("itertools", ITERTOOLS),
    "statistics": TrustedModule("statistics", STATISTICS),
    "operator": TrustedModule("operator", OPERATOR),
    "functools": TrustedModule("functools", {"reduce": _reduce, "cmp_to_key": functools.cmp_to_key}),
    "heapq": TrustedModule("heapq", {"nlargest": _nbest(heapq.nlargest), "nsmallest": _nbest(heapq.nsmallest)}),
}

# Classes the modules provide: a name binds the class itself (``isinstance(x, Fraction)``); calling
# one goes through its bounded constructor.
SAFE_CONSTRUCTORS: dict[type, Callable] = {
    fractions.Fraction: safe_fraction, decimal.Decimal: safe_decimal, collections.Counter: safe_counter,
    collections.OrderedDict: safe_ordered_dict, collections.defaultdict: safe_defaultdict, collections.deque: safe_deque,
}

REFUSED_MODULES = {
    "re": "a regular expression can backtrack for hours inside one call that no deadline interrupts",
}
