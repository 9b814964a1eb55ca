"""Where the learner's work runs: this process (`LocalLearner`), or Ray workers (`RayLearner`).

`make_learner` is the only switch. Ray is imported only when `distributed.backend = "ray"`, so a
local run never needs it installed (`pip install rlvr[ray]` adds it).
"""

from __future__ import annotations

from rlvr.config import Config
from rlvr.learner import Learner, LocalLearner


def make_learner(policy, tokenizer, cfg: Config) -> Learner:
    """The learner the config asks for, holding `policy` (trained in this process either way)."""
    if cfg.distributed.backend == "ray":
        from rlvr.distributed.ray_learner import RayLearner  # optional dependency: ray, imported only for this backend

        return RayLearner(policy, tokenizer, cfg)
    return LocalLearner(policy, tokenizer, cfg)
