"""The verification pool: ordered scores, hard per-item timeouts, errors counted not scored."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time

import pytest

from rlvr.verifiers.math import boxed_math
from rlvr.verifiers.pool import VerifierPool, score_all


# Verifiers for the tests: module-level, so spawned workers can import them by name.
def sleepy(completion: str, answer: str) -> float:
    if completion == "hang":
        time.sleep(3600)
    return 1.0 if completion == answer else 0.0


def broken(completion: str, answer: str) -> float:
    if completion == "raise":
        raise ZeroDivisionError("boom")
    if completion == "die":
        os._exit(3)
    if completion == "nan":
        return float("nan")
    return 1.0


COMPLETIONS = [r"\boxed{42}", r"\boxed{41}", r"so \boxed{\frac{1}{2}}", "no box", r"\boxed{41} \boxed{42}"] * 4
ANSWERS = ["42", "42", "0.5", "42", "42"] * 4


@pytest.fixture(scope="module")
def math_pool():
    with VerifierPool("boxed_math", workers=2, timeout_s=10.0) as pool:
        yield pool


def test_scores_match_direct_calls_in_order(math_pool: VerifierPool) -> None:
    result = math_pool.score(COMPLETIONS, ANSWERS)
    assert result.scores == [boxed_math(c, a) for c, a in zip(COMPLETIONS, ANSWERS)]
    assert (result.errors, result.timeouts, result.messages) == (0, 0, [])
    timing = result.timing()
    assert timing.items == len(COMPLETIONS) and 0 < timing.slowest_item_s <= timing.seconds
    assert timing.metrics("time/verify/boxed_math")["time/verify/boxed_math/items_per_s"] == len(COMPLETIONS) / timing.seconds


def test_the_module_doctests_hold() -> None:
    import doctest

    import rlvr.verifiers.pool

    result = doctest.testmod(rlvr.verifiers.pool)
    assert result.attempted > 0 and result.failed == 0


def test_same_scores_from_a_thread(math_pool: VerifierPool) -> None:
    out: list = []
    worker = threading.Thread(target=lambda: out.append(math_pool.score(COMPLETIONS, ANSWERS)))
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive()
    assert out[0].scores == [boxed_math(c, a) for c, a in zip(COMPLETIONS, ANSWERS)]


def test_a_hung_item_times_out_without_hanging_the_caller() -> None:
    completions = ["a", "hang", "b", "c", "hang", "d"]  # returning at all is the point; how soon: bench/time_bounds.py
    result = score_all(sleepy, completions, ["a", "x", "b", "x", "x", "d"], workers=2, timeout_s=1.0)
    assert result.scores == [1.0, None, 1.0, 0.0, None, 1.0]
    assert (result.timeouts, result.errors) == (2, 0)
    assert all("timed out" in m for m in result.messages)


def test_errors_are_counted_not_scored() -> None:
    result = score_all(broken, ["ok", "raise", "die", "nan", "ok"], ["x"] * 5, workers=2, timeout_s=10.0)
    assert result.scores == [1.0, None, None, None, 1.0]
    assert (result.errors, result.timeouts) == (3, 0)
    joined = " ".join(result.messages)
    assert "ZeroDivisionError: boom" in joined and "worker died" in joined and "non-finite" in joined


def test_verifier_by_import_path_and_bad_specs() -> None:
    result = score_all("rlvr.verifiers.format:think_format", ["<think>a</think> b", "b"], ["", ""], workers=1)
    assert result.scores == [1.0, 0.0]
    with pytest.raises(ValueError, match="unknown verifier"):
        VerifierPool("no_such_verifier")
    with pytest.raises(ValueError, match="cannot import"):
        VerifierPool("no_such_module:fn")
    with pytest.raises(ValueError, match="completions but"):
        score_all("boxed_math", ["a"], [], workers=1)


@pytest.mark.skipif(shutil.which("bwrap") is None or os.geteuid() != 0, reason="needs bwrap, run as root")
def test_killing_a_worker_mid_sandbox_leaves_no_process() -> None:
    from test_verifier_code import sandbox_processes  # the same /proc scan

    program = "```python\nimport time\ndef f():\n    time.sleep(3600)\n```"
    tests = '{"asserts": ["assert f() == 1"] }'
    result = score_all(python_code_without_a_declared_limit, [program], [tests], workers=1, timeout_s=0.5)
    assert result.scores == [None] and result.timeouts == 1
    deadline = time.monotonic() + 1.0  # the runner itself would stop the job only after 2 s
    while sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.05)  # bwrap's --die-with-parent fires as the worker dies
    assert sandbox_processes() == []


def python_code_without_a_declared_limit(completion: str, tests: str) -> float:
    """python_code that the pool may cut short (no time_limit_s): to kill a worker mid-sandbox."""
    from rlvr.verifiers.code import python_code

    return python_code(completion, tests)


def slow_but_bounded(completion: str, answer: str) -> float:
    time.sleep(30 if completion == "hang" else 0.6)  # 0.6 s: past the pool's timeout_s, inside its own limit
    return 1.0


slow_but_bounded.time_limit_s = 0.8  # type: ignore[attr-defined]
slow_but_bounded.timeout_score = 0.0  # type: ignore[attr-defined]


def test_the_pool_waits_out_a_verifiers_own_limit_and_scores_its_timeouts() -> None:
    with VerifierPool("python_code", workers=1, timeout_s=10.0) as pool:
        assert pool.timeout_s >= 20.0  # the sandbox's own job limit
    result = score_all(slow_but_bounded, ["ok", "hang"], ["x", "x"], workers=2, timeout_s=0.1)
    assert result.scores == [1.0, 0.0]  # not cut short at 0.1 s; a real hang scores 0, not missing
    assert (result.timeouts, result.errors) == (1, 0)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")
def test_a_slow_wrong_program_scores_zero_through_the_pool() -> None:
    # Six tests of ~1.9 s each: past the old 10 s pool timeout, inside the job's own 20 s.
    program = "```python\nimport time\ndef f(x):\n    time.sleep(1.9)\n    return 0\n```"
    tests = json.dumps({"asserts": [f"assert f({i}) == 1" for i in range(6)]})
    result = score_all("python_code", [program], [tests], workers=1, timeout_s=10.0)
    assert result.scores == [0.0] and result.timeouts == 0


def test_a_worker_killed_mid_job_leaves_no_temp_dir(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    # sandbox="none" jobs run in a temp dir; the worker is SIGKILLed before it can remove
    # it, so the pool removes the worker's whole temp root instead.
    import glob
    import tempfile

    monkeypatch.setenv("RLVR_CODE_SANDBOX", "none")  # inherited by the spawned workers
    # A temp directory of this test's own: other processes (the other xdist worker, Ray's reward
    # workers) make rlvr-* directories in the shared /tmp while this runs.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    pattern = os.path.join(tempfile.gettempdir(), "rlvr-*")
    before = set(glob.glob(pattern))
    program = "```python\nimport time\ndef f():\n    time.sleep(3600)\n```"
    with VerifierPool(python_code_without_a_declared_limit, workers=1, timeout_s=1.0) as pool:
        roots = [w.temp_root for w in pool._workers]
        result = pool.score([program], ['{"asserts": ["assert f() == 1"]}'])
        assert result.scores == [None] and result.timeouts == 1
        assert not any(os.path.exists(root) for root in roots)
        roots += [w.temp_root for w in pool._workers]  # the replacement's, alive until close
    assert set(glob.glob(pattern)) - before == set()
    assert not any(os.path.exists(root) for root in roots)
