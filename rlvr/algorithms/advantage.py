"""(3) Group-relative advantages: rewards of G completions per prompt -> one scalar each.

Pure functions over 1-D tensors laid out prompt-major: completions g*G .. g*G+G-1 answer prompt g.
No learned critic: the group itself is the baseline. Two independent choices, each a registry:

baseline (algo.baseline)    what is subtracted from r
  group_mean     mean of the group                       DeepSeekMath (Shao et al. 2024, eq. 3); Dr. GRPO
  leave_one_out  mean of the other G-1 rewards           RLOO (Ahmadian et al. 2024): = G/(G-1) (r - mean)
std_scale (algo.std_scale)  what the centred reward is divided by
  group / batch / none      the group's std + eps, the batch's, or nothing (Dr. GRPO: no difficulty bias)

The papers' names are points of these two: grpo = group_mean + group, dr_grpo = group_mean + none,
rloo = leave_one_out + none (the presets of the same names set them).

std is the unbiased sample std (as TRL and verl compute it). A group whose rewards are all
equal carries no signal: its advantages are exactly 0, never NaN.

A reward that is NaN or +-inf (a reward function returned None, failed, or timed out) is
*missing*: it is left out of its group's mean, std and leave-one-out baseline, and its own
advantage is 0. The caller also leaves that completion out of the loss (`torch.isfinite`).
"""

from __future__ import annotations

import math

import torch

from rlvr.algorithms.registry import Registry

BASELINES: Registry = Registry("baseline")
STD_SCALES: Registry = Registry("std_scale")


