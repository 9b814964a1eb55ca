"""Cold-start SFT (stage 1 of the DeepSeek-R1 recipe): next-token loss on completion tokens only.

`sft_train` takes any iterator of (prompt, target) pairs: what the targets are is the data's
business (the lab's worked/bare mixture is `rlvr.tasks.arithmetic.sft_targets`; a user's data
trains on its own solutions, `rlvr.data.solution_targets`). A future rejection-sampling or
distillation stage feeds it verified completions the same way.
"""

from __future__ import annotations

import itertools
import math
from typing import Iterator

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.algorithms import aggregate
from rlvr.checkpoint import fault_point
from rlvr.config import SFTConfig
from rlvr.metrics import PhaseBar
from rlvr.rollout import encode_prompts
from rlvr.logprobs import backward_outside_autocast, completion_logprobs


def encode_targets(tokenizer: PreTrainedTokenizerBase, targets: list[str]) -> list[list[int]]:
    """Token ids of each target followed by EOS (the model must learn to stop)."""
    return [tokenizer.encode(t, add_special_tokens=False) + [tokenizer.eos_token_id] for t in targets]


def pad_right(seqs: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    return ids.to(device), mask.to(device)


def warmup_cosine(warmup: int, total: int):
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


def sft_backward(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[str], targets: list[str], micro_batch_size: int
) -> float:
    """Accumulate the gradient of the batch's mean NLL per target token; returns that loss.

    Rows are sorted by length and cut into micro-batches, so short (bare) targets are not padded
    to the longest worked solution; the whole batch's token count normalises every micro-batch,
    so the gradient is exactly that of the whole batch.
    """
    device = next(model.parameters()).device
    target_ids = encode_targets(tokenizer, targets)
    n_tokens = sum(len(ids) for ids in target_ids)
    order = sorted(range(len(prompts)), key=lambda i: len(target_ids[i]))
    total = 0.0
    for start in range(0, len(order), micro_batch_size):
        rows = order[start : start + micro_batch_size]
        prompt_ids, prompt_mask = encode_prompts(tokenizer, [prompts[i] for i in rows], device)
        ids_BT, mask_BT = pad_right([target_ids[i] for i in rows], tokenizer.pad_token_id, device)
        logp_BT = completion_logprobs(model, prompt_ids, prompt_mask, ids_BT, mask_BT)
        loss = aggregate(-logp_BT, mask_BT, "token_mean", normalizer=n_tokens)
        backward_outside_autocast(loss)
        total += loss.item()
    return total


def sft_train(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    pairs: Iterator[tuple[str, str]],
    cfg: SFTConfig,
    bar: PhaseBar,
) -> list[float]:
    """Train in place for cfg.steps steps of cfg.batch_size (formatted prompt, target) pairs from
    `pairs`; returns the loss of every step (mean NLL per target token)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(cfg.warmup_steps, cfg.steps))
    model.train()
    losses = []
    for _ in range(cfg.steps):
        batch = list(itertools.islice(pairs, cfg.batch_size))
        if len(batch) < cfg.batch_size:
            raise ValueError(f"sft: the (prompt, target) pairs ran out after {len(losses)} steps")
        optimizer.zero_grad(set_to_none=True)
        loss = sft_backward(model, tokenizer, [p for p, _ in batch], [t for _, t in batch], micro_batch_size=cfg.micro_batch_size)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss)
        bar.advance(f"loss {losses[-1]:.3f}")
        fault_point("sft_step")
    return losses
