"""The cluster role (SPEC §6): near-duplicate clusters kept current as versions arrive and
leave, and the documents whose cluster changed.

Two documents are near-duplicates when they share one of their 15 band keys
(engine.sketches), so every band key's live holders are pairwise near-duplicates and lie
in one cluster: a band key records how many live documents hold it and the number of
their cluster. That is all an arrival needs:

- *Arrival.* The clusters named by the new version's band keys merge, with it, into the
  largest of them; the members of the others are relabelled (their documents and their
  band keys): a merge costs the size of the smaller clusters.
- *Withdrawal.* The version leaves its cluster and its band keys. The rest may fall
  apart, so the cluster is *suspect* and is checked once, when the batch is settled: its
  members' band keys are joined by a union-find (15 per member), linear in the cluster's
  size. A version with an exact duplicate left (same token sequence, so the same band
  keys) cannot split anything and leaves no suspicion: 10,000 copies of a template page
  re-fetched one by one are never searched.
- *Settling.* After a batch: suspect clusters are split (the largest part keeps the
  number, the others get new ones), the ids (smallest member URL) of clusters that lost
  theirs are found again, and the documents whose (id, size class) may have changed are
  returned: those that moved, and every member of a cluster whose id or size class
  (alone / in a cluster) changed. A cluster that only grew keeps its members quiet.

Records (table `near`, told apart by a prefix byte):
    d<docno>  the version's sketch (sketches.Sketch: exact key, 15 band keys, 84 min-hashes)
    g<docno>  the number of its cluster
    b<key>    a band key: live holders, cluster number
    x<key>    an exact key: live holders
    c<number> a cluster: its id (smallest URL) and its members
    n         the next cluster number
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..state.schema import u64key
from .sketches import Sketch

_U64 = np.dtype("<u8")
NEXT_KEY = b"n"


def doc_key(docno: int) -> bytes:
    return b"d" + u64key(docno)


def group_key(docno: int) -> bytes:
    return b"g" + u64key(docno)


def band_key(key: int) -> bytes:
    return b"b" + u64key(key)


def exact_key_of(key: int) -> bytes:
    return b"x" + u64key(key)


def cluster_key(number: int) -> bytes:
    return b"c" + u64key(number)


def _u64(raw: bytes | None, at: int = 0) -> int:
    return 0 if raw is None else int.from_bytes(raw[8 * at : 8 * at + 8], "little")


@dataclass
class Cluster:
    id: str
    members: set[int]

    def encode(self) -> bytes:
        url = self.id.encode("utf-8")
        head = len(url).to_bytes(4, "little") + url
        return head + np.asarray(sorted(self.members), dtype=_U64).tobytes()

    @staticmethod
    def decode(raw: bytes) -> Cluster:
        n = int.from_bytes(raw[:4], "little")
        members = np.frombuffer(raw[4 + n :], dtype=_U64).tolist()
        return Cluster(raw[4 : 4 + n].decode("utf-8"), set(members))

    @property
    def together(self) -> bool:
        """Its size class: in a cluster (True) or alone."""
        return len(self.members) > 1


@dataclass
class _Batch:
    """What a batch changed, until it is settled."""

    clusters: dict[int, Cluster | None] = field(default_factory=dict)  # read or changed
    start: dict[int, tuple[str, bool] | None] = field(default_factory=dict)  # at first touch
    suspect: set[int] = field(default_factory=set)
    stale_id: set[int] = field(default_factory=set)
    moved: set[int] = field(default_factory=set)  # documents whose cluster number changed
    cause: dict[int, str] = field(default_factory=dict)  # cluster -> last URL touching it


class ClusterRole:
    """The near-duplicate clusters of one state (all documents: one role per pipeline)."""

    def __init__(self) -> None:
        self._b = _Batch()
        self.searched = 0  # members of suspect clusters searched for a split (a counter)
        self.splits = 0  # clusters that fell apart (a counter)

    # -- reading -------------------------------------------------------------------------
    def cluster(self, txn, number: int) -> Cluster | None:
        b = self._b
        if number not in b.clusters:
            raw = txn.near(cluster_key(number))
            b.clusters[number] = None if raw is None else Cluster.decode(raw)
            c = b.clusters[number]
            b.start[number] = None if c is None else (c.id, c.together)
        return b.clusters[number]

    @staticmethod
    def number_of(txn, docno: int) -> int | None:
        raw = txn.near(group_key(docno))
        return None if raw is None else _u64(raw)

    @staticmethod
    def row(txn, docno: int, url: str) -> tuple[str, int, int]:
        """(cluster id, cluster size, exact duplicates) of a live version, from the
        committed state (a version without a sketch is a cluster of one)."""
        number = ClusterRole.number_of(txn, docno)
        raw = None if number is None else txn.near(cluster_key(number))
        if raw is None:
            return url, 1, 0
        c = Cluster.decode(raw)
        kept = txn.near(doc_key(docno))
        twins = _u64(txn.near(exact_key_of(Sketch.decode(kept).exact))) if kept else 1
        return c.id, len(c.members), twins - 1

    @staticmethod
    def prefetch(txn, sketches: list[Sketch]) -> None:
        """Read a batch's band and exact keys in one batched read."""
        keys = [band_key(k) for s in sketches for k in s.bands.tolist()]
        keys += [exact_key_of(s.exact) for s in sketches]
        if keys:
            txn.near_many(keys)

    # -- arrivals and withdrawals ----------------------------------------------------------
    def add(self, txn, docno: int, url: str, sketch: Sketch) -> None:
        """A version arrives: it joins (and merges) the clusters of its band keys."""
        bands = sketch.bands.tolist()
        txn.put_near(doc_key(docno), sketch.encode())
        self._count(txn, exact_key_of(sketch.exact), +1)
        held = []  # live holders of each key before this version
        found = {}
        for k in bands:
            raw = txn.near(band_key(k))
            held.append(_u64(raw))
            if raw is not None:
                number = _u64(raw, 1)
                found[number] = self.cluster(txn, number)
        if found:
            number = max(found, key=lambda n: (len(found[n].members), -n))
            target = found[number]
            for other in sorted(found):
                if other != number:
                    self._merge(txn, number, target, other, found[other])
        else:
            number = self._new_number(txn)
            target = self._new(number, url)
        target.members.add(docno)
        target.id = min(target.id, url)
        txn.put_near(group_key(docno), u64key_le(number))
        for k, n in zip(bands, held, strict=True):  # merges relabel, never recount
            txn.put_near(band_key(k), u64key_le(n + 1) + u64key_le(number))
        self._b.moved.add(docno)
        self._b.cause[number] = url

    def withdraw(self, txn, docno: int, url: str, cause: str) -> None:
        """A version leaves: out of its band keys and its cluster, which becomes suspect
        unless an exact duplicate of the version stays."""
        raw = txn.near(doc_key(docno))
        if raw is None:  # a version from before sketches were kept
            return
        kept = Sketch.decode(raw)
        txn.put_near(doc_key(docno), None)
        twins = self._count(txn, exact_key_of(kept.exact), -1)
        for k in kept.bands.tolist():
            braw = txn.near(band_key(k))
            left = _u64(braw) - 1
            txn.put_near(band_key(k), u64key_le(left) + braw[8:16] if left else None)
        number = self.number_of(txn, docno)
        txn.put_near(group_key(docno), None)
        if number is None:
            return
        c = self.cluster(txn, number)
        c.members.discard(docno)
        self._b.cause[number] = cause
        if not c.members:
            return
        if c.id == url:
            self._b.stale_id.add(number)
        if not twins and len(kept.bands):
            self._b.suspect.add(number)

    # -- settling --------------------------------------------------------------------------
    def settle(self, txn) -> dict[int, str]:
        """End of a batch: split suspect clusters, find lost ids, write the clusters back.
        Returns the live documents whose cluster (id, size class) may have changed, each
        with the URL whose arrival caused it."""
        b = self._b
        for number in sorted(b.suspect):
            c = b.clusters.get(number)
            if c is not None and c.members:
                self._split(txn, number, c)
        for number in sorted(b.stale_id):
            c = b.clusters.get(number)
            if c is not None and c.members:
                c.id = min(txn.url_of(d) for d in c.members)
        out: dict[int, str] = {}
        for number, c in b.clusters.items():
            txn.put_near(cluster_key(number), c.encode() if c and c.members else None)
            now = (c.id, c.together) if c and c.members else None
            if c and c.members and now != b.start.get(number):
                cause = b.cause.get(number, "")
                out.update(dict.fromkeys(c.members, cause))
        for docno in b.moved:
            number = self.number_of(txn, docno)
            if number is not None:
                out.setdefault(docno, b.cause.get(number, ""))
        self._b = _Batch()
        return out

    # -- internals -------------------------------------------------------------------------
    @staticmethod
    def _count(txn, key: bytes, step: int) -> int:
        """Add `step` to a count record; return the new count."""
        n = _u64(txn.near(key)) + step
        txn.put_near(key, u64key_le(n) if n > 0 else None)
        return n

    def _new_number(self, txn) -> int:
        number = _u64(txn.near(NEXT_KEY)) + 1
        txn.put_near(NEXT_KEY, u64key_le(number))
        return number

    def _new(self, number: int, url: str) -> Cluster:
        c = Cluster(url, set())
        self._b.clusters[number] = c
        self._b.start[number] = None
        return c

    def _relabel(self, txn, members: list[int], number: int) -> None:
        """Documents (and their band keys) now in cluster `number`."""
        raws = txn.near_many([doc_key(d) for d in members])
        for d, raw in zip(members, raws, strict=True):
            txn.put_near(group_key(d), u64key_le(number))
            for k in Sketch.decode(raw).bands.tolist() if raw else ():
                braw = txn.near(band_key(k))
                if braw is not None:
                    txn.put_near(band_key(k), braw[:8] + u64key_le(number))
        self._b.moved.update(members)

    def _merge(self, txn, number: int, target: Cluster, other: int, c: Cluster) -> None:
        b = self._b
        self._relabel(txn, sorted(c.members), number)
        target.members |= c.members
        target.id = min(target.id, c.id)
        c.members = set()
        if other in b.suspect:
            b.suspect.add(number)
        if other in b.stale_id:
            b.stale_id.add(number)

    def _split(self, txn, number: int, c: Cluster) -> None:
        """The components of a cluster by its members' band keys: the largest keeps the
        number, each other one gets a new one."""
        members = sorted(c.members)
        self.searched += len(members)
        raws = txn.near_many([doc_key(d) for d in members])
        parent = list(range(len(members)))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        first: dict[int, int] = {}
        for i, raw in enumerate(raws):
            for k in Sketch.decode(raw).bands.tolist() if raw else ():
                j = first.setdefault(k, i)
                ri, rj = find(i), find(j)
                if ri != rj:
                    parent[max(ri, rj)] = min(ri, rj)
        parts: dict[int, list[int]] = {}
        for i, d in enumerate(members):
            parts.setdefault(find(i), []).append(d)
        if len(parts) == 1:
            return
        self.splits += 1
        ordered = sorted(parts.values(), key=lambda p: (-len(p), p[0]))
        c.members = set(ordered[0])
        self._b.stale_id.add(number)
        cause = self._b.cause.get(number, "")
        for part in ordered[1:]:
            new = self._new_number(txn)
            piece = self._new(new, min(txn.url_of(d) for d in part))
            piece.members = set(part)
            self._b.cause[new] = cause
            self._relabel(txn, part, new)


def u64key_le(n: int) -> bytes:
    return n.to_bytes(8, "little")
