"""Judging sampled completions outside RL: the correctness verdict and every other term's score.

Evaluation and rejection sampling both sample through a `rollout.Sampler` and judge what comes
back here, with the columns RL's reward terms see (TRL's `prompt_messages` and `completion_ids`),
so a term scores a completion the same way in training, evaluation and rejection sampling.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from rlvr.config import DataConfig
from rlvr.data import Example, chat_prompts
from rlvr.reward import Conversation, RewardTerm, routed_verdicts
from rlvr.rollout import Completions


@dataclass
class Judged:
    verdicts: list[float | None]  # the correctness term's, per row (on routed data each row's own term)
    terms: dict[str, list[float | None]]  # every other judged term's, by name


def judge(completions: Completions, examples: list[Example], correctness: RewardTerm, others: list[RewardTerm],
          tokenizer: PreTrainedTokenizerBase, data_cfg: DataConfig) -> Judged:
    """Score every row of `completions` (`examples`: each row's problem) with the correctness term
    and `others`; the verdict of a routed row is its own term's (reward.route_field)."""
    trace = completions.trace  # a tool run: each row's conversation, as RL's reward terms see it
    context = {"prompt_messages": trace.prompt_messages if trace is not None else chat_prompts(tokenizer, examples, data_cfg),
               "completion_ids": completions.completion_ids(), "conversation": Conversation.of(trace)}
    lengths = completions.lengths
    scores = {t.name: t.score(completions.prompts, completions.texts, examples, lengths, **context).values for t in [correctness, *others]}
    verdicts = routed_verdicts(scores, examples, correctness)
    scores.pop(correctness.name)
    return Judged(verdicts, scores)
