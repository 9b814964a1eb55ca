"""Normalisation (both sides) and the exact-number fast path (no sympy).

:func:`_normalise_parts` gives the canonical spelling of an answer and the unit it
names (:func:`_normalise` the spelling alone); :func:`_units_match` says whether a
candidate's unit may answer a gold's; :func:`_same_number` compares plain numbers
(integers, decimals, ``a/b``, ``\\frac{a}{b}``) exactly with :class:`fractions.Fraction`.
"""

from __future__ import annotations

import functools
import re
import sys
from fractions import Fraction
from typing import NamedTuple

from rlvr.verifiers.math.extract import _A, _match_brace
from rlvr.verifiers.math.forms import _canonical, _tokens
from rlvr.verifiers.math.parse import _GREEK

_MAX_FAST_DIGITS = 4000  # below CPython's default int<->str limit of 4300 digits

# \left( \right) and the sizing commands \bigl( \Bigr] ... only size a delimiter;
# "\left." and "\right." are null delimiters, dropped with their dot.
_DELIMITER_SIZES = re.compile(
    r"\\(?:left|right)(?![A-Za-z])(?:\s*\.)?|\\(?:big|Big|bigg|Bigg)[lrm]?(?![A-Za-z])", _A
)
# Rule "same rendering, same answer": control words that typeset exactly the character
# they name are that character (\lbrace is \{, \mid and \vert are |).
_DELIMITER_WORDS = {
    "lbrace": "\\{", "rbrace": "\\}", "lbrack": "[", "rbrack": "]",
    "mid": "|", "vert": "|", "lvert": "|", "rvert": "|", "lparen": "(", "rparen": ")",
}
_DELIMITER_WORD = re.compile(r"\\(" + "|".join(_DELIMITER_WORDS) + r")(?![A-Za-z])", _A)
# Thousands separators that can only be thousands separators: "1\,000", "11,\!111",
# "11{,}111" (a thin space, a comma pulled tight by a negative thin space, a braced
# comma); groups of three only. A plain "," is decided later (a list or a number?).
_THIN_THOUSANDS = re.compile(
    r"(?<=[0-9])(?:\\,|\\!\s*,(?:\s*\\!)?|,\s*\\!|\{,\}(?:\s*\\!)?)\s*(?=[0-9]{3}(?![0-9]))", _A
)
# "1 000 000": TeX ignores a space in math, so digits on both sides of one are one
# number; read as a thousands separator, groups of three only (as commas are).
_SPACE_THOUSANDS = re.compile(r"(?<=[0-9]) (?=[0-9]{3}(?![0-9]))", _A)
# Spacing and style commands become a space; a "\\\\" line break (a matrix row) is kept whole.
_SPACING = re.compile(
    r"(\\\\)|\\(?:quad|qquad|displaystyle|textstyle|scriptstyle|scriptscriptstyle)(?![A-Za-z])|\\[!,;: ]|~",
    _A,
)
# Every text and font command: a font is a font, its argument is text ("\textbf{meters}").
_FONT = (
    r"\\(?:text|textrm|textnormal|textup|textbf|textit|textsf|texttt|textsl|emph"
    r"|mathrm|mathit|mathbf|mathsf|mathtt|mbox|operatorname)"
)
# Rule "same rendering, same answer" for text and font commands: a text group holding
# only spaces is a space (``\text{ }5``), one holding only a sign is that sign
# (``\text{-}5``); ``\mathrm{e}`` and ``\mathrm{i}`` are the constants e and i wherever they
# stand (``\mathrm{e}^2``); ``\operatorname{sin}`` is ``\sin`` for every name TeX itself
# defines as an operator, ``\mathrm{sin}`` only for the functions (``\mathrm{min}`` and
# ``\mathrm{deg}`` after a number are units: minutes, degrees).
_BLANK_TEXT = re.compile(rf"{_FONT}\s*\{{\s*(?:([-+])\s*)?\}}", _A)
_UPRIGHT_CONSTANT = re.compile(r"\\(?:mathrm|operatorname|textrm|mathit|text)\s*\{\s*([ei])\s*\}", _A)
_OPERATOR_NAMES = "gcd|det|max|min|deg|dim|ker|arg|sup|inf|lim"
_FUNCTION_NAMES = "sin|cos|tan|cot|sec|csc|arcsin|arccos|arctan|sinh|cosh|tanh|coth|log|ln|lg|exp"
_OPERATOR_NAME = re.compile(
    rf"\\operatorname\s*\{{\s*({_FUNCTION_NAMES}|{_OPERATOR_NAMES})\s*\}}"
    rf"|\\mathrm\s*\{{\s*({_FUNCTION_NAMES})\s*\}}",
    _A,
)
_FONT_MARK = re.compile(r"\\(?:text|math|mbox|emph|operatorname)", _A)  # any of the above can be there
# Rule "an array in parentheses is a pmatrix" (in brackets a bmatrix): they render alike.
# Column specs of l/c/r only: a "|" in the spec draws a rule (an augmented matrix).
_ARRAY_MATRIX = re.compile(
    r"([(\[])\s*\\begin\{array\}\{[lcr\s]*\}((?:(?!\\(?:begin|end)\{array\}).)*)\\end\{array\}\s*([)\]])",
    _A | re.DOTALL,
)
_FRAC_VARIANTS = re.compile(r"\\(?:[dt]frac|cfrac(?:\[[lrc]\])?)(?![A-Za-z])", _A)
_OVER = re.compile(r"\\over(?![A-Za-z])", _A)
_WHITESPACE = re.compile(r"\s+", _A)
_GREEK_NAMES = "|".join(sorted(_GREEK))  # the letters parse.py reads as symbols
_VARIABLE = rf"(?:[A-Za-z]|\\(?:{_GREEK_NAMES})(?![A-Za-z]))"
# A label names the quantity an answer gives: x, \theta, x_1, V_{1}, f(x), P(A), (x, y),
# AB, |AB|, \angle ABC, m\angle ABC (its measure), \overline{AB}, \frac{NO}{BO}, and
# ratios of them (V_1:V_2).
_NAME = rf"{_VARIABLE}(?:_(?:\{{[A-Za-z0-9]+\}}|[A-Za-z0-9]))?"
_LABEL_ATOM = (
    rf"{_NAME}(?:\([^()=]*\))?|\((?:\s*{_NAME}\s*,)+\s*{_NAME}\s*\)|[A-Z]{{2,4}}"
    rf"|\|\s*[A-Z]{{1,4}}\s*\||(?:m\s*)?\\angle\s*[A-Z]{{1,3}}|\\overline\{{[A-Z]{{2,4}}\}}"
    rf"|\\frac\{{[A-Z]{{1,4}}\}}\{{[A-Z]{{1,4}}\}}"
)
_LABEL = rf"(?:{_LABEL_ATOM})(?:\s*:\s*(?:{_LABEL_ATOM}))*"
_LABEL_RE = re.compile(_LABEL, _A)
_LEADING_ASSIGNMENT = re.compile(rf"^({_LABEL})\s*(?:=(?!=)|\\in(?![A-Za-z]))\s*", _A)
_TRAILING_ASSIGNMENT = re.compile(rf"(?<![<>!=:\\])=\s*({_VARIABLE})$", _A)
_FUNCTION_ARGUMENT = re.compile(r"\([^()]*\)$", _A)
_LETTER = re.compile("[A-Za-z]", _A)
# ASCII relations: "x <= 1" is x \le 1.
_ASCII_RELATION = re.compile(r"<=|>=", _A)
# Separators that can only separate items: ";" ("(4;0;6)", "-12;-11"), a comma in text
# ("-1\text{, }2"), and \quad or \qquad between two complete parts ("-1 \qquad 2").
_TEXT_COMMA = re.compile(rf"{_FONT}\{{\s*[,;]\s*\}}", _A)
_QUAD_SEPARATOR = re.compile(
    r"(?<=[0-9)\]}])\s*\\q?quad(?![A-Za-z])\s*(?=[-+]?(?:[0-9(\[]|\\\{|\\[dt]?frac|\\sqrt))", _A
)
# A whole answer in text or font commands: "\text{(C)}", "\textbf{(C)}", "\mathrm{e}".
_TEXT_WRAP = re.compile(rf"^{_FONT}\{{([^{{}}]*)\}}$", _A)
_TRAILING_ZEROS = re.compile(r"^(-?[0-9]+)\.0+$", _A)
_THOUSANDS = re.compile(r"-?[0-9]{1,3}(?:(?:,|\{,\})[0-9]{3})+(?:\.[0-9]+)?", _A)
# A plain number: an integer (thousands in groups of three), a decimal, a/b, \frac{a}{b}.
_NUMBER_PATTERN = (
    r"-?(?:[0-9]{1,3}(?:(?:,|\{,\})[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?|-?\.[0-9]+|-?[0-9]+/[0-9]+"
    r"|-?\\frac\{-?[0-9]+\}\{[0-9]+\}"
)
_NUMBER = re.compile(_NUMBER_PATTERN, _A)
# "2\frac{1}{2}" (also "2\frac12") as a whole answer is the mixed number 5/2.
_MIXED = re.compile(r"(-?)([0-9]+) ?\\frac(?:\{([0-9]+)\}\{([0-9]+)\}|([0-9])([0-9]))", _A)
# "0.1\overline{6}": a repeating decimal, exactly 1/6.
_REPEATING = re.compile(r"(-?)([0-9]*)\.([0-9]*)\\overline ?(?:\{([0-9]+)\}|([0-9]))", _A)

