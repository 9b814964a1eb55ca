"""What can end or steer a completion besides EOS: stop strings, and a thinking budget.

Both work on token ids inside the decoding loop (rollout/generate.py), for every row of a batch at
once and on either engine: a row's state lives in tensors indexed by its batch row, so compaction
(finished rows leaving the batch) needs nothing from them.

Stop strings end a row when its generated tokens end with the string's own tokenization (exact for
character-level tokenizers; a BPE tokenizer may spell the same text with other tokens, which then
does not stop the row). The stop string stays in the completion, as EOS does, so a model trained on
such completions learns to emit it.

A thinking budget (Qwen3's, and s1's budget forcing, Muennighoff et al. 2025): once a row has
written B tokens inside its think block (after `open`, before `close`), the next tokens are forced
to be `forced` (the closing tag, with an optional cue before or after it), and the model goes on
from there to answer. Forced tokens are never counted as thoughts. Tokens the model writes after the block are never counted, so a budget larger
than a row's natural thinking changes nothing, and forcing never starts inside the answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import PreTrainedTokenizerBase


def token_ids(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    ids = tokenizer.encode(text, add_special_tokens=False)
    if not ids:
        raise ValueError(f"{text!r} encodes to no tokens")
    return ids


def encode_stops(tokenizer: PreTrainedTokenizerBase, stops: list[str]) -> list[list[int]]:
    """Each stop string's token ids (what a row's generated tokens must end with to stop)."""
    return [token_ids(tokenizer, s) for s in stops]


def ends_with(tokens_BT: torch.Tensor, rows_A: torch.Tensor, t: int, seq: list[int], start_A: torch.Tensor | None = None) -> torch.Tensor:
    """(A,) whether row rows_A[a]'s tokens up to position t end with `seq` (all of it generated at
    or after start_A[a], when given)."""
    L = len(seq)
    if t + 1 < L:
        return torch.zeros(len(rows_A), dtype=torch.bool, device=tokens_BT.device)
    tail = tokens_BT[rows_A, t - L + 1 : t + 1]
    hit = (tail == torch.tensor(seq, device=tokens_BT.device)).all(dim=1)
    return hit if start_A is None else hit & (start_A <= t - L + 1)


@dataclass
class ThinkingBudget:
    """Per-row budgets of thinking tokens, and the decoding-time state that enforces them.

    `budget_B`: each completion row's budget (-1: none). `open_B`: whether the row's prompt already
    opened the block (a template that ends in `<think>`). `forced`: the tokens written when the
    budget is spent (they contain the closing tag)."""

    open_ids: list[int]
    close_ids: list[int]
    forced: list[int]
    budget_B: torch.Tensor
    open_B: torch.Tensor  # (B,) bool
    thought_B: torch.Tensor = field(init=False)  # thinking tokens so far
    inside_B: torch.Tensor = field(init=False)  # the block is open
    forcing_B: torch.Tensor = field(init=False)  # index into `forced` of the next forced token; -1: not forcing
    started_B: torch.Tensor = field(init=False)  # position where the current block's content began
    forced_BT: torch.Tensor | None = field(init=False, default=None)  # True where a token was forced

    def __post_init__(self) -> None:
        L = len(self.close_ids)
        if not any(self.forced[i : i + L] == self.close_ids for i in range(len(self.forced) - L + 1)):
            raise ValueError("the forced tokens must contain the closing tag, or the block never closes")
        device = self.budget_B.device
        self.thought_B = torch.zeros_like(self.budget_B)
        self.inside_B = self.open_B.clone().bool()
        self.forcing_B = torch.where(self.inside_B & (self.budget_B == 0), 0, -1)  # a budget of 0: close at once
        self.started_B = torch.zeros_like(self.budget_B)
        self.forced_BT = None
        self._device = device

    def steer(self, next_A: torch.Tensor, rows_A: torch.Tensor, t: int, max_new_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The tokens to write at position t (the sampled ones, except where a row is being forced),
        and which rows were forced."""
        if self.forced_BT is None:
            self.forced_BT = torch.zeros((len(self.budget_B), max_new_tokens), dtype=torch.bool, device=self._device)
        step_A = self.forcing_B[rows_A]
        forced_A = step_A >= 0
        if not bool(forced_A.any()):
            return next_A, forced_A
        forced = torch.tensor(self.forced, device=next_A.device)
        next_A = torch.where(forced_A, forced[step_A.clamp(min=0)], next_A)
        self.forced_BT[rows_A[forced_A], t] = True
        finished = forced_A & (step_A + 1 >= len(self.forced))
        self.forcing_B[rows_A] = torch.where(forced_A, torch.where(finished, -1, step_A + 1), step_A)
        return next_A, forced_A

    def observe(self, tokens_BT: torch.Tensor, rows_A: torch.Tensor, t: int, live_A: torch.Tensor, forced_A: torch.Tensor) -> None:
        """Update each live row's block state with the token written at t (`forced_A`: it was forced);
        schedule forcing for the rows whose budget is now spent."""
        inside_A = self.inside_B[rows_A]
        closed_A = inside_A & ends_with(tokens_BT, rows_A, t, self.close_ids, self.started_B[rows_A])
        opened_A = ~inside_A & ends_with(tokens_BT, rows_A, t, self.open_ids)
        thought_A = self.thought_B[rows_A] + (inside_A & ~closed_A & ~forced_A & live_A).long()
        # a closing tag the model wrote itself: its first tokens were counted as thoughts, uncount them
        thought_A = torch.where(closed_A & ~forced_A, thought_A - (len(self.close_ids) - 1), thought_A)
        inside_A = (inside_A & ~closed_A) | opened_A
        started_A = torch.where(opened_A, t + 1, self.started_B[rows_A])
        budget_A, idle_A = self.budget_B[rows_A], self.forcing_B[rows_A] < 0
        # a closing tag of several tokens the model is in the middle of writing: let it finish (or break off) first
        pending_A = torch.zeros_like(inside_A)
        for k in range(1, len(self.close_ids)):
            pending_A |= inside_A & ends_with(tokens_BT, rows_A, t, self.close_ids[:k], started_A)
        spent_A = inside_A & idle_A & live_A & ~pending_A & (budget_A >= 0) & (thought_A >= budget_A)
        self.thought_B[rows_A], self.inside_B[rows_A], self.started_B[rows_A] = thought_A, inside_A, started_A
        self.forcing_B[rows_A] = torch.where(spent_A, 0, self.forcing_B[rows_A])
