"""Which sampler an engine name means (rollout.engine, distributed.rollout_engine).

Every stage that samples (RL's learner, Ray's rollout workers, evaluation, rejection sampling)
builds its sampler here from the engine's name, so a new engine is one more branch here and one
more class with `sample` and `weights_changed`; no caller changes. How vLLM engines are built
(rollout.vllm_*, rollout.server_url) is set once per process by `set_vllm_options`
(runtime.apply_run_settings), as weight packing is: evaluation and rejection sampling know only
the engine's name.
"""

from __future__ import annotations

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.rollout.sampler import Sampler
from rlvr.rollout.vllm_sampler import VLLMSampler, VLLMSettings
from rlvr.rollout.vllm_server import ServerSampler
from rlvr.sampling import Sampling

_vllm_options: dict = {}


def set_vllm_options(settings: VLLMSettings | None = None, server_url: str = "", server_timeout_s: float = 600.0) -> None:
    """How vLLM engines are built in this process."""
    _vllm_options.update(settings=settings, server_url=server_url, server_timeout_s=server_timeout_s)


def make_sampler(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, sampling: Sampling, engine: str = "auto"):
    """The sampler of `engine`: rlvr's own ('auto', 'static', 'transformers'), an in-process vLLM
    ('vllm') or a vLLM server ('vllm_server')."""
    if engine == "vllm":
        return VLLMSampler(model, tokenizer, sampling, _vllm_options.get("settings"))
    if engine == "vllm_server":
        return ServerSampler(model, tokenizer, sampling, _vllm_options.get("server_url", ""), _vllm_options.get("server_timeout_s", 600.0))
    return Sampler(model, tokenizer, sampling, engine)
