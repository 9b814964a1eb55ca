"""The learner: what holds the policy, and the only thing the RL loop touches it through.

The loop (`rlvr/loop.py`) drives any object with the `Learner` verbs: generate completions for
some examples, score them against the reference, update on them with advantages, write and read
its weights and trainer state for a checkpoint, and lend a policy to evaluate. `LocalLearner`
does all of it in this process with the policy, the KL reference, the optimizer, the scheduler
and the sampler's RNG. A distributed backend (rollout workers that sync weights from a training
worker) is another class with the same verbs; the loop does not change.

The learner owns its weights: nothing outside it reads its policy. Weights go to a checkpoint
directory (save_policy/load_policy), not through the caller as tensors, so a learner whose
weights are sharded over processes can write and read its own shards; a policy to evaluate is
lent for the length of a `with` block, so such a learner can gather one and free it after.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.checkpoint import fault_point, load_weights, read_state, restore_rng_state, rng_state, save_weights
from rlvr.config import AlgoConfig, Config
from rlvr.data import Example, chat_prompts, format_prompt
from rlvr.models import reference_for
from rlvr.algorithms import adapt_entropy_coef
from rlvr.optim import new_adamw
from rlvr.rollout import Rollouts, ToolSettings, make_sampler
from rlvr.sharded_checkpoint import is_sharded, load_sharded
from rlvr.update import UpdateSettings, rl_update, sequence_kl_to_reference


@dataclass
class Generation:
    """G completions per example, rows g*G .. g*G+G-1 for example g."""

    prompts: list[str]  # the formatted prompt of every row
    rollouts: Rollouts
    texts: list[str]  # the decoded completions
    prompt_messages: list[list[dict[str, str]]] | None = None  # per row, when prompts went through a chat template
    scores: Any = None  # rlvr.reward.Scores when the learner verified them itself (Ray: reward workers), else the loop does
    trace: Any = None  # multi-turn rollouts: their conversations and tool calls (rollout.ToolTrace), else None


class Learner(Protocol):
    """The verbs the RL loop and the pipeline need from whatever holds the policy."""

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

    def save_policy(self, directory: Path) -> None:
        """Write the policy's weights into a checkpoint directory being built (checkpoint.save_weights' file)."""
        ...

    def load_policy(self, directory: Path) -> None:
        """Load the weights of a complete checkpoint directory. A resume loads them before the trainer state."""
        ...

    def trainer_state(self) -> dict[str, Any]:
        """Optimizer, scheduler and RNG state: with the policy's weights, an exact resume."""
        ...

    def load_trainer_state(self, state: dict[str, Any]) -> None: ...

    def evaluation_policy(self) -> contextlib.AbstractContextManager[torch.nn.Module]:
        """The current policy as a model to generate from, for the length of a `with` block; it
        must not be trained or kept past the block."""
        ...

    def step_metrics(self) -> dict[str, float]:
        """Metrics of its own since the last call (the Ray backend: worker times, staleness, weight sync)."""
        ...

    def recover(self) -> None:
        """After a LearnerLost from one of its verbs: re-form what died, back at the run's first
        weights and trainer state (the loop then loads the last checkpoint, if any, as a resume
        does). Only a learner that can raise LearnerLost is ever asked."""
        ...

    def close(self) -> None:
        """Release what it holds (workers, gradient checkpointing); it runs however the run ends."""
        ...


def row_messages(tokenizer: PreTrainedTokenizerBase, per_row: list[Example], data_cfg, trace: Any) -> list[list[dict]] | None:
    """Each row's prompt as the chat messages reward functions get (TRL's `prompts`): a conversation's own (its
    environment's reset text included), else the example's when it went through a chat template."""
    return trace.prompt_messages if trace is not None else chat_prompts(tokenizer, per_row, data_cfg)


def group_generators(seed: int, round_index: int, prompts: int, device: torch.device, first: int = 0) -> list[torch.Generator]:
    """One random stream per prompt of a generation round (rollout.seeding = "group"), seeded from
    (run.seed, round, the prompt's place in the round): `first` is the place of the first of the
    `prompts` (a rollout worker given a slice of the round)."""
    return [torch.Generator(device=device).manual_seed(random.Random(f"group:{seed}:{round_index}:{g}").getrandbits(63))
            for g in range(first, first + prompts)]


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


