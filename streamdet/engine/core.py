"""One batch of arrivals through both roles, in arrival order (the embedded pipeline).

For each page: withdraw the URL's previous version if any, give the new version a docno,
add its grams to the gram index and apply the resulting deltas to the documents they
concern. Once the whole batch is in, every document whose patch set or sources changed is
re-scored once and compared with its last result; changes become events. Documents are
re-scored against the state after the batch, so the final state is the same however the
stream is cut into batches. Partial duplicates (SPEC §7) follow the same course: each
arrival's sentence keys go into their postings, the links change documents' partners, and
the documents whose partners changed report their pairs once the batch is in. So do
near-duplicate clusters (SPEC §6): versions join and leave them as they arrive and are
replaced, and the clusters are settled (split where they fell apart) once a batch is in.
Last, the batch's quilt and rescore events get their pages' spam scores (SPEC §10).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from .analysis import Analyzed
from .badness import BadnessRole, Place
from .clusters import ClusterRole, cluster_events
from .deltas import arrival_stats
from .doc_role import Dirty, DocRole, Touch
from .documents import DocResult, DocState
from .events import trap_event
from .grams import text_grams
from .labelled import LabelledSet, contains_fixed, shares
from .params import Params
from .partials import PairDirty, PartialRole, Partners, pair_owner, sentences_key
from .postings import PagePlan, add_document, plan_batch, withdraw_document
from .rescoring import rescore
from .sentence_postings import add_keys, prefetch, rows_of, withdraw_keys
from .sentences import Sentences
from .sites import Contribution, SiteRole
from .spam_score import score_events
from .transaction import Transaction


@dataclass
class BatchStats:
    pages: int = 0
    rescored: int = 0  # documents re-scored, arrivals included
    fanout: list[int] | None = None  # per arrival: earlier documents it affected
    went_common: int = 0  # grams that became common
    new_documents: int = 0  # URLs seen for the first time
    traps: int = 0  # pages turned away as crawler traps (SPEC §8)
    held_slots: int = 0  # slots of the documents the transaction held (Txn.held_slots)
    deltas: int = 0  # deltas applied to documents (engine.deltas)
    deferred: int = 0  # of them, additions a stale document left pending (DocState.defer_add)


def turn_away_traps(pages: Iterable[Analyzed], params: Params
                    ) -> tuple[list[Analyzed], list[dict]]:
    """The pages that enter the state, and a `trap` event for each that does not (SPEC
    §8: its URL is a crawler's recursion error; any version of it the state holds stays)."""
    kept, traps = [], []
    for page in pages:
        event = trap_event(page.url, params)
        if event is None:
            kept.append(page)
        else:
            traps.append(event)
    return kept, traps


class Engine:
    def __init__(self, params: Params) -> None:
        self.params = params
        self.docs = DocRole(params)
        self.partials = PartialRole(params)
        self.clusters = ClusterRole()
        self.sites = SiteRole(params)
        self.labelled = LabelledSet(params.chunk_threshold)
        self.badness = BadnessRole(params)
        self._rows: dict[int, np.ndarray] = {}
        self._fresh = np.zeros(0, dtype=np.uint64)  # the batch's fresh sentence keys

    def process(self, txn: Transaction, pages: Iterable[Analyzed]) -> tuple[list[dict], BatchStats]:
        """Apply a batch of analysed pages; return the events and counters."""
        dirty: Dirty = {}
        applied, deferred = self.docs.applied, self.docs.deferred
        before: dict[int, DocResult] = {}  # previous result of re-fetched URLs, by new docno
        withdrawn: dict[int, str] = {}  # versions replaced in this batch -> the new URL
        stats = BatchStats(fanout=[])
        pages, traps = turn_away_traps(pages, self.params)
        stats.traps = len(traps)
        plans = plan_batch(txn, [p.grams for p in pages])
        arrived: dict[int, str] = {}  # new versions -> their URLs
        partners, paired = Partners(txn), {}
        self._rows = {}  # of the batch: documents' sentence rows
        self._fresh = prefetch(txn, [rows_of(p.sentences) for p in pages])
        self.clusters.prefetch(txn, [p.sketch for p in pages if p.sketch is not None])
        self.labelled.prefetch(txn, [p.chunks for p in pages])
        for page, plan in zip(pages, plans, strict=True):
            stats.pages += 1
            docno, old, fanout = self._arrive(txn, page, plan, dirty, before, stats)
            stats.fanout.append(fanout)
            arrived[docno] = page.url
            if old is not None:
                withdrawn[old] = page.url
            self._pair(txn, page, docno, old, partners, paired)
        causes = {d: t.cause for d, t in dirty.items()}
        scored = [d for d, t in dirty.items() if not t.pending]
        events = traps + rescore(self.docs, txn, dirty, before, lambda last: last + 1)
        newest = next(reversed(arrived.values()), "")
        events += self.sites.settle(
            txn, self._contributions(txn, causes, scored, withdrawn, newest),
            lambda last: last + 1)
        events += self.badness.settle(txn, self._places(txn, arrived, withdrawn),
                                      lambda last: last + 1)
        events += self.partials.report(txn, partners, paired, lambda last: last + 1)
        rows = self.clusters.rows(txn, self.clusters.settle(txn))
        events += cluster_events(txn, rows, lambda last: last + 1, self.params.to_dict())
        partners.flush()
        score_events(txn, events)  # on the state the batch leaves
        stats.rescored = len(scored)
        stats.held_slots = txn.held_slots()
        stats.deltas = self.docs.applied - applied
        stats.deferred = self.docs.deferred - deferred
        self._rows, self._fresh = {}, self._fresh[:0]  # the batch's: not held until the next
        return events, stats

    def _contributions(self, txn: Transaction, causes: dict[int, str], scored: list[int],
                       withdrawn: dict[int, str], newest: str
                       ) -> dict[int, tuple[Contribution | None, str]]:
        """What each document the batch changed (re-scored, pop(d) moved, replaced) now
        adds to its sites' totals (None: nothing, it is gone), with its cause (SPEC §8):
        one whose pop(d) alone moved names the batch's newest page, as the Kafka site
        shard does (engine.site_shard), not itself: it may have come long before. One
        that only took pending additions (not `scored`) adds what it added, unless its
        pop(d) moved: it is left out, as SiteRole.settle would pass it over."""
        out: dict[int, tuple[Contribution | None, str]] = {
            d: (None, url) for d, url in withdrawn.items()}
        popped = [d for d in txn.pop_changed() if d not in withdrawn]
        live = list({*scored, *popped})  # re-scored ones are live: _arrive undirties the old
        for d, pop, (n_patch, n_grams, quilted) in zip(
                live, txn.pop_many(live), txn.figures(live), strict=True):
            url = txn.url_of(d)
            out[d] = (Contribution.of(url, pop, n_patch, n_grams, quilted),
                      causes.get(d, newest or url))
        return out

    def label(self, txn: Transaction, keys: np.ndarray, cause: str) -> tuple[list[dict], int]:
        """Informed discovery (SPEC §8): chunks a user labels join L; return the `site`
        events of the neighbourhoods it makes (or unmakes) bad, and how many chunks were
        not labelled before. `cause` names what was labelled (a file, a URL)."""
        fresh = self.labelled.label(txn, keys, cause)
        events = self.badness.settle(txn, self._places(txn, {}, {}), lambda last: last + 1)
        return events, fresh

    def _places(self, txn: Transaction, arrived: dict[int, str], withdrawn: dict[int, str]
                ) -> dict[int, tuple[Place | None, str]]:
        """What each document the batch changed (arrived, its occurrences in L moved,
        replaced) now adds to its neighbourhoods (None: nothing), with its cause."""
        out: dict[int, tuple[Place | None, str]] = {
            d: (None, url) for d, url in withdrawn.items()}
        changed = {d: cause for d, cause in {**self.labelled.take_moved(), **arrived}.items()
                   if d not in withdrawn}
        for (d, cause), counted in zip(changed.items(), shares(txn, list(changed)),
                                       strict=True):
            value = 0 if counted is None else contains_fixed(*counted)
            out[d] = (Place.of(txn.url_of(d), value), cause)
        return out

    def _sentence_rows(self, txn: Transaction, docnos: list[int]) -> dict[int, np.ndarray]:
        """Documents' sentences as rows, read once a batch in one batched read (a
        boilerplate sentence's holders are asked for theirs by every page of the batch
        that holds it)."""
        missing = [d for d in docnos if d not in self._rows]
        raws = txn.partials.get_many([sentences_key(d) for d in missing])
        for d, raw in zip(missing, raws, strict=True):
            self._rows[d] = rows_of(Sentences.decode(raw))
        return {d: self._rows[d] for d in docnos}

    def _pair(self, txn: Transaction, page: Analyzed, docno: int, old: int | None,
              partners: Partners, paired: PairDirty) -> None:
        """SPEC §7 for one arrival as version `docno` (replacing `old`): the replaced
        version leaves its keys, the new one joins them, and the links change partners."""
        if old is not None:
            links = withdraw_keys(txn, old, self._sentence_rows(txn, [old])[old], page.url)
            self.partials.apply(txn, partners, links, paired)
            self.partials.replaced(txn, partners, paired, old)
        self.partials.arrived(txn, partners, paired, docno, page.url, page.sentences)
        if not len(page.sentences):
            return
        self._rows[docno] = rows_of(page.sentences)
        links = add_keys(txn, docno, self._rows[docno], self.params.m,
                         lambda ys: self._sentence_rows(txn, ys),
                         pair_owner(txn, self.params), self._fresh, page.url)
        self.partials.apply(txn, partners, links, paired)

    def _version_grams(self, txn: Transaction, docno: int) -> list[int]:
        """All grams of a stored version, to withdraw: its kept text tokenized and hashed
        again as analysis did (re-fetches are few, and the state keeps no gram sets). A
        version from before texts were kept gives its patch grams (SPEC §1 needs no more)."""
        grams = text_grams(txn.text(docno), self.params.k)
        return txn.doc(docno).patch_grams() if grams is None else grams.tolist()

    def _arrive(self, txn: Transaction, page: Analyzed, plan: PagePlan, dirty: Dirty,
                before: dict[int, DocResult], stats: BatchStats) -> tuple[int, int | None, int]:
        """Apply one arrival; return its docno, the version it replaced (None: a new URL),
        and how many earlier documents it changed."""
        entry = txn.url_entry(page.url)
        seq, old = 0, None
        affected: set[int] = set()
        prev = DocResult()
        if entry is not None:
            old, seq = entry
            prev = before.pop(old, None) or txn.doc(old).result
            withdrawn = withdraw_document(txn, old, self._version_grams(txn, old), page.url,
                                          self.params.popular)
            affected = self.docs.apply(txn, withdrawn, dirty)
            self.labelled.withdraw(txn, old, page.url)
            txn.put_doc(old, None)
            txn.put_text(old, None)
            self.clusters.withdraw(txn, old, page.url, page.url)
            txn.kill(old)
            dirty.pop(old, None)
        docno = txn.allocate_docno()
        before[docno] = prev
        txn.put_name(docno, page.server, page.url)
        txn.put_doc(docno, DocState(n_grams=len(page.grams)))
        txn.put_text(docno, page.text)
        txn.put_url(page.url, docno, seq)
        if page.sketch is not None:
            self.clusters.add(txn, docno, page.url, page.sketch)
        dirty[docno] = Touch(page.url, None)
        self.labelled.add(txn, docno, page.chunks, page.url)
        added = add_document(txn, docno, page.grams, plan, self.params.m, page.url,
                             self.params.popular)
        stats.went_common += arrival_stats(docno, added)[1]
        stats.new_documents += entry is None
        affected |= self.docs.apply(txn, added, dirty)
        affected.discard(docno)
        return docno, old, len(affected)
