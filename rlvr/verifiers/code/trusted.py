"""What python_code's judge trusts: the built-ins, `math`, the operators, each bounded so that no
test can make the host's evaluation slow or large.

Every operation that can cost more than linear time or build more than it reads (`**` on ints and
Fractions, `<<`, repetition, `range`, `sum` of sequences, `round`, `math.factorial`, `prod`, `lcm`,
sets and dicts of colliding hashes, set operators on sets and dict views, values that alias one
large value) is checked before it runs; anything past the bounds is a `JudgeError`, which fails
that test. Every name of `builtins` is either in `BUILTINS` (or `methods.ATTRIBUTE_BUILTINS`) or in
`REFUSED_BUILTINS` with the reason. Methods of data are in `methods.py`, standard-library modules
in `host_modules.py`.
"""

from __future__ import annotations

import ast
import builtins
import collections
import decimal
import fractions
import itertools
import math
import operator
from typing import Any, Callable

MAX_NODES = 100_000  # tokens in one decoded value (the runner refuses larger values too)
MAX_DEPTH = 100
MAX_INT_BITS = 1 << 17  # ~39,000 decimal digits: any test's answer, never a stall
MAX_LENGTH = 1_000_000  # items or characters of anything the judge builds
MAX_STEPS = 250_000  # interpreter steps per assert; each step's own work is bounded separately
MAX_SAME_HASH = 32  # members of one set or dict sharing a hash (honest data: ~1)
MAX_FRACTION_BITS = 1 << 13  # numerator and denominator together: each addition runs a gcd, superlinear
MAX_DECIMAL_EXPONENT = 10_000  # a Decimal's adjusted exponent: int() of one stays under MAX_INT_BITS
# A Decimal's digits (CPython's own bound on int/str conversions): its exact value (Fraction(d),
# as_integer_ratio, statistics' exact sums) converts in milliseconds; 43,000 digits took 0.2 s each.
MAX_DECIMAL_DIGITS = 4_300
MAX_PRODUCED = 2 * MAX_LENGTH  # logical size of all comprehensions and lambdas build, per assert


class JudgeError(Exception):
    """A verdict that cannot be reached safely: the test fails with this message."""


class ProbeFailed(JudgeError):
    """The call into the program raised, timed out or sent nothing usable back."""


SIZED_TYPES = frozenset([str, bytes, list, tuple, set, frozenset, dict])
_WALKED = SIZED_TYPES | {range}


def size_at_most(value: Any, limit: int) -> int:
    """The logical size of `value` (items of every nested container, strings by 16 characters),
    counted up to just past `limit`: the walk costs about that, aliasing or not. `[[0] * 1000]
    * 1000` is small in memory but a million to compare or print."""
    total, todo = 0, [value]
    while todo and total <= limit:
        item = todo.pop()
        kind = type(item)
        if kind is str or kind is bytes:
            total += 1 + len(item) // 16
            continue
        if kind is range:  # lazy, but every consumer (list, map, sorted, ...) walks it all
            total += 1 + len(item)
            continue
        total += 1 + (2 * len(item) if kind is dict else len(item) if kind in SIZED_TYPES else 0)
        if total > limit or kind not in SIZED_TYPES:
            continue
        members = [*item.keys(), *item.values()] if kind is dict else item
        todo.extend(x for x in members if type(x) in _WALKED)  # scalars are counted by len() above
    return total


