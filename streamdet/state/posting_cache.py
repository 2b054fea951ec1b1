"""The store's cache of overlay postings, most of it packed in numpy arrays.

A batch looks up every gram it shares with earlier pages, and the overlay (grams with two
or more holders) outgrows any cache of one Python tuple a gram: such an entry costs ~236
bytes resident for a posting of four holders, so the budget's share held under a million
of them, and a gram that fell out was read again from RocksDB (a batched multi-get, ~1.7
µs a key when every block is cached, against ~0.1 µs for a lookup here).

Two parts:
- `young`, a dict of the postings written or read since the last packing (decoded tuples,
  as the engine uses them);
- the packed part: keys sorted (uint64), each entry's holders in one array (CSR:
  `starts` into `holders`; uint32 while every docno fits, uint64 from the first that
  does not), a flag for COMMON, and the packing round each entry was last used in. ~21
  bytes an entry plus 4 a holder: about six times as many entries in the same memory.

Lookups probe `young`, then the packed part with one `searchsorted` for the whole batch.
Once `young` is full it is packed in: merged with the packed entries (its values win),
and when the packed part is then over its bytes, the entries unused for the most rounds go
first. A cache only: every value is a committed one (state.txn), and what it forgets is
read again from the store.
"""

from __future__ import annotations

import itertools

import numpy as np

from .schema import COMMON, Posting

YOUNG_ENTRY_BYTES = 240  # a dict entry: key, tuple of ~4 holders, their ints, dict slot
ENTRY_BYTES = 21  # a packed entry but its holders: key 8, start 8, round 4, COMMON flag 1
# a packing that must forget makes room down to this share of the packed part's bytes
ROOM = 7 / 8
YOUNG_SHARE = 4  # young holds 1/YOUNG_SHARE of the cache's bytes


