"""A document's (source, slot) pairs as bytes: each source's slot list, each distinct list
stored once.

Many foreign sources of a document hold exactly the same of its patch grams (the replicas
of a page on other domains share the same menu and footer lines): on the 20,000-page
replay a document has ~3x as many sources as distinct lists. Storing each distinct list
once plus a small index per source keeps a document's record near the size of what its
sources hold apart, and the whole record is linear in its pairs.

Layout for n sources (in the caller's order) over S slots: u (u32), the u distinct lists'
lengths (u32 each), their slots one list after the other (u16 when S <= 65536, else
u32), then n indices into the distinct lists (u16 when u < 65536, else u32). A source
with no pairs has the empty list (a delta's way of saying the source is gone).
"""

from __future__ import annotations

import struct

import numpy as np

from . import pair_kernels
from .sorted_search import locate

_COUNT = struct.Struct("<I")


def _slot_dtype(n_slots: int) -> np.dtype:
    return np.dtype("<u2") if n_slots <= 1 << 16 else np.dtype("<u4")


def _index_dtype(n_distinct: int) -> np.dtype:
    return np.dtype("<u2") if n_distinct < 1 << 16 else np.dtype("<u4")


def encode_pairs(src: np.ndarray, slot: np.ndarray, order: list[int], n_slots: int) -> bytes:
    """The slot lists of the sources in `order`, from pairs sorted by (source, slot); the
    distinct lists are found in one compiled call (pair_kernels.distinct_lists)."""
    if not order:
        return b""
    ids, lengths, lists = pair_kernels.distinct_lists(
        np.ascontiguousarray(src, dtype=np.uint64), np.ascontiguousarray(slot, dtype=np.int32),
        np.asarray(order, dtype=np.uint64))
    return b"".join((_COUNT.pack(len(lengths)), lengths.astype("<u4").tobytes(),
                     lists.astype(_slot_dtype(n_slots)).tobytes(),
                     ids.astype(_index_dtype(len(lengths))).tobytes()))


def lists_end(b: bytes, off: int, n_sources: int, n_slots: int) -> int:
    """The offset just after the lists encoded at `off` for `n_sources` sources, read from
    their header alone (nothing is decoded)."""
    if not n_sources:
        return off
    (n_distinct,) = _COUNT.unpack_from(b, off)
    lengths = np.frombuffer(b, dtype="<u4", count=n_distinct, offset=off + _COUNT.size)
    return (off + _COUNT.size + 4 * n_distinct + _slot_dtype(n_slots).itemsize * int(lengths.sum())
            + _index_dtype(n_distinct).itemsize * n_sources)


def decode_pairs(b: bytes, off: int, sources: list[int], n_slots: int
                 ) -> tuple[np.ndarray, np.ndarray, int]:
    """(pair sources, pair slots) of the lists encoded at `off` for `sources`, in the
    order of `sources` (sorted by (source, slot) when `sources` ascend), and the offset
    just after them (pair_kernels.decode_picked: one call a document)."""
    if not sources:
        return np.zeros(0, np.uint64), np.zeros(0, np.int32), off
    (n_distinct,) = _COUNT.unpack_from(b, off)
    return pair_kernels.decode_picked(
        np.frombuffer(b, dtype=np.uint8), off + _COUNT.size, len(sources),
        np.arange(len(sources), dtype=np.int64), np.asarray(sources, dtype=np.uint64),
        n_distinct, _slot_dtype(n_slots).itemsize, _index_dtype(n_distinct).itemsize)


def decode_some(b: bytes, stored: np.ndarray, wanted: np.ndarray, n_slots: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """(pair sources, pair slots), sorted, of the `wanted` sources (ascending) among the
    lists `b` holds for `stored` (ascending; a wanted source not stored has no pairs):
    only their lists are read."""
    if not len(stored) or not len(wanted):
        return np.zeros(0, np.uint64), np.zeros(0, np.int32)
    at, hit = locate(stored, wanted)
    (n_distinct,) = _COUNT.unpack_from(b, 0)
    src, slot, _ = pair_kernels.decode_picked(
        np.frombuffer(b, dtype=np.uint8), _COUNT.size, len(stored),
        at[hit].astype(np.int64), np.ascontiguousarray(wanted[hit], dtype=np.uint64),
        n_distinct, _slot_dtype(n_slots).itemsize, _index_dtype(n_distinct).itemsize)
    return src, slot


def count_pairs(b: bytes, n_sources: int, n_slots: int) -> int:
    """How many pairs the lists `b` holds for `n_sources` sources (nothing is decoded)."""
    if not n_sources:
        return 0
    (n_distinct,) = _COUNT.unpack_from(b, 0)
    return pair_kernels.count_pairs(np.frombuffer(b, dtype=np.uint8), _COUNT.size, n_sources,
                                    n_distinct, _slot_dtype(n_slots).itemsize,
                                    _index_dtype(n_distinct).itemsize)
