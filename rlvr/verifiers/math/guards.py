"""Size bounds on symbolic work: what sympy would be asked to build, estimated first.

sympy evaluates eagerly and some of its rewrites are super-linear, so every power,
root and comparison is sized before it is built, and refused (:class:`_Refused`,
which scores 0) past a bound. The bounds are listed in the package docstring.
"""

from __future__ import annotations

import functools
import math
from typing import Any

_MAX_NODES = 400
_MAX_DEPTH = 40
_MAX_LITERAL_DIGITS = 1000
_MAX_RESULT_DIGITS = 3000  # 1000! has 2568 digits
_MAX_FACTORIAL = 1000
_MAX_SYMBOLIC_EXPONENT = 100
_MAX_EXPONENT_UNDER_ROOT = 16
_MAX_EXPONENT_TERMS = 50  # terms of a symbolic exponent once expanded
_MAX_ROOT_INDEX = 300
_MAX_ROOT_WORK = 300
_MAX_RADICAND_DIGITS = 100
_MAX_EXPANDED_TERMS = 1000
_COMPARISON_CHARGE = 50
_MAX_DENEST_RADICALS = 6
_MAX_PROBE_EXPONENT = 1e6


class _Refused(Exception):
    """The input is outside the supported LaTeX subset or outside the size bounds."""


@functools.lru_cache(maxsize=1)
def _sympy() -> Any:
    """Import sympy on first use only, so the numeric fast path never pays for it."""
    import sympy

    return sympy


def _size(n: Any) -> float:
    """Approximate decimal digits of a sympy Rational, without converting it to str."""
    return max(abs(int(n.p)), int(n.q)).bit_length() * 0.30103


def _nodes(expr: Any) -> Any:
    return _sympy().preorder_traversal(expr)


def _largest_integer_power(expr: Any) -> int:
    """The largest ``|k|`` over the powers ``b^k`` of non-numbers inside ``expr``."""
    return max(
        (
            abs(int(node.exp.p))
            for node in _nodes(expr)
            if node.is_Pow and node.exp.is_Integer and not node.base.is_Rational
        ),
        default=0,
    )


def _has_power(expr: Any, symbolic_only: bool) -> bool:
    """Whether ``expr`` holds a power with a symbolic (or, unless ``symbolic_only``,
    any non-integer) exponent."""
    return any(
        node.is_Pow and not node.exp.is_Integer and not (symbolic_only and node.exp.is_Rational)
        for node in _nodes(expr)
    )


def _root_work(expr: Any, index: int = 1) -> float:
    """Largest radicand digits times root index over the numeric roots in ``expr``.

    sympy rationalises ``r^{-1/q}`` by factoring ``r^{q-1}`` (cubic in digits times
    ``q``; half a minute for ``r = 984017284, q = 997``), and merges ``r^{1/2} r^{1/3}``
    into ``r^{5/6}``, so the index that counts is the lcm over all roots of ``r``.
    With ``index > 1`` it is the work after raising ``expr`` to a ``1/index`` power,
    where any number may become a radicand (``(4z)^{1/3} = 4^{1/3} z^{1/3}``).
    """
    indices: dict[Any, int] = {}
    for node in _nodes(expr):
        if node.is_Pow and node.base.is_Rational and node.exp.is_Rational:
            indices[node.base] = math.lcm(indices.get(node.base, 1), int(node.exp.q))
        elif node.is_Rational and index > 1:
            indices.setdefault(node, 1)
    return max((max(_size(r), 1.0) * q * index for r, q in indices.items()), default=0.0)


