"""Which foreign source holds which patch-gram slot of one document: its (source, slot)
pairs, the whole input of its greedy cover (engine.cover).

A patch gram has at most m holders, so a document has at most (m - 1) pairs a slot, and
every operation here costs time linear in its pairs and its changes (SPEC §9 "Bounded
engine work"). A bitmask per source over every slot, as documents once kept, costs its
sources times its slots instead: a page shared in small slices with thousands of other
pages made each of its re-scores quadratic.

Between batches a document's settled pairs may be kept packed: as they are stored, each
distinct slot list once (engine.paircodec), ~12 bytes a pair down to ~1 (the copies of a
page on other sites hold the same lists), and unpacked when they are first read. A batch
that only adds pairs to a document, or asks whether a source held some before, never
unpacks it; the memory budget then holds several times as many documents decoded. A
document stored as a snapshot and a delta (state.schema) keeps the delta beside its packed
snapshot as an overlay (the changed sources' lists, which replace theirs), and a batch
that writes a new delta reads only the changed sources' lists (`of_sources`, `rebase`):
most documents a batch reaches gain a source, are re-scored without their cover (below
theta) and are written back as a delta, all without unpacking.

The pairs are kept settled, sorted by (source, slot); a batch's changes (pairs added,
pairs dropped, slots lost) are recorded in order and applied together when the pairs are
next read, so a document that a batch changes a thousand times is sorted once, not a
thousand times. The last change to a pair decides it, and a slot's loss ends every pair
of it made before: a slot freed and given to another gram in the same batch keeps only
the pairs made after.
"""

from __future__ import annotations

import numpy as np

from .pair_kernels import merge_pairs, settle
from .paircodec import count_pairs, decode_pairs, decode_some, encode_pairs
from .sorted_search import locate

_NO_SOURCES = np.zeros(0, dtype=np.uint64)
_NO_SLOTS = np.zeros(0, dtype=np.int32)


