"""The math of the GRPO family as pure functions over tensors (no config objects, no module state).

    from rlvr.algorithms import LossSettings, compute_advantages, policy_loss

advantage.py (3)  rewards -> advantages: a baseline (group_mean, leave_one_out) and a std scaling (group, batch, none)
loss.py      (4)  ratios (token / sequence), then the per-token surrogate, then the shared tail: dual clip, KL,
                  entropy, aggregation; LossSettings carries those choices
surrogate.py (4a) the per-token surrogates (ppo_clip, cispo): a new one is one registered function
shaping.py        reward terms computed from the completion itself (DAPO overlong penalty)
registry.py       the name -> function registries behind every choice; the config accepts their names
"""

from rlvr.algorithms.advantage import (BASELINES, STD_SCALES, compute_advantages, group_stats, informative_groups, pass_at_k_advantages,
                                       pass_at_k_weights)
from rlvr.algorithms.loss import (
    AGGREGATIONS,
    KL_ESTIMATORS,
    RATIO_LEVELS,
    LossSettings,
    aggregate,
    kl_estimate,
    loss_normalizer,
    masked_mean,
    masked_sum,
    policy_loss,
    sequence_kl,
    adapt_entropy_coef,
    distillation_advantages,
    entropy_threshold,
    high_entropy_mask,
    off_policy_sequence_mask,
    truncated_is_weights,
)
from rlvr.algorithms.registry import Registry
from rlvr.algorithms.shaping import overlong_penalty
from rlvr.algorithms.surrogate import SURROGATES

__all__ = [
    "AGGREGATIONS",
    "BASELINES",
    "KL_ESTIMATORS",
    "RATIO_LEVELS",
    "STD_SCALES",
    "SURROGATES",
    "LossSettings",
    "Registry",
    "aggregate",
    "compute_advantages",
    "pass_at_k_advantages",
    "pass_at_k_weights",
    "group_stats",
    "informative_groups",
    "kl_estimate",
    "loss_normalizer",
    "masked_mean",
    "masked_sum",
    "overlong_penalty",
    "policy_loss",
    "sequence_kl",
    "adapt_entropy_coef",
    "distillation_advantages",
    "entropy_threshold",
    "high_entropy_mask",
    "off_policy_sequence_mask",
    "truncated_is_weights",
]