class PostingCache:
    """Overlay postings in `capacity` bytes (about): get_many / update."""

    def __init__(self, capacity: int) -> None:
        self.young_entries = max(1, capacity // YOUNG_SHARE // YOUNG_ENTRY_BYTES)
        self.packed_bytes = max(0, capacity - self.young_entries * YOUNG_ENTRY_BYTES)
        self.young: dict[int, Posting] = {}
        self.keys = np.zeros(0, dtype=np.uint64)
        self.starts = np.zeros(1, dtype=np.int64)  # entry i's holders: starts[i]:starts[i+1]
        self.holders = np.zeros(0, dtype=np.uint32)  # widened to uint64 when needed
        self.common = np.zeros(0, dtype=bool)
        self.used = np.zeros(0, dtype=np.uint32)  # the packing round of its last use
        self.round = 0
        self.dropped = False  # whether any entry was ever forgotten

    def __len__(self) -> int:
        """Entries held, for bench_growth's per-window row (a key in both parts counts twice
        until the next packing)."""
        return len(self.young) + len(self.keys)

    @property
    def nbytes(self) -> int:
        """Bytes the packed arrays hold."""
        return sum(a.nbytes for a in (self.keys, self.starts, self.holders, self.common,
                                      self.used))

    def get_many(self, keys: list[int], into: dict) -> list[int]:
        """Copy the postings of `keys` into `into`; return the keys not held, in order."""
        young = self.young
        missing = []
        for k in keys:
            v = young.get(k)
            if v is None:
                missing.append(k)
            else:
                into[k] = v
        if not missing or not len(self.keys):
            return missing
        q = np.array(missing, dtype=np.uint64)
        at = np.searchsorted(self.keys, q)
        hit = self.keys.take(at, mode="clip") == q  # a clipped position matches only its key
        if not hit.any():
            return missing
        at = at[hit]
        self.used[at] = self.round
        self._postings(q[hit], at, into)
        return q[~hit].tolist()

    def _postings(self, keys: np.ndarray, at: np.ndarray, into: dict) -> None:
        """Copy packed entries `at` (of `keys`) into `into` as tuples: the entries of one
        length are cut from one gathered array at once (most have 2 to 5 holders)."""
        starts = self.starts[at]
        lengths = self.starts[at + 1] - starts
        common = self.common[at]
        if common.any():
            into.update(dict.fromkeys(keys[common].tolist(), COMMON))
            lengths[common] = -1
        for n in np.unique(lengths).tolist():
            if n < 0:
                continue
            rows = lengths == n
            flat = self.holders[starts[rows][:, None] + np.arange(n)].ravel().tolist()
            # n-tuples straight from one flat list (zip over one iterator n times): a third
            # of the time of a nested list made into tuples
            tuples = (zip(*[iter(flat)] * n, strict=True) if n
                      else itertools.repeat((), int(rows.sum())))
            into.update(zip(keys[rows].tolist(), tuples, strict=True))

    def update(self, entries: dict[int, Posting]) -> None:
        """Put many entries at once (one dict update, then at most one packing)."""
        self.young.update(entries)
        if len(self.young) >= self.young_entries:
            self.pack()

    def pack(self) -> None:
        """Merge `young` into the packed arrays (its values replace theirs), first
        forgetting the entries unused for the most rounds if the result would be over
        the packed part's bytes."""
        if not self.young:
            return
        young = _packed(self.young)
        self.young = {}
        ykeys, yholders = young[0], young[2]
        if self.holders.dtype == np.uint32 and len(yholders) and yholders.max() >> 32:
            self.holders = self.holders.astype(np.uint64)  # a docno past 32 bits
        incoming = ENTRY_BYTES * len(ykeys) + self.holders.itemsize * len(yholders)
        if incoming > self.packed_bytes:  # a budget too small for even these: keep none
            self._merge(np.zeros(len(self.keys), dtype=bool), _packed({}))
            self.dropped = True
            return
        keep = np.ones(len(self.keys), dtype=bool)
        if len(self.keys):
            at = np.searchsorted(self.keys, ykeys)
            keep[at[self.keys.take(at, mode="clip") == ykeys]] = False  # young's value wins
        self._make_room(keep, incoming)
        self._merge(keep, young)
        self.round += 1

    def _make_room(self, keep: np.ndarray, incoming: int) -> None:
        """Unmark in `keep` whole rounds of least recent use, oldest first, until what
        stays and `incoming` bytes fit; down to ROOM of the bytes, so that the next
        packings need not count again."""
        held = ENTRY_BYTES * len(self.keys) + self.holders.nbytes
        if held + incoming <= self.packed_bytes:
            return
        size = ENTRY_BYTES + self.holders.itemsize * np.diff(self.starts)
        by_round = np.bincount(self.used[keep], weights=size[keep], minlength=self.round + 1)
        from_newest = np.cumsum(by_round[::-1])[::-1]  # bytes kept of rounds >= r
        fits = np.flatnonzero(from_newest + incoming <= self.packed_bytes * ROOM)
        first = int(fits[0]) if len(fits) else self.round + 1
        if first:
            keep &= self.used >= first
            self.dropped = True

    def _merge(self, keep: np.ndarray, young: tuple[np.ndarray, ...]) -> None:
        """The packed arrays of the entries `keep` marks and of `young` (packed, sorted, no
        key among those kept). Each old array is replaced as soon as its part is made: a
        packing holds the old and new arrays of one kind at a time, not all of both."""
        ykeys, ystarts, yholders, ycommon = young
        okeys = self.keys[keep]
        n = len(okeys) + len(ykeys)
        is_young = np.zeros(n, dtype=bool)
        is_young[np.searchsorted(okeys, ykeys) + np.arange(len(ykeys))] = True
        is_old = ~is_young

        def merged(y: np.ndarray | int, o: np.ndarray, dtype: type) -> np.ndarray:
            out = np.empty(n, dtype=dtype)
            out[is_young], out[is_old] = y, o
            return out

        self.keys = merged(ykeys, okeys, np.uint64)
        del okeys
        old_lengths = np.diff(self.starts)
        lengths = merged(np.diff(ystarts), old_lengths[keep], np.int64)
        self.starts = np.concatenate(([0], np.cumsum(lengths)))
        old_cells = np.repeat(keep, old_lengths)
        del old_lengths
        young_cells = np.repeat(is_young, lengths)
        holders = np.empty(len(young_cells), dtype=self.holders.dtype)
        holders[young_cells] = yholders
        holders[~young_cells] = self.holders if old_cells.all() else self.holders[old_cells]
        self.holders = holders
        self.common = merged(ycommon, self.common[keep], bool)
        self.used = merged(self.round, self.used[keep], np.uint32)


def _packed(postings: dict[int, Posting]
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(keys sorted, starts, holders, common) of decoded postings."""
    n = len(postings)
    keys = np.fromiter(postings.keys(), dtype=np.uint64, count=n)
    values = list(postings.values())
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=n)
    common = np.zeros(n, dtype=bool)
    for i in np.flatnonzero(lengths == len(COMMON)).tolist():  # COMMON is a str
        if values[i] == COMMON:
            common[i] = True
            values[i] = ()
    lengths[common] = 0
    holders = np.fromiter(itertools.chain.from_iterable(values), dtype=np.uint64,
                          count=int(lengths.sum()))
    order = np.argsort(keys)
    first = (np.cumsum(lengths) - lengths)[order]  # where each entry's holders start
    lengths = lengths[order]
    starts = np.concatenate(([0], np.cumsum(lengths)))
    # holders in key order: cell j of entry i moves from first[i] + j to starts[i] + j
    cells = np.arange(starts[-1]) + np.repeat(first - starts[:-1], lengths)
    return keys[order], starts, holders[cells], common[order]
