"""Methods and attributes of data, as the judge runs them on the host.

The static cut (see `judge.py`): in an assert, a method or attribute whose name belongs to a
built-in data type (`DATA_NAMES`: every name ``dir()`` lists for ``str``, ``bytes``, ``list``,
``tuple``, ``dict``, ``set``, ``frozenset``, ``int``, ``float``, ``complex``, ``bool``, ``range``,
dict views, ``Fraction``, ``Decimal``, ``deque``), and a subscript, written after a call into the
program, is applied here to the decoded plain value, never in the sandbox. So a returned ``str``
subclass whose ``startswith`` lies comes back as the plain ``str`` and the host's ``startswith``
judges it. What the host offers (`METHODS`): every method of those types that does not change
its receiver, each bounded (widths, replacements, joins, encodings, format specs, hash-building
set methods checked before they run). Methods that change their receiver (`MUTATING`: ``append``,
``sort``, ``pop``, ``update``, ...) are refused: in an assert they change a value nothing reads
again, and the test should compare a result instead. A name the host does not offer fails the
test (0), which is always safe.
"""

from __future__ import annotations

import codecs
import collections
import decimal
import fractions
import string
from typing import Any, Callable

from rlvr.verifiers.code.trusted import (
    MAX_LENGTH,
    JudgeError,
    TrustedModule,
    check_hashes,
    checked,
    materialised,
    size_at_most,
    size_of,
)

_KEYS, _VALUES, _ITEMS = type({}.keys()), type({}.values()), type({}.items())
DATA_TYPES: tuple[type, ...] = (str, bytes, list, tuple, dict, set, frozenset, int, float, complex, bool, type(None),
                                range, _KEYS, _VALUES, _ITEMS, fractions.Fraction, decimal.Decimal, collections.deque)
DATA_NAMES = frozenset(name for kind in DATA_TYPES for name in dir(kind))

MUTATING: dict[type, frozenset[str]] = {
    list: frozenset("append clear extend insert pop remove reverse sort".split()),
    dict: frozenset("clear pop popitem setdefault update".split()),
    set: frozenset("add clear difference_update discard intersection_update pop remove symmetric_difference_update update".split()),
    collections.deque: frozenset("append appendleft clear extend extendleft insert pop popleft remove reverse rotate".split()),
}
MUTATING[collections.Counter] = MUTATING[dict] | {"subtract"}
MUTATING[collections.OrderedDict] = MUTATING[dict] | {"move_to_end"}
MUTATING[collections.defaultdict] = MUTATING[dict]

# Non-callable attributes, read as they are.
DATA_ATTRIBUTES: dict[type, frozenset[str]] = {
    int: frozenset(["real", "imag", "numerator", "denominator"]),
    bool: frozenset(["real", "imag", "numerator", "denominator"]),
    float: frozenset(["real", "imag"]),
    complex: frozenset(["real", "imag"]),
    fractions.Fraction: frozenset(["real", "imag", "numerator", "denominator"]),
    decimal.Decimal: frozenset(["real", "imag"]),
    range: frozenset(["start", "stop", "step"]),
    collections.deque: frozenset(["maxlen"]),
}


def _public_methods(kind: type) -> frozenset[str]:
    attributes = DATA_ATTRIBUTES.get(kind, frozenset())
    return frozenset(n for n in dir(kind) if not n.startswith("_") and n not in attributes) - MUTATING.get(kind, frozenset())


METHODS: dict[type, frozenset[str]] = {kind: _public_methods(kind) for kind in (
    str, bytes, list, tuple, dict, set, frozenset, int, bool, float, complex, range, _KEYS, _ITEMS,
    fractions.Fraction, decimal.Decimal, collections.deque, collections.Counter, collections.OrderedDict,
    collections.defaultdict)}
METHODS[_KEYS] = METHODS[_ITEMS] = frozenset(["isdisjoint"])  # not ``mapping``: a proxy, not data
for _kind in (collections.Counter, collections.OrderedDict, collections.defaultdict):
    METHODS[_kind] -= {"default_factory"}
CLASS_METHODS = frozenset(["fromkeys", "fromhex", "from_bytes", "maketrans", "from_float", "from_decimal"])

