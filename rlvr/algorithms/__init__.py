"""The math of the GRPO family as pure functions over tensors (no config objects, no module state).

    from rlvr.algorithms import compute_advantages, policy_loss

advantage.py (3)  rewards -> advantages (grpo, dr_grpo, rloo; std per group / batch / none)
loss.py      (4)  ratios (token / sequence), clipping (low, high, dual), KL, entropy, aggregation
shaping.py        reward terms computed from the completion itself (DAPO overlong penalty)
"""

from rlvr.algorithms.advantage import compute_advantages, group_stats, informative_groups
from rlvr.algorithms.loss import aggregate, kl_estimate, loss_normalizer, masked_mean, masked_sum, policy_loss, sequence_kl
from rlvr.algorithms.shaping import overlong_penalty

__all__ = [
    "aggregate",
    "compute_advantages",
    "group_stats",
    "informative_groups",
    "kl_estimate",
    "loss_normalizer",
    "masked_mean",
    "masked_sum",
    "overlong_penalty",
    "policy_loss",
    "sequence_kl",
]
