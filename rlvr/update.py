"""(5) The update: micro-batched backward with exact accumulation, then the optimizer step.

Tokens are scored by `rlvr.logprobs.completion_logprobs`, shared with SFT and evaluation.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from rlvr.algorithms import loss_normalizer, masked_mean, policy_loss, sequence_kl, truncated_is_weights
from rlvr.config import AlgoConfig, Config
from rlvr.logprobs import backward_outside_autocast, completion_logprobs
from rlvr.rollout import Rollouts


def micro_batches(rows: torch.Tensor, size: int) -> list[torch.Tensor]:
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def token_budget_batches(rows: torch.Tensor, seq_lengths: torch.Tensor, max_rows: int, max_tokens: int) -> list[torch.Tensor]:
    """Consecutive runs of `rows` (already sorted by length) whose padded size, rows x longest
    sequence, stays within `max_tokens` (and `max_rows`); a row longer than the budget goes alone.
    Short completions then share a micro-batch by the dozen while long ones are not padded together."""
    if max_tokens <= 0:
        return micro_batches(rows, max_rows)
    out, current, longest = [], [], 0
    lengths = seq_lengths.tolist()  # one device sync, not one per row
    for row in rows.tolist():
        length = lengths[row]
        if current and ((len(current) + 1) * max(longest, length) > max_tokens or len(current) >= max_rows):
            out.append(current)
            current, longest = [], 0
        current.append(row)
        longest = max(longest, length)
    if current:
        out.append(current)
    return [torch.tensor(c, dtype=rows.dtype, device=rows.device) for c in out]


def length_buckets(rows: torch.Tensor, prompt_len_B: torch.Tensor, completion_len_B: torch.Tensor, overhead_tokens: int) -> list[torch.Tensor]:
    """Split `rows` (sorted by completion length) into consecutive buckets, each one forward,
    minimising the positions computed, sum over buckets of rows x (longest prompt + longest
    completion) (what `Rollouts.select` pads a bucket to), plus `overhead_tokens` per bucket.

    A forward has a fixed cost (kernel launches, per-op dispatch) that is worth some number of
    token positions; below that, padding is cheaper than another forward. Exact by dynamic
    programming over split points, O(n^2) for n rows.
    """
    n = len(rows)
    if overhead_tokens <= 0 or n <= 1:  # 0 = bucketing off
        return [rows]
    P, T = prompt_len_B[rows].tolist(), completion_len_B[rows].tolist()
    best = [0.0] + [float("inf")] * n  # best[j]: cheapest split of rows[:j]
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        longest_p = longest_t = 0
        for i in range(j - 1, -1, -1):  # the last bucket is rows[i:j]
            longest_p, longest_t = max(longest_p, P[i]), max(longest_t, T[i])
            cost = best[i] + (j - i) * (longest_p + longest_t) + overhead_tokens
            if cost < best[j]:
                best[j], cut[j] = cost, i
    buckets, j = [], n
    while j > 0:
        buckets.append(rows[cut[j] : j])
        j = cut[j]
    return buckets[::-1]


def frozen_logprobs(model: PreTrainedModel, chunks: list[Rollouts], temperature: float) -> list[torch.Tensor]:
    """Log-probs of each chunk's completions under `model`, without a graph."""
    with torch.no_grad():
        return [
            completion_logprobs(model, c.prompt_ids_BP, c.prompt_mask_BP, c.completion_ids_BT, c.completion_mask_BT, temperature)
            for c in chunks
        ]


def sequence_kl_to_reference(
    policy: PreTrainedModel,
    reference: PreTrainedModel,
    rollouts: Rollouts,
    *,
    estimator: str,
    temperature: float,
    micro_batch_size: int,
) -> torch.Tensor:
    """(B,) summed per-token KL(policy || reference) of each sampled completion, no graph: the
    penalty KL-in-reward subtracts (times beta) from each reward before advantages."""
    rows = torch.arange(rollouts.completion_ids_BT.shape[0], device=rollouts.completion_ids_BT.device)
    kl_B = torch.zeros(len(rows), device=rows.device)
    for part in micro_batches(rows, micro_batch_size):
        chunk = rollouts.select(part)
        (logp,), (ref,) = frozen_logprobs(policy, [chunk], temperature), frozen_logprobs(reference, [chunk], temperature)
        kl_B[part] = sequence_kl(logp, ref, chunk.completion_mask_BT, estimator)
    return kl_B