def printable(fn: Callable[[Any], str]) -> Callable[[Any], str]:
    def bounded(value: Any = "") -> str:
        if size_at_most(value, MAX_LENGTH // 16) > MAX_LENGTH // 16:
            raise JudgeError(f"{fn.__name__}() of a value too large")
        return fn(value)
    bounded.__name__ = fn.__name__
    return bounded


def safe_type(*args: Any) -> type:
    if len(args) != 1:
        raise JudgeError("type() takes one argument in the judge (it builds no classes)")
    return type(args[0])


def bounded_range(*args: int) -> range:
    r = range(*args)
    if len(r) > MAX_LENGTH:
        raise JudgeError(f"range of more than {MAX_LENGTH} items")
    return r


def check_hashes(items: list, what: str) -> list:
    """Refuse members whose hashes collide en masse: building them would take quadratic time."""
    for _ in hashes_checked(items, what):
        pass
    return items


def hashes_checked(items: Any, what: str, key: Callable[[Any], Any] | None = None) -> Any:
    """``items`` as they come, refused as soon as more than `MAX_SAME_HASH` share a hash (of
    ``key(item)``, for a dict's pairs): a comprehension over 10^5 colliding values fails at the
    33rd, not after producing them all."""
    counts: dict[int, int] = {}
    for item in items:
        h = hash(item if key is None else key(item))
        counts[h] = counts.get(h, 0) + 1
        if counts[h] > MAX_SAME_HASH:
            raise JudgeError(f"{what} with more than {MAX_SAME_HASH} colliding hashes")
        yield item


def materialised(iterable: Any, what: str) -> list:
    items = []
    for item in iterable:
        items.append(item)
        if len(items) > MAX_LENGTH:
            raise JudgeError(f"{what} of more than {MAX_LENGTH} items")
    return items


def safe_set(iterable: Any = ()) -> set:
    return set(materialised(hashes_checked(iterable, "set"), "set"))


def safe_frozenset(iterable: Any = ()) -> frozenset:
    return frozenset(materialised(hashes_checked(iterable, "frozenset"), "frozenset"))


def safe_dict(*args: Any, **kwargs: Any) -> dict:
    if len(args) > 1:
        raise JudgeError("dict() takes at most one positional argument")
    source = args[0].items() if args and isinstance(args[0], dict) else args[0] if args else ()
    pairs = hashes_checked(itertools.chain(_as_pairs(source), kwargs.items()), "dict", key=lambda pair: pair[0])
    return dict(materialised(pairs, "dict"))


def _as_pairs(items: Any) -> Any:
    for pair in items:
        pair = tuple(pair)
        if len(pair) != 2:
            raise JudgeError("dict() needs pairs")
        yield pair


def safe_pow(base: Any, exp: Any, mod: Any = None) -> Any:
    if mod is None:
        return power(base, exp)
    if isinstance(mod, int) and isinstance(exp, int) and mod.bit_length() * exp.bit_length() > 1 << 24:
        raise JudgeError("modular power too large")  # its cost grows with exp bits x mod bits^2
    return pow(base, exp, mod)


def safe_sum(iterable: Any, start: Any = 0) -> Any:
    if not isinstance(start, (int, float, complex)):
        raise JudgeError("sum() of sequences is not supported by the judge (quadratic)")
    total = start
    for item in iterable:
        total = checked(total + item)
    return total


def safe_round(number: Any, ndigits: Any = None) -> Any:
    if ndigits is not None and isinstance(ndigits, int) and abs(ndigits) > 1000:
        raise JudgeError("round() digits out of range")
    return round(number) if ndigits is None else round(number, ndigits)


def safe_prod(iterable: Any, *, start: Any = 1) -> Any:
    total = start
    for item in iterable:
        total = checked(multiply(total, item))
    return total


def safe_lcm(*integers: int) -> int:
    total = 1
    for n in integers:
        total = checked(math.lcm(total, n))
    return total


def safe_factorial(n: int) -> int:
    if not isinstance(n, int) or n > 20_000:
        raise JudgeError("factorial argument too large")
    return math.factorial(n)


def safe_comb_perm(fn: Callable) -> Callable:
    def bounded(n: int, k: int | None = None) -> int:
        if not isinstance(n, int) or n > 20_000:
            raise JudgeError(f"{fn.__name__} argument too large")
        return fn(n) if k is None else fn(n, k)
    bounded.__name__ = fn.__name__
    return bounded


def safe_bytes(*args: Any) -> bytes:
    if args and isinstance(args[0], int) and args[0] > MAX_LENGTH:
        raise JudgeError("bytes() too long")
    return bytes(*args)


def safe_int(*args: Any) -> int:
    if args and isinstance(args[0], decimal.Decimal) and args[0].is_finite() and args[0].adjusted() > MAX_DECIMAL_EXPONENT:
        raise JudgeError("int() of a Decimal too large")
    return checked(int(*args))


def safe_iter(*args: Any) -> Any:
    if len(args) != 1:
        raise JudgeError("iter() takes one argument in the judge (a callable and a sentinel could loop forever)")
    return iter(args[0])


BUILTINS: dict[str, Any] = {
    name: getattr(builtins, name)
    for name in (
        "abs", "all", "any", "bool", "chr", "complex", "divmod", "enumerate", "filter", "float",
        "isinstance", "issubclass", "len", "list", "map", "max", "min", "ord", "reversed", "sorted",
        "tuple", "zip", "hex", "oct", "bin", "callable", "next", "slice", "hash", "Ellipsis", "NotImplemented",
        "set", "frozenset", "dict", "bytes", "str", "range", "int",
    )
}
# Exception types: for isinstance/issubclass (calling one builds a harmless exception object).
BUILTINS.update({name: value for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)})
BUILTINS.update(pow=safe_pow, sum=safe_sum, round=safe_round, type=safe_type, iter=safe_iter,
                repr=printable(repr), ascii=printable(ascii))
