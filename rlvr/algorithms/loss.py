"""(4) The policy loss: importance ratios, a per-token surrogate, KL estimators, masked aggregation.

`policy_loss` = ratio (RATIO_LEVELS) -> per-token surrogate (surrogate.SURROGATES: the clipped ratio,
CISPO, ...) -> the shared tail: dual clip, KL (KL_ESTIMATORS), entropy bonus, aggregation
(AGGREGATIONS). Each choice is a registered function; the config's allowed values are their names.
The choices travel together as one `LossSettings`, checked once when built.

Pure functions over (B, T) tensors: B completions, T completion positions, `mask_BT` 1 on real
completion tokens (up to and including EOS) and 0 on padding. Masked positions are removed with
`torch.where`, never by multiplying, so a NaN or inf in padding cannot leak (NaN * 0 = NaN).

Aggregation is split into a numerator and a denominator so that gradient accumulation is exact:
the trainer computes the denominator once for the whole rollout batch and passes it to every
micro-batch (`normalizer=`), so the summed micro-batch losses equal the whole-batch loss however
tokens are distributed (per-micro-batch normalisation silently gave wrong gradients elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.algorithms.registry import Registry
from rlvr.algorithms.surrogate import SURROGATES

RATIO_LEVELS: Registry = Registry("ratio_level")
KL_ESTIMATORS: Registry = Registry("kl_estimator")
AGGREGATIONS: Registry = Registry("aggregation")


def masked_sum(values_BT: torch.Tensor, mask_BT: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    zeroed = torch.where(mask_BT.bool(), values_BT, torch.zeros_like(values_BT))
    return zeroed.sum() if dim is None else zeroed.sum(dim=dim)


def masked_mean(values_BT: torch.Tensor, mask_BT: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean over the masked-in entries (all, or along `dim`); an all-masked row gives 0, not NaN.

    >>> masked_mean(torch.tensor([[1.0, 3.0, 99.0]]), torch.tensor([[1, 1, 0]]), dim=1)
    tensor([2.])
    """
    count = mask_BT.sum() if dim is None else mask_BT.sum(dim=dim)
    return masked_sum(values_BT, mask_BT, dim) / count.clamp(min=1)