# ------------------------------------------------------------------------------- units
# Rule "units compared, not erased": a unit at the end of an answer is split off and
# kept beside the value, in one canonical spelling ("\text{ cm}^2", "\mathrm{cm}^{2}",
# "\text{ square centimeters}" and "cm^2" are all "cm^2"), and equal.py compares it
# (:func:`_units_match`). Text is split off only when every word of it is a unit from
# the table below: text that says anything else ("(or 43)", "-- no wait, 42", ", 3")
# stays, so the answer does not parse and the hedging guard sees it.

_POWER = r"\^\s*(?:[23]|\{\s*[23]\s*\})"
# A degree sign: 45^\circ, 45^{\circ}, 45\degree, or the character U+00B0.
_DEGREE = r"\^\s*(?:\\circ|\{\s*\\circ\s*\})|\\degree(?![A-Za-z])|\u00b0"
# One piece of a unit suffix, matched at the end of what is left: a text group (a
# power may follow it), a degree sign, a percent sign, or a "/" or "\cdot" between units.
_UNIT_PIECE = re.compile(
    rf"\s*(?:{_FONT}\s*\{{[^{{}}]*\}}(?:\s*{_POWER})?"
    rf"|(?:{_DEGREE})(?:\s*[CF])?"
    r"|\\?%|/|\\cdot(?![A-Za-z]))$",
    _A,
)
_UNIT_SEPARATOR_PIECE = re.compile(r"\s*(?:/|\\cdot)$", _A)
# "7 cm", "7cm^2", "60 km/h": unit words written without \text, only after a plain
# number and only when the first word has two letters or more ("7 m" may be 7m). A
# joint between words is "/" or spaces, and a space is read only one way, so the match
# stays linear ("\s*(?:/|\s)\s*" backtracked exponentially on "5 aa  aa  aa ... 1").
_BARE_UNIT = re.compile(
    rf"(?P<value>{_NUMBER_PATTERN})\s*"
    rf"(?P<unit>[A-Za-z]{{2,}}\.?(?:\s*{_POWER})?(?:(?:\s*/\s*|\s+)[A-Za-z]+\.?(?:\s*{_POWER})?)*)",
    _A,
)
# Inside a unit: words, degree signs, percent signs, "/" or "per", products, powers.
_UNIT_TOKEN = re.compile(
    rf"\s*(?:(?P<deg>{_DEGREE}|\\circ(?![A-Za-z]))"
    r"|(?P<pct>\\?%)|(?P<div>/)|(?P<dot>\\cdot(?![A-Za-z])|\\times(?![A-Za-z])|\*|\u00b7)"
    r"|\^\s*(?:(?P<pow>[23])|\{\s*(?P<bpow>[23])\s*\})|(?P<word>[A-Za-z]+)\.?)",
    _A,
)


