"""Cold-start SFT (stage 1 of the DeepSeek-R1 recipe): next-token loss on completion tokens only.

`sft_train` takes any iterator of (prompt, target) pairs: what the targets are is the data's
business (the lab's worked/bare mixture is `rlvr.tasks.arithmetic.sft_targets`; a user's data
trains on its own solutions, `rlvr.data.solution_targets`); rejection sampling and distillation
feed it verified completions the same way (`rlvr.commands.rft`), distillation optionally with
the teacher's token-level distribution (`sft_backward`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.algorithms import aggregate
from rlvr.batching import token_budget_batches
from rlvr.checkpoint import fault_point
from rlvr.config import SFTConfig
from rlvr.logprobs import backward_outside_autocast, completion_logprobs, completion_teacher_kl
from rlvr.metrics import PhaseBar
from rlvr.optim import new_adamw


@dataclass(frozen=True)
class TokenTarget:
    """A target given as tokens, some of them context the model reads but is not trained to write: a
    conversation's tool results between its turns (rollout.multiturn.ToolRenderer.sft_pair)."""

    ids: list[int]
    trained: list[bool]


def encode_targets(tokenizer: PreTrainedTokenizerBase, targets: list[str]) -> list[list[int]]:
    """Token ids of each target followed by EOS (the model must learn to stop)."""
    return [ids + [tokenizer.eos_token_id] for ids in tokenizer(targets, add_special_tokens=False)["input_ids"]]


def _encoded(tokenizer: PreTrainedTokenizerBase, items: list, targets: bool) -> list:
    """Strings encoded in one call; token lists (and TokenTargets) as they are."""
    texts = [i for i, item in enumerate(items) if isinstance(item, str)]
    out = list(items)
    if texts:
        encoded = encode_targets(tokenizer, [items[i] for i in texts]) if targets else \
            tokenizer([items[i] for i in texts], add_special_tokens=False)["input_ids"]
        for i, ids in zip(texts, encoded):
            out[i] = TokenTarget(ids, [True] * len(ids)) if targets else ids
    return out


