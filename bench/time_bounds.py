"""The speed bounds of the verifiers' guards, measured on the tests that exercise them.

    .venv/bin/python bench/time_bounds.py          # every bound below; exit status 1 if one is exceeded
    .venv/bin/python bench/time_bounds.py -k math  # those whose test id contains "math"

The test suite asserts what a guard decides (a refusal, a timeout verdict, a score of 0) and
the work it counts; how long that takes depends on whatever else the machine runs, so it is
measured here instead. Each row runs one test (all its parameters) under pytest and times its
call phase: `cpu` is this process's CPU time (time.process_time), for guards that work in this
process; `wall` is elapsed time, for sandboxes and worker pools, whose work runs in other
processes. The bound is the one the test once asserted, summed over the timed parts of one call
where it timed several. Run it after changing a guard, the judge, the sandbox or the math
verifier's bounds, on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# (test, clock, bound in seconds per test call, what a slower call would mean)
BOUNDS = [
    ("tests/test_verifier_math.py::test_pathological_inputs_finish_fast", "cpu", 1.0,
     "an input found by fuzzing reaches sympy's slow paths again (each took seconds to minutes)"),
    ("tests/test_verifier_math.py::test_fast_path_costs_microseconds", "cpu", 3000 * 200e-6,
     "the exact fast path costs more than 200 us a call (typically ~10 us)"),
    ("tests/test_verifier_math_classes.py::test_bare_unit_pattern_is_linear", "cpu", 0.5,
     "the bare-unit pattern backtracks exponentially again (2.4 s before)"),
    ("tests/test_verifier_math_classes.py::test_new_rules_finish_fast", "cpu", 1.0 + 0.5,
     "a slow shape reaches sympy's slow paths (three calls under 1 s, after sympy's warm-up)"),
    ("tests/test_verify_pool.py::test_a_hung_item_times_out_without_hanging_the_caller", "wall", 15.0,
     "two 1 s timeouts and their workers' restarts take more than 15 s"),
    ("tests/test_verifier_code_judge.py::test_expensive_host_evaluation_fails_fast", "cpu", 2.0,
     "the judge computes a bomb's value before refusing it"),
    ("tests/test_verifier_code_judge.py::test_forged_values_fail_without_raising_or_stalling", "cpu", 1.0,
     "decoding a forged result line does the work it describes"),
    ("tests/test_verifier_code_judge.py::test_forged_lines_are_dropped_not_decoded", "cpu", 1.0,
     "a forged line is parsed before it is refused"),
    ("tests/test_verifier_code_judge.py::test_forged_results_score_zero_end_to_end", "cpu", 2.0,
     "forged results are decoded at length before they score 0"),
    ("tests/test_judge_classes.py::test_hash_building_on_returned_colliding_values_fails_fast", "cpu", 1.0,
     "a set or dict built from colliding hashes is built before it is refused"),
    ("tests/test_judge_classes.py::test_a_forged_colliding_result_line_fails_fast", "cpu", 3 * 1.0,
     "a forged line of colliding values is decoded before it is refused"),
    ("tests/test_judge_classes.py::test_exact_sums_on_returned_fractions_and_decimals_stay_bounded", "cpu", 1.0,
     "statistics sums huge exact values (300 fractions took 5 s, variance 39 s)"),
    ("tests/test_judge_classes.py::test_converted_and_module_values_stay_bounded", "cpu", 1.0,
     "a huge value made by a conversion or a module function is computed before it is refused"),
    ("tests/test_judge_classes.py::test_results_the_tests_convert_arrive_as_data", "cpu", 2.0 + 1.0,
     "reading past an endless generator or a huge power is computed before it fails (2 s), after the honest tests"),
    ("tests/test_judge_classes.py::test_which_setup_functions_are_the_hosts", "cpu", 2.0 + 1.0,
     "a spinning helper runs past its step budget and its 0.5 s deadline (2 s), after fib(20) the long way"),
    ("tests/test_judge_classes.py::test_a_quadratic_assert_stops_soon_after_its_deadline", "wall", 0.6,
     "the judge reads the clock too rarely: a quadratic assert overruns its 0.2 s deadline by seconds"),
    ("tests/test_verifier_code.py::test_small_programs_are_fast", "wall", 5 * 1.0,
     "a sandbox start regresses to seconds (bench/sandbox.py measures the rate)"),
    ("tests/test_verifier_code.py::test_attacks_score_zero_and_leave_the_host_unharmed", "wall", 8.0 + 1.0 + 1.0,
     "an attack outlives its limits (total_s = 8 s; then one honest program)"),
    ("tests/test_code_datasets.py::test_the_rounds_of_one_check_share_its_time_budget", "wall", 2.5 + 2 * 2.0,
     "a check that runs out of its 1 s budget does not stop within it"),
    ("tests/test_code_datasets.py::test_test_code_work_is_bounded", "wall", 8.0,
     "trusted test code on the program's data does unbounded work"),
]


def audit_slowest_probe() -> float:
    """The slowest probe of boxed_math's audit, in seconds: each is ~ms once a pool worker has imported sympy."""
    from rlvr.audit import audit_reward

    return max(seconds for seconds, _, _ in audit_reward("boxed_math", timeout_s=10.0).slowest)


