"""glibc's allocator, told to map large blocks on their own, to keep a margin at the top
of one heap that every thread shares, and to give freed memory back to the system when a
process is over its memory budget.

A batch allocates and frees hundreds of MB: decoded records, numpy arrays of grams and
masks, a transaction's dicts. glibc serves a block of at least its mapping threshold by a
mapping of its own, returned at free; but it raises that threshold to the largest such
block freed (up to 32 MB), so after the first batch a batch's arrays come from the heap,
where they leave holes between long-lived blocks that stay resident: the process ratchets
up to the largest heap any batch has made. `tune_allocator` fixes the threshold at 1 MB
(the mapping cost is paid by arrays that big only), which lowers a run's peak.

Fixing the threshold also fixes glibc's trim threshold at 128 KB: whenever the free
memory at a heap's top passes it, the top is returned to the system, and the next
batch's allocations fault the same pages in again (the kernel's time, on the engine's
thread, every batch). So the heaps also keep a
margin of HEAP_PAD at the top (M_TOP_PAD: a heap grows by it beyond a request, and keeps
it when trimmed): the faults fall by most of that, for at most the margin more resident
per heap.

The margin is meant for the main heap only. glibc gives each new thread that allocates a
heap of its own (an arena: up to eight per core), made of 64 MB pieces; it returns such a
piece only when that leaves the margin free, and trims its top only beyond the margin, so
with a 64 MB margin a thread's heap never shrinks: a worker's engine thread, which does
all its rounds' work, would keep its largest round resident. `tune_allocator` therefore
also limits the process to one arena, the main heap, before its threads start: every
thread allocates there (the small blocks of each thread still come from its own cache),
and what a round frees beyond the margin goes back. It must run before any thread
allocates: a thread keeps the arena it first took.

`malloc_trim` gives the free pages of the heaps back, but they are faulted in again by the
next batch: it does not lower the peak, so the heaps are trimmed only after a batch that
leaves the process above its budget. Where glibc is not the C library (musl, macOS)
these do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
M_TOP_PAD, M_MMAP_THRESHOLD, M_ARENA_MAX = -2, -3, -8  # mallopt's parameters (malloc.h)
MAPPED_BLOCK = 1 << 20  # blocks this big and bigger get a mapping of their own
HEAP_PAD = 64 << 20  # free bytes a heap keeps at its top


def _glibc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


_LIBC = _glibc()


def resident_bytes() -> int:
    """This process's resident size (0 where /proc is not there)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def release_free_memory(above: int) -> bool:
    """Give the heaps' free pages back to the system if the process is resident above
    `above` bytes (between batches); whether it did."""
    if _LIBC is None or resident_bytes() <= above:
        return False
    _LIBC.malloc_trim(0)
    return True


def tune_allocator(threshold: int = MAPPED_BLOCK, pad: int = HEAP_PAD) -> bool:
    """From now on, serve blocks of `threshold` bytes and more in this process by mappings
    of their own, so that freeing one returns it, keep `pad` bytes free at the top of the
    heap, and let threads that start allocating from now on share the main heap (see the
    module doc); whether glibc took all three. Called first thing in a process that holds
    a state or analyses pages, before it starts a thread: `streamdet run` and `worker`
    (cli.main), an analysis process."""
    return (_LIBC is not None and bool(_LIBC.mallopt(M_MMAP_THRESHOLD, threshold))
            and bool(_LIBC.mallopt(M_TOP_PAD, pad)) and bool(_LIBC.mallopt(M_ARENA_MAX, 1)))
