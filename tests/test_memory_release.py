"""fedclust.memory.release_free_memory: memory the C allocator holds free goes back to the system."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fedclust.memory import _MALLOC_TRIM, _MALLOPT, release_free_memory

SRC = Path(__file__).resolve().parents[1] / "src"

# In a fresh interpreter: a freed 8 MiB array raises glibc's mmap threshold, so 100 arrays of 1 MiB
# then come from the heap; all but the last are freed, which leaves ~99 MiB of free heap pages below
# a block still in use, counted in the resident memory until trimmed.
FRAGMENT = """
import os, numpy as np
from fedclust.memory import release_free_memory
def rss():
    return int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 2**20
base = rss()
big = np.ones(8 * 2**20 // 8); del big
blocks = [np.ones(2**20 // 8) for _ in range(100)]
keep = blocks[-1]; del blocks
held = rss() - base
kept = release_free_memory(above=10 * 2**30)  # under the ceiling: nothing happens
same = rss() - base
released = release_free_memory(above=0)
print(held, same, rss() - base, kept, released)
"""


@pytest.mark.allow_skip(reason="glibc's malloc_trim: Linux with glibc only")
@pytest.mark.skipif(_MALLOC_TRIM is None, reason="no malloc_trim in this C library")
def test_freed_heap_pages_leave_the_resident_memory():
    out = subprocess.run(
        [sys.executable, "-c", FRAGMENT], env={"PYTHONPATH": str(SRC)}, capture_output=True, text=True, check=True
    )
    held, same, after, kept, released = out.stdout.split()
    assert float(held) > 80  # the freed blocks stayed resident: the situation the trim is for
    assert float(same) > 80 and kept == "False"  # resident memory under the ceiling: left alone
    assert float(after) < 20 and released == "True"  # above it: handed back


def test_without_malloc_trim_it_is_a_no_op(monkeypatch):
    import fedclust.memory as memory  # the module whose global the function reads

    monkeypatch.setattr(memory, "_MALLOC_TRIM", None)
    assert release_free_memory() is False


# In a fresh interpreter: the page faults of filling a 64 MiB array a second time, after the first
# one was freed. Without the setting it gets a mapping of its own each time (every page faults
# again); inside large_blocks_kept it reuses the freed heap block (no new faults); after leaving,
# the settled threshold (32 MiB) maps it anew again.
REUSE = """
import resource, numpy as np
from fedclust.memory import large_blocks_kept
def faults_of_second_fill():
    a = np.ones(64 * 2**20 // 8); del a
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    b = np.ones(64 * 2**20 // 8); del b
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
before = faults_of_second_fill()
with large_blocks_kept():
    inside = faults_of_second_fill()
after = faults_of_second_fill()
print(before, inside, after)
"""


@pytest.mark.allow_skip(reason="glibc's mallopt: Linux with glibc only")
@pytest.mark.skipif(_MALLOPT is None, reason="no mallopt in this C library")
def test_large_blocks_are_reused_inside_and_mapped_anew_after():
    out = subprocess.run(
        [sys.executable, "-c", REUSE], env={"PYTHONPATH": str(SRC)}, capture_output=True, text=True, check=True
    )
    before, inside, after = (int(v) for v in out.stdout.split())
    # a mapping of its own: its pages fault in again, at least one fault per 2 MiB (huge pages)
    assert before >= 32
    assert inside <= before // 10  # the freed heap block again: next to no faults
    assert after >= before // 2  # the settled threshold is below 64 MiB: mapped anew


def test_without_mallopt_large_blocks_kept_is_a_no_op(monkeypatch):
    import fedclust.memory as memory  # the module whose global the function reads

    monkeypatch.setattr(memory, "_MALLOPT", None)
    assert memory.keep_large_blocks() is False
    with memory.large_blocks_kept():
        pass
