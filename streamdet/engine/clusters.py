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
    s<url>    what the URL's last `cluster` event showed, and the stamp of the row it
              came of (absent: alone under its own URL, stamp 0); in a Kafka pipeline
              the doc shards keep these, the cluster shard the rest

Events (SPEC §6): a `cluster` event goes out for a URL whenever its (cluster id, size
class) differs from what its last one showed. A page that arrives alone shows what a
consumer assumes of any URL it has heard nothing about, and sends nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .components import Components
from .keyed import prefix_end, u64key
from .sketches import Sketch, resemblance

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


def shown_key(url: str) -> bytes:
    return b"s" + url.encode("utf-8")


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
    flipped: set[int] = field(default_factory=set)  # clusters that went from 1 to 2 or back
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
            raw = txn.near.get(cluster_key(number))
            b.clusters[number] = None if raw is None else Cluster.decode(raw)
            c = b.clusters[number]
            b.start[number] = None if c is None else (c.id, c.together)
        return b.clusters[number]

    @staticmethod
    def number_of(txn, docno: int) -> int | None:
        raw = txn.near.get(group_key(docno))
        return None if raw is None else _u64(raw)

    @staticmethod
    def row(txn, docno: int, url: str, seen: dict[int, tuple[str, int]] | None = None
            ) -> tuple[str, int, int]:
        """(cluster id, cluster size, exact duplicates) of a live version (a version
        without a sketch is a cluster of one). `seen` keeps clusters' (id, size) by
        number for a caller asking about many members: a cluster is decoded once."""
        seen = {} if seen is None else seen
        number = ClusterRole.number_of(txn, docno)
        if number is None:
            return url, 1, 0
        if number not in seen:
            raw = txn.near.get(cluster_key(number))
            c = Cluster.decode(raw) if raw is not None else Cluster(url, {docno})
            seen[number] = (c.id, len(c.members))
        kept = txn.near.get(doc_key(docno))  # its sketch's record opens with its exact key
        twins = _u64(txn.near.get(exact_key_of(_u64(kept)))) if kept else 1
        return *seen[number], twins - 1

    @staticmethod
    def members(txn, docno: int) -> set[int]:
        """The live versions in the cluster of `docno` (itself only, without a sketch)."""
        number = ClusterRole.number_of(txn, docno)
        raw = None if number is None else txn.near.get(cluster_key(number))
        return {docno} if raw is None else Cluster.decode(raw).members

    @staticmethod
    def sketch_of(txn, docno: int) -> Sketch | None:
        raw = txn.near.get(doc_key(docno))
        return None if raw is None else Sketch.decode(raw)

    @staticmethod
    def near_of(txn, sk: Sketch, exclude: int | None = None) -> list[tuple[int, float]]:
        """The live versions that are near-duplicates of a sketch (share a band key with
        it), with their estimated resemblance, most alike first: the members of the
        clusters its band keys name that share one. Reads nothing but those clusters, and
        adds nothing (Broder's on-the-fly query; `explain` and `similar`)."""
        bands = sk.bands
        numbers = {_u64(raw, 1) for raw in txn.near.get_many([band_key(k) for k in bands.tolist()])
                   if raw is not None}
        members = sorted({d for n in numbers if (raw := txn.near.get(cluster_key(n)))
                          for d in Cluster.decode(raw).members} - {exclude})
        out = []
        for d, raw in zip(members, txn.near.get_many([doc_key(d) for d in members]), strict=True):
            other = Sketch.decode(raw) if raw is not None else None
            if other is not None and np.intersect1d(bands, other.bands).size:
                out.append((d, resemblance(sk.mins, other.mins)))
        out.sort(key=lambda p: (-p[1], p[0]))
        return out

    @staticmethod
    def prefetch(txn, sketches: list[Sketch]) -> None:
        """Read a batch's band and exact keys in one batched read."""
        keys = [band_key(k) for s in sketches for k in s.bands.tolist()]
        keys += [exact_key_of(s.exact) for s in sketches]
        if keys:
            txn.near.get_many(keys)

    # -- arrivals and withdrawals ----------------------------------------------------------
    def add(self, txn, docno: int, url: str, sketch: Sketch) -> None:
        """A version arrives: it joins (and merges) the clusters of its band keys."""
        bands = sketch.bands.tolist()
        txn.near.put(doc_key(docno), sketch.encode())
        self._count(txn, exact_key_of(sketch.exact), +1)
        held = []  # live holders of each key before this version
        found = {}
        for k in bands:
            raw = txn.near.get(band_key(k))
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
        if len(target.members) == 1:
            self._b.flipped.add(number)
        target.members.add(docno)
        target.id = min(target.id, url)
        txn.near.put(group_key(docno), u64key_le(number))
        for k, n in zip(bands, held, strict=True):  # merges relabel, never recount
            txn.near.put(band_key(k), u64key_le(n + 1) + u64key_le(number))
        self._b.moved.add(docno)
        self._b.cause[number] = url

    def withdraw(self, txn, docno: int, url: str, cause: str) -> None:
        """A version leaves: out of its band keys and its cluster, which becomes suspect
        unless an exact duplicate of the version stays."""
        raw = txn.near.get(doc_key(docno))
        if raw is None:  # a version from before sketches were kept
            return
        kept = Sketch.decode(raw)
        txn.near.put(doc_key(docno), None)
        twins = self._count(txn, exact_key_of(kept.exact), -1)
        for k in kept.bands.tolist():
            braw = txn.near.get(band_key(k))
            left = _u64(braw) - 1
            txn.near.put(band_key(k), u64key_le(left) + braw[8:16] if left else None)
        number = self.number_of(txn, docno)
        txn.near.put(group_key(docno), None)
        if number is None:
            return
        c = self.cluster(txn, number)
        c.members.discard(docno)
        self._b.cause[number] = cause
        if not c.members:
            return
        if len(c.members) == 1:
            self._b.flipped.add(number)
        if c.id == url:
            self._b.stale_id.add(number)
        if not twins and len(kept.bands):
            self._b.suspect.add(number)

    # -- settling --------------------------------------------------------------------------
    def settle(self, txn) -> dict[int, str]:
        """End of a batch: split suspect clusters, find lost ids, write the clusters back.
        Returns the live documents whose cluster (id, size class) may have changed at any
        point of the batch, even if it changed back, each with the URL whose arrival
        caused it: those that moved, and the members of every cluster whose (id, size
        class) differs from the batch's start, or lost the member holding its id, or went
        from one member to two or back. (A consumer may hold a state from inside the
        batch: a Kafka cluster shard's new owner batches the records its predecessor did
        otherwise; see cluster_events.)"""
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
            txn.near.put(cluster_key(number), c.encode() if c and c.members else None)
            now = (c.id, c.together) if c and c.members else None
            touched = number in b.stale_id or number in b.flipped
            if c and c.members and (touched or now != b.start.get(number)):
                cause = b.cause.get(number, "")
                out.update(dict.fromkeys(c.members, cause))
        for docno in b.moved:
            number = self.number_of(txn, docno)
            if number is not None:
                out.setdefault(docno, b.cause.get(number, ""))
        self._b = _Batch()
        return out

    # -- what changed, for events ------------------------------------------------------------
    def rows(self, txn, changed: dict[int, str], stamp: int = 0) -> list[ClusterRow]:
        """The cluster rows of the documents `settle` returned, as of `stamp` (a Kafka
        cluster shard's input offset after the batch; 0 in the embedded engine)."""
        docnos = sorted(changed)
        txn.near.get_many([group_key(d) for d in docnos] + [doc_key(d) for d in docnos])
        seen: dict[int, tuple[str, int]] = {}
        out = []
        for d in docnos:
            cluster, size, twins = self.row(txn, d, txn.url_of(d), seen)
            out.append(ClusterRow(d, cluster, size, twins, stamp, changed[d]))
        return out

    # -- internals -------------------------------------------------------------------------
    @staticmethod
    def _count(txn, key: bytes, step: int) -> int:
        """Add `step` to a count record; return the new count."""
        n = _u64(txn.near.get(key)) + step
        txn.near.put(key, u64key_le(n) if n > 0 else None)
        return n

    def _new_number(self, txn) -> int:
        number = _u64(txn.near.get(NEXT_KEY)) + 1
        txn.near.put(NEXT_KEY, u64key_le(number))
        return number

    def _new(self, number: int, url: str) -> Cluster:
        c = Cluster(url, set())
        self._b.clusters[number] = c
        self._b.start[number] = None
        return c

    def _relabel(self, txn, members: list[int], number: int) -> None:
        """Documents (and their band keys) now in cluster `number`."""
        raws = txn.near.get_many([doc_key(d) for d in members])
        for d, raw in zip(members, raws, strict=True):
            txn.near.put(group_key(d), u64key_le(number))
            for k in Sketch.decode(raw).bands.tolist() if raw else ():
                braw = txn.near.get(band_key(k))
                if braw is not None:
                    txn.near.put(band_key(k), braw[:8] + u64key_le(number))
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
        if other in b.flipped:
            b.flipped.add(number)

    def _split(self, txn, number: int, c: Cluster) -> None:
        """The components of a cluster by its members' band keys: the largest keeps the
        number, each other one gets a new one."""
        members = sorted(c.members)
        self.searched += len(members)
        raws = txn.near.get_many([doc_key(d) for d in members])
        joined = Components(len(members))
        first: dict[int, int] = {}
        for i, raw in enumerate(raws):
            for k in Sketch.decode(raw).bands.tolist() if raw else ():
                joined.join(i, first.setdefault(k, i))
        parts: dict[int, list[int]] = {}
        for i, d in enumerate(members):
            parts.setdefault(joined.find(i), []).append(d)
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


