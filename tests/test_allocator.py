"""adapters.allocator: large blocks mapped on their own, whatever was freed before, and a
margin kept free at the top of the heap."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# glibc's allocator statistics (mallinfo2), in a probe run by a fresh interpreter
MALLINFO = textwrap.dedent("""
    import ctypes, sys
    from streamdet.adapters import allocator
    class Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks",
                    "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = Info
""")

# In a fresh interpreter: free an 8 MB block (glibc then raises its mapping threshold to
# 8 MB), and report whether a 2 MB block allocated after it is a mapping of its own
# (mallinfo2's hblkhd, bytes in mappings, grows by it) or comes from the heap.
PROBE = MALLINFO + textwrap.dedent("""
    if sys.argv[1] == "fixed":
        assert allocator.tune_allocator()
    big = bytearray(8 << 20)
    del big
    before = libc.mallinfo2().hblkhd
    block = bytearray(2 << 20)
    print(libc.mallinfo2().hblkhd - before >= 2 << 20)
""")


def _run(script: str, mode: str) -> subprocess.CompletedProcess:
    """`script` run with `mode` in a fresh interpreter."""
    return subprocess.run([sys.executable, "-c", script, mode], capture_output=True,
                          text=True, check=True)


def _probe(script: str, mode: str) -> str:
    """What `script` prints, run with `mode` in a fresh interpreter."""
    return _run(script, mode).stdout.strip()


def _mapped(mode: str) -> bool:
    return _probe(PROBE, mode) == "True"


def test_a_large_block_is_mapped_on_its_own_after_a_larger_one_was_freed():
    assert not _mapped("glibc")  # glibc's own threshold rose: the block is in the heap
    assert _mapped("fixed")  # tune_allocator holds the threshold at 1 MB


# In a fresh interpreter, with the mapping threshold fixed at 1 MB (as tune_allocator
# fixes it) and with or without the heap's top margin: fill 32 MB of the heap with
# blocks under the threshold, free them all, and report how much free memory the heap
# kept at its top (mallinfo2's keepcost) rather than gave back to the system.
KEPT = MALLINFO + textwrap.dedent("""
    if sys.argv[1] == "padded":
        assert allocator.tune_allocator()
    else:
        assert libc.mallopt(allocator.M_MMAP_THRESHOLD, allocator.MAPPED_BLOCK)
    blocks = [bytearray(512 << 10) for _ in range(64)]
    del blocks
    print(libc.mallinfo2().keepcost)
""")


def test_the_heap_keeps_its_margin_when_a_batchs_blocks_are_freed():
    from streamdet.adapters.allocator import HEAP_PAD

    assert int(_probe(KEPT, "trimmed")) < 1 << 20  # the top went back: faulted in again
    assert int(_probe(KEPT, "padded")) >= HEAP_PAD


# In a fresh interpreter, with the threshold and the margin set (and glibc's own arenas,
# or tune_allocator's one), a thread fills 256 MB with blocks under the threshold and
# frees them all; report the bytes the heaps still hold from the system, over every arena
# (mallinfo2's arena), and the heaps glibc made (malloc_stats names each on stderr).
THREAD_HELD = MALLINFO + textwrap.dedent("""
    import threading
    if sys.argv[1] == "tuned":
        assert allocator.tune_allocator()
    else:
        assert libc.mallopt(allocator.M_MMAP_THRESHOLD, allocator.MAPPED_BLOCK)
        assert libc.mallopt(allocator.M_TOP_PAD, allocator.HEAP_PAD)

    def work():
        blocks = [bytearray(b"\\x01") * (512 << 10) for _ in range(512)]
        del blocks

    t = threading.Thread(target=work)
    t.start()
    t.join()
    print(libc.mallinfo2().arena)
    sys.stdout.flush()
    libc.malloc_stats()
""")


def _thread_heaps(mode: str) -> tuple[int, int]:
    """(bytes the heaps hold, heaps) after THREAD_HELD's thread freed its blocks."""
    out = _run(THREAD_HELD, mode)
    return int(out.stdout), out.stderr.count("Arena ")


def test_a_thread_allocates_from_the_main_heap_which_gives_back_what_is_freed():
    # glibc's default: the thread gets a heap of its own, which the margin keeps from
    # shrinking at all (the main heap's margin is kept, and trimmed beyond: test above)
    held, heaps = _thread_heaps("arenas")
    assert heaps == 2 and held >= 256 << 20
    # tune_allocator: one heap, the main one, for every thread
    _, heaps = _thread_heaps("tuned")
    assert heaps == 1
