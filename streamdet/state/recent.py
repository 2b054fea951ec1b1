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

import secrets

import numpy as np

from ..engine.keyed import key_u64, u64key
from .kv import KV, DeleteRange, Op

CAPACITY = 1 << 18  # pairs gathered before they become a segment (a power of two)
LOAD = 4  # slots per pair at capacity: short probe sequences (the longest set the cost)
# A probe pass over a batch's grams costs a dozen numpy calls, whatever the number of
# grams still probing on; the last few of a batch (long probe sequences are rare, but a
# batch of hundreds of grams meets one) finish one by one in Python instead.
SCALAR_TAIL = 32
TABLE = "recent"
_ONE = np.uint64(1)


class RecentPairs:
    """Pairs logged since the last flush, in a numpy hash table (open addressing, linear
    probing from the top bits of the gram times an odd multiplier drawn at random for
    each table: grams are hashes of words a hostile page chooses, and on their own low
    bits it could crowd one run of slots, each probe then walking it; SPEC §9, as in
    state.gram_table). Inserting and looking up a
    batch's grams are a few vectorised passes, where a dict of Python ints cost ~0.35 us
    per pair to fill. At a load of 1/2 a batch of 600 grams took ~15 passes (its longest
    probe sequence) and 0.7 ms: a Kafka worker's gram shards insert one such batch per
    page, so the table is kept at 1/4 and the tail is finished in Python (0.2 ms)."""

    def __init__(self, kv: KV, capacity: int | None = None) -> None:
        self.capacity = capacity or CAPACITY
        if self.capacity & (self.capacity - 1):
            raise ValueError("the recent pairs' capacity must be a power of two")
        self._slots = LOAD * self.capacity  # open addressing at a load of at most 1/LOAD
        self._mask = np.uint64(self._slots - 1)
        self._mix = np.uint64(secrets.randbits(64) | 1)
        self._shift = np.uint64(64 - (self._slots.bit_length() - 1))
        self._clear()
        self.next_key = 0
        for key, value in kv.items(TABLE):
            self._add(*_decode(value))
            self.next_key = key_u64(key) + 1

    def _clear(self) -> None:
        self.keys = np.zeros(self._slots, dtype=np.uint64)
        self.values = np.zeros(self._slots, dtype=np.uint64)
        self.used = np.zeros(self._slots, dtype=bool)
        self.n = 0

    def fits(self, n_new: int) -> bool:
        return self.n + n_new <= self.capacity

    # -- lookups ----------------------------------------------------------------------
    def lookup(self, grams: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(found, first holder) for each gram."""
        found = np.zeros(len(grams), dtype=bool)
        holder = np.zeros(len(grams), dtype=np.uint64)
        if not self.n or not len(grams):
            return found, holder
        slot = self.home(grams)
        active = np.arange(len(grams))
        while len(active) > SCALAR_TAIL:
            s = slot[active]
            used = self.used[s]
            hit = used & (self.keys[s] == grams[active])
            found[active[hit]] = True
            holder[active[hit]] = self.values[s[hit]]
            active = active[used & ~hit]  # probe on; an empty slot ends the search
            slot[active] = (slot[active] + _ONE) & self._mask
        for i, s in zip(active.tolist(), slot[active].tolist(), strict=True):
            s = self._probe(int(grams[i]), s)
            if self.used[s]:
                found[i] = True
                holder[i] = self.values[s]
        return found, holder

    def home(self, grams: np.ndarray) -> np.ndarray:
        """Each gram's first slot: the top bits of gram times the table's multiplier."""
        return (grams * self._mix) >> self._shift

    def _probe(self, gram: int, s: int) -> int:
        """The slot holding `gram`, or the empty slot where its probe sequence ends."""
        used, keys, mask = self.used, self.keys, int(self._mask)
        while used[s] and int(keys[s]) != gram:
            s = (s + 1) & mask
        return s

    def maybe(self, grams: np.ndarray) -> np.ndarray:
        """True where a recent pair holds the gram (exactly: no false positives)."""
        return self.lookup(grams)[0]

    def find(self, grams: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(the grams held here, their first holders, the other grams)."""
        if not self.n:
            return grams[:0], np.zeros(0, dtype=np.uint64), grams
        found, holder = self.lookup(grams)
        return grams[found], holder[found].astype(np.uint64), grams[~found]

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
        return ops, self.keys[self.used], self.values[self.used]

    def flushed(self) -> None:
        self._clear()
        self.next_key = 0

    def _add(self, grams: np.ndarray, docnos: np.ndarray) -> None:
        """Insert pairs (distinct grams; one already here gets the new holder)."""
        grams = np.asarray(grams, dtype=np.uint64)
        docnos = np.asarray(docnos, dtype=np.uint64)
        slot = self.home(grams)
        pending = np.arange(len(grams))
        while len(pending) > SCALAR_TAIL:
            s = slot[pending]
            ok = ~self.used[s] | (self.keys[s] == grams[pending])
            # of the pairs whose probe found a free (or their own) slot, one per slot
            taken, first = np.unique(s[ok], return_index=True)
            winners = pending[ok][first]
            self.n += int(np.count_nonzero(~self.used[taken]))
            self.used[taken] = True
            self.keys[taken] = grams[winners]
            self.values[taken] = docnos[winners]
            placed = np.zeros(len(grams), dtype=bool)
            placed[winners] = True
            pending = pending[~placed[pending]]
            slot[pending] = (slot[pending] + _ONE) & self._mask
        for i, s in zip(pending.tolist(), slot[pending].tolist(), strict=True):
            s = self._probe(int(grams[i]), s)
            if not self.used[s]:
                self.used[s] = True
                self.n += 1
            self.keys[s] = grams[i]
            self.values[s] = docnos[i]


def _decode(value: bytes) -> tuple[np.ndarray, np.ndarray]:
    arr = np.frombuffer(value, dtype="<u8").astype(np.uint64)
    half = len(arr) // 2
    return arr[:half], arr[half:]
