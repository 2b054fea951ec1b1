"""Which foreign source holds which patch-gram slot of one document: its (source, slot)
pairs, the whole input of its greedy cover (engine.cover).

A patch gram has at most m holders, so a document has at most (m - 1) pairs a slot, and
every operation here costs time linear in its pairs and its changes (SPEC §9 "Bounded
engine work"). A bitmask per source over every slot, as documents once kept, costs its
sources times its slots instead: a page shared in small slices with thousands of other
pages made each of its re-scores quadratic.

Between batches a document's settled pairs may be kept packed: as they are stored, each
distinct slot list once (state.paircodec), ~12 bytes a pair down to ~1 (the copies of a
page on other sites hold the same lists), and unpacked when they are first read. A batch
that only adds pairs to a document, or asks whether a source held some before, never
unpacks it; the memory budget then holds several times as many documents decoded.

The pairs are kept settled, sorted by (source, slot); a batch's changes (pairs added,
pairs dropped, slots lost) are recorded in order and applied together when the pairs are
next read, so a document that a batch changes a thousand times is sorted once, not a
thousand times. The last change to a pair decides it, and a slot's loss ends every pair
of it made before: a slot freed and given to another gram in the same batch keeps only
the pairs made after.
"""

from __future__ import annotations

import numpy as np

from .pair_kernels import settle
from .paircodec import decode_pairs, encode_pairs

_NO_SOURCES = np.zeros(0, dtype=np.uint64)
_NO_SLOTS = np.zeros(0, dtype=np.int32)


class SourcePairs:
    """(source docno, slot) pairs, sorted by source then slot, with pending changes."""

    __slots__ = ("_src", "_slot", "_changes", "_lost", "_packed")

    def __init__(self, src: np.ndarray = _NO_SOURCES, slot: np.ndarray = _NO_SLOTS) -> None:
        self._src = src
        self._slot = slot
        # the settled pairs packed instead (paircodec bytes, their sources ascending, the
        # document's slot count), or None
        self._packed: tuple[bytes, np.ndarray, int] | None = None
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
    def packed(cls, raw: bytes, sources: np.ndarray, n_slots: int) -> SourcePairs:
        """Pairs kept as stored: `raw` the paircodec lists of `sources` (ascending, each
        with pairs), over a document of `n_slots` slots."""
        pairs = cls()
        pairs._packed = (raw, sources, n_slots)
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
        self._packed = None
        self._src, self._slot, _ = decode_pairs(raw, 0, sources.tolist(), n_slots)

    @property
    def nbytes(self) -> int:
        """The memory the settled pairs take, packed or not (for the memory budget)."""
        if self._packed is not None:
            return len(self._packed[0]) + self._packed[1].nbytes
        return self._src.nbytes + self._slot.nbytes

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
            return self._packed[1]
        return _distinct(self.settled()[0])

    def held_before(self, source: int) -> bool:
        """Whether `source` has pairs among the settled ones (those of the batches before
        the changes now pending)."""
        src = self._packed[1] if self._packed is not None else self._src
        i = int(np.searchsorted(src, np.uint64(source)))
        return i < len(src) and int(src[i]) == source

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
        gone (state.pair_kernels.settle: a merge of the sorted pairs with the changes)."""
        changes, lost = self._changes, self._lost
        self._changes, self._lost = [], []
        self._src, self._slot = settle(self._src, self._slot, changes, lost)


def _distinct(src: np.ndarray) -> np.ndarray:
    """The distinct values of a sorted array."""
    if len(src) < 2:
        return src
    return src[np.concatenate(([True], src[1:] != src[:-1]))]


def _sources(src: np.ndarray | int) -> np.ndarray | int:
    return np.ascontiguousarray(src, dtype=np.uint64) if isinstance(src, np.ndarray) else src


def _slots(slots: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(slots, dtype=np.int32)
