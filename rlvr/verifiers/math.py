"""Strict, fast reward for math answers written in ``\\boxed{...}``.

A lenient verifier gets gamed by the policy (hedging, listing candidates, dumping a
float approximation), so every rule here errs towards 0. Public entry points:

* :func:`boxed_math` -- the reward, 1.0 or 0.0;
* :func:`extract_last_boxed` -- the answer a completion commits to.

Answers are compared in three tiers, cheapest first:

1. equal strings after :func:`_normalise` (applied to both sides);
2. exact numbers (integers, decimals, ``a/b``, ``\\frac{a}{b}``) with regexes and
   :class:`fractions.Fraction`; sympy is not even imported on this path;
3. symbolic equality: our own parser for a LaTeX subset (no ``eval``, no
   ``sympify``) builds sympy expressions under size guards; only exact rewrites
   (expand, cancel, radsimp, sqrtdenest) can prove equality, evaluation at 30 digits
   can only prove a difference. There is no float tolerance anywhere.

Time bounds. There is no timeout (signals work only in the main thread); the inputs
are bounded instead, and anything past a bound is refused, which scores 0:

* box content at most ``MAX_ANSWER_CHARS`` (500) characters; the symbolic tier also
  refuses longer gold answers; ``_MAX_NODES`` atoms, ``_MAX_DEPTH`` nesting levels;
* literals of at most ``_MAX_LITERAL_DIGITS`` digits, no number built past
  ``_MAX_RESULT_DIGITS`` (``9^{9^{9^9}}`` and ``(10^{10})!`` are refused, not
  computed), factorials of at most ``_MAX_FACTORIAL``;
* powers of non-numbers at most ``_MAX_SYMBOLIC_EXPONENT``, and at most
  ``_MAX_EXPONENT_UNDER_ROOT`` inside a root or a symbolic power; no towers of
  non-integer powers; symbolic exponents of at most ``_MAX_EXPONENT_TERMS`` terms
  and with small numbers once expanded;
* roots: index at most ``_MAX_ROOT_INDEX``, radicand digits times the lcm of its
  root indices at most ``_MAX_ROOT_WORK``, all radicands of one expression together
  at most ``_MAX_RADICAND_DIGITS`` digits;
* per reward call, a budget of ``_MAX_EXPANDED_TERMS`` estimated polynomial terms
  (each symbolic comparison also costs ``_COMPARISON_CHARGE``); no
  ``sympy.simplify``; denesting only with at most ``_MAX_DENEST_RADICALS`` roots;
  numeric probes skip points where a symbolic exponent exceeds ``_MAX_PROBE_EXPONENT``.

Fuzzing inside these bounds found no input slower than about half a second.
"""

from __future__ import annotations

import functools
import math
import re
import sys
from fractions import Fraction
from typing import Any, Callable

__all__ = ["MAX_ANSWER_CHARS", "boxed_math", "extract_last_boxed"]

MAX_ANSWER_CHARS = 500
_MAX_DISTINCT_BOXES = 16  # more distinct boxed answers than this is a hedge, not a proof
_MAX_FAST_DIGITS = 4000  # below CPython's default int<->str limit of 4300 digits
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

_A = re.ASCII  # "\d", "\s" must never match full-width digits or other look-alikes


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


# ------------------------------------------------------------------------- LaTeX parser


class _Refused(Exception):
    """The input is outside the supported LaTeX subset or outside the size bounds."""


@functools.lru_cache(maxsize=1)
def _sympy() -> Any:
    """Import sympy on first use only, so the numeric fast path never pays for it."""
    import sympy

    return sympy


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
_STARTS_FACTOR = frozenset({"(", "{", "\\frac", "\\sqrt", "\\pi"})


def _tokenize(s: str) -> list[str]:
    """Split into tokens: numbers, one-letter variables, ``\\commands`` and operators."""
    tokens: list[str] = []
    pos, s = 0, s.rstrip()
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        if m is None:
            raise _Refused(f"unexpected character at {pos}")
        tok = m.group("num") or m.group("var") or m.group("op") or "\\" + m.group("cmd")
        if m.group("num") and len(tok) > _MAX_LITERAL_DIGITS:
            raise _Refused("literal too long")
        tokens.append(tok)
        pos = m.end()
    return tokens


