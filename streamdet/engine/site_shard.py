"""The site shard of a Kafka pipeline: site statistics and neighbourhoods (SPEC §8).

A site's figures sum over its pages, and a page's figures come from two roles: its pop(d)
and its chunks' counts in L from every gram shard (each counts the grams and chunks it
owns), its patch fraction, quilted flag and URL from its doc shard. Neighbourhoods need
all of them at once (μ + σ is over every neighbourhood), so one shard gathers them: doc
shard 0, the *site shard*, beside its own documents.

- A gram shard sends, after each batch, its *share* of every document whose share moved
  (pop(d), occurrences in L, occurrences counted here), and a last one (gone) when it
  withdraws the document: absolute values stamped with its input offset.
- A doc shard sends the *part* of every document it re-scored (URL, patch grams, grams,
  quilted, cause), and an empty part when a version is replaced: absolute, stamped with
  its input offsets.

Both are absolute and stamped, so a message sent again, or an old one overtaken by a
newer one after a crash, changes nothing. The site shard keeps them (`s<docno><g>`,
`p<docno>` in table `sites`) and turns each changed document into the same contribution
and place a `streamdet run` keeps (engine.sites, engine.badness), whose roles then settle
the totals and events exactly as there. A page counts once its part is in; shares that
come before it wait for it.

The site shard does this beside its own documents, for every page of the pipeline, so
its cost is paid on one shard: a batch reads what it needs in one multi-get per kind of
record (the batch's shares, its parts, its changed documents' parts and shares), never
one RocksDB call per document, and a URL's host and deepest neighbourhood are parsed once
while it stays among the recently changed (`_where`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np

from .badness import BadnessRole, Place
from .keyed import KeyedRecords, u64key
from .labelled import contains_fixed
from .neighbourhoods import neighbourhoods
from .params import Params
from .servers import host_of
from .sites import Contribution, SiteRole

SITE_SHARD = 0  # the doc shard that keeps site totals and neighbourhoods
WHERE_CACHE = 1 << 14  # URLs whose host and deepest neighbourhood are kept parsed
SHARE_COLUMNS = 7  # docno, gram shard, stamp, live, pop (int64 bits), in L, counted
_SHARE = struct.Struct("<QqQQ")  # stamp, pop, in L, counted
_PART = struct.Struct("<QQQB")  # stamp, patch grams, grams, quilted
_STAMP = 8  # the bytes of a part's stamp, ahead of what it says


@dataclass(frozen=True)
class SitePart:
    """A doc shard's part of one document version (url "": the version was replaced)."""

    docno: int
    stamp: int
    url: str
    n_patch: int = 0
    n_grams: int = 0
    quilted: bool = False
    cause: str = ""


def share_rows(rows: list[tuple[int, int, int, bool, int, int, int]]) -> np.ndarray:
    """Shares (docno, gram shard, stamp, live, pop, in L, counted) as a message's rows."""
    if not rows:
        return np.zeros((0, SHARE_COLUMNS), np.uint64)
    out = np.asarray([[d, g, st, live, pop & 0xFFFFFFFFFFFFFFFF, i, n]
                      for d, g, st, live, pop, i, n in rows], dtype=np.uint64)
    return out.reshape(-1, SHARE_COLUMNS)


class SiteView(Protocol):
    """What the site shard needs from the state (implemented by state.txn.Txn)."""

    sites: KeyedRecords


@lru_cache(maxsize=WHERE_CACHE)
def _where(url: str) -> tuple[str, str]:
    """A URL's host and deepest neighbourhood: a document whose pop(d) moves is changed
    again and again, each time with the same URL."""
    return host_of(url), neighbourhoods(url)[-1]


def _share_key(docno: int, gram_shard: int) -> bytes:
    return b"s" + u64key(docno) + u64key(gram_shard)


def _part_key(docno: int) -> bytes:
    return b"p" + u64key(docno)


def _part_record(p: SitePart) -> bytes:
    """A part as kept: its stamp, then what it says (a replaced version's says nothing:
    a tombstone, so that an older part sent again stays out)."""
    if not p.url:
        return _PART.pack(p.stamp, 0, 0, 0)
    return _PART.pack(p.stamp, p.n_patch, p.n_grams, p.quilted) + p.url.encode("utf-8")


def keep_shares(txn: SiteView, shares: list[tuple[np.ndarray, str]],
                changed: dict[int, str]) -> None:
    """Keep a batch's shares (each message's rows with the page that caused them), in
    their order; a share older than the one kept is passed over (a key met twice in the
    batch is compared with its last write here), and one that says what the kept one
    says only renews its stamp. A withdrawn share is deleted: a withdrawal is the
    version's last message from its gram shard. A document a share changed (into
    `changed`) names the page that moved the share (its message's cause), not itself: it
    may have come long before."""
    rows = [(r, cause) for msg, cause in shares for r in msg.tolist()]
    if not rows:
        return
    keys = [_share_key(r[0], r[1]) for r, _ in rows]
    kept = dict(zip(keys, txn.sites.get_many(keys), strict=True))
    stamps = {k: _SHARE.unpack(v)[0] for k, v in kept.items() if v is not None}
    for key, (row, cause) in zip(keys, rows, strict=True):
        d, _g, stamp, live, pop, inside, total = row
        if stamps.get(key, -1) > stamp:
            continue  # overtaken by a newer share
        pop = pop - (1 << 64) if pop >= 1 << 63 else pop
        raw = _SHARE.pack(stamp, pop, inside, total) if live else None
        txn.sites.put(key, raw)
        stamps[key] = stamp
        old, kept[key] = kept[key], raw
        if old is None or raw is None or old[_STAMP:] != raw[_STAMP:]:
            changed[d] = cause or changed.get(d, "")


