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
def test_retaining_is_the_default_and_glibc_takes_it():
    assert Config().run.retain_freed_memory is True
    assert retain_freed_memory(True)