def _aliases(table: str) -> dict[str, tuple[tuple[str, int], ...]]:
    """``"cm: centimeter centimetre"`` -> every spelling maps to ``(("cm", 1),)``;
    ``"mph = mi h^-1"`` names a compound unit."""
    out: dict[str, tuple[tuple[str, int], ...]] = {}
    for line in table.strip().splitlines():
        if "=" in line:
            name, _, factors = line.partition("=")
            parts = [f.partition("^") for f in factors.split()]
            out[name.strip()] = tuple((atom, int(exp or 1)) for atom, _, exp in parts)
            continue
        atom, _, spellings = line.partition(":")
        for spelling in [atom.strip(), *spellings.split()]:
            out[spelling if len(spelling) == 1 else spelling.lower()] = ((atom.strip(), 1),)
    return out


# Canonical unit: its spellings (singular; plurals in -s/-es are found by the lookup).
# Multi-letter spellings are matched case-insensitively, single letters exactly.
# "unit" is a placeholder ("20 square units" names no unit), so it cancels out.
_UNIT_ALIASES = _aliases(
    """
    mm: millimeter millimetre
    cm: centimeter centimetre
    dm: decimeter decimetre
    m: meter metre
    km: kilometer kilometre
    nm: nanometer nanometre
    um: micron micrometer micrometre
    in: inch
    ft: foot feet
    yd: yard
    mi: mile
    acre:
    ha: hectare
    l: L liter litre
    ml: milliliter millilitre
    gal: gallon
    qt: quart
    pint:
    cup:
    tbsp: tablespoon
    tsp: teaspoon
    mg: milligram milligramme
    g: gram gramme
    kg: kilogram kilogramme
    lb: lbs pound
    oz: ounce
    ton:
    tonne:
    ms: millisecond
    s: sec second
    min: minute
    h: hr hrs hour
    day:
    week: wk
    month:
    yr: yrs year
    decade:
    century: centuries
    dollar: usd
    cent: penny pennies
    pence:
    euro:
    yen:
    deg: degree
    %: percent pct
    rad: radian
    degC: celsius
    degF: fahrenheit
    kelvin:
    way:
    person: people persons
    student:
    child: children
    unit:
    cc = cm^3
    mph = mi h^-1
    kph = km h^-1
    kmh = km h^-1
    """
)
_UNIT_LETTERS = frozenset("mshgl")  # single-letter units, exactly as written (and L)
_SQUARE = {"square": 2, "sq": 2, "cubic": 3, "cu": 3}