@RATIO_LEVELS.register("token")
def token_log_ratio(log_ratio_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """One ratio per token, pi / pi_old (PPO, GRPO, DAPO)."""
    return log_ratio_BT


@RATIO_LEVELS.register("sequence")
def sequence_log_ratio(log_ratio_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """One ratio per completion, exp of its mean token log-ratio (GSPO, Zheng et al. 2025)."""
    return masked_mean(log_ratio_BT, mask_BT, dim=1).unsqueeze(1).expand_as(log_ratio_BT)


# KL(policy || reference) per token from samples of the policy, as functions of
# x = log pi_ref - log pi (Schulman, "Approximating KL divergence", 2020).
@KL_ESTIMATORS.register("k1")
def kl_k1(x: torch.Tensor) -> torch.Tensor:
    """-x: unbiased, high variance, can be negative."""
    return -x


@KL_ESTIMATORS.register("k2")
def kl_k2(x: torch.Tensor) -> torch.Tensor:
    """x^2 / 2: biased, low variance."""
    return 0.5 * x * x


@KL_ESTIMATORS.register("k3")
def kl_k3(x: torch.Tensor) -> torch.Tensor:
    """exp(x) - x - 1: unbiased and >= 0 (GRPO)."""
    return torch.exp(x) - x - 1.0


def kl_estimate(logp_BT: torch.Tensor, ref_logp_BT: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from samples of the policy (KL_ESTIMATORS).

    x = log pi_ref - log pi is clamped to [-20, 20] so one extreme token cannot overflow exp (as verl does).

    >>> kl_estimate(torch.tensor([0.0]), torch.tensor([0.0]), "k3")
    tensor([0.])
    """
    estimate = KL_ESTIMATORS.lookup(estimator)
    return estimate((ref_logp_BT - logp_BT).clamp(-20.0, 20.0))


# An aggregation is a numerator (registered, over this micro-batch) and a denominator (the `denominator`
# trait, over the whole rollout batch's mask): gradient accumulation is exact because every
# micro-batch divides by the same number.
def _rows(mask_BT: torch.Tensor) -> float:
    # Rows with no token (a completion excluded from the loss has its mask zeroed) are not
    # counted: excluding a sample must not shrink the weight of the others.
    return float((mask_BT.sum(dim=1) > 0).sum().clamp(min=1))


def _constant_denominator(mask_BT: torch.Tensor, max_completion_length: int | None) -> float:
    if not max_completion_length:
        raise ValueError("aggregation='constant' needs max_completion_length (Dr. GRPO divides by N * L_max)")
    return _rows(mask_BT) * max_completion_length


@AGGREGATIONS.register("token_mean", denominator=lambda mask_BT, max_len: float(mask_BT.sum().clamp(min=1)))
def token_mean(loss_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """sum(l*m) / sum(m): every token of the batch weighs the same (DAPO)."""
    return masked_sum(loss_BT, mask_BT)


@AGGREGATIONS.register("seq_mean_token_mean", denominator=lambda mask_BT, max_len: _rows(mask_BT))
def seq_mean_token_mean(loss_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """mean_i(sum_t l*m / sum_t m): every completion weighs the same (GRPO paper; favours short correct answers)."""
    return masked_mean(loss_BT, mask_BT, dim=1).sum()


@AGGREGATIONS.register("constant", denominator=_constant_denominator)
def constant(loss_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """sum(l*m) / (N * max_new_tokens): no length bias (Dr. GRPO)."""
    return masked_sum(loss_BT, mask_BT)


def loss_normalizer(mask_BT: torch.Tensor, aggregation: str, max_completion_length: int | None = None) -> float:
    """The denominator of `aggregation` for this batch (pass the whole batch's to each micro-batch)."""
    return AGGREGATIONS.trait(aggregation, "denominator")(mask_BT, max_completion_length)


def aggregate(
    loss_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    aggregation: str,
    max_completion_length: int | None = None,
    normalizer: float | None = None,
) -> torch.Tensor:
    """Reduce per-token losses to a scalar: the registered numerator over `normalizer` (by
    default this batch's own denominator)."""
    numerator = AGGREGATIONS.lookup(aggregation)
    denominator = normalizer if normalizer is not None else loss_normalizer(mask_BT, aggregation, max_completion_length)
    return numerator(loss_BT, mask_BT) / denominator


def sequence_kl(logp_BT: torch.Tensor, ref_logp_BT: torch.Tensor, mask_BT: torch.Tensor, estimator: str = "k1") -> torch.Tensor:
    """(B,) summed per-token KL of each completion: the penalty `beta * KL_i` that KL-in-reward
    subtracts from completion i's reward before advantages (RLOO, Ahmadian et al. 2024; verl's
    `use_kl_in_reward`). The sum, not the mean: the KL of a sequence is the sum over its tokens."""
    return masked_sum(kl_estimate(logp_BT, ref_logp_BT, estimator), mask_BT, dim=1)


def truncated_is_weights(old_logp_BT: torch.Tensor, sample_logp_BT: torch.Tensor, mask_BT: torch.Tensor, cap: float,
                         level: str = "token", mode: str = "truncate", floor: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Importance weights w = pi_old / pi_sampler that correct the surrogate for samples drawn by
    another distribution than the learner's old policy: older weights (asynchronous rollouts) or
    another engine's numerics. Per token, or one per completion (the product of its token ratios).
    `mode` says what happens outside [floor, cap]:

    - "truncate" (truncated importance sampling, Ionides 2008; Yao et al. 2025 for RL of LLMs): w is
      clamped into [floor, cap] (floor 0: no lower bound, min(w, cap));
    - "mask" (TRL's token_mask / sequence_mask; verl's rollout-correction rejection): a weight
      outside [floor, cap] is 0, the token (or the whole completion) leaves the surrogate; inside, w.

    Returns the (B, T) weights, no graph, 0 on padding, and the (B, T) mask of where a bound bit.

    >>> w, cut = truncated_is_weights(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.0, 0.0]]), torch.tensor([[1, 1]]), 2.0)
    >>> w, cut
    (tensor([[1., 2.]]), tensor([[False,  True]]))
    >>> truncated_is_weights(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.0, 0.0]]), torch.tensor([[1, 1]]), 2.0, mode="mask")[0]
    tensor([[1., 0.]])
    """
    mask = mask_BT.bool()
    log_ratio_BT = torch.where(mask, old_logp_BT.detach() - sample_logp_BT, torch.zeros_like(old_logp_BT))
    if level == "sequence":
        log_ratio_BT = log_ratio_BT.sum(dim=1, keepdim=True).expand_as(log_ratio_BT)
    elif level != "token":
        raise ValueError(f"tis level must be 'token' or 'sequence', got {level!r}")
    if mode not in ("truncate", "mask"):
        raise ValueError(f"tis mode must be 'truncate' or 'mask', got {mode!r}")
    # The bounds are applied in log space, so a huge ratio never overflows to inf.
    log_cap = float(torch.log(torch.tensor(cap)))
    log_floor = float(torch.log(torch.tensor(floor))) if floor > 0 else float("-inf")
    out_of_range = (log_ratio_BT > log_cap) | (log_ratio_BT < log_floor)
    if mode == "truncate":
        weights = torch.exp(log_ratio_BT.clamp(min=log_floor, max=log_cap))
    else:
        weights = torch.where(out_of_range, torch.zeros_like(log_ratio_BT), torch.exp(log_ratio_BT.clamp(max=log_cap)))
    return torch.where(mask, weights, torch.zeros_like(weights)), out_of_range & mask


def entropy_threshold(entropies_N: torch.Tensor, quantile: float) -> float:
    """The entropy at or above which a token is among the `quantile` most uncertain of `entropies_N` (the
    batch's tokens in the loss): their (1 - quantile) quantile (torch.quantile, linear interpolation, as TRL).

    >>> entropy_threshold(torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5]), 0.2)
    0.42000001668930054
    """
    if entropies_N.numel() == 0:
        return float("inf")
    return float(torch.quantile(entropies_N.float(), 1.0 - quantile))


def high_entropy_mask(entropy_BT: torch.Tensor, mask_BT: torch.Tensor, threshold: float) -> torch.Tensor:
    """(B, T) bool: the real tokens whose entropy is at least `threshold` (Wang et al. 2025, "Beyond the 80/20
    rule": train only on the high-entropy "forking" tokens; TRL's top_entropy_quantile).

    >>> high_entropy_mask(torch.tensor([[0.1, 0.9, 0.5, 2.0]]), torch.tensor([[1, 1, 1, 0]]), 0.5)
    tensor([[False,  True,  True, False]])
    """
    return mask_BT.bool() & (entropy_BT >= threshold)


def adapt_entropy_coef(coef: float, entropy: float, target: float, delta: float, low: float, high: float) -> float:
    """Skywork-OR1's adaptive entropy control, one step (TRL's use_adaptive_entropy): the coefficient rises by
    `delta` when the measured mean entropy is at or below `target` (the policy is collapsing), else falls by it;
    kept within [low, high].

    >>> adapt_entropy_coef(0.01, 0.1, 0.2, 0.005, 0.0, 1.0), adapt_entropy_coef(0.01, 0.5, 0.2, 0.005, 0.0, 1.0)
    (0.015, 0.005)
    """
    return min(coef + delta, high) if entropy <= target else max(coef - delta, low)


def distillation_advantages(teacher_logp_BT: torch.Tensor, student_logp_BT: torch.Tensor, mask_BT: torch.Tensor,
                            coef: float) -> torch.Tensor:
    """(B, T) per-token advantages of on-policy distillation: coef x (log pi_teacher - log pi_student) of each sampled
    token, 0 on padding. Minus the token's sampled reverse KL, log pi_student / pi_teacher: a policy gradient with it
    (one token, no discount) descends KL(student || teacher) along the student's own samples (prime-rl's opd, Thinking
    Machines' on-policy distillation). Where the teacher agrees with the student it is 0, so a teacher equal to the
    student changes nothing.

    >>> distillation_advantages(torch.tensor([[-0.5, -2.0, 0.0]]), torch.tensor([[-1.0, -1.0, -3.0]]), torch.tensor([[1, 1, 0]]), 2.0)
    tensor([[ 1., -2.,  0.]])
    """
    # clamped as KL estimates are (kl_estimate): a token the teacher gives probability 0 would make the loss infinite
    gap_BT = (teacher_logp_BT - student_logp_BT).clamp(-20.0, 20.0)
    return torch.where(mask_BT.bool(), coef * gap_BT, torch.zeros_like(teacher_logp_BT))


def off_policy_sequence_mask(logp_BT: torch.Tensor, sample_logp_BT: torch.Tensor, mask_BT: torch.Tensor, advantages_B: torch.Tensor,
                             threshold: float) -> torch.Tensor:
    """(B,) bool, True = keep: DeepSeek-V3.2's off-policy sequence masking (TRL's
    off_policy_mask_threshold). A completion with a negative advantage whose tokens the current
    policy finds, on average, more than `threshold` nats less likely than the sampler did
    (mean_t(log pi_sampler - log pi), a per-sequence KL estimate) is dropped from the surrogate: a
    negative update on a sample the policy has moved away from mostly pushes on noise. Positive
    advantages are always kept. No graph.

    >>> off_policy_sequence_mask(torch.tensor([[-2.0, -2.0], [-2.0, -2.0]]), torch.tensor([[-1.0, -1.0], [-1.0, -1.0]]),
    ...                          torch.ones(2, 2), torch.tensor([1.0, -1.0]), threshold=0.5)
    tensor([ True, False])
    """
    kl_B = masked_mean(sample_logp_BT - logp_BT.detach(), mask_BT, dim=1)
    return (advantages_B >= 0) | (kl_B <= threshold)


@dataclass(frozen=True)
class LossSettings:
    """Every choice `policy_loss` makes, as one value built once per run (`update.UpdateSettings`
    holds the run's). Checked when built, so a bad name or combination fails before any forward.

    >>> LossSettings(surrogate="cispo", clip_high=0.28).aggregation
    'seq_mean_token_mean'
    >>> LossSettings(surrogate="cispo", dual_clip=3.0)
    Traceback (most recent call last):
    ...
    ValueError: dual_clip caps the clipped-ratio loss; surrogate 'cispo' does not support it
    """

    surrogate: str = "ppo_clip"  # a SURROGATES name: the per-token objective
    ratio_level: str = "token"  # a RATIO_LEVELS name: one ratio per token, or one per completion (GSPO)
    clip_low: float = 0.2  # the ratio's clip range is [1 - clip_low, 1 + clip_high]
    clip_high: float = 0.2
    # c > 1 (Ye et al. 2020, "Mastering Complex Control in MOBA Games"; verl's clip_ratio_c = 3): for
    # A < 0 the per-token loss is capped at -c * A, so one token whose ratio exploded cannot dominate
    # the batch. Only surrogates registered with dual_clip=True accept it. None = off.
    dual_clip: float | None = None
    aggregation: str = "seq_mean_token_mean"  # an AGGREGATIONS name
    max_completion_length: int | None = None  # L_max: the "constant" aggregation divides by N * L_max
    kl_coef: float = 0.0  # beta of the KL(policy || reference) term in the loss (0 = none)
    kl_estimator: str = "k3"  # a KL_ESTIMATORS name
    entropy_coef: float = 0.0  # weight of the entropy bonus (0 = none)

    def __post_init__(self) -> None:
        for registry, name in ((SURROGATES, self.surrogate), (RATIO_LEVELS, self.ratio_level),
                               (AGGREGATIONS, self.aggregation), (KL_ESTIMATORS, self.kl_estimator)):
            registry.lookup(name)  # raises, naming the setting and its choices
        if self.dual_clip is not None:
            if self.dual_clip <= 1.0:
                raise ValueError(f"dual_clip must be > 1 (it caps the loss of negative advantages at -c * A), got {self.dual_clip}")
            if not SURROGATES.trait(self.surrogate, "dual_clip", False):
                raise ValueError(f"dual_clip caps the clipped-ratio loss; surrogate {self.surrogate!r} does not support it")


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    settings: LossSettings,
    *,
    ref_logp: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    normalizer: float | None = None,
    is_weights: torch.Tensor | None = None,
    token_advantages: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """A per-token surrogate (default PPO's clipped ratio) plus optional KL and entropy terms, aggregated
    as `settings` (LossSettings) says. Returns the scalar loss and detached metrics.

    Per token, with the default surrogate (Schulman et al. 2017):
    -min(rho * A, clip(rho, 1 - clip_low, 1 + clip_high) * A) + kl_coef * KL - entropy_coef * H,
    with rho = pi / pi_old per token, or one ratio per sequence (GSPO, Zheng et al. 2025:
    rho_i = exp(mean_t(log pi - log pi_old))).

    `ref_logp` (B, T), the reference's log-probs, is needed when settings.kl_coef != 0. `entropy`
    is the policy's per-token entropy (B, T) with its graph (see
    `logprobs.completion_logprobs(..., with_entropy=True)`), needed when settings.entropy_coef != 0.

    `is_weights` (B, T), no graph (`truncated_is_weights`) multiply each token's surrogate loss, after
    clipping, not the KL or entropy terms: the correction is for who sampled the tokens.

    `normalizer` is the aggregation's denominator; pass the whole batch's to each micro-batch.

    `token_advantages` (B, T), no graph, are added to each token's advantage (the row's advantage is shared by
    its tokens): on-policy distillation's per-token teacher term (`distillation_advantages`). None = none.

    A row whose advantage is NaN or inf (a missing reward) is left out like padding.

    With one optimisation pass rho == 1 and advantages are centred, so the loss value is ~0
    while its gradient is not: the metrics carry the parts that explain it.
    """
    per_token = SURROGATES.lookup(settings.surrogate)
    level = RATIO_LEVELS.lookup(settings.ratio_level)
    if logp.shape != old_logp.shape or logp.shape != mask.shape or advantages.shape != logp.shape[:1]:
        raise ValueError(
            f"shapes: logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)}, mask {tuple(mask.shape)} "
            f"must be (B, T) and advantages {tuple(advantages.shape)} must be (B,)"
        )
    if settings.kl_coef != 0.0 and ref_logp is None:
        raise ValueError("kl_coef > 0 needs ref_logp")
    if settings.entropy_coef != 0.0 and entropy is None:
        raise ValueError("entropy_coef != 0 needs entropy (per-token policy entropy with its graph)")
    finite_B = torch.isfinite(advantages)
    mask = mask.bool() & finite_B.unsqueeze(1)
    advantages = torch.where(finite_B, advantages, torch.zeros_like(advantages))

    ratio_BT = torch.exp(level(torch.where(mask, logp - old_logp, torch.zeros_like(logp)), mask))
    adv_B1 = advantages.unsqueeze(1)
    if token_advantages is not None:  # (B, T) from here on: every surrogate and the dual clip broadcast alike
        if token_advantages.shape != logp.shape:
            raise ValueError(f"token_advantages {tuple(token_advantages.shape)} must be (B, T) like logp {tuple(logp.shape)}")
        adv_B1 = adv_B1 + torch.where(mask, token_advantages.detach(), torch.zeros_like(token_advantages))
    loss_BT, clipped_BT = per_token(logp, ratio_BT, adv_B1, clip_low=settings.clip_low, clip_high=settings.clip_high)
    metrics = {}
    if settings.dual_clip is not None:
        cap_BT = -settings.dual_clip * adv_B1.expand_as(loss_BT)
        dual_BT = (adv_B1 < 0) & (loss_BT > cap_BT)
        loss_BT = torch.where(dual_BT, cap_BT, loss_BT)
        metrics["loss/dual_clip_frac"] = (dual_BT & mask).sum() / mask.sum().clamp(min=1)
    if is_weights is not None:
        loss_BT = loss_BT * is_weights.detach()

    if ref_logp is not None:
        kl_BT = kl_estimate(logp, ref_logp, settings.kl_estimator)
        loss_BT = loss_BT + settings.kl_coef * kl_BT
        metrics["loss/kl"] = masked_mean(kl_BT.detach(), mask)
    if entropy is not None:
        if settings.entropy_coef != 0.0:
            loss_BT = loss_BT - settings.entropy_coef * entropy
        metrics["loss/entropy"] = masked_mean(entropy.detach(), mask)

    loss = aggregate(loss_BT, mask, settings.aggregation, settings.max_completion_length, normalizer)
    with torch.no_grad():
        metrics.update(
            {
                "loss/clip_frac": (clipped_BT & mask).sum() / mask.sum().clamp(min=1),  # where the clip range changed the update
                "loss/ratio_mean": masked_mean(ratio_BT, mask),
                "loss/ratio_max": torch.where(mask, ratio_BT, torch.zeros_like(ratio_BT)).max(),
            }
        )
    return loss, metrics
