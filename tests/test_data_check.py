"""`rlvr data-check`: each planted defect is found and named, and the lab's own data passes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.data import Example
from rlvr.data_check import Thresholds, data_report, failures, gold_in_prompt, normalized, summary_line

ROOT = Path(__file__).resolve().parents[1]


def rows(prompts_answers, level=1):
    return [Example(p, a, level=level) for p, a in prompts_answers]


CLEAN_TRAIN = rows([(f"What is {i} times {i + 1}?", str(i * (i + 1))) for i in range(2, 40)])
CLEAN_HELD = rows([(f"What is {i} times {i + 2}?", str(i * (i + 2))) for i in range(2, 30)])


def test_clean_data_passes_with_every_count_zero():
    report = data_report(CLEAN_TRAIN, CLEAN_HELD, lambda e: True)
    assert failures(report, Thresholds()) == []
    assert report["overlap"]["normalized"] == report["gold_in_prompt"]["count"] == report["duplicates"]["held_out"] == 0
    assert report["rows"] == {"train": 38, "held_out": 28} and report["by_level"]["held_out"] == {"1": 28}
    assert summary_line(report).startswith("data: 38 train / 28 held-out rows; overlap 0 (0.0%)")


def test_overlap_is_found_exactly_and_after_normalising_numbers_and_whitespace():
    held = [*CLEAN_HELD, Example("What is 3 times 4?", "12"), Example("what is  003 times 4.0 ?", "12")]
    train = [*CLEAN_TRAIN, Example("What is 3 times 4?", "12"), Example("What is 3 times 4 ?", "12")]
    report = data_report(train, held)
    assert (report["overlap"]["exact"], report["overlap"]["normalized"]) == (1, 2)
    assert any(line.startswith("overlap:") and "--max-overlap" in line for line in failures(report, Thresholds()))


def test_golds_in_their_own_prompt_are_counted_as_whole_tokens():
    assert gold_in_prompt("The answer is 42. What is 6 times 7?", "42")
    assert not gold_in_prompt("What is 142 minus 100?", "42") and not gold_in_prompt("What is 4.2 times 10?", "42")
    assert gold_in_prompt("Is Paris the capital of France?", "paris")
    leaky = rows([(f"(answer: {i * 3}) What is {i} times 3?", str(i * 3)) for i in range(2, 40)])
    report = data_report(leaky, CLEAN_HELD)
    assert report["gold_in_prompt"]["count"] == 38
    assert any("--max-gold-in-prompt" in line for line in failures(report, Thresholds()))


def test_unmatchable_golds_the_majority_baseline_and_held_out_duplicates():
    held = [*CLEAN_HELD, *rows([("What is 1 plus 1?", "2")] * 3), Example("Name it.", "a cat")]
    report = data_report(CLEAN_TRAIN, held, lambda e: True if e.answer != "a cat" else "not a number")
    assert report["unmatchable"]["count"] == 1 and report["unmatchable"]["examples"] == ["a cat"]
    assert report["duplicates"]["held_out"] == 2
    lines = failures(report, Thresholds())
    assert any(line.startswith("unmatchable:") for line in lines) and any(line.startswith("duplicates:") for line in lines)
    constant = rows([(f"Problem {i}", "0") for i in range(10)] + [(f"Other {i}", str(i + 1)) for i in range(10)])
    report = data_report(CLEAN_TRAIN, constant)
    assert report["majority"] == {"answer": "0", "share": 0.5}
    assert any(line.startswith("majority:") and "'0'" in line for line in failures(report, Thresholds()))
    assert failures(report, Thresholds(max_majority=0.6)) == []


def test_normalising_keeps_different_numbers_apart():
    assert normalized("1.50 + 2") == normalized("1.5 +  2") and normalized("12") != normalized("1.2")


@pytest.mark.integration
def test_the_command_is_quiet_on_the_lab_and_exits_1_on_a_planted_defect(tmp_path):
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    lab = subprocess.run([sys.executable, "-m", "rlvr.cli", "data-check"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert lab.returncode == 0, lab.stdout[-2000:] + lab.stderr[-2000:]
    assert "every share within its threshold" in lab.stdout + lab.stderr
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n" for i in range(40)))
    config = tmp_path / "run.toml"
    config.write_text(f'[data]\nsource = "jsonl"\ntrain_path = "{data}"\neval_path = "{data}"\n')  # held-out = training: all overlap
    bad = subprocess.run([sys.executable, "-m", "rlvr.cli", "data-check", str(config), "sft.steps=0"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert bad.returncode == 1, bad.stdout[-2000:] + bad.stderr[-2000:]
    assert "overlap: 100.0% of held-out prompts also in training" in bad.stdout + bad.stderr
