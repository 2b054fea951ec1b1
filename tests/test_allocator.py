"""adapters.allocator: large blocks mapped on their own, whatever was freed before."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# In a fresh interpreter: free an 8 MB block (glibc then raises its mapping threshold to
# 8 MB), and report whether a 2 MB block allocated after it is a mapping of its own
# (mallinfo2's hblkhd, bytes in mappings, grows by it) or comes from the heap.
PROBE = textwrap.dedent("""
    import ctypes, sys
    from streamdet.adapters import allocator
    class Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks",
                    "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = Info
    if sys.argv[1] == "fixed":
        assert allocator.map_large_blocks()
    big = bytearray(8 << 20)
    del big
    before = libc.mallinfo2().hblkhd
    block = bytearray(2 << 20)
    print(libc.mallinfo2().hblkhd - before >= 2 << 20)
""")


def _mapped(mode: str) -> bool:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                         check=True)
    return out.stdout.strip() == "True"


def test_a_large_block_is_mapped_on_its_own_after_a_larger_one_was_freed():
    assert not _mapped("glibc")  # glibc's own threshold rose: the block is in the heap
    assert _mapped("fixed")  # map_large_blocks holds the threshold at 1 MB
