"""`spam_score` on `quilt` and `rescore` events (SPEC §10): each page's score as `streamdet
rank` would give it on the state the batch leaves, from the same signals
(engine.spam_signals) and the model `streamdet label` last stored (engine.spam_model; the
blind one before any label). A page's own stored verdict decides its score (1 or 0).

Scored once a batch is in, after every detector has settled (clusters split, pairs and
sites' totals written), so an event's score is that of the state after its batch. What
changes a page's signals without changing its cover (its host gains a quilt, a source
gains a near-duplicate, a label retrains the model) makes no event: the score an event
carries holds until the next one, and `rank` gives the current ones.

Everything the signals read around the batch's scored pages is read in a few batched
reads: the pages' and their sources' clusters (table near), the sources' partners (table
partials, engine.pair_index) and whether those are quilts (their sites contributions),
the pages' hosts' totals (table sites), contains(L, f) and the verdicts (table chunks)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from .clusters import cluster_key, group_key
from .doc_role import current
from .labelled import shares
from .pair_index import partners_of
from .servers import host_of
from .sites import Contribution, contribution_key, read_totals
from .spam_model import VERDICT_SCORE, stored_model, stored_verdicts
from .spam_signals import Page, Signals, signals
from .transaction import Transaction

SCORED = ("quilt", "rescore")  # the events that carry spam_score


class StateInputs:
    """Where the signals' inputs around the scored pages live in a `streamdet run` state:
    clusters in table near, whether a page is quilted in its sites contribution, hosts'
    totals in table sites, contains(L, f) in table chunks. A Kafka doc shard reads its
    copies of the same figures instead (engine.score_replica)."""

    def __init__(self, txn: Transaction) -> None:
        self.txn = txn

    def clusters(self, docnos: dict[str, int]) -> dict[str, tuple[str, int]]:
        """(cluster id, size) of the live pages (URL -> docno) that are in a cluster."""
        txn, urls = self.txn, list(docnos)
        groups = txn.near.get_many([group_key(docnos[u]) for u in urls])
        numbers = {u: int.from_bytes(raw[:8], "little") for u, raw in zip(
            urls, groups, strict=True) if raw is not None}
        wanted = sorted(set(numbers.values()))
        records = dict(zip(wanted, txn.near.get_many([cluster_key(n) for n in wanted]),
                           strict=True))
        out = {}
        for url, number in numbers.items():
            raw = records[number]
            if raw is not None:  # id, then its members, 8 bytes each
                n = int.from_bytes(raw[:4], "little")
                out[url] = (raw[4 : 4 + n].decode("utf-8"), (len(raw) - 4 - n) // 8)
        return out

    def quilted(self, urls: list[str]) -> dict[str, bool]:
        """Whether each live page is quilted, from its contribution to its sites' totals
        (kept current by every re-score: engine.sites)."""
        txn = self.txn
        live = [(u, e[0]) for u in urls if (e := txn.url_entry(u)) is not None]
        raws = txn.sites.get_many([contribution_key(d) for _, d in live])
        return {url: (Contribution.decode(raw).quilted if raw is not None
                      else txn.doc(docno).result.quilted)
                for (url, docno), raw in zip(live, raws, strict=True)}

    def hosts(self, hosts: list[str]) -> dict[str, tuple[int, int]]:
        """(live pages, quilts) of each host, from its sites' totals (engine.sites)."""
        keys = {h: b"h" + h.encode("utf-8") for h in hosts}
        totals = read_totals(self.txn, list(keys.values()))
        return {h: (totals[k].pages, totals[k].quilted) for h, k in keys.items()}

    def contains(self, docnos: list[int]) -> list[float]:
        """contains(L, f) of each live document (0 without chunks)."""
        return [c[0] / c[1] if c and c[1] else 0.0 for c in shares(self.txn, docnos)]


class Inputs(Protocol):
    """What the signals read around the scored pages beyond their covers and the
    partners' records: StateInputs, or a Kafka doc shard's copies (engine.score_replica)."""

    def clusters(self, docnos: dict[str, int]) -> dict[str, tuple[str, int]]: ...

    def quilted(self, urls: list[str]) -> dict[str, bool]: ...

    def hosts(self, hosts: list[str]) -> dict[str, tuple[int, int]]: ...

    def contains(self, docnos: list[int]) -> list[float]: ...


