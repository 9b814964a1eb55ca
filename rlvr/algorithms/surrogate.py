"""(4a) Per-token surrogates: the part of the policy loss in which PPO-style objectives differ.

A surrogate maps, per completion token, the importance ratio rho = pi / pi_old (per token, or one
per sequence: `loss.RATIO_LEVELS`) and the completion's advantage to a loss whose gradient is the
objective's. Everything after it is shared and lives in `loss.policy_loss`: the dual clip (for
surrogates registered with `dual_clip=True`), the KL and entropy terms, masking and aggregation.

    fn(logp_BT, ratio_BT, adv_B1, *, clip_low, clip_high) -> (loss_BT, clipped_BT)

`logp_BT` is log pi of each token with its graph, `ratio_BT` = exp(log pi - log pi_old) (also with
its graph), `adv_B1` the advantage of each row. `clipped_BT` (bool) marks the tokens where the clip
range changed the update; the shared code reports its masked mean as `loss/clip_frac`. Padding
positions may hold anything: the shared code removes them.

A new surrogate is one function here, registered by name, with hand-worked values in
tests/test_algorithms.py; `algo.surrogate` then accepts its name.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.registry import Registry

SURROGATES: Registry = Registry("surrogate")


@SURROGATES.register("ppo_clip", dual_clip=True)
def ppo_clip(
    logp_BT: torch.Tensor, ratio_BT: torch.Tensor, adv_B1: torch.Tensor, *, clip_low: float, clip_high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped ratio: -min(rho A, clip(rho, 1 - clip_low, 1 + clip_high) A) (GRPO, DAPO, GSPO).

    Schulman et al. 2017, eq. 7. Where the clipped branch is the smaller objective its gradient
    is 0: the token has moved far enough in the advantage's direction.
    """
    unclipped_BT = ratio_BT * adv_B1
    clipped_BT = ratio_BT.clamp(1.0 - clip_low, 1.0 + clip_high) * adv_B1
    return -torch.minimum(unclipped_BT, clipped_BT), clipped_BT < unclipped_BT


@SURROGATES.register("cispo")
def cispo(
    logp_BT: torch.Tensor, ratio_BT: torch.Tensor, adv_B1: torch.Tensor, *, clip_low: float, clip_high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """CISPO: -sg(clip(rho, 1 - clip_low, 1 + clip_high)) A log pi: the IS weight is clipped, never the gradient.

    MiniMax-M1 (arXiv:2506.13585), the CISPO objective: J = E[ sum_i sum_t sg(r_hat_it) A_it log pi(o_it) ] /
    sum_i |o_i|, r_hat = clip(r, 1 - eps_low^IS, 1 + eps_high^IS). Unlike ppo_clip, a token whose
    ratio left the range still gets the gradient -weight * A (PPO drops it). The loss's value
    is not an objective's (it scales with log pi); only its gradient is meant.
    """
    weight_BT = ratio_BT.detach().clamp(1.0 - clip_low, 1.0 + clip_high)
    return -(weight_BT * adv_B1 * logp_BT), weight_BT != ratio_BT.detach()
