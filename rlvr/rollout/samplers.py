"""Which sampler an engine name means (rollout.engine, distributed.rollout_engine).

Every stage that samples (RL's learner, Ray's rollout workers, evaluation, rejection sampling)
builds its sampler here from the engine's name, so a new engine is one more branch here and one
more class with `sample` and `weights_changed`; no caller changes. How vLLM engines are built
(rollout.vllm_*, rollout.server_url) is set once per process by `set_vllm_options`
(runtime.apply_run_settings), as weight packing is: evaluation and rejection sampling know only
the engine's name. Tools are passed by every caller (`tools=`): with rollout.tools or an environment
the sampler is a `ToolSampler` (rollout/multiturn.py) over the engine's, and every caller hands
`sample` its examples as well as its prompts.
"""

from __future__ import annotations

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.config import DataConfig
from rlvr.rollout.multiturn import ToolSampler, ToolSettings
from rlvr.rollout.sampler import Sampler
from rlvr.rollout.vllm_sampler import VLLMSampler, VLLMSettings
from rlvr.rollout.vllm_server import ServerSampler
from rlvr.sampling import Sampling

_vllm_options: dict = {}


def set_vllm_options(settings: VLLMSettings | None = None, server_url: str = "", server_timeout_s: float = 600.0) -> None:
    """How vLLM engines are built in this process."""
    _vllm_options.update(settings=settings, server_url=server_url, server_timeout_s=server_timeout_s)


def make_sampler(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, sampling: Sampling, engine: str = "auto",
                 tools: ToolSettings | None = None, data_cfg: DataConfig | None = None):
    """The sampler of `engine`: rlvr's own ('auto', 'static', 'transformers'), an in-process vLLM
    ('vllm') or a vLLM server ('vllm_server'); wrapped in a `ToolSampler` when the run has tools
    (`tools`: `ToolSettings.from_config(cfg.rollout)`, with the run's `data_cfg`; None: single-turn).
    Passed by every caller, never held by the process: two runs in one process (a recipe's stages, a
    test session) never see each other's tools."""
    if engine == "vllm":
        inner = VLLMSampler(model, tokenizer, sampling, _vllm_options.get("settings"))
    elif engine == "vllm_server":
        inner = ServerSampler(model, tokenizer, sampling, _vllm_options.get("server_url", ""), _vllm_options.get("server_timeout_s", 600.0))
    else:
        inner = Sampler(model, tokenizer, sampling, engine)
    if tools is None:
        return inner
    return ToolSampler(inner, tokenizer, tools, data_cfg or DataConfig())
