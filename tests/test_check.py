"""`rlvr check`: passes on tiny Llama, Qwen2, Qwen3 and Mistral builds with a chat template and on the lab
model, and fails, naming the cause, on each planted defect: a masked mean divided per micro-batch, a
template without the generation prompt, a pad token that is a content token, an engine whose cache is
off by one position."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import (
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

import rlvr.update
from rlvr.commands.check import CHECKS, run_checks
from rlvr.config import load_config
from rlvr.models import build_char_tokenizer
from rlvr.rollout import StaticCacheEngine
from warm_cli import run_rlvr

# ChatML without its newlines: transformers loads a Qwen2 directory's tokenizer as the byte-level Qwen2Tokenizer,
# whose alphabet spells whitespace otherwise than the character tokenizer (the check catches that: see below).
CHATML = (
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + ':' + message.content + '<|im_end|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant:' }}{%- endif %}"
)
NO_GENERATION_PROMPT = "{%- for message in messages %}{{- '<|im_start|>' + message.role + ':' + message.content + '<|im_end|>' }}{%- endfor %}"
# Weights drawn wider than transformers' default (0.02), so the random model's next-token distributions are not
# nearly uniform: it depends on positions and context about as much as a trained model does.
SHAPE = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=256, initializer_range=0.15)
QUICK = ["--skip", "resume"]  # the resume check runs three child runs: once, in its own test


def chat_tokenizer(pad: str | None = None):
    """The lab's character tokenizer with ChatML's turn markers; EOS is the end of a turn, as in instruct models."""
    tokenizer = build_char_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.chat_template = CHATML
    if pad is not None:
        tokenizer.pad_token = pad
    return tokenizer


def build(kind: str, tokenizer, **extra):
    torch.manual_seed(0)
    shape = dict(SHAPE, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, **extra)
    if kind == "llama":
        return LlamaForCausalLM(LlamaConfig(**shape))
    if kind == "mistral":
        return MistralForCausalLM(MistralConfig(**shape, sliding_window=None))
    if kind == "qwen2":
        return Qwen2ForCausalLM(Qwen2Config(**shape))
    return Qwen3ForCausalLM(Qwen3Config(**shape, head_dim=8))


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("check-data")
    rows = [(f"{a}+{b}=", str(a + b)) for a in range(1, 7) for b in range(1, 4)]
    (root / "train.jsonl").write_text("".join(json.dumps({"prompt": p, "answer": a}) + "\n" for p, a in rows[:14]))
    (root / "eval.jsonl").write_text("".join(json.dumps({"prompt": p, "answer": a}) + "\n" for p, a in rows[14:]))
    return ["data.source=jsonl", f"data.train_path={json.dumps(str(root / 'train.jsonl'))}",
            f"data.eval_path={json.dumps(str(root / 'eval.jsonl'))}", "data.use_chat_template=true",
            "rollout.group_size=4", "rollout.max_new_tokens=12", "train.micro_batch_size=3", "run.threads=1", "sft.steps=0"]


def model_dir(tmp_path_factory, kind: str, tokenizer, **extra) -> str:
    path = tmp_path_factory.mktemp(f"check-{kind}")
    build(kind, tokenizer, **extra).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    return {kind: model_dir(tmp_path_factory, kind, chat_tokenizer()) for kind in ("llama", "mistral", "qwen2", "qwen3")}


def check(overrides: list[str], skip=("resume",), prompts=2):
    cfg = load_config(None, overrides)
    return run_checks(cfg, config_path=None, overrides=overrides, skip=set(skip), prompts=prompts)


def status(report) -> dict[str, str]:
    return {f.name: f.status for f in report.findings}


def test_every_check_reports_once_in_order(data, models) -> None:
    report = check(data + [f"model.path={json.dumps(models['qwen3'])}"])
    assert [f.name for f in report.findings] == list(CHECKS)
    assert report.prompt["text"] == "<|im_start|>user:1+1=<|im_end|><|im_start|>assistant:"
    assert report.prompt["tokens"][:2] == ["<|im_start|>", "u"] and len(report.prompt["ids"]) == len(report.prompt["tokens"])


@pytest.mark.parametrize("kind", ["llama", "mistral", "qwen2", "qwen3"])
def test_every_check_passes_on_a_sound_setup(kind, data, models) -> None:
    report = check(data + [f"model.path={json.dumps(models[kind])}"])
    assert status(report) == {**{name: "pass" for name in CHECKS}, "ray": "skip", "resume": "skip"}, report.findings
    measured = {f.name: f.measured for f in report.findings}
    assert "padding" in measured["padding"] and "micro-batches of" in measured["micro_batches"]
    assert "StaticCacheEngine" in measured["engine"] and "positions" in measured["engine"]


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_every_check_passes_under_bf16_autocast(kind, data, models) -> None:
    """bf16 rounds each matmul differently for different shapes: the tolerances hold that, with margins (measured
    5-8e-3 of the gradient against 0.2; 1.5e-3 of the probability mass against 0.05; docs/check.md)."""
    report = check(data + [f"model.path={json.dumps(models[kind])}", "run.autocast=bfloat16"])
    assert status(report) == {**{name: "pass" for name in CHECKS}, "ray": "skip", "resume": "skip"}, report.findings
    assert "probability mass moved" in next(f.measured for f in report.findings if f.name == "engine")


def test_the_lab_passes_and_a_killed_run_resumes_exactly() -> None:
    tiny = ["model.tiny.hidden_size=32", "model.tiny.num_layers=2", "model.tiny.intermediate_size=64", "model.tiny.num_heads=2",
            "model.tiny.num_kv_heads=1", "rollout.max_new_tokens=10", "rollout.group_size=4", "run.threads=1"]
    report = check(tiny, skip=())
    assert status(report) == {**{name: "pass" for name in CHECKS}, "ray": "skip"}, report.findings
    assert "bit for bit equal" in next(f.measured for f in report.findings if f.name == "resume")


def test_a_mean_divided_per_micro_batch_fails(data, models, monkeypatch) -> None:
    real = rlvr.update.policy_loss

    def per_micro_batch(*args, normalizer=None, **kwargs):  # the defect: each micro-batch divides by its own token count
        return real(*args, normalizer=None, **kwargs)

    monkeypatch.setattr(rlvr.update, "policy_loss", per_micro_batch)
    report = check(data + [f"model.path={json.dumps(models['llama'])}", "algo.aggregation=token_mean"])
    failed = {f.name: f for f in report.failed}
    assert {"padding", "micro_batches", "token_budget"} <= set(failed)
    assert "divided per micro-batch" in failed["micro_batches"].fix
    assert {"engine", "sampler_logprobs", "template"}.isdisjoint(failed)


def test_a_template_without_the_generation_prompt_fails(data, models, tmp_path) -> None:
    (tmp_path / "t.jinja").write_text(NO_GENERATION_PROMPT)
    report = check(data + [f"model.path={json.dumps(models['qwen2'])}", f"data.chat_template={json.dumps(str(tmp_path / 't.jinja'))}"])
    [failed] = report.failed
    assert failed.name == "template" and "ignores add_generation_prompt" in failed.fix


def test_a_pad_token_that_is_a_content_token_fails(data, tmp_path_factory) -> None:
    path = model_dir(tmp_path_factory, "qwen3", chat_tokenizer(pad="+"))
    loaded = AutoTokenizer.from_pretrained(path)  # the harm: the pad token is special, so decoding drops text's copies of it
    assert loaded.decode(loaded.encode("1+2", add_special_tokens=False), skip_special_tokens=True) == "12"
    report = check(data + [f"model.path={json.dumps(path)}"])
    [failed] = report.failed
    assert failed.name == "pad_token" and "'+' (id 67) is what text encodes to: 14 of" in failed.measured
    assert "vanish before the verifier" in failed.fix


def test_an_engine_cache_off_by_one_position_fails(data, models, monkeypatch) -> None:
    real = StaticCacheEngine.step
    monkeypatch.setattr(StaticCacheEngine, "step", lambda self, tokens, positions: real(self, tokens, positions + 1))
    report = check(data + [f"model.path={json.dumps(models['mistral'])}"])
    failed = {f.name: f for f in report.failed}
    assert set(failed) == {"engine", "sampler_logprobs"}, report.findings
    assert "StaticCacheEngine" in failed["engine"].measured and "rollout.engine = transformers" in failed["engine"].fix


def test_a_tokenizer_that_rewrites_the_text_fails(data, tmp_path_factory) -> None:
    """transformers loads a Qwen2 directory's tokenizer as the byte-level Qwen2Tokenizer, which has no spelling of a
    newline in this vocabulary: the prompt the model sees is not the one the template wrote."""
    tokenizer = chat_tokenizer()
    tokenizer.chat_template = CHATML.replace("':'", "'\\n'")
    report = check(data + [f"model.path={json.dumps(model_dir(tmp_path_factory, 'qwen2', tokenizer))}"])
    [failed] = report.failed
    assert failed.name == "template" and "does not survive encode -> decode" in failed.fix


def test_an_end_of_turn_that_does_not_stop_sampling_fails(data, tmp_path_factory) -> None:
    tokenizer = chat_tokenizer()
    tokenizer.eos_token = "<eos>"  # a base model's EOS, while the template ends turns with <|im_end|>
    report = check(data + [f"model.path={json.dumps(model_dir(tmp_path_factory, 'llama', tokenizer))}"])
    [failed] = report.failed
    assert failed.name == "end_of_turn" and "'<|im_end|>'" in failed.measured and "rollout.stop" in failed.fix


def test_dropout_is_a_warning_and_the_comparisons_run_without_it(data, tmp_path_factory) -> None:
    """With dropout on, two passes draw two masks: the comparisons would fail for no defect. They run with the dropout
    modules off, and the finding says the run's ratios start off 1 by dropout's noise."""
    path = model_dir(tmp_path_factory, "llama", chat_tokenizer(), attention_dropout=0.1)
    for extra in ([], ["model.lora_rank=4", "model.lora_dropout=0.1"]):
        report = check(data + [f"model.path={json.dumps(path)}", *extra])
        assert not report.failed, report.findings
        dropout = next(f for f in report.findings if f.name == "dropout")
        assert dropout.status == "warn" and "config.attention_dropout = 0.1" in dropout.measured and "lora_dropout" in dropout.fix
        assert ("Dropout modules (p = 0.1)" in dropout.measured) == bool(extra)


def test_a_batch_without_padding_skips_the_padding_check(data, models) -> None:
    report = check(data + [f"model.path={json.dumps(models['qwen3'])}", "rollout.group_size=2", "rollout.max_new_tokens=1"], prompts=1)
    assert status(report)["padding"] == "skip" and "no padding to test" in next(f.measured for f in report.findings if f.name == "padding")


def test_whitespace_a_word_start_marker_adds_after_a_special_token_is_not_a_rewrite() -> None:
    """SentencePiece tokenizers that prepend their word-start marker ('<s>[INST]' -> '<s>', '▁[INST]') decode with a
    space there: the ids are what the model was trained on, so the template check passes; other rewrites fail."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from rlvr.commands.check import template_findings
    from rlvr.data import Example

    backend = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=False)
    backend.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    backend.train_from_iterator(["[INST] what is 1+2? [/INST] 3"] * 50, trainers.BpeTrainer(
        vocab_size=200, special_tokens=["<unk>", "<s>", "</s>"], initial_alphabet=list("abcdefghijklmnopqrstuvwxyz[]/ INST?0123456789+=")))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<unk>")
    tokenizer.chat_template = ("{{ bos_token }}{% for m in messages %}{{ '[INST] ' + m.content + ' [/INST]' }}{% endfor %}"
                               "{% if add_generation_prompt %}{{ ' ' }}{% endif %}")
    cfg = load_config(None, ["data.use_chat_template=true"])
    [finding], shown = template_findings(tokenizer, [Example(prompt="what is 1+2?", answer="3")], cfg)
    assert shown["tokens"][0] == "<s>" and shown["tokens"][1].startswith("\u2581[")
    assert finding.status == "pass" and "differs only in whitespace next to special tokens" in finding.measured, finding


