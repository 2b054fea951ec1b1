"""Bad neighbourhoods (SPEC §8, after Ardi & Heidemann): URL-prefix neighbourhoods
(engine.neighbourhoods) whose pages hold, on average, much of the labelled set.

badness(N) is the mean of contains(L, f) over N's live documents; N is *bad* when its
badness exceeds μ + σ, the mean and population σ of badness over every neighbourhood of
at least 2 documents. A neighbourhood of one document is never bad: its badness is one
page's figure, which `explain` shows, not a region's.

Exact whatever the order: a document's contains(L, f) is kept as an integer (units of
2^-32, rounded down: engine.labelled.contains_fixed), a neighbourhood's badness as the
integer mean (rounded down) of its documents' values, and μ + σ is compared on integers:
with K neighbourhoods of 2 documents or more, A = Σ badness and B = Σ badness², N is bad
when K·b − A > 0 and (K·b − A)² > K·B − A² (b > A/K + √(B/K − (A/K)²), squared).

Records (table `sites`, beside engine.sites'): `v<docno>` a live document's last
contribution (its value and deepest neighbourhood: the others are its prefixes);
`n<name>` a neighbourhood's documents, Σ values, the seq of its `site` events and
whether the last one said bad; `B<badness><name>` an index of the neighbourhoods of 2
documents or more by badness; `g` K, A, B and how many are bad. μ + σ moves with every
change, and a neighbourhood nobody touched changes status only when the threshold passes
its badness: one range scan of the index between the old and the new threshold finds
them all.
"""

from __future__ import annotations

import bisect
import heapq
import math
import struct
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass
from itertools import islice
from typing import Protocol

from .keyed import KeyedRecords, prefix_end
from .labelled import FIXED_ONE
from .neighbourhoods import neighbourhoods
from .params import Params
from .sites import show, site_slot, slot_subject

_NEIGHBOURHOOD = struct.Struct("<QQQB")  # documents, Σ contains, seq, bad shown
_VALUE = struct.Struct("<Q")
TOP = (1 << 64) - 1
GLOBAL = b"g"


@dataclass
class Hood:
    """A neighbourhood's sums over its live documents, and what its events last showed."""

    docs: int = 0
    total: int = 0  # Σ contains(L, f) in units of 2^-32
    seq: int = 0
    shown: bool = False

    @property
    def badness(self) -> int:
        return self.total // self.docs if self.docs else 0

    def encode(self) -> bytes:
        return _NEIGHBOURHOOD.pack(self.docs, self.total, self.seq, self.shown)

    @classmethod
    def decode(cls, raw: bytes | None) -> Hood:
        if raw is None:
            return cls()
        docs, total, seq, shown = _NEIGHBOURHOOD.unpack(raw)
        return cls(docs, total, seq, bool(shown))


@dataclass
class Spread:
    """K neighbourhoods of 2 documents or more, A = Σ badness, B = Σ badness², and how
    many neighbourhoods are bad now."""

    k: int = 0
    a: int = 0
    b: int = 0
    bad: int = 0

    def count(self, badness: int, sign: int) -> None:
        self.k += sign
        self.a += sign * badness
        self.b += sign * badness * badness

    def is_bad(self, h: Hood) -> bool:
        """SPEC §8's μ + σ rule, on integers."""
        return self.is_bad_at(h.docs, h.badness)

    def is_bad_at(self, docs: int, badness: int) -> bool:
        if docs < 2 or self.k == 0:
            return False
        over = self.k * badness - self.a
        return over > 0 and over * over > self.k * self.b - self.a * self.a

    def threshold(self) -> int:
        """floor(μ + σ): a badness above it may be bad, one at or below it never is."""
        if self.k == 0:
            return TOP
        return (self.a + math.isqrt(self.k * self.b - self.a * self.a)) // self.k

    def encode(self) -> bytes:
        return f"{self.k} {self.a} {self.b} {self.bad}".encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> Spread:
        return cls() if raw is None else cls(*map(int, raw.split()))