def _group_sums(r_NG: torch.Tensor, valid_NG: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(valid count, sum, mean) of each group's valid rewards, each (N, 1); an empty group has mean 0."""
    n_N1 = valid_NG.sum(dim=1, keepdim=True)
    sum_N1 = r_NG.sum(dim=1, keepdim=True)
    return n_N1, sum_N1, sum_N1 / n_N1.clamp(min=1)


@BASELINES.register("group_mean")
def group_mean(r_NG: torch.Tensor, valid_NG: torch.Tensor) -> torch.Tensor:
    """The mean reward of the group (GRPO, Dr. GRPO)."""
    return _group_sums(r_NG, valid_NG)[2]


@BASELINES.register("leave_one_out")
def leave_one_out(r_NG: torch.Tensor, valid_NG: torch.Tensor) -> torch.Tensor:
    """The mean reward of the other valid completions of the group (RLOO)."""
    n_N1, sum_N1, _ = _group_sums(r_NG, valid_NG)
    return (sum_N1 - r_NG) / (n_N1 - 1).clamp(min=1)


@STD_SCALES.register("group")
def group_std(adv_NG: torch.Tensor, r_NG: torch.Tensor, valid_NG: torch.Tensor, eps: float) -> torch.Tensor:
    """Divided by the group's reward std + adv_eps (GRPO)."""
    n_N1, _, mean_N1 = _group_sums(r_NG, valid_NG)
    var_N1 = torch.where(valid_NG, (r_NG - mean_N1) ** 2, 0.0).sum(dim=1, keepdim=True) / (n_N1 - 1).clamp(min=1)
    return adv_NG / (var_N1.sqrt() + eps)


@STD_SCALES.register("batch")
def batch_std(adv_NG: torch.Tensor, r_NG: torch.Tensor, valid_NG: torch.Tensor, eps: float) -> torch.Tensor:
    """Divided by the whole batch's reward std + adv_eps (TRL's scale_rewards='batch')."""
    return adv_NG / (r_NG[valid_NG].std() + eps if int(valid_NG.sum()) > 1 else 1.0)


@STD_SCALES.register("none")
def no_std(adv_NG: torch.Tensor, r_NG: torch.Tensor, valid_NG: torch.Tensor, eps: float) -> torch.Tensor:
    """Not divided (Dr. GRPO, RLOO): no question-difficulty bias."""
    return adv_NG


def _check(rewards: torch.Tensor, group_size: int) -> None:
    if group_size < 2:
        raise ValueError("group_size must be >= 2: one sample per prompt has no group baseline (advantages would all be 0)")
    if rewards.dim() != 1 or rewards.numel() % group_size != 0:
        raise ValueError(f"rewards must be 1-D with a multiple of group_size={group_size} entries, got {tuple(rewards.shape)}")


def pass_at_k_weights(rewards: list[float], k: int) -> list[float]:
    """PKPO's k-1 baselined estimator (Walder & Karkhanis 2025, s^(loo-1)): for each of a group's n rewards,
    the mean over the k-subsets I of the group that hold it of max(I) - max(I without it): what the sample adds to
    the best of k. Used as advantages, its policy gradient is an unbiased estimate of the gradient of max@k (pass@k
    for 0/1 rewards), with a baseline that does not depend on the sample itself. Computed as
    sum over (k-1)-subsets J of the others of max(0, r_i - max(J)) / C(n, k): with the others sorted, the m-th
    smallest is the maximum of C(m-1, k-2) of them. k = 1 gives the rewards themselves.

    >>> pass_at_k_weights([1.0, 0.0, 0.0, 0.0], 2)  # the one right answer adds 1 to each of its 3 pairs, of 6
    [0.5, 0.0, 0.0, 0.0]
    >>> pass_at_k_weights([1.0, 1.0, 0.0, 0.0], 2)  # two right: each adds only where the other is absent
    [0.3333333333333333, 0.3333333333333333, 0.0, 0.0]
    """
    n = len(rewards)
    if k <= 1:
        return list(rewards)
    if k > n:
        raise ValueError(f"pass@k with k = {k} needs at least k samples per group, got {n}")
    total = math.comb(n, k)
    out = []
    for i, r in enumerate(rewards):
        others = sorted(rewards[:i] + rewards[i + 1:])
        out.append(sum(math.comb(m - 1, k - 2) * max(0.0, r - others[m - 1]) for m in range(k - 1, n)) / total)
    return out


def pass_at_k_advantages(rewards: torch.Tensor, group_size: int, k: int, std_scale: str = "none", eps: float = 1e-4) -> torch.Tensor:
    """Advantages for pass@k (algo.pass_at_k = k > 1): each group's `pass_at_k_weights` over its present rewards
    (with fewer than k present, k is their count), then `std_scale` over those weights; missing rewards get 0."""
    _check(rewards, group_size)
    r_NG = rewards.float().view(-1, group_size)
    valid_NG = torch.isfinite(r_NG)
    s_NG = torch.zeros_like(r_NG)
    for g in range(r_NG.shape[0]):
        idx = valid_NG[g].nonzero().squeeze(1).tolist()
        if len(idx) >= 2:
            s_NG[g, idx] = torch.tensor(pass_at_k_weights([float(r_NG[g, j]) for j in idx], min(k, len(idx))))
    adv_NG = STD_SCALES.lookup(std_scale)(s_NG, s_NG, valid_NG, eps)
    return adv_NG.masked_fill(~informative_groups(rewards, group_size).unsqueeze(1) | ~valid_NG, 0.0).view(-1)


def compute_advantages(
    rewards: torch.Tensor,
    group_size: int,
    *,
    baseline: str = "group_mean",
    std_scale: str = "group",
    eps: float = 1e-4,
    pass_at_k: int = 1,
) -> torch.Tensor:
    """Advantages for prompt-major rewards of shape (N*G,); missing rewards (NaN/inf) get 0.

    `baseline` (BASELINES) and `std_scale` (STD_SCALES) are the two choices; `eps` keeps the std
    division finite. `pass_at_k` > 1 (PKPO): `pass_at_k_advantages` instead, its own baseline built in.

    >>> compute_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), group_size=4, baseline="group_mean", std_scale="none")
    tensor([ 0.7500, -0.2500, -0.2500, -0.2500])
    >>> compute_advantages(torch.tensor([1.0, 0.0, float("nan"), 0.0]), group_size=4, std_scale="none")
    tensor([ 0.6667, -0.3333,  0.0000, -0.3333])
    """
    center, scale = BASELINES.lookup(baseline), STD_SCALES.lookup(std_scale)
    _check(rewards, group_size)
    if pass_at_k > 1:
        return pass_at_k_advantages(rewards, group_size, pass_at_k, std_scale, eps)

    r_NG = rewards.float().view(-1, group_size)
    valid_NG = torch.isfinite(r_NG)
    r_NG = torch.where(valid_NG, r_NG, torch.zeros_like(r_NG))  # missing -> 0, then masked out below
    adv_NG = scale(r_NG - center(r_NG, valid_NG), r_NG, valid_NG, eps)

    # A group with fewer than two valid rewards, or all valid rewards equal, carries no signal:
    # exactly 0 (the formulas above give 0 too, but a future change must not turn it into noise).
    return adv_NG.masked_fill(~informative_groups(rewards, group_size).unsqueeze(1) | ~valid_NG, 0.0).view(-1)


def informative_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """(N,) bool: groups with at least two valid rewards that are not all equal.

    The others have zero advantage everywhere, hence zero policy gradient: DAPO's dynamic
    sampling (Yu et al. 2025, sec. 3.2) drops them and samples more prompts instead.

    >>> informative_groups(torch.tensor([1.0, 1.0, 1.0, 1.0, float("nan"), 0.0]), group_size=3)
    tensor([False,  True])
    """
    _check(rewards, group_size)
    r_NG = rewards.float().view(-1, group_size)
    valid_NG = torch.isfinite(r_NG)
    hi = torch.where(valid_NG, r_NG, float("-inf")).max(dim=1).values
    lo = torch.where(valid_NG, r_NG, float("inf")).min(dim=1).values
    return (valid_NG.sum(dim=1) >= 2) & (hi > lo)


def group_stats(rewards: torch.Tensor, group_size: int) -> dict[str, float | None]:
    """What the step's rewards say: mean, std, missing count, and the share of groups with no signal."""
    valid = torch.isfinite(rewards)
    r = rewards.float()[valid]
    return {
        "reward/mean": r.mean().item() if r.numel() else None,
        "reward/std": r.std().item() if r.numel() > 1 else 0.0,
        "reward/missing": int((~valid).sum()),
        "reward/frac_groups_all_equal": 1.0 - informative_groups(rewards, group_size).float().mean().item(),
    }