def _guarded_pow(base: Any, exponent: Any) -> Any:
    """``base ** exponent``, refused when sympy's automatic evaluation would be slow.

    sympy evaluates eagerly: ``9^{9^9}`` would be built digit by digit, integer powers
    are distributed over products (``(85!/z)^{86}`` computes ``(85!)^{86}``), and
    roots of numbers are factored (see :func:`_root_work`). Sizes are estimated from
    bit lengths before anything is built.
    """
    sp = _sympy()
    if base == 0 and exponent.is_negative:
        raise _Refused("division by zero")
    largest = max((_size(n) for n in base.atoms(sp.Rational)), default=0.0)
    if not exponent.is_Integer:
        # Deciding whether (b^k)^e may become b^{ke} makes sympy split b^k into real
        # and imaginary parts, i.e. expand (re b + i im b)^k: seconds for k = 86, and
        # towers of non-integer powers make every such question slow. So no towers.
        inner = (base, exponent) if not exponent.is_Rational else (base,)
        if max(map(_largest_integer_power, (base, exponent))) > _MAX_EXPONENT_UNDER_ROOT:
            raise _Refused("large integer power under a root or symbolic power")
        if any(_has_power(part, symbolic_only=exponent.is_Rational) for part in inner):
            raise _Refused("tower of non-integer powers")
    if not exponent.is_Rational:
        # Symbolic or irrational exponents stay unevaluated, but sympy asks whether a
        # numeric base is prime (slow past a few hundred digits), and probing at
        # rational points must not turn 2^{10^{999} x} into an exact giant power.
        # expand() later splits 2^{(x+3154)^{14}} into powers of 2 with 49-digit
        # exponents, so the numbers of the expanded exponent are what must be small.
        if largest > _MAX_ROOT_WORK or max(_expanded_size(exponent)) > _MAX_EXPONENT_TERMS:
            raise _Refused("symbolic power of large numbers")
        if any(_size(n) > 4 for n in sp.expand(exponent).atoms(sp.Rational)):
            raise _Refused("symbolic power of large numbers")
        return sp.Pow(base, exponent)
    p, q = abs(int(exponent.p)), int(exponent.q)
    if largest * p / q > _MAX_RESULT_DIGITS:
        raise _Refused("power too large")
    if q > 1 and (q > _MAX_ROOT_INDEX or _root_work(base, q) > _MAX_ROOT_WORK):
        raise _Refused("root too expensive")
    if not base.is_Rational and p > _MAX_SYMBOLIC_EXPONENT:
        raise _Refused("exponent too large to expand")
    return sp.Pow(base, exponent)


def _check_tree(expr: Any) -> None:
    """Refuse results that are undefined or too big, however they came about.

    sympy merges powers on its own (``((x+1)^{60})^{60}`` becomes ``(x+1)^{3600}``),
    so the bounds are checked again on the finished tree.
    """
    sp = _sympy()
    if expr.has(sp.zoo, sp.nan, sp.oo, -sp.oo):
        raise _Refused("undefined or infinite")
    for count, node in enumerate(_nodes(expr)):
        if count > 4 * _MAX_NODES:
            raise _Refused("expression too large")
        if node.is_Rational and _size(node) > _MAX_RESULT_DIGITS:
            raise _Refused("number too large")
        if node.is_Pow and not node.base.is_Rational and node.exp.is_Rational:
            if abs(int(node.exp.p)) > _MAX_SYMBOLIC_EXPONENT:
                raise _Refused("exponent too large to expand")


def _expanded_size(expr: Any) -> tuple[int, int]:
    """Upper estimates (capped) of the terms in the expanded numerator and denominator
    of ``expr`` over a common denominator: what ``expand`` and ``cancel`` will build.

    A sum of fractions multiplies denominators, and ``(a+b)^n`` has ``n+1`` terms,
    so small inputs can ask for huge polynomials; this sees that coming.
    """
    cap = _MAX_EXPANDED_TERMS + 1
    if expr.is_Add or expr.is_Mul:
        num, den = (1 if expr.is_Mul else 0), 1
        for n, d in (_expanded_size(a) for a in expr.args):
            if expr.is_Mul:
                num = min(cap, num * n)
            else:  # n/d + N/D = (n*D + N*d) / (d*D)
                num = min(cap, num * d + n * den)
            den = min(cap, den * d)
        return num, den
    if expr.is_Pow and expr.exp.is_Integer:
        n, d = _expanded_size(expr.base)
        k = abs(int(expr.exp))
        num, den = (min(cap, math.comb(k + t - 1, t - 1)) for t in (n, d))
        return (num, den) if expr.exp > 0 else (den, num)
    # roots, symbolic powers, factorials: one term, but the inside is expanded too
    inner = max((max(_expanded_size(a)) for a in expr.args), default=1)
    return (1, 1) if inner < cap else (cap, cap)
