"""gram -> slot of a document's patch grams, in numpy arrays rather than a dict.

Every delta a document receives names grams, and the document needs their slots to set
bits in its source masks. A dict of Python ints answers one gram in ~40 ns but costs
~110 bytes a slot (two int objects and a hash entry), nine tenths of a decoded document;
a batch holds every earlier document its pages reach, so the memory budget could keep only
a few hundred of them decoded and the rest were read and decoded again, batch after batch.
Sorted grams (8 bytes) and their slots (4 bytes) answer a whole delta's grams with one
`searchsorted`, at 12 bytes a slot. Grams gained since the arrays were built wait in a
small dict until there are enough of them to merge.
"""

from __future__ import annotations

from array import array

import numpy as np

from .pair_kernels import merge_pairs
from .sorted_search import locate
from .sorting import sorted_unique

# grams kept in the dict before they are merged into the arrays: at least this many, or a
# quarter of the arrays (a merge sorts them all again)
MERGE_AFTER = 64


class SlotIndex:
    """Where each live patch gram sits; absent grams answer -1."""

    __slots__ = ("_keys", "_at", "_extra")

    def __init__(self, slots: array, free: list[int]) -> None:
        grams = np.frombuffer(slots, dtype=np.uint64) if len(slots) else np.zeros(0, np.uint64)
        at = np.arange(len(grams), dtype=np.int32)
        if free:  # a freed slot still holds its old gram, which may live elsewhere
            live = np.ones(len(grams), dtype=bool)
            live[free] = False
            grams, at = grams[live], at[live]
        self._sorted(grams, at)
        self._extra: dict[int, int] = {}

    def _sorted(self, grams: np.ndarray, at: np.ndarray) -> None:
        order = np.argsort(grams)  # distinct: the default sort (engine.sorting) serves
        self._keys, self._at = grams[order], at[order]

    def __len__(self) -> int:
        return len(self._keys) + len(self._extra)

    def find(self, grams: list[int]) -> np.ndarray:
        """The slot of each gram (int32), -1 where it is not a live patch gram."""
        q = np.array(grams, dtype=np.uint64)
        keys = self._keys
        if len(keys):
            i, held = locate(keys, q)
            out = self._at.take(i, mode="clip")
            out[~held] = -1
        else:
            out = np.full(len(q), -1, dtype=np.int32)
        if self._extra:
            miss = np.flatnonzero(out < 0)
            get = self._extra.get
            out[miss] = [get(g, -1) for g in q[miss].tolist()]
        return out

    def present(self, grams: list[int]) -> np.ndarray:
        """The slots of those of `grams` that are live patch grams."""
        at = self.find(grams)
        return at[at >= 0]

    def add(self, grams: list[int], slots: list[int]) -> None:
        """New live grams (not in the index) at their slots."""
        self._extra.update(zip(grams, slots, strict=True))
        if len(self._extra) >= max(MERGE_AFTER, len(self._keys) // 4):
            self._merge()

    def add_sorted(self, grams: np.ndarray, slots: np.ndarray) -> None:
        """New live grams (uint64, ascending, none in the index) at their slots (int32),
        merged into the arrays in one linear pass (pair_kernels.merge_pairs: grams are
        distinct, so their order is the pairs' order): an arrival's own patch grams come
        hundreds at a time, and a dict of them would be merged into the arrays soon after
        anyway."""
        if not len(self._keys):
            self._keys, self._at = grams, slots
            return
        self._keys, self._at = merge_pairs(self._keys, self._at, grams, slots)

    def remove(self, grams: list[int]) -> list[int]:
        """Take grams out; return the slots they held (grams not in the index are skipped)."""
        extra = self._extra
        freed = [extra.pop(g) for g in grams if g in extra] if extra else []
        keys = self._keys
        if not len(keys):
            return freed
        q = np.array(grams, dtype=np.uint64)
        i, held = locate(keys, q)
        gone = sorted_unique(i[held])
        if len(gone):
            freed.extend(self._at[gone].tolist())
            self._keys = np.delete(self._keys, gone)
            self._at = np.delete(self._at, gone)
        return freed

    def grams(self) -> list[int]:
        """The live patch grams (in no particular order)."""
        return self._keys.tolist() + list(self._extra)

    def _merge(self) -> None:
        extra = self._extra
        self._sorted(
            np.concatenate((self._keys, np.fromiter(extra, dtype=np.uint64, count=len(extra)))),
            np.concatenate((self._at, np.fromiter(extra.values(), dtype=np.int32,
                                                  count=len(extra)))))
        extra.clear()
