"""Strict, fast reward for math answers written in ``\\boxed{...}``.

The package reads in the order of a verdict: ``extract`` (the last box),
``normalise`` (canonical spelling, exact numbers), ``parse`` + ``guards`` (a LaTeX
subset into size-bounded sympy), ``fast`` (the same subset in exact arithmetic),
``forms`` (answers of several parts: lists, sets, unions, relations, matrices, ``\\pm``),
``equal`` (equivalence); this file holds the reward.

A lenient verifier gets gamed by the policy (hedging, listing candidates, dumping a
float approximation), so every rule here errs towards 0. Public entry points:

* :func:`boxed_math` -- the reward, 1.0 or 0.0;
* :func:`extract_last_boxed` -- the answer a completion commits to.

Normalisation splits an answer into its value and its unit (``7\\text{ cm}^2`` is 7 and
``cm^2``): units are compared, never erased (``equal._units_match``); a label is dropped
only when it is not on the other side (``normalise._drop_assignment``) and compared when both
sides carry one (``equal._labels_match``); spellings that TeX
renders the same are one form (``forms._canonical``). docs/verifiers.md lists every rule
and the decisions behind it.

Answers are compared in three tiers, cheapest first:

1. equal strings after :func:`_normalise` (applied to both sides);
2. exact numbers (integers, decimals, ``a/b``, ``\\frac{a}{b}``) with regexes and
   :class:`fractions.Fraction`; sympy is not even imported on this path;
3. symbolic equality: our own parser for a LaTeX subset (no ``eval``, no
   ``sympify``) builds sympy expressions under size guards; only exact rewrites
   (expand, cancel, radsimp, sqrtdenest) can prove equality, evaluation at 30 digits
   can only prove a difference. There is no float tolerance anywhere. Most answers
   (rationals, square roots of numbers, pi, polynomials) never reach sympy: the
   same parser with exact hooks (``fast``) returns sympy's verdict and cost itself.

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

from rlvr.verifiers.math.equal import _Budget, _same_answer, _symbolic_verdict
from rlvr.verifiers.math.extract import MAX_ANSWER_CHARS, _boxes, _unwrap_nested, extract_last_boxed
from rlvr.verifiers.math.fast import _exact
from rlvr.verifiers.math.forms import _canonical
from rlvr.verifiers.math.normalise import _exact_number, _exact_number_cached, _normalise_cached, _normalise_parts
from rlvr.verifiers.math.parse import _to_sympy

__all__ = ["MAX_ANSWER_CHARS", "answer_key", "boxed_math", "clear_caches", "extract_last_boxed"]

_MAX_DISTINCT_BOXES = 16  # more distinct boxed answers than this is a hedge, not a proof

# ---------------------------------------------------------------------------- the reward


def clear_caches() -> None:
    """Forget cached parses and symbolic verdicts (to time the cold path; verdicts never
    depend on the caches)."""
    _normalise_cached.cache_clear()
    _exact_number_cached.cache_clear()
    _to_sympy.cache_clear()
    _exact.cache_clear()
    _symbolic_verdict.cache_clear()
    _canonical.cache_clear()


def _verdict(completion: str, answer: str) -> bool:
    if not isinstance(completion, str) or not isinstance(answer, str):
        return False
    boxes = _boxes(completion)
    if not boxes or any(b is None or len(b) > MAX_ANSWER_CHARS for b in boxes):
        return False  # malformed, unclosed or oversized box anywhere: no clean answer
    gold = _normalise_parts(_unwrap_nested(answer))
    final = _normalise_parts(_unwrap_nested(boxes[-1]))  # type: ignore[arg-type]
    budget = _Budget()
    if not gold.value or not final.value or not _same_answer(final, gold, budget):
        return False
    # Hedging guard: every other non-empty box must be the same answer. Empty boxes
    # (an echoed "put it in \boxed{}") are ignored; repeats are checked once, in
    # order (dicts, not sets), so that the budget makes the same verdict every run.
    others: dict[tuple[str, str], None] = {}
    for raw in dict.fromkeys(boxes[:-1]):
        norm = _normalise_parts(_unwrap_nested(raw))  # type: ignore[arg-type]
        if norm.value and norm != final:
            others[norm] = None
            if len(others) > _MAX_DISTINCT_BOXES:
                return False
    return all(_same_answer(other, gold, budget) for other in others)  # type: ignore[arg-type]


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


def _warm_up() -> None:
    """Import sympy and run one symbolic comparison, so that a fresh process's first
    answer that needs sympy does not pay the 0.3-1.3 s import (the verification pool
    calls this in each worker before it takes items). Verdicts do not change."""
    # cube roots keep it off the exact fast path; the expansion runs sympy's numeric
    # probes and exact rewrites once (the first cancel() alone costs ~25 ms)
    boxed_math(r"\boxed{\sqrt[3]{2}(x+1)^2}", r"\sqrt[3]{2}x^2+2\sqrt[3]{2}x+\sqrt[3]{2}")


boxed_math.warm_up = _warm_up  # type: ignore[attr-defined]


def _gold_matches_itself(answer: str) -> None:
    """boxed_math's data check: a gold answer it cannot match even against itself can never be
    rewarded (a rationale, not a final answer)."""
    if boxed_math("\\boxed{" + answer + "}", answer) != 1.0:
        raise ValueError("cannot be matched by the verifier even against itself (not a final answer)")


boxed_math.check_answer = _gold_matches_itself  # type: ignore[attr-defined]


def _spelling(box: str) -> str:
    norm, unit = _normalise_parts(_unwrap_nested(box))[:2]
    value = _exact_number(norm)
    if value is not None and not isinstance(value, str):
        norm = str(value)  # 0.5, 1/2 and \frac{1}{2} are one vote: "1/2"
    return f"{norm} [{unit}]" if norm and unit else norm  # 7 cm and 7 m are two votes


def answer_key(completion: str) -> str | None:
    """The final answer a completion commits to, spelled canonically, for majority voting
    (maj@k): plain numbers as exact fractions ("0.50", "1/2" and "\\frac{1}{2}" give "1/2"),
    anything else as boxed_math's normalised spelling (symbolic equivalents such as "2x" and
    "x+x" stay two votes), then the unit if any ("7 [cm]"). None when boxed_math could never accept the completion's boxes:
    no box, a malformed or oversized one, or boxes with different answers (a hedge casts no vote).

    >>> answer_key(r"so \\boxed{0.50}"), answer_key(r"\\boxed{1} or \\boxed{2}")
    ('1/2', None)
    """
    try:
        boxes = _boxes(completion)
        if not boxes or any(b is None or len(b) > MAX_ANSWER_CHARS for b in boxes):
            return None
        final = _spelling(boxes[-1])  # type: ignore[arg-type]
        if not final or any((other := _spelling(b)) and other != final for b in boxes[:-1]):  # type: ignore[arg-type]
            return None
        return final
    except Exception:  # like the reward itself: never raises
        return None


boxed_math.answer_key = answer_key  # type: ignore[attr-defined]