@dataclass(frozen=True)
class UpdateSettings:
    """Everything the update needs besides the batch: the algorithm's loss settings and the
    batch-shaping knobs, built once per run (`from_config`) instead of passed one by one."""

    surrogate: str
    ratio_level: str
    clip_low: float
    clip_high: float
    dual_clip: float | None
    aggregation: str
    kl_coef: float  # beta when the KL term is in the loss (algo.kl_in = "loss"), else 0
    kl_estimator: str
    entropy_coef: float
    num_iterations: int
    reuse_sampling_logp: bool
    temperature: float
    max_new_tokens: int
    micro_batch_size: int
    max_grad_norm: float
    micro_batch_tokens: int = 0
    bucket_overhead_tokens: int = 0
    tis_cap: float = 0.0  # truncated importance sampling against the sampler's log-probs (0 = off)
    tis_level: str = "token"

    @classmethod
    def from_algo(cls, algo: AlgoConfig, *, temperature: float, max_new_tokens: int, micro_batch_size: int,
                  max_grad_norm: float, micro_batch_tokens: int = 0, bucket_overhead_tokens: int = 0) -> UpdateSettings:
        return cls(
            surrogate=algo.surrogate, ratio_level=algo.ratio_level, clip_low=algo.clip_low, clip_high=algo.clip_high, dual_clip=algo.dual_clip or None,
            aggregation=algo.aggregation, kl_coef=algo.beta if algo.kl_in == "loss" else 0.0, kl_estimator=algo.kl_estimator,
            entropy_coef=algo.entropy_coef, num_iterations=algo.num_iterations, reuse_sampling_logp=algo.reuse_sampling_logp,
            temperature=temperature, max_new_tokens=max_new_tokens, micro_batch_size=micro_batch_size,
            max_grad_norm=max_grad_norm, micro_batch_tokens=micro_batch_tokens, bucket_overhead_tokens=bucket_overhead_tokens,
            tis_cap=algo.tis_cap, tis_level=algo.tis_level,
        )

    @classmethod
    def from_config(cls, cfg: Config) -> UpdateSettings:
        return cls.from_algo(
            cfg.algo, temperature=cfg.rollout.temperature, max_new_tokens=cfg.rollout.max_new_tokens,
            micro_batch_size=cfg.train.micro_batch_size, max_grad_norm=cfg.train.max_grad_norm,
            micro_batch_tokens=cfg.train.micro_batch_tokens, bucket_overhead_tokens=cfg.train.bucket_overhead_tokens,
        )


