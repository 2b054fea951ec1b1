"""First-holder pairs of recent batches that are not in a segment yet: the gram index's
in-memory head (what a memtable is to an LSM tree), logged in the KV for durability.

A batch's new grams become (gram, docno) pairs of a segment (state.segments). An embedded
batch of 512 pages brings ~1 M of them, a good segment. A Kafka worker's rounds bring a few
pages each, and a segment per round made thousands of tiny segments: every lookup probed
each one's Bloom filter and read its chunks, and tiered compaction rewrote every pair
through all the small tiers (merges were the gram shards' largest cost at 1-4 pages a
round). So small batches append their pairs here instead: one KV value per batch (the log,
read back on open) and a hash table in RAM for lookups.
Once CAPACITY pairs have gathered, they are written as one segment, in the same atomic
write that empties the log.
"""

from __future__ import annotations

import numpy as np

from ..engine.keyed import key_u64, u64key
from .gram_table import GramTable
from .kv import KV, DeleteRange, Op

CAPACITY = 1 << 18  # pairs gathered before they become a segment
TABLE = "recent"


class RecentPairs:
    """Pairs logged since the last flush: gram -> the position of its holder in `docnos`,
    in a compiled hash table (state.gram_table: a batch's grams inserted or looked up in
    one call, a Kafka worker's gram shards doing so for every page, and a multiplier
    drawn at random for each table, so that a hostile page cannot choose grams that
    crowd one run of slots; SPEC §9)."""

    def __init__(self, kv: KV, capacity: int | None = None) -> None:
        self.capacity = capacity or CAPACITY
        self._clear()
        self.next_key = 0
        for key, value in kv.items(TABLE):
            self._add(*_decode(value))
            self.next_key = key_u64(key) + 1

    def _clear(self) -> None:
        self._where = GramTable()
        self._docnos = np.zeros(0, dtype=np.uint64)  # the logged holders: the first _held
        self._held = 0

    @property
    def n(self) -> int:
        """Distinct grams held."""
        return len(self._where)

    def fits(self, n_new: int) -> bool:
        return self.n + n_new <= self.capacity

    # -- lookups ----------------------------------------------------------------------
    def lookup(self, grams: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(found, first holder) for each gram."""
        if not self.n or not len(grams):
            return np.zeros(len(grams), dtype=bool), np.zeros(len(grams), dtype=np.uint64)
        at = self._where.lookup(grams)
        found = at >= 0
        holder = np.zeros(len(grams), dtype=np.uint64)
        holder[found] = self._docnos[at[found]]
        return found, holder

    def maybe(self, grams: np.ndarray) -> np.ndarray:
        """True where a recent pair holds the gram (exactly: no false positives)."""
        if not self.n:
            return np.zeros(len(grams), dtype=bool)
        return self._where.lookup(grams) >= 0

    def find(self, grams: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(the grams held here, their first holders, the other grams)."""
        if not self.n:
            return grams[:0], np.zeros(0, dtype=np.uint64), grams
        found, holder = self.lookup(grams)
        return grams[found], holder[found], grams[~found]

    # -- writing ----------------------------------------------------------------------
    def log_ops(self, grams: np.ndarray, docnos: np.ndarray) -> list[Op]:
        """Ops logging a batch's pairs; apply with `logged` once committed."""
        value = grams.astype("<u8").tobytes() + docnos.astype("<u8").tobytes()
        return [(TABLE, u64key(self.next_key), value)]

    def logged(self, grams: np.ndarray, docnos: np.ndarray) -> None:
        self._add(grams, docnos)
        self.next_key += 1

    def flush_ops(self) -> tuple[list[Op], np.ndarray, np.ndarray]:
        """Ops emptying the log, and every pair in it (to go into a segment in the same
        write); apply with `flushed` once committed."""
        ops: list[Op] = []
        if self.next_key:
            ops.append((TABLE, u64key(0), DeleteRange(u64key(self.next_key))))
        grams, at = self._where.contents()
        return ops, grams, self._docnos[at]

    def flushed(self) -> None:
        self._clear()
        self.next_key = 0

    def _add(self, grams: np.ndarray, docnos: np.ndarray) -> None:
        """Insert pairs (distinct grams; one already here gets the new holder)."""
        start, end = self._held, self._held + len(docnos)
        if end > len(self._docnos):  # room doubles: each holder is copied O(1) times
            grown = np.zeros(max(end, 2 * len(self._docnos), 1024), dtype=np.uint64)
            grown[:start] = self._docnos[:start]
            self._docnos = grown
        self._docnos[start:end] = docnos
        self._where.assign_each(np.asarray(grams, dtype=np.uint64),
                                np.arange(start, end, dtype=np.int32))
        self._held = end


def _decode(value: bytes) -> tuple[np.ndarray, np.ndarray]:
    arr = np.frombuffer(value, dtype="<u8").astype(np.uint64)
    half = len(arr) // 2
    return arr[:half], arr[half:]
