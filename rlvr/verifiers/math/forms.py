"""Answer forms beyond a single expression, for ``equal._equivalent`` to recurse into.

* :func:`_canonical` -- a spacing-blind token form, so that answers the symbolic tier
  cannot read (``x \\le 3``, ``(-\\infty, 2) \\cup (3, \\infty)``, matrices) are not
  told apart by spacing alone;
* splits of a normalised answer into parts that are compared one by one: a single
  ``\\pm`` into its two values, a chain of relations, a union, a matrix, a list.

Every function here only reads strings; the comparisons live in ``equal.py``.
"""

from __future__ import annotations

import functools
import re

from rlvr.verifiers.math.extract import _A

# A token: a text group kept whole, a control word, a control symbol, a number, or
# any other single character; whitespace is not a token (TeX ignores it in math).
_TOKEN = re.compile(
    r"(\\(?:text|textrm|textbf|textit|mathrm|mathbf|mbox)\{[^{}]*\})|\\[A-Za-z]+|\\.|[0-9]+(?:\.[0-9]+)?|\S",
    _A,
)
# Control words with one meaning and two names. Those that typeset a delimiter
# character (\lbrace, \mid, \vert, ...) are that character already: normalise.py maps
# them (_DELIMITER_WORDS) before any answer reaches this module.
_SYNONYMS = {
    "\\le": "\\leq", "\\leqslant": "\\leq", "\\ge": "\\geq", "\\geqslant": "\\geq",
    "\\ne": "\\neq", "\\lt": "<", "\\gt": ">",
    "\\to": "\\rightarrow", "\\emptyset": "\\varnothing", "\\lor": "\\vee", "\\land": "\\wedge",
}
_OPEN = frozenset({"(", "[", "{", "\\{"})
_CLOSE = frozenset({")", "]", "}", "\\}"})
_RELATIONS = frozenset({"<", ">", "=", "\\leq", "\\geq", "\\neq"})
_MIRROR = {"<": ">", ">": "<", "\\leq": "\\geq", "\\geq": "\\leq", "=": "=", "\\neq": "\\neq"}
_PLUS_MINUS = re.compile(r"\\(pm|mp)(?![A-Za-z])", _A)
_MATRIX = re.compile(r"\\begin\{([pbBvV]?matrix)\}(.*)\\end\{\1\}", _A | re.DOTALL)


def _tokens(s: str) -> list[tuple[str, int, int]]:
    """``(token, start, end)`` for every token of ``s``, synonyms replaced; a text group
    is one token with its spacing collapsed."""
    out = []
    for m in _TOKEN.finditer(s):
        tok = m.group()
        if m.group(1):
            head, _, body = tok.partition("{")
            tok = head + "{" + " ".join(body[:-1].split()) + "}"
        out.append((_SYNONYMS.get(tok, tok), m.start(), m.end()))
    return out


# Functions whose one-token argument may be written with or without parentheses.
_FUNCTIONS = frozenset(
    "\\sin \\cos \\tan \\cot \\sec \\csc \\arcsin \\arccos \\arctan \\sinh \\cosh \\tanh "
    "\\log \\ln \\lg \\exp".split()
)
# Operands that make \times a cross product, not multiplication.
_VECTOR = ("\\mathbf", "\\vec", "\\boldsymbol", "\\overrightarrow", "\\bm")
_TAKES_ONE_DIGIT = frozenset({"\\frac", "\\sqrt", "^", "_"})
_PREFIX_PLUS_AFTER = frozenset({"(", "[", "{", "\\{", ",", "\\cup", *_RELATIONS})


@functools.lru_cache(maxsize=8192)
def _canonical(s: str) -> tuple[str, ...]:
    """The answer's tokens as TeX reads them, so that spellings TeX renders the same are
    one form (rule "same rendering, same answer"). Blind to:

    * spacing (outside text) and synonyms (``\\le`` / ``\\leq``, ``\\lbrace`` / ``\\{``);
    * optional braces: a group of one token is that token, as TeX reads an argument
      (``x^{2}`` is ``x^2``, ``\\frac{1}{2}`` is ``\\frac12``; ``x^{10}`` is not
      ``x^10``, which TeX reads as ``x^1 0``: an argument written without braces is
      one digit);
    * parentheses around one token after a function (``\\sin(x)`` is ``\\sin x``,
      ``\\sin^2(x)`` is ``\\sin^2 x``);
    * ``:`` and ``|`` inside ``\\{ \\}`` (set-builder "such that");
    * a prefix ``+`` (``+\\infty`` is ``\\infty``; not before a sign: ``+-3`` is a hedge);
    * the multiplication sign: ``\\times``, ``*`` and ``\\cdot`` are one sign, dropped
      before anything but a digit (``2\\cdot\\sin x`` is ``2\\sin x``; ``2\\cdot 3`` is not
      ``23``), except next to a vector (``\\mathbf{a}\\times\\mathbf{b}`` is a cross product).

    Equal forms are the same answer; different forms may still be (the other tiers
    decide those).

    >>> _canonical(r"x\\le 3") == _canonical(r"x \\leq 3")
    True
    """
    toks: list[str] = []
    for tok, _, _ in _tokens(s):
        if tok[0].isdigit() and len(tok) > 1 and toks and toks[-1] in _TAKES_ONE_DIGIT:
            # "\frac12" is \frac{1}{2}, "x^10" is x^{1}0: arguments without braces are digits
            split = 2 if toks[-1] == "\\frac" else 1
            toks.extend(tok[:split])
            tok = tok[split:]
            if not tok:
                continue
        toks.append(tok)
        closes = {"}": "{", ")": "("}.get(tok)
        if closes and len(toks) >= 3 and toks[-3] == closes and _one_token(toks[-2]):
            if tok == "}" or _after_function(toks[:-3]):
                toks[-3:] = [toks[-2]]
    out: list[str] = []
    braces = 0  # inside \{ ... \}, where ":" and "|" both say "such that"
    for i, tok in enumerate(toks):
        braces += (tok == "\\{") - (tok == "\\}")
        if tok == ":" and braces > 0:
            tok = "|"
        after = toks[i + 1] if i + 1 < len(toks) else ""
        if tok == "+" and (not out or out[-1] in _PREFIX_PLUS_AFTER) and after not in ("+", "-"):
            continue
        if tok in ("\\times", "*", "\\cdot"):
            if any(t.startswith(_VECTOR) for t in (out[-1] if out else "", after)):
                out.append(tok)
                continue
            if out and after and not (after[0].isdigit() or after[0] == "."):
                continue
            tok = "\\cdot"
        out.append(tok)
    return tuple(out)