def _unit_atoms(word: str) -> tuple[tuple[str, int], ...] | None:
    """The canonical factors of one unit word ("Centimeters" -> cm), or None."""
    if len(word) == 1:
        return _UNIT_ALIASES.get(word) if word in _UNIT_LETTERS or word == "L" else None
    w = word.lower()
    for stem in (w, w[:-1] if w.endswith("s") else "", w[:-2] if w.endswith("es") else ""):
        if len(stem) > 1 and stem in _UNIT_ALIASES:
            return _UNIT_ALIASES[stem]
    return None


def _unit_key(text: str) -> str | None:
    """The canonical unit named by ``text`` ("km/h", "miles per hour", "sq. ft.", "^\\circ C",
    "\\%"), "" for a placeholder or empty text, or None when some word is not a unit."""
    factors: list[list] = []
    divide, power, pos = False, 1, 0
    text = text.strip()
    while pos < len(text):
        m = _UNIT_TOKEN.match(text, pos)
        if m is None:
            return None
        pos = m.end()
        word = m.group("word")
        if m.group("deg") or m.group("pct"):
            factors.append(["deg" if m.group("deg") else "%", -1 if divide else 1])
            divide = False
        elif m.group("div") or word == "per":
            if divide or not factors:
                return None
            divide = True
        elif m.group("pow") or m.group("bpow"):
            if not factors:
                return None
            factors[-1][1] *= int(m.group("pow") or m.group("bpow"))
        elif word is not None and word.lower() in _SQUARE:
            power = _SQUARE[word.lower()]
        elif word in ("C", "F") and factors and factors[-1][0] == "deg":
            factors[-1][0] = "deg" + word  # 45^\circ C: a temperature
        elif word is not None:
            atoms = _unit_atoms(word)
            if atoms is None:
                return None
            if atoms[0][0] in ("degC", "degF") and factors and factors[-1][0] == "deg":
                factors.pop()  # "degrees Celsius"
            factors.extend([atom, exp * power * (-1 if divide else 1)] for atom, exp in atoms)
            divide, power = False, 1
    if divide or power != 1:
        return None  # a dangling "per" or "square"
    total: dict[str, int] = {}
    for atom, exp in factors:
        total[atom] = total.get(atom, 0) + exp
    return "*".join(a if e == 1 else f"{a}^{e}" for a, e in sorted(total.items()) if e and a != "unit")


