"""Evaluation: greedy accuracy and, from N samples per problem, pass@k, maj@k and mean@N with
intervals; `rlvr eval` on models and run directories; evaluation during RL (eval.every)."""

from __future__ import annotations

import json
import os
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from rlvr.config import ConfigError, load_config
from rlvr.metrics import PhaseBar, Reporter, read_jsonl_records
from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.pipeline import run
from rlvr.reward import RewardTerm
from rlvr.stages.estimators import LEDGER_CLASSES, discovery_class, discovery_ledger, maj_at_k, pass_at_k
from rlvr.stages.evaluate import evaluate
from rlvr.tasks.arithmetic import make_splits
from rlvr.verifiers.math import answer_key, boxed_math
from warm_cli import run_rlvr

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "model.tiny.hidden_size=32", "model.tiny.num_layers=2", "model.tiny.intermediate_size=64", "model.tiny.num_heads=2",
    "model.tiny.num_kv_heads=1", "task.num_train=200", "task.num_eval=24", "eval.max_new_tokens=10", "rollout.max_new_tokens=10",
    "rollout.group_size=4", "rollout.prompts_per_step=4", "train.micro_batch_size=8", "run.threads=1", "sft.steps=30",
    "sft.batch_size=16", "train.steps=4", "train.lr=1e-3", "train.warmup_steps=1",
]


def bar():
    return PhaseBar(None, None)


def first_digit_term():
    """A dense stand-in verdict for an untrained model: right when the completion's first character is a digit."""
    return RewardTerm("digit", 1.0, lambda completion, answer: float(completion[:1].isdigit()), batched=False, correctness=True)


@pytest.fixture(scope="module")
def tiny():
    cfg = load_config(overrides=TINY)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, cfg.model.tiny, seed=0)
    _, held_out = make_splits(cfg.task, 0)
    return cfg, model, tokenizer, held_out


def test_answer_key_is_the_vote_boxed_math_would_judge():
    assert answer_key(r"2+3=5 \boxed{5}") == "5"
    assert answer_key(r"\boxed{0.50}") == answer_key(r"\boxed{\frac{1}{2}}") == answer_key(r"\boxed{1/2}") == "1/2"
    assert answer_key(r"\boxed{-41}") == "-41"
    assert answer_key(r"\boxed{13} so \boxed{13.0}") == "13"  # the same answer twice is one vote
    for hedge_or_nothing in (r"\boxed{1} or \boxed{2}", "no box at all", r"\boxed{}", r"\boxed{5", "\\boxed{" + "9" * 600 + "}"):
        assert answer_key(hedge_or_nothing) is None
    # a completion with no vote is exactly one boxed_math could never accept
    assert boxed_math(r"\boxed{1} or \boxed{2}", "2") == 0.0


def test_sampled_figures_are_the_estimators_of_the_written_completions(tiny):
    cfg, model, tokenizer, held_out = tiny
    eval_cfg = load_config(overrides=TINY + ["eval.samples=6", "eval.k=[1,2,3,6]"]).eval
    result = evaluate(model, tokenizer, held_out, cfg.data, eval_cfg, first_digit_term(), bar(), eval_cfg.sampling((), None), seed=3)
    assert len(result.sampled_rows) == 6 * len(held_out)
    by_problem = defaultdict(list)
    for row in result.sampled_rows:
        by_problem[row["problem"]].append(row)
    assert sorted(by_problem) == list(range(len(held_out))) and all(len(rows) == 6 for rows in by_problem.values())
    for k in (1, 2, 3, 6):
        expected = sum(pass_at_k(6, sum(r["reward"] == 1.0 for r in rows), k) for rows in by_problem.values()) / len(held_out)
        assert result.sampled[f"pass@{k}"] == pytest.approx(expected, abs=1e-12)
        # this verdict declares no answer_key and an untrained model writes no box: nothing to vote on
        assert result.sampled[f"maj@{k}"] is None and f"maj@{k}" not in result.intervals
        lo, hi = result.intervals[f"pass@{k}"]
        assert lo <= result.sampled[f"pass@{k}"] <= hi
    assert result.sampled["mean@6"] == pytest.approx(sum(r["reward"] for r in result.sampled_rows) / len(result.sampled_rows))
    assert result.sampled["pass@1"] == pytest.approx(result.sampled["mean@6"])  # pass@1 = c/n for 0/1 verdicts
    # per level: the mean over that level's problems
    for level, figures in result.sampled_by_level.items():
        rows = [rs for rs in by_problem.values() if str(rs[0]["level"]) == level]
        assert figures["pass@6"] == pytest.approx(sum(pass_at_k(6, sum(r["reward"] == 1.0 for r in rs), 6) for rs in rows) / len(rows))


def first_character(completion: str, answer: str) -> float:
    return float(completion[:1].isdigit())


first_character.answer_key = lambda completion: completion[:1] or None  # type: ignore[attr-defined]


