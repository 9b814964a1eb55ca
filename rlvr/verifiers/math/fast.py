"""The symbolic tier's verdict, decided exactly without sympy when the answer allows it.

Most non-integer answers (``\\frac{3}{4}``, ``2\\sqrt{3}``, ``\\frac{5\\pi}{6}``,
``0.3333``, ``x^2+4x+4``) are sums of terms ``c * sqrt(k) * pi^e * x^m * ...`` with
``c`` rational and ``k`` square-free. Such a sum has exactly one spelling, and sympy
builds that spelling on its own: it collects like terms, merges numeric square roots
(``\\sqrt{8}`` is ``2\\sqrt{2}``), rationalises ``1/\\sqrt{3}`` and distributes a
rational over a sum. What it leaves alone is a product or power of sums, ``x(x+1)``
or ``(x+1)^2``; we keep those unexpanded too, as factors of a term.

So the values built here have sympy's shape, and :func:`_exact_verdict` can retrace
:func:`equal._sympy_verdict` step by step: equal shapes are ``(True, 0)``; otherwise
the difference costs what ``guards._expanded_size`` would estimate for it, and it is
zero exactly when its expanded form is (``expand`` proves every such equality; a
nonzero difference is never proved zero). Same pair, from :class:`fractions.Fraction`
arithmetic: ~20 us instead of sympy's ~1 ms, and sympy is not even imported.

The grammar is ``parse._Parser``'s own (same tokens, same node and depth limits);
only the hooks that build values differ. Where sympy's shape is not modelled (powers
with non-integer or symbolic exponents, roots of anything but a number, cube roots,
division by a sum, sums inside unexpanded sums) or an input comes near one of the
guards in ``guards.py``, a hook raises :class:`_Unsupported` and sympy decides, as
before. ``tests/test_verifier_math_fast.py`` checks the pair against sympy's.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Iterable

from rlvr.verifiers.math.extract import MAX_ANSWER_CHARS
from rlvr.verifiers.math.guards import _COMPARISON_CHARGE, _MAX_EXPANDED_TERMS
from rlvr.verifiers.math.parse import _Parser, _tokenize

# Bounds, all well inside those of guards.py so that sympy would never refuse what
# is decided here (it refuses past 3000 digits, exponents of non-numbers past 100,
# 100 radicand digits, 1600 tree nodes). Past them the answer simply goes to sympy.
_MAX_BITS = 1000  # numerator and denominator of any coefficient (~300 digits)
_MAX_TERMS = 24
_MAX_NODES = 600
_MAX_RATIONAL_EXPONENT = 256
_MAX_TERM_EXPONENT = 32  # a power of a root, pi or a variable
_MAX_MONOMIAL_EXPONENT = 64  # x^64: sympy refuses x^{101}
_MAX_RADICAND = 10**9  # split into square and square-free parts by trial division
_MAX_RADICAND_DIGITS = 50.0  # sympy refuses 100, counted the same way
_MAX_FACTORIAL = 30
_MAX_EXPAND_WORK = 20_000  # term products while multiplying out, ~10 ms at most

_PRIMES = tuple(p for p in range(2, 1000) if all(p % d for d in range(2, math.isqrt(p) + 1)))

# A term: its key and a nonzero coefficient. The key is (square-free radicand, power of
# pi, ((variable, power), ...), ((base, power), ...)); a base is a sum that sympy keeps
# unexpanded, (x+1) in x(x+1) or (x+1)^2, frozen as its sorted (key, coefficient) items.
_Key = tuple
_Term = tuple[_Key, Fraction]
_ONE: _Key = (1, 0, (), ())


class _Unsupported(Exception):
    """sympy's form may not be what is modelled here, or a guard may be near: ask sympy."""


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


def _nodes(terms: dict[_Key, Fraction] | tuple[_Term, ...]) -> int:
    """About the size of sympy's tree (``_check_tree`` refuses 1600 nodes)."""
    items = terms.items() if isinstance(terms, dict) else terms
    return 1 + sum(
        2 + 3 * ((k > 1) + (e != 0) + len(v)) + sum(2 + _nodes(base) for base, _ in opq)
        for (k, e, v, opq), _ in items
    )