@dataclass(frozen=True)
class Place:
    """What one live document adds to its neighbourhoods: contains(L, f), fixed point."""

    value: int
    deepest: str  # its deepest neighbourhood; the others are its prefixes

    @classmethod
    def of(cls, url: str, value: int) -> Place:
        return cls(value, neighbourhoods(url)[-1])

    def names(self) -> list[str]:
        parts = self.deepest.split("/")[:-1]
        return ["/".join(parts[: i + 1]) + "/" for i in range(len(parts))]

    def encode(self) -> bytes:
        return _VALUE.pack(self.value) + self.deepest.encode("utf-8")

    @classmethod
    def decode(cls, raw: bytes) -> Place:
        return cls(_VALUE.unpack_from(raw)[0], raw[_VALUE.size :].decode("utf-8"))


class HoodView(Protocol):
    """What the role needs from the state (implemented by state.txn.Txn): the sites
    table, where neighbourhoods are kept beside the sites."""

    sites: KeyedRecords


def place_key(docno: int) -> bytes:
    return b"v" + docno.to_bytes(8, "big")


_DOCS = struct.Struct("<Q")  # an index entry's value: the neighbourhood's documents


def _index_key(badness: int, name: bytes) -> bytes:
    return b"B" + badness.to_bytes(8, "big") + name


class BadnessRole:
    """Keeps neighbourhoods' badness current and tells when one becomes, or stops
    being, bad."""

    def __init__(self, params: Params) -> None:
        self.params = params

    def settle(self, txn: HoodView, now: dict[int, tuple[Place | None, str]],
               next_seq: Callable[[int], int],
               shown: MutableMapping[str, str] | None = None) -> list[dict]:
        """Apply documents' places as they stand after a batch (None: withdrawn), each
        with the URL that caused its change; return the `site` events (without `at`),
        compared with `shown` where given (engine.sites.show)."""
        docnos = list(now)
        old = dict(zip(docnos, txn.sites.get_many([place_key(d) for d in docnos]), strict=True))
        moves: list[tuple[Place, int]] = []
        cause = ""
        causes: dict[bytes, str] = {}
        for d, (p, why) in now.items():
            before = None if old[d] is None else Place.decode(old[d])
            if before == p:
                continue
            cause = why
            for q, sign in ((before, -1), (p, 1)):
                if q is not None:
                    moves.append((q, sign))
                    causes.update(dict.fromkeys((n.encode("utf-8") for n in q.names()), why))
            txn.sites.put(place_key(d), None if p is None else p.encode())
        if not moves:
            return []
        return self._apply(txn, moves, causes, cause, next_seq, shown)

    def _apply(self, txn: HoodView, moves: list[tuple[Place, int]], causes: dict[bytes, str],
               cause: str, next_seq: Callable[[int], int],
               shown: MutableMapping[str, str] | None) -> list[dict]:
        names = sorted(causes)
        hoods = {n: Hood.decode(r)
                 for n, r in zip(names, txn.sites.get_many([b"n" + n for n in names]), strict=True)}
        spread = Spread.decode(txn.sites.get_many([GLOBAL])[0])
        before = spread.threshold()
        for name in names:  # out of the spread and the index as they were
            h = hoods[name]
            if h.docs >= 2:
                spread.count(h.badness, -1)
                txn.sites.put(_index_key(h.badness, name), None)
        for place, sign in moves:
            for n in place.names():
                h = hoods[n.encode("utf-8")]
                h.docs += sign
                h.total += sign * place.value
        for name in names:
            h = hoods[name]
            if h.docs >= 2:
                spread.count(h.badness, 1)
                txn.sites.put(_index_key(h.badness, name), _DOCS.pack(h.docs))
        events = []
        for name in names:
            events += self._show(spread, name, hoods[name], causes[name], next_seq, shown)
            h = hoods[name]
            txn.sites.put(b"n" + name, h.encode() if h.docs or h.seq else None)
        lo, hi = sorted((before, spread.threshold()))
        if lo < hi:  # the threshold passed these untouched neighbourhoods' badness
            for key, _ in txn.sites.scan(_index_key(lo, b""), _index_key(min(hi, TOP - 1) + 1,
                                                                        b"")):
                name = key[9:]
                if name in hoods:
                    continue
                h = Hood.decode(txn.sites.get_many([b"n" + name])[0])
                was = h.shown
                events += self._show(spread, name, h, cause, next_seq, shown)
                if h.shown != was:
                    txn.sites.put(b"n" + name, h.encode())
        txn.sites.put(GLOBAL, spread.encode() if spread.k or spread.bad else None)
        return events

    def _show(self, spread: Spread, name: bytes, h: Hood, cause: str,
              next_seq: Callable[[int], int],
              shown: MutableMapping[str, str] | None) -> list[dict]:
        """The event of a neighbourhood whose status differs from what its last event
        showed (engine.sites.show); the record and the count of bad ones follow it."""
        bad = spread.is_bad(h)
        if bad != h.shown:
            spread.bad += 1 if bad else -1
        told = show(bad, h.shown, site_slot("neighbourhood", name.decode("utf-8")), shown)
        h.shown = bad
        if not told:
            return []
        return [self._event(name, h, cause, next_seq)]

    def _event(self, name: bytes, h: Hood, cause: str, next_seq: Callable[[int], int]) -> dict:
        """A neighbourhood's `site` event, telling its status (h.shown), with the next seq."""
        h.seq = next_seq(h.seq)
        return {"event": "site", "neighbourhood": name.decode("utf-8"),
                "level": "neighbourhood", "seq": h.seq, **figures(h.docs, h.badness, h.shown),
                "cause": cause, "params": self.params.to_dict()}

    def reconcile(self, txn: HoodView, shown: MutableMapping[str, str],
                  next_seq: Callable[[int], int], cause: str) -> list[dict]:
        """The events that end a Kafka doc shard's catch-up (engine.shard_step): every
        neighbourhood whose status differs from what consumers hold (`shown`; one without
        a slot was never bad for them). The threshold may pass a neighbourhood and come
        back within one of this owner's batches where the last owner's batching stopped
        between, and told consumers; no scan of this owner meets it."""
        names = {name.encode("utf-8") for level, name in filter(None, map(slot_subject, shown))
                 if level == "neighbourhood"}
        threshold = Spread.decode(txn.sites.get_many([GLOBAL])[0]).threshold()
        if threshold < TOP:  # the bad ones now are above it, in the index
            names |= {key[9:] for key, _ in txn.sites.scan(_index_key(threshold + 1, b""),
                                                          prefix_end(b"B"))}
        ordered = sorted(names)
        events = []
        for name, raw in zip(ordered, txn.sites.get_many([b"n" + n for n in ordered]), strict=True):
            h = Hood.decode(raw)  # h.shown: its status now (the role keeps it so)
            if show(h.shown, False, site_slot("neighbourhood", name.decode("utf-8")), shown):
                events.append(self._event(name, h, cause, next_seq))
                txn.sites.put(b"n" + name, h.encode())
        return events


