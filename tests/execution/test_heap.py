"""The heap the voxanon command keeps: a thread's large freed block stays mapped for reuse, not unmapped to be
mapped and faulted in again."""
from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux" or platform.libc_ver()[0] != "glibc",
                                reason="the heap settings are glibc's")

# In a fresh process (the settings must come before any thread allocates): a thread fills a 100 MB block and
# frees it, three times; the resident memory (MB) above the start after each time.
RESIDENT_AFTER_EACH_FILL = """
import json, os, sys, threading
import numpy as np
from voxanon.pipeline.execution import heap

if sys.argv[1] == "kept":
    heap.share_one_heap()
    heap.reuse_freed_memory(every_block=True)

def resident_mb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

start = resident_mb()
after = []

def fill_three_times():
    for _ in range(3):
        block = np.ones(100 << 20, dtype=np.uint8)
        del block
        after.append(resident_mb() - start)

thread = threading.Thread(target=fill_three_times)
thread.start()
thread.join()
print(json.dumps(after))
"""


def resident_after_each_fill(heap: str) -> list[float]:
    done = subprocess.run([sys.executable, "-c", RESIDENT_AFTER_EACH_FILL, heap], check=True, capture_output=True,
                          text=True)
    return json.loads(done.stdout)


def test_a_threads_large_freed_block_stays_for_the_next_with_the_kept_heap():
    after = resident_after_each_fill("kept")
    assert min(after) >= 95           # kept mapped, its pages faulted in once
    assert max(after) < 100 + 95      # and reused: the second and third fill took no more


def test_glibcs_default_unmaps_it_each_time():
    # What the settings are for: without them each fill maps the block afresh and faults its pages in again.
    assert max(resident_after_each_fill("default")) < 20


def test_the_commands_that_transcribe_share_one_heap_and_training_does_not(monkeypatch, tmp_path):
    from voxanon.pipeline.cli import main
    from voxanon.pipeline.execution import heap

    calls = []
    monkeypatch.setattr(heap, "share_one_heap", lambda: calls.append(True))
    missing = str(tmp_path / "missing")
    # Each command stops at its first input check, after its heap setting (which comes before any work).
    assert main(["evaluate", "--orig", missing, "--anon", missing, "--out", str(tmp_path / "evaluation")]) == 2
    assert main(["benchmark", "--systems", "b2", "--data", missing, "--out", str(tmp_path / "benchmark")]) == 2
    assert len(calls) == 2
    assert main(["train", "asv", "--data", missing, "--out", str(tmp_path / "asv")]) == 2
    assert len(calls) == 2
