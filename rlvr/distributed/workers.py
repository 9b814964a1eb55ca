"""The Ray backend's workers, as plain classes (ray_learner.py turns them into actors).

A `RolloutWorker` holds a copy of the policy and samples slices of generation rounds with rlvr's
own engine; a `RewardWorker` scores a slice as soon as it is sampled. Neither keeps state that a
restart would lose: every sampling request names the weight version it must use (and carries a
reference to those weights in Ray's object store, or, when weights travel by collective, None:
a restarted worker then says it lacks them, `WeightsMissing`, and the driver re-forms the group
and sends them), and every slice is seeded by its prompts' places in the round (rollout.seeding =
"group"). So when Ray restarts a killed worker and retries its calls, in whatever order, the
redone work is the work that was lost, token for token.

The policy reaches a worker as a `PolicySpec` (its config, its LoRA config) and its packed
tensors, never as a pickled module: the worker builds the same architecture on its own device
without allocating random weights, and takes the driver's tensors, dtypes included.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, fields
from typing import Any

import torch

from rlvr.checkpoint import fault_point
from rlvr.config import Config
from rlvr.data import Example
from rlvr.distributed.weight_sync import WeightSyncError, WeightSyncGroup
from rlvr.errors import UsageError
from rlvr.learner import group_generators
from rlvr.reward import Scores, build_reward_terms, close_reward_terms, score_completions
from rlvr.rollout import Rollouts, ToolSettings, completion_id_lists, make_sampler
from rlvr.runtime import apply_run_settings, forward_precision


def trainable_weights(policy: torch.nn.Module) -> dict[str, torch.Tensor]:
    """What an update changes: every parameter when training full weights, only the adapters
    under LoRA. Tied parameters appear once (named_parameters drops duplicates). Views of the live
    parameters (CPU) or copies (GPU): pack them at once."""
    return {name: p.detach().cpu() for name, p in policy.named_parameters() if p.requires_grad}


def pack_weights(weights: dict[str, torch.Tensor]) -> dict[str, tuple[str, tuple[int, ...], Any]]:
    """Weights as raw byte arrays (numpy), with dtype and shape: Ray stores numpy arrays with one
    copy into shared memory and hands readers zero-copy views, where a pickled torch tensor is
    copied on both sides (measured in bench/distributed.py). Raw bytes keep bf16, which numpy lacks."""
    return {name: (str(t.dtype).removeprefix("torch."), tuple(t.shape), t.contiguous().reshape(-1).view(torch.uint8).numpy())
            for name, t in weights.items()}


def unpack_weights(packed: dict[str, tuple[str, tuple[int, ...], Any]]) -> dict[str, torch.Tensor]:
    import warnings

    with warnings.catch_warnings():  # the object store's arrays are read-only; they are only read from
        warnings.simplefilter("ignore", UserWarning)
        return {name: torch.from_numpy(raw).view(getattr(torch, dtype)).reshape(shape) for name, (dtype, shape, raw) in packed.items()}


def weights_nbytes(packed: dict[str, tuple[str, tuple[int, ...], Any]]) -> int:
    return sum(raw.nbytes for _, _, raw in packed.values())


def load_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Copy `weights` (parameters or buffers, by name; any subset) into the model."""
    params = dict(model.named_parameters()) | dict(model.named_buffers())
    missing = set(weights) - set(params)
    if missing:
        raise KeyError(f"weights for parameters this worker's model lacks: {sorted(missing)[:5]}")
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value)


class WeightsMissing(RuntimeError):
    """A rollout worker was asked to sample with weights it does not hold and cannot fetch (weights
    travel by collective, and this worker restarted since the last broadcast, or one broke off)."""


class RebuildError(UsageError):
    """A rollout worker's model, rebuilt from the policy's config, lacks tensors the policy has (or has others)."""


@dataclass(frozen=True)
class PolicySpec:
    """What a rollout worker builds its copy of the policy from, besides the tensors: plain
    configuration objects. A pickled module would be copied whole on both sides of the object
    store and unpickled by every worker on a node, each into its own host copy."""

    config: Any  # the transformers config (policy.config; of the base model under LoRA)
    dtype: str  # the dtype the model is built in; any tensor the policy holds in another (LoRA under bf16) is converted on load
    lora: Any | None  # the peft config of the policy's adapter, None for a plain transformers model
    adapter: str  # the adapter's name in peft
    generation_config: Any | None
    training: bool  # the policy's mode (dropout): the worker's copy starts in the same
    trust_remote_code: bool


