"""A few real GRPO steps on a tiny model: every parameter learns, the metrics file is complete."""

import json

import pytest
import torch
from safetensors.torch import load_file

from rlvr.config import load_config
from rlvr.metrics import Reporter, read_jsonl_records
from rlvr.pipeline import run

TINY = [
    "model.tiny.hidden_size=32", "model.tiny.num_layers=2", "model.tiny.intermediate_size=64",
    "task.num_train=200", "task.num_eval=30", "eval.max_new_tokens=12", "rollout.max_new_tokens=12",
    "rollout.group_size=4", "rollout.prompts_per_step=4", "train.micro_batch_size=8", "run.threads=1",
]

STEP_KEYS = {
    "step", "reward/mean", "reward/std", "reward/frac_groups_all_equal", "loss/policy", "loss/kl",
    "loss/clip_frac", "loss/grad_norm", "rollout/mean_length", "rollout/entropy", "rollout/tokens_per_s",
    "time/generate", "time/verify", "time/update", "time/step",
}


def parity_reward(completion: str, answer: str) -> float:
    """A dense, learnable stand-in reward (even-length completions win) so every group has signal."""
    return float(len(completion) % 2 == 0)


@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_grpo_steps_update_every_parameter_and_log_every_step(tmp_path, tiny_grpo, beta):
    cfg = load_config(overrides=TINY + [f"algo.beta={beta}", "train.steps=3", "train.lr=1e-3", "train.warmup_steps=1", "algo.num_iterations=2"])
    records, model, before = tiny_grpo(cfg, "parity", parity_reward)

    unchanged = [n for n, p in model.named_parameters() if p.requires_grad and torch.equal(p, before[n])]
    assert not unchanged, f"parameters that never moved: {unchanged}"
    lines = read_jsonl_records(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in lines] == [1, 2, 3] and lines == json.loads(json.dumps(records))
    for line in lines:
        assert STEP_KEYS <= line.keys()
        assert (line["loss/kl"] is None) == (beta == 0.0)
    samples = read_jsonl_records(tmp_path / "samples.jsonl")
    assert samples and {"prompt", "completion", "answer", "reward", "advantage"} <= samples[0].keys()


def test_pipeline_writes_the_whole_run_directory(tmp_path):
    out = tmp_path / "run"
    cfg = load_config(overrides=TINY + [f"run.output_dir={json.dumps(str(out))}", "sft.steps=5", "sft.batch_size=8", "train.steps=2"])
    summary = run(cfg, Reporter(enabled=False), "lab")
    for name in ("config.toml", "metrics.jsonl", "samples.jsonl", "eval_after_sft.jsonl", "eval_after_rl.jsonl", "summary.json", "reward_curve.png"):
        assert (out / name).is_file(), name
    assert (out / "model" / "config.json").is_file()
    assert set(summary["eval"]) == {"after_sft", "after_rl"}
    assert set(summary["eval"]["after_rl"]["by_level"]) == {str(n) for n in range(cfg.task.min_ops, cfg.task.max_ops + 1)}
    assert summary["eval"]["after_sft"]["num_problems"] == 30
    assert len(read_jsonl_records(out / "metrics.jsonl")) == 2
    # the saved config reproduces the run's settings
    assert load_config(out / "config.toml") == cfg
    # a second run into the same directory is refused rather than mixing two runs' metrics
    with pytest.raises(ValueError, match="run.output_dir"):
        run(load_config(overrides=TINY + [f"run.output_dir={json.dumps(str(out))}"]), Reporter(enabled=False), "lab")


def test_a_mixed_precision_run_trains_and_saves_fp32_weights(tmp_path):
    """run.autocast=bfloat16 end to end: SFT, evaluation and GRPO under bf16 autocast; the saved
    model keeps fp32 weights."""
    out = tmp_path / "amp"
    cfg = load_config(overrides=TINY + [f"run.output_dir={json.dumps(str(out))}", "run.autocast=bfloat16", "sft.steps=5", "sft.batch_size=8",
                                        "train.steps=2"])
    summary = run(cfg, Reporter(enabled=False), "lab")
    assert summary["rl_steps"] == 2
    records = read_jsonl_records(out / "metrics.jsonl")
    assert all(r["loss/skipped_nonfinite"] == 0 for r in records if "loss/skipped_nonfinite" in r)
    saved = load_file(str(out / "model" / "model.safetensors"))
    assert {t.dtype for t in saved.values()} == {torch.float32}


def test_evaluations_before_and_after_rl_can_each_be_switched_off(tmp_path):
    out = tmp_path / "run"
    cfg = load_config(overrides=TINY + [f"run.output_dir={json.dumps(str(out))}", "sft.steps=3", "sft.batch_size=8", "train.steps=1",
                                        "eval.before_rl=false", "eval.after_rl=false"])
    summary = run(cfg, Reporter(enabled=False), "lab")
    assert summary["eval"] == {} and summary["gain_points"] is None
    assert not list(out.glob("eval_*.jsonl")) and len(read_jsonl_records(out / "metrics.jsonl")) == 1
    only_after = run(load_config(overrides=TINY + [f"run.output_dir={json.dumps(str(tmp_path / 'b'))}", "sft.steps=3", "sft.batch_size=8",
                                                   "train.steps=1", "eval.before_rl=false"]), Reporter(enabled=False), "lab")
    assert set(only_after["eval"]) == {"after_rl"} and only_after["gain_points"] is None
