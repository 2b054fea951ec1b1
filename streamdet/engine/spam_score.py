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

from .clusters import cluster_key, group_key
from .labelled import shares
from .pair_index import partners_of
from .servers import host_of
from .sites import SHARED, Contribution, Totals, contribution_key
from .spam_model import VERDICT_SCORE, stored_model, stored_verdicts
from .spam_signals import Page, signals
from .transaction import Transaction

SCORED = ("quilt", "rescore")  # the events that carry spam_score


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

    def read(self, txn: Transaction, docnos: dict[str, int], sources: list[str]) -> None:
        """Read what the signals need of these live pages (URL -> docno) and of the
        sources among them."""
        self._read_clusters(txn, docnos)
        found = partners_of(txn.partials, sources)
        self.partner_lists.update(zip(sources, found, strict=True))
        partners = sorted({o for others in found for o in others})
        self._read_quilted(txn, partners)

    def _read_clusters(self, txn: Transaction, docnos: dict[str, int]) -> None:
        urls = list(docnos)
        groups = txn.near.get_many([group_key(docnos[u]) for u in urls])
        numbers = {u: int.from_bytes(raw[:8], "little") for u, raw in zip(
            urls, groups, strict=True) if raw is not None}
        wanted = sorted(set(numbers.values()))
        records = dict(zip(wanted, txn.near.get_many([cluster_key(n) for n in wanted]),
                           strict=True))
        for url, number in numbers.items():
            raw = records[number]
            if raw is not None:  # id, then its members, 8 bytes each
                n = int.from_bytes(raw[:4], "little")
                self.clusters[url] = (raw[4 : 4 + n].decode("utf-8"), (len(raw) - 4 - n) // 8)

    def _read_quilted(self, txn: Transaction, urls: list[str]) -> None:
        """Whether each page is quilted, from its contribution to its sites' totals (kept
        current by every re-score: engine.sites)."""
        live = [(u, e[0]) for u in urls if (e := txn.url_entry(u)) is not None]
        raws = txn.sites.get_many([contribution_key(d) for _, d in live])
        for (url, docno), raw in zip(live, raws, strict=True):
            self.quilts[url] = (Contribution.decode(raw).quilted if raw is not None
                                else txn.doc(docno).result.quilted)


def host_totals(txn: Transaction, hosts: list[str]) -> dict[str, Totals]:
    """The sites' totals of these hosts (engine.sites keeps a host of two pages or more
    under another prefix), in one batched read."""
    keys = [b"h" + h.encode("utf-8") for h in hosts]
    raws = txn.sites.get_many([*keys, *(SHARED[b"h"] + k[1:] for k in keys)])
    n = len(keys)
    return {h: Totals.decode(raws[i] if raws[i] is not None else raws[n + i])
            for i, h in enumerate(hosts)}


def score_events(txn: Transaction, events: list[dict]) -> None:
    """Give every quilt and rescore event among `events` (of one batch, scored on the
    state after it) its page's `spam_score`."""
    scored = [e for e in events if e["event"] in SCORED]
    if not scored:
        return
    urls = list(dict.fromkeys(e["url"] for e in scored))
    verdicts = dict(zip(urls, stored_verdicts(txn.chunks, urls), strict=True))
    pages = [u for u in urls if verdicts[u] is None]
    scores = {u: VERDICT_SCORE[v] for u, v in verdicts.items() if v is not None}
    if pages:
        scores.update(_model_scores(txn, pages))
    for e in scored:
        e["spam_score"] = scores[e["url"]]


def _model_scores(txn: Transaction, urls: list[str]) -> dict[str, float]:
    """The stored model's score of each live, quilted page."""
    docnos = {u: txn.url_entry(u)[0] for u in urls}
    covers = {u: txn.doc(d).result for u, d in docnos.items()}
    around: dict[str, int] = dict(docnos)
    for cover in covers.values():
        aligned = len(cover.docnos) == len(cover.sources)
        for i, (src, _) in enumerate(cover.sources):
            around.setdefault(src, cover.docnos[i] if aligned else txn.url_entry(src)[0])
    sources = sorted({src for c in covers.values() for src, _ in c.sources})
    near = BatchSurroundings()
    near.read(txn, around, sources)
    hosts = host_totals(txn, sorted({host_of(u) for u in urls}))
    contains = dict(zip(urls, shares(txn, [docnos[u] for u in urls]), strict=True))
    model = stored_model(txn.chunks)
    out = {}
    for url in urls:
        cover, totals, counted = covers[url], hosts[host_of(url)], contains[url]
        page = Page(url, cover.patch_fraction, cover.sources, near.cluster_size(url),
                    counted[0] / counted[1] if counted and counted[1] else 0.0,
                    totals.pages, totals.quilted)
        out[url] = model.rounded(signals(near, page).values)
    return out
