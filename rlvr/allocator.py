"""The C allocator's policy for freed memory (Linux with glibc; a no-op elsewhere).

glibc serves blocks above its mmap threshold with a fresh mapping and unmaps them on free, and
gives the heap's free top back to the kernel past its trim threshold. A training step allocates
gigabytes of activations and gradients and frees them at the end; with glibc's defaults much of
that memory goes back to the kernel and every page of it faults in again, zeroed, in the next
step. In a virtual machine a fault costs several microseconds: on SmolLM2-135M (2 cores) a cold
forward + backward of 32 rows spent 15-25 s in the kernel, a warm one under 1 s.

Adam's moments are allocated before the first step for the same reason (allocate_adam_state).

The price is a higher peak: freed blocks that fit no later request stay in the heap (~1 GB more
at SmolLM2's 32-row step, 7.6 against 6.6 GB; docs/benchmarks.md).
"""

from __future__ import annotations

import ctypes
import functools
import platform
import sys

import torch

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # malloc.h
# glibc refuses an mmap threshold above half its largest heap (HEAP_MAX_SIZE / 2 = 32 MiB on
# 64-bit): bigger blocks (a 49k-vocabulary embedding's gradient) are still mapped per allocation.
RETAINED_MMAP_THRESHOLD = 32 * 1024 * 1024
# Never trim the heap's free top. mallopt takes an int, so 2**31 - 1 would be the largest finite
# threshold, and a SmolLM2 step frees more than 2 GiB at once: the whole top went back to the
# kernel after every step. -1 is mallopt(3)'s documented "disable trimming completely".
RETAINED_TRIM_THRESHOLD = -1
GLIBC_DEFAULT_THRESHOLD = 128 * 1024  # both thresholds' initial values


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    libc = ctypes.CDLL(None)
    return libc if hasattr(libc, "mallopt") else None


def retain_freed_memory(enabled: bool) -> bool:
    """Keep freed blocks (up to 32 MiB each) for reuse, or set glibc's initial thresholds back.
    Returns whether glibc took the setting (False off glibc)."""
    libc = _glibc()
    if libc is None:
        return False
    mmap_threshold = RETAINED_MMAP_THRESHOLD if enabled else GLIBC_DEFAULT_THRESHOLD
    trim_threshold = RETAINED_TRIM_THRESHOLD if enabled else GLIBC_DEFAULT_THRESHOLD
    # mallopt returns 1 on success, 0 when it rejects the value.
    return bool(libc.mallopt(M_MMAP_THRESHOLD, mmap_threshold)) and bool(libc.mallopt(M_TRIM_THRESHOLD, trim_threshold))


def allocate_adam_state(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """Give every parameter its Adam state now (step 0, zero moments: what the first step would make).

    Why: torch allocates the moments lazily in the first optimizer.step(), after the first step's
    activations were freed, so the moments (twice the weights: 1 GB at 135M parameters) land in the
    memory those activations used, and the second step's activations need that much fresh memory:
    page faults that made step 2 seconds slower than step 3 on SmolLM2. Allocated before any
    activation, the moments sit below them and every step reuses the same memory. Results are
    unchanged: a step from this state is the step from a lazily made one (tests/test_loop.py)."""
    state = optimizer.state_dict()  # its "state" is keyed by each parameter's place across the groups, in order
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for index, param in enumerate(params):
        if state["state"].get(index) or not param.requires_grad:  # a frozen weight never gets a gradient, nor lazily a state
            continue
        zeros = [torch.zeros_like(param, memory_format=torch.preserve_format) for _ in range(3 if optimizer.defaults.get("amsgrad") else 2)]
        # torch.tensor(0.0) has the default dtype, as torch's own lazily made (CPU-hosted) step does
        state["state"][index] = {"step": torch.tensor(0.0), "exp_avg": zeros[0], "exp_avg_sq": zeros[1], **(
            {"max_exp_avg_sq": zeros[2]} if len(zeros) == 3 else {})}
    optimizer.load_state_dict(state)
    return optimizer
