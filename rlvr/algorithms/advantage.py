"""(3) Group-relative advantages: rewards of G completions per prompt -> one scalar each.

Pure functions over 1-D tensors laid out prompt-major: completions g*G .. g*G+G-1 answer prompt g.
No learned critic: the group itself is the baseline.

- grpo     (r - mean_group) / (std + eps)          DeepSeekMath, Shao et al. 2024, eq. 3
- dr_grpo  r - mean_group (no std scaling)         Liu et al. 2025, "Understanding R1-Zero"
- rloo     r - mean of the other G-1 rewards       Ahmadian et al. 2024 (= G/(G-1) (r - mean))

std is the unbiased sample std (as TRL and verl compute it). A group whose rewards are all
equal carries no signal: its advantages are exactly 0, never NaN.
"""

from __future__ import annotations

import torch

ESTIMATORS = ("grpo", "dr_grpo", "rloo")
STD_SCALES = ("group", "batch", "none")


def compute_advantages(
    rewards: torch.Tensor,
    group_size: int,
    estimator: str = "grpo",
    std_scale: str | None = None,
    eps: float = 1e-4,
) -> torch.Tensor:
    """Advantages for prompt-major rewards of shape (N*G,).

    `std_scale` defaults to the estimator's own choice: "group" for grpo, "none" for dr_grpo and
    rloo; passing it explicitly makes any combination.

    >>> compute_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), group_size=4, estimator="dr_grpo")
    tensor([ 0.7500, -0.2500, -0.2500, -0.2500])
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    std_scale = std_scale or ("group" if estimator == "grpo" else "none")
    if std_scale not in STD_SCALES:
        raise ValueError(f"std_scale must be one of {STD_SCALES}, got {std_scale!r}")
    if rewards.dim() != 1 or rewards.numel() % group_size != 0:
        raise ValueError(f"rewards must be 1-D with a multiple of group_size={group_size} entries, got {tuple(rewards.shape)}")
    if group_size < 2:
        raise ValueError("group_size must be >= 2: one sample per prompt has no group baseline (advantages would all be 0)")

    r_NG = rewards.float().view(-1, group_size)
    mean_N1 = r_NG.mean(dim=1, keepdim=True)
    if estimator == "rloo":
        baseline_NG = (r_NG.sum(dim=1, keepdim=True) - r_NG) / (group_size - 1)
        adv_NG = r_NG - baseline_NG
    else:
        adv_NG = r_NG - mean_N1

    if std_scale == "group":
        adv_NG = adv_NG / (r_NG.std(dim=1, keepdim=True) + eps)
    elif std_scale == "batch":
        adv_NG = adv_NG / (r_NG.std() + eps)

    # Equal rewards give exactly 0 above (x - x = 0, 0 / (0 + eps) = 0); make it explicit so a
    # future change to the formula cannot turn a flat group into noise.
    flat_N1 = (r_NG == r_NG[:, :1]).all(dim=1, keepdim=True)
    return adv_NG.masked_fill(flat_N1, 0.0).view(-1)


def group_stats(rewards: torch.Tensor, group_size: int) -> dict[str, float]:
    """What the step's rewards say: mean, std, and the share of groups with no signal."""
    r_NG = rewards.float().view(-1, group_size)
    flat = (r_NG == r_NG[:, :1]).all(dim=1)
    return {
        "reward/mean": r_NG.mean().item(),
        "reward/std": r_NG.std().item() if r_NG.numel() > 1 else 0.0,
        "reward/frac_groups_all_equal": flat.float().mean().item(),
    }
