"""A recursive-descent parser for a LaTeX subset that builds guarded sympy objects.

Never ``eval``, never ``sympify``/``parse_expr`` of text: tokens are matched with
ASCII-only regexes and turned into sympy numbers, symbols and operations one by one.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from rlvr.verifiers.math.extract import MAX_ANSWER_CHARS, _A
from rlvr.verifiers.math.guards import (
    _MAX_DEPTH,
    _MAX_FACTORIAL,
    _MAX_LITERAL_DIGITS,
    _MAX_NODES,
    _MAX_RADICAND_DIGITS,
    _MAX_ROOT_INDEX,
    _MAX_ROOT_WORK,
    _Refused,
    _check_tree,
    _guarded_pow,
    _root_work,
    _size,
    _sympy,
)

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
    multiplied, and so is a numeric ``\\frac`` right after a number (``2\\frac{1}{2}``,
    a mixed number to a reader, a product to TeX). Odd roots of negative numbers are
    real (``\\sqrt[3]{-8} = -2``). ``a^b^c`` is refused as in LaTeX (double superscript); ``2^10`` reads
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
                if tok == "\\frac" and self.mixed_number():
                    raise _Refused("a number then a numeric fraction: mixed number or product?")
                right = self.power()  # implicit multiplication: "2x", "3\sqrt{2}"
            else:
                break
            value = self.divide(value, right) if tok in _DIVIDE else self.multiply(value, right)
        return value

    def mixed_number(self) -> bool:
        """Whether the ``\\frac`` at the cursor follows a number and has a number on top,
        as in ``2\\frac{1}{2}``. As a whole answer that is the mixed number 5/2
        (``normalise`` rewrites it); inside an expression it is refused rather than read
        as the product TeX would typeset the same way."""
        before, after = self.tokens[self.i - 1], self.tokens[self.i + 1 : self.i + 3]
        if not _is_numeric(before) or not after:
            return False
        return _is_numeric(after[0]) or (after[0] == "{" and len(after) > 1 and _is_numeric(after[1]))

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
            value = self.factorial(value)
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
            return self.number(tok)
        if len(tok) == 1 and tok.isalpha():
            return self.variable(tok)
        if tok in ("(", "{"):
            inner = self.expr()
            self.take(")" if tok == "(" else "}")
            return inner
        if tok == "\\pi":
            return self.pi()
        if tok[1:] in _GREEK:
            return self.variable(tok[1:])
        if tok == "\\frac":
            numerator = self.argument()
            return self.divide(numerator, self.argument())
        if tok == "\\sqrt":
            index = None
            if self.peek() == "[":
                self.take()
                index = self.root_index(self.expr())
                self.take("]")
            return self.root(self.argument(), index)
        raise _Refused(f"unsupported token {tok!r}")

    def argument(self) -> Any:
        """A ``{group}`` or, as TeX reads ``\\frac12``, a single character."""
        tok = self.peek()
        if tok is not None and _is_numeric(tok) and len(tok) > 1:
            if tok[0] == ".":
                raise _Refused("bare decimal point as an argument")
            self.tokens[self.i] = tok[1:]  # "\frac12" -> argument "1", then "2"
            return self.number(tok[0])
        return self.atom()

    # The hooks below build values; the grammar above never looks inside one. A
    # subclass with other hooks (``fast._ExactParser``) reads exactly the same language.

    def number(self, tok: str) -> Any:
        return _literal(tok)

    def variable(self, name: str) -> Any:
        return _symbol(name)

    def pi(self) -> Any:
        return _sympy().pi

    def multiply(self, a: Any, b: Any) -> Any:
        return self.checked(a * b)

    def divide(self, a: Any, b: Any) -> Any:
        return self.checked(a / _nonzero(b))

    def factorial(self, value: Any) -> Any:
        if not value.is_Integer or not 0 <= value <= _MAX_FACTORIAL:
            raise _Refused("factorial only of small non-negative integers")
        return _sympy().factorial(value)

    def root_index(self, index: Any) -> Any:
        if not index.is_Integer or not 2 <= index <= _MAX_ROOT_INDEX:
            raise _Refused("root index must be a small integer")
        return index

    def root(self, radicand: Any, index: Any | None) -> Any:
        # An odd root of a negative number is the real root, as in school:
        # \sqrt[3]{-8} = -2 (sympy's (-8)^{1/3} would be the complex principal root).
        if index is not None and index % 2 == 1 and radicand.is_Rational and radicand < 0:
            return -self.pow(-radicand, 1 / index)
        return self.pow(radicand, 1 / (_sympy().Integer(2) if index is None else index))

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
