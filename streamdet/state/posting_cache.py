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

A packing works in place, in compiled loops (numba, like the markup guard): the packed
arrays are the front of buffers sized once for the packed part's bytes, the entries kept
move forward, and the young ones are merged in from the back. A merge into new arrays
held the old and new ones at once, ~1.2 times the packed bytes above the budget for the
length of a packing, and took ~10 passes of numpy over them.
"""

from __future__ import annotations

import itertools

import numpy as np
from numba import njit

from .schema import COMMON, Posting
from .sorted_search import locate

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
        # the packed arrays are views of the front of these buffers: keys, starts (entry
        # i's holders are starts[i]:starts[i+1]), holders (widened to uint64 when
        # needed), COMMON flags, the packing round of each entry's last use
        self._buffers = (np.zeros(0, dtype=np.uint64), np.zeros(1, dtype=np.int64),
                         np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=bool),
                         np.zeros(0, dtype=np.uint32))
        self._view(0, 0)
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
        at, hit = locate(self.keys, q)
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
        the packed part's bytes. In place: the kept entries move to the front, then the
        young ones are merged in from the back; each entry moves at most twice and no
        second copy of the arrays is made."""
        if not self.young:
            return
        ykeys, ystarts, yholders, ycommon = _packed(self.young)
        self.young = {}
        if self.holders.dtype == np.uint32 and len(yholders) and yholders.max() >> 32:
            self._widen()  # a docno past 32 bits
        incoming = ENTRY_BYTES * len(ykeys) + self.holders.itemsize * len(yholders)
        if incoming > self.packed_bytes:  # a budget too small for even these: keep none
            self._view(0, 0)
            self.dropped = True
            return
        keep = np.ones(len(self.keys), dtype=bool)
        if len(self.keys):
            at, held = locate(self.keys, ykeys)
            keep[at[held]] = False  # young's value wins
        n, h = _compact(self.keys, self.starts, self.holders, self.common, self.used, keep,
                        self._oldest_kept(keep, incoming))
        self._reserve(n, h, n + len(ykeys), h + len(yholders))
        n, h = _merge_back(*self._buffers, n, h, ykeys, ystarts, yholders, ycommon,
                           self.round)
        self._view(n, h)
        self.round += 1

    def _oldest_kept(self, keep: np.ndarray, incoming: int) -> int:
        """The oldest round of last use whose entries stay: whole rounds go, least recent
        first, until what stays and `incoming` bytes fit; down to ROOM of the bytes, so
        that the next packings need not count again."""
        held = ENTRY_BYTES * len(self.keys) + self.holders.nbytes
        if held + incoming <= self.packed_bytes:
            return 0
        by_round = _bytes_by_round(self.starts, self.used, keep, self.round,
                                   self.holders.itemsize)
        from_newest = np.cumsum(by_round[::-1])[::-1]  # bytes kept of rounds >= r
        fits = np.flatnonzero(from_newest + incoming <= self.packed_bytes * ROOM)
        first = int(fits[0]) if len(fits) else self.round + 1
        self.dropped |= first > 0
        return first

    def _reserve(self, n: int, h: int, entries: int, holders: int) -> None:
        """Buffers for at least `entries` entries and `holders` holders, whose first `n`
        entries and `h` holders are live. They are made
        once, at what the packed part's bytes could ever hold: pages of memory are only
        resident once written, so the unused end costs address space, not RAM."""
        keys, starts, old_holders, common, used = self._buffers
        if len(keys) < entries:
            cap = max(entries, self.packed_bytes // ENTRY_BYTES + 1)
            keys, starts = _grown(keys, cap, n), _grown(starts, cap + 1, n + 1)
            common, used = _grown(common, cap, n), _grown(used, cap, n)
        if len(old_holders) < holders:
            cap = max(holders, self.packed_bytes // old_holders.itemsize + 1)
            old_holders = _grown(old_holders, cap, h)
        self._buffers = keys, starts, old_holders, common, used

    def _widen(self) -> None:
        """Holders in 64 bits from now on."""
        wide = np.empty(max(len(self.holders), self.packed_bytes // 8 + 1), dtype=np.uint64)
        wide[:len(self.holders)] = self.holders
        keys, starts, _, common, used = self._buffers
        self._buffers = keys, starts, wide, common, used
        self._view(len(self.keys), len(self.holders))

    def _view(self, n: int, h: int) -> None:
        """The packed arrays: the first `n` entries and `h` holders of the buffers."""
        keys, starts, holders, common, used = self._buffers
        self.keys, self.starts, self.holders = keys[:n], starts[:n + 1], holders[:h]
        self.common, self.used = common[:n], used[:n]
        starts[n] = h


def _grown(buffer: np.ndarray, size: int, live: int) -> np.ndarray:
    """A buffer of `size` items holding the first `live` of `buffer`."""
    out = np.empty(size, dtype=buffer.dtype)
    out[:live] = buffer[:live]
    return out


@njit(cache=True)
def _bytes_by_round(starts, used, keep, rounds, itemsize):  # pragma: no cover - compiled
    """Bytes of the entries `keep` marks, by the packing round of their last use."""
    out = np.zeros(rounds + 1, dtype=np.int64)
    for i in range(len(used)):
        if keep[i]:
            out[used[i]] += ENTRY_BYTES + itemsize * (starts[i + 1] - starts[i])
    return out


@njit(cache=True)
def _compact(keys, starts, holders, common, used, keep, oldest):  # pragma: no cover
    """Move the entries `keep` marks and last used in round `oldest` or later to the
    front, in order (each to a place at or before its own); (entries, holders) kept."""
    w = 0
    while w < len(keys) and keep[w] and used[w] >= oldest:  # a kept prefix stays put
        w += 1
    hw = starts[w]
    for i in range(w, len(keys)):
        s, e = starts[i], starts[i + 1]  # read before starts[w] (w <= i) is written
        if keep[i] and used[i] >= oldest:
            keys[w], common[w], used[w], starts[w] = keys[i], common[i], used[i], hw
            for t in range(s, e):
                holders[hw] = holders[t]
                hw += 1
            w += 1
    starts[w] = hw
    return w, hw


@njit(cache=True)
def _merge_back(keys, starts, holders, common, used, n, h, ykeys, ystarts, yholders,
                ycommon, round_):  # pragma: no cover - compiled
    """Merge young entries (sorted, no key among the first `n` packed ones) into the
    buffers from the back: with i old and j young entries left, the next goes to
    i + j - 1 >= i, so no entry is overwritten before it moves. The end of old entry i is
    kept aside (`end`), for starts[i + 1] may already hold a new start."""
    i, j = n - 1, len(ykeys) - 1
    e, top, end = n + len(ykeys), h + len(yholders), h
    starts[e] = top
    while j >= 0:
        e -= 1
        if i >= 0 and keys[i] > ykeys[j]:
            s = starts[i]
            top -= end - s
            for t in range(end - s - 1, -1, -1):  # backwards: the two ranges may overlap
                holders[top + t] = holders[s + t]
            keys[e], common[e], used[e] = keys[i], common[i], used[i]
            end, i = s, i - 1
        else:
            s = ystarts[j]
            top -= ystarts[j + 1] - s
            for t in range(ystarts[j + 1] - s):
                holders[top + t] = yholders[s + t]
            keys[e], common[e], used[e] = ykeys[j], ycommon[j], round_
            j -= 1
        starts[e] = top
    return n + len(ykeys), h + len(yholders)


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
