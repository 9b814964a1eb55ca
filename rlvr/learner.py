"""The learner: what holds the policy, and the only thing the RL loop touches it through.

The loop (`rlvr/loop.py`) drives any object with the `Learner` verbs: generate completions for
some examples, score them against the reference, update on them with advantages, hand over its
state for a checkpoint, and hand out its weights for synchronisation. `LocalLearner` does all of
it in this process with the policy, the KL reference, the optimizer, the scheduler and the
sampler's RNG. A distributed backend (rollout workers that sync weights from a training worker)
is another class with the same verbs; the loop does not change.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.allocator import allocate_adam_state
from rlvr.checkpoint import fault_point, restore_rng_state, rng_state
from rlvr.config import Config, RolloutConfig
from rlvr.data import Example, chat_prompts, format_prompt
from rlvr.models import reference_for
from rlvr.rollout import Rollouts, decode_completions, encode_prompts, generate
from rlvr.rollout.controls import encode_stops
from rlvr.update import UpdateSettings, rl_update, sequence_kl_to_reference


@dataclass
class Generation:
    """G completions per example, rows g*G .. g*G+G-1 for example g."""

    prompts: list[str]  # the formatted prompt of every row
    rollouts: Rollouts
    texts: list[str]  # the decoded completions
    prompt_messages: list[list[dict[str, str]]] | None = None  # per row, when prompts went through a chat template
    scores: Any = None  # rlvr.reward.Scores when the learner verified them itself (Ray: reward workers), else the loop does


class Learner(Protocol):
    """The verbs the RL loop needs from whatever holds the policy."""

    policy: torch.nn.Module  # what a checkpoint saves (safetensors keeps tied weights tied)
    pad_token_id: int  # pads rollouts of several sampling rounds to one batch
    lookahead: int  # generation rounds it may start ahead of the update (asynchronous rollouts); 0 = none

    def generate(self, examples: list[Example], upcoming: list[list[Example]] = ()) -> Generation:
        """Sample G completions of each example's prompt from the current policy. `upcoming`: the
        examples of the next `lookahead` rounds, which a learner may start sampling now."""
        ...

    def reference_kl(self, rollouts: Rollouts) -> torch.Tensor:
        """(B,) summed per-token KL(policy || reference) of each completion, no graph."""
        ...

    def update(self, rollouts: Rollouts, advantages_B: torch.Tensor, include_B: torch.Tensor) -> dict[str, float]:
        """Optimizer step(s) on the batch; returns the update's metrics."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Optimizer, scheduler and RNG state: with the policy's weights, an exact resume."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def weights(self) -> dict[str, torch.Tensor]:
        """The policy's weights, e.g. to synchronise a rollout worker."""
        ...

    def step_metrics(self) -> dict[str, float]:
        """Metrics of its own since the last call (the Ray backend: worker times, staleness, weight sync)."""
        ...


def group_generators(seed: int, round_index: int, prompts: int, device: torch.device, first: int = 0) -> list[torch.Generator]:
    """One random stream per prompt of a generation round (rollout.seeding = "group"), seeded from
    (run.seed, round, the prompt's place in the round): `first` is the place of the first of the
    `prompts` (a rollout worker given a slice of the round)."""
    return [torch.Generator(device=device).manual_seed(random.Random(f"group:{seed}:{round_index}:{g}").getrandbits(63))
            for g in range(first, first + prompts)]


FUSED_ADAM_DEVICES = ("cpu", "cuda")
FUSED_ADAM_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def new_adamw(params, **kwargs: Any) -> torch.optim.AdamW:
    """torch's AdamW over `params` (tensors or groups), fused where torch has the kernel for every
    parameter's device and dtype, with its state allocated before the first step (allocate_adam_state).

    Fused: one kernel per parameter instead of about ten elementwise passes over it and its two
    moments (0.33 -> 0.09 s a step at SmolLM2's 134.5M parameters on 2 cores; TRL's Trainer fuses
    too). The same update up to float rounding, and the same state (moments, a float step), so a
    checkpoint from either kind loads into the other. torch's load_state_dict would also take the
    saved groups' `fused` flag (a checkpoint from before this choice would turn fusing off for
    the rest of the run): a hook puts this machine's choice back after every load."""
    params = [dict(item, params=list(item["params"])) if isinstance(item, dict) else item for item in params]
    tensors = [p for item in params for p in (item["params"] if isinstance(item, dict) else [item])]
    fused = bool(tensors) and all(p.device.type in FUSED_ADAM_DEVICES and p.dtype in FUSED_ADAM_DTYPES for p in tensors)
    optimizer = torch.optim.AdamW(params, fused=fused or None, **kwargs)

    def keep_kernel(loaded: torch.optim.Optimizer) -> None:
        for group in loaded.param_groups:
            group["fused"] = fused or None
            if fused:
                group["foreach"] = None  # torch refuses fused and foreach together
        if fused:  # the fused kernel reads each step from the parameter's device, as float32
            for param, state in loaded.state.items():
                if "step" in state:
                    state["step"] = state["step"].to(device=param.device, dtype=torch.float32)

    optimizer.register_load_state_dict_post_hook(keep_kernel)
    return allocate_adam_state(optimizer)


