"""Normalisation (both sides) and the exact-number fast path (no sympy).

:func:`_normalise` gives the canonical spelling of an answer; :func:`_same_number`
compares plain numbers (integers, decimals, ``a/b``, ``\\frac{a}{b}``) exactly with
:class:`fractions.Fraction`.
"""

from __future__ import annotations

import functools
import re
import sys
from fractions import Fraction

from rlvr.verifiers.math.extract import _A

_MAX_FAST_DIGITS = 4000  # below CPython's default int<->str limit of 4300 digits

_LEFT_RIGHT = re.compile(r"\\(?:left|right)(?![A-Za-z])", _A)
_SPACING = re.compile(r"\\(?:quad|qquad|displaystyle)(?![A-Za-z])|\\[!,;: ]|~", _A)
_FRAC_VARIANTS = re.compile(r"\\[dt]frac(?![A-Za-z])", _A)
_WHITESPACE = re.compile(r"\s+", _A)
_ASSIGNMENT = re.compile(r"^[A-Za-z]\s*=(?!=)\s*", _A)
_TEXT_WRAP = re.compile(r"^\\(?:text|textrm|mathrm|mbox)\{([^{}]*)\}$", _A)
_TRAILING_ZEROS = re.compile(r"^(-?[0-9]+)\.0+$", _A)
_THOUSANDS = re.compile(r"-?[0-9]{1,3}(?:(?:,|\{,\})[0-9]{3})+(?:\.[0-9]+)?", _A)
_NUMBER = re.compile(
    r"-?(?:[0-9]{1,3}(?:(?:,|\{,\})[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?"
    r"|-?\.[0-9]+|-?[0-9]+/[0-9]+|-?\\frac\{-?[0-9]+\}\{[0-9]+\}",
    _A,
)
# Suffixes dropped after a number; "$" anchors them to the end of the answer.
_SUFFIXES = (
    re.compile(r"\s*\\(?:text|textrm|mathrm|mbox)\{[^{}]*\}(?:\^\{?[0-9]\}?)?$", _A),
    re.compile(r"\s*\^\s*(?:\\circ|\{\s*\\circ\s*\})$", _A),
    re.compile(r"\s*\\?%$", _A),
)


def _strip_number_suffixes(s: str) -> str:
    """Drop a unit, degree sign or percent sign, but only right after a number."""
    for _ in range(3):  # "45^\circ\text{ C}" has two suffixes; three is plenty
        for pattern in _SUFFIXES:
            m = pattern.search(s)
            if m and _NUMBER.fullmatch(s[: m.start()]):
                s = s[: m.start()]
                break
        else:
            return s
    return s


def _normalise(s: str) -> str:
    """Canonical spelling of an answer; applied to both the box and the gold answer.

    >>> _normalise(r" $x = \\dfrac{1}{2}$ ")
    '\\\\frac{1}{2}'
    """
    # Gold answers repeat G times per prompt and boxes repeat within a group: the
    # regex passes below are most of the fast path's cost, so short strings are cached.
    return _normalise_cached(s) if len(s) <= _CACHED_CHARS else _normalise_uncached(s)


_CACHED_CHARS = 600


@functools.lru_cache(maxsize=16384)
def _normalise_cached(s: str) -> str:
    return _normalise_uncached(s)


def _normalise_uncached(s: str) -> str:
    s = s.replace("\\$", "").replace("$", "")  # "\$18" is a price, "$x$" is math mode
    s = _LEFT_RIGHT.sub("", s)
    s = _SPACING.sub(" ", s)
    s = _FRAC_VARIANTS.sub(r"\\frac", s)
    s = _WHITESPACE.sub(" ", s).strip()
    s = _ASSIGNMENT.sub("", s, count=1)
    s = _strip_number_suffixes(s)
    m = _TEXT_WRAP.match(s)
    if m:
        s = m.group(1).strip()
    return _TRAILING_ZEROS.sub(r"\1", s)


# ------------------------------------------------------------------------ exact numbers

_DECIMAL = re.compile(r"(-?)([0-9]*)(?:\.([0-9]+))?", _A)
_SLASH = re.compile(r"(-?)([0-9]+)/([0-9]+)", _A)
_FRAC = re.compile(r"(-?)\\frac\{(-?)([0-9]+)\}\{([0-9]+)\}", _A)


def _fast_digit_limit() -> int:
    """Longest digit string we convert with int(); respects a lowered global limit."""
    get_limit = getattr(sys, "get_int_max_str_digits", None)
    limit = get_limit() if get_limit is not None else 0
    return min(_MAX_FAST_DIGITS, limit) if limit else _MAX_FAST_DIGITS


def _exact_number(s: str) -> Fraction | str | None:
    """Exact value of a plain number (``-12``, ``0.50``, ``3/4``, ``-\\frac{3}{4}``).

    Too long for int(), a decimal becomes its canonical digit string instead (int()
    refuses ~4300+ digits, and raising that limit would change global state).
    """
    m = _DECIMAL.fullmatch(s)
    if m and (m.group(2) or m.group(3)):
        sign, whole, frac = m.group(1), m.group(2).lstrip("0"), (m.group(3) or "").rstrip("0")
        if len(whole) + len(frac) > _fast_digit_limit():
            return f"{sign}{whole}.{frac}"  # never zero at this length
        value = Fraction(int(whole or "0") * 10 ** len(frac) + int(frac or "0"), 10 ** len(frac))
        return -value if sign else value
    negate = False
    m = _SLASH.fullmatch(s)
    if m:
        sign, num, den = m.groups()
    else:
        m = _FRAC.fullmatch(s)
        if not m:
            return None
        outer, sign, num, den = m.groups()
        negate = bool(outer)
    if len(num) + len(den) > _fast_digit_limit() or int(den) == 0:
        return None
    value = Fraction(int(num), int(den))
    return -value if bool(sign) != negate else value


def _same_number(a: str, b: str) -> bool | None:
    """Exact comparison if both sides are plain numbers, else None (undecided)."""
    x, y = _exact_number(a), _exact_number(b)
    if x is None or y is None:
        return None
    return type(x) is type(y) and x == y
