"""Strict, fast reward for math answers written in ``\\boxed{...}``.

A lenient verifier gets gamed by the policy (hedging, listing candidates, dumping a
float approximation), so every rule here errs towards 0. The public entry points are

* :func:`boxed_math` -- the reward, 1.0 or 0.0, and
* :func:`extract_last_boxed` -- the answer a completion commits to.

Comparison happens in three tiers, cheapest first:

1. equal strings after :func:`_normalise`;
2. exact numbers (integers, decimals, ``a/b``, ``\\frac{a}{b}``): plain string/regex
   work plus :class:`fractions.Fraction`; sympy is never imported on this path;
3. symbolic equality: a small LaTeX-subset parser of our own (no ``eval``, no
   ``sympify``) builds sympy objects under size guards, then exact simplification.

Bounds that keep every call well under a second (there is no timeout: signals only
work in the main thread, so the inputs are bounded instead):

* box content at most ``MAX_ANSWER_CHARS`` (500) characters; the symbolic tier also
  refuses longer gold answers;
* at most ``_MAX_LITERAL_DIGITS`` digits in one literal and ``_MAX_RESULT_DIGITS``
  digits in any integer built (``9^{9^{9^9}}`` is refused, not computed);
* at most ``_MAX_RADICAND_DIGITS`` digits in all the numbers under roots/fractional
  powers of one expression together, root index at most ``_MAX_ROOT_INDEX``
  (sympy factors radicands, and merges ``\\sqrt{a}\\sqrt{b}`` into ``\\sqrt{ab}``);
  factorials of at most
  ``_MAX_FACTORIAL``; integer powers of non-numbers at most ``_MAX_SYMBOLIC_EXPONENT``;
* at most ``_MAX_NODES`` parse nodes, ``_MAX_DEPTH`` nesting levels, and an estimated
  expanded size of ``_MAX_EXPANDED_TERMS`` terms before anything is expanded;
* no ``sympy.simplify`` (unpredictable run time); nested square roots are denested
  only when at most ``_MAX_DENEST_RADICALS`` roots are involved.

A verdict that cannot be reached inside these bounds is 0.
"""

from __future__ import annotations

import functools
import math
import re
import sys
from fractions import Fraction
from typing import Any, Callable

__all__ = ["boxed_math", "extract_last_boxed", "MAX_ANSWER_CHARS"]

MAX_ANSWER_CHARS = 500
_MAX_DISTINCT_BOXES = 16  # more distinct boxed answers than this is a hedge, not a proof
_MAX_LITERAL_DIGITS = 1000
_MAX_RESULT_DIGITS = 3000  # 1000! has 2568 digits
_MAX_FAST_DIGITS = 4000  # below CPython's default int<->str limit of 4300 digits
_MAX_RADICAND_DIGITS = 100
_MAX_ROOT_INDEX = 1000
_MAX_FACTORIAL = 1000
_MAX_SYMBOLIC_EXPONENT = 100
_MAX_NODES = 400
_MAX_DEPTH = 40
_MAX_EXPANDED_TERMS = 2000
_MAX_DENEST_RADICALS = 6

_A = re.ASCII  # "\d", "\s" and "\w" must never match full-width or other Unicode look-alikes


# --------------------------------------------------------------------------- extraction

_BOX_CMD = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])\s*", _A)


def _match_brace(text: str, open_at: int) -> int | None:
    """Index of the ``}`` closing the ``{`` at ``open_at``, or None if unclosed.

    A linear scan with a depth counter (no recursion, so 10,000 nested braces are
    fine). A backslash escapes the next character so ``\\{`` and ``\\}`` do not count.
    """
    depth = 0
    i, n = open_at, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def _boxes(text: str) -> list[str | None]:
    """Raw contents of the top-level boxes in order; None marks a malformed box.

    A malformed box is a box command without a ``{`` or with an unclosed one. An
    unclosed brace swallows the rest of the text, so it is always the last entry.
    """
    found: list[str | None] = []
    pos = 0
    while (m := _BOX_CMD.search(text, pos)) is not None:
        start = m.end()
        if start >= len(text) or text[start] != "{":
            found.append(None)
            pos = start
            continue
        end = _match_brace(text, start)
        if end is None:
            found.append(None)
            break
        found.append(text[start + 1 : end])
        pos = end + 1
    return found


