"""A document's per-source slot bitmasks as bytes, each distinct mask stored once.

Many foreign sources of a document hold exactly the same of its patch grams (the replicas
of a page on other domains share the same menu and footer lines): on the 20,000-page replay
a document has ~3x as many sources as distinct masks, and the masks were half the bytes
every re-score rewrites. Storing each distinct bitmap once plus a small index per source
cuts them ~3x, and costs less to encode and decode than the bitmaps themselves (one
to_bytes / from_bytes per distinct mask; decoded sources share the int objects).

Layout for n sources (in the caller's order) over S slots: u (u32), the u distinct masks
in order of first use (ceil(S/8) bytes each, little-endian), then n indices into them
(u16 when u < 65536, else u32).
"""

from __future__ import annotations

import struct

import numpy as np

_COUNT = struct.Struct("<I")


def _index_dtype(n_distinct: int) -> np.dtype:
    return np.dtype("<u2") if n_distinct < 1 << 16 else np.dtype("<u4")


def encode_masks(masks: list[int], n_slots: int) -> bytes:
    if not masks:
        return b""
    width = (n_slots + 7) // 8
    distinct: dict[int, int] = {}
    index = [distinct.setdefault(m, len(distinct)) for m in masks]
    return b"".join((
        _COUNT.pack(len(distinct)),
        b"".join([m.to_bytes(width, "little") for m in distinct]),
        np.asarray(index, dtype=_index_dtype(len(distinct))).tobytes(),
    ))


def decode_masks(b: bytes, off: int, n_masks: int, n_slots: int) -> tuple[list[int], int]:
    """The masks encoded at `off`, and the offset just after them."""
    if not n_masks:
        return [], off
    width = (n_slots + 7) // 8
    (n_distinct,) = _COUNT.unpack_from(b, off)
    off += _COUNT.size
    view = memoryview(b)
    from_bytes = int.from_bytes
    distinct = [from_bytes(view[o : o + width], "little")
                for o in range(off, off + n_distinct * width, width)] if width else [0]
    off += n_distinct * width
    dt = _index_dtype(n_distinct)
    index = np.frombuffer(b, dtype=dt, count=n_masks, offset=off).tolist()
    return [distinct[i] for i in index], off + dt.itemsize * n_masks
