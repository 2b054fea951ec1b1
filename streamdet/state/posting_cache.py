"""The store's cache of overlay postings, most of it packed in numpy arrays.

A batch looks up every gram it shares with earlier pages, and the overlay (grams with two
or more holders) outgrows any cache of one Python tuple a gram: such an entry costs ~236
bytes resident for a posting of four holders, so the budget's share held under a million
of them, and a gram that fell out was read again from RocksDB (a batched multi-get, ~1.7
µs a key when every block is cached, against ~0.1 µs for a lookup here).

Two parts:
- `young`, the postings written or read since the last packing (a state.posting_map:
  gram -> interned posting, decoded tuples as the engine uses them);
- the packed part: keys sorted (uint64), each entry's holders in one array (CSR:
  `starts` into `holders`; uint32 while every docno fits, uint64 from the first that
  does not), a flag for COMMON, and the packing round each entry was last used in. ~21
  bytes an entry plus 4 a holder: about six times as many entries in the same memory.

Lookups probe `young`, then the packed part with one `searchsorted` for the whole batch.
Once `young` is full it is packed in: merged with the packed entries (its values win),
and when the packed part is then over its bytes, the entries unused for the most rounds go
first. A cache only: every value is a committed one (state.txn), and what it forgets is
read again from the store.

A packing works in place: the packed arrays are the front of buffers sized once for the
packed part's bytes; the entries kept move forward, then the young ones are merged in
from the back, CHUNK entries a step, so a packing's temporaries are a few MB. Merging
into new arrays would hold the old and new ones at once, ~1.2 times the packed bytes
above the budget while it runs.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..engine.documents import COMMON, Posting
from ..engine.sorted_search import locate
from ..engine.sorting import sorted_unique
from .posting_map import PostingMap

# keys, the postings they name, and which of them each key has (PostingCache.find)
Part = tuple[np.ndarray, list[Posting | None], np.ndarray]

YOUNG_ENTRY_BYTES = 240  # a dict entry: key, tuple of ~4 holders, their ints, dict slot
ENTRY_BYTES = 21  # a packed entry but its holders: key 8, start 8, round 4, COMMON flag 1
# a packing that must forget makes room down to this share of the packed part's bytes
ROOM = 7 / 8
YOUNG_SHARE = 4  # young holds 1/YOUNG_SHARE of the cache's bytes
CHUNK = 1 << 16  # entries a step of a packing moves: its temporaries stay a few MB
_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd: a row hash's multiplier (_distinct_rows)


class PostingCache:
    """Overlay postings in `capacity` bytes (about): find / put."""

    def __init__(self, capacity: int) -> None:
        self.young_entries = max(1, capacity // YOUNG_SHARE // YOUNG_ENTRY_BYTES)
        self.packed_bytes = max(0, capacity - self.young_entries * YOUNG_ENTRY_BYTES)
        self.young = PostingMap()
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

    def find(self, keys: np.ndarray) -> tuple[list[Part], np.ndarray]:
        """The postings of `keys` held here, as parts (keys, postings, which: keys[i]'s
        posting is postings[which[i]]), and the keys not held."""
        young = self.young
        parts: list[Part] = []
        ids = young.ids(keys)
        hit = ids >= 0
        if hit.any():
            parts.append((keys[hit], young.postings, ids[hit]))
        missing = keys[~hit]
        if not len(missing) or not len(self.keys):
            return parts, missing
        at, held = locate(self.keys, missing)
        if not held.any():
            return parts, missing
        at = at[held]
        self.used[at] = self.round
        parts.extend(self._parts(missing[held], at))
        return parts, missing[~held]

    def _parts(self, keys: np.ndarray, at: np.ndarray) -> list[Part]:
        """Packed entries `at` (of `keys`) as parts, the entries of one length at once:
        each distinct row of holders becomes one posting (a passage's grams share one)."""
        starts = self.starts[at]
        lengths = self.starts[at + 1] - starts
        common = self.common[at]
        parts: list[Part] = []
        if common.any():
            parts.append((keys[common], [COMMON], np.zeros(int(common.sum()), np.intp)))
            lengths[common] = -1
        for n in sorted_unique(lengths).tolist():
            if n < 0:
                continue
            rows = lengths == n
            if not n:
                parts.append((keys[rows], [()], np.zeros(int(rows.sum()), np.intp)))
                continue
            block = self.holders[starts[rows][:, None] + np.arange(n)]
            distinct, which = _distinct_rows(block)
            parts.append((keys[rows], list(map(tuple, distinct.tolist())), which))
        return parts

    def put(self, keys: np.ndarray, postings: list[Posting | None], which: np.ndarray
            ) -> None:
        """keys[i]'s posting is postings[which[i]] (then at most one packing)."""
        self.young.assign_from(keys, postings, which)
        if len(self.young) >= self.young_entries:
            self.pack()

    def pack(self) -> None:
        """Merge `young` into the packed arrays (its values replace theirs), first
        forgetting the entries unused for the most rounds if the result would be over
        the packed part's bytes. In place, a chunk of entries at a time: the kept entries
        move forward, then the young ones are merged in from the back."""
        if not self.young:
            return
        ykeys, ystarts, yholders, ycommon = _packed(*self.young.contents(),
                                                    self.young.postings)
        self.young = PostingMap()
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
        if oldest := self._oldest_kept(keep, incoming):
            keep &= self.used >= oldest
        n, h = self._compact(keep)
        self._reserve(n, h, n + len(ykeys), h + len(yholders))
        self._merge(n, h, ykeys, ystarts, yholders, ycommon)
        self._view(n + len(ykeys), h + len(yholders))
        self.round += 1

    def _oldest_kept(self, keep: np.ndarray, incoming: int) -> int:
        """The oldest round of last use whose entries stay: whole rounds go, least recent
        first, until what stays and `incoming` bytes fit; down to ROOM of the bytes, so
        that the next packings need not count again."""
        held = ENTRY_BYTES * len(self.keys) + self.holders.nbytes
        if held + incoming <= self.packed_bytes:
            return 0
        by_round = np.zeros(self.round + 1)
        for a, b in _chunks(len(self.keys)):
            kept = keep[a:b]
            size = ENTRY_BYTES + self.holders.itemsize * np.diff(self.starts[a:b + 1])
            by_round += np.bincount(self.used[a:b][kept], weights=size[kept],
                                    minlength=self.round + 1)
        from_newest = np.cumsum(by_round[::-1])[::-1]  # bytes kept of rounds >= r
        fits = np.flatnonzero(from_newest + incoming <= self.packed_bytes * ROOM)
        first = int(fits[0]) if len(fits) else self.round + 1
        self.dropped |= first > 0
        return first

    def _compact(self, keep: np.ndarray) -> tuple[int, int]:
        """Move the entries `keep` marks to the front, in order; (entries, holders) kept.
        Chunk by chunk from the first entry that goes: a chunk's entries go to places
        before its end, which no later chunk reads."""
        keys, starts, holders, common, used = self._buffers
        if keep.all():
            return len(keep), int(starts[len(keep)])
        w = int(np.argmin(keep))
        hw = int(starts[w])
        for a, b in _chunks(len(keep), w):
            at = np.flatnonzero(keep[a:b]) + a
            first, lengths = starts[at], starts[at + 1] - starts[at]
            cells = int(lengths.sum())
            holders[hw:hw + cells] = holders[_runs(first, lengths)]
            k = len(at)
            keys[w:w + k], common[w:w + k], used[w:w + k] = keys[at], common[at], used[at]
            starts[w:w + k] = hw + np.cumsum(lengths) - lengths
            w, hw = w + k, hw + cells
        starts[w] = hw
        return w, hw

    def _merge(self, n: int, h: int, ykeys: np.ndarray, ystarts: np.ndarray,
               yholders: np.ndarray, ycommon: np.ndarray) -> None:
        """Merge young entries (sorted, no key among the first `n` packed ones, whose
        holders are the first `h`) into the buffers. The old entries move first, chunk by
        chunk from the back, each to its place plus the young entries before it: a chunk
        lands at or after its own place, where no chunk still to move lies. Then the young
        entries fill the gaps."""
        keys, starts, holders, common, used = self._buffers
        before = np.searchsorted(keys[:n], ykeys)  # old entries before each young one
        yfirst = ystarts[:-1] + starts[before]  # where each young entry's holders go
        ydest = np.arange(len(ykeys)) + before
        for a, b in reversed(list(_chunks(n))):
            p = np.searchsorted(ykeys, keys[a:b])  # young entries before each old one
            if not p[-1]:
                break  # no young entry before these: they and all before them stay put
            lo, hi = int(starts[a]), int(starts[b])
            shift = ystarts[p]  # young holders before each old entry
            cells = np.arange(lo, hi) + np.repeat(shift, np.diff(starts[a:b + 1]))
            holders[cells] = holders[lo:hi].copy()
            moved = starts[a:b] + shift
            dest = np.arange(a, b) + p
            # copies: a chunk's values and its places overlap
            keys[dest], common[dest] = keys[a:b].copy(), common[a:b].copy()
            used[dest] = used[a:b].copy()
            starts[dest] = moved
        keys[ydest], common[ydest], used[ydest], starts[ydest] = ykeys, ycommon, self.round, \
            yfirst
        holders[_runs(yfirst, np.diff(ystarts))] = yholders
        starts[n + len(ykeys)] = h + len(yholders)

    def _reserve(self, n: int, h: int, entries: int, holders: int) -> None:
        """Buffers for at least `entries` entries and `holders` holders, whose first `n`
        entries and `h` holders are live. They are made once, at what the packed part's
        bytes could ever hold: pages of memory are only resident once written, so the
        unused end costs address space, not RAM."""
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
        keys, starts, holders, common, used = self._buffers
        h = len(self.holders)
        wide = _grown(holders, max(h, self.packed_bytes // 8 + 1), h, np.uint64)
        self._buffers = keys, starts, wide, common, used
        self._view(len(self.keys), len(self.holders))

    def _view(self, n: int, h: int) -> None:
        """The packed arrays: the first `n` entries and `h` holders of the buffers."""
        keys, starts, holders, common, used = self._buffers
        self.keys, self.starts, self.holders = keys[:n], starts[:n + 1], holders[:h]
        self.common, self.used = common[:n], used[:n]
        starts[n] = h


def _distinct_rows(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of a 2-d array and which of them each row is. Rows are told
    apart by a hash of their columns (np.unique over rows sorts them as records, several
    times slower), checked against the rows it picks: a collision falls back to that."""
    h = np.zeros(len(block), dtype=np.uint64)
    for column in block.T.astype(np.uint64):
        h = (h ^ column) * _MIX
    _, first, which = np.unique(h, return_index=True, return_inverse=True)
    if (block[first[which]] == block).all():
        return block[first], which
    distinct, which = np.unique(block, axis=0, return_inverse=True)
    return distinct, which.ravel()


def _chunks(n: int, start: int = 0):
    """[a, b) of CHUNK entries from `start` to `n`."""
    for a in range(start, n, CHUNK):
        yield a, min(a + CHUNK, n)


def _runs(first: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Positions first[i] .. first[i] + lengths[i] - 1, run after run."""
    offsets = np.cumsum(lengths) - lengths
    return np.arange(int(lengths.sum())) + np.repeat(first - offsets, lengths)


def _grown(buffer: np.ndarray, size: int, live: int, dtype: type | None = None
           ) -> np.ndarray:
    """A buffer of `size` items (of `dtype`, or `buffer`'s) holding the first `live` of
    `buffer`."""
    out = np.empty(size, dtype=dtype or buffer.dtype)
    out[:live] = buffer[:live]
    return out


def _packed(keys: np.ndarray, ids: np.ndarray, postings: list[Posting | None]
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(keys, starts, holders, common) of keys (sorted) and their postings' ids: each
    distinct posting is read once."""
    used, inverse = np.unique(ids, return_inverse=True)
    values = [postings[i] for i in used.tolist()]
    distinct_common = np.fromiter((p == COMMON for p in values), dtype=bool,
                                  count=len(values))
    values = [() if c else p for p, c in zip(values, distinct_common.tolist(), strict=True)]
    distinct_lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    flat = np.fromiter(itertools.chain.from_iterable(values), dtype=np.uint64,
                       count=int(distinct_lengths.sum()))
    lengths = distinct_lengths[inverse]
    starts = np.concatenate(([0], np.cumsum(lengths)))
    first = (np.cumsum(distinct_lengths) - distinct_lengths)[inverse]
    return keys, starts, flat[_runs(first, lengths)], distinct_common[inverse]
