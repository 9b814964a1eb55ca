"""Load any Hugging Face causal LM and its tokenizer, or build the lab's tiny one locally.

The tiny model is a real transformers architecture (Qwen3) with a character-level tokenizer made
with the `tokenizers` library, saved with `save_pretrained` so that the ordinary
`AutoModelForCausalLM` / `AutoTokenizer` path loads it back: the lab exercises exactly the code a
user's hub model goes through.

Why Qwen3 and not Qwen2: transformers 5 lists `qwen2` among model types whose saved tokenizer
class it distrusts, and silently swaps any tokenizer saved beside a Qwen2 config for
`Qwen2Tokenizer` (which dropped our spaces and newlines). `tests/test_models.py` checks the
encode -> save -> load -> decode round trip.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers
from tokenizers.models import WordLevel
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from rlvr.config import ConfigError, ModelConfig, TinyModelConfig


class ModelError(ConfigError):
    """model.path does not name a usable model; the message says what is missing."""



PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
# Multi-character pieces that get one token each, so a boxed answer costs 2 tokens of syntax.
WORD_TOKENS = ["\\boxed{", "\\frac{"]
THINK_TOKENS = ["<think>", "</think>"]  # added (after everything else) only for thinking-format tasks
CODE_TOKENS = ["```python\n", "```"]  # added (after everything else) only for the code task: its fences
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]  # added last, only for tool tasks
# The tiny tokenizer's chat template when its task calls tools: the tool names on the first line, then Q:/A: turns;
# an assistant turn ends in EOS, a tool result is one <tool_response> line. Calls are written as Hermes writes them
# (<tool_call>{"name": ..., "arguments": {...}}</tool_call>), which rollout.tool_format = "hermes" parses.
TINY_TOOL_TEMPLATE = (
    "{%- if tools %}{{- 'tools: ' }}{%- for tool in tools %}{{- tool.function.name if tool.function is defined else tool.name }}"
    "{{- ', ' if not loop.last else '\n' }}{%- endfor %}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' %}{{- message.content + '\n' }}"
    "{%- elif message.role == 'user' %}{{- 'Q: ' + message.content + '\n' }}"
    "{%- elif message.role == 'assistant' %}{{- 'A: ' + (message.content or '') }}"
    "{%- for call in (message.tool_calls or []) %}"
    "{{- '<tool_call>' + ((call.function if call.function is defined else call) | tojson) + '</tool_call>' }}{%- endfor %}"
    "{{- '<eos>\n' }}"
    "{%- elif message.role == 'tool' %}{{- '<tool_response>' + message.content + '</tool_response>\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- 'A: ' }}{%- endif %}"
)
CHARACTERS = string.digits + string.ascii_letters + " \n+-*/^()[]{}=.,:;?!'\"<>_%$\\|&#@~"


def build_char_tokenizer(thinking: bool = False, code: bool = False, tools: bool = False) -> PreTrainedTokenizerFast:
    """A character-level tokenizer (plus a few LaTeX words) wrapped as a transformers tokenizer.
    With `thinking`, `<think>` and `</think>` are one token each; with `code`, the code fences
    (appended: every other id stays, so the arithmetic lab's model is the same); with `tools`, the
    tool-call and tool-result tags, and a chat template that renders tools (TINY_TOOL_TEMPLATE)."""
    words = WORD_TOKENS + (THINK_TOKENS if thinking else []) + (CODE_TOKENS if code else []) + (TOOL_TOKENS if tools else [])
    pieces = [PAD, EOS, UNK] + list(dict.fromkeys(CHARACTERS)) + words
    vocab = {piece: i for i, piece in enumerate(pieces)}
    tok = Tokenizer(WordLevel(vocab, unk_token=UNK))
    # Every character is its own pre-token; added tokens (\boxed{) are matched before this split.
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()  # concatenate pieces: no spaces inserted on decode
    tok.add_special_tokens([AddedToken(t, special=True) for t in (PAD, EOS, UNK)])
    tok.add_tokens([AddedToken(w, special=False, normalized=False) for w in words])
    built = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS, unk_token=UNK)
    if tools:
        built.chat_template = TINY_TOOL_TEMPLATE
    return built


def build_tiny_model(tokenizer: PreTrainedTokenizerBase, cfg: TinyModelConfig, seed: int) -> PreTrainedModel:
    """A freshly initialised Qwen3 causal LM sized for a 2-core CPU."""
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.hidden_size // cfg.num_heads,
        max_position_embeddings=cfg.max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(config)


def save_pretrained(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, directory: str | Path) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")


def check_model_path(path: str, parts: tuple[str, ...] = ("model", "tokenizer")) -> None:
    """One clear line when model.path cannot be a model, before transformers' long tracebacks.

    A path that exists, or looks like one (absolute, ./, ../, ~), is checked as a directory
    holding the `parts` asked for; anything else is taken as a hub id and left to the hub client
    and its cache."""
    local = Path(path).expanduser()
    if not (path.startswith(("/", "./", "../", "~")) or local.exists()):
        return
    if not local.is_dir():
        raise ModelError(f"model.path: {path} does not exist" if not local.exists() else f"model.path: {path} is a file, not a model directory")
    if "model" in parts and not (local / "config.json").is_file():
        raise ModelError(f"model.path: {path} has no config.json (not a model saved with save_pretrained)")
    if "tokenizer" in parts and not any((local / name).is_file() for name in TOKENIZER_FILES):
        raise ModelError(f"model.path: {path} has no tokenizer files (none of {', '.join(TOKENIZER_FILES)})")
    if "model" in parts and not any(local.glob("*.safetensors")) and not any(local.glob("*.bin")):
        raise ModelError(f"model.path: {path} has no weights (*.safetensors or *.bin)")


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def load_tokenizer(path: str, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    """AutoTokenizer by hub id or directory; a missing pad token falls back to EOS."""
    check_model_path(path, ("tokenizer",))
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as err:
        raise ModelError(f"model.path: cannot load a tokenizer from {path!r}: {_first_line(err)}") from None
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token_id is None:
            raise ModelError(f"model.path: the tokenizer of {path} has neither a pad nor an EOS token; cannot batch or stop")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def check_model_loads(path: str, trust_remote_code: bool = False) -> str:
    """What a dry run checks without loading weights: the model's config and its tokenizer load
    (by hub id through the hub client and its cache). Returns the model type; ModelError if not."""
    check_model_path(path)
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as err:
        raise ModelError(f"model.path: cannot load a model config from {path!r}: {_first_line(err)}") from None
    load_tokenizer(path, trust_remote_code)
    return config.model_type


def load_model(path: str, dtype: str = "float32", device: str = "cpu", trust_remote_code: bool = False) -> PreTrainedModel:
    """AutoModelForCausalLM by hub id or directory, in the requested dtype, on the device."""
    check_model_path(path, ("model",))
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype), trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as err:
        raise ModelError(f"model.path: cannot load a causal LM from {path!r}: {_first_line(err)}") from None
    return model.to(device)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def add_lora(model: PreTrainedModel, cfg: ModelConfig) -> PreTrainedModel:
    """Wrap the model with trainable LoRA adapters (peft); every original weight is frozen."""
    from peft import LoraConfig, get_peft_model

    targets = cfg.lora_targets[0] if cfg.lora_targets == ["all-linear"] else list(cfg.lora_targets)
    lora = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout, target_modules=targets, task_type="CAUSAL_LM")
    return get_peft_model(model, lora)


@dataclass(frozen=True)
class AdapterOffReference:
    """The KL reference of a LoRA policy: the policy itself, scored with its adapters switched off.
    The base weights are frozen, so this *is* the starting model, without a copy of its weights.
    The reference is only ever scored, by `rlvr.logprobs.completion_logprobs`, which switches the
    adapters off around the policy's own scoring path (the fp32 head and chunking included)."""

    policy: PreTrainedModel


def reference_for(policy: PreTrainedModel) -> PreTrainedModel | AdapterOffReference:
    """What the KL term compares against: adapters off for a LoRA policy, else a frozen copy."""
    if hasattr(policy, "disable_adapter") and hasattr(policy, "peft_config"):
        return AdapterOffReference(policy)
    return frozen_copy(policy)


def merged(model: PreTrainedModel) -> PreTrainedModel:
    """A plain transformers model: LoRA adapters folded into the weights (a copy; the policy is untouched)."""
    if not hasattr(model, "merge_and_unload"):
        return model
    import copy

    return copy.deepcopy(model).merge_and_unload()


def frozen_copy(model: PreTrainedModel) -> PreTrainedModel:
    """The KL reference: a copy of the policy with gradients off and dropout off."""
    import copy

    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref
