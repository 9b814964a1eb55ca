"""The one sampling path: formatted prompts in, G completions of each out, under one `Sampling`.

RL rollouts (`learner.LocalLearner` and Ray's `RolloutWorker`), held-out evaluation and
rejection sampling all sample through a `Sampler`: it turns the Sampling's stop strings and
thinking budget into this tokenizer's tokens once, encodes each batch of prompts (left-padded),
runs `generate` on the chosen engine and decodes the completions. What comes back, `Completions`,
is what every caller scores (reward terms take its prompts, texts, lengths and completion ids).

`rollout.samplers.make_sampler` picks the class by engine: this one for rlvr's engines ('auto',
'static', 'transformers'), `VLLMSampler` (rollout/vllm_sampler.py) for an in-process vLLM engine,
`ServerSampler` (rollout/vllm_server.py) for a vLLM server. Each has the `sample` verb returning
`Completions`, `sample_ids` (prompts as token ids, each with its own most new tokens: the turns of
a conversation, rollout/multiturn.py, which wraps any of them), and `weights_changed`, which the
learner calls after it changed the policy's weights (a vLLM engine holds a copy of them; rlvr's
engine reads the policy itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.rollout.controls import ThinkingBudget, encode_stops, token_ids
from rlvr.rollout.generate import Rollouts, completion_id_lists, decode_completions, encode_prompts, generate, pad_left
from rlvr.sampling import InvalidSampling, Sampling


@dataclass
class Completions:
    """G completions of each of N prompts: rows g*G .. g*G+G-1 answer prompt g."""

    prompts: list[str]  # the formatted prompt of every row
    rollouts: Rollouts
    texts: list[str]  # the decoded completions, without EOS or padding (a conversation: the model's own turns)
    trace: Any = None  # multi-turn rollouts: their conversations, tool calls and environments (rollout.multiturn.ToolTrace)

    @property
    def lengths(self) -> list[int]:
        """Each completion's tokens, EOS included."""
        return self.rollouts.lengths_B.tolist()

    def completion_ids(self) -> list[list[int]]:
        """Each completion's token ids (TRL's `completion_ids` column)."""
        return completion_id_lists(self.rollouts)


def opens_thinking(prompt: str, open_tag: str, close_tag: str) -> bool:
    """Whether a formatted prompt leaves a thinking block open, so thinking starts at once (Qwen3's
    template ends in "<think>\\n").

    >>> opens_thinking("Q: 2+2?<think>\\n", "<think>", "</think>"), opens_thinking("<think></think>Q", "<think>", "</think>")
    (True, False)
    """
    return prompt.rfind(open_tag) > prompt.rfind(close_tag)


class Sampler:
    """Samples from `model` under `sampling` on rlvr's engine (`engine`: rollout.engine)."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, sampling: Sampling, engine: str = "auto") -> None:
        self.model, self.tokenizer, self.sampling, self.engine = model, tokenizer, sampling, engine
        self.stops = encode_stops(tokenizer, list(sampling.stop))
        budget = sampling.budget
        self.budget_ids = None
        if budget is not None:
            try:  # before any decoding: the tags as this tokenizer spells them
                self.budget_ids = token_ids(tokenizer, budget.open), token_ids(tokenizer, budget.close), token_ids(tokenizer, budget.forced)
                self._thinking([], 1, torch.device("cpu"))
            except ValueError as err:
                raise InvalidSampling("budget", f"{budget.forced!r} with this tokenizer: {err}") from None

    def weights_changed(self) -> None:
        """Nothing to do: rlvr's engine decodes with the policy's own weights."""

    def rest(self) -> None:
        """Nothing to free before an update: rlvr's engine holds no memory between samplings."""

    def sample(self, prompts: list[str], group_size: int = 1, generator: torch.Generator | None = None,
               generators: list[torch.Generator] | None = None, examples: list | None = None) -> Completions:
        """`group_size` completions of each prompt, drawn from `generator`, or each prompt's from its
        own of `generators` (rollout.seeding = "group"); greedy ones need neither."""
        tokenizer = self.tokenizer
        device = next(self.model.parameters()).device
        ids, mask = encode_prompts(tokenizer, prompts, device)  # each prefilled once, shared by its G samples
        rollouts = generate(self.model, ids, mask, self.sampling, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
                            generator=generator, generators=generators, group_size=group_size, engine=self.engine,
                            stops=self.stops, thinking=self._thinking(prompts, group_size, device))
        return Completions([p for p in prompts for _ in range(group_size)], rollouts, decode_completions(tokenizer, rollouts))

    def sample_ids(self, prompt_ids: list[list[int]], group_size: int = 1, generator: torch.Generator | None = None,
                   generators: list[torch.Generator] | None = None, limits: list[int] | None = None) -> Rollouts:
        """`sample` on prompts given as token ids (a conversation's later turns continue from exactly
        the tokens it holds, never from re-tokenized text). `limits`: each prompt's most new tokens
        (at most sampling.max_new_tokens), shared by its `group_size` rows."""
        device = next(self.model.parameters()).device
        ids, mask = pad_left(prompt_ids, self.tokenizer.pad_token_id, device)
        limits_B = None if limits is None else torch.tensor(limits, dtype=torch.long, device=device).repeat_interleave(group_size)
        return generate(self.model, ids, mask, self.sampling, eos_id=self.tokenizer.eos_token_id, pad_id=self.tokenizer.pad_token_id,
                        generator=generator, generators=generators, group_size=group_size, engine=self.engine, stops=self.stops,
                        limits_B=limits_B)

    def _thinking(self, prompts: list[str], group_size: int, device: torch.device) -> ThinkingBudget | None:
        """The per-row thinking-budget state of a batch, when the sampling has a budget."""
        budget = self.sampling.budget
        if budget is None:
            return None
        open_ids, close_ids, forced_ids = self.budget_ids
        open_B = torch.tensor([opens_thinking(p, budget.open, budget.close) for p in prompts for _ in range(group_size)],
                              dtype=torch.bool, device=device)
        return ThinkingBudget(open_ids, close_ids, forced_ids, torch.full((len(open_B),), budget.tokens, device=device), open_B)

