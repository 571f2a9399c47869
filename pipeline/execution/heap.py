"""glibc's heap as voxanon's processes use it: large freed blocks kept for reuse instead of mapped afresh.

By default glibc maps each allocation of more than a few MB afresh and unmaps it when freed, so a network that
makes large temporaries pays page faults and zeroing for them on every call. A thread other than the main one
allocates from an arena of its own, whose heaps hold at most 64 MB and are unmapped whole once empty, which
costs the same. Elsewhere than Linux with glibc these functions change nothing.
"""
from __future__ import annotations

import ctypes
import platform
import sys

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -3, -4, -8
_LARGEST_MMAP_THRESHOLD = 32 << 20   # glibc refuses more
_NEVER = 2**31 - 1                   # mallopt takes an int


def _glibc() -> ctypes.CDLL | None:
    if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        return None
    return ctypes.CDLL(None)


def share_one_heap() -> None:
    """Every thread that has not allocated yet allocates from the main heap (``M_ARENA_MAX`` 1): called first
    thing by the commands that transcribe with Whisper and train nothing (``evaluate``, ``benchmark``, ``demo``),
    before any thread starts, so that every block of a Whisper replica's thread may then come from that heap
    (:func:`reuse_freed_memory`).

    Why: a thread's own arena cannot hold a block above 64 MB, and it unmaps each of its heaps once empty.
    Whisper tiny.en's encoder makes a 54 MB attention matrix per 30 s window and layer (more for a batch of
    windows), so its replica threads mapped and faulted in their blocks afresh at every layer: 27-29 % of
    their CPU time went to the kernel (perf), 3 % with one heap. Threads of ours allocate few blocks, so they
    hardly wait on each other for the one heap.

    Not for a process that trains: ``train asv``'s ECAPA at batch 32 peaked at 3.47-3.85 GB with one heap
    against 3.33-3.49 GB without (4 runs each, the same step time; benchmarks/train_asv_memory.py's steps), so
    ``train`` and ``challenge`` (which trains its attacker in the process that transcribes) leave it."""
    libc = _glibc()
    if libc is not None:
        libc.mallopt(_M_ARENA_MAX, 1)


def reuse_freed_memory(every_block: bool = False) -> None:
    """Serve allocations up to 32 MB from the heap and keep freed memory there for reuse; with
    ``every_block``, every allocation, however large.

    Every large tensor (HuBERT's first activations, 50 MB for 8 s, the vocoder's) otherwise costs page faults
    and zeroing on every utterance: an out-of-place GELU over a 50 MB tensor took 36 ms, in place 10 ms.
    Measured on one core, 6-10 s utterances: content about 10 % and vocoder about 5 % faster, for about 300 MB
    more resident memory (the peak working set stays mapped). Whisper's transcription (``every_block``, in a
    process that shares one heap): 1.3-1.5x less CPU time, the same transcripts (benchmarks/evaluate.py
    ``--heap-comparison``).

    32 MB is glibc's largest threshold. ``every_block`` is for a process of one thread, or one whose threads
    share the main heap (:func:`share_one_heap`): a thread's own arena cannot grow past 64 MB, and a larger
    block it cannot hold then comes from the main heap, one thread at a time. Set once per process that
    computes; ASV training does not (its peak would grow by a quarter to a half: benchmarks/train_asv_memory.py)."""
    libc = _glibc()
    if libc is None:
        return
    libc.mallopt(_M_MMAP_THRESHOLD, _LARGEST_MMAP_THRESHOLD)   # fixed, no longer raised as blocks are freed
    libc.mallopt(_M_TRIM_THRESHOLD, _NEVER)                    # never give the heap's free top back
    if every_block:
        libc.mallopt(_M_MMAP_MAX, 0)                           # no mappings at all