def rl_update(
    policy: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    rollouts: Rollouts,
    advantages_B: torch.Tensor,
    settings: UpdateSettings,
    *,
    reference: PreTrainedModel | None = None,
    include_B: torch.Tensor | None = None,
) -> dict[str, float]:
    """num_iterations optimizer steps on one rollout batch; returns averaged metrics.

    `include_B` (bool, B) leaves completions out of the loss entirely, numerator and
    denominator: missing rewards, or truncated completions under `algo.mask_truncated`.

    Exactness: the aggregation's denominator is computed once over the whole batch and shared by
    every micro-batch, so accumulated gradients equal the whole-batch gradient.

    Work skipped without changing the result: when the loss has no KL and no entropy term, a
    completion with advantage 0 contributes exactly zero loss and gradient, so it is not
    forwarded at all (it still counts in the denominator). In a typical step a third to a half
    of the groups are all-equal. A batch with nothing left to forward takes no optimizer or
    scheduler step, a deliberate choice: stepping on a zero gradient would still move weights
    through AdamW's momentum and weight decay, and warmup should count real updates. A pass whose
    loss or gradient is not finite is skipped the same way.
    """
    B = len(advantages_B)
    include_B = torch.ones(B, dtype=torch.bool, device=advantages_B.device) if include_B is None else include_B.bool()
    include_B = include_B & torch.isfinite(advantages_B)
    mask_BT = rollouts.completion_mask_BT * include_B.unsqueeze(1)
    st = settings
    normalizer = loss_normalizer(mask_BT, st.aggregation, st.max_new_tokens)
    kl_coef = st.kl_coef
    active = torch.arange(B, device=advantages_B.device)[include_B]
    if kl_coef == 0.0 and st.entropy_coef == 0.0:
        active = active[advantages_B[active] != 0]
    # Micro-batches of similar lengths waste less compute on padding (the result is unchanged:
    # every micro-batch shares the whole batch's normaliser).
    prompt_len_B, completion_len_B = rollouts.prompt_mask_BP.sum(dim=1), rollouts.lengths_B
    active = active[torch.argsort(completion_len_B[active], stable=True)]
    parts = token_budget_batches(active, prompt_len_B + completion_len_B, st.micro_batch_size, st.micro_batch_tokens)
    if st.bucket_overhead_tokens > 0:
        parts = [b for part in parts for b in length_buckets(part, prompt_len_B, completion_len_B, st.bucket_overhead_tokens)]
    chunks = [rollouts.select(rows) for rows in parts]
    adv_chunks = [advantages_B[rows] for rows in parts]

    # With one pass the policy *is* the sampling policy: old log-probs are the detached current
    # ones and need no extra forward. With more passes they are frozen before the first step.
    # The sampler's own log-probs can stand in for that forward (`algo.reuse_sampling_logp`): they
    # come from the same weights, differing only by KV-cache numerics (rollout/logp_mismatch_max).
    t0 = time.perf_counter()
    if st.num_iterations > 1 and st.reuse_sampling_logp and all(c.sample_logp_BT is not None for c in chunks):
        old = [c.sample_logp_BT for c in chunks]
    else:
        old = frozen_logprobs(policy, chunks, st.temperature) if st.num_iterations > 1 else None
    ref = frozen_logprobs(reference, chunks, st.temperature) if reference is not None and kl_coef > 0 else None
    if st.tis_cap and any(c.sample_logp_BT is None for c in chunks):
        raise ValueError("algo.tis_cap needs the sampler's log-probs (Rollouts.sample_logp_BT); these rollouts have none")
    tis: list[torch.Tensor | None] = [None] * len(chunks)  # the weights, once per chunk: they do not change across passes
    seconds = {"time/frozen_forward": time.perf_counter() - t0, "time/forward": 0.0, "time/backward": 0.0, "time/optimizer": 0.0}

    entropy_bonus = st.entropy_coef != 0.0
    skipped = 0
    sums: dict[str, float] = defaultdict(float)
    tokens_seen = 0
    mismatch_sum, mismatch_max = 0.0, 0.0
    tis_sums: dict[str, float] = defaultdict(float)
    # The optimizer's parameters, not policy.parameters(): frozen (LoRA base) weights may hold stale grads.
    trainable = [p for group in optimizer.param_groups for p in group["params"]]
    for pass_index in range(st.num_iterations):
        optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), device=advantages_B.device)
        for i, chunk in enumerate(chunks):
            t0 = time.perf_counter()
            # The policy's entropy is computed only for the bonus: the step's entropy is already
            # logged from sampling (rollout/entropy), and a (B, T, V) extra costs memory on real vocabularies.
            scored = completion_logprobs(
                policy, chunk.prompt_ids_BP, chunk.prompt_mask_BP, chunk.completion_ids_BT, chunk.completion_mask_BT,
                st.temperature, with_entropy=entropy_bonus,
            )
            logp, entropy = scored if entropy_bonus else (scored, None)
            old_logp = old[i] if old is not None else logp.detach()
            if st.tis_cap and tis[i] is None:
                tis[i], capped = truncated_is_weights(old_logp, chunk.sample_logp_BT, chunk.completion_mask_BT, st.tis_cap, st.tis_level)
                m = chunk.completion_mask_BT.bool() & torch.isfinite(adv_chunks[i]).unsqueeze(1)
                tis_sums["loss/tis_weight_mean"] += float(torch.where(m, tis[i], 0.0).sum())
                tis_sums["loss/tis_capped_frac"] += float((capped & m).sum())
                tis_sums["tokens"] += float(m.sum())
            loss, metrics = policy_loss(
                logp,
                old_logp,
                adv_chunks[i],
                chunk.completion_mask_BT,
                surrogate=st.surrogate,
                ratio_level=st.ratio_level,
                clip_low=st.clip_low,
                clip_high=st.clip_high,
                dual_clip=st.dual_clip,
                aggregation=st.aggregation,
                max_completion_length=st.max_new_tokens,
                ref_logp=ref[i] if ref is not None else None,
                kl_coef=kl_coef,
                kl_estimator=st.kl_estimator,
                entropy=entropy,
                entropy_coef=st.entropy_coef,
                normalizer=normalizer,
                is_weights=tis[i],
            )
            t1 = time.perf_counter()
            backward_outside_autocast(loss)
            seconds["time/forward"] += t1 - t0
            seconds["time/backward"] += time.perf_counter() - t1
            total += loss.detach()
            n_tok = int(chunk.completion_mask_BT.sum())
            tokens_seen += n_tok
            for name, value in metrics.items():
                sums[name] += float(value) * n_tok
            sums["loss/logp_mean"] += float(masked_mean(logp.detach(), chunk.completion_mask_BT)) * n_tok
            # On the first pass the policy is the sampler's weights, up to numerics, unless the rollouts
            # are stale (Ray async mode): then the gap includes the updates since they were sampled.
            if pass_index == 0 and chunk.sample_logp_BT is not None:
                gap = torch.where(chunk.completion_mask_BT.bool(), (logp.detach() - chunk.sample_logp_BT).abs(), 0.0)
                mismatch_sum, mismatch_max = mismatch_sum + float(gap.sum()), max(mismatch_max, float(gap.max()))
        if chunks:  # max_norm=inf measures the norm without clipping
            t0 = time.perf_counter()
            grad_norm = torch.nn.utils.clip_grad_norm_(trainable, st.max_grad_norm or float("inf"))
            if torch.isfinite(grad_norm) and torch.isfinite(total):
                optimizer.step()
                scheduler.step()
            else:  # one NaN would poison every weight through Adam's moments: skip, count, let the loop decide
                optimizer.zero_grad(set_to_none=True)
                skipped += 1
            sums["loss/grad_norm"] += float(grad_norm)
            seconds["time/optimizer"] += time.perf_counter() - t0
        sums["loss/policy"] += float(total)

    out = {name: value / max(tokens_seen, 1) for name, value in sums.items() if name not in ("loss/policy", "loss/grad_norm")}
    out["loss/policy"] = sums["loss/policy"] / st.num_iterations
    out["loss/grad_norm"] = sums["loss/grad_norm"] / st.num_iterations
    out["loss/active_frac"] = len(active) / max(B, 1)
    out["loss/excluded"] = int((~include_B).sum())
    out["loss/skipped_nonfinite"] = skipped  # optimizer passes skipped for a NaN/inf loss or gradient
    out["loss/lr"] = scheduler.get_last_lr()[0]
    first_pass_tokens = tokens_seen / st.num_iterations
    out["rollout/logp_mismatch_mean"] = mismatch_sum / max(first_pass_tokens, 1)
    out["rollout/logp_mismatch_max"] = mismatch_max
    if st.tis_cap:  # over the tokens in the loss, once (the weights are the same on every pass)
        out["loss/tis_weight_mean"] = tis_sums["loss/tis_weight_mean"] / max(tis_sums["tokens"], 1)
        out["loss/tis_capped_frac"] = tis_sums["loss/tis_capped_frac"] / max(tis_sums["tokens"], 1)
    out["loss/forwards"] = len(chunks)  # micro-batches (length buckets) per pass
    # Wall-clock split of the update (the reference / old-log-prob forwards, the policy's forward
    # with the loss, backward, clipping + optimizer step); on a GPU these time kernel launches
    # unless the device is synchronised.
    out.update(seconds)
    return out
