"""What the state holds, and its byte encodings.

- grams:  gram (8 bytes, big-endian)  -> posting: the docnos holding it (uint64 LE each),
          or COMMON once more than m documents held it (sticky, SPEC §1 exception).
          Postings may still list docnos of withdrawn document versions; readers drop them
          with the withdrawn set, writers prune them.
- docs:   docno -> DocState snapshot: size, foreign sources with the slots each holds,
          result.
- docdelta: docno -> what changed since the snapshot: the sources whose slots changed
          (an empty list: the source is gone), the slot count and the last result. Most
          re-scores of an earlier document add one foreign source (a new page sharing some
          of its text), and a stream of small batches re-scores each document again and
          again: rewriting all of its ~100 sources each time was the doc shard's largest
          cost. A delta is rewritten while it stays small; then the snapshot is.
- docadds: docno -> a stale document's pending source additions (DocState.defer_add):
          (source, its grams) records, applied to its pairs when it is next read whole.
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

from .budget import DOC_OVERHEAD_BYTES, DOC_SLOT_BYTES, SLOT_INDEX_BYTES
from .maskcodec import decode_mask_pairs
from .paircodec import decode_pairs, encode_pairs, lists_end
from .slot_index import SlotIndex
from .source_pairs import SourcePairs

COMMON = "common"  # posting marker: the gram had more than m documents
Posting = tuple[int, ...] | str

_COMMON_BYTES = b"\x00"
_DOC_HEADER = struct.Struct("<QIIIIB")  # ..., result flag: 0, 1 (quilted) or _STALE
_STALE = 2  # the result's cover was not computed (DocResult.stale)
_PAIRS = 4  # flag bit: sources are slot lists (paircodec), not bitmasks (maskcodec)
_URL_ENTRY = struct.Struct("<QQ")
_BIG_ENDIAN = sys.byteorder == "big"
DELTA_MIN_PAIRS = 64  # a delta may always hold this many pairs ...
DELTA_SHARE = 4  # ... or up to 1/DELTA_SHARE of the document's pairs
_ADD_HEAD = struct.Struct("<QI")  # a pending addition: its source, how many grams follow
# pending additions are settled once their bytes pass this many a slot, plus ADDS_MIN_BYTES
ADDS_PER_SLOT = 16
ADDS_MIN_BYTES = 4096


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
    # computed when read (engine.doc_role.current); most re-scored documents are such.
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

    Its patch grams (2 <= |docs(g)| <= m) sit in numbered slots, and its (source, slot)
    pairs (state.source_pairs) say which *foreign* holder holds which of them: everything
    a greedy cover needs (engine.cover), kept current by deltas from the gram role, so
    re-scoring never reads the gram index. Freed slots (a gram that went common) are
    reused. `slots_changed` says whether the slots differ from the stored ones (see table
    `slots`); `unsaved` names the sources whose pairs changed since the stored snapshot
    (None: the pairs as a whole did, or there is no snapshot yet), and `has_delta` whether
    a delta is stored beside the snapshot (see table `docdelta`).

    A stale document (below theta, not quilted: DocResult.stale) takes a new source's
    grams as they come (`defer_add`) and finds their slots only when its pairs are next
    read whole (`settle_adds`): most of what an arrival does to earlier documents is to
    give a stale one another source, and that then costs neither the gram -> slot index
    nor a rewrite of its pairs. `modified` says whether anything but those additions
    changed since it was stored, `adds_changed` whether they did (table `docadds`).
    """

    __slots__ = ("n_grams", "slots", "_index", "free", "pairs", "_result", "slots_changed",
                 "unsaved", "has_delta", "adds", "adds_changed", "modified")

    def __init__(self, n_grams: int, slots: array | None = None,
                 pairs: SourcePairs | None = None, result: DocResult | None = None,
                 free: list[int] | None = None) -> None:
        self.n_grams = n_grams
        self.slots_changed = slots is None
        self.unsaved: set[int] | None = None if slots is None else set()
        self.has_delta = False
        # Slots are a flat uint64 array, not a list: 8 bytes a slot instead of a pointer to
        # an int object, nothing for the garbage collector to walk, and the codec copies
        # it in one go. The index (gram -> slot) is built from them when first needed.
        self.slots = slots if slots is not None else array("Q")
        self.pairs = pairs if pairs is not None else SourcePairs()
        self._result = result or DocResult()
        self.free: list[int] = free or []  # a heap (ascending order is one)
        self._index: SlotIndex | None = None
        # pending additions: records of (source, n, n grams), as stored; appended in place,
        # so a document that takes source after source copies each addition once
        self.adds = bytearray()
        self.adds_changed = False
        self.modified = slots is None  # a new document is not stored yet

    @property
    def result(self) -> DocResult:
        return self._result

    @result.setter
    def result(self, value: DocResult) -> None:
        """A new result (an unchanged one is the same object: nothing to write)."""
        if value is not self._result:
            self._result = value
            self.modified = True

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
        slots, pairs and result stay, so a folded document is the same document."""
        self._index = None

    @property
    def folded(self) -> bool:
        return self._index is None

    @property
    def weight(self) -> int:
        """Its memory in slot-equivalents, for the budget (budget.DOC_SLOT_BYTES a slot):
        a slot, and a third of one for each 12 bytes of its pairs (a pair unpacked)."""
        return len(self.slots) + (self.pairs.nbytes + len(self.adds)) // 36

    @property
    def resident_weight(self) -> int:
        """What it weighs as it is, for the document cache (state.doc_cache): 8 bytes a
        slot, 12 more for the index unless folded, its pairs, and the result and objects
        around them, in the same DOC_SLOT_BYTES units as `weight`."""
        per_slot = 8 if self._index is None else 8 + SLOT_INDEX_BYTES
        return (per_slot * len(self.slots) + self.pairs.nbytes + len(self.adds)
                + DOC_OVERHEAD_BYTES) // DOC_SLOT_BYTES

    @property
    def held_weight(self) -> int:
        """What it weighs in the transaction that holds it (Txn.held_slots): `weight` once
        it has been worked on (its index built, its pairs unpacked, a new result); as it
        is while only read or given pending additions, which leave it folded and packed -
        most of the documents a batch reaches, so counting those at full weight closed
        batches several times sooner than their memory asked."""
        if self.modified or self._index is not None:
            return self.weight
        return min(self.weight, self.resident_weight)

    @property
    def n_patch(self) -> int:
        return len(self.slots) - len(self.free)

    @property
    def patch_fraction(self) -> float:
        return self.n_patch / self.n_grams if self.n_grams else 0.0

    def patch_grams(self) -> list[int]:
        return self.index.grams()

    def slots_of(self, grams: list[int]) -> np.ndarray:
        """The slots of those of `grams` that are patch grams (a delta delivered twice may
        name grams that have gone meanwhile)."""
        return self.index.present(grams)

    @staticmethod
    def holder_pairs(at: np.ndarray, holders: list[tuple[int, ...]]
                     ) -> tuple[np.ndarray, np.ndarray]:
        """(holder, slot) pairs of grams at slots `at` (as `gain` returns them) held by
        `holders` (a tuple a gram): an arrival gains hundreds of patch grams from tens of
        holders at once."""
        counts = np.fromiter(map(len, holders), dtype=np.intp, count=len(holders))
        n = int(counts.sum())
        src = np.fromiter(chain.from_iterable(holders), dtype=np.uint64, count=n)
        return src, np.repeat(np.asarray(at, dtype=np.int32), counts)

    def gain(self, grams: list[int]) -> np.ndarray:
        """New patch grams, in free slots first (grams it has already are left alone, so
        a delta delivered twice changes nothing). Returns every gram's slot (int32), for
        the pairs the delta then adds."""
        self.settle_adds()
        self.modified = True
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
        """Patch grams no more: their slots' pairs go and the slots are freed."""
        self.settle_adds()  # an addition's grams name the slots of its time
        freed = self.index.remove(grams)
        if freed:
            for i in freed:
                heapq.heappush(self.free, i)
            self.slots_changed = True
            self.pairs.lose(np.asarray(freed, dtype=np.int32))
            self.unsaved = None
            self.modified = True

    def add_pairs(self, src: np.ndarray, slots: np.ndarray) -> None:
        """Pairs (src[i], slots[i]): foreign holders of these slots."""
        self.settle_adds()
        if len(slots):
            self.modified = True
            self.pairs.add(src, slots)
            if self.unsaved is not None:
                self.unsaved.update(src.tolist())

    def add_source(self, source: int, slots: np.ndarray) -> None:
        self.settle_adds()
        if len(slots):
            self.modified = True
            self.pairs.add(source, slots)
            if self.unsaved is not None:
                self.unsaved.add(source)

    def drop_source(self, source: int, slots: np.ndarray) -> None:
        self.settle_adds()
        if len(slots):
            self.modified = True
            self.pairs.drop(source, slots)
            if self.unsaved is not None:
                self.unsaved.add(source)

    def defer_add(self, source: int, grams: list[int]) -> None:
        """`source` also holds these patch grams: kept as they are until the pairs are
        read whole (`settle_adds`), unless the additions outgrow the document's slots (a
        stale document then needs no gram -> slot index, and keeps its stored pairs, as
        it gains source after source). Any other change settles them first, so the grams
        of every pending addition are patch grams at the slots they had when it came."""
        self.adds += _ADD_HEAD.pack(source, len(grams)) + np.asarray(
            grams, dtype="<u8").tobytes()
        self.adds_changed = True
        if len(self.adds) > ADDS_PER_SLOT * len(self.slots) + ADDS_MIN_BYTES:
            self.settle_adds()

    def settle_adds(self) -> None:
        """Apply the pending additions to the pairs (they are then written with them)."""
        if not self.adds:
            return
        src, grams = _decode_adds(self.adds)
        self.adds, self.adds_changed = bytearray(), True
        at = self.index.find(grams)
        held = at >= 0
        self.add_pairs(src[held], at[held])

    def cover_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """Every (source, slot) pair, sorted: the greedy cover's input."""
        self.settle_adds()
        return self.pairs.settled()

    def sources(self) -> np.ndarray:
        """Its foreign sources, ascending (those of pending additions not among them)."""
        return self.pairs.sources()

    def held_before(self, source: int) -> bool:
        """Whether `source` held some of its patch grams before the changes in hand."""
        self.settle_adds()
        return self.pairs.held_before(source)

    def delta_pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The sources changed since the snapshot (ascending) and their pairs, when they
        are few enough to store as a delta (rewritten whole at every commit, so it must
        stay a small share of the snapshot's pairs); None: write a snapshot. Only the
        changed sources' lists are read (SourcePairs.of_sources)."""
        if self.unsaved is None:
            return None
        keys = np.asarray(sorted(self.unsaved), dtype=np.uint64)
        src, slot = self.pairs.of_sources(keys)
        if len(src) > max(DELTA_MIN_PAIRS, self.pairs.base_pairs() // DELTA_SHARE):
            return None
        return keys, src, slot

    def foreign_patch_grams(self) -> int:
        """How many patch grams some foreign document also holds."""
        self.settle_adds()
        return self.pairs.held_slots()


def _decode_adds(raw: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Pending additions' (source, gram) pairs: one source per gram."""
    sources, counts, grams, off = [], [], [], 0
    while off < len(raw):
        source, n = _ADD_HEAD.unpack_from(raw, off)
        off += _ADD_HEAD.size
        sources.append(source)
        counts.append(n)
        grams.append(np.frombuffer(raw, dtype="<u8", count=n, offset=off))
        off += 8 * n
    src = np.repeat(np.asarray(sources, dtype=np.uint64), counts)
    return src, np.concatenate(grams).astype(np.uint64)


def _le_bytes(a: array) -> bytes:
    """The little-endian bytes of a uint64 array."""
    if _BIG_ENDIAN:
        a = array("Q", a)
        a.byteswap()
    return a.tobytes()


def encode_doc(d: DocState) -> bytes:
    """Canonical bytes (the same document state gives the same bytes, whatever the order
    its sources arrived in) of everything but the slots: the snapshot. Layout: header,
    sources (u64, ascending), their slot lists (paircodec), cover docnos (u64), cover URL
    and count text."""
    return _encode(d, d.sources().tolist())


def encode_doc_packing(d: DocState) -> bytes:
    """`encode_doc`, the document's pairs then kept packed as these bytes hold them
    (state.source_pairs): a stored snapshot's pairs wait for their next reader packed,
    encoded once."""
    order = d.sources().tolist()
    lists = encode_pairs(*d.pairs.settled(), order, len(d.slots))
    raw = _encode(d, order, lists)
    d.pairs.pack(len(d.slots), lists)
    return raw


def encode_doc_delta(d: DocState, keys: np.ndarray, src: np.ndarray, slot: np.ndarray
                     ) -> bytes:
    """The delta beside a snapshot: the snapshot's layout over the sources changed since
    it was written, `keys` (an empty list for a source that is gone), their pairs `src`,
    `slot` (DocState.delta_pairs). The document then keeps them as its pairs' overlay."""
    order = keys.tolist()
    raw = _encode(d, order, encode_pairs(src, slot, order, len(d.slots)))
    d.pairs.rebase(keys, src, slot)
    return raw


def _encode(d: DocState, order: list[int], lists: bytes | None = None) -> bytes:
    """The layout over the sources in `order` (`lists`: their slot lists, if encoded)."""
    cover = d.result.sources_bytes()
    if lists is None:
        lists = encode_pairs(*d.pairs.settled(), order, len(d.slots))
    flag = (_STALE if d.result.stale else d.result.quilted) | _PAIRS
    return b"".join((
        _DOC_HEADER.pack(d.n_grams, len(d.slots), len(order), len(d.result.docnos),
                         len(cover), flag),
        np.asarray(order, dtype="<u8").tobytes(),
        lists,
        np.asarray(d.result.docnos, dtype="<u8").tobytes(),
        cover,
    ))


def encode_slots(d: DocState) -> bytes:
    """The slots: grams (u64), then the occupied-slot bitmap."""
    n_slots = len(d.slots)
    occupied = np.ones(n_slots, dtype=bool)
    occupied[d.free] = False
    return _le_bytes(d.slots) + np.packbits(occupied, bitorder="little").tobytes()


def decode_doc(b: bytes, slot_bytes: bytes | None, delta: bytes | None = None,
               adds: bytes | None = None) -> DocState:
    """A document from its `docs`, `slots`, `docdelta` and `docadds` values (None: it has
    none)."""
    n_grams, n_slots, pairs, changed, quilted, docnos, cover, blob = _decode(b, packed=True)
    if delta is not None:  # newer slot count, changed sources' lists and result
        _, n_slots, dpairs, changed, quilted, docnos, cover, blob = _decode(delta)
        # the changed sources' lists replace theirs: an overlay while the snapshot is packed
        pairs = pairs.overlaid(np.asarray(changed, dtype=np.uint64), *dpairs.settled())
    slots, free = _decode_slots(slot_bytes or b"", n_slots)
    d = DocState(n_grams, slots, pairs, None, free)
    d.result = DocResult(cover, quilted == 1, d.n_patch, n_grams, docnos, blob, quilted == _STALE)
    if delta is not None:
        d.unsaved = set(changed)
        d.has_delta = True
    if adds is not None:
        d.adds = bytearray(adds)
    d.modified = False  # as stored
    return d


def _decode(b: bytes, packed: bool = False
            ) -> tuple[int, int, SourcePairs, list[int], int, tuple[int, ...],
                       tuple[tuple[str, int], ...], bytes]:
    """n_grams, n_slots, the pairs, the sources listed, result flag (0, 1 quilted,
    _STALE), cover docnos, cover and its bytes, of a snapshot or a delta. `packed`: a
    snapshot's pairs are kept as stored (state.source_pairs), not decoded."""
    n_grams, n_slots, n_src, n_docnos, n_cover, flag = _DOC_HEADER.unpack_from(b)
    off = _DOC_HEADER.size
    source_array = np.frombuffer(b, dtype="<u8", count=n_src, offset=off).astype(np.uint64)
    sources = source_array.tolist()
    off += 8 * n_src
    if flag & _PAIRS and packed and n_src:
        end = lists_end(b, off, n_src, n_slots)
        pairs = SourcePairs.packed(b[off:end], source_array, n_slots)
        off = end
    elif flag & _PAIRS:
        src, slot, off = decode_pairs(b, off, sources, n_slots)
        pairs = SourcePairs(src, slot)
    else:  # a document written as bitmasks (formats up to 13 / shards-12)
        src, slot, off = decode_mask_pairs(b, off, sources, n_slots)
        pairs = SourcePairs(src, slot)
    docnos = tuple(np.frombuffer(b, dtype="<u8", count=n_docnos, offset=off).tolist())
    off += 8 * n_docnos
    blob = b[off : off + n_cover]
    cover_text = blob.decode("utf-8")
    cover = tuple(
        (u, int(n)) for u, n in (item.split("\x01") for item in cover_text.split("\x00"))
    ) if cover_text else ()
    return n_grams, n_slots, pairs, sources, flag & ~_PAIRS, docnos, cover, blob


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