class SourcePairs:
    """(source docno, slot) pairs, sorted by source then slot, with pending changes."""

    __slots__ = ("_src", "_slot", "_changes", "_lost", "_packed", "_over", "_base_pairs")

    def __init__(self, src: np.ndarray = _NO_SOURCES, slot: np.ndarray = _NO_SLOTS) -> None:
        self._src = src
        self._slot = slot
        # the settled pairs packed instead (paircodec bytes, their sources ascending, the
        # document's slot count), or None
        self._packed: tuple[bytes, np.ndarray, int] | None = None
        # with a packed snapshot only: (sources ascending, their pairs' sources and slots)
        # whose lists replace the snapshot's (a stored delta), or None
        self._over: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._base_pairs = -1  # the packed snapshot's pair count, once counted
        # (sources, slots, kept: 1 added / 0 dropped) in order, and the slots lost, with
        # the number of changes recorded before each loss
        self._changes: list[tuple[np.ndarray, np.ndarray, int]] = []
        self._lost: list[tuple[np.ndarray, int]] = []

    # -- changes ------------------------------------------------------------------------
    def add(self, src: np.ndarray | int, slots: np.ndarray) -> None:
        """Pairs (src[i], slots[i]), or (src, slot) for every slot when src is one docno."""
        if len(slots):
            self._changes.append((_sources(src), _slots(slots), 1))

    def drop(self, source: int, slots: np.ndarray) -> None:
        if len(slots):
            self._changes.append((source, _slots(slots), 0))

    def lose(self, slots: np.ndarray) -> None:
        """These slots' pairs go, all of them (their gram is no patch gram any more)."""
        if len(slots):
            self._lost.append((_slots(slots), len(self._changes)))

    # -- packing ------------------------------------------------------------------------
    @classmethod
    def packed(cls, raw: bytes, sources: np.ndarray, n_slots: int,
               over: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> SourcePairs:
        """Pairs kept as stored: `raw` the paircodec lists of `sources` (ascending, each
        with pairs), over a document of `n_slots` slots; `over`: a delta's sources
        (ascending), and their pairs sorted, that replace those sources' lists."""
        pairs = cls()
        pairs._packed = (raw, sources, n_slots)
        pairs._over = over
        return pairs

    def pack(self, n_slots: int, raw: bytes | None = None) -> None:
        """Keep the settled pairs packed (`raw`: their lists already encoded for every
        source, ascending), when nothing is pending and that is smaller."""
        if self._packed is not None or self._changes or self._lost or not len(self._src):
            return
        sources = _distinct(self._src)
        if raw is None:
            raw = encode_pairs(self._src, self._slot, sources.tolist(), n_slots)
        if len(raw) + sources.nbytes < self._src.nbytes + self._slot.nbytes:
            self._packed = (raw, sources, n_slots)
            self._src, self._slot = _NO_SOURCES, _NO_SLOTS

    def _unpack(self) -> None:
        raw, sources, n_slots = self._packed  # type: ignore[misc]
        src, slot, _ = decode_pairs(raw, 0, sources.tolist(), n_slots)
        if self._over is not None:  # the overlay's lists replace the snapshot's
            src, slot = _replaced(src, slot, *self._over)
        self._packed, self._over, self._base_pairs = None, None, -1
        self._src, self._slot = src, slot

    @property
    def nbytes(self) -> int:
        """The memory the settled pairs take, packed or not (for the memory budget)."""
        if self._packed is not None:  # asked each time a transaction hands it out
            n = len(self._packed[0]) + self._packed[1].nbytes
            if self._over is not None:
                keys, src, slot = self._over
                n += keys.nbytes + src.nbytes + slot.nbytes
            return n
        return self._src.nbytes + self._slot.nbytes

    def base_pairs(self) -> int:
        """How many pairs the stored snapshot holds (packed), or the settled pairs."""
        if self._packed is None:
            return len(self.settled()[0])
        if self._base_pairs < 0:
            raw, sources, n_slots = self._packed
            self._base_pairs = count_pairs(raw, len(sources), n_slots)
        return self._base_pairs

    def of_sources(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The settled pairs of the sources `keys` (uint64, ascending), which must name
        every source the pending changes touch and no slot may have been lost since the
        last settle (a loss reaches every source). A packed document reads only these
        sources' lists; the pending changes are settled into them, not into the rest."""
        if self._packed is None or self._lost:
            src, slot = self.settled()
            if not len(keys):
                return src[:0], slot[:0]
            pick = locate(keys, src)[1]
            return src[pick], slot[pick]
        raw, stored, n_slots = self._packed
        src, slot = decode_some(raw, stored, keys, n_slots)
        if self._over is not None:  # the overlay decides the sources it names
            okeys, osrc, oslot = self._over
            pick = locate(keys, osrc)[1] if len(keys) else np.zeros(len(osrc), dtype=bool)
            src, slot = _replaced(src, slot, okeys, osrc[pick], oslot[pick])
        if self._changes:
            src, slot = settle(src, slot, self._changes, [])
        return src, slot

    def overlaid(self, keys: np.ndarray, src: np.ndarray, slot: np.ndarray) -> SourcePairs:
        """These pairs with the lists of the sources `keys` (ascending) replaced by `src`,
        `slot` (sorted): a stored delta over its snapshot. A packed snapshot keeps them as
        its overlay; otherwise they are merged now."""
        if not len(keys):
            return self
        if self._packed is not None and self._over is None and not self.pending:
            self._over = (keys, src, slot)
            return self
        return SourcePairs(*_replaced(*self.settled(), keys, src, slot))

    def rebase(self, keys: np.ndarray, src: np.ndarray, slot: np.ndarray) -> None:
        """The pairs of the sources `keys` are now `src`, `slot` (as `of_sources` gave them,
        and as stored in the document's new delta): a packed document keeps them as its
        overlay and drops the pending changes, which they hold; otherwise nothing changes
        (its pairs are settled already)."""
        if self._packed is None:
            return
        self._over = (keys, src, slot) if len(keys) else None
        self._changes = []

    # -- reads --------------------------------------------------------------------------
    @property
    def pending(self) -> bool:
        return bool(self._changes or self._lost)

    def settled(self) -> tuple[np.ndarray, np.ndarray]:
        """(sources, slots) of every pair, sorted by source then slot."""
        if self._packed is not None:
            self._unpack()
        if self._changes or self._lost:
            self._settle()
        return self._src, self._slot

    def sources(self) -> np.ndarray:
        """The distinct sources, ascending."""
        if self._packed is not None and not self.pending:
            stored = self._packed[1]
            if self._over is None:
                return stored
            keys, osrc, _ = self._over
            return np.union1d(np.setdiff1d(stored, keys, assume_unique=True), _distinct(osrc))
        return _distinct(self.settled()[0])

    def held_before(self, source: int) -> bool:
        """Whether `source` has pairs among the settled ones (those of the batches before
        the changes now pending)."""
        if self._packed is None:
            return _has(self._src, source)
        if self._over is not None and _has(self._over[0], source):
            return _has(self._over[1], source)
        return _has(self._packed[1], source)

    def of(self, source: int) -> np.ndarray:
        """The slots `source` holds, ascending."""
        src, slot = self.settled()
        key = np.uint64(source)
        return slot[np.searchsorted(src, key, "left"):np.searchsorted(src, key, "right")]

    def held_slots(self) -> int:
        """How many distinct slots some source holds."""
        _, slot = self.settled()
        return int(np.count_nonzero(np.bincount(slot))) if len(slot) else 0

    def __len__(self) -> int:
        return len(self.settled()[0])

    # -- settling -----------------------------------------------------------------------
    def _settle(self) -> None:
        """Every pair's last change decides it; a pair made before its slot's last loss is
        gone (engine.pair_kernels.settle: a merge of the sorted pairs with the changes)."""
        changes, lost = self._changes, self._lost
        self._changes, self._lost = [], []
        self._src, self._slot = settle(self._src, self._slot, changes, lost)


def _replaced(src: np.ndarray, slot: np.ndarray, keys: np.ndarray, new_src: np.ndarray,
              new_slot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted pairs (src, slot) with every pair of the sources `keys` (ascending, not
    empty) replaced by the sorted pairs (new_src, new_slot) of some of those sources."""
    keep = ~locate(keys, src)[1]
    if not len(new_src):
        return src[keep], slot[keep]
    return merge_pairs(src[keep], slot[keep], new_src, new_slot)


def _has(ascending: np.ndarray, value: int) -> bool:
    i = int(np.searchsorted(ascending, np.uint64(value)))
    return i < len(ascending) and int(ascending[i]) == value


def _distinct(src: np.ndarray) -> np.ndarray:
    """The distinct values of a sorted array."""
    if len(src) < 2:
        return src
    return src[np.concatenate(([True], src[1:] != src[:-1]))]


def _sources(src: np.ndarray | int) -> np.ndarray | int:
    return np.ascontiguousarray(src, dtype=np.uint64) if isinstance(src, np.ndarray) else src


def _slots(slots: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(slots, dtype=np.int32)
