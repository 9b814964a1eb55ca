"""The reward audit: ours pass with no false positive; lenient, hanging and raising rewards
are caught. The lenient rewards below are the kind that get gamed in practice."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from rlvr.audit import audit_reward, format_report, is_batched, probes_for
from rlvr.verifiers.code import extract_program, parse_tests


# Rewards to audit: module-level so the pool's spawned workers import them by name.
def last_number(completion: str, answer: str) -> float:
    """Lenient math: the last number anywhere in the text."""
    numbers = re.findall(r"-?\d+(?:\.\d+)?", completion)
    return 1.0 if numbers and numbers[-1] == answer else 0.0


def contains_answer(prompts: list[str], completions: list[str], answer: list[str], **kwargs: object) -> list[float | None]:
    """Lenient, TRL-style batched: the gold answer appears somewhere."""
    return [1.0 if a in c else 0.0 for c, a in zip(completions, answer)]


def exit_code_runner(completion: str, tests: str) -> float:
    """Lenient code: run program + asserts in one process, reward exit code 0."""
    program = extract_program(completion)
    if program is None:
        return 0.0
    spec = parse_tests(tests)
    with tempfile.TemporaryDirectory() as tmp:
        if spec.mode == "io":
            return 0.0  # this naive runner only knows asserts
        path = Path(tmp) / "run.py"
        path.write_text(program + "\n" + "\n".join(f"assert {p} is not None" for p in spec.probes))
        try:
            done = subprocess.run([sys.executable, str(path)], capture_output=True, timeout=2)
        except subprocess.TimeoutExpired:
            return 0.0
        return 1.0 if done.returncode == 0 else 0.0


def hangs(completion: str, answer: str) -> float:
    if completion == "42":  # the "bare" unboxed probe
        time.sleep(3600)
    return 0.0


def raises(completion: str, answer: str) -> float:
    raise RuntimeError("reward bug")


def always_zero(completion: str, answer: str) -> float:
    return 0.0


def test_boxed_math_has_no_false_positive() -> None:
    report = audit_reward("boxed_math", timeout_s=10.0)
    assert report.passed, format_report(report)
    assert report.false_positives == []
    assert {"hedged_boxes", "unboxed_answers", "prompt_echoes", "lookalike_digits", "pathological"} <= set(report.categories)


def test_think_format_has_no_false_positive() -> None:
    report = audit_reward("think_format")
    assert report.passed, format_report(report)


@pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("CI"), reason="needs bubblewrap")
def test_python_code_has_no_false_positive() -> None:
    report = audit_reward("python_code", timeout_s=30.0)
    assert report.passed, format_report(report)
    assert {"early_exit", "fake_equality", "test_machinery", "answer_search", "partial_output"} <= set(report.categories)


def test_lenient_math_reward_is_caught() -> None:
    report = audit_reward("test_audit:last_number")
    assert not report.passed
    flagged = {c for c, _, _ in report.false_positives}
    assert {"unboxed_answers", "hedged_boxes", "malformed_boxes"} <= flagged
    assert "FAIL" in format_report(report)


def test_batched_trl_reward_is_detected_and_caught() -> None:
    assert is_batched(contains_answer) and not is_batched(last_number)
    report = audit_reward("test_audit:contains_answer")
    assert report.batched and not report.passed
    assert report.categories["control"].rewarded >= 1  # the prompt and the answer reached it
    assert "hedged_boxes" in {c for c, _, _ in report.false_positives}


def test_exit_code_code_reward_is_caught() -> None:
    report = audit_reward("test_audit:exit_code_runner", domain="code", timeout_s=10.0)
    assert "early_exit" in {c for c, _, _ in report.false_positives}


def test_hanging_and_raising_rewards_are_reported() -> None:
    hung = audit_reward("test_audit:hangs", timeout_s=0.5)
    assert hung.categories["unboxed_answers"].timeouts == 1 and not hung.passed
    assert hung.slowest[0][0] >= 0.5
    broken = audit_reward("test_audit:raises")
    assert sum(s.errors for s in broken.categories.values()) == len(probes_for("math"))
    assert "RuntimeError: reward bug" in format_report(broken)


def test_a_reward_that_never_pays_does_not_pass() -> None:
    report = audit_reward("test_audit:always_zero")
    assert report.false_positives == [] and not report.passed  # the controls went unrewarded


def test_cli_exit_codes() -> None:
    from typer.testing import CliRunner

    from rlvr.cli import app

    runner = CliRunner()
    ok = runner.invoke(app, ["audit-reward", "think_format"])
    assert ok.exit_code == 0 and "PASS" in ok.stdout, ok.output
    bad = runner.invoke(app, ["audit-reward", "test_audit:last_number"])
    assert bad.exit_code == 1 and "false positives" in bad.stdout
    unknown = runner.invoke(app, ["audit-reward", "no_such_reward"])
    assert unknown.exit_code == 2


def declines(completion: str, answer: str) -> float | None:
    return None


def test_a_reward_that_declines_to_score_fails_the_audit_with_the_reason() -> None:
    report = audit_reward("test_audit:declines")
    assert not report.passed and report.false_positives == []
    assert sum(s.errors for s in report.categories.values()) == len(probes_for("math"))
    assert "returned None" in format_report(report)


def test_a_verifier_registered_by_the_users_module_is_audited_by_name(tmp_path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from rlvr.cli import app
    from rlvr.verifiers.registry import VERIFIERS

    (tmp_path / "audited_rewards.py").write_text(
        "from rlvr.verifiers.math import boxed_math\nfrom rlvr.verifiers.registry import register\n\n"
        "@register('strict_math')\ndef strict_math(completion, answer):\n    return boxed_math(completion, answer)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        runner = CliRunner()
        unknown = runner.invoke(app, ["audit-reward", "strict_math"])
        assert unknown.exit_code == 2 and "--import" in unknown.output
        # the spawned workers import the module too: registered there, the name resolves there
        ok = runner.invoke(app, ["audit-reward", "strict_math", "--import", "audited_rewards", "--workers", "1"])
        assert ok.exit_code == 0 and "reward: strict_math  (per item, math probes)" in ok.stdout, ok.output
    finally:
        VERIFIERS.pop("strict_math", None)


def test_audit_reward_replays_a_runs_own_completions_and_lists_the_disagreements(tmp_path):
    import json
    import subprocess
    import sys

    rows = [{"step": 1, "prompt": "2+2=", "completion": "\\boxed{4}", "answer": "4", "reward": 1.0},
            {"step": 1, "prompt": "2+2=", "completion": "it is 4 or maybe \\boxed{5}", "answer": "4", "reward": 1.0},
            {"step": 2, "prompt": "3+3=", "completion": "6", "answer": "6", "reward": 1.0}]
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "lenient_reward.py").write_text("def lenient(completion, answer):\n    return float(answer in completion)\n")
    cmd = [sys.executable, "-m", "rlvr.cli", "audit-reward", "lenient_reward:lenient", "--samples", str(tmp_path)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 1, done.stderr[-2000:]
    listed = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["completion"], r["reward"], r["strict"]) for r in listed] == [("it is 4 or maybe \\boxed{5}", 1.0, 0.0), ("6", 1.0, 0.0)]
    assert "2 of 3 logged completions" in done.stderr
    strict = subprocess.run([sys.executable, "-m", "rlvr.cli", "audit-reward", "boxed_math", "--samples", str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert strict.returncode == 0 and "0 of 3" in strict.stderr