def _after_function(toks: list[str]) -> bool:
    """Whether ``toks`` ends with a function name, maybe raised to a one-token power
    (``\\sin``, ``\\sin^2``), so that parentheses after it are optional around one token."""
    if toks and toks[-1] in _FUNCTIONS:
        return True
    return len(toks) >= 3 and toks[-2] == "^" and toks[-3] in _FUNCTIONS


def _one_token(tok: str) -> bool:
    """Whether braces around ``tok`` are optional: a character or a control word."""
    return len(tok) == 1 and tok not in "{}()" or tok[0] == "\\" and tok[1:2].isalpha()


def _top_level(s: str, wanted: frozenset[str]) -> list[tuple[str, int, int]] | None:
    """The tokens in ``wanted`` outside any bracket; None if the brackets do not balance."""
    found, depth = [], 0
    for tok, start, end in _tokens(s):
        if tok in _OPEN:
            depth += 1
        elif tok in _CLOSE:
            depth -= 1
            if depth < 0:
                return None
        elif depth == 0 and tok in wanted:
            found.append((tok, start, end))
    return found if depth == 0 else None


def _pieces(s: str, cuts: list[tuple[str, int, int]]) -> list[str]:
    bounds = [0, *(x for _, a, b in cuts for x in (a, b)), len(s)]
    return [s[bounds[k] : bounds[k + 1]].strip() for k in range(0, len(bounds), 2)]


def _plus_minus_count(s: str) -> int:
    return len(_PLUS_MINUS.findall(s))


def _plus_minus_values(s: str) -> tuple[str, str]:
    """``1 \\pm \\sqrt{2}`` -> ``("1 + \\sqrt{2}", "1 - \\sqrt{2}")`` (``\\mp`` the other way)."""
    plus = _PLUS_MINUS.sub(lambda m: "+" if m.group(1) == "pm" else "-", s)
    minus = _PLUS_MINUS.sub(lambda m: "-" if m.group(1) == "pm" else "+", s)
    return plus, minus


def _split_relations(s: str) -> tuple[list[str], list[str]] | None:
    """``1 < x \\le 3`` -> ``(["1", "x", "3"], ["<", "\\leq"])``; None without a relation
    outside brackets. The mirrored reading is :func:`_mirrored`."""
    if not any(c in s for c in "<>=") and "\\le" not in s and "\\ge" not in s and "\\ne" not in s:
        return None  # the common case, without tokenising
    cuts = _top_level(s, _RELATIONS)
    if not cuts:
        return None
    return _pieces(s, cuts), [tok for tok, _, _ in cuts]


def _mirrored(sides: list[str], ops: list[str]) -> tuple[list[str], list[str]]:
    """``x < 3`` read right to left: ``3 > x``."""
    return sides[::-1], [_MIRROR[op] for op in reversed(ops)]


def _split_union(s: str) -> list[str] | None:
    """``(-\\infty, 2) \\cup (3, \\infty)`` -> its two parts; None without a union."""
    if "\\cup" not in s:
        return None
    cuts = _top_level(s, frozenset({"\\cup"}))
    return _pieces(s, cuts) if cuts else None


def _split_matrix(s: str) -> tuple[str, list[list[str]]] | None:
    """``\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}`` -> ``("pmatrix", [["1", "2"],
    ["3", "4"]])``; a trailing ``\\\\`` ends the last row, it does not add one."""
    m = _MATRIX.fullmatch(s)
    if m is None:
        return None
    body = m.group(2)
    rows_at = _top_level(body, frozenset({"\\\\"}))
    if rows_at is None:
        return None
    rows = _pieces(body, rows_at)
    if len(rows) > 1 and not rows[-1]:
        rows.pop()
    cells = []
    for row in rows:
        cuts = _top_level(row, frozenset({"&"}))
        if cuts is None:
            return None
        cells.append(_pieces(row, cuts))
    return m.group(1), cells


def _split_list(s: str) -> tuple[str, list[str]] | None:
    """``(1, 2)`` -> ``("()", ["1", "2"])``; None when ``s`` is not a list of 2+ items.

    The delimiters are part of the answer: ``(1, 2)`` (a point or open interval),
    ``[1, 2]``, ``\\{1, 2\\}`` and a bare ``1, 2`` are all different.
    """
    if "," not in s:
        return None
    opener = next((o for o in ("(", "[", "\\{") if s.startswith(o)), "")
    closer = next((c for c in (")", "]", "\\}") if s.endswith(c)), "")
    if opener and closer:
        inner = s[len(opener) : len(s) - len(closer)]
        cuts = _top_level(inner, frozenset({","}))
        if cuts:
            return opener + closer, _pieces(inner, cuts)
    cuts = _top_level(s, frozenset({","}))
    return ("", _pieces(s, cuts)) if cuts else None
