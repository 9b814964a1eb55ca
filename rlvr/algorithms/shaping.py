"""Reward shaping that depends on the completion itself, not on the verifier: pure functions.

These become reward terms beside the verifier's (see `rlvr/reward.py`), each logged on its own.
"""

from __future__ import annotations

import torch


def overlong_penalty(lengths_B: torch.Tensor, max_length: int, buffer: int, factor: float = 1.0) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), a reward term <= 0.

    0 while |y| <= L_max - L_cache; then linear, reaching -factor at |y| = L_max; -factor beyond.
    L_max is the generation limit, so a truncated completion always gets the full penalty, and a
    completion that is merely long gets a graded nudge instead of the cliff of a 0 reward.

    >>> overlong_penalty(torch.tensor([10, 17, 18, 20]), max_length=20, buffer=4)
    tensor([ 0.0000, -0.2500, -0.5000, -1.0000])
    """
    if not 0 < buffer <= max_length:
        raise ValueError(f"buffer (L_cache) must be in (0, max_length={max_length}], got {buffer}")
    excess_B = lengths_B.float() - (max_length - buffer)
    return (-excess_B / buffer).clamp(min=-1.0, max=0.0) * factor
