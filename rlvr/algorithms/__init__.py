"""The math of the GRPO family as pure functions over tensors (no config objects, no module state).

    from rlvr.algorithms import compute_advantages, policy_loss
"""

from rlvr.algorithms.advantage import compute_advantages, group_stats
from rlvr.algorithms.loss import aggregate, kl_estimate, loss_normalizer, masked_mean, masked_sum, policy_loss

__all__ = [
    "aggregate",
    "compute_advantages",
    "group_stats",
    "kl_estimate",
    "loss_normalizer",
    "masked_mean",
    "masked_sum",
    "policy_loss",
]