class ClusterRow(NamedTuple):
    """A document version's cluster as of `stamp`: what a doc shard turns into a
    `cluster` event if it differs from what the URL's last one showed."""

    target: int
    cluster: str
    size: int
    exact_dups: int
    stamp: int
    cause: str


def cluster_slot(url: str) -> str:
    """The key of a URL's cluster in a doc shard's map of what consumers were shown (URLs
    key quilt digests, "url other" pairs; a URL holds neither NUL nor space)."""
    return "\x00" + url


def shown_text(cluster: str, together: bool) -> str:
    return ("1" if together else "0") + cluster


def shown_by_cluster(event: dict) -> str:
    return shown_text(event["cluster"], event["cluster_size"] > 1)


def _record(raw: bytes | None, url: str) -> tuple[int, str]:
    """(stamp, shown text) of a URL's record; none: stamp 0, alone under its own URL."""
    if raw is None:
        return 0, shown_text(url, False)
    return _u64(raw), raw[8:].decode("utf-8")


def _encode_record(stamp: int, text: str) -> bytes:
    return u64key_le(stamp) + text.encode("utf-8")


def cluster_events(txn, rows: list[ClusterRow], next_seq: Callable[[int], int],
                   params: dict, shown: MutableMapping[str, str] | None = None) -> list[dict]:
    """`cluster` events for the rows of live versions that show a URL something else
    than its last one did (rows of replaced versions and rows older than the URL's last
    are passed over; the newest row of a target wins). Compared with the URL's record,
    or with `shown` (by cluster_slot) where a doc shard's new owner knows what consumers
    were shown. Their seq is the URL's, shared with its other events (SPEC §3)."""
    newest: dict[int, ClusterRow] = {}
    for r in rows:
        if r.target not in newest or r.stamp >= newest[r.target].stamp:
            newest[r.target] = r
    live = []
    for r in newest.values():
        name = txn.name(r.target)
        entry = txn.url_entry(name[1]) if name is not None else None
        if entry is not None and entry[0] == r.target:
            live.append((name[1], r))
    records = txn.near.get_many([shown_key(url) for url, _ in live])
    events = []
    for (url, r), raw in zip(live, records, strict=True):
        stamp, text = _record(raw, url)
        if r.stamp < stamp:
            continue
        slot = cluster_slot(url)
        last = shown[slot] if shown is not None and slot in shown else text
        now = shown_text(r.cluster, r.size > 1)
        if (r.stamp, now) != (stamp, text):
            default = r.stamp == 0 and now == shown_text(url, False)
            txn.near.put(shown_key(url), None if default else _encode_record(r.stamp, now))
        if now == last:
            continue
        if shown is not None:
            shown[slot] = now
        _, seq = txn.url_entry(url)
        seq = next_seq(seq)
        txn.put_url(url, r.target, seq)
        events.append(cluster_event(url, seq, r.cluster, r.size, r.exact_dups, r.cause,
                                    params))
    return events


