"""(1) Rollout: sample G completions per prompt from the current policy.

`generate.py` is the sampling loop (prompt sharing, EOS, compaction, sampling log-probs);
`engines.py` the forward passes it can run on (the model's own forward, or a static KV cache).
"""

from rlvr.rollout.engines import STATIC_MODEL_TYPES, StaticCacheEngine, TransformersEngine, make_engine, static_engine_unsupported
from rlvr.rollout.generate import DecodingError, Rollouts, completion_id_lists, concat_rollouts, decode_completions, encode_prompts, generate, sample_next

__all__ = [
    "STATIC_MODEL_TYPES",
    "DecodingError",
    "Rollouts",
    "StaticCacheEngine",
    "TransformersEngine",
    "completion_id_lists",
    "concat_rollouts",
    "decode_completions",
    "encode_prompts",
    "generate",
    "make_engine",
    "sample_next",
    "static_engine_unsupported",
]
