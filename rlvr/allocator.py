"""The C allocator's policy for freed memory (Linux with glibc; a no-op elsewhere).

glibc serves blocks above its mmap threshold with a fresh mapping and unmaps them on free, and
gives the heap's free top back to the kernel past its trim threshold. A training step allocates
gigabytes of activations and gradients and frees them at the end; with glibc's defaults much of
that memory goes back to the kernel and every page of it faults in again, zeroed, in the next
step. In a virtual machine a fault costs several microseconds: on SmolLM2-135M (2 cores) a cold
forward + backward of 32 rows spent 15-25 s in the kernel, a warm one under 1 s.

The price is a higher peak: freed blocks that fit no later request stay in the heap (~1 GB more
at SmolLM2's 32-row step, 7.6 against 6.6 GB; docs/benchmarks.md).
"""

from __future__ import annotations

import ctypes
import functools
import platform
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # malloc.h
# glibc refuses an mmap threshold above half its largest heap (HEAP_MAX_SIZE / 2 = 32 MiB on
# 64-bit): bigger blocks (a 49k-vocabulary embedding's gradient) are still mapped per allocation.
RETAINED_MMAP_THRESHOLD = 32 * 1024 * 1024
RETAINED_TRIM_THRESHOLD = 2**31 - 1  # mallopt takes an int: keep up to 2 GiB of free heap top
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
