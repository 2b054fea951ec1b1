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
"""

from __future__ import annotations

import struct
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass

import numpy as np

from ..state.schema import u64key
from .badness import BadnessRole, Place
from .labelled import contains_fixed
from .params import Params
from .sites import Contribution, SiteRole

SITE_SHARD = 0  # the doc shard that keeps site totals and neighbourhoods
SHARE_COLUMNS = 7  # docno, gram shard, stamp, live, pop (int64 bits), in L, counted
_SHARE = struct.Struct("<QqQQ")  # stamp, pop, in L, counted
_PART = struct.Struct("<QQQB")  # stamp, patch grams, grams, quilted


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


class SiteView:
    """What the site shard needs from the state (implemented by state.txn.Txn)."""

    def site_many(self, keys: list[bytes]) -> list[bytes | None]: ...
    def put_site(self, key: bytes, raw: bytes | None) -> None: ...
    def site_scan(self, start: bytes, end: bytes) -> list[tuple[bytes, bytes]]: ...
    def site_prefixed(self, prefix: bytes) -> list[tuple[bytes, bytes]]: ...


class SiteShard:
    """Gathers shares and parts; settles site totals and neighbourhoods."""

    def __init__(self, params: Params) -> None:
        self.params = params
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

    def process(self, txn: SiteView, shares: list[np.ndarray], parts: list[SitePart],
                next_seq: Callable[[int], int],
                shown: MutableMapping[str, str] | None = None) -> list[dict]:
        """Apply a batch's shares and parts; return the `site` events."""
        changed: dict[int, str] = {}
        for rows in shares:
            self._shares(txn, rows, changed)
        for p in parts:
            self._part(txn, p, changed)
        if not changed:
            return []
        contributions, places = self._figures(txn, changed)
        events = self.sites.settle(txn, contributions, next_seq, shown)
        return events + self.badness.settle(txn, places, next_seq, shown)

    @staticmethod
    def _shares(txn: SiteView, rows: np.ndarray, changed: dict[int, str]) -> None:
        rows = rows.tolist()
        keys = [b"s" + u64key(r[0]) + u64key(r[1]) for r in rows]
        for key, old, (d, _g, stamp, live, pop, inside, total) in zip(
                keys, txn.site_many(keys), rows, strict=True):
            if old is not None and _SHARE.unpack(old)[0] > stamp:
                continue  # overtaken by a newer share
            pop = pop - (1 << 64) if pop >= 1 << 63 else pop
            txn.put_site(key, _SHARE.pack(stamp, pop, inside, total) if live else None)
            changed.setdefault(d, "")

    def _part(self, txn: SiteView, p: SitePart, changed: dict[int, str]) -> None:
        key = b"p" + u64key(p.docno)
        old = txn.site_many([key])[0]
        if old is not None and _PART.unpack_from(old)[0] > p.stamp:
            return
        if p.url:
            raw = _PART.pack(p.stamp, p.n_patch, p.n_grams, p.quilted) + p.url.encode("utf-8")
        else:  # replaced: a tombstone, so that an older part sent again stays out
            raw = _PART.pack(p.stamp, 0, 0, 0)
        txn.put_site(key, raw)
        changed[p.docno] = p.cause
        self.cause = p.cause or self.cause

    def _figures(self, txn: SiteView, changed: dict[int, str]
                 ) -> tuple[dict[int, tuple[Contribution | None, str]],
                            dict[int, tuple[Place | None, str]]]:
        """Each changed document's contribution and place now (None: not live)."""
        docnos = list(changed)
        raws = txn.site_many([b"p" + u64key(d) for d in docnos])
        contributions: dict[int, tuple[Contribution | None, str]] = {}
        places: dict[int, tuple[Place | None, str]] = {}
        for d, raw in zip(docnos, raws, strict=True):
            url = raw[_PART.size :].decode("utf-8") if raw is not None else ""
            cause = changed[d] or url
            if not url:
                contributions[d] = places[d] = (None, cause)
                continue
            _, n_patch, n_grams, quilted = _PART.unpack_from(raw)
            pop = inside = total = 0
            for _, share in txn.site_prefixed(b"s" + u64key(d)):
                _, p, i, n = _SHARE.unpack(share)
                pop, inside, total = pop + p, inside + i, total + n
            contributions[d] = (Contribution.of(url, pop, n_patch, n_grams, bool(quilted)),
                                cause)
            places[d] = (Place.of(url, contains_fixed(inside, total)), cause)
        return contributions, places
