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
_SYNONYMS = {
    "\\le": "\\leq", "\\leqslant": "\\leq", "\\ge": "\\geq", "\\geqslant": "\\geq",
    "\\ne": "\\neq", "\\lt": "<", "\\gt": ">", "\\lbrace": "\\{", "\\rbrace": "\\}",
    "\\lbrack": "[", "\\rbrack": "]", "\\lvert": "|", "\\rvert": "|", "\\vert": "|",
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


@functools.lru_cache(maxsize=8192)
def _canonical(s: str) -> tuple[str, ...]:
    """The answer's tokens as TeX reads them: blind to spacing (outside text) and to
    synonyms (``\\le`` / ``\\leq``). Equal forms are the same answer; different forms
    may still be (the other tiers decide those).

    >>> _canonical(r"x\\le 3") == _canonical(r"x \\leq 3")
    True
    """
    return tuple(tok for tok, _, _ in _tokens(s))


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
