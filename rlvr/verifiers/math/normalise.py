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

# \left( \right) and the sizing commands \bigl( \Bigr] ... only size a delimiter;
# "\left." and "\right." are null delimiters, dropped with their dot.
_DELIMITER_SIZES = re.compile(
    r"\\(?:left|right)(?![A-Za-z])(?:\s*\.)?|\\(?:big|Big|bigg|Bigg)[lrm]?(?![A-Za-z])", _A
)
# "1\,000": a thin space between digit groups is a thousands separator, like "{,}"
# (the groups are checked later, as for commas).
_THIN_THOUSANDS = re.compile(r"(?<=[0-9])\\,(?=[0-9]{3}(?![0-9]))", _A)
# Spacing commands become a space; a "\\\\" line break (a matrix row) is kept whole.
_SPACING = re.compile(r"(\\\\)|\\(?:quad|qquad|displaystyle)(?![A-Za-z])|\\[!,;: ]|~", _A)
_FRAC_VARIANTS = re.compile(r"\\(?:[dt]frac|cfrac(?:\[[lrc]\])?)(?![A-Za-z])", _A)
_WHITESPACE = re.compile(r"\s+", _A)
_ASSIGNMENT = re.compile(r"^[A-Za-z]\s*=(?!=)\s*", _A)
# A whole answer in text or font commands: "\text{(C)}", "\textbf{(C)}", "\mathrm{e}".
_TEXT_WRAP = re.compile(
    r"^\\(?:text|textrm|textbf|textit|textsf|mathrm|mathbf|mathit|mathsf|mbox|emph)\{([^{}]*)\}$", _A
)
_TRAILING_ZEROS = re.compile(r"^(-?[0-9]+)\.0+$", _A)
_THOUSANDS = re.compile(r"-?[0-9]{1,3}(?:(?:,|\{,\})[0-9]{3})+(?:\.[0-9]+)?", _A)
_NUMBER = re.compile(
    r"-?(?:[0-9]{1,3}(?:(?:,|\{,\})[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?"
    r"|-?\.[0-9]+|-?[0-9]+/[0-9]+|-?\\frac\{-?[0-9]+\}\{[0-9]+\}",
    _A,
)
# "2\frac{1}{2}" (also "2\frac12") as a whole answer is the mixed number 5/2.
_MIXED = re.compile(r"(-?)([0-9]+) ?\\frac(?:\{([0-9]+)\}\{([0-9]+)\}|([0-9])([0-9]))", _A)
# "0.1\overline{6}": a repeating decimal, exactly 1/6.
_REPEATING = re.compile(r"(-?)([0-9]*)\.([0-9]*)\\overline ?(?:\{([0-9]+)\}|([0-9]))", _A)

# ----------------------------------------------------------------------------- suffixes
# Suffixes dropped from the end of an answer. Text is dropped only when every word is
# a unit: text that says anything else ("(or 43)", "-- no wait, 42", ", 3") stays, so
# the answer does not parse and the hedging guard sees it.
_TEXT_SUFFIX = re.compile(
    r"\s*\\(?:text|textrm|mathrm|mbox)\{([^{}]*)\}(?:\s*\^\s*(?:[23]|\{\s*[23]\s*\}))?$", _A
)
_DEGREE_SUFFIX = re.compile(  # 45^\circ, 45^{\circ}, 45\degree, 45°, each optionally then C or F
    r"\s*(?:\^\s*(?:\\circ|\{\s*\\circ\s*\})|\\degree(?![A-Za-z])|\u00b0)"
    r"\s*(?:\\(?:text|textrm|mathrm|mbox)\{\s*[CF]\s*\}|[CF])?$",
    _A,
)
_PERCENT_SUFFIX = re.compile(r"\s*(?:\\?%|\\(?:text|textrm|mathrm|mbox)\{\s*percent\s*\})$", _A)
_UNIT_WORD = re.compile(r"([A-Za-z]+)\.?(?:\^(?:[23]|\{[23]\}))?", _A)
_UNIT_SEPARATOR = re.compile(r"\s+|\s*/\s*|\s*\\cdot\s*", _A)
# Units of length, area, volume, mass, time, speed, money, angle and temperature, and
# a few counted things; plurals with -s/-es are accepted. Matched case-insensitively,
# except single letters (lowercase only, and L for litres).
_UNITS = frozenset(
    """
    mm cm dm m km in inch ft foot feet yd yard mi mile meter metre millimeter millimetre
    centimeter centimetre kilometer kilometre nm micron
    sq square cubic cu unit acre hectare ha l liter litre ml milliliter millilitre cc gal
    gallon quart qt pint cup tbsp tsp tablespoon teaspoon
    mg g kg gram gramme kilogram milligram lb lbs pound oz ounce ton tonne
    ms s sec second min minute h hr hrs hour day week month year yr yrs decade century centuries
    mph kph kmh per
    dollar cent euro yen penny pennies pence usd
    degree deg radian rad celsius fahrenheit kelvin
    way people person persons student child children
    """.split()
)


