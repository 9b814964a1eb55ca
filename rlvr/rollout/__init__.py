"""(1) Rollout: sample G completions per prompt from the current policy.

`sampler.py` is the one path every stage samples through (a `Sampler` under one
`rlvr.sampling.Sampling`: prompts in, `Completions` out); `generate.py` the sampling loop (prompt
sharing, EOS, compaction, sampling log-probs); `controls.py` stop strings and thinking budgets;
`engines.py` the forward passes it can run on (the model's own forward, or a static KV cache).
"""

from rlvr.rollout.engines import STATIC_MODEL_TYPES, StaticCacheEngine, TransformersEngine, make_engine, static_engine_unsupported
from rlvr.rollout.generate import DecodingError, Rollouts, completion_id_lists, concat_rollouts, decode_completions, encode_prompts, generate, sample_next
from rlvr.rollout.sampler import Completions, Sampler
from rlvr.rollout.multiturn import ToolSampler, ToolSettings, ToolTrace
from rlvr.rollout.samplers import make_sampler, set_vllm_options

__all__ = [
    "STATIC_MODEL_TYPES",
    "Completions",
    "DecodingError",
    "Rollouts",
    "Sampler",
    "ToolSampler",
    "ToolSettings",
    "ToolTrace",
    "StaticCacheEngine",
    "TransformersEngine",
    "completion_id_lists",
    "concat_rollouts",
    "decode_completions",
    "encode_prompts",
    "generate",
    "make_engine",
    "make_sampler",
    "sample_next",
    "set_vllm_options",
    "static_engine_unsupported",
]