class BatchSurroundings:
    """engine.spam_signals.Surroundings over the state a batch leaves, for the pages it
    was read for (`read`): clusters of the pages and their sources, the sources'
    partners and whether each partner is quilted."""

    def __init__(self) -> None:
        self.clusters: dict[str, tuple[str, int]] = {}  # URL -> (cluster id, size)
        self.partner_lists: dict[str, list[str]] = {}
        self.quilts: dict[str, bool] = {}

    def cluster(self, url: str) -> str:
        return self.clusters.get(url, (url, 1))[0]

    def cluster_size(self, url: str) -> int:
        return self.clusters.get(url, (url, 1))[1]

    def partners(self, url: str) -> Collection[str]:
        return self.partner_lists.get(url, ())

    def quilted(self, url: str) -> bool:
        return self.quilts.get(url, False)

    def read(self, txn: Transaction, inputs: Inputs, docnos: dict[str, int],
             sources: list[str]) -> None:
        """Read what the signals need of these live pages (URL -> docno) and of the
        sources among them."""
        self.clusters.update(inputs.clusters(docnos))
        found = partners_of(txn.partials, sources)
        self.partner_lists.update(zip(sources, found, strict=True))
        self.quilts.update(inputs.quilted(sorted({o for others in found for o in others})))


def score_events(txn: Transaction, events: list[dict], inputs: Inputs | None = None) -> None:
    """Give every quilt and rescore event among `events` (of one batch, scored on the
    state after it) its page's `spam_score`, reading around the pages through `inputs`
    (StateInputs over `txn` when not given)."""
    scored = [e for e in events if e["event"] in SCORED]
    if not scored:
        return
    scores = page_scores(txn, list(dict.fromkeys(e["url"] for e in scored)), inputs)
    for e in scored:
        e["spam_score"] = scores[e["url"]]


def page_scores(txn: Transaction, urls: list[str], inputs: Inputs | None = None
                ) -> dict[str, float]:
    """The score of each of these live, quilted pages as an event of it would carry
    now: its stored verdict's, or the stored model's of its signals."""
    verdicts = dict(zip(urls, stored_verdicts(txn.chunks, urls), strict=True))
    pages = [u for u in urls if verdicts[u] is None]
    scores = {u: VERDICT_SCORE[v] for u, v in verdicts.items() if v is not None}
    if pages:
        scores.update(_model_scores(txn, inputs or StateInputs(txn), pages))
    return scores


def _model_scores(txn: Transaction, inputs: Inputs, urls: list[str]) -> dict[str, float]:
    """The stored model's score of each live, quilted page."""
    model = stored_model(txn.chunks)
    return {url: model.rounded(sig.values)
            for url, sig in page_signals(txn, inputs, urls).items()}


def page_signals(txn: Transaction, inputs: Inputs, urls: list[str]) -> dict[str, Signals]:
    """The signals of each of these live pages on the state as it is, read around them
    through `inputs`: what the model scores, and what a label trains it on."""
    docnos = {u: txn.url_entry(u)[0] for u in urls}
    covers = {u: current(txn, txn.doc(d)) for u, d in docnos.items()}  # quilted: not stale
    around: dict[str, int] = dict(docnos)
    for cover in covers.values():
        aligned = len(cover.docnos) == len(cover.sources)
        for i, (src, _) in enumerate(cover.sources):
            around.setdefault(src, cover.docnos[i] if aligned else txn.url_entry(src)[0])
    sources = sorted({src for c in covers.values() for src, _ in c.sources})
    near = BatchSurroundings()
    near.read(txn, inputs, around, sources)
    hosts = inputs.hosts(sorted({host_of(u) for u in urls}))
    contains = dict(zip(urls, inputs.contains([docnos[u] for u in urls]), strict=True))
    out = {}
    for url in urls:
        cover, (pages, quilts) = covers[url], hosts[host_of(url)]
        page = Page(url, cover.patch_fraction, cover.sources, near.cluster_size(url),
                    contains[url], pages, quilts)
        out[url] = signals(near, page)
    return out
