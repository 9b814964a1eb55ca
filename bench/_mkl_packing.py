"""Decoding with weights packed for MKL's packed sgemm instead of oneDNN: a benchmark variant,
not a setting (docs/benchmarks.md, "An Intel Xeon, every completion 96 tokens", says why).

`install(rows)` swaps the static engine's `PackedLinear` for `MKLPackedLinear` in this process.
MKL's packing serves one row count (`rows`: prompts x G, what decoding starts with); other row
counts run sgemm on the original weight, the numbers F.linear computes either way. torch
allocates the packing at ~3.9x the weights, a quarter of it written.
"""

from __future__ import annotations

import torch

from rlvr.rollout import engines


def available() -> bool:
    return torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear") and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight")


def install(rows: int) -> None:
    """Every static engine made from now on in this process packs for MKL, for `rows` rows."""
    if not available():
        raise SystemExit("this torch build has no MKL packed sgemm (torch.ops.mkl._mkl_linear)")

    class MKLPackedLinear:
        def __init__(self, linear: torch.nn.Linear):
            self.weight = linear.weight.detach()
            self.bias = linear.bias.detach() if linear.bias is not None else None
            self.packed = torch.ops.mkl._mkl_reorder_linear_weight(self.weight, rows)

        def __call__(self, x: torch.Tensor) -> torch.Tensor:
            return torch.ops.mkl._mkl_linear(x, self.packed, self.weight, self.bias, rows)

    engines.PackedLinear = MKLPackedLinear