_TEXT_CODECS = frozenset(["utf-8", "ascii", "latin-1", "iso8859-1", "utf-16", "utf-16-le", "utf-16-be", "utf-32",
                          "utf-32-le", "utf-32-be", "cp1252"])
_PADDING = frozenset(["center", "ljust", "rjust", "zfill"])
_SET_METHODS = frozenset(["union", "intersection", "difference", "symmetric_difference", "issubset", "issuperset", "isdisjoint"])


def _check_codec(args: tuple, kwargs: dict) -> None:
    name = kwargs.get("encoding", args[0] if args else "utf-8")
    try:
        canonical = codecs.lookup(name).name
    except (LookupError, TypeError):
        raise JudgeError(f"unknown encoding {name!r}") from None
    if canonical not in _TEXT_CODECS:
        raise JudgeError(f"encoding {name!r} is not provided by the judge")


def check_format_spec(spec: Any) -> None:
    """A format spec's widths and precisions (``'{:>1000000000}'``) bounded; nested fields refused."""
    if not isinstance(spec, str) or "{" in spec or len(spec) > 100:
        raise JudgeError("format spec not supported by the judge")
    number = ""
    for ch in spec + " ":
        if ch.isdigit():
            number += ch
        elif number:
            if int(number) > 10_000:
                raise JudgeError("format width or precision too large")
            number = ""