def _is_plain_number(value: str) -> bool:
    return _NUMBER.fullmatch(value) is not None


def _split_unit(s: str) -> tuple[str, str]:
    """``(value, unit)``: ``7\\text{ cm}^2`` -> ``("7", "cm^2")``; ``("7", "")`` for ``7``.

    The suffix is split off whole or not at all: every piece of it must be a unit. A
    percent sign only after a plain number ("12\\%" is 12 percent, "x\\%" stays x\\%);
    a degree sign after anything (``equal._units_match`` decides what it may match).
    """
    if _PIECE_MARK.search(s) is None:
        return _split_bare_unit(s)  # the common case: no piece can be there
    rest, pieces = s, []
    for _ in range(8):
        m = _UNIT_PIECE.search(rest)
        if m is None:
            break
        pieces.append(m.group())
        rest = rest[: m.start()]
    while pieces and _UNIT_SEPARATOR_PIECE.fullmatch(pieces[-1]):
        rest += pieces.pop()  # a unit never starts with "/": "x/\text{s}" keeps its "/"
    if pieces:
        unit = _unit_key(" ".join(_piece_text(p) for p in reversed(pieces)))
        if unit is None or not rest.strip():
            return s, ""
        if "%" in unit.split("*") and not _is_plain_number(rest.strip()):
            return s, ""
        return rest.strip(), unit
    return _split_bare_unit(s)


_PIECE_MARK = re.compile("[\\\\%/\u00b0]", _A)  # every suffix piece has one of these


def _split_bare_unit(s: str) -> tuple[str, str]:
    """``7 cm^2`` -> ``("7", "cm^2")``: unit words without ``\\text`` after a plain number."""
    if not s[-1:].isalpha() and not s[-1:].isdigit() and s[-1:] not in "}.":
        return s, ""
    m = _BARE_UNIT.fullmatch(s)
    if m is not None and (unit := _unit_key(m.group("unit"))):
        return m.group("value"), unit
    return s, ""


_FONT_GROUP = re.compile(rf"{_FONT}\s*\{{([^{{}}]*)\}}", _A)


def _piece_text(piece: str) -> str:
    """A suffix piece as unit text: ``\\text{ cm}^2`` -> `` cm ^2``."""
    return _FONT_GROUP.sub(lambda m: f" {m.group(1)} ", piece)


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


def _rewrite_over(s: str) -> str:
    """``{a \\over b}`` -> ``\\frac{a}{b}``: TeX's ``\\over`` divides everything before it
    in its group by everything after it (the whole answer when not in a group)."""
    for _ in range(8):  # a few per answer; more is not an answer anyone writes
        m = _OVER.search(s)
        if m is None:
            return s
        start, depth = m.start(), 0
        while start > 0:
            c = s[start - 1]
            if c in "{}" and s[start - 2 : start - 1] != "\\":
                if c == "{" and depth == 0:
                    break
                depth += 1 if c == "}" else -1
            start -= 1
        end, depth = m.end(), 0
        while end < len(s):
            c = s[end]
            if c in "{}" and s[end - 1] != "\\":
                if c == "}" and depth == 0:
                    break
                depth += 1 if c == "{" else -1
            end += 1
        num, den = s[start : m.start()].strip(), s[m.end() : end].strip()
        s = f"{s[:start]}\\frac{{{num}}}{{{den}}}{s[end:]}"
    return s