def slowest_adversarial_fast_call() -> float:
    """CPU seconds of the slowest cold boxed_math call on tests/test_verifier_math_fast.py's adversarial pairs
    (timed alone: that test also asks sympy for each pair's verdict)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_verifier_math_fast import ADVERSARIAL, box

    from rlvr.verifiers.math import boxed_math, clear_caches

    worst = 0.0
    for cand, gold, _ in ADVERSARIAL:
        clear_caches()
        start = time.process_time()
        boxed_math(box(cand), gold)
        worst = max(worst, time.process_time() - start)
    return worst


# (what, clock, a function returning seconds, bound, what a slower one would mean): measured directly, not through a test
MEASURES = [
    ("boxed_math fast path: slowest cold adversarial pair", "cpu", slowest_adversarial_fast_call, 1.0,
     "an adversarial pair reaches sympy's slow paths or the exact path's arithmetic blows up"),
    ("boxed_math audit: slowest probe", "wall", audit_slowest_probe, 0.5,
     "the audit's probes wait for sympy's import: pool workers no longer warm up before the first"),
]


class Clock:
    """Times each test's call phase, by test function (its parameters summed separately)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float, float]] = []  # (node id, cpu s, wall s)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        cpu, wall = time.process_time(), time.perf_counter()
        yield
        self.calls.append((item.nodeid, time.process_time() - cpu, time.perf_counter() - wall))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-k", default="", help="only the rows whose test id contains this")
    args = parser.parse_args()
    rows = [row for row in BOUNDS if args.k in row[0]]
    measures = [row for row in MEASURES if args.k in row[0]]
    clock = Clock()
    status = pytest.main(["-q", "-p", "no:cacheprovider", "-m", "", "--rootdir", str(ROOT), *(str(ROOT / r[0]) for r in rows)],
                         plugins=[clock]) if rows else pytest.ExitCode.OK
    over = 0
    print(f"\n{'test':<95} {'clock':>5} {'worst s':>8} {'bound s':>8}")
    for test, which, bound, meaning in rows:
        times = [cpu if which == "cpu" else wall for nodeid, cpu, wall in clock.calls if nodeid.split("[")[0].endswith(test.split("/", 1)[1])]
        worst = max(times, default=float("nan"))
        flag = "  OVER: " + meaning if worst > bound else ""
        over += worst > bound
        print(f"{test:<95} {which:>5} {worst:8.3f} {bound:8.3f}{flag}")
    for what, which, measure, bound, meaning in measures:
        worst = measure()
        over += worst > bound
        print(f"{what:<95} {which:>5} {worst:8.3f} {bound:8.3f}{'  OVER: ' + meaning if worst > bound else ''}")
    return 1 if over or status != pytest.ExitCode.OK else 0


if __name__ == "__main__":
    sys.exit(main())
