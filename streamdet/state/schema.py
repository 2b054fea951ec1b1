"""What the state holds, and its byte encodings.

- grams:  gram (8 bytes, big-endian)  -> posting: the docnos holding it (uint64 LE each),
          or COMMON once more than m documents held it (sticky, SPEC §1 exception).
          Postings may still list docnos of withdrawn document versions; readers drop them
          with the withdrawn set, writers prune them.
- docs:   docno -> DocState snapshot: size, foreign sources with their slot masks, result.
- docdelta: docno -> what changed since the snapshot: the sources whose masks changed
          (an empty mask: the source is gone), the slot count and the last result. Most
          re-scores of an earlier document add one foreign source (a new page sharing some
          of its text), and a stream of small batches re-scores each document again and
          again: rewriting all of its ~100 masks each time was the doc shard's largest
          cost. A delta is rewritten while it stays small; then the snapshot is.
- slots:  docno -> the DocState's patch-gram slots, a key of its own because most
          re-scores change sources but not the patch set: only changed slots are rewritten.
- names:  docno -> server and URL of a live document version (sources need both).
- urls:   URL   -> current docno and the URL's event sequence number.
- dead:   docno -> b"" for every withdrawn (re-fetched) version (the code calls this set
          `withdrawn`; "dead" in the table name is kept so existing states open).
- meta:   parameters, input positions, the docno counter.
"""

from __future__ import annotations

import heapq
import struct
import sys
from array import array
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from .maskcodec import decode_masks, encode_masks
from .slot_index import SlotIndex

COMMON = "common"  # posting marker: the gram had more than m documents
Posting = tuple[int, ...] | str

_COMMON_BYTES = b"\x00"
_DOC_HEADER = struct.Struct("<QIIIIB")  # ..., result flag: 0, 1 (quilted) or _STALE
_STALE = 2  # the result's cover was not computed (DocResult.stale)
_URL_ENTRY = struct.Struct("<QQ")
_BIG_ENDIAN = sys.byteorder == "big"
DELTA_MIN_SOURCES = 8  # a delta may always hold this many changed sources ...
DELTA_SHARE = 4  # ... or up to 1/DELTA_SHARE of the document's sources


def u64key(n: int) -> bytes:
    return n.to_bytes(8, "big")


def u64keys(values: np.ndarray) -> list[bytes]:
    """The 8-byte big-endian keys of many uint64 values (gram keys of the overlay).
    Items of an 8-byte void dtype come out as bytes, 7x faster than slicing one blob (an
    "S8" view would strip trailing zero bytes)."""
    return np.asarray(values, dtype=np.uint64).astype(">u8").view("V8").tolist()


def prefix_end(prefix: bytes) -> bytes:
    """The least key greater than every key that starts with `prefix` (not all 0xff)."""
    head = prefix.rstrip(b"\xff")
    return head[:-1] + bytes([head[-1] + 1])


def key_u64(b: bytes) -> int:
    return int.from_bytes(b, "big")


def _posting_struct(n: int) -> struct.Struct:
    """The codec of an n-holder posting (compiled once per length, not once per call)."""
    codec = _POSTING_STRUCTS.get(n)
    if codec is None:
        codec = _POSTING_STRUCTS[n] = struct.Struct(f"<{n}Q")
    return codec


_POSTING_STRUCTS: dict[int, struct.Struct] = {}


def encode_posting(p: Posting) -> bytes:
    if p == COMMON:
        return _COMMON_BYTES
    return _posting_struct(len(p)).pack(*p)


