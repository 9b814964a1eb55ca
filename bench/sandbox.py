"""Sandboxed programs/s: python_code on small programs, 1 to N at a time.

    .venv/bin/python bench/sandbox.py                  # 200 programs, 1, 2 and 4 at a time
    .venv/bin/python bench/sandbox.py --programs 500 --parallel 2
    .venv/bin/python bench/sandbox.py --parallel 1 2 --batch 64   # and through run_python_tests_batch

Each item is one completion (a small function or stdin/stdout program, right or
wrong) and its 3-4 tests, scored by the registered ``python_code`` verifier: one
bubblewrap sandbox per item, one forked child per test inside it. Jobs run from
threads (the work is in the sandbox processes), which is how a verification pool's
workers use it. On a 2-core machine two at a time is the useful maximum. The batched rows
go through run_python_tests_batch (what python_code_batched does), in chunks of --batch:
programs for different problems one after another in shared sandboxes (rlvr.verifiers.code.served),
`sandboxes` of them at a time. Every program and every problem is distinct, so no repeat is
run once and the rates are the sandbox's own.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor

from rlvr.verifiers.code import python_code, run_python_tests_batch
from rlvr.verifiers.code.sandbox import Limits

TASKS = [
    (
        {"asserts": ["assert add(2, 3) == 5", "assert add(-4, 10) == 6", "assert add(10, 20) == 30"]},
        ["def add(a, b):\n    return a + b", "def add(a, b):\n    return a - b"],
    ),
    (
        {"asserts": ["assert fib(1) == 1", "assert fib(10) == 55", "assert fib(20) == 6765"]},
        [
            "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
            "def fib(n):\n    return n",
        ],
    ),
    (
        {"asserts": ["assert rev('abc') == 'cba'", "assert rev('') == ''", "assert rev([1, 2]) == [2, 1]"]},
        ["def rev(s):\n    return s[::-1]", "def rev(s):\n    return ''.join(reversed(s))"],
    ),
    (
        {"io": [{"stdin": "3\n1 2 3\n", "stdout": "6\n"}, {"stdin": "1\n5\n", "stdout": "5\n"},
                {"stdin": "2\n-1 1\n", "stdout": "0\n"}]},
        ["input()\nprint(sum(map(int, input().split())))", "print(6)"],
    ),
]


def make_items(n: int) -> list[tuple[str, str]]:
    """n completions, every program text and every problem distinct (a comment; a setup line or
    one more io case), so that no repeat runs once and any two may share a sandbox."""
    items = []
    while len(items) < n:
        for tests, programs in TASKS:
            for program in programs:
                k = len(items)
                if "io" in tests:
                    problem = {"io": [*tests["io"], {"stdin": f"1\n{k}\n", "stdout": f"{k}\n"}]}
                else:
                    problem = {**tests, "setup": f"# problem {k}"}
                items.append((f"Solution:\n```python\n# attempt {k}\n{program}\n```\n", json.dumps(problem)))
    return items[:n]


def run(items: list[tuple[str, str]], parallel: int, limits: Limits | None = None) -> tuple[float, float]:
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        scores = list(pool.map(lambda item: python_code(*item, limits=limits), items))
    return len(items) / (time.perf_counter() - start), sum(scores) / len(scores)


def run_batched(items: list[tuple[str, str]], batch: int, parallel: int, limits: Limits | None = None) -> tuple[float, float]:
    """The same items through run_python_tests_batch in chunks of `batch`, `parallel` sandboxes at a time."""
    start = time.perf_counter()
    chunks = [items[i:i + batch] for i in range(0, len(items), batch)]
    reports = [r for c in chunks for r in run_python_tests_batch([x for x, _ in c], [t for _, t in c], limits=limits, sandboxes=parallel)]
    return len(items) / (time.perf_counter() - start), sum(r.score for r in reports) / len(reports)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--programs", type=int, default=200)
    ap.add_argument("--parallel", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--batch", type=int, nargs="+", default=[64], help="programs per run_python_tests_batch call")
    ap.add_argument("--no-cgroups", action="store_true", help="Limits(cgroups=False): no per-job cgroups")
    args = ap.parse_args()
    items = make_items(args.programs)
    limits = Limits(cgroups=False) if args.no_cgroups else None
    python_code(*items[0], limits=limits)  # warm the page cache before timing
    for parallel in args.parallel:
        rate, mean = run(items, parallel, limits)
        print(f"{parallel} at a time: {rate:6.1f} programs/s   (mean reward {mean:.2f}, {len(items)} programs x 3-4 tests)")
    for batch in args.batch:
        for parallel in (1, 2):
            rate, mean = run_batched(items, batch, parallel, limits)
            print(f"run_python_tests_batch, chunks of {batch}, {parallel} sandboxes at a time: {rate:6.1f} programs/s   (mean reward {mean:.2f})")


if __name__ == "__main__":
    main()
