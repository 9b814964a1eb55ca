"""The lab's code task (data.source = "code"): problems whose reference programs pass their own
sandboxed tests, tests on points the prompt never shows, held-out functions never in train, and a
run that trains on it end to end through python_code_batched."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from rlvr.config import load_config
from rlvr.models import build_char_tokenizer
from rlvr.tasks.code import LEVELS, SHOWN, make_code_splits, make_problem, sft_targets

from conftest import SOLVABLE

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("CI"), reason="bubblewrap is not installed")
TASK = load_config(overrides=["task.max_operand=19", "task.num_train=400", "task.num_eval=80"]).task


def test_held_out_functions_are_never_trained_on_and_every_level_is_there():
    train, held = make_code_splits(TASK, seed=0)
    assert {e.level for e in held} == set(range(1, LEVELS + 1)) == {e.level for e in train}
    assert not {e.info["signature"] for e in held} & {e.info["signature"] for e in train}  # by values, not spelling
    assert make_code_splits(TASK, seed=0)[1] == held and make_code_splits(TASK, seed=1)[1] != held  # from the seed
    for e in train[:200]:
        shown = {int(p.split("(")[1].split(")")[0]) for p in e.prompt.split()[:-1]}
        tested = {int(a.split("f(")[1].split(")")[0]) for a in json.loads(e.answer)["asserts"]}
        assert len(tested - shown) >= 4  # a program that only tabulates the examples cannot pass
        assert e.level != 4 or shown == set(range(5))  # two points past any threshold (t <= 2) fix the line


@needs_bwrap
def test_reference_programs_pass_and_tabulating_or_wrong_ones_fail():
    from rlvr.verifiers.registry import get_verifier

    train, _ = make_code_splits(TASK, seed=0)
    batched = get_verifier("python_code_batched")
    rows = train[:40]
    assert batched([e.prompt for e in rows], [e.solution for e in rows], [e.answer for e in rows]) == [1.0] * len(rows)
    assert batched([e.prompt for e in rows], [e.info["worked"] for e in rows], [e.answer for e in rows]) == [1.0] * len(rows)
    table = "```python\ndef f(x):\n    return {" + ", ".join(f"{x}: {x + 5}" for x in SHOWN) + "}.get(x, 0)\n```"
    off_by_one = [e.solution.replace("return ", "return 1+") for e in rows[:8]]
    scores = batched(["p"] * 9, [table, *off_by_one], [rows[0].answer, *(e.answer for e in rows[:8])])
    assert scores[0] == 0.0 and all(score < 1.0 for score in scores[1:])  # a conditional's other branch may still pass a test
    # a conditional with the wrong threshold fails its shown points
    import random

    e = next(p for p in (make_problem(4, random.Random(i), 19) for i in range(100)) if "x>2" in p.solution)
    assert batched(["p"], [e.solution.replace("x>2", "x>-1")], [e.answer]) != [1.0]


def test_the_worked_program_shows_the_differences_that_decide_it_and_sft_mixes_both():
    import itertools
    import random

    line = make_problem(2, random.Random(3), 99)
    f0, f1, f2 = (int(p.split("=")[1]) for p in line.prompt.split()[:3])
    assert f"# {f1}-{f0}={f1 - f0} {f2}-{f1}={f2 - f1}\n" in line.info["worked"] and f1 - f0 == f2 - f1
    assert line.info["worked"].replace(line.info["worked"].split("\n")[2] + "\n", "") == line.solution  # the comment only
    parabola = make_problem(3, random.Random(3), 99)
    d1, d2 = (int(d.split("=")[1]) for d in parabola.info["worked"].split("# ")[1].split("\n")[0].split())
    assert d2 == 3 * d1  # a*x*x+b: f(2)-f(1) = 3a, f(1)-f(0) = a
    conditional = make_problem(4, random.Random(5), 99)
    shown = [int(p.split("=")[1]) for p in conditional.prompt.split()[:5]]
    slope, offset = shown[4] - shown[3], shown[3] - 3 * (shown[4] - shown[3])
    assert conditional.solution.split("return ")[1].startswith(f"{slope}*x+{offset} if")
    assert f"# {shown[4]}-{shown[3]}={slope} {shown[3]}-{3 * slope}={offset}" in conditional.info["worked"]
    train, _ = make_code_splits(TASK, seed=0)
    targets = [t for _, t in itertools.islice(sft_targets(train, 64, 0.4, seed=0), 2000)]
    assert 0.35 < sum("#" in t for t in targets) / len(targets) < 0.45


def test_the_code_tokens_leave_every_arithmetic_id_as_it_was():
    plain, code = build_char_tokenizer(), build_char_tokenizer(code=True)
    assert {t: i for t, i in code.get_vocab().items() if t in plain.get_vocab()} == plain.get_vocab()
    program = "```python\ndef f(x):\n    return 2*x+3\n```"
    ids = code.encode(program, add_special_tokens=False)
    assert code.decode(ids) == program and ids[0] == code.get_vocab()["```python\n"] and ids[-1] == code.get_vocab()["```"]


@needs_bwrap
def test_a_code_lab_run_trains_through_the_batched_sandbox(tmp_path):
    from rlvr.metrics import Reporter, read_jsonl_records
    from rlvr.pipeline import run

    out = tmp_path / "run"
    overrides = [o for o in SOLVABLE if not o.startswith(("task.", "eval.max_new_tokens", "rollout.max_new_tokens"))]
    run(load_config(overrides=[*overrides, "data.source=code", "task.max_operand=9", "task.num_train=200", "task.num_eval=40",
                               "rollout.max_new_tokens=48", "eval.max_new_tokens=48", "model.tiny.max_positions=96", "sft.steps=20",
                               "train.steps=2", "eval.samples=0", 'reward.functions=["python_code_batched"]',
                               f"run.output_dir={json.dumps(str(out))}"]), Reporter(enabled=False), "lab")
    records = read_jsonl_records(out / "metrics.jsonl")
    assert len(records) == 2 and all("reward/python_code_batched" in r and r["reward/missing"] == 0 for r in records)
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["eval"]["after_rl"]["by_level"]) == {"1", "2", "3", "4"}


def test_the_code_task_needs_a_code_reward():
    from rlvr.config import ConfigError
    from rlvr.tasks import task_for

    with pytest.raises(ConfigError, match=r"reward.functions: has no python_code term but data.source = 'code'"):
        task_for(load_config(overrides=["data.source=code"]))  # the task's own rule
    assert load_config(overrides=["data.source=code", 'reward.functions=["python_code_batched"]']).data.source == "code"


def test_shows_work_counts_a_commented_program_and_still_reads_boxed_answers():
    import random

    from rlvr.stages.evaluate import shows_work

    e = make_problem(2, random.Random(0), 99)
    assert shows_work(e.info["worked"]) and not shows_work(e.solution) and not shows_work("no program")
    assert shows_work("3*4=12, 12+5=17 \\boxed{17}") and not shows_work("\\boxed{17}")


def test_the_code_lab_config_loads_and_names_a_code_reward():
    from pathlib import Path

    cfg = load_config(str(Path(__file__).parent.parent / "examples" / "code_lab.toml"))
    assert cfg.data.source == "code" and cfg.reward.functions == ["python_code_batched"]
    assert cfg.model.tiny.max_positions >= 46 + cfg.rollout.max_new_tokens  # the longest prompt and completion fit