def test_maj_at_k_votes_on_the_answers_the_verifier_declares(tiny):
    # An untrained model writes no box; a verifier whose answer is the first character gives many
    # votes and ties, and maj@k must be the estimator over exactly those votes.
    cfg, model, tokenizer, held_out = tiny
    eval_cfg = load_config(overrides=TINY + ["eval.samples=5"]).eval
    term = RewardTerm("first_character", 1.0, first_character, batched=False, correctness=True)
    result = evaluate(model, tokenizer, held_out, cfg.data, eval_cfg, term, bar(), eval_cfg.sampling((), None), seed=0)
    by_problem = defaultdict(list)
    for row in result.sampled_rows:
        by_problem[row["problem"]].append(row)
    for k in (1, 2, 4, 5):
        total = 0.0
        for rows in by_problem.values():
            votes = defaultdict(list)
            for r in rows:
                assert r["answer_key"] == (r["completion"][:1] or None)
                if r["answer_key"] is not None:
                    votes[r["answer_key"]].append(r["reward"])
            total += maj_at_k([(len(v), sum(v) / len(v)) for v in votes.values()], 5 - sum(map(len, votes.values())), k)
        assert result.sampled[f"maj@{k}"] == pytest.approx(total / len(by_problem), abs=1e-12)
        assert result.sampled[f"maj@{k}"] <= result.sampled[f"pass@{k}"] + 1e-12  # the majority answer is one of the k
    assert 0 < result.sampled["pass@5"] and result.sampled["maj@5"] < result.sampled["pass@5"]  # the case is not degenerate


def test_sampling_leaves_greedy_accuracy_and_the_training_rng_alone(tiny):
    cfg, model, tokenizer, held_out = tiny
    greedy_only = evaluate(model, tokenizer, held_out, cfg.data, cfg.eval, first_digit_term(), bar(), cfg.eval.sampling((), None))
    rng = torch.get_rng_state()
    three = load_config(overrides=TINY + ["eval.samples=3"]).eval
    sampled = evaluate(model, tokenizer, held_out, cfg.data, three, first_digit_term(), bar(), three.sampling((), None))
    assert torch.equal(torch.get_rng_state(), rng)  # eval.every during RL must not move the run's random stream
    assert sampled.samples == greedy_only.samples and sampled.accuracy == greedy_only.accuracy
    assert greedy_only.sampled == {} and greedy_only.sampled_rows == []


def test_the_same_seed_gives_the_same_samples_and_another_seed_others(tiny):
    cfg, model, tokenizer, held_out = tiny
    eval_cfg = load_config(overrides=TINY + ["eval.samples=2"]).eval
    a, b, c = (evaluate(model, tokenizer, held_out, cfg.data, eval_cfg, first_digit_term(), bar(), eval_cfg.sampling((), None), seed=s).sampled_rows
               for s in (5, 5, 6))
    assert a == b and a != c


def test_pass_at_k_with_k_above_the_samples_is_refused_with_the_reason():
    with pytest.raises(ConfigError, match=r"eval\.k\[1\].*= 8 but eval\.samples = 4.*at least k samples"):
        load_config(overrides=["eval.samples=4", "eval.k=[2,8]"])
    assert load_config(overrides=["eval.samples=12"]).eval.ks() == [1, 2, 4, 8, 12]


# ----------------------------------------------------------------------------- during RL and `rlvr eval`


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("runs") / "toy"
    cfg = load_config(overrides=TINY + [f"run.output_dir={json.dumps(str(run_dir))}", "eval.every=2", "eval.samples=2"])
    run(cfg, Reporter(enabled=False), "lab")
    return run_dir


def test_eval_every_logs_held_out_figures_on_the_reward_curve_steps(toy_run):
    records = read_jsonl_records(toy_run / "metrics.jsonl")
    evaluated = [r["step"] for r in records if "eval/accuracy" in r]
    assert evaluated == [2, 4]
    assert all({"eval/pass@1", "eval/pass@2", "eval/maj@2", "eval/mean@2", "time/eval"} <= r.keys() for r in records if r["step"] in evaluated)
    final = json.loads((toy_run / "summary.json").read_text())["eval"]["after_rl"]
    at_end = next(r for r in records if r["step"] == 4)
    assert at_end["eval/accuracy"] == final["accuracy"] and at_end["eval/pass@2"] == final["sampled"]["pass@2"]  # same policy, same seed
    assert (toy_run / "eval_after_rl_samples.jsonl").is_file()


