"""Rejection sampling, `rlvr rft` and `rlvr distill`: only verified, distinct, finished completions
become SFT data; the fresh model is the run's start (rft) or the student (distill); distillation's
token-level term is KL(teacher || student) exactly; no survivor is an error naming the counts."""

from __future__ import annotations

import json
import os
import random
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import SOLVABLE
from rlvr.config import ConfigError, DataConfig, load_config
from rlvr.data import read_jsonl
from rlvr.metrics import PhaseBar, read_jsonl_records
from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.reward import RewardTerm
from rlvr.sources import resolve_model
from rlvr.stages.rejection import rejection_sample, select_survivors
from rlvr.stages.sft import sft_backward
from rlvr.tasks.arithmetic import make_splits
from rlvr.verifiers.math import boxed_math
from warm_cli import run_rlvr

ROOT = Path(__file__).resolve().parents[1]


def rlvr(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1", **(env or {})}
    return run_rlvr(*args, env=env, cwd=ROOT)


def test_select_survivors_keeps_distinct_texts_shortest_or_random_in_sampling_order():
    candidates = [(0, "3+1=4\n\\boxed{4}", 14), (1, "\\boxed{4}", 9), (2, "\\boxed{4}", 9), (3, " \\boxed{4} ", 11), (4, "4\n\\boxed{4}", 11)]
    # texts equal after strip are one path (its first sample stands for it): 0, 1, 4 are the distinct ones
    assert select_survivors(candidates, 5, "shortest", random.Random(0)) == [candidates[0], candidates[1], candidates[4]]
    assert select_survivors(candidates, 2, "shortest", random.Random(0)) == [candidates[1], candidates[4]]
    picks = {tuple(select_survivors(candidates, 2, "random", random.Random(seed))) for seed in range(20)}
    assert len(picks) > 1 and all(len(p) == 2 and len({c[1].strip() for c in p}) == 2 for p in picks)
    assert select_survivors([], 3, "shortest", random.Random(0)) == []


@pytest.fixture(scope="module")
def policy(solvable_run):
    source = resolve_model(str(solvable_run))
    model, tokenizer = source.load()
    cfg = source.run_config
    train, _ = make_splits(cfg.task, cfg.run.seed)
    return model, tokenizer, cfg, train


@pytest.mark.parametrize("select", ["shortest", "random"])
def test_rejection_sampling_keeps_exactly_the_verified_finished_distinct_completions(policy, select):
    model, tokenizer, cfg, train = policy
    problems = list({e.prompt: e for e in train}.values())[:60]  # distinct prompts
    seen: dict[str, list[tuple[str, float]]] = defaultdict(list)

    def judged(completion: str, answer: str, expr: str) -> float:  # the real verifier, watched
        verdict = boxed_math(completion, answer)
        seen[expr + "="].append((completion, verdict))
        return verdict

    rft = load_config(overrides=SOLVABLE + ["rft.samples=8", "rft.max_per_prompt=2", f"rft.select={select}"]).rft
    term = RewardTerm("judged", 1.0, judged, batched=False, correctness=True)
    traces = rejection_sample(model, tokenizer, problems, cfg.data, rft, rft.sampling(12, ()), term, PhaseBar(None, None), source="toy", seed=1)
    report = traces.report
    assert report["sampled"] == 8 * len(problems) and report["kept"] == len(traces.rows) > 0
    assert 0 < report["verified"] < report["sampled"]  # not degenerate: some pass, some fail
    by_prompt = defaultdict(list)
    for row in traces.rows:
        assert boxed_math(row["solution"], row["answer"]) == 1.0  # only verified rows
        assert row["source_model"] == "toy" and row["completion_tokens"] == len(tokenizer.encode(row["solution"])) + 1  # + EOS: it ended
        by_prompt[row["prompt"]].append(row)
    ended = lambda text: len(tokenizer.encode(text)) < 12  # noqa: E731  (a cut completion has all 12 tokens and no EOS)
    assert report["verified_but_cut"] == sum(1 for e in problems for c, v in seen[e.prompt] if v == 1.0 and not ended(c))
    for e in problems:
        distinct = {c.strip() for c, v in seen[e.prompt] if v == 1.0 and ended(c)}
        kept = [r["solution"].strip() for r in by_prompt.get(e.prompt, [])]
        assert len(set(kept)) == len(kept) and set(kept) <= distinct  # distinct, verified
        assert len(kept) == min(2, len(distinct))  # at most m, and no fewer when there were more
        if select == "shortest" and kept:
            tokens = lambda text: len(tokenizer.encode(text))  # noqa: E731
            assert max(map(tokens, kept)) <= min(map(tokens, distinct - set(kept)), default=99)
    assert report["prompts_without_survivor"] == sum(1 for e in problems if e.prompt not in by_prompt) > 0
    assert sum(c["kept"] for c in report["by_level"].values()) == report["kept"]


def test_traces_load_back_as_data_through_the_same_config(policy, tmp_path):
    model, tokenizer, cfg, train = policy
    rft = load_config(overrides=SOLVABLE + ["rft.samples=4"]).rft
    term = RewardTerm("boxed_math", 1.0, boxed_math, batched=False, correctness=True)
    traces = rejection_sample(model, tokenizer, train[:40], cfg.data, rft, rft.sampling(12, ()), term, PhaseBar(None, None), source="toy", seed=0)
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in traces.rows))
    loaded = read_jsonl(path, DataConfig(source="jsonl", train_path=str(path), id_field=""), need_solution=True)
    assert [(e.prompt, e.answer, e.solution, e.level) for e in loaded] == [(r["prompt"], r["answer"], r["solution"], r["level"]) for r in traces.rows]