# A type's name binds the type itself (``isinstance(x, set)``, ``type(x) is dict``); calling it, or
# passing it to a function that will (``map(set, xs)``), goes through its bounded constructor.
SAFE_TYPES: dict[type, Callable] = {set: safe_set, frozenset: safe_frozenset, dict: safe_dict, bytes: safe_bytes,
                                    str: printable(str), type: safe_type, range: bounded_range, int: safe_int}
CALLABLE_TYPES = frozenset([type(None), *SAFE_TYPES, *(v for v in BUILTINS.values() if isinstance(v, type))])

# Built-in names the judge refuses when the tests load, with the reason (every other name of
# `builtins` is in BUILTINS or provided by `methods.py`: getattr, hasattr, format).
_REFUSED = {
    "runs code on the host": "eval exec compile __import__ breakpoint __build_class__",
    "does input or output": "open input print help",
    "shows the judge's own state (names, identities)": "globals locals vars dir id",
    "changes objects": "setattr delattr",
    "builds classes or objects": "object property classmethod staticmethod super",
    "builds a mutable buffer, which is not data": "bytearray memoryview",
    "is asynchronous": "aiter anext",
    "is an interactive helper": "exit quit copyright credits license",
    "is a module attribute of the judge": "__debug__ __doc__ __loader__ __name__ __package__ __spec__",
}
REFUSED_BUILTINS: dict[str, str] = {name: reason for reason, names in _REFUSED.items() for name in names.split()}


def _language_builtin(name: str, value: Any) -> bool:
    """Whether ``name`` is one of the built-ins every fresh interpreter has (the language's and
    `site`'s), as opposed to a name put into `builtins` at run time by whatever this process ran
    before: the interactive interpreter's last value ``_``, ``gettext.install``'s ``_``, a
    notebook's helpers. Reading ``dir(builtins)`` live would make what an assert means depend on
    what was imported earlier (a setup's ``for _ in ...`` refused in one process, fine in another)."""
    if name == "_":
        return False
    if (name.startswith("__") and name.endswith("__")) or value is None or value is Ellipsis or value is NotImplemented:
        return True
    module = getattr(value, "__module__", None) if callable(value) else type(value).__module__
    return module in ("builtins", "_sitebuiltins", "io")  # `open` is io.open


def language_builtins() -> frozenset[str]:
    """The built-in names: every one is the host's in an assert, provided or refused (never the
    program's). Those the judge names itself (provided, refused, the constants, and `methods.py`'s
    ``getattr``/``hasattr``/``format``) whatever the process did to `builtins` (a library may
    replace ``print``), and any other name a fresh interpreter has (a newer Python's)."""
    named = {*BUILTINS, *REFUSED_BUILTINS, "True", "False", "None", "getattr", "hasattr", "format"}
    return frozenset(named | {name for name, value in vars(builtins).items() if _language_builtin(name, value)})


LANGUAGE_BUILTINS = language_builtins()

MATH_NAMES = (
    "acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "ceil", "copysign", "cos", "cosh", "degrees",
    "dist", "e", "erf", "erfc", "exp", "expm1", "fabs", "floor", "fmod", "frexp", "fsum", "gamma", "gcd",
    "hypot", "inf", "isclose", "isfinite", "isinf", "isnan", "isqrt", "lcm", "ldexp", "lgamma", "log",
    "log10", "log1p", "log2", "modf", "nan", "pi", "prod", "radians", "remainder", "sin", "sinh", "sqrt",
    "tan", "tanh", "tau", "trunc",
)
MATH: dict[str, Any] = {name: getattr(math, name) for name in MATH_NAMES if hasattr(math, name)}
MATH.update(factorial=safe_factorial, comb=safe_comb_perm(math.comb), perm=safe_comb_perm(math.perm),
             prod=safe_prod, lcm=safe_lcm)