def test_a_check_that_raises_fails_alone(data, models, monkeypatch) -> None:
    import rlvr.commands.check as check_module

    def broken(*args, **kwargs):
        raise RuntimeError("no engine for this model")

    monkeypatch.setattr(check_module, "make_engine", broken)
    report = check(data + [f"model.path={json.dumps(models['qwen3'])}"])
    [failed] = report.failed
    assert failed.name == "engine" and failed.measured == "raised RuntimeError: no engine for this model"
    assert status(report)["sampler_logprobs"] == "pass"


def test_the_command_exits_1_naming_the_failure(data, tmp_path) -> None:
    """The lab's model and tokenizer with a template that never opens the assistant's turn."""
    (tmp_path / "t.jinja").write_text("{%- for message in messages %}{{- message.content + '<eos>' }}{%- endfor %}")
    tiny = ["model.tiny.hidden_size=32", "model.tiny.num_layers=1", "model.tiny.intermediate_size=32", "model.tiny.num_heads=2",
            "model.tiny.num_kv_heads=1"]
    done = run_rlvr("check", *data, *tiny, f"data.chat_template={json.dumps(str(tmp_path / 't.jinja'))}", *QUICK,
                    "--json", str(tmp_path / "check.json"))
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "check failed: template\n" in done.stdout + done.stderr
    written = json.loads((tmp_path / "check.json").read_text())
    assert {f["name"]: f["status"] for f in written["findings"]}["template"] == "fail"
    assert run_rlvr("check", "--skip", "nonsense").returncode == 2
