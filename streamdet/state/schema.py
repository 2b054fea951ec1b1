"""What the state holds, and its byte encodings.

- grams:  gram (8 bytes, big-endian)  -> posting: the docnos holding it (uint64 LE each),
          or COMMON once more than m documents held it (sticky, SPEC §1 exception).
          Postings may still list docnos of withdrawn document versions; readers drop them
          with the dead set, writers prune them.
- docs:   docno -> DocState: size, patch grams with their foreign sources, last result.
- names:  docno -> server and URL of a live document version (sources need both).
- urls:   URL   -> current docno and the URL's event sequence number.
- dead:   docno -> b"" for every withdrawn (re-fetched) version.
- meta:   parameters, input positions, the docno counter.
"""

from __future__ import annotations

import heapq
import struct
from dataclasses import dataclass

import numpy as np

COMMON = "common"  # posting marker: the gram had more than m documents
Posting = tuple[int, ...] | str

_COMMON_BYTES = b"\x00"
_DOC_HEADER = struct.Struct("<QIIIIB")
_URL_ENTRY = struct.Struct("<QQ")


def u64key(n: int) -> bytes:
    return n.to_bytes(8, "big")


def u64keys(values: np.ndarray) -> list[bytes]:
    """The 8-byte big-endian keys of many uint64 values (gram keys of the overlay)."""
    blob = np.asarray(values, dtype=np.uint64).astype(">u8").tobytes()
    return [blob[i : i + 8] for i in range(0, len(blob), 8)]


def key_u64(b: bytes) -> int:
    return int.from_bytes(b, "big")


def encode_posting(p: Posting) -> bytes:
    if p == COMMON:
        return _COMMON_BYTES
    return struct.pack(f"<{len(p)}Q", *p)


def decode_posting(b: bytes) -> Posting:
    if b == _COMMON_BYTES:
        return COMMON
    return struct.unpack(f"<{len(b) // 8}Q", b)


@dataclass
class Cover:
    """A document's last computed result: its greedy cover and quilted flag."""

    sources: tuple[tuple[str, int], ...] = ()
    quilted: bool = False
    n_patch: int = 0
    n_grams: int = 0
    docnos: tuple[int, ...] = ()  # the sources' document versions, aligned with `sources`

    @property
    def patch_fraction(self) -> float:
        return self.n_patch / self.n_grams if self.n_grams else 0.0


class DocState:
    """One live document version as the doc role keeps it.

    Its patch grams (2 <= |docs(g)| <= m) sit in numbered slots, and each *foreign* holder
    of any of them has a bitmask over the slots: everything a greedy cover needs (one AND
    and popcount per source and step), kept current by deltas from the gram role, so
    re-scoring never reads the gram index and never rebuilds the masks. Freed slots (a gram
    that went common) are reused.
    """

    __slots__ = ("n_grams", "slots", "pos", "free", "masks", "result")

    def __init__(self, n_grams: int, slots: list[int] | None = None,
                 masks: dict[int, int] | None = None, result: Cover | None = None,
                 free: list[int] | None = None) -> None:
        self.n_grams = n_grams
        self.slots: list[int] = slots or []
        self.masks: dict[int, int] = masks or {}
        self.result = result or Cover()
        self.free: list[int] = free or []  # a heap (ascending order is one)
        if self.free:  # a freed slot still holds its old gram, which may live elsewhere
            live = np.ones(len(self.slots), dtype=bool)
            live[self.free] = False
            at = np.flatnonzero(live)
            self.pos = dict(zip(np.asarray(self.slots, dtype=np.uint64)[at].tolist(),
                                at.tolist(), strict=True))
        else:
            self.pos = dict(zip(self.slots, range(len(self.slots)), strict=True))

    @property
    def n_patch(self) -> int:
        return len(self.pos)

    @property
    def patch_fraction(self) -> float:
        return self.n_patch / self.n_grams if self.n_grams else 0.0

    def patch_grams(self) -> list[int]:
        return list(self.pos)

    def bits(self, grams: list[int]) -> int:
        """The slot bitmask of those of `grams` that are patch grams (a delta delivered
        twice may name grams that have gone meanwhile)."""
        b = 0
        pos = self.pos
        for g in grams:
            i = pos.get(g)
            if i is not None:
                b |= 1 << i
        return b

    def gain(self, grams: list[int]) -> None:
        """New patch grams, in free slots first (grams it has already are left alone, so
        a delta delivered twice changes nothing)."""
        for g in grams:
            if g in self.pos:
                continue
            if self.free:
                i = heapq.heappop(self.free)  # lowest free slot: layout independent of history
                self.slots[i] = g
            else:
                i = len(self.slots)
                self.slots.append(g)
            self.pos[g] = i

    def lose(self, grams: list[int]) -> None:
        """Patch grams no more: their slots are cleared in every mask and freed."""
        clear = ~self.bits(grams)
        for g in grams:
            i = self.pos.pop(g, None)
            if i is not None:
                heapq.heappush(self.free, i)
        self.masks = {s: m & clear for s, m in self.masks.items() if m & clear}

    def add_source(self, source: int, bits: int) -> None:
        if bits:
            self.masks[source] = self.masks.get(source, 0) | bits

    def drop_source(self, source: int, bits: int) -> None:
        m = self.masks.get(source, 0) & ~bits
        if m:
            self.masks[source] = m
        else:
            self.masks.pop(source, None)

    def foreign_patch_grams(self) -> int:
        """How many patch grams some foreign document also holds."""
        union = 0
        for m in self.masks.values():
            union |= m
        return union.bit_count()


