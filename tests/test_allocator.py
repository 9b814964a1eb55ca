"""run.retain_freed_memory: freed tensor memory is reused without faulting pages in again."""

import platform
import resource
import sys

import pytest
import torch

from rlvr.allocator import retain_freed_memory
from rlvr.config import Config

glibc_only = pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")


def faults_refilling(megabytes: int, times: int) -> int:
    """Page faults taken by allocating, filling and freeing a tensor of this size `times` times."""
    for _ in range(times):  # the first few may fault either way, while the heap grows to fit the aligned block
        torch.empty(megabytes * 2**18).fill_(1.0)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(times):
        torch.empty(megabytes * 2**18).fill_(1.0)  # 2**18 floats = 1 MiB
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def fault_granule() -> int:
    """Bytes one first-touch fault maps: a huge page where the kernel backs every mapping with them."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            if "[always]" in f.read():
                return 2 * 2**20
    except OSError:
        pass
    return resource.getpagesize()


@glibc_only
def test_freed_blocks_are_reused_without_page_faults():
    faults_per_block = 16 * 2**20 // fault_granule()
    try:
        assert retain_freed_memory(False)
        assert faults_refilling(16, 10) >= 5 * faults_per_block  # mapped afresh each time: every page faults
        assert retain_freed_memory(True)
        assert faults_refilling(16, 10) < faults_per_block  # one block, reused from the heap
    finally:
        retain_freed_memory(Config().run.retain_freed_memory)


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
