"""reasoning-gym as a source, each row judged by its own task's scorer, and per-row reward routing."""

import json

import pytest

pytest.importorskip("reasoning_gym")

from rlvr.config import DataConfig, RewardConfig, load_config  # noqa: E402
from rlvr.data import Example  # noqa: E402
from rlvr.reward import build_reward_terms, score_completions  # noqa: E402
from rlvr.tasks.gym import gym_splits  # noqa: E402
from rlvr.verifiers.gym import reasoning_gym  # noqa: E402

TASKS = ["basic_arithmetic", "chain_sum", "spell_backward"]


@pytest.fixture(scope="module")
def splits():
    return gym_splits(DataConfig(source="reasoning_gym", gym_tasks=TASKS, gym_size=40, gym_eval_size=10), seed=0)


def test_each_task_gives_its_problems_held_out_apart_and_levelled(splits):
    train, held = splits
    assert len(held) == 30 and {e.level for e in held} == {1, 2, 3}
    assert not {e.info["question"] for e in held} & {e.info["question"] for e in train}
    assert all(e.info["verifier"] == "reasoning_gym" and e.info["task"] == TASKS[e.level - 1] for e in train + held)
    assert train[0].prompt.endswith("Give the final answer in \\boxed{}.")


def test_a_rows_own_scorer_judges_its_last_box(splits):
    _, held = splits
    word = next(e for e in held if e.info["task"] == "spell_backward")
    fields = {"metadata": word.info["metadata"], "question": word.info["question"]}
    assert reasoning_gym(f"so \\boxed{{{word.answer}}}", word.answer, **fields) == 1.0
    assert reasoning_gym(f"\\boxed{{{word.answer}}} no, \\boxed{{x{word.answer}}}", word.answer, **fields) < 1.0  # the last box counts
    assert reasoning_gym(f"\\boxed{{x{word.answer}}} no, \\boxed{{{word.answer}}}", word.answer, **fields) == 1.0
    assert reasoning_gym(word.answer, word.answer, **fields) == 0.0  # unboxed
    assert reasoning_gym("\\boxed{4}", "4") is None  # not a reasoning-gym row: not its to judge


def test_a_mixture_routes_each_row_to_its_own_term_and_nothing_is_missing(splits):
    _, held = splits
    gym_row = next(e for e in held if e.info["task"] == "spell_backward")
    math_row = Example("2+2=", "4", info={"verifier": "boxed_math"})
    code_row = Example("write add", json.dumps({"asserts": ["assert add(1, 2) == 3"]}), info={"verifier": "python_code"})
    terms = build_reward_terms(RewardConfig(functions=["boxed_math", "reasoning_gym", "python_code"]))
    code = "```python\ndef add(a, b):\n    return a + b\n```"
    completions = [f"\\boxed{{{gym_row.answer}}}", "\\boxed{4}", code, "\\boxed{5}"]
    examples = [gym_row, math_row, code_row, math_row]
    scores = score_completions(terms, RewardConfig(), ["p"] * 4, completions, examples, [5] * 4, 16)
    assert scores.total_B.tolist() == [1.0, 1.0, 1.0, 0.0]  # no NaN: a term that does not apply is not a missing reward
    assert scores.terms["boxed_math"].values[0] is None and scores.terms["boxed_math"].values[2] is None  # routed elsewhere
    assert scores.terms["reasoning_gym"].values[1] is None and scores.terms["python_code"].values[0] is None
    assert scores.correct_B.tolist() == [1.0, 1.0, 1.0, 0.0]  # each row's correctness is its own term's verdict


def test_a_reasoning_gym_mixture_trains_on_the_lab_model(tmp_path):
    from rlvr.metrics import Reporter, read_jsonl_records
    from rlvr.pipeline import run

    out = tmp_path / "run"
    overrides = ["data.source=reasoning_gym", f'data.gym_tasks={json.dumps(TASKS)}', "data.gym_size=60", "data.gym_eval_size=6",
                 'reward.functions=["reasoning_gym"]', "model.tiny.hidden_size=32", "model.tiny.intermediate_size=64",
                 "model.tiny.max_positions=256", "sft.steps=4", "sft.batch_size=4", "train.steps=2", "rollout.group_size=4",
                 "rollout.prompts_per_step=4", "rollout.max_new_tokens=12", "eval.max_new_tokens=12", "run.threads=1",
                 f"run.output_dir={json.dumps(str(out))}"]
    summary = run(load_config(overrides=overrides), Reporter(enabled=False), "lab")
    records = read_jsonl_records(out / "metrics.jsonl")
    assert len(records) == 2 and all(r["reward/missing"] == 0 for r in records)
    assert set(summary["eval"]["after_rl"]["by_level"]) == {"1", "2", "3"}  # each task reported on its own


def test_routes_must_name_a_term_and_held_out_rows_interleave_tasks(splits):
    from rlvr.config import ConfigError
    from rlvr.runtime import check_routes
    from rlvr.tasks import task_for

    _, held = splits
    assert [e.info["task"] for e in held[:3]] == TASKS  # eval.max_problems = 3 sees every task
    with pytest.raises(ConfigError, match="no reasoning_gym term"):
        task_for(load_config(overrides=["data.source=reasoning_gym", 'data.gym_tasks=["chain_sum"]']))  # judged by boxed_math? refused
    terms = build_reward_terms(RewardConfig(functions=["boxed_math"]))
    with pytest.raises(ConfigError, match=r"\['reasoning_gym'\]"):
        check_routes(held, terms, "verifier")
    check_routes(held, build_reward_terms(RewardConfig(functions=["reasoning_gym"])), "verifier")
