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
from rlvr.verifiers.math.fast import _exact_verdict
from rlvr.verifiers.math.forms import (
    _canonical,
    _mirrored,
    _plus_minus_count,
    _plus_minus_values,
    _split_list,
    _split_matrix,
    _split_relations,
    _split_union,
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
from rlvr.verifiers.math.normalise import _THOUSANDS, _exact_number, _normalise, _same_number
from rlvr.verifiers.math.parse import _to_sympy

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
_BRACED_THOUSANDS = re.compile(r"-?[0-9]{1,3}(?:\{,\}[0-9]{3})+(?:\.[0-9]+)?", _A)
_MAX_NESTING = 6  # lists of lists of ...: deeper is refused


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


def _all_equal(cands: list[str], golds: list[str], budget: _Budget, depth: int) -> bool:
    return len(cands) == len(golds) and all(
        _equivalent(_normalise(c), _normalise(g), budget, depth) for c, g in zip(cands, golds)
    )


def _same_multiset(cands: list[str], golds: list[str], budget: _Budget, depth: int) -> bool:
    """Whether the items match one to one in some order (each gold item used once).

    Identical items are paired first (a dict lookup each), the rest greedily: since
    equivalence is transitive, a greedy matching finds one if any exists. Item ``i``
    tries gold item ``i`` first, so a list in the gold's order costs one comparison
    per item.
    """
    if len(cands) != len(golds):
        return False
    cands, golds = [_normalise(c) for c in cands], [_normalise(g) for g in golds]
    by_text: dict[str, list[int]] = {}
    for j, g in enumerate(golds):
        by_text.setdefault(g, []).append(j)
    rest = []
    for i, c in enumerate(cands):
        if by_text.get(c):
            by_text[c].pop()
        else:
            rest.append(i)
    free = sorted(j for js in by_text.values() for j in js)
    for i in rest:
        order = ([i] if i in free else []) + [j for j in free if j != i]
        match = next((j for j in order if _equivalent(cands[i], golds[j], budget, depth)), None)
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
    if _THOUSANDS.fullmatch(gold) or _exact_number(gold) is not None:
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
    if _HEDGE.search(cand):
        return _canonical(cand) == _canonical(gold)  # a list of candidates, unless the gold says so
    matrices = _split_matrix(cand), _split_matrix(gold)
    if matrices != (None, None):
        if None in matrices:
            return False
        (c_env, c_rows), (g_env, g_rows) = matrices  # type: ignore[misc]
        return c_env == g_env and len(c_rows) == len(g_rows) and all(
            _all_equal(c, g, budget, depth) for c, g in zip(c_rows, g_rows)
        )
    relations = _split_relations(cand), _split_relations(gold)
    if relations != (None, None):
        if None in relations:
            return False
        (c_sides, c_ops), (g_sides, g_ops) = relations  # type: ignore[misc]
        return _relations_equal(c_sides, c_ops, g_sides, g_ops, budget, depth)
    unions = _split_union(cand), _split_union(gold)
    if unions != (None, None):
        # a union of sets in any order: (3, \infty) \cup (-\infty, 2) is the same set
        return None not in unions and _same_multiset(unions[0], unions[1], budget, depth)  # type: ignore[arg-type]
    lists = _split_list(cand), _split_list(gold)
    if lists != (None, None):
        if None in lists:
            return False
        (c_delims, c_items), (g_delims, g_items) = lists  # type: ignore[misc]
        if c_delims != g_delims:
            return False
        # sets and bare lists ("all solutions, separated by commas") in any order;
        # tuples and intervals in order
        if c_delims in ("", "\\{\\}"):
            return _same_multiset(c_items, g_items, budget, depth)
        return _all_equal(c_items, g_items, budget, depth)
    return _scalar_equal(cand, gold, budget)


def _relations_equal(
    c_sides: list[str], c_ops: list[str], g_sides: list[str], g_ops: list[str], budget: _Budget, depth: int
) -> bool:
    """``x < 3`` equals ``x<3`` and ``3 > x``: the same relations between equal sides,
    read in either direction."""
    if c_ops == g_ops and _all_equal(c_sides, g_sides, budget, depth):
        return True
    m_sides, m_ops = _mirrored(c_sides, c_ops)
    return m_ops == g_ops and m_ops != c_ops and _all_equal(m_sides, g_sides, budget, depth)