def _is_unit(text: str) -> bool:
    """Whether ``text`` (the inside of a ``\\text{...}``) names only units: "cm",
    "square units", "km/h", "miles per hour", "sq. ft."; empty text is harmless too."""
    for word in _UNIT_SEPARATOR.split(text.strip()):
        if not word:
            continue
        m = _UNIT_WORD.fullmatch(word)
        if m is None:
            return False
        w = m.group(1)
        if len(w) == 1:
            if w not in "msghlL":
                return False
            continue
        w = w.lower()
        plural = w.endswith("s") and (w[:-1] in _UNITS or (w.endswith("es") and w[:-2] in _UNITS))
        if w not in _UNITS and not plural:
            return False
    return True


def _strip_number_suffixes(s: str) -> str:
    """Drop units, degree signs and a percent sign from the end of an answer.

    A unit or degree sign may follow any answer ("2\\sqrt{2}\\text{ cm}"), a percent
    sign only a plain number ("12\\%" is 12, but "x\\%" is not x). Up to three
    suffixes: "45^\\circ\\text{ C}", "5\\text{ cm}^2".
    """
    rest = s
    for _ in range(3):
        m = _TEXT_SUFFIX.search(rest)
        if m and _is_unit(m.group(1)):
            rest = rest[: m.start()]
            continue
        m = _DEGREE_SUFFIX.search(rest) or _PERCENT_SUFFIX.search(rest)
        if m is None:
            break
        if m.re is _PERCENT_SUFFIX and not _NUMBER.fullmatch(rest[: m.start()]):
            break
        rest = rest[: m.start()]
    return rest if rest.strip() else s


def _exact_forms(s: str) -> str:
    """A whole-answer mixed number or repeating decimal as the fraction it denotes."""
    m = _MIXED.fullmatch(s)
    if m:
        sign, whole = m.group(1), int(m.group(2))
        num, den = int(m.group(3) or m.group(5)), int(m.group(4) or m.group(6))
        if 0 < num < den:  # "2\frac{3}{2}" is no mixed number: left for the parser (refused)
            return f"{sign}\\frac{{{whole * den + num}}}{{{den}}}"
        return s
    m = _REPEATING.fullmatch(s)
    if m and len(s) <= 60:
        sign, whole, head, cycle = m.group(1), m.group(2), m.group(3), m.group(4) or m.group(5)
        # 0.1(6) = (16 - 1) / 90: the digits through one cycle minus those before it
        value = Fraction(int(whole + head + cycle) - int(whole + head or "0"), 10 ** len(head) * (10 ** len(cycle) - 1))
        value = -value if sign else value
        return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
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
    s = _DELIMITER_SIZES.sub("", s)
    s = _THIN_THOUSANDS.sub("{,}", s)
    s = _SPACING.sub(lambda m: m.group(1) or " ", s)
    s = _FRAC_VARIANTS.sub(r"\\frac", s)
    s = _WHITESPACE.sub(" ", s).strip()
    s = _ASSIGNMENT.sub("", s, count=1)
    s = _strip_number_suffixes(s)
    m = _TEXT_WRAP.match(s)
    if m:
        s = m.group(1).strip()
    if "\\frac" in s or "\\overline" in s:
        s = _exact_forms(s)
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
