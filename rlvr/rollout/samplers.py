"""Which sampler an engine name means (rollout.engine, distributed.rollout_engine).

Every stage that samples (RL's learner, Ray's rollout workers, evaluation, rejection sampling)
builds its sampler here from the engine's name, so a new engine is one more branch here and one
more class with `sample` and `weights_changed`; no caller changes. How vLLM engines are built
(rollout.vllm_*, rollout.server_url) is set once per process by `set_vllm_options`
(runtime.apply_run_settings), as weight packing is: evaluation and rejection sampling know only
the engine's name. Tools likewise (`set_tool_options`): with rollout.tools or an environment every
sampler is a `ToolSampler` (rollout/multiturn.py) over the engine's, and every caller hands
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
_tool_options: dict = {}
PROCESS_TOOLS = object()  # make_sampler's `tools` default: this process's (set_tool_options)


def set_vllm_options(settings: VLLMSettings | None = None, server_url: str = "", server_timeout_s: float = 600.0) -> None:
    """How vLLM engines are built in this process."""
    _vllm_options.update(settings=settings, server_url=server_url, server_timeout_s=server_timeout_s)


def tool_options() -> ToolSettings | None:
    """This process's tool settings (None: single-turn)."""
    return _tool_options.get("settings")


def set_tool_options(settings: ToolSettings | None, data_cfg: DataConfig | None = None) -> None:
    """Whether this process's samplers run conversations with tools (rollout.tools, rollout.environment),
    and the data settings their prompts are rendered with."""
    _tool_options.update(settings=settings, data_cfg=data_cfg)


def make_sampler(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, sampling: Sampling, engine: str = "auto",
                 tools: ToolSettings | None | object = PROCESS_TOOLS, data_cfg: DataConfig | None = None):
    """The sampler of `engine`: rlvr's own ('auto', 'static', 'transformers'), an in-process vLLM
    ('vllm') or a vLLM server ('vllm_server'); wrapped in a `ToolSampler` when the run has tools
    (`tools`: this process's setting unless given; None: single-turn, as an evaluation's no-tool control)."""
    if engine == "vllm":
        inner = VLLMSampler(model, tokenizer, sampling, _vllm_options.get("settings"))
    elif engine == "vllm_server":
        inner = ServerSampler(model, tokenizer, sampling, _vllm_options.get("server_url", ""), _vllm_options.get("server_timeout_s", 600.0))
    else:
        inner = Sampler(model, tokenizer, sampling, engine)
    settings = _tool_options.get("settings") if tools is PROCESS_TOOLS else tools
    if settings is None:
        return inner
    data = data_cfg or _tool_options.get("data_cfg") or DataConfig()
    return ToolSampler(inner, tokenizer, settings, data)