def _array_as_matrix(s: str) -> str:
    """``(\\begin{array}{cc} 1 & 2 \\end{array})`` -> ``\\begin{pmatrix} 1 & 2 \\end{pmatrix}``
    (in brackets a ``bmatrix``) when the bracketed array is the whole answer."""
    m = _ARRAY_MATRIX.fullmatch(s)
    if m is None or (m.group(1), m.group(3)) not in (("(", ")"), ("[", "]")):
        return s
    env = "pmatrix" if m.group(1) == "(" else "bmatrix"
    return f"\\begin{{{env}}}{m.group(2)}\\end{{{env}}}"


def _label_names(label: str) -> set[str]:
    """The letters (and Greek letters) a label is made of; a function's argument is not
    part of its name (``f(x)`` -> ``{"f"}``)."""
    if not label.startswith("(") and "_" not in label:
        label = _FUNCTION_ARGUMENT.sub("", label)
    return {tok for tok, _, _ in _tokens(label) if tok.isalpha() or tok[1:] in _GREEK}


_IN = re.compile(r"\\in(?![A-Za-z])", _A)  # "\in", not the start of "\infty" or "\int"
# A segment or an angle: "AB", "|AB|", "\overline{AB}", "\angle ABC", "m\angle ABC".
_SEGMENT_LABEL = re.compile(r"(?:\|\s*|\\overline\s*\{)?([A-Z]{2,4})\s*(?:\||\})?|(?:m\s*)?\\angle\s*([A-Z]{1,3})", _A)


def _label_key(label: str) -> str:
    """What a label names, for comparing the labels of two answers: its TeX tokens
    (``x_{1}`` is ``x_1``, ``(x,y)`` is ``(x, y)``); a segment written ``AB``, ``BA``,
    ``|AB|`` or ``\\overline{AB}`` is one name, and so is an angle ``\\angle ABC`` read
    from either end (``\\angle CBA``)."""
    label = label.strip()
    m = _SEGMENT_LABEL.fullmatch(label)
    if m is not None:
        letters = m.group(1) or m.group(2)
        kind = "segment" if m.group(1) else "angle"
        return f"{kind} {min(letters, letters[::-1])}"
    return " ".join(_canonical(label))


def _drop_assignment(s: str) -> tuple[str, str]:
    """Rule "a label names the answer only when it is not on the other side": ``x = 5``,
    ``5 = x``, ``x \\in [1, 2]``, ``f(2) = 3``, ``(p, q) = (3, 2)``, ``AB = 4`` are the
    value; ``y = 2x + 1`` is ``2x + 1``, but ``x = 2x + 1`` stays an equation (``x`` is
    on the right), and so does ``x = y = 3`` (another relation follows). Only names
    are labels: ``2x = 6`` and ``x + y = 3`` stay equations.

    Returns ``(value, label)``, or ``(s, "")`` when no label was dropped; the label is
    kept so that two answers naming different quantities can be told apart
    (``equal._labels_match``)."""
    m = _LEADING_ASSIGNMENT.match(s)
    if m is not None:
        label, rest = m.group(1), s[m.end() :]
    else:
        m = _TRAILING_ASSIGNMENT.search(s)
        if m is None:
            return s, ""
        label, rest = m.group(1), s[: m.start()].strip()
    if not rest or "=" in rest or _IN.search(rest):
        return s, ""
    names = _label_names(label)
    if _LETTER.search(rest) and any(tok in names for tok, _, _ in _tokens(rest)):
        return s, ""
    return rest, label


def _unwrap_group(s: str) -> str:
    """``{1, 3}`` -> ``1, 3``: a brace group around the whole answer renders nothing.
    A few levels only: each costs a scan of the answer (``{{{...}}}`` is no answer)."""
    for _ in range(4):
        if not s.startswith("{") or _match_brace(s, 0) != len(s) - 1:
            break
        s = s[1:-1].strip()
    return s


def _normalise(s: str) -> str:
    """Canonical spelling of an answer without its unit (see :func:`_normalise_parts`).

    >>> _normalise(r" $x = \\dfrac{1}{2}$ ")
    '\\\\frac{1}{2}'
    """
    return _normalise_parts(s).value


class _Answer(NamedTuple):
    """A normalised answer: its canonical spelling, the unit it names ("" for none), the
    spelling with its label when one was dropped (``y = 2x + 1``; else ""), and what that
    label names (:func:`_label_key`; "" for none)."""

    value: str
    unit: str
    labelled: str = ""
    label: str = ""


