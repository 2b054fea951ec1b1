"""What a Kafka doc shard keeps of the rest of the pipeline to give its events their
`spam_score` (SPEC §10), and the engine.spam_score inputs that read it.

A page's score reads, besides its own cover, figures that other shards hold: its sources'
clusters (the cluster shard), whether their partners are quilted and its host's live
pages and quilts (every doc shard's documents), its contains(L, f) (the gram shards). An
event leaves in the round its page's cover changed, so the doc shard that makes it must
hold those figures already: every doc shard keeps a copy of them, fed by the messages the
other shards send it anyway or now send it as well (docs/kafka-protocol.md, "The spam
score"):

- each doc shard's parts (the site shard's messages, engine.site_shard) go to every doc
  shard: a URL's newest quilted flag (`Q<url>`) and, counted from them, each host's live
  pages and quilts (`H<host>`);
- the cluster shard's cluster rows go to every doc shard: each version's newest cluster
  id and size (`C<docno>`);
- a gram shard's shares of a document go to its doc shard as well as to the site shard,
  kept as the site shard keeps them (engine.site_shard.keep_shares);
- each doc shard's owned partners of the URLs whose pairs it moved (engine.pair_records)
  go to every doc shard, which moves each pair in and out of its own `r<url>` records:
  the partners from both sides; the newest stamp of each URL's record is kept (`P<url>`).

Every record is absolute and stamped, so repeats change nothing and the newest wins.
Records live in table `sites` under the prefix byte 0x02, apart from the site shard's own
(pairs: in table `partials`, as `streamdet run` keeps them). A batch reads each kind in
one multi-get."""

from __future__ import annotations

import struct
from collections.abc import Iterable

from .clusters import ClusterRow
from .keyed import u64key
from .pair_index import PairIndex, apply_moves, partners_of
from .pair_records import PairRecords, newest, owned_partners
from .servers import host_of
from .site_shard import SitePart, share_totals
from .transaction import Transaction

QUILTED = b"\x02q"  # + URL -> stamp, quilted
HOST = b"\x02h"  # + host -> live pages, quilts
CLUSTER = b"\x02c"  # + docno -> stamp, size, then the cluster id
PAIRS = b"\x02p"  # + URL -> stamp of its newest pair record
_STAMP = struct.Struct("<Q")
_QUILTED = struct.Struct("<QB")
_HOST = struct.Struct("<qq")
_CLUSTER = struct.Struct("<QQ")


def keep_parts(txn: Transaction, parts: Iterable[SitePart]) -> None:
    """Follow the live versions' parts (in their order; older than the kept one: passed
    over) into the URLs' quilted flags and their hosts' counts."""
    live = [p for p in parts if p.url]
    if not live:
        return
    urls = list(dict.fromkeys(p.url for p in live))
    kept = {u: _QUILTED.unpack(raw) if raw else None for u, raw in zip(
        urls, txn.sites.get_many([QUILTED + u.encode("utf-8") for u in urls]), strict=True)}
    moved: dict[str, list[int]] = {}
    for p in live:
        old = kept[p.url]
        if old is not None and old[0] > p.stamp:
            continue
        was = None if old is None else bool(old[1])
        kept[p.url] = (p.stamp, int(p.quilted))
        txn.sites.put(QUILTED + p.url.encode("utf-8"), _QUILTED.pack(p.stamp, p.quilted))
        if was is None or was != p.quilted:
            counts = moved.setdefault(host_of(p.url), [0, 0])
            counts[0] += was is None
            counts[1] += int(p.quilted) - int(bool(was))
    hosts = list(moved)
    for host, raw in zip(hosts, txn.sites.get_many([HOST + h.encode("utf-8") for h in hosts]),
                         strict=True):
        pages, quilts = _HOST.unpack(raw) if raw else (0, 0)
        txn.sites.put(HOST + host.encode("utf-8"),
                      _HOST.pack(pages + moved[host][0], quilts + moved[host][1]))


def keep_clusters(txn: Transaction, rows: list[ClusterRow]) -> None:
    """Follow cluster rows (in their order; older than the kept one: passed over) into
    each version's cluster id and size."""
    if not rows:
        return
    keys = [CLUSTER + u64key(r.target) for r in rows]
    stamps = {k: _CLUSTER.unpack_from(raw)[0] for k, raw in zip(
        keys, txn.sites.get_many(keys), strict=True) if raw}
    for key, r in zip(keys, rows, strict=True):
        if stamps.get(key, -1) > r.stamp:
            continue
        stamps[key] = r.stamp
        txn.sites.put(key, _CLUSTER.pack(r.stamp, r.size) + r.cluster.encode("utf-8"))


def keep_pairs(txn: Transaction, moves: list[tuple[str, str, bool]],
               records: list[PairRecords]) -> None:
    """Other doc shards' pair moves (messages of pipeline format shards-9, read from
    partitions written before, in their order), then their pair records: each URL's
    newest, unless an older one than kept, replaces the URL's owned partners, moving
    each pair in or out of both pages' partners (one batched read of each kind)."""
    if moves:
        apply_moves(txn.partials, moves)
    found = newest(records)
    urls = sorted(found)
    keys = [PAIRS + u.encode("utf-8") for u in urls]
    kept = {u: _STAMP.unpack(raw)[0] for u, raw in zip(urls, txn.sites.get_many(keys),
                                                        strict=True) if raw}
    urls = [u for u in urls if kept.get(u, -1) <= found[u][0]]
    both_sides = PairIndex()
    for url, partners in zip(urls, partners_of(txn.partials, urls), strict=True):
        stamp, owned = found[url]
        both_sides.follow(url, owned_partners(url, partners), owned)
        txn.sites.put(PAIRS + url.encode("utf-8"), _STAMP.pack(stamp))
    both_sides.flush(txn.partials)


class ReplicaInputs:
    """engine.spam_score.Inputs over a doc shard's copies (`shards`: the gram shards,
    each holding a share of every document)."""

    def __init__(self, txn: Transaction, shards: int) -> None:
        self.txn = txn
        self.shards = shards

    def clusters(self, docnos: dict[str, int]) -> dict[str, tuple[str, int]]:
        urls = list(docnos)
        raws = self.txn.sites.get_many([CLUSTER + u64key(docnos[u]) for u in urls])
        return {u: (raw[_CLUSTER.size :].decode("utf-8"), _CLUSTER.unpack_from(raw)[1])
                for u, raw in zip(urls, raws, strict=True) if raw}

    def quilted(self, urls: list[str]) -> dict[str, bool]:
        raws = self.txn.sites.get_many([QUILTED + u.encode("utf-8") for u in urls])
        return {u: bool(_QUILTED.unpack(raw)[1]) for u, raw in zip(urls, raws, strict=True)
                if raw}

    def hosts(self, hosts: list[str]) -> dict[str, tuple[int, int]]:
        raws = self.txn.sites.get_many([HOST + h.encode("utf-8") for h in hosts])
        return {h: _HOST.unpack(raw) if raw else (0, 0)
                for h, raw in zip(hosts, raws, strict=True)}

    def contains(self, docnos: list[int]) -> list[float]:
        return [inside / total if total else 0.0
                for inside, total in share_totals(self.txn, docnos, self.shards)]
