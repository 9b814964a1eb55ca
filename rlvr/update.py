"""(5) The update: micro-batched backward with exact accumulation, then the optimizer step.

Tokens are scored by `rlvr.logprobs.completion_logprobs`, shared with SFT and evaluation.
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from rlvr.algorithms import (LossSettings, distillation_advantages, entropy_threshold, high_entropy_mask, loss_normalizer, masked_mean, off_policy_sequence_mask,
                             policy_loss, sequence_kl, truncated_is_weights)
from rlvr.batching import micro_batches, token_budget_batches
from rlvr.config import AlgoConfig, Config
from rlvr.logprobs import backward_outside_autocast, completion_logprobs
from rlvr.rollout import Rollouts


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


def chunk_logprobs(model: PreTrainedModel, chunk: Rollouts, temperature: float, *,
                   with_entropy: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """(B, T) log-probs of the chunk's completions under `model` (and the per-token entropy when
    asked): the one place the update scores tokens. `model` is a transformers model, a LoRA
    policy's `AdapterOffReference`, or anything with a `score_chunk(chunk, temperature,
    with_entropy)` method: a learner rank's FSDP-sharded model, which must be called through its
    root module so that FSDP gathers the parameters (rlvr/distributed/learner_rank.py)."""
    score_chunk = getattr(model, "score_chunk", None)
    if score_chunk is not None:
        return score_chunk(chunk, temperature, with_entropy)
    # A multi-turn row attends to its tool results but is scored on the tokens its policy sampled.
    return completion_logprobs(model, chunk.prompt_ids_BP, chunk.prompt_mask_BP, chunk.completion_ids_BT, chunk.attention_mask_BT,
                               temperature, with_entropy=with_entropy,
                               score_mask_BT=chunk.completion_mask_BT if chunk.context_mask_BT is not None else None)


def frozen_logprobs(model: PreTrainedModel, chunks: list[Rollouts], temperature: float) -> list[torch.Tensor]:
    """Log-probs of each chunk's completions under `model`, without a graph."""
    with torch.no_grad():
        return [chunk_logprobs(model, c, temperature) for c in chunks]


def policy_logprobs(policy: PreTrainedModel, chunk: Rollouts, temperature: float, *,
                    with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(B, T) log-probs of the chunk's completions under `policy`, with their graph, and the
    per-token entropy (with its graph) when asked for, else None."""
    scored = chunk_logprobs(policy, chunk, temperature, with_entropy=with_entropy)
    return scored if with_entropy else (scored, None)


def chunk_sequence_kl(policy: PreTrainedModel, reference: PreTrainedModel, chunk: Rollouts, *, estimator: str,
                      temperature: float) -> torch.Tensor:
    """(B,) summed per-token KL(policy || reference) of one micro-batch, no graph."""
    (logp,), (ref,) = frozen_logprobs(policy, [chunk], temperature), frozen_logprobs(reference, [chunk], temperature)
    return sequence_kl(logp, ref, chunk.completion_mask_BT, estimator)


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
        kl_B[part] = chunk_sequence_kl(policy, reference, rollouts.select(part), estimator=estimator, temperature=temperature)
    return kl_B


@dataclass(frozen=True)
class UpdateSettings:
    """Everything the update needs besides the batch: the loss's settings and the batch-shaping
    knobs, built once per run (`from_config`) instead of passed one by one."""

    loss: LossSettings
    num_iterations: int
    reuse_sampling_logp: bool
    temperature: float
    micro_batch_size: int
    max_grad_norm: float
    micro_batch_tokens: int = 0
    bucket_overhead_tokens: int = 0
    tis_cap: float = 0.0  # truncated importance sampling against the sampler's log-probs (0 = off)
    tis_level: str = "token"
    tis_mode: str = "truncate"  # or "mask": a weight outside [tis_floor, tis_cap] is 0
    tis_floor: float = 0.0
    off_policy_mask: float = 0.0  # DeepSeek-V3.2's off-policy sequence masking threshold (0 = off)
    top_entropy_quantile: float = 1.0  # train on the batch's top share of tokens by entropy (1 = every token)
    measure_entropy: bool = False  # compute the policy's entropy (loss/entropy) even with no bonus: adaptive entropy control reads it
    distill_coef: float = 0.0  # on-policy distillation (distill.on_policy_coef): the teacher's per-token term; 0 = off

    @classmethod
    def from_algo(cls, algo: AlgoConfig, *, temperature: float, max_new_tokens: int, micro_batch_size: int,
                  max_grad_norm: float, micro_batch_tokens: int = 0, bucket_overhead_tokens: int = 0) -> UpdateSettings:
        loss = LossSettings(
            surrogate=algo.surrogate, ratio_level=algo.ratio_level, clip_low=algo.clip_low, clip_high=algo.clip_high,
            dual_clip=algo.dual_clip or None, aggregation=algo.aggregation, max_completion_length=max_new_tokens,
            kl_coef=algo.beta if algo.kl_in == "loss" else 0.0,  # with KL-in-reward, beta acts on the rewards instead
            kl_estimator=algo.kl_estimator, entropy_coef=algo.entropy_coef,
        )
        return cls(
            loss=loss, num_iterations=algo.num_iterations, reuse_sampling_logp=algo.reuse_sampling_logp, temperature=temperature,
            micro_batch_size=micro_batch_size, max_grad_norm=max_grad_norm, micro_batch_tokens=micro_batch_tokens,
            bucket_overhead_tokens=bucket_overhead_tokens, tis_cap=algo.tis_cap, tis_level=algo.tis_level, tis_mode=algo.tis_mode,
            tis_floor=algo.tis_floor, off_policy_mask=algo.off_policy_mask, top_entropy_quantile=algo.top_entropy_quantile,
        )

    @classmethod
    def from_config(cls, cfg: Config) -> UpdateSettings:
        settings = cls.from_algo(
            cfg.algo, temperature=cfg.rollout.temperature, max_new_tokens=cfg.rollout.max_new_tokens,
            micro_batch_size=cfg.train.micro_batch_size, max_grad_norm=cfg.train.max_grad_norm,
            micro_batch_tokens=cfg.train.micro_batch_tokens, bucket_overhead_tokens=cfg.train.bucket_overhead_tokens,
        )
        return dataclasses.replace(settings, distill_coef=cfg.distill.on_policy_coef) if cfg.distill.on_policy_coef else settings


@dataclass(frozen=True)
class MicroBatchPlan:
    """How one rollout batch of B completions goes through the update."""

    include_B: torch.Tensor  # bool (B,): the completions in the loss, numerator and denominator
    normalizer: float  # the aggregation's denominator over the whole batch, shared by every micro-batch
    parts: list[torch.Tensor]  # the rows forwarded, one tensor of row indices per micro-batch

    @property
    def forwarded(self) -> int:
        return sum(len(rows) for rows in self.parts)


def plan_micro_batches(rollouts: Rollouts, advantages_B: torch.Tensor, include_B: torch.Tensor | None,
                       settings: UpdateSettings) -> MicroBatchPlan:
    """Which completions count (`include_B`, less those whose advantage is NaN or inf: missing
    rewards) and which are forwarded, in micro-batches of similar lengths.

    When the loss has no KL, no entropy and no distillation term, a completion with advantage 0 contributes
    exactly zero loss and gradient, so it is not forwarded (it still counts in the denominator); in a
    typical step a third to a half of the groups are all-equal. Sorting by length wastes less
    compute on padding and changes nothing else: every micro-batch shares the whole batch's normaliser.
    """
    B, loss = len(advantages_B), settings.loss
    include_B = torch.ones(B, dtype=torch.bool, device=advantages_B.device) if include_B is None else include_B.bool()
    include_B = include_B & torch.isfinite(advantages_B)
    normalizer = loss_normalizer(rollouts.completion_mask_BT * include_B.unsqueeze(1), loss.aggregation, loss.max_completion_length)
    active = torch.arange(B, device=advantages_B.device)[include_B]
    if loss.kl_coef == 0.0 and loss.entropy_coef == 0.0 and settings.distill_coef == 0.0:
        active = active[advantages_B[active] != 0]
    prompt_len_B, completion_len_B = rollouts.prompt_mask_BP.sum(dim=1), rollouts.spans_B  # what each row's forward costs
    active = active[torch.argsort(completion_len_B[active], stable=True)]
    parts = token_budget_batches(active, prompt_len_B + completion_len_B, settings.micro_batch_size, settings.micro_batch_tokens)
    if settings.bucket_overhead_tokens > 0:
        parts = [b for part in parts for b in length_buckets(part, prompt_len_B, completion_len_B, settings.bucket_overhead_tokens)]
    return MicroBatchPlan(include_B, normalizer, parts)


def old_and_reference_logprobs(policy: PreTrainedModel, reference: PreTrainedModel | None, chunks: list[Rollouts],
                               settings: UpdateSettings, *, frozen_old: bool = False) -> tuple[list[torch.Tensor] | None, list[torch.Tensor] | None]:
    """Each chunk's log-probs under the old policy and under the reference, frozen before the first
    step; None where the update needs none. `frozen_old`: freeze the old log-probs by a forward
    without a graph even with one pass (on-policy distillation compares them with the teacher's,
    which come from the same kind of forward: a teacher equal to the student then gives exactly 0).

    With one pass the policy *is* the sampling policy: old log-probs are the detached current ones
    and need no extra forward. With more passes they are frozen here. The sampler's own log-probs
    can stand in for that forward (`algo.reuse_sampling_logp`): they come from the same weights,
    differing only by KV-cache numerics (rollout/logp_mismatch_max).
    """
    if settings.num_iterations > 1 and settings.reuse_sampling_logp and not frozen_old and all(c.sample_logp_BT is not None for c in chunks):
        old = [c.sample_logp_BT for c in chunks]
    else:
        old = frozen_logprobs(policy, chunks, settings.temperature) if settings.num_iterations > 1 or frozen_old else None
    wants_reference = reference is not None and settings.loss.kl_coef > 0
    ref = frozen_logprobs(reference, chunks, settings.temperature) if wants_reference else None
    return old, ref


def sampler_correction(old_logp_BT: torch.Tensor, chunk: Rollouts, adv_B: torch.Tensor,
                       settings: UpdateSettings) -> tuple[torch.Tensor, dict[str, float]]:
    """The truncated importance weights (B, T) of one micro-batch against the sampler's log-probs,
    and the sums behind their metrics, over the tokens in the loss."""
    if chunk.sample_logp_BT is None:
        raise ValueError("algo.tis_cap needs the sampler's log-probs (Rollouts.sample_logp_BT); these rollouts have none")
    weights_BT, capped_BT = truncated_is_weights(old_logp_BT, chunk.sample_logp_BT, chunk.completion_mask_BT,
                                                 settings.tis_cap, settings.tis_level, settings.tis_mode, settings.tis_floor)
    in_loss_BT = chunk.completion_mask_BT.bool() & torch.isfinite(adv_B).unsqueeze(1)
    sums = {"loss/tis_weight_mean": float(torch.where(in_loss_BT, weights_BT, 0.0).sum()),
            "loss/tis_capped_frac": float((capped_BT & in_loss_BT).sum()), "tokens": float(in_loss_BT.sum())}
    return weights_BT, sums


def off_policy_weights(logp_BT: torch.Tensor, old_logp_BT: torch.Tensor, chunk: Rollouts, adv_B: torch.Tensor,
                       tis_BT: torch.Tensor | None, settings: UpdateSettings) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
    """What multiplies each token's surrogate loss: the importance weights (algo.tis_*), times 0 on the completions
    off-policy sequence masking drops (algo.off_policy_mask: against the sampler's log-probs, or the old policy's
    where there are none, with this pass's policy). None when neither is on (the loss as it always was)."""
    if not settings.off_policy_mask:
        return tis_BT, {}
    sampler_BT = chunk.sample_logp_BT if chunk.sample_logp_BT is not None else old_logp_BT
    keep_B = off_policy_sequence_mask(logp_BT, sampler_BT, chunk.completion_mask_BT, adv_B, settings.off_policy_mask)
    in_loss_BT = chunk.completion_mask_BT.bool() & torch.isfinite(adv_B).unsqueeze(1)
    dropped = (in_loss_BT & ~keep_B.unsqueeze(1)).sum() / in_loss_BT.sum().clamp(min=1)
    keep_BT = keep_B.unsqueeze(1).to(logp_BT.dtype).expand_as(logp_BT)
    return (keep_BT if tis_BT is None else tis_BT * keep_BT), {"loss/off_policy_masked_frac": dropped}


def forking_tokens(policy: PreTrainedModel, chunks: list[Rollouts], adv_chunks: list[torch.Tensor], settings: UpdateSettings,
                   log: UpdateMetrics, *, gather: Callable[[torch.Tensor], torch.Tensor] | None = None,
                   device: torch.device | None = None) -> list[torch.Tensor] | None:
    """algo.top_entropy_quantile < 1: each chunk's (B, T) mask of the tokens whose policy entropy, measured before the
    update with no graph, is in the top quantile of the whole batch's tokens in the loss (the threshold is the
    batch's, so a micro-batch split changes nothing). None when off.

    Chunks past `len(adv_chunks)` are zero-weight forwards (`Share.pad_rows`): forwarded as every other forward is
    (FSDP's gathers need every process to run as many), their entropies dropped. `gather` (`Share.gather`) joins the
    in-loss entropies of the processes that hold the rest of the batch, so the threshold is the whole batch's there
    too; the quantile sorts, so the order they come in changes nothing."""
    q = settings.top_entropy_quantile
    if q >= 1.0:
        return None
    real = len(adv_chunks)
    with log.timed("time/frozen_forward"), torch.no_grad():
        entropies = [chunk_logprobs(policy, c, settings.temperature, with_entropy=True)[1] for c in chunks][:real]
    in_loss = [c.completion_mask_BT.bool() & torch.isfinite(a).unsqueeze(1) for c, a in zip(chunks, adv_chunks)]
    values = torch.cat([e[m] for e, m in zip(entropies, in_loss)]) if real else torch.zeros(0, device=device)
    if gather is not None:
        values = gather(values)
    threshold = entropy_threshold(values, q)
    masks = [high_entropy_mask(e, m, threshold) for e, m in zip(entropies, in_loss)]
    # Counts, not the fraction: processes' counts add up to the batch's (UpdateMetrics.merged).
    log.forking = {"threshold": threshold if values.numel() else 0.0, "kept": sum(int(m.sum()) for m in masks),
                   "tokens": sum(int(m.sum()) for m in in_loss)}
    return masks


def distillation_terms(teacher: PreTrainedModel, chunks: list[Rollouts], old: list[torch.Tensor], adv_chunks: list[torch.Tensor],
                       settings: UpdateSettings) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """On-policy distillation (distill.on_policy_coef): per chunk, the teacher's per-token advantages against the
    old policy's log-probs of the same tokens (the student that sampled them, up to sampler numerics), and the mean
    sampled reverse KL, log pi_student - log pi_teacher, over the tokens in the loss (loss/teacher_kl). The teacher
    scores every chunk, the zero-weight forwards past `len(adv_chunks)` too (a sharded teacher's gathers need every
    process to run as many forwards), and their terms are dropped."""
    out = []
    for chunk, old_logp, teacher_logp, adv_B in zip(chunks, old, frozen_logprobs(teacher, chunks, settings.temperature), adv_chunks):
        in_loss_BT = chunk.completion_mask_BT.bool() & torch.isfinite(adv_B).unsqueeze(1)
        out.append((distillation_advantages(teacher_logp, old_logp, in_loss_BT, settings.distill_coef),
                    masked_mean(old_logp - teacher_logp, in_loss_BT)))
    return out


def guarded_step(optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler,
                 trainable: list[torch.nn.Parameter], max_grad_norm: float, loss: torch.Tensor) -> tuple[float, bool]:
    """Clip the gradient (max_norm=inf measures its norm without clipping) and step; returns
    (gradient norm, whether it stepped). A non-finite loss or gradient takes no step: one NaN would
    poison every weight through Adam's moments, so the pass is dropped and the loop decides."""
    grad_norm = torch.nn.utils.clip_grad_norm_(trainable, max_grad_norm or float("inf"))
    if torch.isfinite(grad_norm) and torch.isfinite(loss):
        optimizer.step()
        scheduler.step()
        return float(grad_norm), True
    optimizer.zero_grad(set_to_none=True)
    return float(grad_norm), False


class UpdateMetrics:
    """Running sums over the update's micro-batches and passes; `summary` gives the step's metrics."""

    def __init__(self) -> None:
        self.token_sums: dict[str, float] = defaultdict(float)  # token-weighted: policy_loss's metrics, loss/logp_mean
        self.tokens = 0  # over every pass
        self.loss, self.grad_norm, self.skipped = 0.0, 0.0, 0  # summed over passes
        self.mismatch_sum, self.mismatch_max = 0.0, 0.0
        self.tis_sums: dict[str, float] = defaultdict(float)
        self.forking: dict[str, float] = {}  # algo.top_entropy_quantile: the batch's threshold, tokens kept, tokens in the loss
        self.seconds = {"time/frozen_forward": 0.0, "time/forward": 0.0, "time/backward": 0.0, "time/optimizer": 0.0}

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        yield
        self.seconds[name] += time.perf_counter() - start

    def add_micro_batch(self, metrics: dict[str, torch.Tensor], logp_BT: torch.Tensor, chunk: Rollouts, first_pass: bool) -> None:
        n_tok = int(chunk.completion_mask_BT.sum())
        self.tokens += n_tok
        for name, value in metrics.items():
            self.token_sums[name] += float(value) * n_tok
        self.token_sums["loss/logp_mean"] += float(masked_mean(logp_BT, chunk.completion_mask_BT)) * n_tok
        # On the first pass the policy is the sampler's weights, up to numerics, unless the rollouts
        # are stale (Ray async mode): then the gap includes the updates since they were sampled.
        if first_pass and chunk.sample_logp_BT is not None:
            gap_BT = torch.where(chunk.completion_mask_BT.bool(), (logp_BT - chunk.sample_logp_BT).abs(), 0.0)
            self.mismatch_sum, self.mismatch_max = self.mismatch_sum + float(gap_BT.sum()), max(self.mismatch_max, float(gap_BT.max()))

    def add_importance_weights(self, weights_BT: torch.Tensor, sums: dict[str, float]) -> torch.Tensor:
        for name, value in sums.items():
            self.tis_sums[name] += value
        return weights_BT

    def add_step(self, grad_norm: float, stepped: bool) -> None:
        self.grad_norm += grad_norm
        self.skipped += not stepped

    @classmethod
    def merged(cls, parts: list[UpdateMetrics]) -> UpdateMetrics:
        """The metrics of one update run by several processes (`Share`), given in rank order: their
        token sums added, the largest mismatch and the slowest process's times kept. The loss, the
        gradient norm and the skipped passes are the whole update's on every process (reduced
        before the step decides), so the first's stand, as does the top-entropy threshold (every
        process computes it over the whole batch's tokens: `Share.gather`); the tokens it kept add up."""
        if len(parts) == 1:
            return parts[0]
        out = cls()
        out.loss, out.grad_norm, out.skipped = parts[0].loss, parts[0].grad_norm, parts[0].skipped
        if parts[0].forking:
            out.forking = {"threshold": parts[0].forking["threshold"], "kept": sum(p.forking["kept"] for p in parts),
                           "tokens": sum(p.forking["tokens"] for p in parts)}
        for part in parts:
            out.tokens += part.tokens
            for name, value in part.token_sums.items():
                out.token_sums[name] += value
            for name, value in part.tis_sums.items():
                out.tis_sums[name] += value
            out.mismatch_sum, out.mismatch_max = out.mismatch_sum + part.mismatch_sum, max(out.mismatch_max, part.mismatch_max)
            out.seconds = {name: max(out.seconds[name], part.seconds[name]) for name in out.seconds}
        return out

    def summary(self, settings: UpdateSettings, plan: MicroBatchPlan, lr: float) -> dict[str, float]:
        passes = settings.num_iterations
        out = {name: value / max(self.tokens, 1) for name, value in self.token_sums.items()}
        out["loss/policy"] = self.loss / passes
        out["loss/grad_norm"] = self.grad_norm / passes
        out["loss/active_frac"] = plan.forwarded / max(len(plan.include_B), 1)
        out["loss/excluded"] = int((~plan.include_B).sum())
        out["loss/skipped_nonfinite"] = self.skipped  # optimizer passes skipped for a NaN/inf loss or gradient
        out["loss/lr"] = lr
        out["rollout/logp_mismatch_mean"] = self.mismatch_sum / max(self.tokens / passes, 1)  # over the first pass's tokens
        out["rollout/logp_mismatch_max"] = self.mismatch_max
        if self.forking:
            out["loss/top_entropy_threshold"] = self.forking["threshold"]
            out["loss/top_entropy_kept_frac"] = self.forking["kept"] / max(self.forking["tokens"], 1)
        if settings.tis_cap:  # over the tokens in the loss, once (the weights are the same on every pass)
            out["loss/tis_weight_mean"] = self.tis_sums["loss/tis_weight_mean"] / max(self.tis_sums["tokens"], 1)
            out["loss/tis_capped_frac"] = self.tis_sums["loss/tis_capped_frac"] / max(self.tis_sums["tokens"], 1)
        out["loss/forwards"] = len(plan.parts)  # micro-batches (length buckets) per pass
        # Wall-clock split of the update (the reference / old-log-prob forwards, the policy's forward
        # with the loss, backward, clipping + optimizer step); on a GPU these time kernel launches
        # unless the device is synchronised.
        out.update(self.seconds)
        return out


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
    teacher: PreTrainedModel | None = None,
) -> dict[str, float]:
    """num_iterations optimizer steps on one rollout batch; returns averaged metrics.

    `teacher` (on-policy distillation, settings.distill_coef > 0): its log-probs of the sampled tokens add the
    per-token term to the advantages (`distillation_terms`).

    `include_B` (bool, B) leaves completions out of the loss entirely, numerator and
    denominator: missing rewards, or truncated completions under `algo.mask_truncated`.

    Exactness: the aggregation's denominator is computed once over the whole batch and shared by
    every micro-batch, so accumulated gradients equal the whole-batch gradient.

    A batch with nothing left to forward (`plan_micro_batches`) takes no optimizer or scheduler
    step, a deliberate choice: stepping on a zero gradient would still move weights through
    AdamW's momentum and weight decay, and warmup should count real updates. A pass whose loss or
    gradient is not finite is skipped the same way (`guarded_step`).
    """
    plan = plan_micro_batches(rollouts, advantages_B, include_B, settings)
    log = run_update(policy, optimizer, scheduler, rollouts, advantages_B, settings, plan, Share.whole(plan), reference=reference,
                     teacher=teacher)
    return log.summary(settings, plan, scheduler.get_last_lr()[0])


@dataclass(frozen=True)
class Share:
    """The part of a planned update one process runs, and how it joins the processes that run the
    rest (learner ranks: rlvr/distributed/learner_rank.py). Alone (`Share.whole`) it runs every
    micro-batch and reduces nothing, which is `rl_update`.

    Every process shares the plan's whole-batch normaliser, so the sum of their gradients is the
    gradient of the whole batch, as the sum of micro-batches' gradients is in one process."""

    parts: list[torch.Tensor]  # the plan's micro-batches (row indices) this process forwards, in order
    forwards: int  # micro-batch forwards per pass, >= len(parts); the rest are zero-weight forwards of `pad_rows`
    pad_rows: torch.Tensor | None = None  # a real row or few: what a zero-weight forward scores
    # Sums the processes' gradients into every process's (trainable) parameters after a pass's
    # backwards; None: alone, or the model reduces them itself during backward (FSDP).
    reduce_gradients: Callable[[list[torch.nn.Parameter]], None] | None = None
    # A pass's loss total over every process, added in rank order; None: alone. The non-finite
    # guard reads it, so every process decides alike whether to step.
    reduce_loss: Callable[[torch.Tensor], torch.Tensor] | None = None
    # A 1-D tensor of any length from every process, concatenated in rank order, the same on every
    # process; None: alone. Whole-batch statistics read it (the top-entropy threshold: forking_tokens).
    gather: Callable[[torch.Tensor], torch.Tensor] | None = None

    @classmethod
    def whole(cls, plan: MicroBatchPlan) -> Share:
        return cls(plan.parts, len(plan.parts))


def run_update(policy: PreTrainedModel, optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler,
               rollouts: Rollouts, advantages_B: torch.Tensor, settings: UpdateSettings, plan: MicroBatchPlan, share: Share, *,
               reference: PreTrainedModel | None = None, teacher: PreTrainedModel | None = None) -> UpdateMetrics:
    """`rl_update`'s passes over this process's `share` of `plan`; returns the running sums (the
    processes' sums merge with `UpdateMetrics.merged`, then `summary`). A step is taken when the
    plan forwards anything at all, on every process alike."""
    st, log = settings, UpdateMetrics()
    chunks, adv_chunks = [rollouts.select(rows) for rows in share.parts], [advantages_B[rows] for rows in share.parts]
    real = len(chunks)
    if share.forwards > real:  # zero-weight forwards (Share)
        chunks += [rollouts.select(share.pad_rows)] * (share.forwards - real)
    distilling = teacher is not None and st.distill_coef > 0
    with log.timed("time/frozen_forward"):
        old, ref = old_and_reference_logprobs(policy, reference, chunks, st, frozen_old=distilling)
        taught = distillation_terms(teacher, chunks, old, adv_chunks, st) if distilling else None
    tis: list[torch.Tensor | None] = [None] * real  # once per chunk, on the first pass: they do not change across passes
    # algo.top_entropy_quantile (None when off): every forward, the zero-weight ones too (FSDP), over the whole batch (gather)
    forking = forking_tokens(policy, chunks, adv_chunks, st, log, gather=share.gather, device=advantages_B.device)
    # The optimizer's parameters, not policy.parameters(): frozen (LoRA base) weights may hold stale grads.
    trainable = [p for group in optimizer.param_groups for p in group["params"]]
    for pass_index in range(st.num_iterations):
        optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), device=advantages_B.device)
        for i, chunk in enumerate(chunks):
            if i >= real:  # a zero-weight forward: the same modules run (and gather), every gradient adds exactly 0
                with log.timed("time/forward"):
                    logp, _ = policy_logprobs(policy, chunk, st.temperature, with_entropy=False)
                with log.timed("time/backward"):
                    backward_outside_autocast((logp * chunk.completion_mask_BT).sum() * 0.0)
                continue
            with log.timed("time/forward"):
                # The policy's entropy is computed only for the bonus: the step's entropy is already logged
                # from sampling (rollout/entropy), and a (B, T, V) extra costs memory on real vocabularies.
                logp, entropy = policy_logprobs(policy, chunk, st.temperature,
                                                with_entropy=st.loss.entropy_coef != 0.0 or st.measure_entropy)
                old_logp = old[i] if old is not None else logp.detach()
                if st.tis_cap and tis[i] is None:
                    tis[i] = log.add_importance_weights(*sampler_correction(old_logp, chunk, adv_chunks[i], st))
                weights, masked = off_policy_weights(logp, old_logp, chunk, adv_chunks[i], tis[i], st)
                if forking is not None:  # the surrogate, and the entropy bonus, on the batch's most uncertain tokens only
                    keep_BT = forking[i].to(logp.dtype)
                    weights = keep_BT if weights is None else weights * keep_BT
                    entropy = entropy * keep_BT if entropy is not None else None
                loss, metrics = policy_loss(logp, old_logp, adv_chunks[i], chunk.completion_mask_BT, st.loss,
                                            ref_logp=ref[i] if ref is not None else None, entropy=entropy,
                                            normalizer=plan.normalizer, is_weights=weights,
                                            token_advantages=taught[i][0] if taught is not None else None)
                metrics.update(masked)
                if taught is not None:
                    metrics["loss/teacher_kl"] = taught[i][1]
            with log.timed("time/backward"):
                backward_outside_autocast(loss)
            total += loss.detach()
            log.add_micro_batch(metrics, logp.detach(), chunk, first_pass=pass_index == 0)
        if share.reduce_gradients is not None:
            with log.timed("time/backward"):
                share.reduce_gradients(trainable)
        if share.reduce_loss is not None:
            total = share.reduce_loss(total)
        if plan.parts:
            with log.timed("time/optimizer"):
                log.add_step(*guarded_step(optimizer, scheduler, trainable, st.max_grad_norm, total))
        log.loss += float(total)
    return log