def _normalise_parts(s: str, keep_assignment: bool = False) -> _Answer:
    """Canonical spelling and unit of an answer; applied to both the box and the gold.

    ``keep_assignment`` keeps a leading ``x =`` (items of a list that name different
    variables: ``x = 1, y = 2`` is not ``y = 1, x = 2``).

    >>> _normalise_parts(r"7\\,\\text{cm}^2")
    _Answer(value='7', unit='cm^2', labelled='', label='')
    """
    # Gold answers repeat G times per prompt and boxes repeat within a group: the
    # regex passes below are most of the fast path's cost, so short strings are cached.
    if len(s) <= _CACHED_CHARS:
        return _normalise_cached(s, keep_assignment)
    return _normalise_uncached(s, keep_assignment)


_CACHED_CHARS = 600


@functools.lru_cache(maxsize=16384)
def _normalise_cached(s: str, keep_assignment: bool) -> _Answer:
    return _normalise_uncached(s, keep_assignment)


def _normalise_uncached(s: str, keep_assignment: bool = False) -> _Answer:
    dollars = "\\$" in s  # "\$18" is a price in dollars (a unit); "$x$" is math mode
    s = s.replace("\\$", "").replace("$", "")
    if "\\" in s:  # each pass below is guarded by a substring its pattern cannot match without
        s = _DELIMITER_SIZES.sub("", s)
        s = _DELIMITER_WORD.sub(lambda m: _DELIMITER_WORDS[m.group(1)], s)
        fonts = _FONT_MARK.search(s) is not None
        if fonts:
            s = _BLANK_TEXT.sub(lambda m: m.group(1) or " ", s)
            s = _UPRIGHT_CONSTANT.sub(r"\1", s)
            s = _OPERATOR_NAME.sub(lambda m: f"\\{m.group(1) or m.group(2)} ", s)
        if "\\begin{array}" in s:
            s = _array_as_matrix(s.strip())
        s = _THIN_THOUSANDS.sub("{,}", s)
        if fonts:
            s = _TEXT_COMMA.sub(",", s)
        if "quad" in s:
            s = _QUAD_SEPARATOR.sub(", ", s)
        s = _SPACING.sub(lambda m: m.group(1) or " ", s)
        s = _FRAC_VARIANTS.sub(r"\\frac", s)
        if "\\over" in s:
            s = _rewrite_over(s)
    elif "~" in s:
        s = s.replace("~", " ")
    if ";" in s:
        s = s.replace(";", ",")
    if "<=" in s or ">=" in s:
        s = _ASCII_RELATION.sub(lambda m: "\\le " if m.group() == "<=" else "\\ge ", s)
    s = _WHITESPACE.sub(" ", s).strip()
    if " " in s:
        s = _SPACE_THOUSANDS.sub("{,}", s)
    if s.startswith("{"):
        s = _unwrap_group(s)
    labelled = label = ""
    if not keep_assignment and ("=" in s or "\\in" in s):
        whole = s
        s, label = _drop_assignment(s)
        if label:
            labelled, label = whole, _label_key(label)
    s, unit = _split_unit(s)
    m = _TEXT_WRAP.match(s)
    if m:
        s = m.group(1).strip()
        if not unit:  # "\text{7 cm}"
            s, unit = _split_unit(s)
    if dollars and not unit:
        unit = "dollar"
    if "\\frac" in s or "\\overline" in s:
        s = _exact_forms(s)
    return _Answer(_TRAILING_ZEROS.sub(r"\1", s), unit, labelled, label)


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
    # A gold number is compared G times per prompt: short strings are cached. At most
    # 600 characters, a string has fewer digits than any int() limit (640 at least), so
    # its value does not depend on that global setting.
    if len(s) <= _CACHED_CHARS:
        return _exact_number_cached(s)
    return _exact_number_uncached(s)


@functools.lru_cache(maxsize=16384)
def _exact_number_cached(s: str) -> Fraction | str | None:
    return _exact_number_uncached(s)


def _exact_number_uncached(s: str) -> Fraction | str | None:
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
    x = _exact_number(a)
    y = _exact_number(b) if x is not None else None
    if x is None or y is None:
        return None
    return type(x) is type(y) and x == y