def shown(badness: int) -> float:
    """A badness as `sites` and events show it: to 6 places, the fixed point's own digits
    beyond are noise (two neighbourhoods of one true badness can differ by a unit)."""
    return round(badness / FIXED_ONE, 6)


def figures(docs: int, badness: int, bad: bool) -> dict:
    """A neighbourhood's figures as `sites` and events show them."""
    return {"docs": docs, "badness": shown(badness), "bad": bad}


def neighbourhood_rows(txn: HoodView, min_docs: int = 2) -> list[dict]:
    """`streamdet sites` rows of the neighbourhoods of at least `min_docs` live documents,
    by badness as shown (most first), then by name."""
    return list(ranked_neighbourhoods(txn, min_docs))


CROWD = 256  # index entries whose document counts are looked up in one batch


def ranked_neighbourhoods(txn: HoodView, min_docs: int = 2, bad: bool = False
                          ) -> Iterator[dict]:
    """`neighbourhood_rows`, lazily; only the bad ones if `bad`. Those of 2 documents or
    more are read from the index alone, from its top (it holds their document counts):
    taking the first N rows reads about N entries, and for the badness they end in, the
    index entries of every badness shown alike (a crawl's neighbourhoods without labelled
    chunks all show 0), each read forwards, names in order, and merged by name. The bad
    ones come first and end above the threshold (μ + σ): none at or below it is bad."""
    spread = Spread.decode(txn.sites.get_many([GLOBAL])[0])
    if bad:
        yield from (r for r in _ranked(txn, spread, max(min_docs, 2), spread.threshold())
                    if r["bad"])
    else:
        yield from _ranked(txn, spread, min_docs, -1)