def policy_spec(policy: torch.nn.Module, trust_remote_code: bool = False) -> PolicySpec:
    """The spec of a transformers causal LM, or of a peft model with one adapter over one."""
    peft_config = getattr(policy, "peft_config", None)
    lora, adapter = None, "default"
    if peft_config:
        if len(peft_config) != 1:
            raise RebuildError(f"the policy has {len(peft_config)} peft adapters ({sorted(peft_config)}); Ray workers rebuild one")
        adapter, lora = next(iter(peft_config.items()))
    base = policy.get_base_model() if lora is not None else policy
    return PolicySpec(base.config, str(base.dtype).removeprefix("torch."), lora, adapter, getattr(base, "generation_config", None),
                      policy.training, trust_remote_code)


def initial_tensors(policy: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter (tied ones once) and every buffer, persistent or not (rotary frequencies
    included, so the worker computes nothing of its own): views (CPU) or copies (GPU)."""
    return {name: t.detach().cpu() for name, t in [*policy.named_parameters(), *policy.named_buffers()]}


def build_policy(spec: PolicySpec, tensors: dict[str, torch.Tensor], device: str) -> torch.nn.Module:
    """The policy rebuilt from its spec on `device`, holding exactly `tensors` (names, dtypes, values)."""
    model = policy_skeleton(spec, tensors)
    model.to_empty(device=device)
    # to_empty gives every module a tensor of its own: tied weights (the head = the embeddings) must share one again
    (model.get_base_model() if spec.lora is not None else model).tie_weights()
    held = dict(model.named_parameters()) | dict(model.named_buffers())
    with torch.no_grad():
        for name, value in tensors.items():
            held[name].copy_(value)
    return model


def policy_skeleton(spec: PolicySpec, tensors: dict[str, torch.Tensor]) -> torch.nn.Module:
    """The policy rebuilt from its spec on the meta device (no memory, no random init), each
    parameter and buffer in the dtype and shape of its entry in `tensors`, which must name exactly
    what it holds. A sharded learner shards this before any memory is allocated (learner_rank.py)."""
    from transformers import AutoModelForCausalLM  # heavy: imported where a worker builds its model

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(spec.config, dtype=getattr(torch, spec.dtype), trust_remote_code=spec.trust_remote_code)
        if spec.lora is not None:
            from peft import get_peft_model  # heavy: only for LoRA policies

            model = get_peft_model(model, spec.lora, adapter_name=spec.adapter)
    held = dict(model.named_parameters()) | dict(model.named_buffers())
    missing, extra = sorted(set(tensors) - set(held)), sorted(set(held) - set(tensors))
    if missing or extra:
        raise RebuildError(f"the rollout worker's model, rebuilt from the policy's config, does not match the policy: it lacks "
                           f"{missing[:5]} and has {extra[:5]} besides (an architecture transformers' from_config cannot rebuild?)")
    for name, value in tensors.items():
        t = held[name]
        if t.shape != value.shape:
            raise RebuildError(f"the rollout worker's rebuilt model holds {name} as {tuple(t.shape)}, the policy as {tuple(value.shape)}")
        if t.dtype != value.dtype:  # e.g. peft keeps LoRA adapters in fp32 under a bf16 model: the policy's dtype wins
            t.data = torch.empty(value.shape, dtype=value.dtype, device="meta")
    if spec.generation_config is not None:
        model.generation_config = spec.generation_config
    return model.train(spec.training)


def rollouts_to_dict(r: Rollouts) -> dict[str, Any]:
    """Plain tensors and numbers (a checkpoint's trainer state loads with weights_only=True)."""
    return {f.name: getattr(r, f.name) for f in fields(r)}


def rollouts_from_dict(d: dict[str, Any]) -> Rollouts:
    return Rollouts(**d)


class StartedActor:
    """An actor whose constructor keeps its error for `ready` to raise: raised from a constructor,
    Ray would report only that the actor died, and lose the error's type (a ConfigError must stay one)."""

    init_error: BaseException | None = None

    def ready(self) -> dict[str, Any]:
        import ray

        if self.init_error is not None:
            raise self.init_error
        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(), "threads": torch.get_num_threads()}


class RolloutWorker(StartedActor):
    """Samples slices of generation rounds from its copy of the policy."""

    def __init__(self, spec: PolicySpec, weights: dict, tokenizer, cfg: Config, threads: int, device: str) -> None:
        """`weights`: pack_weights(initial_tensors(policy)), fetched by Ray from the object store."""
        # An error here is kept for ready() to raise: raised from a constructor, Ray would report
        # only that the actor died, and lose the error's type (a ConfigError must stay one).
        self.init_error: BaseException | None = None
        self.weight_group: WeightSyncGroup | None = None  # joined by join_weight_group when weights travel by collective
        self.weight_generation: int | None = None
        try:
            apply_run_settings(cfg, threads)  # process-wide settings, as the driver sets them for itself
            self.model, self.tokenizer, self.cfg = build_policy(spec, unpack_weights(weights), device), tokenizer, cfg
            self.version: int | None = 0  # the initial model is version 0; None while a load is under way
            self.sampler = make_sampler(self.model, tokenizer, cfg.rollout.sampling(), cfg.distributed.rollout_engine or cfg.rollout.engine,
                                        tools=ToolSettings.from_config(cfg.rollout), data_cfg=cfg.data)
            self.generator = torch.Generator(device=device)  # unused under group seeding; generate() wants one
        except Exception as err:  # noqa: BLE001 - re-raised by ready()
            self.init_error = err

    def load(self, version: int, weights: list) -> float:
        """Take weights `version` (weights = [an ObjectRef], so Ray hands over the reference and
        the worker fetches only when it needs to). Returns the seconds it took (0 when current)."""
        if version == self.version:
            return 0.0
        if weights[0] is None:
            raise WeightsMissing(f"rollout worker (pid {os.getpid()}) holds weight version {self.version}, was asked for {version}, and "
                                 "weights travel by collective: it must be sent them")
        import ray

        t0 = time.perf_counter()
        self.version = None  # a load that fails half-way leaves weights of no version
        try:
            load_weights(self.model, unpack_weights(ray.get(weights[0])))
        finally:  # even a load that broke off changed the model: an engine holding a copy refreshes it before sampling
            self.sampler.weights_changed()
        self.version = version
        return time.perf_counter() - t0

    def join_weight_group(self, address: str, rank: int, world: int, generation: int, timeout_s: float) -> None:
        """Join generation `generation` of the source's weight group (weight_sync.py) as `rank`."""
        import ray

        if self.weight_group is not None:
            self.weight_group.close()
        self.weight_group = None
        self.weight_group = WeightSyncGroup.receiver(address, rank, world, self.model, generation, timeout_s,
                                                     bind_ip=ray.util.get_node_ip_address())
        self.weight_generation = generation

    def weight_group_generation(self) -> int | None:
        """The weight group this worker is in (None: none; a restarted worker is in none)."""
        return self.weight_generation if self.weight_group is not None else None

    def receive_weights(self, version: int, generation: int) -> float:
        """Take weights `version` from the source's broadcast (which the driver starts with this
        call); returns the seconds it took, waiting for the source included."""
        if self.weight_group is None or generation != self.weight_generation:
            raise WeightsMissing(f"rollout worker (pid {os.getpid()}) is in weight group {self.weight_group_generation()}, not {generation}")
        t0 = time.perf_counter()
        self.version = None  # a broadcast that breaks off leaves weights of no version
        try:
            self.weight_group.receive(self.model)
        except WeightSyncError:
            self.weight_group = None  # closed by the failure: the driver forms a new one
            raise
        finally:  # whatever arrived is in the model now: an engine holding a copy refreshes it before sampling
            self.sampler.weights_changed()
        self.version = version
        return time.perf_counter() - t0

    def held_weights(self) -> dict[str, tuple[str, tuple[int, ...], Any]]:
        """This worker's parameters, packed (what the driver compares in tests and checks by hand)."""
        return pack_weights({name: p.detach().cpu() for name, p in self.model.named_parameters()})

    def generate(self, prompts: list[str], round_index: int, first: int, version: int, weights: list,
                 examples: list[Example] | None = None) -> dict[str, Any]:
        """G completions of each of `prompts`, the prompts first .. first+len-1 of round `round_index`
        (`examples`: theirs, which a multi-turn sampler needs: their rows reset the environments)."""
        load_s = self.load(version, weights)
        fault_point("rollout_generate")
        t0 = time.perf_counter()
        device = next(self.model.parameters()).device
        generators = group_generators(self.cfg.run.seed, round_index, len(prompts), device, first=first)
        with forward_precision(self.cfg, device):
            sampled = self.sampler.sample(prompts, self.cfg.rollout.group_size, self.generator, generators, examples=examples)
        rollouts, texts = sampled.rollouts, sampled.texts
        rollouts = Rollouts(*(v.cpu() if isinstance(v, torch.Tensor) else v for v in (getattr(rollouts, f.name) for f in fields(rollouts))))
        out = {"rollouts": rollouts_to_dict(rollouts), "texts": texts, "generate_s": time.perf_counter() - t0, "load_s": load_s,
               "pid": os.getpid(), "version": version}
        if sampled.trace is not None:  # the conversations travel with their environments (get_reward reads their state)
            _check_travels(sampled.trace.environments)
            out["trace"] = sampled.trace
        return out


def _check_travels(environments: list | None) -> None:
    """An environment goes from the rollout worker to the reward worker and the driver (its get_reward, TRL's
    `environments=`): one Ray cannot serialise (a lock, a client, an open file) is named here, not as Ray's bare
    pickling error."""
    if not environments:
        return
    import ray

    kinds = {type(e): e for e in environments if e is not None}
    for kind, one in kinds.items():
        try:
            ray.cloudpickle.dumps(one)
        except Exception as err:  # noqa: BLE001 - whatever the serialiser raises
            raise UsageError(
                f"rollout.environment: a {kind.__qualname__} instance cannot travel between Ray processes ({type(err).__name__}: "
                f"{err}); with distributed.backend = 'ray' an environment must be picklable after its rollout (hold plain "
                "state; open clients and locks in its methods, or define __getstate__)") from None


class RewardWorker:
    """Scores slices of completions with the run's reward terms (built here, sandboxes included)."""

    def __init__(self, cfg: Config) -> None:
        self.init_error: BaseException | None = None  # kept for ready(), as in RolloutWorker
        self.cfg, self.terms = cfg, []
        try:
            torch.set_num_threads(1)
            self.terms = build_reward_terms(cfg.reward)  # e.g. the code sandbox's preflight, on this node
        except Exception as err:  # noqa: BLE001 - re-raised by ready()
            self.init_error = err

    def ready(self) -> dict[str, Any]:
        if self.init_error is not None:
            raise self.init_error
        return {"pid": os.getpid()}

    def score(self, sampled: dict[str, Any], prompts: list[str], examples: list[Example],
              prompt_messages: list | None) -> dict[str, Any]:
        """Scores of one sampled slice (`sampled`: a RolloutWorker.generate result), rows in order."""
        fault_point("reward_score")
        t0 = time.perf_counter()
        rollouts = rollouts_from_dict(sampled["rollouts"])
        trace = sampled.get("trace")
        scores = score_completions(
            self.terms, self.cfg.reward, trace.prompts if trace is not None else prompts, sampled["texts"], examples,
            rollouts.lengths_B.tolist(), self.cfg.rollout.max_new_tokens,
            prompt_messages=trace.prompt_messages if trace is not None else prompt_messages, completion_ids=completion_id_lists(rollouts),
            trace=trace, group_size=self.cfg.rollout.group_size,
        )
        return {"scores": scores, "verify_s": time.perf_counter() - t0, "pid": os.getpid()}

    def close(self) -> None:
        close_reward_terms(self.terms)


def merge_scores(parts: list[Scores]) -> Scores:
    return parts[0] if len(parts) == 1 else Scores.merge(parts)

