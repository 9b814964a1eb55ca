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
    "model.tiny.hidden_size=64", "model.tiny.num_layers=2", "model.tiny.intermediate_size=128", "model.tiny.num_heads=4",
    "model.tiny.num_kv_heads=2", "model.tiny.max_positions=160",
    "sft.steps=150", "sft.batch_size=16",  # enough for some well-formed calls (a few per step) in ~10 s "sft.micro_batch_tokens=0", "sft.lr=5e-3", "sft.worked_fraction=1.0",  # every target a tool trace: the toy tries a call
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
    from rlvr.rollout.tools import OUTCOMES

    assert sum(r["tools/calls"] for r in records) > 0, "the cold start's tool traces taught no call at all"
    for r in records:  # every call has exactly one outcome
        assert sum(r[f"tools/{o}"] for o in OUTCOMES) == round(r["tools/calls"] * 16)
    samples = read_jsonl_records(tool_run / "samples.jsonl")
    assert samples and all(isinstance(s["conversation"], list) and s["conversation"][0]["role"] == "assistant" for s in samples)
    for s in samples:  # the logged text is the model's turns; tool results are only in the conversation
        model_turns = [m for m in s["conversation"] if m["role"] == "assistant"]
        assert len(model_turns) >= 1 and all(m["role"] in ("assistant", "tool") for m in s["conversation"])


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
    called = [s for s in read_jsonl_records(tool_run / "samples.jsonl") if any(m["role"] == "tool" for m in s["conversation"])]
    assert ("<div class='tool'>" in page) == bool(called)


def test_the_report_shows_a_conversation_turn_by_turn():
    """The model's turns, its calls and each tool's result (marked as the tool's), every value escaped."""
    from rlvr.report.page import _completion

    html = _completion({"completion": "x", "conversation": [
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "calculator",
                                                                                              "arguments": {"expression": "2*3"}}}]},
        {"role": "tool", "name": "calculator", "content": "<b>6</b>"},
        {"role": "assistant", "content": "\\boxed{6}"}]})
    assert "<div class='tool'><b>tool calculator</b><pre>&lt;b&gt;6&lt;/b&gt;</pre></div>" in html
    assert "calls <code>calculator({&quot;expression&quot;: &quot;2*3&quot;})</code>" in html
    assert html.index("calculator(") < html.index("tool calculator") < html.index("\\boxed{6}")


def test_rejection_sampling_keeps_conversations(tool_run):
    from rlvr.config import Config
    from rlvr.metrics import PhaseBar
    from rlvr.models import load_model, load_tokenizer
    from rlvr.reward import build_reward_terms, correctness_term
    from rlvr.rollout.multiturn import ToolSettings
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
                              correctness_term(terms), PhaseBar(None, None), source="toy", seed=0, tools=ToolSettings.from_config(cfg.rollout))
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


def test_a_tool_run_killed_mid_generation_resumes_exactly(tool_run, tmp_path):
    """Nothing lost with tools either: SIGKILLed while sampling step 2's conversations, resumed, the run ends
    exactly where the uninterrupted one did (metrics and weights). Environments and tool state are per rollout,
    so a step checkpoint holds all a resume needs."""
    import os

    from safetensors.torch import load_file
    from warm_cli import run_rlvr

    run_dir = tmp_path / "run"
    killed = run_rlvr("lab", "--quiet", *TOOL_TOY, f"run.output_dir={json.dumps(str(run_dir))}",
                      env={**os.environ, "RLVR_KILL_AT": "generate@2"})
    assert killed.returncode == -9, killed.stderr[-2000:]
    resumed = run_rlvr("lab", "--quiet", "--resume", str(run_dir), env={k: v for k, v in os.environ.items() if k != "RLVR_KILL_AT"})
    assert resumed.returncode == 0, resumed.stderr[-2000:]

    def comparable(d):
        return [{k: v for k, v in r.items() if not k.startswith("time/") and k != "rollout/tokens_per_s"}
                for r in read_jsonl_records(d / "metrics.jsonl")]

    assert comparable(run_dir) == comparable(tool_run)
    assert read_jsonl_records(run_dir / "samples.jsonl") == read_jsonl_records(tool_run / "samples.jsonl")
    a, b = load_file(run_dir / "model" / "model.safetensors"), load_file(tool_run / "model" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
