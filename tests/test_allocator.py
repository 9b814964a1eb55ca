"""run.retain_freed_memory: freed tensor memory is reused without faulting pages in again."""

import platform
import resource
import sys

import pytest
import torch

from rlvr.allocator import retain_freed_memory
from rlvr.config import Config

glibc_only = pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")


def fault_granule() -> int:
    """Bytes one first-touch fault maps: a huge page where the kernel backs every mapping with them."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            if "[always]" in f.read():
                return 2 * 2**20
    except OSError:
        pass
    return resource.getpagesize()


FAULTS = """
import resource, sys, torch
from rlvr.allocator import retain_freed_memory
assert retain_freed_memory(sys.argv[1] == "retain")
for _ in range(10):  # the first few may fault either way, while the heap grows to fit the aligned block
    torch.empty(16 * 2**18).fill_(1.0)  # 2**18 floats = 1 MiB
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    torch.empty(16 * 2**18).fill_(1.0)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults_in_a_fresh_process(retain: bool) -> int:
    """Page faults taken by allocating, filling and freeing a 16 MiB tensor 10 times, in a process
    of its own: what ran before in this one (the profiler's memory tracking in tests/test_plan.py)
    changes how its blocks are served."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", FAULTS, "retain" if retain else "default"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.split()[-1])


@glibc_only
def test_freed_blocks_are_reused_without_page_faults():
    faults_per_block = 16 * 2**20 // fault_granule()
    assert faults_in_a_fresh_process(retain=False) >= 5 * faults_per_block  # mapped afresh each time: every page faults
    assert faults_in_a_fresh_process(retain=True) < faults_per_block  # one block, reused from the heap


@glibc_only
def test_a_freed_heap_top_over_2_gib_is_kept():
    """A SmolLM2 step frees more than 2 GiB at once; the largest finite trim threshold (2**31 - 1)
    handed all of it back to the kernel after every step. The blocks come from malloc itself: a
    torch tensor's small bookkeeping allocations sit between blocks and can keep them apart."""
    import ctypes

    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    blocks, size = 68, 31 * 2**20  # 2,108 MiB in heap blocks, each under the 32 MiB mmap threshold

    def fill_and_free() -> int:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        held = [libc.malloc(size) for _ in range(blocks)]
        assert all(held)
        for address in held:
            libc.memset(address, 1, size)
        for address in held:
            libc.free(address)  # they merge into one free top of over 2 GiB
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    try:
        assert retain_freed_memory(True)
        fill_and_free()
        assert fill_and_free() < blocks * size // fault_granule() // 10  # the same memory again, not new pages
    finally:
        retain_freed_memory(Config().run.retain_freed_memory)
        libc.malloc_trim(0)  # give the 2 GiB back: the rest of the suite does not need it


@glibc_only
def test_retaining_is_the_default_and_glibc_takes_it():
    assert Config().run.retain_freed_memory is True
    assert retain_freed_memory(True)
