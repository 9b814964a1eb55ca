"""What rlvr knows about a model's architecture, shared by sampling (rollout/engines.py) and
scoring (logprobs.py), so that neither depends on the other: which models are the Llama family,
the transformers model under a peft wrapper, the output layer computed in fp32 under autocast,
and what a model's forward calls its KV cache.
"""

from __future__ import annotations

import functools
import inspect

import torch
from torch.nn import functional as F
from transformers import PreTrainedModel

# Causal LMs whose forward is exactly `lm_head(model(...).last_hidden_state)` over the usual
# embed / layers / norm / rotary layout: the fp32 head and the static decoding engine rely on it.
LLAMA_FAMILY = ("llama", "mistral", "qwen2", "qwen3")


def base_model(model: PreTrainedModel) -> PreTrainedModel:
    """The transformers model under a peft wrapper (whose modules carry the adapters)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def fp32_output_head(model: PreTrainedModel) -> torch.nn.Linear | None:
    """The output projection, when it should be computed in fp32 by hand: autocast is on (it would
    run the head in bf16), the head's weights are fp32 (no copy needed), and the model is one of
    the Llama family, whose causal-LM forward is exactly `lm_head(hidden)`. Log-probs then carry
    fp32 logits, as verl computes them: bf16 logits are rounded to 2^-8 of their size (0.125 at a
    logit of 30), noise that lands straight in every importance ratio and KL estimate."""
    base = base_model(model)
    if not isinstance(base, PreTrainedModel):  # not a transformers model: its own forward decides
        return None
    head = base.get_output_embeddings()
    if base.config.model_type not in LLAMA_FAMILY or type(head) is not torch.nn.Linear or head.weight.dtype != torch.float32:
        return None
    return head if torch.is_autocast_enabled(head.weight.device.type) else None


def logits_in_fp32(head: torch.nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    with torch.autocast(device_type=hidden.device.type, enabled=False):
        return F.linear(hidden.float(), head.weight, head.bias)


@functools.lru_cache(maxsize=None)
def cache_argument(model_type: type) -> str:
    """transformers 5.x names the KV cache `cache`; 4.x and many remote models `past_key_values`."""
    return "cache" if "cache" in inspect.signature(model_type.forward).parameters else "past_key_values"
