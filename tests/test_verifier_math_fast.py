"""The exact fast path (rlvr/verifiers/math/fast.py) against sympy, the reference.

Whenever ``_exact_verdict`` decides a comparison, its ``(equal, cost)`` must be the
pair sympy's ``_sympy_verdict`` returns, cost included (the per-call budget is paid
from it), so ``boxed_math`` gives the same verdict with or without the fast path.
"""

from __future__ import annotations

import random
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlvr.verifiers.math.equal as equal
from rlvr.verifiers.math import boxed_math, clear_caches
from rlvr.verifiers.math.equal import _sympy_verdict
from rlvr.verifiers.math.fast import _exact, _exact_verdict, _split_square
from rlvr.verifiers.math.normalise import _normalise


def box(content: str) -> str:
    return f"So the answer is \\boxed{{{content}}}."


def same_as_sympy(cand: str, gold: str) -> tuple[bool, int] | None:
    """The fast pair (asserted equal to sympy's), or None where sympy decides alone."""
    cand, gold = _normalise(cand), _normalise(gold)
    fast = _exact_verdict(cand, gold)
    if fast is not None:
        assert fast == _sympy_verdict(cand, gold), (cand, gold)
    return fast


# ------------------------------------------------------------------ generated answers

VARIABLES = ["x", "y", "\\theta"]


def latex_number(q: Fraction, rng: random.Random) -> str:
    """One of several spellings of a rational: ``\\frac{p}{q}``, ``p/q``, a decimal."""
    if q.denominator == 1:
        return str(q.numerator) if rng.random() < 0.8 else f"{q.numerator}.0"
    sign, p, d = ("-" if q < 0 else ""), abs(q.numerator), q.denominator
    if rng.random() < 0.3 and 10**6 % d == 0:  # a terminating decimal, written out
        return f"{sign}{p * (10**6 // d) / 10**6:.6f}".rstrip("0")
    return rng.choice([f"{sign}\\frac{{{p}}}{{{d}}}", f"{sign}{p}/{d}", f"{sign}\\frac{{{2 * p}}}{{{2 * d}}}"])


def random_term(rng: random.Random) -> str:
    coef = Fraction(rng.randint(-12, 12) or 1, rng.choice([1, 1, 2, 3, 4, 6]))
    parts = [latex_number(coef, rng)]
    if rng.random() < 0.5:
        parts.append(f"\\sqrt{{{rng.choice([2, 3, 5, 8, 12, 18, 27, 50, 0.5, 4])}}}")
    if rng.random() < 0.3:
        parts.append("\\pi" + rng.choice(["", "^2", "^{-1}"]))
    if rng.random() < 0.4:
        parts.append(rng.choice(VARIABLES) + rng.choice(["", "^2", "^{3}"]))
    glue = rng.choice(["", " ", "\\cdot ", "*"])
    text = glue.join(parts) if not parts[0].startswith("-") or glue in ("", " ") else parts[0] + "".join(parts[1:])
    return f"({text})" if rng.random() < 0.2 else text


def random_expr(rng: random.Random, depth: int = 0) -> str:
    roll = rng.random()
    if depth > 2 or roll < 0.35:
        return random_term(rng)
    a, b = random_expr(rng, depth + 1), random_expr(rng, depth + 1)
    if roll < 0.6:
        return f"{a}{rng.choice(['+', ' - ', '-'])}{b}"
    if roll < 0.75:
        return f"\\frac{{{a}}}{{{b}}}"
    if roll < 0.85:
        return f"({a})({b})"
    if roll < 0.92:
        return f"({a})^{{{rng.choice([0, 1, 2, 3, -1, -2])}}}"
    return f"\\sqrt{{{a}}}"


def spellings(rng: random.Random) -> tuple[str, str]:
    """A pair of answers, equal about half the time (one rewritten from the other)."""
    a = random_expr(rng)
    roll = rng.random()
    if roll < 0.1:  # a power or product of sums, against its expansion
        p, q, r = (random_term(rng) for _ in range(3))
        if rng.random() < 0.5:
            return f"({p}+{q})^2", f"({p})^2+2({p})({q})+({q})^{rng.choice([2, 2, 3])}"
        return f"({p}+{q})({p}-{r})", f"({p})^2-({p})({r})+({q})({p})-({q})({r})+{rng.choice([0, 0, 1])}"
    if roll < 0.15:  # the same product, reordered
        p, q = random_expr(rng, 2), random_expr(rng, 2)
        return f"({p})({q})", f"({q})({p})" if rng.random() < 0.7 else f"({q})({p})({p})"
    if roll < 0.3:
        return a, random_expr(rng)
    if roll < 0.5:
        return a, f"{a}+0"
    if roll < 0.65:
        return a, f"\\frac{{2({a})}}{{2}}"
    if roll < 0.8:
        return a, f"{a}+\\frac{{1}}{{{rng.randint(2, 10**6)}}}"  # close but different
    return a, f"-(-{a})" if rng.random() < 0.5 else f"{a}-{random_term(rng)}"


