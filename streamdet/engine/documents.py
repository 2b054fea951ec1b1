"""The documents the engine works on: a document version's kept state (`DocState`: its
patch grams in slots and which foreign sources hold which of them) and its last result
(`DocResult`: the greedy cover and the quilted flag), and a gram's posting (`Posting`:
the versions holding it, or COMMON past m). state.schema stores them."""

from __future__ import annotations

import heapq
import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from .grouping import first_seen
from .pair_kernels import decode_adds
from .slot_index import SlotIndex
from .source_pairs import SourcePairs

DOC_ROLE, GRAM_ROLE = "doc", "gram"  # the engine's roles: documents, and the gram index

# a decoded document per patch-gram slot: its slots, pairs and gram -> slot index in numpy
# (engine.slot_index), about 36 B as tracemalloc counts them (24 without the index), and
# malloc's own on top
DOC_SLOT_BYTES = 40
# a document cached folded (no gram -> slot index) beyond its slots and pairs: its
# result (the cover's URLs and counts), free slots and the objects around them, about
# 3 KB as tracemalloc counts them
DOC_OVERHEAD_BYTES = 3 << 10
SLOT_INDEX_BYTES = 12  # a slot's entry in a document's gram -> slot index (engine.slot_index)

COMMON = "common"  # posting marker: the gram had more than m documents
Posting = tuple[int, ...] | str

DELTA_MIN_PAIRS = 64  # a delta may always hold this many pairs ...
DELTA_SHARE = 4  # ... or up to 1/DELTA_SHARE of the document's pairs
_ADD_HEAD = struct.Struct("<QI")  # a pending addition: its source, how many grams follow
# pending additions are settled once their bytes pass this many a slot, plus ADDS_MIN_BYTES
ADDS_PER_SLOT = 16
ADDS_MIN_BYTES = 4096


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
    pairs (engine.source_pairs) say which *foreign* holder holds which of them: everything
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
    changed since it was stored. The additions are stored as records of their own, one
    an addition (table `docadds`): the first `adds_stored` bytes of `adds` are stored,
    the rest is new, and `adds_gone` holds the stored ones settled since (to delete), so
    a document that takes source after source writes each addition once.
    """

    __slots__ = ("n_grams", "slots", "_index", "free", "pairs", "_result", "slots_changed",
                 "unsaved", "has_delta", "adds", "adds_stored", "adds_gone", "modified")

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
        # pending additions: records of (source, n, n grams) (`add_records`)
        self.adds = bytearray()
        self.adds_stored = 0
        self.adds_gone = b""
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
        """gram -> slot of the patch grams (engine.slot_index), built when first needed:
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
        if not self.free:  # new slots at the end, in order of first appearance
            return self._append(grams, at, missing)
        new: dict[int, int] = {}
        for k in missing:
            g = grams[k]
            i = new.get(g)
            if i is None:  # a gram named twice takes one slot
                i = new[g] = self._take_slot(g)
            at[k] = i
        index.add(list(new), list(new.values()))
        return at

    def _append(self, grams: list[int], at: np.ndarray, missing: list[int]) -> np.ndarray:
        """`gain` with no free slot: the missing grams take new slots at the end, in order
        of first appearance (a gram named twice takes one), as `_take_slot` gives them -
        an arrival's own patch grams, hundreds at once, without a step a gram."""
        new, which = first_seen(np.asarray(grams, dtype=np.uint64)[missing])
        slots = np.arange(len(self.slots), len(self.slots) + len(new), dtype=np.int32)
        at[missing] = slots[which]
        self.slots.frombytes(new.astype("=u8").tobytes())
        order = np.argsort(new)  # distinct: the default sort serves (engine.sorting)
        self.index.add_sorted(new[order], slots[order])
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
        if len(grams):
            self.adds += new_addition(source, grams)
            self.settle_outgrown()

    def take_adds(self, raw: bytes) -> None:
        """Pending additions given while the document was not read (Txn.defer_add),
        in the stored layout: new, as if given to `defer_add` one by one."""
        self.adds += raw
        self.settle_outgrown()

    def settle_outgrown(self) -> None:
        """Settle the pending additions once they outgrow the document's slots: they
        stay a bounded share of what it weighs, in memory and on disk."""
        if len(self.adds) > ADDS_PER_SLOT * len(self.slots) + ADDS_MIN_BYTES:
            self.settle_adds()

    @property
    def adds_changed(self) -> bool:
        """Whether the pending additions differ from the stored ones."""
        return bool(self.adds_gone) or len(self.adds) != self.adds_stored

    def adds_saved(self) -> None:
        """The pending additions are stored as they are now (Txn.commit)."""
        self.adds_stored, self.adds_gone = len(self.adds), b""

    def settle_adds(self) -> None:
        """Apply the pending additions to the pairs (they are then written with them)."""
        if not self.adds:
            return
        src, grams = decode_adds(self.adds)  # one source a gram
        self.adds_gone += bytes(self.adds[: self.adds_stored])
        self.adds, self.adds_stored = bytearray(), 0
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


def add_records(raw: bytes) -> Iterator[tuple[int, bytes]]:
    """Pending additions' records in the layout `DocState.adds` keeps: (source, the
    bytes of its grams, uint64 LE)."""
    off = 0
    while off < len(raw):
        source, n = _ADD_HEAD.unpack_from(raw, off)
        off += _ADD_HEAD.size
        yield source, bytes(raw[off : off + 8 * n])
        off += 8 * n


def add_record(source: int, grams: bytes) -> bytes:
    """One pending addition in the layout `DocState.adds` keeps (`grams`: uint64 LE)."""
    return _ADD_HEAD.pack(source, len(grams) // 8) + grams


def new_addition(source: int, grams: list[int]) -> bytes:
    """A pending addition of these grams (DocState.defer_add, Txn.defer_add)."""
    return add_record(source, np.asarray(grams, dtype="<u8").tobytes())