def pad_right(seqs: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    return ids.to(device), mask.to(device)


def joined_rows(prompt_ids: list[list[int]], target_ids: list[list[int]], pad_id: int, device: torch.device,
                trained: list[list[bool]] | None = None):
    """Each row's prompt and target written as one sequence, right-padded to the longest:
    (ids, attention mask, target mask), each (B, L). One row is as wide as its prompt plus its
    target, so a short prompt is not padded to the longest prompt (as a left-padded prompt block
    followed by a target block would be). `trained`: which target tokens are scored (default all)."""
    ids, mask = pad_right([p + t for p, t in zip(prompt_ids, target_ids)], pad_id, device)
    target = torch.zeros_like(mask, dtype=torch.bool)
    for row, (p, t) in enumerate(zip(prompt_ids, target_ids)):
        if trained is None:
            target[row, len(p) : len(p) + len(t)] = True
        else:
            target[row, len(p) : len(p) + len(t)] = torch.tensor(trained[row], dtype=torch.bool)
    return ids, mask, target


def warmup_cosine(warmup: int, total: int):
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


def sft_backward(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[str | list[int]], targets: list[str | TokenTarget],
    micro_batch_size: int, teacher: PreTrainedModel | None = None, kl_coef: float = 0.0, micro_batch_tokens: int = 0,
) -> float:
    """Accumulate the gradient of the batch's mean loss per target token; returns that loss.

    The loss of a token is its NLL, plus, with a `teacher` (distillation), `kl_coef` times
    KL(teacher || student) over the vocabulary at that position: the student matches the
    teacher's whole distribution along the trace, not only the token the teacher sampled.

    Rows (prompt + target, one right-padded sequence each) are sorted by length and cut into
    micro-batches of at most `micro_batch_size` rows and, with `micro_batch_tokens`, at most that
    many positions (rows x the longest), so short bare answers share a forward by the dozen and
    are not padded to the longest worked solution. The whole batch's token count normalises every
    micro-batch, so the gradient is exactly that of the whole batch.
    """
    device = next(model.parameters()).device
    prompt_ids = _encoded(tokenizer, prompts, targets=False)  # the ids encode_prompts gives, in one call
    if any(not ids for ids in prompt_ids):
        raise ValueError("a prompt encodes to zero tokens")
    encoded = _encoded(tokenizer, targets, targets=True)
    target_ids, trained = [t.ids for t in encoded], [t.trained for t in encoded]
    n_tokens = sum(sum(t) for t in trained)
    lengths = torch.tensor([len(p) + len(t) for p, t in zip(prompt_ids, target_ids)])
    order = torch.argsort(lengths, stable=True)
    total = 0.0
    for rows in token_budget_batches(order, lengths, micro_batch_size, micro_batch_tokens):
        rows = rows.tolist()
        ids, mask, target = joined_rows([prompt_ids[i] for i in rows], [target_ids[i] for i in rows], tokenizer.pad_token_id, device,
                                        [trained[i] for i in rows])
        # The first token plays the prompt; every later position is scored where it is a target token.
        args = (ids[:, :1], mask[:, :1], ids[:, 1:], mask[:, 1:])
        scored = target[:, 1:]
        if teacher is None or kl_coef == 0.0:
            loss_BT = -completion_logprobs(model, *args, score_mask_BT=scored)
        else:
            nll_BT, kl_BT = completion_teacher_kl(model, teacher, *args, score_mask_BT=scored)
            loss_BT = nll_BT + kl_coef * kl_BT
        loss = aggregate(loss_BT, scored.long(), "token_mean", normalizer=n_tokens)
        backward_outside_autocast(loss)
        total += loss.item()
    return total


@dataclass
class SFTProgress:
    """Where an SFT run stands: the steps done and the optimizer and schedule after them (with the
    weights, what a checkpoint needs to continue SFT exactly)."""

    step: int
    optimizer: dict
    scheduler: dict


def sft_train(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    pairs: Iterator[tuple[str, str]],
    cfg: SFTConfig,
    bar: PhaseBar,
    *,
    resume: SFTProgress | None = None,
    checkpoint_every: int = 0,
    save: Callable[[SFTProgress], None] | None = None,
    log: Callable[[dict], None] | None = None,
    teacher: PreTrainedModel | None = None,
    kl_coef: float = 0.0,
) -> list[float]:
    """Train in place for cfg.steps steps of cfg.batch_size (formatted prompt, target) pairs from
    `pairs`; returns the loss of every step it ran (mean loss per target token).

    `save` is called every `checkpoint_every` steps (not after the last) with the progress so far;
    `resume` continues from such a checkpoint (the caller has loaded its weights): the pairs it
    consumed are skipped, so the steps that follow are those of an uninterrupted run. `log` gets
    one record per step. `teacher` and `kl_coef`: see `sft_backward`."""
    optimizer = new_adamw(list(model.parameters()), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(cfg.warmup_steps, cfg.steps))
    start = 0
    if resume is not None:
        optimizer.load_state_dict(resume.optimizer)
        scheduler.load_state_dict(resume.scheduler)
        start = resume.step
        for _ in itertools.islice(pairs, start * cfg.batch_size):  # the draws the finished steps made
            pass
        for _ in range(start):
            bar.advance()
    model.train()
    losses = []
    for step in range(start + 1, cfg.steps + 1):
        batch = list(itertools.islice(pairs, cfg.batch_size))
        if len(batch) < cfg.batch_size:
            raise ValueError(f"sft: the (prompt, target) pairs ran out after {step - 1} steps")
        optimizer.zero_grad(set_to_none=True)
        lr = scheduler.get_last_lr()[0]
        loss = sft_backward(model, tokenizer, [p for p, _ in batch], [t for _, t in batch], cfg.micro_batch_size, teacher, kl_coef,
                            cfg.micro_batch_tokens)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss)
        if log is not None:
            log({"step": step, "loss/sft": loss, "lr": lr})
        bar.advance(f"loss {loss:.3f}")
        fault_point("sft_step")
        if save is not None and checkpoint_every and step % checkpoint_every == 0 and step < cfg.steps:
            save(SFTProgress(step, optimizer.state_dict(), scheduler.state_dict()))
    return losses