def test_generated_corpus_matches_sympy() -> None:
    rng = random.Random(1234)
    decided = equal_count = 0
    for _ in range(1500):
        cand, gold = spellings(rng)
        fast = same_as_sympy(cand, gold)
        decided += fast is not None
        equal_count += bool(fast and fast[0])
    # the fast path must cover most of the corpus, and both verdicts, or it tests nothing
    assert decided > 700 and equal_count > 150, (decided, equal_count)


def test_bench_mix_matches_sympy_and_is_mostly_fast() -> None:
    from bench.verify_math import make_problem  # the benchmark's own answers

    rng = random.Random(7)
    decided = total = 0
    for _ in range(300):
        gold, rights, wrongs = make_problem(rng)
        for cand in rights + wrongs:
            total += 1
            decided += same_as_sympy(cand, gold) is not None or _normalise(cand) == _normalise(gold)
    assert decided / total > 0.85, decided / total


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**64 - 1))  # a seed, not st.randoms(): that one draws floats, and
def test_property_fast_pair_is_sympys(seed: int) -> None:  # some import here flushes subnormals
    same_as_sympy(*spellings(random.Random(seed)))


# ------------------------------------------------------------- hand-picked adversaries

ADVERSARIAL = [
    # (candidate, gold, reward): no float tolerance, and every bound still holds
    ("0.3333", r"\frac{1}{3}", 0.0),
    ("0.33333333333333333333333333333", r"\frac{1}{3}", 0.0),
    ("3.14159", r"\pi", 0.0),
    ("3.14159265358979323846264338328", r"\pi", 0.0),
    ("2.828", r"\sqrt{8}", 0.0),
    ("1.41421356237309504880168872421", r"\sqrt{2}", 0.0),  # within 1e-29 of it
    (r"\frac{22}{7}", r"\pi", 0.0),
    (r"2\sqrt{2}", r"\sqrt{8}", 1.0),
    (r"\sqrt{8}", r"2.828", 0.0),
    (r"\frac{\sqrt{2}}{2}", r"\frac{1}{\sqrt{2}}", 1.0),
    (r"\frac{\sqrt{6}}{3}", r"\sqrt{\frac{2}{3}}", 1.0),
    (r"\sqrt{2}\sqrt{3}", r"\sqrt{6}", 1.0),
    (r"\sqrt{6}\cdot\sqrt{10}", r"2\sqrt{15}", 1.0),
    (r"0.5\sqrt{2}", r"\frac{\sqrt{2}}{2}", 1.0),
    (r"\frac{\pi^2}{\pi}", r"\pi", 1.0),
    (r"\frac{3\pi}{4}", r"0.75\pi", 1.0),
    (r"\frac{3\pi}{4}", r"\frac{3}{4}", 0.0),
    ("9999", r"\sqrt{99980001}", 1.0),
    ("1000000007", r"\sqrt{1000000014000000049}", 1.0),  # radicand past the fast bound
    (r"(1+\sqrt{2})^2", r"3+2\sqrt{2}", 1.0),  # a power of a sum: sympy decides
    (r"\frac{1}{1+\sqrt{2}}", r"\sqrt{2}-1", 1.0),
    (r"\sqrt[3]{8}", "2", 1.0),
    ("2^{10}", "1024", 1.0),
    ("2^{-2}", "0.25", 1.0),
    ("2^{1000}", "2^{1000}+1", 0.0),
    ("2^{256}", "2^{256}", 1.0),
    ("(2^{64})^{4}", "2^{256}", 1.0),
    ("2^{100000}", "2^{100000}", 1.0),  # equal strings, never computed
    ("2^{100000}", "2^{100000}+0", 0.0),  # refused by the guards, fast path or not
    ("10^{10^{10}}", "10^{10^{10}}+0", 0.0),
    ("10^{10^{10}}", "1", 0.0),
    (r"(\sqrt{2})^{150}", "2^{75}", 0.0),  # sympy refuses powers of roots past 100
    (r"(\sqrt{2})^{20}", "1024", 1.0),
    ("x^{101}", "x^{101}+0", 0.0),
    ("x^{64}", "x^{32}x^{32}", 1.0),
    ("10!", "3628800", 1.0),
    ("31!", "31!+0", 1.0),
    ("0^0", "1", 1.0),
    ("0^{-1}", "0^{-1}+0", 0.0),
    (r"\frac{1}{0}", r"\frac{1}{0}+0", 0.0),
    (r"\sqrt{-4}", "2i", 0.0),
    (r"x^2+2x+1", "(x+1)^2", 1.0),
    (r"x^2 + 2 x + 1", "x^2+2x+1", 1.0),
    (r"x^2+1", "(x+1)^2", 0.0),
    (r"\frac{x}{2}+\frac{y}{3}", r"\frac{3x+2y}{6}", 1.0),
    (r"2\theta", r"\theta+\theta", 1.0),
    (r"\sqrt{" + "9" * 60 + "}", r"\sqrt{" + "9" * 60 + "}+0", 1.0),  # past the fast bound
    (r"2\sqrt{" + "9" * 60 + "}", r"\sqrt{" + "9" * 60 + r"}+\sqrt{" + "9" * 60 + "}", 0.0),  # 120 digits
    ("1." + "0" * 400 + "1", "1", 0.0),
    ("0x2A", "42", 0.0),
    ("4.2e1", "42", 0.0),
]


