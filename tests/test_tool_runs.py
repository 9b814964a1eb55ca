"""Runs with tools end to end, at toy size: the tool task's cold start on tool traces, GRPO on
multi-turn rollouts, evaluation with pass@k and the no-tool control, rejection sampling, the report,
and the metrics a user watches (tools/*, hack/tool_failed).

The toy model is too small and trained too briefly to be good at anything; what is checked is that
every stage runs conversations through one path and writes them where a user looks.
"""

from __future__ import annotations

import json

import pytest
import torch

from rlvr.config import load_config
from rlvr.metrics import Reporter, read_jsonl_records
from rlvr.pipeline import run

TOOL_TOY = [
    "data.source=tool_arithmetic", "data.use_chat_template=true", "task.min_ops=1", "task.max_ops=1", "task.max_operand=99",
    'task.operators="*"', "task.max_value=-1", "task.num_train=400", "task.num_eval=8",
    'rollout.tools=["rlvr.rollout.toolbox:calculator"]', "rollout.max_turns=2", "rollout.max_new_tokens=96", "eval.max_new_tokens=96",
    "model.tiny.hidden_size=32", "model.tiny.num_layers=2", "model.tiny.intermediate_size=64", "model.tiny.num_heads=2",
    "model.tiny.num_kv_heads=1", "model.tiny.max_positions=160",
    "sft.steps=40", "sft.batch_size=16", "sft.micro_batch_tokens=0", "sft.lr=5e-3", "sft.worked_fraction=0.5",
    "rollout.group_size=4", "rollout.prompts_per_step=4", "train.steps=3", "train.lr=1e-3", "eval.samples=2", "checkpoint.every=1",
    "run.threads=1",
]


def lab(run_dir, extra=()):
    run(load_config(overrides=TOOL_TOY + list(extra) + [f"run.output_dir={json.dumps(str(run_dir))}"]), Reporter(enabled=False), "lab")
    return run_dir


@pytest.fixture(scope="module")
def tool_run(tmp_path_factory):
    return lab(tmp_path_factory.mktemp("tools") / "run")


def test_a_run_with_tools_logs_its_conversations_and_tool_figures(tool_run):
    records = read_jsonl_records(tool_run / "metrics.jsonl")
    assert len(records) == 3
    for r in records:
        for key in ("tools/calls", "tools/call_rate", "tools/turns", "tools/ok", "tools/malformed", "tools/failed_frac",
                    "hack/tool_failed", "hack/turns"):
            assert key in r, key
        assert 1.0 <= r["tools/turns"] <= 2.0
    assert sum(r["tools/calls"] for r in records) > 0, "the cold start's tool traces taught no call at all"
    samples = read_jsonl_records(tool_run / "samples.jsonl")
    assert samples and all(isinstance(s["conversation"], list) and s["conversation"][0]["role"] == "assistant" for s in samples)
    called = [s for s in samples if any(m["role"] == "tool" for m in s["conversation"])]
    assert called, "no logged sample called the calculator"
    tool_message = next(m for m in called[0]["conversation"] if m["role"] == "tool")
    assert tool_message["name"] in ("calculator", "invalid")
    # the model's text is what was judged: no tool result in it
    assert all(m["content"] not in s["completion"] or m["content"] in json.dumps([c for c in s["conversation"] if c["role"] == "assistant"])
               for s in called for m in s["conversation"] if m["role"] == "tool")


def test_evaluation_reports_tool_use_pass_at_k_and_the_no_tool_control(tool_run):
    summary = json.loads((tool_run / "summary.json").read_text())
    for name in ("after_sft", "after_rl"):
        e = summary["eval"][name]
        assert "tools/call_rate" in e["tools"] and e["without_tools"] is not None
        assert 0.0 <= e["without_tools"]["accuracy"] <= 1.0
        assert "pass@2" in e["sampled"]
    rows = read_jsonl_records(tool_run / "eval_after_rl.jsonl")
    assert all("conversation" in r for r in rows)
    page = (tool_run / "report.html").read_text()
    assert "class='tool'" in page or "calls <code>calculator" in page


def test_rejection_sampling_keeps_conversations(tool_run):
    from rlvr.config import Config
    from rlvr.metrics import PhaseBar
    from rlvr.models import load_model, load_tokenizer
    from rlvr.reward import build_reward_terms, correctness_term
    from rlvr.runtime import apply_run_settings
    from rlvr.stages.rejection import rejection_sample
    from rlvr.tasks import load_splits

    cfg = load_config(str(tool_run / "config.toml"))
    apply_run_settings(cfg)
    model, tok = load_model(str(tool_run / "model")), load_tokenizer(str(tool_run / "model"))
    train, _ = load_splits(cfg)
    terms = build_reward_terms(cfg.reward)
    rft = Config().rft
    traces = rejection_sample(model, tok, train[:8], cfg.data, rft, cfg.rft.sampling(cfg.rollout.max_new_tokens, cfg.rollout.stop),
                              correctness_term(terms), PhaseBar(None, None), source="toy", seed=0)
    assert traces.report["sampled"] == 8 * rft.samples
    for row in traces.rows:
        assert isinstance(row["conversation"], list) and row["conversation"][-1]["role"] == "assistant"


@pytest.mark.parametrize("engine", ["static", "transformers"])
def test_both_of_rlvrs_engines_run_the_same_conversations(tool_run, engine):
    """Multi-turn goes through the one sampling path on either engine; greedy conversations agree."""
    from rlvr.data import Example
    from rlvr.models import load_model, load_tokenizer
    from rlvr.rollout import make_sampler
    from rlvr.rollout.multiturn import ToolSettings

    cfg = load_config(str(tool_run / "config.toml"))
    model, tok = load_model(str(tool_run / "model")), load_tokenizer(str(tool_run / "model"))
    settings = ToolSettings.from_config(cfg.rollout)
    examples = [Example(f"{a}*{b}=", str(a * b), info={"expr": f"{a}*{b}"}) for a, b in ((12, 34), (56, 78), (9, 99))]
    greedy = cfg.rollout.sampling().as_greedy()
    out = {e: make_sampler(model, tok, greedy, e, tools=settings, data_cfg=cfg.data).sample([], 1, examples=examples)
           for e in ("auto", engine)}
    assert out["auto"].trace.conversations == out[engine].trace.conversations
    assert torch.equal(out["auto"].rollouts.completion_ids_BT, out[engine].rollouts.completion_ids_BT)
