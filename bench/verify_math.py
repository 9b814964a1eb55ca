"""Items/s of rlvr's boxed_math vs Math-Verify on the same realistic mix of completions.

    .venv/bin/pip install -e ".[bench]"          # Math-Verify, for this script only
    .venv/bin/python bench/verify_math.py        # 1000 items, one process, one core
    .venv/bin/python bench/verify_math.py --items 4000 --seed 1
    .venv/bin/python bench/verify_math.py --integers-only   # GSM8K-like: every gold an integer
    .venv/bin/python bench/verify_math.py --sympy-only      # without the exact fast path

The mix (seeded) imitates what a policy writes on a MATH/GSM8K-style set: a few hundred
characters of reasoning, then mostly one boxed answer; each prompt has its own gold
(integers half the time, else fractions, roots, pi, tuples, polynomials, percentages,
decimals) and G = 8 completions in a row, as in a GRPO batch: about half wrong, in
several spellings, some hedged, unboxed or repeated boxes. Caches only help within a
prompt's group, as in training. Both verifiers
see identical (completion, gold) pairs; Math-Verify's gold is parsed once per item,
as a reward function would. Where the verdicts differ, a few examples are printed:
by design boxed_math is stricter (no float tolerance, no unboxed fallback, hedges 0).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import time

from rlvr.verifiers.math import boxed_math, clear_caches

FILLER = (
    "First, let us restate the problem and identify what is being asked. "
    "We set up the relevant quantities, simplify step by step, and check each step. "
)
def make_problem(rng: random.Random, integers_only: bool = False) -> tuple[str, list[str], list[str]]:
    """A gold answer, correct spellings of it and plausible wrong answers."""
    kind = "int" if integers_only else rng.choices(
        ["int", "frac", "root", "pi", "tuple", "poly", "percent", "decimal"], weights=[50, 15, 10, 5, 5, 5, 5, 5]
    )[0]
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    if kind == "int":
        n = rng.randint(-50, 5000)
        return str(n), [str(n), f"{n}.0", f"x = {n}"], [str(n + rng.choice([-2, -1, 1, 10])), str(-n)]
    if kind == "frac":
        g = math.gcd(a, b)
        p, q = a // g, b // g
        if q == 1:
            q = 7
        return rf"\frac{{{p}}}{{{q}}}", [rf"\dfrac{{{p}}}{{{q}}}", f"{p}/{q}", rf"\frac{{{2 * p}}}{{{2 * q}}}"], [rf"\frac{{{q}}}{{{p}}}", f"{p / q:.4f}"]
    if kind == "root":
        k = rng.choice([2, 3, 5, 6, 7])
        return rf"{a}\sqrt{{{k}}}", [rf"\sqrt{{{a * a * k}}}", rf"{a} \sqrt{{{k}}}"], [rf"{a}\sqrt{{{k + 1}}}", f"{a * math.sqrt(k):.5f}"]
    if kind == "pi":
        return rf"\frac{{{a}\pi}}{{{b}}}", [rf"\frac{{{a}}}{{{b}}}\pi", rf"{a}\pi/{b}"], [f"{a * math.pi / b:.6f}", rf"\frac{{{a}}}{{{b}}}"]
    if kind == "tuple":
        return f"({a}, {b})", [f"({a},{b})", rf"\left({a}, {b}\right)"], [f"({b}, {a})", f"{a}, {b}"]
    if kind == "poly":
        return f"x^2+{2 * a}x+{a * a}", [f"(x+{a})^2", f"x^2 + {2 * a} x + {a * a}"], [f"(x+{a + 1})^2", f"x^2+{a * a}"]
    if kind == "percent":
        return str(a), [rf"{a}\%", f"{a}%"], [f"0.{a:02d}", str(a + 1)]
    return f"{a}.{b:02d}", [f"{a}.{b:02d}0", f"{a}.{b:02d}"], [f"{a}.{b + 1:02d}", f"{a}"]


def make_mix(n: int, seed: int, group: int = 8, integers_only: bool = False) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    items = []
    while len(items) < n:
        gold, rights, wrongs = make_problem(rng, integers_only)  # one prompt: its own gold, G completions
        for _ in range(group):
            reasoning = FILLER * rng.randint(2, 8)
            right, wrong = rng.choice(rights), rng.choice(wrongs)
            answer = right if rng.random() < 0.5 else wrong
            kind = rng.random()
            if kind < 0.75:
                completion = f"{reasoning}Therefore the answer is $\\boxed{{{answer}}}$."
            elif kind < 0.85:
                completion = f"{reasoning}The answer is {answer}."  # unboxed
            elif kind < 0.93:
                completion = f"{reasoning}It is $\\boxed{{{wrong}}}$ or $\\boxed{{{right}}}$."  # hedged
            else:
                completion = f"{reasoning}So $\\boxed{{{answer}}}$, i.e. $\\boxed{{{answer}}}$."  # repeated
            items.append((completion, gold))
    return items[:n]


Timing = tuple[float, float]  # (wall-clock seconds, CPU seconds of this process)


def _clock() -> Timing:
    return time.perf_counter(), time.process_time()


def _since(start: Timing) -> Timing:
    return time.perf_counter() - start[0], time.process_time() - start[1]


def run_ours(items: list[tuple[str, str]], cold: bool) -> tuple[list[float], Timing]:
    """``cold``: caches cleared before every item, as if no answer ever repeated."""
    boxed_math(r"\boxed{(x+1)^2}", "x^2+2x+1")  # import sympy before the clock starts
    clear_caches()
    start = _clock()
    verdicts = []
    for completion, gold in items:
        if cold:
            clear_caches()
        verdicts.append(boxed_math(completion, gold))
    return verdicts, _since(start)


def run_math_verify(items: list[tuple[str, str]]) -> tuple[list[float], Timing]:
    from math_verify import parse, verify

    verify(parse("$1$"), parse("$1$"))  # imports and grammar warm-up, as above
    start = _clock()
    verdicts = [float(verify(parse(f"${g}$"), parse(c))) for c, g in items]
    return verdicts, _since(start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--integers-only", action="store_true", help="a GSM8K-like mix: every gold is an integer")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved runs of each; the median counts")
    ap.add_argument(
        "--sympy-only", action="store_true", help="without the exact fast path of the symbolic tier (the old speed)"
    )
    args = ap.parse_args()
    if args.sympy_only:  # same verdicts (tested), every symbolic comparison through sympy
        import rlvr.verifiers.math.equal as equal

        equal._exact_verdict = lambda cand, gold: None
    items = make_mix(args.items, args.seed, integers_only=args.integers_only)
    # Other jobs share the machine. Rates are per CPU second of this process: a 30 ms
    # run can slip between other jobs' time slices while a 5 s one cannot, so a
    # wall-clock ratio would depend on the load. The median of interleaved runs counts;
    # ours are ~100x shorter, so they run 5 times per Math-Verify run.
    runs: dict[str, list[Timing]] = {"ours": [], "cold": [], "theirs": []}
    for _ in range(args.repeat):
        for _ in range(5):
            ours, t = run_ours(items, cold=False)
            runs["ours"].append(t)
            ours_cold, t = run_ours(items, cold=True)
            runs["cold"].append(t)
            assert ours_cold == ours, "a cache changed a verdict"
        theirs, t = run_math_verify(items)
        runs["theirs"].append(t)
    wall, cpu = ({k: statistics.median(t[i] for t in v) for k, v in runs.items()} for i in (0, 1))
    t_ours, t_cold, t_theirs = cpu["ours"], cpu["cold"], cpu["theirs"]
    n = len(items)
    print(
        f"{n} items, mean completion {sum(len(c) for c, _ in items) / n:.0f} chars, one core, "
        f"median of {args.repeat}, items per CPU second (load average {os.getloadavg()[0]:.1f})"
    )
    print(f"boxed_math (caches on, as shipped)   {n / t_ours:8.0f} items/s  {t_theirs / t_ours:5.0f}x  ({sum(ours) / n:.1%} rewarded)")
    print(f"boxed_math (caches cleared per item) {n / t_cold:8.0f} items/s  {t_theirs / t_cold:5.0f}x")
    print(f"Math-Verify                          {n / t_theirs:8.0f} items/s  {1:5.0f}x  ({sum(theirs) / n:.1%} rewarded)")
    differ = [(c, g, a, b) for (c, g), a, b in zip(items, ours, theirs) if a != b]
    print(f"verdicts differ on {len(differ)} items; first distinct ones (ours, Math-Verify):")
    seen = set()
    for c, g, a, b in differ:
        tail = c[-70:]
        if (tail, g) not in seen and len(seen) < 6:
            seen.add((tail, g))
            print(f"  gold {g!r:22} ours {a:.0f} MV {b:.0f}  ...{tail!r}")
    print(f"wall-clock ratio of the same runs: {wall['theirs'] / wall['ours']:.0f}x (caches on)")


if __name__ == "__main__":
    main()
