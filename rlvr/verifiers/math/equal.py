"""Equivalence of two normalised answers: strings, exact numbers, then symbolic.

Symbolic equality is proved only by exact rewrites; 30-digit evaluation can only
prove a difference. A per-call :class:`_Budget` bounds the total symbolic work.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any, Callable

from rlvr.verifiers.math.extract import _A
from rlvr.verifiers.math.fast import _exact, _exact_verdict, _expanded, _Unsupported
from rlvr.verifiers.math.forms import (
    _MIRROR,
    _canonical,
    _mirrored,
    _plus_minus_count,
    _plus_minus_values,
    _split_list,
    _split_matrix,
    _split_relations,
    _split_union,
    _tokens,
)
from rlvr.verifiers.math.guards import (
    _COMPARISON_CHARGE,
    _MAX_DENEST_RADICALS,
    _MAX_EXPANDED_TERMS,
    _MAX_PROBE_EXPONENT,
    _MAX_ROOT_WORK,
    _expanded_size,
    _nodes,
    _root_work,
    _sympy,
)
from rlvr.verifiers.math.normalise import (
    _LABEL_RE,
    _LEADING_ASSIGNMENT,
    _THOUSANDS,
    _WHITESPACE,
    _Answer,
    _is_plain_number,
    _label_key,
    _normalise_parts,
    _same_number,
)
from rlvr.verifiers.math.parse import _GREEK, _to_sympy


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
            x, y = complex(av), complex(bv)  # cheap first look in double precision
            near = max(abs(x), abs(y))
            if math.isfinite(near) and near > 0 and abs(x - y) / near > 1e-9:
                return True  # apart far beyond double rounding (~1e-16): no need for sympy
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


@functools.lru_cache(maxsize=8192)  # the G completions of a prompt often share answers
def _symbolic_verdict(cand: str, gold: str) -> tuple[bool, int]:
    """``(equal, cost)`` for two normalised answers; ``cost`` is the budget it needs.

    A pure function of the two strings, so caching it changes no verdict: the caller
    pays ``cost`` from its own budget and gets False when it cannot, exactly as if the
    comparison had run. Comparisons that no budget could afford are not run at all.
    """
    fast = _exact_verdict(cand, gold)
    if fast is not None:
        return fast  # the same pair, from exact arithmetic (see fast.py)
    return _sympy_verdict(cand, gold)


def _sympy_verdict(cand: str, gold: str) -> tuple[bool, int]:
    """:func:`_symbolic_verdict` from sympy alone (the reference the fast path is tested
    against)."""
    a, b = _to_sympy(cand), _to_sympy(gold)
    if a is None or b is None:
        return False, 0
    if a == b:
        return True, 0
    diff = a - b
    if diff == 0:
        return True, 0
    cost = max(_expanded_size(diff))
    if cost > _MAX_EXPANDED_TERMS - _COMPARISON_CHARGE or _root_work(diff) > _MAX_ROOT_WORK:
        return False, cost  # rewriting it could take seconds: refused
    return _symbolically_equal(a, b, diff), cost


def _symbolically_equal(a: Any, b: Any, diff: Any) -> bool:
    """Exact equality of two guarded sympy expressions whose difference is ``diff``.

    ``sympy.simplify`` is deliberately not used: its run time is unpredictable (and
    its first call imports sympy.physics).
    """
    sp = _sympy()
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

# Candidates that list several answers: "41 or 42", "\pm 3" (unless the gold has a
# \pm), "+-3" (a plain-text \pm, also "-+3").
_HEDGE = re.compile(r"\\(?:pm|mp|lor|vee)(?![A-Za-z])|\b(?i:or|and)\b|\+\s*-|-\s*\+", _A)
# "1 or 2", "x = 1 \text{ or } x = 2", "1, 2, and 3": the joints of a list written in words.
_WORD_JOINT = re.compile(
    r"\s*,?\s*(?:\\(?:text|textrm|textnormal|textup|mbox|mathrm)\{\s*(?:or|and)\s*\}|\b(?:or|and)\b)\s*,?\s*", _A
)
_BRACED_THOUSANDS = re.compile(r"-?[0-9]{1,3}(?:\{,\}[0-9]{3})+(?:\.[0-9]+)?", _A)
# Rule "a comma before three digits is no list joint when the item would be zero-padded":
# nobody lists 0 as "000" or 5 as "05", so "1,000" and "(1,000)" are one thousand (refused
# where the gold is a list) and never match the list 1, 0 or the tuple (1, 0).
_ZERO_PADDED = re.compile(r"[-+]?0[0-9]+(?:\.[0-9]*)?", _A)
_MAX_NESTING = 6  # lists of lists of ...: deeper is refused
_MULTISETS = ("", "\\{\\}")  # a bare list ("all solutions") and a set


def _scalar_equal(cand: str, gold: str, budget: _Budget) -> bool:
    if cand == gold:
        return True
    if not cand or not gold:
        return False
    # "1{,}000" cannot be a list, so inside a tuple it is still one thousand
    if _BRACED_THOUSANDS.fullmatch(cand):
        cand = cand.replace("{,}", "")
    if _BRACED_THOUSANDS.fullmatch(gold):
        gold = gold.replace("{,}", "")
    fast = _same_number(cand, gold)
    if fast is not None:
        return fast  # both plain numbers: decided without sympy
    if _canonical(cand) == _canonical(gold):
        return True  # the same TeX up to spacing and optional braces
    if not budget.spend(_COMPARISON_CHARGE):
        return False
    equal, cost = _symbolic_verdict(cand, gold)
    return budget.spend(cost) and equal


def _units_match(cand: _Answer, gold: _Answer) -> bool:
    """Rule "units compared, not erased": the candidate names the gold's unit or none.

    * a gold with a unit takes the same unit (any spelling) or none: ``7\\text{ cm}`` and
      ``7`` answer ``7\\text{ cm}``; ``7\\text{ m}`` does not, and no conversion is ever
      made (``0.07\\text{ m}`` and ``70\\text{ mm}`` score 0 too);
    * a gold without a unit takes any unit (``7\\text{ cm}`` answers "7": the number
      asked for), except a degree sign after anything but a plain number:
      ``\\frac{\\pi}{6}^\\circ`` is not ``\\frac{\\pi}{6}`` (degrees, not radians);
    * a bare degree sign answers a gold in degrees Celsius or Fahrenheit (45° for 45°C).
    """
    if cand.unit == gold.unit or not cand.unit:
        return True
    if not gold.unit:
        return "deg" not in cand.unit.split("*") or _is_plain_number(cand.value)
    return cand.unit == "deg" and gold.unit in ("degC", "degF")


def _labels_match(cand: _Answer, gold: _Answer) -> bool:
    """Rule "two answers that name different quantities differ": when both sides carry a
    label (``y = 3`` against ``x = 3``, ``(y, x) = (1, 2)`` against ``(x, y) = (1, 2)``,
    ``a_2 = 5`` against ``a_1 = 5``), the labels must name the same thing
    (``normalise._label_key``: ``x_{1}`` is ``x_1``, ``BA`` is ``AB``). A label on one
    side only names the value and is not compared (``x = 3`` answers ``3`` and the other
    way round)."""
    if not (cand.label or gold.label):
        return True
    c_label = cand.label or _inequality_variable(cand.value)
    g_label = gold.label or _inequality_variable(gold.value)
    return not (c_label and g_label) or c_label == g_label


def _inequality_variable(value: str) -> str:
    """The variable an inequality bounds (``y`` in ``y \\le 2``, ``1 < y < 3``), as a label
    key, or "": its name is a label too, since it becomes an interval
    (``x \\in (-\\infty, 2]`` is not ``y \\le 2``)."""
    relations = _split_relations(value)
    if relations is None or any(op in ("=", "\\neq") for op in relations[1]):
        return ""
    named = [side for side in relations[0] if _is_label(side)]
    return _label_key(named[0]) if len(named) == 1 else ""


def _same_answer(cand: _Answer, gold: _Answer, budget: _Budget, depth: int = 0) -> bool:
    """Whether two normalised answers, units included, are the same answer.

    A side whose label was dropped (``y = -\\frac{1}{2}x + \\frac{3}{4}``) is also
    compared whole, as the equation it is, when the value alone does not match
    (``2x + 4y - 3 = 0``)."""
    if not _units_match(cand, gold) or not _labels_match(cand, gold):
        return False
    if _equivalent(cand.value, gold.value, budget, depth):
        return True
    if not (cand.labelled or gold.labelled):
        return False
    return _equivalent(cand.labelled or cand.value, gold.labelled or gold.value, budget, depth)


def _assigned(item: str) -> str | None:
    m = _LEADING_ASSIGNMENT.match(item.strip())
    return _WHITESPACE.sub("", m.group(1)) if m else None


def _items(cands: list[str], golds: list[str]) -> tuple[list[_Answer], list[_Answer]]:
    """The items of two lists, normalised. A label ``v =`` in front of an item is dropped
    when every item that has one names the same ``v`` (``x = 1, x = 2``); when they name
    several (``x = 1, y = 2``, ``AB = 4, CD = 5``) the names are part of the answer."""
    names = {_assigned(item) for item in (*cands, *golds)} - {None}
    keep = len(names) > 1
    return [_normalise_parts(c, keep) for c in cands], [_normalise_parts(g, keep) for g in golds]


def _all_equal(cands: list[str], golds: list[str], budget: _Budget, depth: int) -> bool:
    if len(cands) != len(golds):
        return False
    c_items, g_items = _items(cands, golds)
    return all(_same_answer(c, g, budget, depth) for c, g in zip(c_items, g_items))


def _same_multiset(cands: list[str], golds: list[str], budget: _Budget, depth: int) -> bool:
    """Whether the items match one to one in some order (each gold item used once).

    Identical items are paired first (a dict lookup each), the rest greedily: since
    equivalence is transitive, a greedy matching finds one if any exists. Item ``i``
    tries gold item ``i`` first, so a list in the gold's order costs one comparison
    per item.
    """
    if len(cands) != len(golds):
        return False
    c_items, g_items = _items(cands, golds)
    by_text: dict[_Answer, list[int]] = {}
    for j, g in enumerate(g_items):
        by_text.setdefault(g, []).append(j)
    rest = []
    for i, c in enumerate(c_items):
        if by_text.get(c):
            by_text[c].pop()
        else:
            rest.append(i)
    free = sorted(j for js in by_text.values() for j in js)
    for i in rest:
        order = ([i] if i in free else []) + [j for j in free if j != i]
        match = next((j for j in order if _same_answer(c_items[i], g_items[j], budget, depth)), None)
        if match is None:
            return False
        free.remove(match)
    return True


def _equivalent(cand: str, gold: str, budget: _Budget, depth: int = 0) -> bool:
    """Whether two normalised, non-empty answers are the same answer."""
    if cand == gold:
        return True
    if not cand or not gold or depth > _MAX_NESTING:
        return False
    depth += 1
    if _is_plain_number(gold):  # a regex: the Fraction is built once, in _same_number
        # "1,000" is one thousand only when a single number is expected at all
        if _THOUSANDS.fullmatch(cand):
            cand = cand.replace("{,}", "").replace(",", "")
        gold = gold.replace("{,}", "").replace(",", "")
        fast = _same_number(cand, gold)
        if fast is not None:
            return fast  # two plain numbers (the common case): no hedge, no parts
    if "\\pm" in gold or "\\mp" in gold:
        # A gold "1 \pm \sqrt{2}" is the set of its two values; a candidate must be
        # written with one \pm too and have the same two values, in either order.
        if _plus_minus_count(gold) != 1 or _plus_minus_count(cand) != 1:
            return _canonical(cand) == _canonical(gold)
        if _HEDGE.search(_plus_minus_values(cand)[0]):
            return False  # another hedge besides the \pm
        return _same_multiset(list(_plus_minus_values(cand)), list(_plus_minus_values(gold)), budget, depth)
    if _HEDGE.search(gold) and (listed_gold := _words_to_list(gold)) is not None:
        gold = listed_gold  # a gold "6 \text{ and } 8" lists two values
        if cand == gold:
            return True
    if _HEDGE.search(cand):
        listed = _listed_in_words(cand, gold)
        if listed is not None:
            return _equivalent(listed, gold, budget, depth)
        return _canonical(cand) == _canonical(gold)  # a list of candidates, unless the gold says so
    matrices = _split_matrix(cand), _split_matrix(gold)
    if matrices != (None, None):
        if None in matrices:
            return False
        (c_env, c_rows), (g_env, g_rows) = matrices  # type: ignore[misc]
        return c_env == g_env and len(c_rows) == len(g_rows) and all(
            _all_equal(c, g, budget, depth) for c, g in zip(c_rows, g_rows)
        )
    unions = _split_union(cand), _split_union(gold)
    if unions != (None, None):
        # a union of sets in any order: (3, \infty) \cup (-\infty, 2) is the same set
        return None not in unions and _same_multiset(unions[0], unions[1], budget, depth)  # type: ignore[arg-type]
    lists = _split_list(cand), _split_list(gold)
    if lists != (None, None):  # before relations (see below)
        if None in lists:
            return _inequality_as_interval(cand, gold, budget, depth)
        (c_delims, c_items), (g_delims, g_items) = lists  # type: ignore[misc]
        if any(_ZERO_PADDED.fullmatch(item) for item in (*c_items, *g_items)):
            return False  # "1,000" is a thousand or nothing, never the list 1, 0
        # sets and bare lists ("all solutions, separated by commas") in any order, and
        # one for the other; tuples and intervals in order, with the same brackets
        if c_delims in _MULTISETS and g_delims in _MULTISETS:
            return _same_multiset(c_items, g_items, budget, depth)
        return c_delims == g_delims and _all_equal(c_items, g_items, budget, depth)
    # after lists: "x = 1, x = 2" is a list of two equations, not one chain
    relations = _split_relations(cand), _split_relations(gold)
    if relations != (None, None):
        if None in relations:
            return _inequality_as_interval(cand, gold, budget, depth)
        (c_sides, c_ops), (g_sides, g_ops) = relations  # type: ignore[misc]
        return _relations_equal(c_sides, c_ops, g_sides, g_ops, budget, depth)
    return _scalar_equal(cand, gold, budget)


def _relations_equal(
    c_sides: list[str], c_ops: list[str], g_sides: list[str], g_ops: list[str], budget: _Budget, depth: int
) -> bool:
    """Rule "relations read in either direction": ``x < 3`` equals ``x<3`` and ``3 > x``,
    ``25 = x^2 + y^2`` equals ``x^2 + y^2 = 25`` (``\\neq`` too): the same relations
    between equal sides, left to right or right to left."""
    if c_ops == g_ops and _all_equal(c_sides, g_sides, budget, depth):
        return True
    m_sides, m_ops = _mirrored(c_sides, c_ops)
    if m_ops == g_ops and (m_sides, m_ops) != (c_sides, c_ops) and _all_equal(m_sides, g_sides, budget, depth):
        return True  # a palindrome such as "x = x" was compared above already
    if len(c_ops) != 1 or len(g_ops) != 1 or _states_value(c_sides) or _states_value(g_sides):
        return False
    return budget.spend(_COMPARISON_CHARGE) and _proportional(c_sides, c_ops[0], g_sides, g_ops[0])


def _states_value(sides: list[str]) -> bool:
    """Whether a relation states a value: a name on one side, a constant on the other
    (``x = 1``, ``x < 1``, ``3 \\geq a``). A solution is compared side by side, never up to
    a factor: ``4x + 3 = 7`` restates the question "solve 4x + 3 = 7", it does not answer
    ``x = 1``."""
    return any(_is_label(name) and not _has_variable(value) for name, value in (sides, sides[::-1]))


def _has_variable(s: str) -> bool:
    return any(tok.isalpha() or tok[1:] in _GREEK for tok, _, _ in _tokens(s))


def _proportional(c_sides: list[str], c_op: str, g_sides: list[str], g_op: str) -> bool:
    """Rule "a relation equals the same relation times a nonzero constant", for relations
    that do not state a value (curves, lines, planes): ``a = b`` and ``c = d`` are one
    equation when ``a - b = k (c - d)`` for a constant ``k != 0``
    (``-x-2y+3=0`` is ``x+2y-3=0``, ``y = -\\frac{1}{2}x+\\frac{3}{4}`` is
    ``2x+4y-3=0``); an inequality too, with ``k > 0``, or ``k < 0`` and the direction
    flipped (``-x > -1`` is ``x < 1``). The same solution set, proved without solving:
    on the exact path only (polynomials with rational and square-root coefficients)."""
    c_diff, g_diff = _exact_difference(*c_sides), _exact_difference(*g_sides)
    if not c_diff or not g_diff or c_diff.keys() != g_diff.keys():
        return False
    key = next(iter(g_diff))
    k = c_diff[key] / g_diff[key]
    if any(c_diff[t] != k * g_diff[t] for t in g_diff):
        return False
    if c_op in ("=", "\\neq"):
        return c_op == g_op
    return (c_op if k > 0 else _MIRROR[c_op]) == g_op


def _exact_difference(left: str, right: str) -> dict | None:
    """``left - right`` expanded, as ``fast`` spells it, or None outside the exact path."""
    value = _exact(f"({_normalise_parts(left).value})-({_normalise_parts(right).value})")
    if value is None:
        return None
    try:
        return _expanded(value)
    except _Unsupported:
        return None


def _words_to_list(s: str) -> str | None:
    """``6 \\text{ and } 8`` -> ``6, 8``; None unless that leaves a list and no other hedge."""
    listed = _WORD_JOINT.sub(", ", s)
    if _HEDGE.search(listed) or listed.startswith(",") or listed.endswith(","):
        return None
    return listed if _split_list(listed) is not None else None


def _inequality_as_interval(cand: str, gold: str, budget: _Budget, depth: int) -> bool:
    """An inequality on one side, an interval (or anything else) on the other."""
    pair = _interval_of(cand, gold)
    return pair is not None and _equivalent(*pair, budget, depth)


def _interval_of(cand: str, gold: str) -> tuple[str, str] | None:
    """Rule "a one-variable inequality is the interval it describes": ``-2 < x \\le 3`` is
    ``(-2, 3]``, ``x < 3`` is ``(-\\infty, 3)``. ``(cand, gold)`` with the inequality
    written as its interval, or None. A gold inequality takes its interval; a gold
    interval takes an inequality only when it cannot be read as a point (it has a
    square bracket or an infinity: ``(1, 2)`` may be the point (1, 2))."""
    c_rel, g_rel = _split_relations(cand), _split_relations(gold)
    if (c_rel is None) == (g_rel is None):
        return None
    if g_rel is not None:
        interval = _as_interval(*g_rel)
        return (cand, interval) if interval is not None else None
    if "[" not in gold and "]" not in gold and "\\infty" not in gold:
        return None
    interval = _as_interval(*c_rel)  # type: ignore[misc]
    return (interval, gold) if interval is not None else None


def _as_interval(sides: list[str], ops: list[str]) -> str | None:
    if ops and ops[0] in (">", "\\geq"):
        sides, ops = _mirrored(sides, ops)  # 3 > x > 1 is 1 < x < 3
    if not all(op in ("<", "\\leq") for op in ops):
        return None
    if len(ops) == 2 and _is_label(sides[1]):
        low, high = sides[0], sides[2]
        return f"{'(' if ops[0] == '<' else '['}{low}, {high}{')' if ops[1] == '<' else ']'}"
    if len(ops) == 1 and _is_label(sides[0]):  # x < 3
        return f"(-\\infty, {sides[1]}{')' if ops[0] == '<' else ']'}"
    if len(ops) == 1 and _is_label(sides[1]):  # 3 < x
        return f"{'(' if ops[0] == '<' else '['}{sides[0]}, \\infty)"
    return None


def _is_label(s: str) -> bool:
    return _LABEL_RE.fullmatch(s.strip()) is not None


def _listed_in_words(cand: str, gold: str) -> str | None:
    """Rule "a list may be written in words where the gold lists several values":
    ``1 \\text{ or } 2`` and ``x = 1 \\text{ or } x = 2`` are the list ``1, 2`` when the
    gold is a bare list or a set (``1, 2``, ``\\{1, 2\\}``); for any other gold "or" still
    lists candidates (a hedge). None when ``cand`` is not such a list or hedges in another way too."""
    gold_list = _split_list(gold)
    if gold_list is None or gold_list[0] not in _MULTISETS or _HEDGE.search(gold):
        return None
    return _words_to_list(cand)