def _unwrap_nested(content: str) -> str:
    """``\\boxed{\\boxed{5}}`` -> ``5``: strip boxes that wrap the whole content."""
    while True:
        s = content.strip()
        m = _BOX_CMD.match(s)
        if m is None or not s.endswith("}") or s[m.end() : m.end() + 1] != "{":
            return content
        if _match_brace(s, m.end()) != len(s) - 1:
            return content
        content = s[m.end() + 1 : -1]


def extract_last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}``/``\\fbox{...}`` in ``text``.

    Returns None when there is no box, when the last box is malformed (no brace or an
    unclosed one) or when its content is longer than ``MAX_ANSWER_CHARS``. A box that
    wraps the whole content of the box around it is unwrapped. The content is returned
    as written (not normalised), so it may be empty.

    >>> extract_last_boxed(r"so $x = \\boxed{\\frac{1}{2}}$, i.e. \\boxed{ \\boxed{0.5} }")
    '0.5'
    >>> extract_last_boxed(r"\\boxed{1} then \\boxed{2") is None
    True
    """
    try:
        boxes = _boxes(text)
        if not boxes or boxes[-1] is None or len(boxes[-1]) > MAX_ANSWER_CHARS:
            return None
        return _unwrap_nested(boxes[-1])
    except Exception:  # a reward must never crash the training loop
        return None


# ------------------------------------------------------------------------ normalisation

_LEFT_RIGHT = re.compile(r"\\(?:left|right)(?![A-Za-z])", _A)
_SPACING = re.compile(r"\\(?:quad|qquad|displaystyle)(?![A-Za-z])|\\[!,;: ]|~", _A)
_FRAC_VARIANTS = re.compile(r"\\[dt]frac(?![A-Za-z])", _A)
_ASSIGNMENT = re.compile(r"^[A-Za-z]\s*=(?!=)\s*", _A)
_WHITESPACE = re.compile(r"\s+", _A)
_TEXT_WRAP = re.compile(r"^\\(?:text|textrm|mathrm|mbox)\{([^{}]*)\}$", _A)

_NUMBER = (
    r"-?(?:[0-9]{1,3}(?:(?:,|\{,\})[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?"
    r"|-?\.[0-9]+|-?[0-9]+/[0-9]+|-?\\frac\{-?[0-9]+\}\{[0-9]+\}"
)
_IS_NUMBER = re.compile(rf"(?:{_NUMBER})", _A)
# Suffixes dropped after a number; "$" anchors them to the end of the answer.
_SUFFIXES = (
    re.compile(r"\s*\\(?:text|textrm|mathrm|mbox)\{[^{}]*\}(?:\^\{?[0-9]\}?)?$", _A),
    re.compile(r"\s*\^\s*(?:\\circ|\{\s*\\circ\s*\})$", _A),
    re.compile(r"\s*\\?%$", _A),
)
_TRAILING_ZEROS = re.compile(r"^(-?[0-9]+)\.0+$", _A)


def _strip_number_suffixes(s: str) -> str:
    """Drop units, degrees and percent signs, but only when a number precedes them."""
    for _ in range(3):  # "45^\circ\text{ C}" has two suffixes; three is plenty
        for pattern in _SUFFIXES:
            m = pattern.search(s)
            if m and _IS_NUMBER.fullmatch(s[: m.start()]):
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


# --------------------------------------------------------------------- exact numbers

_DECIMAL = re.compile(r"(-?)([0-9]*)(?:\.([0-9]+))?", _A)
_SLASH = re.compile(r"(-?)([0-9]+)/([0-9]+)", _A)
_FRAC = re.compile(r"(-?)\\frac\{(-?)([0-9]+)\}\{([0-9]+)\}", _A)
_THOUSANDS = re.compile(r"-?[0-9]{1,3}(?:(?:,|\{,\})[0-9]{3})+(?:\.[0-9]+)?", _A)

# An exact number: a Fraction when small enough to convert, otherwise the canonical
# decimal string (int() refuses more than ~4300 digits and must stay refused globally).
_Exact = Fraction | str


def _fast_digit_limit() -> int:
    """Longest digit string we convert with int(); respects a lowered global limit."""
    get_limit = getattr(sys, "get_int_max_str_digits", None)
    limit = get_limit() if get_limit is not None else 0
    return min(_MAX_FAST_DIGITS, limit) if limit else _MAX_FAST_DIGITS


def _exact_number(s: str) -> _Exact | None:
    """Exact value of a plain number (``-12``, ``0.50``, ``3/4``, ``-\\frac{3}{4}``)."""
    m = _DECIMAL.fullmatch(s)
    if m and (m.group(2) or m.group(3)):
        sign, whole, frac = m.group(1), m.group(2).lstrip("0"), (m.group(3) or "").rstrip("0")
        if len(whole) + len(frac) > _fast_digit_limit():
            return f"{sign}{whole}.{frac}"  # canonical digits; never zero at this length
        value = Fraction(int(whole or "0") * 10 ** len(frac) + int(frac or "0"), 10 ** len(frac))
        return -value if sign else value
    m = _SLASH.fullmatch(s)
    negate = False
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


# ---------------------------------------------------------------------- LaTeX parser


class _Refused(Exception):
    """The input is outside the supported LaTeX subset or outside the size bounds."""


_TOKEN = re.compile(
    r"\s*(?:(?P<num>[0-9]+(?:\.[0-9]+)?|\.[0-9]+)|(?P<var>[A-Za-z])"
    r"|\\(?P<cmd>[A-Za-z]+)|(?P<op>[-+*/^!(){}\[\]]))",
    _A,
)
_GREEK = frozenset(
    "alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda "
    "mu nu xi rho sigma tau upsilon phi varphi chi psi omega".split()
)
_MULTIPLY = frozenset({"*", "\\cdot", "\\times"})
_DIVIDE = frozenset({"/", "\\div"})


def _tokenize(s: str) -> list[str]:
    """Split into tokens: numbers, one-letter variables, ``\\commands`` and operators."""
    tokens: list[str] = []
    pos = 0
    s = s.rstrip()
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        if m is None:
            raise _Refused(f"unexpected character at {pos}")
        tok = m.group("num") or m.group("var") or m.group("op")
        if tok is None:
            tok = "\\" + m.group("cmd")
        if m.group("num") and len(tok) > _MAX_LITERAL_DIGITS:
            raise _Refused("literal too long")
        tokens.append(tok)
        pos = m.end()
    return tokens


def _is_numeric(tok: str) -> bool:
    return tok[0] in "0123456789."


class _Parser:
    """Recursive-descent parser for a LaTeX subset, building guarded sympy objects.

    Grammar (implicit multiplication binds like ``*``)::

        expr    := term (("+" | "-") term)*
        term    := unary (("*" | "/" | \\cdot | \\times | \\div) unary | power)*
        unary   := ("+" | "-")* power
        power   := postfix ("^" ("+" | "-")? postfix)?
        postfix := atom "!"*
        atom    := number | letter | \\pi | \\greek | "(" expr ")" | "{" expr "}"
                 | \\frac arg arg | \\sqrt ("[" expr "]")? arg

    ``a^b^c`` is refused as in LaTeX (double superscript); ``2^10`` reads the whole
    number as the exponent, which is what writers of ``2^10`` mean.
    """

    def __init__(self, tokens: list[str], sp: Any) -> None:
        self.tokens = tokens
        self.i = 0
        self.sp = sp
        self.nodes = 0
        self.radicand_digits = 0.0
        self.depth = 0

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise _Refused(f"expected {expected!r}, got {tok!r}")
        self.i += 1
        return tok

    def parse(self) -> Any:
        expr = self.expr()
        if self.peek() is not None:
            raise _Refused(f"trailing token {self.peek()!r}")
        return expr

    def expr(self) -> Any:
        value = self.term()
        while self.peek() in ("+", "-"):
            sign = self.take()
            right = self.term()
            value = value + right if sign == "+" else value - right
        return value

    def term(self) -> Any:
        value = self.unary()
        while (tok := self.peek()) is not None:
            if tok in _MULTIPLY or tok in _DIVIDE:
                self.take()
                right = self.unary()
            elif tok in ("(", "{", "\\frac", "\\sqrt", "\\pi") or tok[0].isalpha() or (
                tok[1:] in _GREEK
            ):
                right = self.power()  # implicit multiplication: "2x", "3\sqrt{2}"
            else:
                break  # a number right after a factor ("2 3", "0x2") ends up refused
            value = value / _nonzero(right) if tok in _DIVIDE else value * right
        return value

    def unary(self) -> Any:
        negative = False
        while self.peek() in ("-", "+"):  # a loop, not recursion: "-----1" is legal
            negative ^= self.take() == "-"
        value = self.power()
        return -value if negative else value

    def power(self) -> Any:
        base = self.postfix()
        if self.peek() != "^":
            return base
        self.take()
        negative = False
        if self.peek() in ("-", "+"):
            negative = self.take() == "-"
        exponent = self.postfix()
        if self.peek() == "^":
            raise _Refused("double superscript")
        return self.pow(base, -exponent if negative else exponent)

    def postfix(self) -> Any:
        value = self.atom()
        while self.peek() == "!":
            self.take()
            value = _guarded_factorial(self.sp, value)
        return value

    def atom(self) -> Any:
        # Every nesting ("(", "{", \sqrt, \frac) passes through here, so counting depth
        # here bounds the recursion far below Python's limit, in any thread.
        self.nodes += 1
        self.depth += 1
        if self.nodes > _MAX_NODES or self.depth > _MAX_DEPTH:
            raise _Refused("expression too large or too deeply nested")
        value = self.atom_body(self.take())
        self.depth -= 1
        return value

    def atom_body(self, tok: str) -> Any:
        sp = self.sp
        if _is_numeric(tok):
            return _literal(sp, tok)
        if len(tok) == 1 and tok.isalpha():
            return _symbol(sp, tok)
        if tok in ("(", "{"):
            inner = self.expr()
            self.take(")" if tok == "(" else "}")
            return inner
        if tok == "\\pi":
            return sp.pi
        if tok[1:] in _GREEK:
            return _symbol(sp, tok[1:])
        if tok == "\\frac":
            numerator = self.argument()
            return numerator / _nonzero(self.argument())
        if tok == "\\sqrt":
            return self.sqrt()
        raise _Refused(f"unsupported token {tok!r}")

    def sqrt(self) -> Any:
        index = self.sp.Integer(2)
        if self.peek() == "[":
            self.take()
            index = self.expr()
            self.take("]")
            if not index.is_Integer or not 2 <= index <= _MAX_ROOT_INDEX:
                raise _Refused("root index must be a small integer")
        return self.pow(self.argument(), 1 / index)

    def pow(self, base: Any, exponent: Any) -> Any:
        """A guarded power that also charges the expression's radicand budget.

        sympy merges numeric radicals (``\\sqrt{a}\\sqrt{b}`` -> ``\\sqrt{ab}``) and
        factors the merged radicand, so the digits under all roots add up: fifteen
        300-digit radicands took minutes before this budget existed.
        """
        if exponent.is_Rational and not exponent.is_Integer:
            self.radicand_digits += sum(
                _digits(max(abs(int(n.p)), int(n.q))) for n in base.atoms(self.sp.Rational)
            )
            if self.radicand_digits > _MAX_RADICAND_DIGITS:
                raise _Refused("too many digits under roots")
        return _guarded_pow(self.sp, base, exponent)

    def argument(self) -> Any:
        """A ``{group}`` or, as TeX reads ``\\frac12``, a single character."""
        tok = self.peek()
        if tok == "{":
            return self.atom()
        if tok is not None and _is_numeric(tok) and len(tok) > 1:
            if tok[0] == ".":
                raise _Refused("bare decimal point as an argument")
            self.tokens[self.i] = tok[1:]  # "\frac12" -> argument "1", then "2"
            return _literal(self.sp, tok[0])
        return self.atom()


# ----------------------------------------------------------------- guarded sympy nodes


def _digits(n: int) -> float:
    """Approximate number of decimal digits of ``|n|`` without converting it to str."""
    return abs(n).bit_length() * 0.30103


def _literal(sp: Any, tok: str) -> Any:
    """Exact sympy number for a literal such as ``12`` or ``0.125`` (never a float)."""
    whole, _, frac = tok.partition(".")
    if not frac:
        return sp.Integer(int(whole))
    return sp.Rational(int(whole or "0") * 10 ** len(frac) + int(frac), 10 ** len(frac))


def _symbol(sp: Any, name: str) -> Any:
    """A real variable. Answers live on the reals, and for complex symbols sympy's
    automatic simplification of e.g. ``\\sqrt{(1-y^{80})^2}`` expands ``im(y^80)``
    into a degree-80 polynomial (seconds); for real ones it is ``Abs(1-y^80)``."""
    return sp.Symbol(name, real=True)


def _nonzero(x: Any) -> Any:
    if x == 0:
        raise _Refused("division by zero")
    return x


def _small_numbers_only(sp: Any, expr: Any, limit: int = 10_000) -> bool:
    """True if every number inside ``expr`` has numerator and denominator <= limit."""
    return all(abs(n.p) <= limit and n.q <= limit for n in expr.atoms(sp.Rational))


def _guarded_pow(sp: Any, base: Any, exponent: Any) -> Any:
    """``base ** exponent``, refused when the exact result would be huge or slow.

    sympy evaluates rational powers eagerly (``9^{9^9}`` would be built digit by
    digit, and fractional powers of big integers trigger factoring), so the size is
    estimated from bit lengths first.
    """
    if exponent.is_Rational:
        p, q = int(exponent.p), int(exponent.q)
        if q > _MAX_ROOT_INDEX:
            raise _Refused("root index too large")
        if base.is_Rational:
            size = _digits(max(abs(int(base.p)), int(base.q)))
            if base == 0 and p < 0:
                raise _Refused("division by zero")
            if size * abs(p) / q > _MAX_RESULT_DIGITS:
                raise _Refused("power too large")
        elif abs(p) > _MAX_SYMBOLIC_EXPONENT:
            raise _Refused("exponent too large to expand")
    elif not _small_numbers_only(sp, exponent):
        # Symbolic or irrational exponents stay unevaluated, but probing them at
        # rational points must not turn 2^{10^{999} x} into an exact giant power.
        raise _Refused("exponent holds large numbers")
    return sp.Pow(base, exponent)


def _guarded_factorial(sp: Any, value: Any) -> Any:
    if not value.is_Integer or not 0 <= value <= _MAX_FACTORIAL:
        raise _Refused("factorial only of small non-negative integers")
    return sp.factorial(value)


def _check_tree(sp: Any, expr: Any) -> None:
    """Refuse results that are undefined or too big, however they came about.

    sympy merges powers on its own (``((x+1)^{60})^{60}`` becomes ``(x+1)^{3600}``),
    so the exponent bound is checked again on the finished tree.
    """
    if expr.has(sp.zoo, sp.nan, sp.oo, -sp.oo):
        raise _Refused("undefined or infinite")
    for count, node in enumerate(sp.preorder_traversal(expr)):
        if count > 4 * _MAX_NODES:
            raise _Refused("expression too large")
        if node.is_Rational and _digits(max(abs(int(node.p)), int(node.q))) > _MAX_RESULT_DIGITS:
            raise _Refused("number too large")
        if node.is_Pow and not node.base.is_Rational and node.exp.is_Rational:
            if abs(int(node.exp.p)) > _MAX_SYMBOLIC_EXPONENT:
                raise _Refused("exponent too large to expand")


def _expanded_size(expr: Any) -> int:
    """Upper estimate of the number of terms ``expand`` would produce (capped)."""
    cap = _MAX_EXPANDED_TERMS + 1
    if expr.is_Add:
        return min(cap, sum(_expanded_size(a) for a in expr.args))
    if expr.is_Mul:
        size = 1
        for a in expr.args:
            size = min(cap, size * _expanded_size(a))
        return size
    if expr.is_Pow and expr.exp.is_Integer:
        k, n = _expanded_size(expr.base), abs(int(expr.exp))
        return 1 if k == 1 else min(cap, math.comb(n + k - 1, k - 1))
    # radicals, symbolic powers, factorials: one term, but the inside is expanded too
    return max([1] + [_expanded_size(a) for a in expr.args])


@functools.lru_cache(maxsize=1)
def _sympy() -> Any:
    """Import sympy on first use only, so the numeric fast path never pays for it."""
    import sympy

    return sympy


@functools.lru_cache(maxsize=4096)  # gold answers repeat across a whole batch
def _to_sympy(s: str) -> Any | None:
    """Parse a normalised answer into a guarded sympy expression, or None."""
    if len(s) > MAX_ANSWER_CHARS:
        return None
    try:
        sp = _sympy()
        expr = _Parser(_tokenize(s), sp).parse()
        _check_tree(sp, expr)
        return expr
    except Exception:  # _Refused, RecursionError, anything sympy raises
        return None


def _probe_values(sp: Any, symbols: list[Any], k: int) -> dict[Any, Any]:
    """Distinct, deterministic rational points at which to evaluate both sides."""
    return {
        s: sp.Rational((-1) ** (j + k) * (11 + 7 * j + 13 * k), 5 + 3 * j + 2 * k)
        for j, s in enumerate(symbols)
    }


def _numerically_different(sp: Any, a: Any, b: Any) -> bool:
    """True only when 30-digit evaluation proves ``a != b`` (never proves equality).

    sympy's evalf gives each value to ~30 significant digits (an exact zero comes
    back as zero), so a relative gap above 1e-20 is a proof of difference at any
    magnitude; anything closer is left to exact simplification.
    """
    symbols = sorted(a.free_symbols | b.free_symbols, key=str)
    for k in range(3 if symbols else 1):
        subs = _probe_values(sp, symbols, k)
        try:
            av, bv = a.evalf(30, subs=subs), b.evalf(30, subs=subs)
            scale = sp.Max(sp.Abs(av), sp.Abs(bv))
            if scale != 0 and float(sp.Abs(av - bv) / scale) > 1e-20:
                return True
        except Exception:  # a pole or an unevaluable point: try the next one
            continue
    return False


def _symbolically_equal(a: Any, b: Any) -> bool:
    """Exact equality of two guarded sympy expressions.

    Only exact rewrites decide equality. ``sympy.simplify`` is deliberately not used:
    its run time is unpredictable (and its first call imports sympy.physics).
    """
    sp = _sympy()
    if a == b:
        return True
    diff = a - b
    if diff == 0:
        return True
    if _expanded_size(diff) > _MAX_EXPANDED_TERMS or _numerically_different(sp, a, b):
        return False
    exact: list[Callable[[Any], Any]] = [
        sp.expand,  # polynomials, products of radicals
        sp.cancel,  # rational functions
        lambda d: sp.expand(sp.radsimp(d)),  # radicals in denominators (<= 4 terms)
    ]
    if _count_radicals(diff) <= _MAX_DENEST_RADICALS:  # its cost grows steeply
        exact.append(lambda d: sp.expand(sp.sqrtdenest(d)))  # nested square roots
    return any(step(diff) == 0 for step in exact)


def _count_radicals(expr: Any) -> int:
    return sum(
        1 for node in _sympy().preorder_traversal(expr)
        if node.is_Pow and node.exp.is_Rational and not node.exp.is_Integer
    )


# ---------------------------------------------------------------------- equivalence

_HEDGE = re.compile(r"\\(?:pm|mp|lor|vee)(?![A-Za-z])|\b(?:or|and)\b", _A)
_OPEN = ("(", "[", "\\{")
_CLOSE = (")", "]", "\\}")


def _top_level_commas(s: str) -> tuple[list[int], bool]:
    """Positions of commas outside any bracket, and whether the brackets balance."""
    commas: list[int] = []
    depth, i = 0, 0
    while i < len(s):
        c = s[i]
        if c == "\\":
            if s[i + 1 : i + 2] in ("{", "}"):
                depth += 1 if s[i + 1] == "{" else -1
            i += 2
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            commas.append(i)
        if depth < 0:
            return commas, False
        i += 1
    return commas, depth == 0


def _split_list(s: str) -> tuple[str, list[str]] | None:
    """``(1, 2)`` -> ``("()", ["1", "2"])``; None when ``s`` is not a list of 2+ items.

    The delimiters are part of the answer: ``(1, 2)`` (a point or open interval),
    ``[1, 2]`` and a bare ``1, 2`` are all different.
    """
    opener = next((o for o in _OPEN if s.startswith(o)), "")
    closer = next((c for c in _CLOSE if s.endswith(c)), "")
    inner = s
    if opener and closer:
        candidate = s[len(opener) : len(s) - len(closer)]
        commas, balanced = _top_level_commas(candidate)
        if balanced and commas:
            inner = candidate
        else:
            opener = closer = ""
    else:
        opener = closer = ""
    commas, balanced = _top_level_commas(inner)
    if not balanced or not commas:
        return None
    bounds = [-1, *commas, len(inner)]
    parts = [inner[bounds[j] + 1 : bounds[j + 1]] for j in range(len(bounds) - 1)]
    return opener + closer, [_normalise(p) for p in parts]


def _same_number(a: str, b: str) -> bool | None:
    """Exact comparison if both sides are plain numbers, else None (undecided)."""
    x, y = _exact_number(a), _exact_number(b)
    if x is None or y is None:
        return None
    return type(x) is type(y) and x == y


def _scalar_equal(cand: str, gold: str) -> bool:
    if cand == gold:
        return True
    if not cand or not gold:
        return False
    fast = _same_number(cand, gold)
    if fast is not None:
        return fast  # both plain numbers: decided without sympy
    a, b = _to_sympy(cand), _to_sympy(gold)
    return a is not None and b is not None and _symbolically_equal(a, b)


def _equivalent(cand: str, gold: str) -> bool:
    """Whether two normalised, non-empty answers are the same answer."""
    if cand == gold:
        return True
    if _THOUSANDS.fullmatch(gold) or _exact_number(gold) is not None:
        # "1,000" is one thousand only when a single number is expected at all
        if _THOUSANDS.fullmatch(cand):
            cand = cand.replace("{,}", "").replace(",", "")
        gold = gold.replace("{,}", "").replace(",", "")
        if _exact_number(gold) is None:
            return False
    if _HEDGE.search(cand):
        return False  # "41 or 42", "\pm 3": a list of candidates is not an answer
    c_list, g_list = _split_list(cand), _split_list(gold)
    if c_list is None or g_list is None:
        return c_list is None and g_list is None and _scalar_equal(cand, gold)
    (c_delims, c_items), (g_delims, g_items) = c_list, g_list
    return (
        c_delims == g_delims
        and len(c_items) == len(g_items)
        and all(_scalar_equal(c, g) for c, g in zip(c_items, g_items))
    )


# ------------------------------------------------------------------------- the reward


def _verdict(completion: str, answer: str) -> bool:
    if not isinstance(completion, str) or not isinstance(answer, str):
        return False
    boxes = _boxes(completion)
    if not boxes or any(b is None or len(b) > MAX_ANSWER_CHARS for b in boxes):
        return False  # malformed, unclosed or oversized box anywhere: no clean answer
    gold = _normalise(_unwrap_nested(answer))
    final = _normalise(_unwrap_nested(boxes[-1]))  # type: ignore[arg-type]
    if not gold or not final or not _equivalent(final, gold):
        return False
    # Hedging guard: every other non-empty box must be the same answer. Empty boxes
    # (an echoed "put it in \boxed{}") are ignored; repeats are checked once.
    others: set[str] = set()
    for raw in set(boxes[:-1]):
        norm = _normalise(_unwrap_nested(raw))  # type: ignore[arg-type]
        if norm and norm != final:
            others.add(norm)
            if len(others) > _MAX_DISTINCT_BOXES:
                return False
    return all(_equivalent(other, gold) for other in others)


def boxed_math(completion: str, answer: str) -> float:
    """Reward 1.0 if the last box in ``completion`` equals ``answer`` exactly, else 0.0.

    Strict by design: no box, an unclosed/empty/oversized box, two boxes with
    different answers, a list of candidates, Python syntax or a float approximation
    all score 0. Never raises.

    >>> boxed_math(r"... so the answer is $\\boxed{\\dfrac{1}{2}}$.", "0.5")
    1.0
    >>> boxed_math(r"It is \\boxed{41} or maybe \\boxed{42}.", "42")
    0.0
    """
    try:
        return 1.0 if _verdict(completion, answer) else 0.0
    except Exception:  # the reward must never take down a training step
        return 0.0