def encode_doc(d: DocState) -> bytes:
    """Canonical bytes: the same document state gives the same bytes, whatever the order
    its sources arrived in. Layout: header, slots (u64), occupied-slot bitmap, sources
    (u64, ascending), one mask per source, cover docnos (u64), cover URL and count text."""
    n_slots = len(d.slots)
    mask_len = (n_slots + 7) // 8
    occupied = np.ones(mask_len * 8, dtype=bool)
    occupied[d.free] = False
    occupied[n_slots:] = False
    cover = "\x00".join(f"{u}\x01{n}" for u, n in d.result.sources).encode("utf-8")
    order = sorted(d.masks)
    masks = d.masks
    return b"".join((
        _DOC_HEADER.pack(d.n_grams, n_slots, len(order), len(d.result.docnos), len(cover),
                         d.result.quilted),
        np.asarray(d.slots, dtype="<u8").tobytes(),
        np.packbits(occupied, bitorder="little").tobytes(),
        np.asarray(order, dtype="<u8").tobytes(),
        b"".join([masks[s].to_bytes(mask_len, "little") for s in order]),
        np.asarray(d.result.docnos, dtype="<u8").tobytes(),
        cover,
    ))


def decode_doc(b: bytes) -> DocState:
    n_grams, n_slots, n_src, n_docnos, n_cover, quilted = _DOC_HEADER.unpack_from(b)
    mask_len = (n_slots + 7) // 8
    off = _DOC_HEADER.size
    slots = np.frombuffer(b, dtype="<u8", count=n_slots, offset=off).tolist()
    off += 8 * n_slots
    occupied = np.unpackbits(np.frombuffer(b, dtype=np.uint8, count=mask_len, offset=off),
                             bitorder="little")[:n_slots]
    free = np.flatnonzero(occupied == 0).tolist()
    off += mask_len
    sources = np.frombuffer(b, dtype="<u8", count=n_src, offset=off).tolist()
    off += 8 * n_src
    view = memoryview(b)
    from_bytes = int.from_bytes
    masks = {s: from_bytes(view[o : o + mask_len], "little")
             for s, o in zip(sources, range(off, off + n_src * mask_len, mask_len or 1),
                             strict=True)}
    off += n_src * mask_len
    docnos = tuple(np.frombuffer(b, dtype="<u8", count=n_docnos, offset=off).tolist())
    off += 8 * n_docnos
    cover_text = b[off : off + n_cover].decode("utf-8")
    result_sources = tuple(
        (u, int(n)) for u, n in (item.split("\x01") for item in cover_text.split("\x00"))
    ) if cover_text else ()
    d = DocState(n_grams, slots, masks, None, free)
    d.result = Cover(result_sources, bool(quilted), d.n_patch, n_grams, docnos)
    return d


def encode_name(server: str, url: str) -> bytes:
    return f"{server}\x00{url}".encode()


def decode_name(b: bytes) -> tuple[str, str]:
    server, url = b.decode("utf-8").split("\x00", 1)
    return server, url


def encode_url_entry(docno: int, seq: int) -> bytes:
    return _URL_ENTRY.pack(docno, seq)


def decode_url_entry(b: bytes) -> tuple[int, int]:
    return _URL_ENTRY.unpack(b)