class TrustedModule:
    """A trusted module as the judge exposes it: only the listed attributes."""

    def __init__(self, name: str, members: dict[str, Any]) -> None:
        self.name, self.members = name, members


# ----------------------------------------------------------------------- operators, bounded


def size_of(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)) else 1


def power(base: Any, exp: Any) -> Any:
    if isinstance(exp, fractions.Fraction) and exp.denominator == 1:
        exp = exp.numerator  # a Fraction power with an integral exponent is exact: as large as an int one
    if isinstance(base, (int, fractions.Fraction)) and isinstance(exp, int) and abs(exp) > 1:
        bits = base.bit_length() if isinstance(base, int) else base.numerator.bit_length() + base.denominator.bit_length()
        if bits > 1 and abs(exp) * bits > (MAX_INT_BITS if isinstance(base, int) else MAX_FRACTION_BITS):
            raise JudgeError("power too large")
    return base**exp


def checked(value: Any) -> Any:
    if type(value) is int and value.bit_length() > MAX_INT_BITS:
        raise JudgeError("integer too large")
    if type(value) is fractions.Fraction and value.numerator.bit_length() + value.denominator.bit_length() > MAX_FRACTION_BITS:
        raise JudgeError("fraction too large")
    if type(value) is decimal.Decimal and value.is_finite():
        if abs(value.adjusted()) > MAX_DECIMAL_EXPONENT:
            raise JudgeError("decimal exponent out of range")  # int() or format() of it would be huge
        if len(value.as_tuple().digits) > MAX_DECIMAL_DIGITS:
            raise JudgeError("decimal with too many digits")
    if size_of(value) > MAX_LENGTH:
        raise JudgeError("value too large")
    return value


def repeat(seq: Any, n: Any) -> Any:
    if isinstance(n, int) and n > 0 and isinstance(seq, (str, bytes, list, tuple, collections.deque)):
        per_copy = size_at_most(seq, MAX_LENGTH // n + 1) - 1  # the items, nested ones included
        if len(seq) * n > MAX_LENGTH or per_copy * n > MAX_LENGTH:
            raise JudgeError("repetition too large")
    return seq * n


def multiply(a: Any, b: Any) -> Any:
    if isinstance(a, int) and not isinstance(b, int):
        return repeat(b, a)
    if isinstance(b, int) and not isinstance(a, int):
        return repeat(a, b)
    return a * b


def shift_left(a: Any, b: Any) -> Any:
    if isinstance(b, int) and isinstance(a, int) and a and b + a.bit_length() > MAX_INT_BITS:
        raise JudgeError("shift too large")
    return a << b


def modulo(a: Any, b: Any) -> Any:
    if isinstance(a, (str, bytes)):
        raise JudgeError("%-formatting is not supported by the judge")
    return a % b


HASHED = (set, frozenset, type({}.keys()), type({}.items()))  # operands a set operator rebuilds


def set_operator(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``|``, ``&``, ``-``, ``^`` on sets or dict views build a set of both operands' members in
    one C call no deadline interrupts: their hashes are checked first (counted together)."""
    def bounded(a: Any, b: Any) -> Any:
        if isinstance(a, HASHED) or isinstance(b, HASHED):
            members = [*materialised(a, "set operand"), *materialised(b, "set operand")] if hasattr(b, "__iter__") and hasattr(a, "__iter__") else []
            check_hashes(members, "set operation")
        return op(a, b)
    bounded.__name__ = op.__name__
    return bounded


BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: set_operator(operator.sub), ast.Mult: multiply, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: modulo, ast.Pow: power, ast.LShift: shift_left,
    ast.RShift: operator.rshift, ast.BitOr: set_operator(operator.or_), ast.BitAnd: set_operator(operator.and_),
    ast.BitXor: set_operator(operator.xor),
}
UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg, ast.Invert: operator.invert, ast.Not: operator.not_}
COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
