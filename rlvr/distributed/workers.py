"""The Ray backend's workers, as plain classes (ray_learner.py turns them into actors).

A `RolloutWorker` holds a copy of the policy and samples slices of generation rounds with rlvr's
own engine; a `RewardWorker` scores a slice as soon as it is sampled. Neither keeps state that a
restart would lose: every sampling request names the weight version it must use (and carries a
reference to those weights in Ray's object store), and every slice is seeded by its prompts'
places in the round (rollout.seeding = "group"). So when Ray restarts a killed worker and retries
its calls, in whatever order, the redone work is the work that was lost, token for token.
"""

from __future__ import annotations

import os
import time
from dataclasses import fields
from typing import Any

import torch

from rlvr.checkpoint import fault_point
from rlvr.config import Config
from rlvr.data import Example
from rlvr.learner import group_generators
from rlvr.reward import Scores, build_reward_terms, close_reward_terms, score_completions
from rlvr.rollout import Rollouts, Sampler, completion_id_lists
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
    params = dict(model.named_parameters())
    missing = set(weights) - set(params)
    if missing:
        raise KeyError(f"weights for parameters this worker's model lacks: {sorted(missing)[:5]}")
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value)


def rollouts_to_dict(r: Rollouts) -> dict[str, Any]:
    """Plain tensors and numbers (a checkpoint's trainer state loads with weights_only=True)."""
    return {f.name: getattr(r, f.name) for f in fields(r)}


def rollouts_from_dict(d: dict[str, Any]) -> Rollouts:
    return Rollouts(**d)


class RolloutWorker:
    """Samples slices of generation rounds from its copy of the policy."""

    def __init__(self, model: torch.nn.Module, tokenizer, cfg: Config, threads: int, device: str) -> None:
        # An error here is kept for ready() to raise: raised from a constructor, Ray would report
        # only that the actor died, and lose the error's type (a ConfigError must stay one).
        self.init_error: BaseException | None = None
        try:
            apply_run_settings(cfg, threads)  # process-wide settings, as the driver sets them for itself
            self.model, self.tokenizer, self.cfg = model.to(device), tokenizer, cfg
            self.version = 0  # the initial model is version 0
            self.sampler = Sampler(self.model, tokenizer, cfg.rollout.sampling(), cfg.rollout.engine)
            self.generator = torch.Generator(device=device)  # unused under group seeding; generate() wants one
        except Exception as err:  # noqa: BLE001 - re-raised by ready()
            self.init_error = err

    def ready(self) -> dict[str, Any]:
        import ray

        if self.init_error is not None:
            raise self.init_error
        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(), "threads": torch.get_num_threads()}

    def load(self, version: int, weights: list) -> float:
        """Take weights `version` (weights = [an ObjectRef], so Ray hands over the reference and
        the worker fetches only when it needs to). Returns the seconds it took (0 when current)."""
        if version == self.version:
            return 0.0
        import ray

        t0 = time.perf_counter()
        load_weights(self.model, unpack_weights(ray.get(weights[0])))
        self.version = version
        return time.perf_counter() - t0

    def generate(self, prompts: list[str], round_index: int, first: int, version: int, weights: list) -> dict[str, Any]:
        """G completions of each of `prompts`, the prompts first .. first+len-1 of round `round_index`."""
        load_s = self.load(version, weights)
        fault_point("rollout_generate")
        t0 = time.perf_counter()
        device = next(self.model.parameters()).device
        generators = group_generators(self.cfg.run.seed, round_index, len(prompts), device, first=first)
        with forward_precision(self.cfg, device):
            sampled = self.sampler.sample(prompts, self.cfg.rollout.group_size, self.generator, generators)
        rollouts, texts = sampled.rollouts, sampled.texts
        rollouts = Rollouts(*(v.cpu() if isinstance(v, torch.Tensor) else v for v in (getattr(rollouts, f.name) for f in fields(rollouts))))
        return {"rollouts": rollouts_to_dict(rollouts), "texts": texts, "generate_s": time.perf_counter() - t0, "load_s": load_s,
                "pid": os.getpid(), "version": version}


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
        scores = score_completions(
            self.terms, self.cfg.reward, prompts, sampled["texts"], examples, rollouts.lengths_B.tolist(), self.cfg.rollout.max_new_tokens,
            prompt_messages=prompt_messages, completion_ids=completion_id_lists(rollouts),
        )
        return {"scores": scores, "verify_s": time.perf_counter() - t0, "pid": os.getpid()}

    def close(self) -> None:
        close_reward_terms(self.terms)


def merge_scores(parts: list[Scores]) -> Scores:
    return parts[0] if len(parts) == 1 else Scores.merge(parts)

