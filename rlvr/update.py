"""(5) The update: completion log-probs, micro-batched backward with exact accumulation, step.

`completion_logprobs` is shared by RL, SFT and evaluation, so every stage scores tokens the same
way (same positions, same temperature, same masking).
"""

from __future__ import annotations

from collections import defaultdict

import torch
from transformers import PreTrainedModel

from rlvr.algorithms import loss_normalizer, masked_mean, policy_loss
from rlvr.config import AlgoConfig
from rlvr.rollout import Rollouts


def completion_logprobs(
    model: PreTrainedModel,
    prompt_ids_BP: torch.Tensor,
    prompt_mask_BP: torch.Tensor,
    completion_ids_BT: torch.Tensor,
    completion_mask_BT: torch.Tensor,
    temperature: float = 1.0,
) -> torch.Tensor:
    """log pi(y_t | x, y_<t) for every completion position, shape (B, T).

    Logits are divided by the sampling temperature so the ratio compares the distribution the
    tokens were actually drawn from. Only the last T+1 positions are projected to the vocabulary
    (`logits_to_keep`): prompt positions never need logits.
    """
    T = completion_ids_BT.shape[1]
    input_ids = torch.cat([prompt_ids_BP, completion_ids_BT], dim=1)
    attention = torch.cat([prompt_mask_BP, completion_mask_BT], dim=1)
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, logits_to_keep=T + 1).logits
    logits_BTV = logits[:, :-1].float() / temperature  # position t predicts completion token t
    return torch.gather(torch.log_softmax(logits_BTV, dim=-1), 2, completion_ids_BT.unsqueeze(2)).squeeze(2)


def micro_batches(rows: torch.Tensor, size: int) -> list[torch.Tensor]:
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def rl_update(
    policy: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    rollouts: Rollouts,
    advantages_B: torch.Tensor,
    algo: AlgoConfig,
    *,
    reference: PreTrainedModel | None,
    temperature: float,
    max_new_tokens: int,
    micro_batch_size: int,
    max_grad_norm: float,
) -> dict[str, float]:
    """num_iterations optimizer steps on one rollout batch; returns averaged metrics.

    Exactness: the aggregation's denominator is computed once over the whole batch and shared by
    every micro-batch, so accumulated gradients equal the whole-batch gradient.

    Work skipped without changing the result: when beta == 0, a completion with advantage 0
    contributes exactly zero loss and gradient, so it is not forwarded at all (it still counts in
    the denominator). In a typical step a third to a half of the groups are all-equal.
    """
    mask_BT = rollouts.completion_mask_BT
    normalizer = loss_normalizer(mask_BT, algo.aggregation, max_new_tokens)
    active = torch.arange(len(advantages_B), device=advantages_B.device)
    if algo.beta == 0.0:
        active = active[advantages_B != 0]
    # Micro-batches of similar lengths waste less compute on padding (the result is unchanged:
    # every micro-batch shares the whole batch's normaliser).
    active = active[torch.argsort(rollouts.lengths_B[active], stable=True)]
    chunks = [rollouts.select(rows) for rows in micro_batches(active, micro_batch_size)]
    adv_chunks = [advantages_B[rows] for rows in micro_batches(active, micro_batch_size)]

    def frozen_logprobs(model: PreTrainedModel) -> list[torch.Tensor]:
        with torch.no_grad():
            return [
                completion_logprobs(model, c.prompt_ids_BP, c.prompt_mask_BP, c.completion_ids_BT, c.completion_mask_BT, temperature)
                for c in chunks
            ]

    # With one pass the policy *is* the sampling policy: old log-probs are the detached current
    # ones and need no extra forward. With more passes they are frozen before the first step.
    old = frozen_logprobs(policy) if algo.num_iterations > 1 else None
    ref = frozen_logprobs(reference) if reference is not None and algo.beta > 0 else None

    sums: dict[str, float] = defaultdict(float)
    tokens_seen = 0
    for _ in range(algo.num_iterations):
        optimizer.zero_grad(set_to_none=True)
        total = torch.zeros(())
        for i, chunk in enumerate(chunks):
            logp = completion_logprobs(
                policy, chunk.prompt_ids_BP, chunk.prompt_mask_BP, chunk.completion_ids_BT, chunk.completion_mask_BT, temperature
            )
            loss, metrics = policy_loss(
                logp,
                old[i] if old is not None else logp.detach(),
                adv_chunks[i],
                chunk.completion_mask_BT,
                clip_low=algo.clip_low,
                clip_high=algo.clip_high,
                aggregation=algo.aggregation,
                max_completion_length=max_new_tokens,
                ref_logp=ref[i] if ref is not None else None,
                kl_coef=algo.beta,
                kl_estimator=algo.kl_estimator,
                normalizer=normalizer,
            )
            loss.backward()
            total += loss.detach()
            n_tok = int(chunk.completion_mask_BT.sum())
            tokens_seen += n_tok
            for name, value in metrics.items():
                sums[name] += float(value) * n_tok
            sums["loss/logp_mean"] += float(masked_mean(logp.detach(), chunk.completion_mask_BT)) * n_tok
        if chunks:  # max_norm=inf measures the norm without clipping
            grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm or float("inf"))
            optimizer.step()
            sums["loss/grad_norm"] += float(grad_norm)
            scheduler.step()
        sums["loss/policy"] += float(total)

    out = {name: value / max(tokens_seen, 1) for name, value in sums.items() if name not in ("loss/policy", "loss/grad_norm")}
    out["loss/policy"] = sums["loss/policy"] / algo.num_iterations
    out["loss/grad_norm"] = sums["loss/grad_norm"] / algo.num_iterations
    out["loss/active_frac"] = len(active) / max(len(advantages_B), 1)
    out["loss/lr"] = scheduler.get_last_lr()[0]
    return out
