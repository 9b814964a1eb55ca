"""Rows into micro-batches, by count or by a budget of padded positions: how RL's update and SFT
cut a batch into forwards whose gradients accumulate to the whole batch's."""

from __future__ import annotations

import torch


def micro_batches(rows: torch.Tensor, size: int) -> list[torch.Tensor]:
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def token_budget_batches(rows: torch.Tensor, seq_lengths: torch.Tensor, max_rows: int, max_tokens: int) -> list[torch.Tensor]:
    """Consecutive runs of `rows` (already sorted by length) whose padded size, rows x longest
    sequence, stays within `max_tokens` (and `max_rows`); a row longer than the budget goes alone.
    Short rows then share a micro-batch by the dozen while long ones are not padded together."""
    if max_tokens <= 0:
        return micro_batches(rows, max_rows)
    out, current, longest = [], [], 0
    lengths = seq_lengths.tolist()  # one device sync, not one per row
    for row in rows.tolist():
        length = lengths[row]
        if current and ((len(current) + 1) * max(longest, length) > max_tokens or len(current) >= max_rows):
            out.append(current)
            current, longest = [], 0
        current.append(row)
        longest = max(longest, length)
    if current:
        out.append(current)
    return [torch.tensor(c, dtype=rows.dtype, device=rows.device) for c in out]