def reconcile_shown(txn, shown: Mapping[str, str]) -> None:
    """A doc shard's new owner, its state replayed with a batching of its own: make each
    URL's record say what consumers hold (`shown`, read from the whole deltas partition:
    a URL without a slot there never had a `cluster` event), so that rows met after the
    catch-up compare with that. A replay may have skipped a row its last owner applied
    (the version replaced within a batch of the replay, not of the owner), or the other
    way round."""
    held = {key[1:].decode("utf-8"): raw
            for key, raw in txn.near.scan(b"s", prefix_end(b"s"))}
    urls = set(held) | {slot[1:] for slot in shown if slot[:1] == "\x00"}
    for url in sorted(urls):
        stamp, text = _record(held.get(url), url)
        want = shown.get(cluster_slot(url), shown_text(url, False))
        if want != text:
            txn.near.put(shown_key(url), _encode_record(stamp, want))


def cluster_event(url: str, seq: int, cluster: str, size: int, exact_dups: int,
                  cause: str, params: dict) -> dict:
    """A `cluster` event (SPEC §6), without `at` (stamped by the adapter)."""
    return {"event": "cluster", "url": url, "seq": seq, "cluster": cluster,
            "cluster_size": size, "exact_dups": exact_dups, "cause": cause,
            "params": params}


def u64key_le(n: int) -> bytes:
    return n.to_bytes(8, "little")