def _largest(items: Iterable[_Term]) -> float:
    return max(
        (
            max(_digits(c), _digits(k), _digits(e), *(_digits(m) for _, m in v), *(max(_digits(n), _largest(b)) for b, n in opq))
            for (k, e, v, opq), c in items
        ),
        default=0.0,
    )


class _Exact:
    """A sum of terms, ``{key: coefficient}``, shaped as sympy would shape it."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict[_Key, Fraction]) -> None:
        # A lone term without sums inside has under 250 nodes (76 variable names at most)
        big = len(terms) > 1 or any(key[3] for key in terms)
        if len(terms) > _MAX_TERMS or (big and _nodes(terms) > _MAX_NODES):
            raise _Unsupported("too large")
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

    def as_term(self) -> _Term:
        """A product sympy would build with this as a factor: a term, or a sum kept whole."""
        if len(self.terms) == 1:
            return next(iter(self.terms.items()))
        if not self.terms or any(key[3] for key in self.terms):  # x((x+1)^2+1): not modelled
            raise _Unsupported("nested unexpanded sums")
        return (1, 0, (), ((tuple(sorted(self.terms.items())), 1),)), Fraction(1)

    def digits(self) -> float:
        """The largest number in it, unexpanded sums included, as ``_guarded_pow`` sizes a
        base (it refuses a power when this times the exponent passes 3000)."""
        return _largest(self.terms.items())

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


def _times(a: _Term, b: _Term) -> _Term:
    """The product of two terms: roots merge (``\\sqrt{6}\\sqrt{10} = 2\\sqrt{15}``), so do
    powers of one base (``(x+1)(x+1) = (x+1)^2``)."""
    (ka, ea, va, oa), ca = a
    (kb, eb, vb, ob), cb = b
    if ka * kb > _MAX_RADICAND:  # sympy factors the merged radicand completely up to here
        raise _Unsupported("large radicand")
    g = math.gcd(ka, kb)
    powers, bases = dict(va), dict(oa)
    for name, m in vb:
        powers[name] = powers.get(name, 0) + m
    for base, m in ob:
        bases[base] = bases.get(base, 0) + m
    if max(map(abs, (ea + eb, *powers.values(), *bases.values()))) > _MAX_MONOMIAL_EXPONENT:
        raise _Unsupported("large power")
    monomial = tuple(sorted((n, m) for n, m in powers.items() if m))
    return ((ka // g) * (kb // g), ea + eb, monomial, tuple(sorted(bases.items()))), ca * cb * g


def _from_term(key: _Key, c: Fraction) -> _Exact:
    """A product as sympy leaves it: ``c * (sum)`` alone is distributed (``2(x+1)``)."""
    k, e, v, opq = key
    if k == 1 and not e and not v and len(opq) == 1 and opq[0][1] == 1:
        return _Exact({bk: c * bc for bk, bc in opq[0][0]})  # x(x+1)/x is x+1
    return _Exact({key: c})


def _inverse(term: _Term) -> _Term:
    """``1 / (c sqrt(k) pi^e x^m)`` as sympy writes it: ``sqrt(k) / (c k pi^e x^m)``."""
    (k, e, monomial, opq), c = term
    if opq:
        raise _Unsupported("inverse of a sum")  # needs cancel(); sympy decides
    return (k, -e, tuple((n, -m) for n, m in monomial), ()), 1 / (c * k)


def _expanded(v: _Exact) -> dict[_Key, Fraction]:
    """The canonical form: every unexpanded sum multiplied out (what ``expand`` gives)."""
    total: dict[_Key, Fraction] = {}
    work = 0
    for (k, e, mono, opq), c in v.terms.items():
        product = {(k, e, mono, ()): c}
        for base, n in opq:
            for _ in range(n):
                work += len(product) * len(base)
                if work > _MAX_EXPAND_WORK:
                    raise _Unsupported("large expansion")
                step: dict[_Key, Fraction] = {}
                for t in product.items():
                    for u in base:
                        key, coef = _times(t, u)
                        step[key] = step.get(key, 0) + coef
                product = {key: coef for key, coef in step.items() if coef}
        for key, coef in product.items():
            total[key] = total.get(key, 0) + coef
    return {key: coef for key, coef in total.items() if coef}


def _expanded_size(terms: dict[_Key, Fraction]) -> int:
    """``max(guards._expanded_size(diff))`` for sympy's ``diff`` shaped as ``terms``.

    Every factor but an unexpanded sum counts one term; a sum of ``t`` terms counts
    ``t``, its ``n``-th power ``C(n+t-1, t-1)``; products multiply, sums add, capped.
    """
    cap = _MAX_EXPANDED_TERMS + 1
    total = 0
    for (_, _, _, opq), _ in terms.items():
        size = 1
        for base, n in opq:
            size = min(cap, size * (len(base) if n == 1 else min(cap, math.comb(n + len(base) - 1, len(base) - 1))))
        total = min(cap, total + size)
    return max(total, 1)


class _ExactParser(_Parser):
    """``_Parser``'s grammar with hooks that build :class:`_Exact` values."""

    def number(self, tok: str) -> _Exact:
        whole, _, frac = tok.partition(".")
        if not frac:
            return _Exact.rational(Fraction(int(whole)))
        return _Exact.rational(Fraction(int(whole or "0") * 10 ** len(frac) + int(frac), 10 ** len(frac)))

    def variable(self, name: str) -> _Exact:
        return _Exact({(1, 0, ((name, 1),), ()): Fraction(1)})

    def pi(self) -> _Exact:
        return _Exact({(1, 1, (), ()): Fraction(1)})

    def multiply(self, a: _Exact, b: _Exact) -> _Exact:
        # sympy distributes only a rational over a sum ("2(x+1)", not "x(x+1)")
        for r, v in ((a.as_rational(), b), (b.as_rational(), a)):
            if r is not None:
                return _Exact({key: r * c for key, c in v.terms.items()} if r else {})
        return _from_term(*_times(a.as_term(), b.as_term()))

    def divide(self, a: _Exact, b: _Exact) -> _Exact:
        r = b.as_rational()
        if r == 0:
            raise _Unsupported("division by zero")  # sympy refuses it
        if r is not None:
            return self.multiply(a, _Exact.rational(1 / r))
        if len(b.terms) > 1:
            raise _Unsupported("division by a sum")
        return self.multiply(a, _Exact(dict([_inverse(b.as_term())])))

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
        return _Exact({(k, 0, (), ()): Fraction(s, r.denominator)})

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
        if abs(n) > _MAX_TERM_EXPONENT or base.digits() * abs(n) > _MAX_BITS * 0.3:
            raise _Unsupported("large power")
        term = base.as_term() if n > 0 else _inverse(base.as_term())
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

    Mirrors sympy's steps: equal trees are ``(True, 0)``; otherwise the difference
    costs its estimated expanded size, more than the budget can pay is refused, and
    the rest are equal exactly when their expanded forms are (``expand`` proves
    those equalities; different values can never be proved equal).

    >>> _exact_verdict(r"\\sqrt{8}", r"2\\sqrt{2}")
    (True, 0)
    >>> _exact_verdict("0.3333", r"\\frac{1}{3}")
    (False, 1)
    >>> _exact_verdict("(x+1)^2", "x^2+2x+1")
    (True, 6)
    """
    a, b = _exact(cand), _exact(gold)
    if a is None or b is None:
        return None
    try:
        diff = a - b
        if not diff.terms:
            return True, 0
        cost = _expanded_size(diff.terms)
        if cost > _MAX_EXPANDED_TERMS - _COMPARISON_CHARGE:
            return False, cost
        return not _expanded(diff), cost  # without unexpanded sums, diff is already canonical
    except _Unsupported:  # past a bound of the model; sympy can tell
        return None
