"""The symbolic tier's verdict, decided exactly without sympy when the answer allows it.

Most non-integer answers (``\\frac{3}{4}``, ``2\\sqrt{3}``, ``\\frac{5\\pi}{6}``,
``x^2+4x+4``, ``0.3333``) are sums of terms ``c * sqrt(k) * pi^e * x^m * ...`` with
``c`` rational and ``k`` square-free. Such a sum has exactly one spelling, and for
these inputs sympy builds that spelling on its own: it collects like terms, merges
numeric square roots (``\\sqrt{8}`` is ``2\\sqrt{2}``), rationalises ``1/\\sqrt{3}``
and distributes a rational over a sum. So two answers are equal exactly when their
canonical forms are, and :func:`_symbolic_verdict` would return ``(True, 0)`` for
equal ones and ``(False, number of terms of the difference)`` for different ones
(``_expanded_size`` counts one per term). :func:`_exact_verdict` returns that same
pair from :class:`fractions.Fraction` arithmetic, about fifty times faster than
sympy's ~1 ms per comparison, and without importing sympy.

The grammar is ``parse._Parser``'s own (same tokens, same node and depth limits);
only the hooks that build values differ. Whenever sympy's form would not be the
canonical one (a root or pi times a sum, a power or an inverse of a sum, nested
roots, roots of anything but a number, non-integer or symbolic exponents, cube
roots) or the input comes near one of the guards in ``guards.py``, a hook raises
and the comparison goes to sympy exactly as before. ``tests/test_verifier_math_fast.py``
checks the pair against sympy's on generated and adversarial answers.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

from rlvr.verifiers.math.extract import MAX_ANSWER_CHARS
from rlvr.verifiers.math.parse import _Parser, _tokenize

# Bounds, all well inside those of guards.py so that sympy would never refuse what
# is decided here (it refuses past 3000 digits, exponents of non-numbers past 100,
# 100 radicand digits, 1600 tree nodes). Past them the answer simply goes to sympy.
_MAX_BITS = 1000  # numerator and denominator of any coefficient (~300 digits)
_MAX_TERMS = 24
_MAX_FACTORS = 120  # roots, pi and variable powers over all terms of a value
_MAX_RATIONAL_EXPONENT = 256
_MAX_TERM_EXPONENT = 32  # a power of a root, pi or a variable
_MAX_MONOMIAL_EXPONENT = 64  # x^64: sympy refuses x^{101}
_MAX_RADICAND = 10**9  # split into square and square-free parts by trial division
_MAX_RADICAND_DIGITS = 50.0  # sympy refuses 100, counted the same way
_MAX_FACTORIAL = 30

_PRIMES = tuple(p for p in range(2, 1000) if all(p % d for d in range(2, math.isqrt(p) + 1)))

# A term's key: (square-free radicand, power of pi, ((variable, power), ...) sorted).
_Key = tuple[int, int, tuple[tuple[str, int], ...]]
_ONE: _Key = (1, 0, ())


class _Unsupported(Exception):
    """sympy's form may not be canonical here, or a guard may be near: ask sympy."""


def _digits(q: Fraction | int) -> float:
    """Decimal digits as ``guards._size`` counts them (from bit lengths)."""
    q = Fraction(q)
    return max(abs(q.numerator), q.denominator).bit_length() * 0.30103


