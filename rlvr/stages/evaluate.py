"""Held-out evaluation: greedy accuracy, per difficulty level, and how the model answers.

Besides accuracy it reports the share of completions that show their work (any text before the
final box) and the mean completion length, so a gain can be traced to a change of behaviour.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.config import DataConfig, EvalConfig
from rlvr.data import Example, chat_prompts, format_prompt
from rlvr.metrics import PhaseBar
from rlvr.rollout import completion_id_lists, decode_completions, encode_prompts, generate
from rlvr.reward import RewardTerm


def shows_work(completion: str) -> bool:
    """True when there is text before the final box (a bare `\\boxed{42}` shows none)."""
    head, sep, _ = completion.rpartition("\\boxed")
    return bool(sep) and bool(head.strip())


@dataclass
class EvalResult:
    accuracy: float
    by_level: dict[str, float]
    shows_work: float
    mean_length: float  # completion tokens, EOS included
    num_problems: int
    missing: int = 0  # verdicts the verifier could not give (scored as wrong)
    samples: list[dict] = field(default_factory=list)

    def summary(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "samples"}


@torch.no_grad()
def evaluate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: list[Example],
    data_cfg: DataConfig,
    cfg: EvalConfig,
    correctness: RewardTerm,
    bar: PhaseBar,
    engine: str = "auto",
) -> EvalResult:
    """Greedy completions of `examples`, judged by the correctness term (`reward.correctness`:
    `rlvr.reward.correctness_term`). A missing verdict (None, error, timeout) counts as wrong and is counted."""
    if cfg.max_problems:
        examples = examples[: cfg.max_problems]
    device = next(model.parameters()).device
    prompts = [format_prompt(tokenizer, e.prompt, data_cfg) for e in examples]
    # Decode similar lengths together: less padding, fewer wasted positions.
    order = sorted(range(len(examples)), key=lambda i: len(prompts[i]))
    correct, worked, lengths = [0.0] * len(examples), [False] * len(examples), [0] * len(examples)
    texts = [""] * len(examples)
    missing = 0
    for start in range(0, len(order), cfg.batch_size):
        rows = order[start : start + cfg.batch_size]
        ids, mask = encode_prompts(tokenizer, [prompts[i] for i in rows], device)
        out = generate(
            model, ids, mask, max_new_tokens=cfg.max_new_tokens, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id, greedy=True,
            engine=engine,
        )
        batch_texts, batch_lengths = decode_completions(tokenizer, out), out.lengths_B.tolist()
        batch = [examples[i] for i in rows]
        verdicts = correctness.score(
            [prompts[i] for i in rows], batch_texts, batch, batch_lengths,
            prompt_messages=chat_prompts(tokenizer, batch, data_cfg), completion_ids=completion_id_lists(out),
        )
        missing += sum(v is None for v in verdicts.values)
        for row, text, length, verdict in zip(rows, batch_texts, batch_lengths, verdicts.values):
            texts[row], lengths[row] = text, length
            correct[row] = verdict or 0.0
            worked[row] = shows_work(text)
        bar.advance()

    levels: dict[str, list[float]] = defaultdict(list)
    for e, c in zip(examples, correct):
        if e.level is not None:
            levels[str(e.level)].append(c)
    n = max(len(examples), 1)
    return EvalResult(
        accuracy=sum(correct) / n,
        by_level={k: sum(v) / len(v) for k, v in sorted(levels.items())},
        shows_work=sum(worked) / n,
        mean_length=sum(lengths) / n,
        num_problems=len(examples),
        missing=missing,
        samples=[
            {"prompt": e.prompt, "completion": t, "answer": e.answer, "reward": c, "level": e.level}
            for e, t, c in zip(examples, texts, correct)
        ],
    )


def num_batches(num_examples: int, cfg: EvalConfig) -> int:
    n = min(num_examples, cfg.max_problems) if cfg.max_problems else num_examples
    return -(-n // cfg.batch_size)