def safe_format(value: Any, spec: str = "") -> str:
    check_format_spec(spec)
    if size_at_most(value, MAX_LENGTH // 16) > MAX_LENGTH // 16:
        raise JudgeError("format() of a value too large")
    return format(value, spec)


def _format_template(template: str, args: tuple, kwargs: dict) -> str:
    """``str.format``: plain field names only (no ``{0.attr}``, ``{0[key]}``), specs bounded."""
    for literal, field, spec, conversion in string.Formatter().parse(template):
        if field is None:
            continue
        if not (field == "" or field.isdigit() or field.isidentifier()):
            raise JudgeError("format fields with attributes or indexes are not supported by the judge")
        check_format_spec(spec or "")
    for value in (*args, *kwargs.values()):
        if size_at_most(value, MAX_LENGTH // 16) > MAX_LENGTH // 16:
            raise JudgeError("format() of a value too large")
    return template.format(*args, **kwargs)


def _check(owner: Any, name: str, args: tuple, kwargs: dict) -> tuple:
    """Bound one call before it runs; returns the (possibly materialised) arguments."""
    if name in _PADDING and args and isinstance(args[0], int) and args[0] > MAX_LENGTH:
        raise JudgeError("width too large")
    if name == "expandtabs":
        size = kwargs.get("tabsize", args[0] if args else 8)
        if isinstance(size, int) and len(owner) + owner.count("\t" if isinstance(owner, str) else b"\t") * size > MAX_LENGTH:
            raise JudgeError("expandtabs result too large")
    if name == "replace" and len(args) >= 2 and type(args[0]) is type(owner) and type(args[1]) is type(owner):
        count = owner.count(args[0]) if args[0] else len(owner) + 1
        if len(owner) + count * len(args[1]) > MAX_LENGTH:
            raise JudgeError("replacement too large")
    if name == "join" and args:
        args = (materialised(args[0], "join"), *args[1:])
        if sum(size_of(x) for x in args[0]) + len(owner) * len(args[0]) > MAX_LENGTH:
            raise JudgeError("join too large")
    if name == "translate" and args and isinstance(owner, str):
        table = args[0]
        if not isinstance(table, dict):
            raise JudgeError("str.translate takes a dict table in the judge")
        longest = max((len(v) for v in table.values() if isinstance(v, str)), default=1)
        if len(owner) * max(longest, 1) > MAX_LENGTH:
            raise JudgeError("translation too large")
    if name in ("encode", "decode"):
        _check_codec(args, kwargs)
    if name == "to_bytes":
        length = kwargs.get("length", args[0] if args else 1)
        if isinstance(length, int) and length > MAX_LENGTH:
            raise JudgeError("to_bytes length too large")
    if name in _SET_METHODS:
        args = tuple(materialised(a, "set argument") for a in args)
        members = [*materialised(owner, "set"), *(x for a in args for x in a)] if not isinstance(owner, type) else []
        check_hashes(members, "set")
    if name == "fromkeys" and args:
        args = (check_hashes(materialised(args[0], "fromkeys"), "dict"), *args[1:])
    if name == "elements" and isinstance(owner, collections.Counter):
        if sum(max(n, 0) for n in owner.values() if isinstance(n, int)) > MAX_LENGTH:
            raise JudgeError("Counter.elements() too long")
    return args


def call_method(owner: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """``owner.name(*args, **kwargs)`` on host data, if offered, bounded; else JudgeError."""
    if isinstance(owner, type):  # an unbound class method: dict.fromkeys, int.from_bytes, ...
        if name not in CLASS_METHODS or name not in METHODS.get(owner, ()):
            raise JudgeError(f"{owner.__name__}.{name} is not available to the judge")
    else:
        kind = type(owner)
        if name not in METHODS.get(kind, ()):
            if name in MUTATING.get(kind, ()):
                raise JudgeError(f"{kind.__name__}.{name} changes its receiver, which the judge never does "
                                 "(in an assert, compare the value instead)")
            raise JudgeError(f"method {name!r} of {kind.__name__} is not available to the judge")
    if name in ("format", "format_map") and isinstance(owner, str):
        return checked(_format_template(owner, args, kwargs if name == "format" else dict(args[0]) if args else {}))
    args = _check(owner, name, args, kwargs)
    return checked(getattr(owner, name)(*args, **kwargs))


class BoundMethod:
    """``value.name`` read without calling it (``map(s.count, "ab")``): calls go through call_method."""

    def __init__(self, owner: Any, name: str) -> None:
        self.owner, self.name = owner, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return call_method(self.owner, self.name, *args, **kwargs)


class UnboundMethod:
    """``str.lower`` read from a type (``map(str.lower, xs)``): its first argument must be of the type."""

    def __init__(self, kind: type, name: str) -> None:
        self.kind, self.name = kind, name

    def __call__(self, owner: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(owner, self.kind):
            raise JudgeError(f"{self.kind.__name__}.{self.name} of a {type(owner).__name__}")
        return call_method(owner, self.name, *args, **kwargs)


def data_attribute(owner: Any, name: Any) -> Any:
    """``owner.name`` for host data, a trusted module or a type: JudgeError if not offered."""
    if not isinstance(name, str):
        raise JudgeError("attribute name must be a string")
    if isinstance(owner, TrustedModule):
        if name not in owner.members:
            raise JudgeError(f"{owner.name}.{name} is not provided by the judge")
        return owner.members[name]
    if isinstance(owner, type):
        if name in DATA_ATTRIBUTES.get(owner, ()) or name not in METHODS.get(owner, ()):
            raise JudgeError(f"attribute {name!r} of the type {owner.__name__} is not available to the judge")
        return BoundMethod(owner, name) if name in CLASS_METHODS else UnboundMethod(owner, name)
    kind = type(owner)
    if name in DATA_ATTRIBUTES.get(kind, ()):
        return getattr(owner, name)
    if name in METHODS.get(kind, ()) or name in MUTATING.get(kind, ()):
        return BoundMethod(owner, name)  # a mutating one fails when called, with the reason
    raise JudgeError(f"attribute {name!r} of {kind.__name__} is not available to the judge")


def safe_getattr(owner: Any, name: str, *default: Any) -> Any:
    try:
        return data_attribute(owner, name)
    except JudgeError:
        if default:
            return default[0]
        raise


def safe_hasattr(owner: Any, name: str) -> bool:
    """True for what the judge offers; for host data, what Python says (reading a built-in type's
    attribute table runs no program code); False otherwise."""
    try:
        data_attribute(owner, name)
        return True
    except JudgeError:
        return isinstance(name, str) and isinstance(owner, DATA_TYPES) and hasattr(owner, name)


ATTRIBUTE_BUILTINS: dict[str, Callable] = {"getattr": safe_getattr, "hasattr": safe_hasattr, "format": safe_format}