def _split_square(n: int) -> tuple[int, int]:
    """``n = s^2 * k`` with ``k`` square-free, for ``1 <= n <= 10^9``."""
    s, k, m = 1, 1, n
    for p in _PRIMES:
        if p * p > m:
            break  # m is 1 or a prime
        e = 0
        while m % p == 0:
            m //= p
            e += 1
        s *= p ** (e // 2)
        k *= p ** (e % 2)
    else:  # every prime below 1000 divided out: m <= 10^9 has at most two prime factors
        r = math.isqrt(m)
        if r * r == m:
            return s * r, k
    return s, k * m


class _Exact:
    """A canonical sum of terms: ``{key: nonzero Fraction coefficient}``."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict[_Key, Fraction]) -> None:
        if len(terms) > _MAX_TERMS:
            raise _Unsupported("too many terms")
        factors = sum((k > 1) + (e != 0) + len(v) for k, e, v in terms)
        if factors > _MAX_FACTORS:
            raise _Unsupported("too many factors")
        for c in terms.values():
            if c.numerator.bit_length() > _MAX_BITS or c.denominator.bit_length() > _MAX_BITS:
                raise _Unsupported("coefficient too large")
        self.terms = terms

    @staticmethod
    def rational(q: Fraction) -> _Exact:
        return _Exact({_ONE: q} if q else {})

    def as_rational(self) -> Fraction | None:
        if not self.terms:
            return Fraction(0)
        if len(self.terms) == 1 and _ONE in self.terms:
            return self.terms[_ONE]
        return None

    def __add__(self, other: _Exact) -> _Exact:
        terms = dict(self.terms)
        for key, c in other.terms.items():
            total = terms.get(key, 0) + c
            if total:
                terms[key] = total
            else:
                terms.pop(key, None)
        return _Exact(terms)

    def __neg__(self) -> _Exact:
        return _Exact({key: -c for key, c in self.terms.items()})

    def __sub__(self, other: _Exact) -> _Exact:
        return self + -other


def _times(a: tuple[_Key, Fraction], b: tuple[_Key, Fraction]) -> tuple[_Key, Fraction]:
    """The product of two terms: roots merge (``\\sqrt{6}\\sqrt{10} = 2\\sqrt{15}``)."""
    (ka, ea, va), ca = a
    (kb, eb, vb), cb = b
    if ka * kb > _MAX_RADICAND:  # sympy factors the merged radicand completely up to here
        raise _Unsupported("large radicand")
    g = math.gcd(ka, kb)
    powers = dict(va)
    for name, m in vb:
        powers[name] = powers.get(name, 0) + m
    if any(abs(m) > _MAX_MONOMIAL_EXPONENT for m in powers.values()) or abs(ea + eb) > _MAX_MONOMIAL_EXPONENT:
        raise _Unsupported("large power")
    monomial = tuple(sorted((n, m) for n, m in powers.items() if m))
    return ((ka // g) * (kb // g), ea + eb, monomial), ca * cb * g


def _inverse(key: _Key, c: Fraction) -> tuple[_Key, Fraction]:
    """``1 / (c sqrt(k) pi^e x^m)`` as sympy writes it: ``sqrt(k) / (c k pi^e x^m)``."""
    k, e, monomial = key
    return (k, -e, tuple((n, -m) for n, m in monomial)), 1 / (c * k)


def _single(v: _Exact) -> tuple[_Key, Fraction]:
    if len(v.terms) != 1:
        raise _Unsupported("a sum where sympy keeps a product or power unexpanded")
    return next(iter(v.terms.items()))


class _ExactParser(_Parser):
    """``_Parser``'s grammar with hooks that build :class:`_Exact` values."""

    def number(self, tok: str) -> _Exact:
        whole, _, frac = tok.partition(".")
        return _Exact.rational(Fraction(int(whole or "0") * 10 ** len(frac) + int(frac or "0"), 10 ** len(frac)))

    def variable(self, name: str) -> _Exact:
        return _Exact({(1, 0, ((name, 1),)): Fraction(1)})

    def pi(self) -> _Exact:
        return _Exact({(1, 1, ()): Fraction(1)})

    def multiply(self, a: _Exact, b: _Exact) -> _Exact:
        # sympy distributes only a rational over a sum ("2(x+1)", not "x(x+1)")
        for r, v in ((a.as_rational(), b), (b.as_rational(), a)):
            if r is not None:
                return _Exact({key: r * c for key, c in v.terms.items()} if r else {})
        key, c = _times(_single(a), _single(b))
        return _Exact({key: c})

    def divide(self, a: _Exact, b: _Exact) -> _Exact:
        r = b.as_rational()
        if r == 0:
            raise _Unsupported("division by zero")  # sympy refuses it
        if r is not None:
            return self.multiply(a, _Exact.rational(1 / r))
        if len(a.terms) > 1:  # (1+\sqrt{2})/\sqrt{2} stays a product in sympy
            raise _Unsupported("a sum over a non-rational")
        return self.multiply(a, _Exact(dict([_inverse(*_single(b))])))

    def factorial(self, value: _Exact) -> _Exact:
        r = value.as_rational()
        if r is None or r.denominator != 1 or not 0 <= r <= _MAX_FACTORIAL:
            raise _Unsupported("factorial")
        return _Exact.rational(Fraction(math.factorial(int(r))))

    def root_index(self, index: _Exact) -> int:
        if index.as_rational() != 2:
            raise _Unsupported("only square roots")
        return 2

    def root(self, radicand: _Exact, index: int | None) -> _Exact:
        r = radicand.as_rational()
        if r is None or r < 0:
            raise _Unsupported("root of a non-number or of a negative number")
        self.radicand_digits += _digits(r)
        n = r.numerator * r.denominator  # sqrt(p/q) = sqrt(pq) / q
        if self.radicand_digits > _MAX_RADICAND_DIGITS or n > _MAX_RADICAND:
            raise _Unsupported("large radicand")
        if n == 0:
            return _Exact({})
        s, k = _split_square(n)
        return _Exact({(k, 0, ()): Fraction(s, r.denominator)})

    def pow(self, base: _Exact, exponent: _Exact) -> _Exact:
        n = exponent.as_rational()
        if n is None or n.denominator != 1:
            raise _Unsupported("non-integer exponent")
        n = int(n)
        r = base.as_rational()
        if r is not None:  # guards.py refuses when digits * |n| > 3000
            if r == 0 and n <= 0 or abs(n) > _MAX_RATIONAL_EXPONENT or _digits(r) * abs(n) > _MAX_BITS * 0.3:
                raise _Unsupported("power of a number")
            return _Exact.rational(r**n)
        if n == 1:
            return base
        if n == 0:
            return _Exact.rational(Fraction(1))
        key, c = _single(base)
        if abs(n) > _MAX_TERM_EXPONENT or _digits(c) * abs(n) > _MAX_BITS * 0.3:
            raise _Unsupported("power of a term")
        term = (key, c) if n > 0 else _inverse(key, c)
        result = (_ONE, Fraction(1))
        for _ in range(abs(n)):  # at most 32 small multiplications
            result = _times(result, term)
        return _Exact(dict([result]))

    def checked(self, value: _Exact) -> _Exact:  # the hooks above do their own checks
        return value


@functools.lru_cache(maxsize=4096)  # gold answers repeat across a whole batch
def _exact(s: str) -> _Exact | None:
    """The canonical form of a normalised answer, or None if sympy must decide."""
    if len(s) > MAX_ANSWER_CHARS:
        return None
    try:
        return _ExactParser(_tokenize(s)).parse()
    except Exception:  # _Unsupported, and grammar errors: sympy refuses those itself
        return None


def _exact_verdict(cand: str, gold: str) -> tuple[bool, int] | None:
    """``_symbolic_verdict(cand, gold)`` without sympy, or None when it cannot tell.

    >>> _exact_verdict(r"\\sqrt{8}", r"2\\sqrt{2}")
    (True, 0)
    >>> _exact_verdict("0.3333", r"\\frac{1}{3}")
    (False, 1)
    """
    a, b = _exact(cand), _exact(gold)
    if a is None or b is None:
        return None
    try:
        diff = a - b
    except _Unsupported:  # more terms than the bound; sympy can count them
        return None
    return (True, 0) if not diff.terms else (False, len(diff.terms))