def _is_numeric(tok: str) -> bool:
    return tok[0] in "0123456789."


def _literal(tok: str) -> Any:
    """Exact sympy number for a literal such as ``12`` or ``0.125`` (never a float)."""
    whole, _, frac = tok.partition(".")
    if not frac:
        return _sympy().Integer(int(whole))
    return _sympy().Rational(int(whole or "0") * 10 ** len(frac) + int(frac), 10 ** len(frac))


def _symbol(name: str) -> Any:
    """A real variable. Answers live on the reals, and for complex symbols sympy's
    automatic simplification of e.g. ``\\sqrt{(1-y^{80})^2}`` expands ``im(y^80)``
    into a degree-80 polynomial (seconds); for real ones it is ``Abs(1-y^80)``."""
    return _sympy().Symbol(name, real=True)


def _nonzero(x: Any) -> Any:
    if x == 0:
        raise _Refused("division by zero")
    return x


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

    A number right after a factor (``2 3``, ``0x2A``, ``4e1``) is refused rather than
    multiplied. ``a^b^c`` is refused as in LaTeX (double superscript); ``2^10`` reads
    the whole number as the exponent, which is what writers of ``2^10`` mean.
    """

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.i = 0
        self.nodes = 0
        self.depth = 0
        self.radicand_digits = 0.0

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
            elif tok in _STARTS_FACTOR or tok[0].isalpha() or tok[1:] in _GREEK:
                right = self.power()  # implicit multiplication: "2x", "3\sqrt{2}"
            else:
                break
            value = self.checked(value / _nonzero(right) if tok in _DIVIDE else value * right)
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
            if not value.is_Integer or not 0 <= value <= _MAX_FACTORIAL:
                raise _Refused("factorial only of small non-negative integers")
            value = _sympy().factorial(value)
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
        if _is_numeric(tok):
            return _literal(tok)
        if len(tok) == 1 and tok.isalpha():
            return _symbol(tok)
        if tok in ("(", "{"):
            inner = self.expr()
            self.take(")" if tok == "(" else "}")
            return inner
        if tok == "\\pi":
            return _sympy().pi
        if tok[1:] in _GREEK:
            return _symbol(tok[1:])
        if tok == "\\frac":
            numerator = self.argument()
            return self.checked(numerator / _nonzero(self.argument()))
        if tok == "\\sqrt":
            index = _sympy().Integer(2)
            if self.peek() == "[":
                self.take()
                index = self.expr()
                self.take("]")
                if not index.is_Integer or not 2 <= index <= _MAX_ROOT_INDEX:
                    raise _Refused("root index must be a small integer")
            return self.pow(self.argument(), 1 / index)
        raise _Refused(f"unsupported token {tok!r}")

    def argument(self) -> Any:
        """A ``{group}`` or, as TeX reads ``\\frac12``, a single character."""
        tok = self.peek()
        if tok is not None and _is_numeric(tok) and len(tok) > 1:
            if tok[0] == ".":
                raise _Refused("bare decimal point as an argument")
            self.tokens[self.i] = tok[1:]  # "\frac12" -> argument "1", then "2"
            return _literal(tok[0])
        return self.atom()

    def pow(self, base: Any, exponent: Any) -> Any:
        """A guarded power that also charges the expression's radicand budget.

        sympy merges numeric roots (``\\sqrt{a}\\sqrt{b}`` -> ``\\sqrt{ab}``) and
        factors the merged radicand: fifteen 300-digit radicands took minutes.
        """
        if exponent.is_Rational and not exponent.is_Integer:
            self.radicand_digits += sum(_size(n) for n in base.atoms(_sympy().Rational))
            if self.radicand_digits > _MAX_RADICAND_DIGITS:
                raise _Refused("too many digits under roots")
        return self.checked(_guarded_pow(base, exponent))

    def checked(self, value: Any) -> Any:
        """Refuse a product or power whose merged roots became expensive."""
        if _root_work(value) > _MAX_ROOT_WORK:
            raise _Refused("root too expensive")
        return value


# ------------------------------------------------------------------------------- guards


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


@functools.lru_cache(maxsize=4096)  # gold answers repeat across a whole batch
def _to_sympy(s: str) -> Any | None:
    """Parse a normalised answer into a guarded sympy expression, or None."""
    if len(s) > MAX_ANSWER_CHARS:
        return None
    try:
        expr = _Parser(_tokenize(s)).parse()
        _check_tree(expr)
        return expr
    except Exception:  # _Refused, RecursionError, anything sympy raises
        return None


# ------------------------------------------------------------------ symbolic comparison


class _Budget:
    """Symbolic work left for one reward call, in estimated polynomial terms.

    Each comparison pays a fixed charge plus the expanded size it may build, so a
    completion with many heavy boxes cannot add up to more than one heavy comparison.
    """

    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = _MAX_EXPANDED_TERMS

    def spend(self, amount: int) -> bool:
        self.left -= amount
        return self.left >= 0


def _numerically_different(a: Any, b: Any) -> bool:
    """True only when 30-digit evaluation proves ``a != b`` (never proves equality).

    Free variables take a few fixed rational values. sympy's evalf gives each value
    to ~30 significant digits (an exact zero comes back as zero), so a relative gap
    above 1e-20 proves a difference at any magnitude; closer calls are left to exact
    rewriting.
    """
    sp = _sympy()
    symbols = sorted(a.free_symbols | b.free_symbols, key=str)
    for k in range(3 if symbols else 1):
        subs = {
            s: sp.Rational((-1) ** (j + k) * (11 + 7 * j + 13 * k), 5 + 3 * j + 2 * k)
            for j, s in enumerate(symbols)
        }
        try:
            if not (_tame_exponents(a, subs) and _tame_exponents(b, subs)):
                continue
            av, bv = a.evalf(30, subs=subs), b.evalf(30, subs=subs)
            scale = sp.Max(sp.Abs(av), sp.Abs(bv))
            if scale != 0 and float(sp.Abs(av - bv) / scale) > 1e-20:
                return True
        except Exception:  # a pole or an unevaluable point: try the next one
            continue
    return False


def _tame_exponents(expr: Any, subs: dict[Any, Any]) -> bool:
    """Whether every symbolic exponent in ``expr`` stays modest at the point ``subs``.

    Evaluating ``b^e`` needs about as many extra digits as ``e`` has: a tower such as
    ``(x-z)^{(y^{\\pi})^{4251\\pi}}`` asks for 14,000. Checking innermost powers first
    keeps each check cheap.
    """
    for node in _sympy().postorder_traversal(expr):
        if node.is_Pow and not node.exp.is_Rational:
            if not abs(complex(node.exp.evalf(5, subs=subs))) <= _MAX_PROBE_EXPONENT:
                return False
    return True


def _symbolically_equal(a: Any, b: Any, budget: _Budget) -> bool:
    """Exact equality of two guarded sympy expressions.

    ``sympy.simplify`` is deliberately not used: its run time is unpredictable (and
    its first call imports sympy.physics).
    """
    sp = _sympy()
    if a == b:
        return True
    diff = a - b
    if diff == 0:
        return True
    if not budget.spend(max(_expanded_size(diff))) or _root_work(diff) > _MAX_ROOT_WORK:
        return False  # rewriting it could take seconds: refused
    if _numerically_different(a, b):
        return False
    exact: list[Callable[[Any], Any]] = [
        sp.expand,  # polynomials, products of roots
        sp.cancel,  # rational functions
        lambda d: sp.expand(sp.radsimp(d)),  # roots in denominators (up to 4 terms)
    ]
    roots = sum(1 for n in _nodes(diff) if n.is_Pow and n.exp.is_Rational and n.exp.q > 1)
    if roots <= _MAX_DENEST_RADICALS:  # denesting cost grows steeply with the count
        exact.append(lambda d: sp.expand(sp.sqrtdenest(d)))
    return any(step(diff) == 0 for step in exact)


# --------------------------------------------------------------------------- equivalence

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
        commas, balanced = _top_level_commas(s[len(opener) : len(s) - len(closer)])
        if balanced and commas:
            inner = s[len(opener) : len(s) - len(closer)]
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


def _scalar_equal(cand: str, gold: str, budget: _Budget) -> bool:
    if cand == gold:
        return True
    if not cand or not gold:
        return False
    fast = _same_number(cand, gold)
    if fast is not None:
        return fast  # both plain numbers: decided without sympy
    if not budget.spend(_COMPARISON_CHARGE):
        return False
    a, b = _to_sympy(cand), _to_sympy(gold)
    return a is not None and b is not None and _symbolically_equal(a, b, budget)


def _equivalent(cand: str, gold: str, budget: _Budget) -> bool:
    """Whether two normalised, non-empty answers are the same answer."""
    if cand == gold:
        return True
    if _THOUSANDS.fullmatch(gold) or _exact_number(gold) is not None:
        # "1,000" is one thousand only when a single number is expected at all
        if _THOUSANDS.fullmatch(cand):
            cand = cand.replace("{,}", "").replace(",", "")
        gold = gold.replace("{,}", "").replace(",", "")
    if _HEDGE.search(cand):
        return False  # "41 or 42", "\pm 3": a list of candidates is not an answer
    c_list, g_list = _split_list(cand), _split_list(gold)
    if c_list is None or g_list is None:
        return c_list is None and g_list is None and _scalar_equal(cand, gold, budget)
    (c_delims, c_items), (g_delims, g_items) = c_list, g_list
    return (
        c_delims == g_delims
        and len(c_items) == len(g_items)
        and all(_scalar_equal(c, g, budget) for c, g in zip(c_items, g_items))
    )


# ---------------------------------------------------------------------------- the reward


def _verdict(completion: str, answer: str) -> bool:
    if not isinstance(completion, str) or not isinstance(answer, str):
        return False
    boxes = _boxes(completion)
    if not boxes or any(b is None or len(b) > MAX_ANSWER_CHARS for b in boxes):
        return False  # malformed, unclosed or oversized box anywhere: no clean answer
    gold = _normalise(_unwrap_nested(answer))
    final = _normalise(_unwrap_nested(boxes[-1]))  # type: ignore[arg-type]
    budget = _Budget()
    if not gold or not final or not _equivalent(final, gold, budget):
        return False
    # Hedging guard: every other non-empty box must be the same answer. Empty boxes
    # (an echoed "put it in \boxed{}") are ignored; repeats are checked once, in
    # order (dicts, not sets), so that the budget makes the same verdict every run.
    others: dict[str, None] = {}
    for raw in dict.fromkeys(boxes[:-1]):
        norm = _normalise(_unwrap_nested(raw))  # type: ignore[arg-type]
        if norm and norm != final:
            others[norm] = None
            if len(others) > _MAX_DISTINCT_BOXES:
                return False
    return all(_equivalent(other, gold, budget) for other in others)


def boxed_math(completion: str, answer: str) -> float:
    """Reward 1.0 if the last box in ``completion`` equals ``answer`` exactly, else 0.0.

    Strict by design: no box, an unclosed/empty/oversized box, two boxes with
    different answers, a list of candidates, Python syntax or a float approximation
    all score 0. Thread-safe and deterministic; never raises.

    >>> boxed_math(r"... so the answer is $\\boxed{\\dfrac{1}{2}}$.", "0.5")
    1.0
    >>> boxed_math(r"It is \\boxed{41} or maybe \\boxed{42}.", "42")
    0.0
    """
    try:
        return 1.0 if _verdict(completion, answer) else 0.0
    except Exception:  # the reward must never take down a training step
        return 0.0
