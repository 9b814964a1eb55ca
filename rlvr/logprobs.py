"""Log-probs of completion tokens: the one primitive every stage scores tokens with.

RL's update, the KL reference, SFT, evaluation and distillation call `completion_logprobs` (or,
for distillation's token-level KL, the distributions it gathers from: `completion_log_softmax`),
so they agree on positions, temperature, masking and precision. Under `run.autocast` the decoder
runs in bf16 but the output projection in fp32 (`fp32_output_head`), and backward steps out of
autocast (`backward_outside_autocast`).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F
from transformers import PreTrainedModel

from rlvr.models import AdapterOffReference

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
    if not isinstance(base, PreTrainedModel):  # e.g. the LoRA reference wrapper: its own forward decides
        return None
    head = base.get_output_embeddings()
    if base.config.model_type not in LLAMA_FAMILY or type(head) is not torch.nn.Linear or head.weight.dtype != torch.float32:
        return None
    return head if torch.is_autocast_enabled(head.weight.device.type) else None


def logits_in_fp32(head: torch.nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    with torch.autocast(device_type=hidden.device.type, enabled=False):
        return F.linear(hidden.float(), head.weight, head.bias)


def completion_log_softmax(
    model: PreTrainedModel,
    prompt_ids_BP: torch.Tensor,
    prompt_mask_BP: torch.Tensor,
    completion_ids_BT: torch.Tensor,
    completion_mask_BT: torch.Tensor,
    temperature: float = 1.0,
) -> torch.Tensor:
    """log pi(. | x, y_<t) over the vocabulary at every completion position, shape (B, T, V), fp32.

    Logits are divided by the sampling temperature so the ratio compares the distribution the
    tokens were actually drawn from. Only the last T+1 positions are projected to the vocabulary
    (`logits_to_keep`): prompt positions never need logits.
    """
    if isinstance(model, AdapterOffReference):  # the LoRA reference: the policy's own path, adapters off
        with model.policy.disable_adapter():
            return completion_log_softmax(model.policy, prompt_ids_BP, prompt_mask_BP, completion_ids_BT, completion_mask_BT, temperature)
    T = completion_ids_BT.shape[1]
    input_ids = torch.cat([prompt_ids_BP, completion_ids_BT], dim=1)
    attention = torch.cat([prompt_mask_BP, completion_mask_BT], dim=1)
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
    head = fp32_output_head(model)  # under autocast: the decoder in bf16, the logits in fp32
    if head is None:
        logits = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, logits_to_keep=T + 1).logits
    else:
        hidden = base_model(model).model(input_ids=input_ids, attention_mask=attention, position_ids=positions).last_hidden_state
        logits = logits_in_fp32(head, hidden[:, -(T + 1):])
    logits_BTV = logits[:, :-1].float() / temperature  # position t predicts completion token t
    return torch.log_softmax(logits_BTV, dim=-1)


def completion_logprobs(
    model: PreTrainedModel,
    prompt_ids_BP: torch.Tensor,
    prompt_mask_BP: torch.Tensor,
    completion_ids_BT: torch.Tensor,
    completion_mask_BT: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """log pi(y_t | x, y_<t) for every completion position, shape (B, T); with `with_entropy`
    also the entropy of pi(. | x, y_<t) at each position, (B, T), with its graph."""
    logp_BTV = completion_log_softmax(model, prompt_ids_BP, prompt_mask_BP, completion_ids_BT, completion_mask_BT, temperature)
    logp_BT = torch.gather(logp_BTV, 2, completion_ids_BT.unsqueeze(2)).squeeze(2)
    if not with_entropy:
        return logp_BT
    return logp_BT, -(logp_BTV.exp() * logp_BTV).sum(dim=-1)


def backward_outside_autocast(loss: torch.Tensor) -> None:
    """`loss.backward()` with autocast switched off. Under `run.autocast` the forwards run in bf16
    inside torch.autocast; torch recommends running backward outside it (the backward ops follow
    the dtypes the forward chose, and the weights' gradients stay in their fp32 dtype)."""
    with torch.autocast(device_type=loss.device.type, enabled=False):
        loss.backward()
