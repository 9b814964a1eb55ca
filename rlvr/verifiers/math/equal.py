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
    equal, cost = _symbolic_verdict(cand, gold)
    return budget.spend(cost) and equal


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