@pytest.mark.parametrize("cand, gold, reward", ADVERSARIAL)
def test_adversarial_same_reward_without_fast_path(
    cand: str, gold: str, reward: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    same_as_sympy(cand, gold)
    clear_caches()  # the cold path; its time (under 1 s of CPU) is bench/time_bounds.py's
    fast = boxed_math(box(cand), gold)
    monkeypatch.setattr(equal, "_exact_verdict", lambda cand, gold: None)
    clear_caches()
    slow = boxed_math(box(cand), gold)
    clear_caches()
    assert fast == slow == reward


def test_fast_path_needs_no_sympy() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from rlvr.verifiers.math import boxed_math\n"
        r"assert boxed_math('\\boxed{\\sqrt{8}}', '2\\sqrt{2}') == 1.0" "\n"
        r"assert boxed_math('\\boxed{\\frac{5\\pi}{6}}', '5\\pi/6') == 1.0" "\n"
        r"assert boxed_math('\\boxed{x^2 + 4 x + 4}', 'x^2+4x+4') == 1.0" "\n"
        r"assert boxed_math('\\boxed{0.3333}', '\\frac{1}{3}') == 0.0" "\n"
        "assert 'sympy' not in sys.modules, 'sympy was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_square_split() -> None:
    for n in [1, 2, 4, 8, 12, 18, 50, 99980001, 2 * 997**2, 1009 * 1013, 1009**2, 999999937, 10**9]:
        s, k = _split_square(n)
        assert s * s * k == n
        assert all(k % (p * p) for p in range(2, 1100)), n  # square-free
    assert _exact("x((x+1)^2+1)") is None and _exact(r"\sqrt{x}") is None  # left to sympy


# -------------------------------------------------- whole rewards, budget included


def rewards_with_and_without_fast_path(cases, monkeypatch: pytest.MonkeyPatch) -> tuple[list[float], list[float]]:
    """boxed_math's reward for each (completion, gold), caches cleared before each item: first
    with the fast path, then with it switched off (sympy decides everything)."""

    def rewards() -> list[float]:
        out = []
        for completion, gold in cases:
            clear_caches()
            out.append(boxed_math(completion, gold))
        clear_caches()
        return out

    fast = rewards()
    monkeypatch.setattr(equal, "_exact_verdict", lambda cand, gold: None)
    return fast, rewards()


def test_many_boxes_same_rewards_and_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Completions with several boxes pay the per-call budget many times: the fast path
    must charge exactly what sympy would, or a later comparison could change verdict."""
    rng = random.Random(99)
    cases = []
    for _ in range(150):
        gold = random_expr(rng)
        boxes = [spellings(rng)[rng.random() < 0.5] for _ in range(rng.randint(1, 3))]
        boxes += [gold, f"{gold}+0", f"\\frac{{3({gold})}}{{3}}"][: rng.randint(1, 3)]
        rng.shuffle(boxes)
        cases.append((" and ".join(box(b) for b in boxes), gold))
    spell = [r"(x+1)^2", "x^2+2x+1", "1+2x+x^2", "x^2+x+x+1", "(1+x)^2", "2x+x^2+1"]
    cases.append((" ".join(box(s) for s in spell * 3), "x^2+2x+1"))
    # Each "(x+1)^8+0+..." costs 50 + 18 against the expanded gold: 14 comparisons fit
    # in the budget of 1000, 15 do not. Both paths must agree on where it runs out.
    gold8 = "x^8+8x^7+28x^6+56x^5+70x^4+56x^3+28x^2+8x+1"
    assert _sympy_verdict("(x+1)^8", gold8) == (True, 18)
    for n in (14, 15):
        cases.append((" ".join(box("(x+1)^8" + "+0" * i) for i in range(n)), gold8))
    fast, slow = rewards_with_and_without_fast_path(cases, monkeypatch)
    assert fast == slow
    assert 0.0 in fast and 1.0 in fast
    assert fast[-2:] == [1.0, 0.0]  # the budget ran out at the 15th comparison


def test_existing_cases_same_rewards_without_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every hand-written case of test_verifier_math.py (correct, wrong, pathological,
    sympy traps, notations, hedges, decisions) scores the same with and without the fast path, so those tests keep
    covering the sympy path too."""
    from test_verifier_math import (
        CORRECT,
        DECISIONS,
        HIDDEN_HEDGES,
        NOTATION,
        NOTATION_NEAR_MISSES,
        PATHOLOGICAL,
        SYMPY_TRAPS,
        WRONG,
        boxed_unless_boxed,
    )

    cases = [(c, a) for c, a in CORRECT + WRONG + HIDDEN_HEDGES + NOTATION + NOTATION_NEAR_MISSES]
    cases += [(boxed_unless_boxed(c), a) for c, a, _ in PATHOLOGICAL + SYMPY_TRAPS + DECISIONS]
    fast, slow = rewards_with_and_without_fast_path(cases, monkeypatch)
    assert fast == slow
