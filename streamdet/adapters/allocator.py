"""glibc's allocator, told to give freed memory back to the system when a process is over
its memory budget.

A batch allocates and frees hundreds of MB: decoded records, numpy arrays of grams and
masks, a transaction's dicts. glibc keeps what is freed in its heaps for reuse, so the
resident size of a process stays at the largest batch it has seen. `malloc_trim` gives
the free pages back, but they are faulted in again by the next batch: measured on 8,000
replayed pages (`streamdet run`, wall seconds / peak RSS of all processes, one run
each): 110 s / 2,389 MB as glibc has it under `--memory 3GiB`; 123 s / 2,215 MB trimming
after every batch; 137 s / 2,118 MB also fixing glibc's mapping threshold at 1 MB (large
arrays then get a fresh mapping each time). So the heaps are trimmed only after a batch
that leaves the process above its budget, and the threshold is left to glibc. Where glibc
is not the C library (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


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