def rlvr(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1"}
    return run_rlvr(*args, env=env, cwd=ROOT)


def test_rlvr_eval_compares_a_run_with_its_start_on_the_same_problems(toy_run, tmp_path):
    out = tmp_path / "eval"
    done = rlvr("eval", str(toy_run), "--compare", f"{toy_run}@sft", "--samples", "4", "--k", "1,4", "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["models"]) == {"model", "compare"} and summary["problems"]["count"] == 24
    for label in ("model", "compare"):
        figures = summary["models"][label]
        assert set(figures["sampled"]) == {"pass@1", "pass@4", "maj@1", "maj@4", "mean@4"}
        assert len(read_jsonl_records(out / f"eval_{label}_samples.jsonl")) == 4 * 24
        assert len(read_jsonl_records(out / f"eval_{label}.jsonl")) == 24
    assert "final policy" in summary["models"]["model"]["source"] and "after SFT" in summary["models"]["compare"]["source"]
    # the run's own final evaluation used the same seed and settings but N = 2: greedy accuracy agrees
    assert summary["models"]["model"]["accuracy"] == json.loads((toy_run / "summary.json").read_text())["eval"]["after_rl"]["accuracy"]
    assert (out / "pass_at_k.png").stat().st_size > 0
    # the discovery ledger: one class per problem, counts that add up, each class what the two sample files say
    ledger, rows = summary["ledger"], read_jsonl_records(out / "ledger.jsonl")
    assert ledger["problems"] == len(rows) == 24 and sum(ledger["counts"].values()) == 24 and ledger["samples_per_model"] == 96
    assert sum(sum(level.values()) for level in ledger["by_level"].values()) == 24
    solved = {label: [0] * 24 for label in ("model", "compare")}
    for label in solved:
        for r in read_jsonl_records(out / f"eval_{label}_samples.jsonl"):
            solved[label][r["problem"]] += r["reward"] == 1.0
    for row in rows:
        s, e = solved["compare"][row["problem"]], solved["model"][row["problem"]]
        assert row["class"] == discovery_class(s, e) and row["start_pass@4"] == float(s > 0) and row["end_pass@1"] == e / 4


def test_the_ledger_classes_on_verdict_matrices_with_known_answers():
    # 5 problems x N = 4 samples, solved counts start / end, and what each must be called
    start, end = [0, 0, 3, 1, 2, 4], [2, 0, 4, 0, 2, 1]
    ledger = discovery_ledger(start, end, 4, ["1", "1", "2", "2", "3", "3"])
    assert ledger["classes"] == ["discovered", "unsolved", "sharpened", "lost", "unchanged", "blunted"]
    assert ledger["by_level"] == {"1": {**dict.fromkeys(LEDGER_CLASSES, 0), "discovered": 1, "unsolved": 1},
                                  "2": {**dict.fromkeys(LEDGER_CLASSES, 0), "sharpened": 1, "lost": 1},
                                  "3": {**dict.fromkeys(LEDGER_CLASSES, 0), "unchanged": 1, "blunted": 1}}
    with pytest.raises(ValueError, match="0..n"):
        discovery_ledger([5], [0], 4, ["1"])
    with pytest.raises(ValueError, match="same problems"):
        discovery_ledger([1, 2], [0], 4, ["1", "1"])


def test_rlvr_eval_refuses_k_above_samples_and_names_what_a_run_lacks(toy_run, tmp_path):
    refused = rlvr("eval", str(toy_run), "--samples", "2", "--k", "1,4", "--out", str(tmp_path / "a"))
    assert refused.returncode == 2 and "eval.k" in refused.stderr and "at least k samples" in refused.stderr
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "config.toml").write_text((toy_run / "config.toml").read_text())
    (unfinished / "init").symlink_to(toy_run / "init")
    missing = rlvr("eval", str(unfinished), "--out", str(tmp_path / "b"))
    assert missing.returncode == 2 and "no model/" in missing.stderr and "no complete step checkpoint" in missing.stderr
    assert "Traceback" not in missing.stderr
    nowhere = rlvr("eval", str(tmp_path / "nope"), "--out", str(tmp_path / "c"))
    assert nowhere.returncode == 2 and "does not exist" in nowhere.stderr


def test_each_sampled_completion_is_judged_against_its_own_problem(solvable_run):
    # a trained toy model that solves some problems: a row paired with the wrong problem would show here
    from rlvr.sources import resolve_model

    source = resolve_model(str(solvable_run))
    model, tokenizer = source.load()
    cfg = source.run_config
    _, held_out = make_splits(cfg.task, cfg.run.seed)
    term = RewardTerm("boxed_math", 1.0, boxed_math, batched=False, correctness=True)
    result = evaluate(model, tokenizer, held_out, cfg.data, cfg.eval, term, bar(), cfg.eval.sampling((), None), seed=0)
    prompts = {e.prompt: e.answer for e in held_out}
    assert 0 < sum(r["reward"] for r in result.sampled_rows) < len(result.sampled_rows)
    for r in result.sampled_rows:
        assert r["answer"] == prompts[r["prompt"]] == held_out[r["problem"]].answer
        assert r["reward"] == boxed_math(r["completion"], r["answer"])
    for r in result.samples:
        assert r["reward"] == boxed_math(r["completion"], prompts[r["prompt"]])


def test_rlvr_eval_samples_by_default_so_k_alone_is_enough(toy_run, tmp_path):
    # a plain model directory gets the default config (eval.samples = 0): --k must not be refused for it
    out = tmp_path / "eval"
    done = rlvr("eval", str(toy_run / "model"), "--k", "1,4", "task.num_eval=24", "eval.max_new_tokens=10", "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["settings"]["samples"] == 8 and summary["settings"]["k"] == [1, 4]
    assert set(summary["models"]["model"]["sampled"]) == {"pass@1", "pass@4", "maj@1", "maj@4", "mean@8"}
