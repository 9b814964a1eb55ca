"""Evaluation estimators: pass@k, maj@k, bootstrap intervals over problems, and the default ks.

Pure functions of counts (no torch, no model). Evaluation draws n samples per problem and
counts what it needs; these turn the counts into unbiased estimates for every k <= n (so one
run of n samples reports all ks) and into intervals over the problem set.
"""

from __future__ import annotations

import math
from collections import defaultdict
from fractions import Fraction
from typing import Iterable, Mapping, Sequence


def _check_k(metric: str, k: int, n: int) -> None:
    """The k-refusals pass@k and maj@k share, worded for the user who asked for that k."""
    if k < 1:
        raise ValueError(f"{metric} needs k >= 1, got k = {k}")
    if k > n:
        raise ValueError(f"{metric} needs at least k samples per problem: k = {k} > n = {n} samples")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct (Chen et al. 2021, "Evaluating Large
    Language Models Trained on Code", eq. 1): the chance that a size-k subset drawn from the n
    samples holds a correct one, 1 - C(n-c, k) / C(n, k).

    Not "any of the first k samples is correct": that uses k of the n samples (high variance) and
    depends on their order; this is its average over every order. The binomial ratio is the
    running product prod_{i=n-c+1..n} (1 - k/i), so no huge binomials appear.

    >>> pass_at_k(5, 2, 2)  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    0.7
    """
    _check_k("pass@k", k, n)
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs the number of correct samples c in 0..n = {n}, got c = {c}")
    if n - c < k:
        return 1.0  # every size-k subset holds a correct sample
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def _with_answer(states: dict[tuple[int, int], int], below: list[int], at_level: int, k: int) -> dict[tuple[int, int], int]:
    """Extend every (answers at the level, votes drawn) state by one more answer that draws x votes
    below the level (C(count, x) ways each: `below[x]`) or exactly the level (`at_level` ways)."""
    level = len(below)
    extended: dict[tuple[int, int], int] = defaultdict(int)
    for (tied, drawn), ways in states.items():
        for x, choices in enumerate(below[: k - drawn + 1]):
            extended[tied, drawn + x] += ways * choices
        if drawn + level <= k:
            extended[tied + 1, drawn + level] += ways * at_level
    return extended


def maj_at_k(answer_counts: Sequence[tuple[int, float]], unanswered: int, k: int) -> float:
    """Unbiased maj@k (majority voting, "self-consistency": Wang et al. 2023) from n >= k samples:
    the exact mean, over every size-k subset of the n samples, of the correctness of the subset's
    plurality answer.

    `answer_counts` holds one (samples that gave it, correctness in [0, 1]) per distinct normalised
    final answer; the `unanswered` samples never vote (n = sum of counts + unanswered).
    Tie rule: when m answers share the top vote they are broken uniformly at random, so the subset
    scores the mean correctness of the m; a subset where nobody answered scores 0.

    How, exactly (integers throughout, one division at the end): for each vote level v, count the
    ways every answer with >= v samples draws at most v votes, tracking (answers at exactly v,
    votes drawn) and, summed over one marked answer at v, its correctness; answers with < v
    samples join the unanswered as a pool that fills the subset freely. A state with t answers
    tied at v then adds (marked correctness) / t. Cost: O(k^2) big-integer products per (level,
    answer with >= level samples), at most O(n k^2) in all, far less when few answers tie.

    >>> maj_at_k([(2, 1.0), (1, 0.0)], unanswered=0, k=2)  # {a,a} -> 1, {a,b} twice -> 1/2: (1 + 1/2 + 1/2) / 3
    0.6666666666666666
    """
    for count, correctness in answer_counts:
        if count < 0 or int(count) != count:
            raise ValueError(f"maj@k needs each answer's count to be an integer >= 0, got {count}")
        if not 0.0 <= correctness <= 1.0:
            raise ValueError(f"maj@k needs correctness in [0, 1], got {correctness}")
    if unanswered < 0 or int(unanswered) != unanswered:
        raise ValueError(f"maj@k needs the unanswered count to be an integer >= 0, got {unanswered}")
    n = int(sum(count for count, _ in answer_counts)) + int(unanswered)
    _check_k("maj@k", k, n)
    # Correctness as exact integers over one common denominator (a float is a dyadic rational).
    exact = [(int(count), Fraction(correctness)) for count, correctness in answer_counts if count > 0]
    denominator = math.lcm(*(correctness.denominator for _, correctness in exact))
    answers = [(count, int(correctness * denominator)) for count, correctness in exact]
    ties_denominator = math.lcm(*range(1, len(answers) + 1))  # every 1/t, t <= number of answers, is an integer over it
    total = 0
    for level in range(1, min(k, max((count for count, _ in answers), default=0)) + 1):
        contenders = [(count, weight) for count, weight in answers if count >= level]
        if not any(weight for _, weight in contenders):
            continue  # whoever wins at this level scores 0
        pool = n - sum(count for count, _ in contenders)
        plain: dict[tuple[int, int], int] = {(0, 0): 1}
        marked: dict[tuple[int, int], int] = {}
        for count, weight in contenders:
            below, at_level = [math.comb(count, x) for x in range(level)], math.comb(count, level)
            marked = _with_answer(marked, below, at_level, k)
            if weight:  # this answer at the level, marked: weight it by its correctness
                for (tied, drawn), ways in plain.items():
                    if drawn + level <= k:
                        marked[tied + 1, drawn + level] += ways * at_level * weight
            plain = _with_answer(plain, below, at_level, k)
        for (tied, drawn), weighted_ways in marked.items():
            total += weighted_ways * (ties_denominator // tied) * math.comb(pool, k - drawn)
    return total / (math.comb(n, k) * ties_denominator * denominator)  # int / int: correctly rounded


def bootstrap_intervals(
    columns: Mapping[str, Sequence[float]], rounds: int = 1000, seed: int = 0, level: float = 0.95
) -> dict[str, tuple[float, float]]:
    """Percentile bootstrap (Efron & Tibshirani 1993, ch. 13) over problems of each column's mean.

    Each column holds one value per problem (that problem's pass@4, say). Problems are resampled
    with replacement `rounds` times with `numpy.random.default_rng(seed)`, and every column is
    averaged over the same resamples, so intervals of different metrics are comparable and the
    result is reproducible from the seed. Zero problems give (nan, nan); one gives (v, v).

    >>> bootstrap_intervals({"pass@1": [0.5, 0.5, 0.5]})
    {'pass@1': (0.5, 0.5)}
    """
    import numpy as np  # late: reading a config must not import it (EvalConfig.ks imports this module)

    if not 0.0 < level < 1.0:
        raise ValueError(f"bootstrap level must be in (0, 1), got level = {level}")
    if rounds < 1:
        raise ValueError(f"bootstrap needs rounds >= 1, got rounds = {rounds}")
    names = list(columns)
    problems = len(columns[names[0]]) if names else 0
    for name in names:
        if len(columns[name]) != problems:
            raise ValueError(
                f"column {name!r} has {len(columns[name])} values but column {names[0]!r} has {problems}: "
                "every column needs one value per problem"
            )
    if problems == 0:
        return {name: (math.nan, math.nan) for name in names}
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, problems, size=(rounds, problems))
    # How often each round drew each problem: a mean over a resample is then one dot product.
    offsets = problems * np.arange(rounds)[:, None]
    times_drawn = np.bincount((picks + offsets).ravel(), minlength=rounds * problems).reshape(rounds, problems).astype(float)
    means = np.empty((rounds, len(names)))
    for column, name in enumerate(names):
        values = np.asarray(columns[name], dtype=float)
        # Centred on the first value: a constant column's resampled means are then exactly it. One
        # product per column, not one over all: identical columns then get bit-identical means.
        means[:, column] = values[0] + times_drawn @ (values - values[0]) / problems
    lows, highs = np.quantile(means, [(1.0 - level) / 2, (1.0 + level) / 2], axis=0)
    return {name: (float(low), float(high)) for name, low, high in zip(names, lows, highs)}


def default_ks(n: int) -> list[int]:
    """The ks reported when none are asked for: the powers of two up to n, and n itself (the
    estimate from all samples) when it is not one.

    >>> default_ks(12)
    [1, 2, 4, 8, 12]
    """
    if n < 1:
        raise ValueError(f"default ks need n >= 1 samples per problem, got n = {n}")
    ks = [1 << power for power in range(n.bit_length())]
    return ks if ks[-1] == n else ks + [n]


# The discovery ledger: what RL did to each held-out problem, from N samples of the start and N of the end.
LEDGER_CLASSES = ("discovered", "sharpened", "unchanged", "blunted", "lost", "unsolved")


def discovery_class(start_solved: int, end_solved: int) -> str:
    """One problem's class from how many of the same number N of samples the start and the end solved:
    discovered (the start never solved it in N samples, the end does), lost (the reverse), unsolved (neither),
    and where both solve it, sharpened / unchanged / blunted as the end's pass@1 (its solved share) is above,
    equal to or below the start's. "Did RL find new solutions, or only make the old ones likelier?" is
    discovered against sharpened.

    >>> [discovery_class(s, e) for s, e in [(0, 3), (2, 5), (2, 2), (5, 2), (4, 0), (0, 0)]]
    ['discovered', 'sharpened', 'unchanged', 'blunted', 'lost', 'unsolved']
    """
    if start_solved == 0:
        return "discovered" if end_solved else "unsolved"
    if end_solved == 0:
        return "lost"
    return "sharpened" if end_solved > start_solved else "blunted" if end_solved < start_solved else "unchanged"


def solved_counts(rows: Iterable[Mapping], problems: int) -> list[int]:
    """How many sampled completions of each of `problems` problems have full marks, from an evaluation's sampled
    rows ({"problem": index, "reward": verdict}, as eval_<name>_samples.jsonl holds them): the ledger's input. A
    missing verdict counts as wrong, as in pass@k.

    >>> solved_counts([{"problem": 0, "reward": 1.0}, {"problem": 0, "reward": None}, {"problem": 1, "reward": 0.5}], 2)
    [1, 0]
    """
    counts = [0] * problems
    for row in rows:
        counts[row["problem"]] += row["reward"] == 1.0
    return counts


def discovery_ledger(start_solved: Sequence[int], end_solved: Sequence[int], n: int, levels: Sequence[str]) -> dict:
    """Each problem's class (`discovery_class`), and the counts over the problem set and per level; the counts
    add up to the number of problems. `n`: samples per problem of each model (what the ledger cost: n x problems
    samples per model).

    >>> discovery_ledger([0, 2, 0], [1, 4, 0], 4, ["1", "1", "2"])["counts"]
    {'discovered': 1, 'sharpened': 1, 'unchanged': 0, 'blunted': 0, 'lost': 0, 'unsolved': 1}
    """
    if len(start_solved) != len(end_solved) or len(levels) != len(start_solved):
        raise ValueError(f"the ledger compares the same problems: {len(start_solved)} start, {len(end_solved)} end, {len(levels)} levels")
    if any(not 0 <= c <= n for c in [*start_solved, *end_solved]):
        raise ValueError(f"solved counts must be within 0..n = {n}")
    classes = [discovery_class(s, e) for s, e in zip(start_solved, end_solved)]
    by_level: dict[str, dict[str, int]] = {}
    for level, cls in zip(levels, classes):
        by_level.setdefault(str(level), dict.fromkeys(LEDGER_CLASSES, 0))[cls] += 1
    return {"samples_per_problem": n, "problems": len(classes), "samples_per_model": n * len(classes),
            "counts": {c: classes.count(c) for c in LEDGER_CLASSES}, "by_level": dict(sorted(by_level.items())), "classes": classes}