def decode_posting(b: bytes) -> Posting:
    if b == _COMMON_BYTES:
        return COMMON
    return _posting_struct(len(b) // 8).unpack(b)


HOLDER_GROUPS = 64  # distinct holder tuples past which holder_bits builds one bit matrix
# Slots past which a mask is set in a numpy row and packed: each `b |= 1 << i` copies the
# whole mask so far, and the deltas of a shared passage name hundreds of slots at once.
MASK_BY_LOOP = 48


@dataclass
class DocResult:
    """A document's last computed result: its greedy cover and quilted flag."""

    sources: tuple[tuple[str, int], ...] = ()
    quilted: bool = False
    n_patch: int = 0
    n_grams: int = 0
    docnos: tuple[int, ...] = ()  # the sources' document versions, aligned with `sources`
    # the sources' encoding, kept once made: an unchanged cover is the same object
    blob: bytes | None = field(default=None, compare=False, repr=False)
    # True: the cover was not computed (no sources kept). Only for a document below theta
    # that is not quilted: no event can come of its cover, so re-scoring leaves it to be
    # computed when read (engine.docs.current); most re-scored documents are such.
    stale: bool = False

    def sources_bytes(self) -> bytes:
        """The sources as stored: URL and count, joined by control characters."""
        if self.blob is None:
            self.blob = "\x00".join(f"{u}\x01{n}" for u, n in self.sources).encode("utf-8")
        return self.blob

    @property
    def patch_fraction(self) -> float:
        return self.n_patch / self.n_grams if self.n_grams else 0.0


class DocState:
    """One live document version as the doc role keeps it.

    Its patch grams (2 <= |docs(g)| <= m) sit in numbered slots, and each *foreign* holder
    of any of them has a bitmask over the slots: everything a greedy cover needs (one AND
    and popcount per source and step), kept current by deltas from the gram role, so
    re-scoring never reads the gram index and never rebuilds the masks. Freed slots (a gram
    that went common) are reused. `slots_changed` says whether the slots differ from the
    stored ones (see table `slots`); `unsaved` names the sources whose masks changed since
    the stored snapshot (None: the masks as a whole did, or there is no snapshot yet), and
    `has_delta` whether a delta is stored beside the snapshot (see table `docdelta`).
    """

    __slots__ = ("n_grams", "slots", "_index", "free", "masks", "result", "slots_changed",
                 "unsaved", "has_delta")

    def __init__(self, n_grams: int, slots: array | None = None,
                 masks: dict[int, int] | None = None, result: DocResult | None = None,
                 free: list[int] | None = None) -> None:
        self.n_grams = n_grams
        self.slots_changed = slots is None
        self.unsaved: set[int] | None = None if slots is None else set()
        self.has_delta = False
        # Slots are a flat uint64 array, not a list: 8 bytes a slot instead of a pointer to
        # an int object, nothing for the garbage collector to walk, and the codec copies
        # it in one go. The index (gram -> slot) is built from them when first needed.
        self.slots = slots if slots is not None else array("Q")
        self.masks: dict[int, int] = masks or {}
        self.result = result or DocResult()
        self.free: list[int] = free or []  # a heap (ascending order is one)
        self._index: SlotIndex | None = None

    @property
    def index(self) -> SlotIndex:
        """gram -> slot of the patch grams (state.slot_index), built when first needed:
        `fold` drops it again (Txn keeps the documents a batch holds within the memory
        budget that way)."""
        index = self._index
        if index is None:
            index = self._index = SlotIndex(self.slots, self.free)
        return index

    def fold(self) -> None:
        """Drop the gram -> slot index (rebuilt from the slots when next needed); the
        slots, masks and result stay, so a folded document is the same document."""
        self._index = None

    @property
    def folded(self) -> bool:
        return self._index is None

    @property
    def n_patch(self) -> int:
        return len(self.slots) - len(self.free)

    @property
    def patch_fraction(self) -> float:
        return self.n_patch / self.n_grams if self.n_grams else 0.0

    def patch_grams(self) -> list[int]:
        return self.index.grams()

    def bits(self, grams: list[int]) -> int:
        """The slot bitmask of those of `grams` that are patch grams (a delta delivered
        twice may name grams that have gone meanwhile)."""
        return self.mask(self.index.present(grams))

    def mask(self, at: np.ndarray) -> int:
        """The bitmask of slots `at` (as `gain` returns them: a delta's grams are looked
        up once)."""
        if len(at) < MASK_BY_LOOP:
            b = 0
            for i in at.tolist():
                b |= 1 << i
            return b
        row = np.zeros((len(self.slots) + 7) & ~7, dtype=np.uint8)
        row[at] = 1
        return int.from_bytes(np.packbits(row, bitorder="little").tobytes(), "little")

    def holder_bits(self, at: np.ndarray, holders: list[tuple[int, ...]]
                    ) -> dict[int, int]:
        """Each holder's slot bitmask over some of its patch grams, given every gram's
        slot (as `gain` returns them) and holders (an arrival gains hundreds of patch
        grams from tens of holders at once, too many pairs for one `bits` call per
        holder). The grams of a page share few distinct holder tuples (the same copies
        hold a whole passage), so the grams are grouped by tuple and each group's mask is
        made once; many groups go through one bit matrix instead."""
        groups: dict[tuple[int, ...], list[int]] = {}
        last, slots = None, []
        for i, h in zip(at.tolist(), holders, strict=True):
            if h is not last:  # a run of one tuple object needs no hashing (engine.postings)
                last = h
                slots = groups.get(h)
                if slots is None:
                    if len(groups) >= HOLDER_GROUPS:
                        return self._holder_matrix(at, holders)
                    slots = groups[h] = []
            slots.append(i)
        width = (len(self.slots) + 7) // 8
        out: dict[int, int] = {}
        for h, slots in groups.items():
            row = np.zeros(width * 8, dtype=np.uint8)
            row[slots] = 1
            mask = int.from_bytes(np.packbits(row, bitorder="little").tobytes(), "little")
            for y in h:
                out[y] = out.get(y, 0) | mask
        return out

    def _holder_matrix(self, at: np.ndarray, holders: list[tuple[int, ...]]
                       ) -> dict[int, int]:
        """holder_bits as one bit matrix (holders x slots), given the grams' slots."""
        counts = np.fromiter(map(len, holders), dtype=np.intp, count=len(holders))
        n_pairs = int(counts.sum())
        if not n_pairs:
            return {}
        held = np.fromiter(chain.from_iterable(holders), dtype=np.uint64, count=n_pairs)
        sources, row = np.unique(held, return_inverse=True)
        width = (len(self.slots) + 7) // 8
        matrix = np.zeros((len(sources), width * 8), dtype=np.uint8)
        matrix[row, np.repeat(at, counts)] = 1
        blob = np.packbits(matrix, axis=1, bitorder="little").tobytes()
        from_bytes = int.from_bytes
        return {s: from_bytes(blob[i : i + width], "little")
                for s, i in zip(sources.tolist(), range(0, len(blob), width), strict=True)}

    def gain(self, grams: list[int]) -> np.ndarray:
        """New patch grams, in free slots first (grams it has already are left alone, so
        a delta delivered twice changes nothing). Returns every gram's slot (int32), for
        the masks the delta then sets."""
        index = self.index
        at = index.find(grams)
        missing = np.flatnonzero(at < 0).tolist()
        if not missing:
            return at
        self.slots_changed = True
        new: dict[int, int] = {}
        for k in missing:
            g = grams[k]
            i = new.get(g)
            if i is None:  # a gram named twice takes one slot
                i = new[g] = self._take_slot(g)
            at[k] = i
        index.add(list(new), list(new.values()))
        return at

    def _take_slot(self, gram: int) -> int:
        """The lowest free slot (the layout is independent of history), else a new one."""
        if self.free:
            i = heapq.heappop(self.free)
            self.slots[i] = gram
            return i
        self.slots.append(gram)
        return len(self.slots) - 1

    def lose(self, grams: list[int]) -> None:
        """Patch grams no more: their slots are cleared in every mask and freed."""
        clear = ~self.bits(grams)
        freed = self.index.remove(grams)
        if freed:
            for i in freed:
                heapq.heappush(self.free, i)
            self.slots_changed = True
        self.masks = {s: m & clear for s, m in self.masks.items() if m & clear}
        self.unsaved = None

    def add_source(self, source: int, bits: int) -> None:
        if bits:
            self.masks[source] = self.masks.get(source, 0) | bits
            if self.unsaved is not None:
                self.unsaved.add(source)

    def drop_source(self, source: int, bits: int) -> None:
        m = self.masks.get(source, 0) & ~bits
        if m:
            self.masks[source] = m
        else:
            self.masks.pop(source, None)
        if self.unsaved is not None:
            self.unsaved.add(source)

    def delta_fits(self) -> bool:
        """Whether the changes since the snapshot are few enough to store as a delta
        (rewritten whole at every commit, so it must stay a small share of the masks)."""
        return self.unsaved is not None and len(self.unsaved) <= max(
            DELTA_MIN_SOURCES, len(self.masks) // DELTA_SHARE)

    def foreign_patch_grams(self) -> int:
        """How many patch grams some foreign document also holds."""
        union = 0
        for m in self.masks.values():
            union |= m
        return union.bit_count()


def _le_bytes(a: array) -> bytes:
    """The little-endian bytes of a uint64 array."""
    if _BIG_ENDIAN:
        a = array("Q", a)
        a.byteswap()
    return a.tobytes()


def encode_doc(d: DocState) -> bytes:
    """Canonical bytes (the same document state gives the same bytes, whatever the order
    its sources arrived in) of everything but the slots: the snapshot. Layout: header,
    sources (u64, ascending), their masks (maskcodec), cover docnos (u64), cover URL and
    count text."""
    return _encode(d, sorted(d.masks))


def encode_doc_delta(d: DocState) -> bytes:
    """The delta beside a snapshot: the snapshot's layout over the sources changed since
    it was written (an empty mask for a source that is gone)."""
    return _encode(d, sorted(d.unsaved or ()))


def _encode(d: DocState, order: list[int]) -> bytes:
    cover = d.result.sources_bytes()
    masks = d.masks
    return b"".join((
        _DOC_HEADER.pack(d.n_grams, len(d.slots), len(order), len(d.result.docnos),
                         len(cover), _STALE if d.result.stale else d.result.quilted),
        np.asarray(order, dtype="<u8").tobytes(),
        encode_masks([masks.get(s, 0) for s in order], len(d.slots)),
        np.asarray(d.result.docnos, dtype="<u8").tobytes(),
        cover,
    ))


def encode_slots(d: DocState) -> bytes:
    """The slots: grams (u64), then the occupied-slot bitmap."""
    n_slots = len(d.slots)
    occupied = np.ones(n_slots, dtype=bool)
    occupied[d.free] = False
    return _le_bytes(d.slots) + np.packbits(occupied, bitorder="little").tobytes()


def decode_doc(b: bytes, slot_bytes: bytes | None, delta: bytes | None = None) -> DocState:
    """A document from its `docs`, `slots` and `docdelta` values (None: it has none)."""
    n_grams, n_slots, masks, quilted, docnos, cover, blob = _decode(b)
    if delta is not None:  # newer slot count, changed masks and result
        _, n_slots, changed, quilted, docnos, cover, blob = _decode(delta)
        masks.update(changed)
        masks = {s: m for s, m in masks.items() if m}
    slots, free = _decode_slots(slot_bytes or b"", n_slots)
    d = DocState(n_grams, slots, masks, None, free)
    d.result = DocResult(cover, quilted == 1, d.n_patch, n_grams, docnos, blob, quilted == _STALE)
    if delta is not None:
        d.unsaved = set(changed)
        d.has_delta = True
    return d


def _decode(b: bytes) -> tuple[int, int, dict[int, int], int, tuple[int, ...],
                               tuple[tuple[str, int], ...], bytes]:
    """n_grams, n_slots, masks by source, result flag (0, 1 quilted, _STALE), cover docnos,
    cover and its bytes, of a snapshot or a delta."""
    n_grams, n_slots, n_src, n_docnos, n_cover, quilted = _DOC_HEADER.unpack_from(b)
    off = _DOC_HEADER.size
    sources = np.frombuffer(b, dtype="<u8", count=n_src, offset=off).tolist()
    off += 8 * n_src
    mask_list, off = decode_masks(b, off, n_src, n_slots)
    masks = dict(zip(sources, mask_list, strict=True))
    docnos = tuple(np.frombuffer(b, dtype="<u8", count=n_docnos, offset=off).tolist())
    off += 8 * n_docnos
    blob = b[off : off + n_cover]
    cover_text = blob.decode("utf-8")
    cover = tuple(
        (u, int(n)) for u, n in (item.split("\x01") for item in cover_text.split("\x00"))
    ) if cover_text else ()
    return n_grams, n_slots, masks, quilted, docnos, cover, blob


def _decode_slots(b: bytes, n_slots: int) -> tuple[array, list[int]]:
    if len(b) != 8 * n_slots + (n_slots + 7) // 8:
        raise ValueError("a document's slots do not match it")
    slots = array("Q")
    slots.frombytes(b[: 8 * n_slots])
    if _BIG_ENDIAN:
        slots.byteswap()
    occupied = np.unpackbits(np.frombuffer(b, dtype=np.uint8, offset=8 * n_slots),
                             count=n_slots, bitorder="little")
    return slots, np.flatnonzero(occupied == 0).tolist()


def encode_name(server: str, url: str) -> bytes:
    return f"{server}\x00{url}".encode()


def decode_name(b: bytes) -> tuple[str, str]:
    server, url = b.decode("utf-8").split("\x00", 1)
    return server, url


def encode_url_entry(docno: int, seq: int) -> bytes:
    return _URL_ENTRY.pack(docno, seq)


def decode_url_entry(b: bytes) -> tuple[int, int]:
    return _URL_ENTRY.unpack(b)