def test_rlvr_rft_sfts_the_runs_start_on_verified_traces_and_reports_three_models(solvable_run, tmp_path):
    out = tmp_path / "rft"
    done = rlvr("rft", str(solvable_run), "--samples", "8", "--max-per-prompt", "2", "sft.steps=20", "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "rft_report.json").read_text())
    assert [m["name"] for m in report["models"].values()] == ["RL start", "RL policy", "RFT model"]
    assert report["traces"]["kept"] == len(read_jsonl_records(out / "traces.jsonl")) > 0
    assert all(boxed_math(r["solution"], r["answer"]) == 1.0 for r in read_jsonl_records(out / "traces.jsonl"))
    sft_config = load_config(out / "config.toml", for_training=False)
    assert sft_config.model.path == str(solvable_run / "init")  # the fresh model is the run's start, not its policy
    assert sft_config.train.steps == 0 and sft_config.data.train_path == str(out / "traces.jsonl")
    # the same held-out problems for every model
    held_out = [r["prompt"] for r in read_jsonl_records(solvable_run / "eval_after_rl.jsonl")]
    for name in ("eval_after_sft.jsonl", "eval_rl_start.jsonl", "eval_source.jsonl"):
        assert sorted(r["prompt"] for r in read_jsonl_records(out / name)) == sorted(held_out)
    assert report["models"]["source"]["accuracy"] == json.loads((solvable_run / "summary.json").read_text())["eval"]["after_rl"]["accuracy"]
    assert (out / "model" / "config.json").is_file()


def test_a_killed_rft_continues_where_it_stopped(solvable_run, tmp_path):
    args = ["rft", str(solvable_run), "--samples", "4", "sft.steps=6", "checkpoint.sft_every=2", "--quiet"]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert rlvr(*args, "--out", str(whole)).returncode == 0
    assert rlvr(*args, "--out", str(killed), env={"RLVR_KILL_AT": "sft_step@3"}).returncode == -9
    assert (killed / "traces_report.json").is_file() and (killed / "checkpoints" / "sft-000002").is_dir()
    again = rlvr(*args, "--out", str(killed))
    assert again.returncode == 0, again.stderr[-3000:]
    assert (killed / "traces.jsonl").read_text() == (whole / "traces.jsonl").read_text()
    a, b = load_file(whole / "model" / "model.safetensors"), load_file(killed / "model" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    changed = rlvr("rft", str(solvable_run), "--samples", "2", "sft.steps=6", "--quiet", "--out", str(killed))
    assert changed.returncode == 2 and "holds traces made with other settings" in changed.stderr


def test_no_survivor_is_an_error_naming_the_counts(solvable_run, tmp_path):
    # the untrained start solves nothing
    done = rlvr("rft", f"{solvable_run}@start", "--base", f"{solvable_run}@start", "--samples", "2", "--prompts", "10", "--out", str(tmp_path / "o"))
    assert done.returncode == 1, done.stderr[-2000:]
    assert "no verified completion among 20 sampled (2 for each of 10 prompts" in done.stderr
    assert not (tmp_path / "o" / "traces.jsonl").exists() and not (tmp_path / "o" / "model").exists()
    no_base = rlvr("rft", str(solvable_run / "model"), "--out", str(tmp_path / "p"))
    assert no_base.returncode == 2 and "--base" in no_base.stderr


# ----------------------------------------------------------------------------- distillation


def tiny_pair():
    tokenizer = build_char_tokenizer()
    cfg = load_config(overrides=SOLVABLE).model.tiny
    return tokenizer, build_tiny_model(tokenizer, cfg, seed=0), build_tiny_model(tokenizer, cfg, seed=1)


PROMPTS = ["1+2=", "3*3-1=", "2="]
TARGETS = ["\\boxed{3}", "9-1=8\n\\boxed{8}", "\\boxed{2}"]


def test_the_distillation_term_is_the_teachers_kl_per_target_token():
    tokenizer, student, teacher = tiny_pair()
    coef = 0.7
    loss = sft_backward(student, tokenizer, PROMPTS, TARGETS, micro_batch_size=2, teacher=teacher, kl_coef=coef)
    # by hand, one unpadded sequence at a time: mean over target tokens (EOS included) of NLL + coef * KL(teacher || student)
    total, count = 0.0, 0
    with torch.no_grad():
        for p, t in zip(PROMPTS, TARGETS):
            p_ids, t_ids = tokenizer.encode(p), tokenizer.encode(t) + [tokenizer.eos_token_id]
            ids = torch.tensor([p_ids + t_ids])
            s_logp = torch.log_softmax(student(input_ids=ids).logits[0], -1)
            t_logp = torch.log_softmax(teacher(input_ids=ids).logits[0], -1)
            for j, token in enumerate(t_ids):
                pos = len(p_ids) + j - 1
                kl = float((t_logp[pos].exp() * (t_logp[pos] - s_logp[pos])).sum())
                assert kl >= 0
                total += -float(s_logp[pos, token]) + coef * kl
            count += len(t_ids)
    assert loss == pytest.approx(total / count, rel=1e-5)


def test_a_teacher_equal_to_the_student_adds_nothing_to_the_loss_or_gradient():
    tokenizer, student, _ = tiny_pair()
    import copy

    twin, plain = copy.deepcopy(student), copy.deepcopy(student)
    with_kl = sft_backward(student, tokenizer, PROMPTS, TARGETS, micro_batch_size=8, teacher=twin, kl_coef=2.0)
    without = sft_backward(plain, tokenizer, PROMPTS, TARGETS, micro_batch_size=8)
    assert with_kl == pytest.approx(without, abs=1e-6)  # KL(p || p) = 0, and its gradient at p is 0
    for a, b in zip(student.parameters(), plain.parameters()):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-6, rtol=1e-5)
    assert all(p.grad is None for p in twin.parameters())  # the teacher is never trained


def test_rlvr_distill_trains_a_smaller_student_with_the_token_level_term(solvable_run, tmp_path):
    out = tmp_path / "distill"
    done = rlvr("distill", "--teacher", str(solvable_run), "--student", "tiny:num_layers=1,hidden_size=16,num_heads=2,num_kv_heads=1",
                "--kl-coef", "0.5", "--samples", "4", "sft.steps=10", "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "distill_report.json").read_text())
    assert [m["name"] for m in report["models"].values()] == ["teacher", "DISTILL model"]
    student = json.loads((out / "model" / "config.json").read_text())
    assert student["num_hidden_layers"] == 1 and student["hidden_size"] == 16
    cfg = load_config(out / "config.toml", for_training=False)
    assert cfg.distill.kl_coef == 0.5 and cfg.distill.teacher == str(solvable_run) and cfg.model.path == ""
    with_kl = read_jsonl_records(out / "sft_metrics.jsonl")
    assert len(with_kl) == 10
    # the same student on the same traces without the term: the first step's loss is the NLL alone, and lower
    plain = tmp_path / "plain"
    done = rlvr("distill", "--teacher", str(solvable_run), "--student", "tiny:num_layers=1,hidden_size=16,num_heads=2,num_kv_heads=1",
                "--samples", "4", "sft.steps=10", "--out", str(plain), "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (plain / "traces.jsonl").read_text() == (out / "traces.jsonl").read_text()
    assert read_jsonl_records(plain / "sft_metrics.jsonl")[0]["loss/sft"] < with_kl[0]["loss/sft"]


def test_the_token_level_term_refuses_a_teacher_with_another_tokenizer(solvable_run, tmp_path):
    from rlvr.models import save_pretrained
    from rlvr.sources import load_teacher

    tokenizer = build_char_tokenizer()
    tokenizer.add_tokens(["<extra>"])
    other = save_pretrained(build_tiny_model(tokenizer, load_config(overrides=SOLVABLE).model.tiny, 0), tokenizer, tmp_path / "other")
    cfg = load_config(overrides=SOLVABLE + [f"distill.teacher={json.dumps(str(other))}", "distill.kl_coef=1.0"])
    student_tokenizer = build_char_tokenizer()
    student = build_tiny_model(student_tokenizer, load_config(overrides=SOLVABLE).model.tiny, 0)
    with pytest.raises(ConfigError, match="share a tokenizer"):
        load_teacher(cfg, student_tokenizer, student)
    # the same tokenizer, but an output layer of another width (a padded vocabulary): refused too
    wide_cfg = load_config(overrides=SOLVABLE).model.tiny
    wide = build_tiny_model(student_tokenizer, wide_cfg, 0)
    wide.resize_token_embeddings(len(student_tokenizer) + 64)
    padded = save_pretrained(wide, student_tokenizer, tmp_path / "padded")
    cfg = load_config(overrides=SOLVABLE + [f"distill.teacher={json.dumps(str(padded))}", "distill.kl_coef=1.0"])
    with pytest.raises(ConfigError, match="output layers have"):
        load_teacher(cfg, student_tokenizer, student)


def test_rlvr_distill_on_policy_teaches_the_students_own_samples(solvable_run, tmp_path):
    """`--on-policy`: RL on the teacher run's task with the teacher's per-token term (its mean sampled reverse KL
    logged every step), the teacher evaluated beside the student; a student that is the teacher gets exactly 0."""
    out = tmp_path / "opd"
    done = rlvr("distill", "--on-policy", "--teacher", str(solvable_run), "--student", "tiny:num_layers=1,hidden_size=16,num_heads=2,num_kv_heads=1",
                "sft.steps=0", "train.steps=3", "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "distill_report.json").read_text())
    assert report["mode"] == "on_policy" and [m["name"] for m in report["models"].values()] == ["teacher", "ON-POLICY DISTILL model"]
    assert report["models"]["source"]["accuracy"] == pytest.approx(json.loads((solvable_run / "summary.json").read_text())["eval"]["after_rl"]["accuracy"])
    cfg = load_config(out / "config.toml", for_training=False)
    assert cfg.distill.on_policy_coef == 1.0 and cfg.distill.verifier_advantage == 0.0 and cfg.distill.teacher == str(solvable_run)
    steps = read_jsonl_records(out / "metrics.jsonl")
    assert len(steps) == 3 and all(s["loss/teacher_kl"] > 0.1 and s["loss/grad_norm"] > 0 for s in steps)  # a random student is far off
    assert json.loads((out / "model" / "config.json").read_text())["num_hidden_layers"] == 1
    # the teacher as its own student: nothing to learn, exactly
    same = tmp_path / "same"
    done = rlvr("distill", "--on-policy", "--teacher", str(solvable_run), "--student", str(solvable_run), "sft.steps=0", "train.steps=1",
                "--out", str(same), "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    (step,) = read_jsonl_records(same / "metrics.jsonl")
    assert step["loss/teacher_kl"] == 0.0 and step["loss/grad_norm"] == 0.0
    refused = rlvr("distill", "--on-policy", "--teacher", str(solvable_run), "--student", "tiny", "--samples", "4", "--out", str(tmp_path / "x"))
    assert refused.returncode == 2 and "--on-policy samples the student" in refused.stdout + refused.stderr
