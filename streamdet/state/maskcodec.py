"""Documents written as per-source slot bitmasks (state formats up to 13 / shards-12), read
as (source, slot) pairs: such a document is rewritten with slot lists (engine.paircodec)
the next time it changes.

Layout for n sources over S slots: u (u32), the u distinct masks in order of first use
(ceil(S/8) bytes each, little-endian), then n indices into them (u16 when u < 65536,
else u32).
"""

from __future__ import annotations

import struct

import numpy as np

_COUNT = struct.Struct("<I")


def _index_dtype(n_distinct: int) -> np.dtype:
    return np.dtype("<u2") if n_distinct < 1 << 16 else np.dtype("<u4")


def decode_mask_pairs(b: bytes, off: int, sources: list[int], n_slots: int
                      ) -> tuple[np.ndarray, np.ndarray, int]:
    """(pair sources, pair slots) of the masks encoded at `off` for `sources` (ascending),
    sorted by (source, slot), and the offset just after them."""
    if not sources:
        return np.zeros(0, np.uint64), np.zeros(0, np.int32), off
    width = (n_slots + 7) // 8
    (n_distinct,) = _COUNT.unpack_from(b, off)
    off += _COUNT.size
    bits = np.unpackbits(np.frombuffer(b, dtype=np.uint8, count=n_distinct * width, offset=off)
                         .reshape(n_distinct, width), axis=1, bitorder="little")[:, :n_slots]
    off += n_distinct * width
    dt = _index_dtype(n_distinct)
    index = np.frombuffer(b, dtype=dt, count=len(sources), offset=off)
    off += dt.itemsize * len(sources)
    row, slot = np.nonzero(bits[index])
    return np.asarray(sources, dtype=np.uint64)[row], slot.astype(np.int32), off
