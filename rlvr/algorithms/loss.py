"""(4) The policy loss: importance ratios, clipping, KL estimators, masked aggregation.

Pure functions over (B, T) tensors: B completions, T completion positions, `mask_BT` 1 on real
completion tokens (up to and including EOS) and 0 on padding. Masked positions are removed with
`torch.where`, never by multiplying, so a NaN or inf in padding cannot leak (NaN * 0 = NaN).

Aggregation is split into a numerator and a denominator so that gradient accumulation is exact:
the trainer computes the denominator once for the whole rollout batch and passes it to every
micro-batch (`normalizer=`), so the summed micro-batch losses equal the whole-batch loss however
tokens are distributed (per-micro-batch normalisation silently gave wrong gradients elsewhere).
"""

from __future__ import annotations

import torch

RATIO_LEVELS = ("token", "sequence")
AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "constant")
KL_ESTIMATORS = ("k1", "k2", "k3")


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


def kl_estimate(logp_BT: torch.Tensor, ref_logp_BT: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from samples of the policy.

    With x = log pi_ref - log pi (Schulman, "Approximating KL divergence", 2020):
    k1 = -x (unbiased, high variance), k2 = x^2 / 2, k3 = exp(x) - x - 1 (unbiased, >= 0).
    x is clamped to [-20, 20] so one extreme token cannot overflow exp (as verl does).

    >>> kl_estimate(torch.tensor([0.0]), torch.tensor([0.0]), "k3")
    tensor([0.])
    """
    x = (ref_logp_BT - logp_BT).clamp(-20.0, 20.0)
    if estimator == "k1":
        return -x
    if estimator == "k2":
        return 0.5 * x * x
    if estimator == "k3":
        return torch.exp(x) - x - 1.0
    raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")


def loss_normalizer(mask_BT: torch.Tensor, aggregation: str, max_completion_length: int | None = None) -> float:
    """The denominator of `aggregation` for this batch (pass the whole batch's to each micro-batch)."""
    # Rows with no token (a completion excluded from the loss has its mask zeroed) are not
    # counted: excluding a sample must not shrink the weight of the others.
    rows = float((mask_BT.sum(dim=1) > 0).sum().clamp(min=1))
    if aggregation == "token_mean":
        return float(mask_BT.sum().clamp(min=1))
    if aggregation == "seq_mean_token_mean":
        return rows
    if aggregation == "constant":
        if not max_completion_length:
            raise ValueError("aggregation='constant' needs max_completion_length (Dr. GRPO divides by N * L_max)")
        return rows * max_completion_length
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")


def aggregate(
    loss_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    aggregation: str,
    max_completion_length: int | None = None,
    normalizer: float | None = None,
) -> torch.Tensor:
    """Reduce per-token losses to a scalar.

    token_mean            sum(l*m) / sum(m)                 (DAPO: every token weighs the same)
    seq_mean_token_mean   mean_i( sum_t l*m / sum_t m )     (GRPO: every sequence weighs the same)
    constant              sum(l*m) / (B * L_max)            (Dr. GRPO: no length bias)
    """
    denominator = normalizer if normalizer is not None else loss_normalizer(mask_BT, aggregation, max_completion_length)
    if aggregation == "seq_mean_token_mean":
        numerator = masked_mean(loss_BT, mask_BT, dim=1).sum()
    elif aggregation in AGGREGATIONS:
        numerator = masked_sum(loss_BT, mask_BT)
    else:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    return numerator / denominator


def sequence_kl(logp_BT: torch.Tensor, ref_logp_BT: torch.Tensor, mask_BT: torch.Tensor, estimator: str = "k1") -> torch.Tensor:
    """(B,) summed per-token KL of each completion: the penalty `beta * KL_i` that KL-in-reward
    subtracts from completion i's reward before advantages (RLOO, Ahmadian et al. 2024; verl's
    `use_kl_in_reward`). The sum, not the mean: the KL of a sequence is the sum over its tokens."""
    return masked_sum(kl_estimate(logp_BT, ref_logp_BT, estimator), mask_BT, dim=1)


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    ratio_level: str = "token",
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    aggregation: str = "seq_mean_token_mean",
    max_completion_length: int | None = None,
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "k3",
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate (PPO, Schulman et al. 2017) plus optional KL and entropy terms.

    Per token: -min(rho * A, clip(rho, 1 - clip_low, 1 + clip_high) * A) + kl_coef * KL - entropy_coef * H,
    with rho = pi / pi_old per token, or one ratio per sequence (GSPO, Zheng et al. 2025:
    rho_i = exp(mean_t(log pi - log pi_old))). Returns the scalar loss and detached metrics.

    dual_clip = c > 1 (Ye et al. 2020, "Mastering Complex Control in MOBA Games"; verl's
    clip_ratio_c = 3): for A < 0 the per-token loss is capped at -c * A, so one token whose ratio
    exploded cannot dominate the batch.

    `entropy` is the policy's per-token entropy (B, T) with its graph (see
    `update.completion_logprobs(..., with_entropy=True)`); entropy_coef > 0 rewards keeping it.

    A row whose advantage is NaN or inf (a missing reward) is left out like padding.

    With one optimisation pass rho == 1 and advantages are centred, so the loss value is ~0
    while its gradient is not: the metrics carry the parts that explain it.
    """
    if ratio_level not in RATIO_LEVELS:
        raise ValueError(f"ratio_level must be one of {RATIO_LEVELS}, got {ratio_level!r}")
    if logp.shape != old_logp.shape or logp.shape != mask.shape or advantages.shape != logp.shape[:1]:
        raise ValueError(
            f"shapes: logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)}, mask {tuple(mask.shape)} "
            f"must be (B, T) and advantages {tuple(advantages.shape)} must be (B,)"
        )
    if kl_coef != 0.0 and ref_logp is None:
        raise ValueError("kl_coef > 0 needs ref_logp")
    if entropy_coef != 0.0 and entropy is None:
        raise ValueError("entropy_coef != 0 needs entropy (per-token policy entropy with its graph)")
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (it caps the loss of negative advantages at -c * A), got {dual_clip}")
    finite_B = torch.isfinite(advantages)
    mask = mask.bool() & finite_B.unsqueeze(1)
    advantages = torch.where(finite_B, advantages, torch.zeros_like(advantages))

    log_ratio_BT = torch.where(mask, logp - old_logp, torch.zeros_like(logp))
    if ratio_level == "sequence":
        log_ratio_BT = masked_mean(log_ratio_BT, mask, dim=1).unsqueeze(1).expand_as(logp)
    ratio_BT = torch.exp(log_ratio_BT)
    adv_B1 = advantages.unsqueeze(1)
    unclipped_BT = ratio_BT * adv_B1
    clipped_BT = ratio_BT.clamp(1.0 - clip_low, 1.0 + clip_high) * adv_B1
    loss_BT = -torch.minimum(unclipped_BT, clipped_BT)
    metrics = {}
    if dual_clip is not None:
        cap_BT = -dual_clip * adv_B1.expand_as(loss_BT)
        dual_BT = (adv_B1 < 0) & (loss_BT > cap_BT)
        loss_BT = torch.where(dual_BT, cap_BT, loss_BT)
        metrics["loss/dual_clip_frac"] = (dual_BT & mask).sum() / mask.sum().clamp(min=1)

    if ref_logp is not None:
        kl_BT = kl_estimate(logp, ref_logp, kl_estimator)
        loss_BT = loss_BT + kl_coef * kl_BT
        metrics["loss/kl"] = masked_mean(kl_BT.detach(), mask)
    if entropy is not None:
        if entropy_coef != 0.0:
            loss_BT = loss_BT - entropy_coef * entropy
        metrics["loss/entropy"] = masked_mean(entropy.detach(), mask)

    loss = aggregate(loss_BT, mask, aggregation, max_completion_length, normalizer)
    with torch.no_grad():
        is_clipped = (clipped_BT < unclipped_BT) & mask  # the clipped branch won: no gradient there
        metrics.update(
            {
                "loss/clip_frac": is_clipped.sum() / mask.sum().clamp(min=1),
                "loss/ratio_mean": masked_mean(ratio_BT, mask),
                "loss/ratio_max": torch.where(mask, ratio_BT, torch.zeros_like(ratio_BT)).max(),
            }
        )
    return loss, metrics