@dataclass
class EntropyControl:
    """Adaptive entropy control (algo.entropy_adaptive; Skywork-OR1): the entropy bonus's coefficient now and the
    policy's entropy the last update measured, learner state that a checkpoint keeps. Whoever holds the learner's
    state holds one (LocalLearner; LearnerGroup, in the driver, for its ranks): `settings` gives an update its
    settings, `observe` steps the coefficient from the update's metrics. Off (`entropy_adaptive` false): the
    settings as they are, the metrics untouched."""

    algo: AlgoConfig
    coef: float
    last: float | None = None  # none before the first measurement: counts as at or below the target

    @classmethod
    def start(cls, algo: AlgoConfig) -> EntropyControl:
        return cls(algo, algo.entropy_coef)

    def applied(self) -> float:
        """The bonus's coefficient for the next update: the current one while the last measured entropy is at or
        below the target, else 0."""
        return self.coef if self.last is None or self.last <= self.algo.entropy_target else 0.0

    def settings(self, base: UpdateSettings) -> UpdateSettings:
        """The next update's settings: the applied coefficient, the policy's entropy measured on the way."""
        if not self.algo.entropy_adaptive:
            return base
        return dataclasses.replace(base, loss=dataclasses.replace(base.loss, entropy_coef=self.applied()), measure_entropy=True)

    def observe(self, metrics: dict[str, float]) -> dict[str, float]:
        """After the update `settings` configured: the coefficient's step from its `loss/entropy` (none when
        nothing was forwarded: every advantage 0, nothing measured), and `loss/entropy_coef`, the one it applied."""
        if not self.algo.entropy_adaptive:
            return metrics
        a, applied = self.algo, self.applied()
        measured = metrics.get("loss/entropy")
        if measured is not None:
            self.last = float(measured)
            self.coef = adapt_entropy_coef(self.coef, self.last, a.entropy_target, a.entropy_coef_delta, a.entropy_coef_min,
                                           a.entropy_coef_max)
        return {**metrics, "loss/entropy_coef": applied}

    def state(self) -> dict[str, float | None]:
        return {"coef": self.coef, "last": self.last}

    def load_state(self, state: dict[str, Any] | None) -> None:
        if state is not None:  # absent in checkpoints from before adaptive entropy control existed
            self.coef, self.last = state["coef"], state["last"]


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
        self.teacher = None  # on-policy distillation (distill.on_policy_coef): frozen, beside the policy
        if cfg.distill.on_policy_coef > 0:
            from rlvr.sources import load_teacher  # start-up time: only a distillation run reads a run point or directory for a teacher

            self.teacher = load_teacher(cfg, tokenizer, policy, "distill.on_policy_coef")
        trainable = [p for p in policy.parameters() if p.requires_grad]  # with LoRA: the adapters only
        tc = cfg.train
        self.optimizer = adamw(policy, tc.lr, (tc.adam_beta1, tc.adam_beta2), tc.adam_epsilon, tc.weight_decay)
        # The scheduler steps once per optimizer step: num_iterations per RL step.
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_factor(tc.lr_schedule, tc.warmup_steps, tc.steps * cfg.algo.num_iterations))
        self.generator = torch.Generator(device=self.device).manual_seed(cfg.run.seed)
        self.seed, self.rounds = cfg.run.seed, 0  # rounds: generate calls so far (rollout.seeding = "group" seeds by it)
        self.lookahead = 0
        self.optimizer_loaded = False  # by load_policy, from a checkpoint that learner ranks wrote
        self._sampler, self._sampling, self._engine = None, cfg.rollout.sampling(), cfg.rollout.engine
        self._tools = ToolSettings.from_config(cfg.rollout)  # None: single-turn rollouts
        self.entropy_control = EntropyControl.start(cfg.algo)  # algo.entropy_adaptive: the coefficient, the last entropy
        self.gradient_checkpointing = cfg.model.gradient_checkpointing
        if self.gradient_checkpointing:
            policy.gradient_checkpointing_enable()
        policy.train()

    @property
    def sampler(self):
        """Built on first use: a learner whose rounds Ray rollout workers sample never builds one (a
        vLLM engine would hold a copy of the weights for nothing)."""
        if self._sampler is None:
            self._sampler = make_sampler(self.policy, self.tokenizer, self._sampling, self._engine, tools=self._tools, data_cfg=self.data_cfg)
        return self._sampler

    def _weights_changed(self) -> None:
        if self._sampler is not None:
            self._sampler.weights_changed()

    def generate(self, examples: list[Example], upcoming: list[list[Example]] = ()) -> Generation:
        fault_point("generate")
        G = self.rollout_cfg.group_size
        # A tool run's sampler renders each prompt itself (with its tools and its environment's text): nothing to format here.
        distinct = [] if self._tools is not None else [format_prompt(self.tokenizer, e, self.data_cfg) for e in examples]
        generators = group_generators(self.seed, self.rounds, len(examples), self.device) if self.rollout_cfg.seeding == "group" else None
        self.rounds += 1
        sampled = self.sampler.sample(distinct, G, self.generator, generators, examples=examples)
        per_row = [e for e in examples for _ in range(G)]
        return Generation(sampled.prompts, sampled.rollouts, sampled.texts, row_messages(self.tokenizer, per_row, self.data_cfg, sampled.trace),
                          trace=sampled.trace)

    def reference_kl(self, rollouts: Rollouts) -> torch.Tensor:
        if self.reference is None:
            raise RuntimeError("no KL reference: algo.beta is 0")
        return sequence_kl_to_reference(
            self.policy, self.reference, rollouts, estimator=self.algo.kl_estimator,
            temperature=self.settings.temperature, micro_batch_size=self.settings.micro_batch_size,
        )

    def update(self, rollouts: Rollouts, advantages_B: torch.Tensor, include_B: torch.Tensor) -> dict[str, float]:
        if self._sampler is not None:
            self._sampler.rest()  # a colocated vLLM engine on GPU sleeps through the update
        try:
            settings = self.entropy_control.settings(self.settings)  # algo.entropy_adaptive: the coefficient of the moment
            out = rl_update(self.policy, self.optimizer, self.scheduler, rollouts, advantages_B, settings,
                            reference=self.reference, include_B=include_B, teacher=self.teacher)
            return self.entropy_control.observe(out)
        finally:  # even a failed update may have stepped: a vLLM engine's copy is refreshed before it samples again
            self._weights_changed()

    def save_policy(self, directory: Path) -> None:
        save_weights(directory, self.policy)

    def load_policy(self, directory: Path) -> None:
        """model.safetensors; or the shards learner ranks wrote (a run resumed with learner_workers = 0),
        with the optimizer state, which such a checkpoint keeps beside its weights, not in trainer.pt."""
        if is_sharded(directory):
            read_state(directory)  # refuses an incomplete checkpoint
            load_sharded(directory, self.policy, self.optimizer)
            self.optimizer_loaded = True
        else:
            load_weights(directory, self.policy)
        self._weights_changed()

    def trainer_state(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(), "rng": rng_state(self.generator),
                "rounds": self.rounds, "entropy_control": self.entropy_control.state()}

    def load_trainer_state(self, state: dict[str, Any]) -> None:
        if not self.optimizer_loaded:  # else load_policy loaded it, from a sharded checkpoint
            self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        restore_rng_state(state["rng"], self.generator)
        self.rounds = state.get("rounds", 0)  # absent in checkpoints from before it was recorded
        self.entropy_control.load_state(state.get("entropy_control"))

    @contextlib.contextmanager
    def evaluation_policy(self) -> Iterator[torch.nn.Module]:
        yield self.policy  # generate() switches it to eval mode and back

    def step_metrics(self) -> dict[str, float]:
        return {}

    def recover(self) -> None:
        raise RuntimeError("a learner in one process has no part that can be lost and re-formed (it never raises LearnerLost)")

    def close(self) -> None:
        if self.gradient_checkpointing:
            self.policy.gradient_checkpointing_disable()