def share_totals(txn: SiteView, docnos: list[int], shards: int) -> list[tuple[int, int]]:
    """(occurrences in L, occurrences) of each document, summed over the shares of the
    `shards` gram shards kept here (0, 0 where none is), in one multi-get."""
    raws = txn.sites.get_many([_share_key(d, g) for d in docnos for g in range(shards)])
    out = []
    for j in range(len(docnos)):
        found = [_SHARE.unpack(r) for r in raws[j * shards : (j + 1) * shards] if r]
        out.append((sum(f[2] for f in found), sum(f[3] for f in found)))
    return out


class SiteShard:
    """Gathers shares and parts; settles site totals and neighbourhoods."""

    def __init__(self, params: Params, shards: int) -> None:
        self.params = params
        self.shards = shards  # gram shards: each document has a share from each
        self.sites = SiteRole(params)
        self.badness = BadnessRole(params)
        self.cause = ""  # the newest cause among the parts it has applied

    def reconcile(self, txn: SiteView, next_seq: Callable[[int], int],
                  shown: MutableMapping[str, str]) -> list[dict]:
        """The events that end a new owner's catch-up: each site and neighbourhood whose
        status differs from what consumers hold (SiteRole.reconcile,
        BadnessRole.reconcile), caused by the newest part applied."""
        return (self.sites.reconcile(txn, shown, next_seq, self.cause)
                + self.badness.reconcile(txn, shown, next_seq, self.cause))

    def process(self, txn: SiteView, shares: list[tuple[np.ndarray, str]],
                parts: list[SitePart], next_seq: Callable[[int], int],
                shown: MutableMapping[str, str] | None = None) -> list[dict]:
        """Apply a batch's shares (each message's rows with the page that caused them)
        and parts; return the `site` events."""
        changed: dict[int, str] = {}
        keep_shares(txn, shares, changed)
        self._parts(txn, parts, changed)
        if not changed:
            return []
        contributions, places = self._figures(txn, changed)
        events = self.sites.settle(txn, contributions, next_seq, shown)
        return events + self.badness.settle(txn, places, next_seq, shown)

    def _parts(self, txn: SiteView, parts: list[SitePart], changed: dict[int, str]) -> None:
        """The batch's parts in their order, each kept unless older than the part kept.
        A doc shard sends a part for every document it re-scored, and most re-scores
        move neither its patch grams nor its quilted flag: a part that says what the kept
        one says only renews the stamp and changes no document (its figures would come
        out the same). Where a share changed the document in this batch, the part still
        names the cause."""
        if not parts:
            return
        keys = [_part_key(p.docno) for p in parts]
        kept = dict(zip(keys, txn.sites.get_many(keys), strict=True))
        for key, p in zip(keys, parts, strict=True):
            old = kept[key]
            if old is not None and _PART.unpack_from(old)[0] > p.stamp:
                continue
            raw = _part_record(p)
            txn.sites.put(key, raw)
            kept[key] = raw
            self.cause = p.cause or self.cause
            if old is None or old[_STAMP:] != raw[_STAMP:] or p.docno in changed:
                changed[p.docno] = p.cause

    def _figures(self, txn: SiteView, changed: dict[int, str]
                 ) -> tuple[dict[int, tuple[Contribution | None, str]],
                            dict[int, tuple[Place | None, str]]]:
        """Each changed document's contribution and place now (None: not live), from one
        multi-get of their parts and their shares from every gram shard."""
        docnos = list(changed)
        g = self.shards
        keys = [_part_key(d) for d in docnos]
        keys += [_share_key(d, i) for d in docnos for i in range(g)]
        raws = txn.sites.get_many(keys)
        n = len(docnos)
        contributions: dict[int, tuple[Contribution | None, str]] = {}
        places: dict[int, tuple[Place | None, str]] = {}
        for j, (d, raw) in enumerate(zip(docnos, raws[:n], strict=True)):
            url = raw[_PART.size :].decode("utf-8") if raw is not None else ""
            cause = changed[d] or url
            if not url:
                contributions[d] = places[d] = (None, cause)
                continue
            _, n_patch, n_grams, quilted = _PART.unpack_from(raw)
            pop = inside = total = 0
            for share in raws[n + j * g : n + (j + 1) * g]:
                if share is not None:
                    _, p, i, t = _SHARE.unpack(share)
                    pop, inside, total = pop + p, inside + i, total + t
            host, deepest = _where(url)
            contributions[d] = (Contribution.at(host, pop, n_patch, n_grams, bool(quilted)),
                                cause)
            places[d] = (Place(contains_fixed(inside, total), deepest), cause)
        return contributions, places