def _ranked(txn: HoodView, spread: Spread, min_docs: int, floor: int) -> Iterator[dict]:
    """The rows by badness as shown, then by name, down to badness `floor` (exclusive)."""
    if min_docs < 2:
        hoods = [(k[1:], Hood.decode(r)) for k, r in txn.sites.scan(b"n", b"o")]
        hoods.sort(key=lambda nh: (-shown(nh[1].badness), nh[0]))
        yield from (_row(name, h.docs, h.badness, spread) for name, h in hoods
                    if h.docs >= min_docs and h.badness > floor)
        return
    below = b"C"  # the index's entries below this key are still to come
    while values := _shown_alike(txn, below, floor):
        runs = [_entry_rows(txn, txn.sites.walk(_index_key(v, b""), _index_key(v + 1, b"")),
                            v, spread, min_docs) for v in values]
        yield from runs[0] if len(runs) == 1 else heapq.merge(*runs, key=_name_order)
        below = _index_key(values[-1], b"")


def _shown_alike(txn: HoodView, below: bytes, floor: int) -> list[int]:
    """The index's badness values under key `below` that show as its highest does, highest
    first (one backward seek each), none at or below `floor`."""
    values: list[int] = []
    least = floor + 1
    while (last := next(txn.sites.walk(b"B", below, back=True), None)) is not None:
        value = int.from_bytes(last[0][1:9], "big")
        if value < least:
            break
        if not values:
            least = max(least, _least_shown_as(value))
        values.append(value)
        below = _index_key(value, b"")
    return values


def _least_shown_as(badness: int) -> int:
    """The least badness shown as this one is (badness values show in runs of ~4,295)."""
    near = range(max(0, badness - 2 * FIXED_ONE // 10**6), badness + 1)
    return near[bisect.bisect_left(near, shown(badness), key=shown)]


def _name_order(row: dict) -> bytes:
    return row["neighbourhood"].encode("utf-8")


def _entry_rows(txn: HoodView, entries: Iterable[tuple[bytes, bytes]], badness: int,
                spread: Spread, min_docs: int) -> Iterator[dict]:
    """The rows of index entries of one badness, in their order (read CROWD at a time,
    so that older entries' counts are looked up in one batch)."""
    entries = iter(entries)
    while chunk := list(islice(entries, CROWD)):
        for (key, _), docs in zip(chunk, _index_docs(txn, chunk), strict=True):
            if docs >= min_docs:
                yield _row(key[9:], docs, badness, spread)


def _index_docs(txn: HoodView, entries: list[tuple[bytes, bytes]]) -> list[int]:
    """Each index entry's document count; an entry written before the index held them
    (its value one byte) is looked up in the neighbourhood's record."""
    docs = [_DOCS.unpack(v)[0] if len(v) == _DOCS.size else -1 for _, v in entries]
    older = [i for i, n in enumerate(docs) if n < 0]
    if older:
        raws = txn.sites.get_many([b"n" + entries[i][0][9:] for i in older])
        for i, raw in zip(older, raws, strict=True):
            docs[i] = Hood.decode(raw).docs
    return docs


def _row(name: bytes, docs: int, badness: int, spread: Spread) -> dict:
    return {"neighbourhood": name.decode("utf-8"),
            **figures(docs, badness, spread.is_bad_at(docs, badness))}


def page_neighbourhoods(txn: HoodView, url: str) -> list[dict]:
    """The figures of a page's neighbourhoods, for `explain`."""
    spread = Spread.decode(txn.sites.get_many([GLOBAL])[0])
    names = [n.encode("utf-8") for n in neighbourhoods(url)]
    return [{"neighbourhood": n.decode("utf-8"), **figures(h.docs, h.badness, spread.is_bad(h))}
            for n, h in zip(names, map(Hood.decode, txn.sites.get_many([b"n" + n for n in names])),
                            strict=True)]


def bad_count(txn: HoodView) -> int:
    """How many neighbourhoods are bad (for the metrics)."""
    return Spread.decode(txn.sites.get_many([GLOBAL])[0]).bad