def adamw(model: torch.nn.Module, lr: float, betas: tuple[float, float], eps: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW over the trainable parameters (with LoRA: the adapters), with weight decay on matrices
    only: biases and normalisation weights (1-D parameters) do not decay, as in transformers' Trainer."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    if weight_decay == 0.0:  # one group, as checkpoints written before decay groups existed expect
        return new_adamw(trainable, lr=lr, betas=betas, eps=eps, weight_decay=0.0)
    groups = [{"params": [p for p in trainable if p.ndim >= 2], "weight_decay": weight_decay},
              {"params": [p for p in trainable if p.ndim < 2], "weight_decay": 0.0}]
    return new_adamw([g for g in groups if g["params"]], lr=lr, betas=betas, eps=eps)


def lr_factor(schedule: str, warmup: int, total: int):
    """The learning rate's multiplier at optimizer step s: linear warmup over `warmup` steps, then
    constant, or a linear or cosine decay reaching 0 at step `total`."""
    def factor(s: int) -> float:
        if s < warmup:
            return (s + 1) / max(1, warmup)
        if schedule == "constant":
            return 1.0
        progress = min(1.0, (s - warmup) / max(1, total - warmup))
        return 1.0 - progress if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def sample_groups(policy: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, prompts: list[str], rc: RolloutConfig,
                  stops: list[list[int]], generator: torch.Generator, generators: list[torch.Generator] | None) -> tuple[Rollouts, list[str]]:
    """G completions of each (formatted) prompt, and their texts: what a local learner and a Ray
    rollout worker both run."""
    prompt_ids, prompt_mask = encode_prompts(tokenizer, prompts, next(policy.parameters()).device)  # prefilled once, shared by G samples
    rollouts = generate(
        policy, prompt_ids, prompt_mask,
        max_new_tokens=rc.max_new_tokens, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
        temperature=rc.temperature, top_p=rc.top_p, generator=generator, group_size=rc.group_size, engine=rc.engine,
        top_k=rc.top_k, min_p=rc.min_p, stops=stops, generators=generators,
    )
    return rollouts, decode_completions(tokenizer, rollouts)


class LocalLearner:
    """Policy, reference, optimizer, scheduler and sampler in this process.

    The reference is anchored to the policy's weights at construction (none at beta = 0: no
    memory, no forward); with LoRA it is the policy itself with the adapters switched off.
    """

    def __init__(self, policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, cfg: Config) -> None:
        self.policy, self.tokenizer, self.pad_token_id = policy, tokenizer, tokenizer.pad_token_id
        self.rollout_cfg, self.data_cfg, self.algo = cfg.rollout, cfg.data, cfg.algo
        self.settings = UpdateSettings.from_config(cfg)
        self.device = next(policy.parameters()).device
        self.reference = reference_for(policy) if cfg.algo.beta > 0 else None
        trainable = [p for p in policy.parameters() if p.requires_grad]  # with LoRA: the adapters only
        tc = cfg.train
        self.optimizer = adamw(policy, tc.lr, (tc.adam_beta1, tc.adam_beta2), tc.adam_epsilon, tc.weight_decay)
        # The scheduler steps once per optimizer step: num_iterations per RL step.
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_factor(tc.lr_schedule, tc.warmup_steps, tc.steps * cfg.algo.num_iterations))
        self.generator = torch.Generator(device=self.device).manual_seed(cfg.run.seed)
        self.seed, self.rounds = cfg.run.seed, 0  # rounds: generate calls so far (rollout.seeding = "group" seeds by it)
        self.lookahead = 0
        self.stops = encode_stops(tokenizer, cfg.rollout.stop)
        self.gradient_checkpointing = cfg.model.gradient_checkpointing
        if self.gradient_checkpointing:
            policy.gradient_checkpointing_enable()
        policy.train()

    def generate(self, examples: list[Example], upcoming: list[list[Example]] = ()) -> Generation:
        fault_point("generate")
        G = self.rollout_cfg.group_size
        distinct = [format_prompt(self.tokenizer, e, self.data_cfg) for e in examples]
        generators = group_generators(self.seed, self.rounds, len(examples), self.device) if self.rollout_cfg.seeding == "group" else None
        self.rounds += 1
        rollouts, texts = sample_groups(self.policy, self.tokenizer, distinct, self.rollout_cfg, self.stops, self.generator, generators)
        per_row = [e for e in examples for _ in range(G)]
        return Generation([p for p in distinct for _ in range(G)], rollouts, texts, chat_prompts(self.tokenizer, per_row, self.data_cfg))

    def reference_kl(self, rollouts: Rollouts) -> torch.Tensor:
        if self.reference is None:
            raise RuntimeError("no KL reference: algo.beta is 0")
        return sequence_kl_to_reference(
            self.policy, self.reference, rollouts, estimator=self.algo.kl_estimator,
            temperature=self.settings.temperature, micro_batch_size=self.settings.micro_batch_size,
        )

    def update(self, rollouts: Rollouts, advantages_B: torch.Tensor, include_B: torch.Tensor) -> dict[str, float]:
        return rl_update(self.policy, self.optimizer, self.scheduler, rollouts, advantages_B, self.settings,
                         reference=self.reference, include_B=include_B)

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(), "rng": rng_state(self.generator),
                "rounds": self.rounds}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        restore_rng_state(state["rng"], self.generator)
        self.rounds = state.get("rounds", 0)  # absent in checkpoints from before it was recorded

    def weights(self) -> dict[str, torch.Tensor]:
        return self.policy.state_dict()

    def step_metrics(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        if self.gradient_checkpointing:
            self.policy.gradient_checkpointing_disable()
