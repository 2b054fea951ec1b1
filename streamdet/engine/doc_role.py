"""The doc-shard role: patch sets kept current by deltas, and re-scoring.

Each document keeps its patch grams and which foreign holder holds which of them (DocState,
its (source, slot) pairs). Deltas from the gram role are applied in order as they come; a document
whose patch set or foreign sources changed is marked dirty (a Touch: the URL that caused
it, and what kind of change), and re-scored once per batch.

Most changes to an earlier document are a newly arrived foreign source sharing some of its
text. Those only add candidates to the greedy cover, so re-scoring first checks whether
the stored cover still stands (cover.first_change) and runs the greedy only when it might
not: a loss of patch grams or of a source always re-runs it. A document below theta that
was not quilted is not given a cover at all (a stale result, see DocRole.score): readers
compute it (`current`).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .cover import first_change, greedy_cover
from .deltas import ADD, DROP, GAIN, GAIN_FROM, LOSE, Delta
from .documents import DocResult, DocState
from .grouping import first_seen
from .params import Params


class Touch:
    """What happened to a document in this batch: the URL that last caused a change, and
    the sources it gained (`added`), or None once anything else changed (full re-score).
    `pending`: it only took pending additions (DocState.defer_add), which leave a stale
    result as it is: nothing to re-score, and its figures are as stored."""

    __slots__ = ("cause", "added", "pending")

    def __init__(self, cause: str, added: set[int] | None, pending: bool = False) -> None:
        self.cause = cause
        self.added = added
        self.pending = pending

    def full(self, cause: str) -> None:
        self.cause = cause
        self.added = None
        self.pending = False

    def deferred(self, cause: str) -> None:
        """A pending addition: a document touched otherwise is re-scored in full."""
        if self.pending:
            self.cause = cause
        else:
            self.full(cause)

    def gained(self, cause: str, source: int, doc: DocState) -> None:
        """A foreign source; it counts as added only when the document had no pairs with
        it before this batch (an old source growing would change old gains)."""
        self.cause = cause
        self.pending = False
        if self.added is not None and (source in self.added or not doc.held_before(source)):
            self.added.add(source)
        else:
            self.added = None


Dirty = dict[int, Touch]


class DocView:
    """What the doc role needs from the state (implemented by state.txn.Txn)."""

    def doc(self, docno: int) -> DocState | None: ...
    def load_docs(self, docnos: Iterable[int]) -> None: ...
    def stale_unread(self, docnos: Iterable[int]) -> set[int]: ...
    def defer_add(self, docno: int, source: int, grams: list[int]) -> None: ...
    def load_names(self, docnos: Iterable[int]) -> None: ...
    def touch_doc(self, docno: int) -> None: ...
    def name(self, docno: int) -> tuple[str, str] | None: ...
    def server(self, docno: int) -> str: ...
    def url_of(self, docno: int) -> str: ...


class DocRole:
    def __init__(self, params: Params) -> None:
        self.params = params
        self._anywhere = params.foreign == "none"
        self.applied = 0  # deltas applied, and of them additions left pending: counters
        self.deferred = 0  # that the engine reports per batch (BatchStats)

    def is_foreign(self, txn: DocView, doc: int, source: int) -> bool:
        """Whether `source` may appear in `doc`'s cover (another server, or foreign=none)."""
        if self._anywhere:
            return source != doc
        return txn.server(doc) != txn.server(source)

    def _foreign_mask(self, txn: DocView, doc: int, src: np.ndarray) -> np.ndarray:
        """Which of these sources (docnos, repeats allowed) are foreign to `doc`: one check
        per distinct source (told apart by a hash table, not a sort: engine.grouping)."""
        distinct, which = first_seen(np.ascontiguousarray(src, dtype=np.uint64))
        ok = np.fromiter((self.is_foreign(txn, doc, s) for s in distinct.tolist()),
                         dtype=bool, count=len(distinct))
        return ok[which]

    def apply(self, txn: DocView, deltas: Iterable[Delta], dirty: Dirty) -> set[int]:
        """Apply deltas in order; record each changed document with its cause in `dirty`.

        Returns the documents this call changed."""
        deltas = deltas if isinstance(deltas, list) else list(deltas)
        self.applied += len(deltas)
        unread = self._load(txn, deltas)
        changed: set[int] = set()
        for t, op, grams, arg, cause in deltas:
            doc = None
            if t not in unread and (doc := txn.doc(t)) is None:  # withdrawn meanwhile
                continue
            # a stale document's cover waits for a reader: so may an addition's slots
            pending = op == ADD and (doc is None or doc.result.stale)
            touch = dirty.get(t)
            if touch is None:
                touch = dirty[t] = Touch(cause, set(), pending)
            if pending:
                if self.is_foreign(txn, t, arg):
                    self._defer(txn, t, doc, arg, grams, cause, touch)
                    changed.add(t)
                continue
            if op == GAIN:
                src, slots = doc.holder_pairs(doc.gain(grams), arg)
                foreign = self._foreign_mask(txn, t, src)
                doc.add_pairs(src[foreign], slots[foreign])
                touch.full(cause)
            elif op == GAIN_FROM:
                at = doc.gain(grams)  # new slots: no earlier source holds them
                if self.is_foreign(txn, t, arg):
                    touch.gained(cause, arg, doc)
                    doc.add_source(arg, at)
                else:
                    touch.cause = cause  # more patch grams, same sources
                    touch.pending = False
            elif op == ADD:
                if not self.is_foreign(txn, t, arg):
                    continue
                touch.gained(cause, arg, doc)
                doc.add_source(arg, doc.slots_of(grams))
            elif op == LOSE:
                doc.lose(grams)
                touch.full(cause)
            elif op == DROP:
                if not self.is_foreign(txn, t, arg):
                    continue  # never listed: only foreign holders are kept
                doc.drop_source(arg, doc.slots_of(grams))
                touch.full(cause)
            txn.touch_doc(t)
            changed.add(t)
        return changed

    def _defer(self, txn: DocView, t: int, doc: DocState | None, source: int,
               grams: list[int], cause: str, touch: Touch) -> None:
        """A stale document's new source, left pending (DocState.defer_add): given to the
        document when read (`doc`), else to the transaction, which stores it without
        reading the document (most of what an arrival does to earlier documents)."""
        self.deferred += 1
        touch.deferred(cause)
        if doc is None:
            txn.defer_add(t, source, grams)
        else:
            doc.defer_add(source, grams)
            txn.touch_doc(t)

    def _load(self, txn: DocView, deltas: list[Delta]) -> set[int]:
        """Read the deltas' documents, and the names their foreign checks need, with one
        multi-get each instead of a get per document. Returns the documents left unread:
        stale ones that only take additions (Txn.stale_unread)."""
        only_adds = {d.target for d in deltas}
        only_adds.difference_update(d.target for d in deltas if d.op != ADD)
        unread = txn.stale_unread(only_adds) if only_adds else set()
        txn.load_docs(d.target for d in deltas if d.target not in unread)
        if self._anywhere:
            return unread
        docnos = set()
        for t, op, _, arg, _ in deltas:
            docnos.add(t)
            if op == GAIN:  # a passage's grams share one holder tuple (engine.postings)
                last = None
                for holders in arg:
                    if holders is not last:
                        docnos.update(holders)
                        last = holders
            elif arg is not None:
                docnos.add(arg)
        txn.load_names(docnos)
        return unread

    def score(self, txn: DocView, doc: DocState, touch: Touch | None = None,
              exact: bool = False) -> DocResult:
        """The document's cover and quilted flag from its current patch set. When `touch`
        shows only new sources, the stored cover's steps that they cannot change are
        kept (all of them, most of the time) and the greedy resumes after them.

        Below theta, a document whose last result was not quilted gets a stale result
        (no cover) unless `exact`: it cannot be quilted whatever its cover, so no event
        can come of it, and ~90% of the earlier documents an arrival re-scores are such
        (their patch grams are shared boilerplate). The cover is computed when read
        (`current`), or once the document reaches theta. Pass `exact` when an event
        will show the result anyway (the last result shown was quilted)."""
        prev = doc.result
        if not exact and not prev.quilted and doc.patch_fraction < self.params.theta:
            if prev.stale and (prev.n_patch, prev.n_grams) == (doc.n_patch, doc.n_grams):
                return prev
            return DocResult((), False, doc.n_patch, doc.n_grams, (), stale=True)
        kept: int | None = 0
        if (touch is not None and touch.added is not None and not prev.stale
                and prev.n_grams == doc.n_grams and len(prev.docnos) == len(prev.sources)):
            old = list(zip(prev.docnos, (n for _, n in prev.sources), strict=True))
            txn.load_names(touch.added)
            kept = first_change(doc.cover_pairs(), len(doc.slots), old,
                                [u for u, _ in prev.sources],
                                [(s, txn.url_of(s)) for s in touch.added])
        if kept is None:
            docnos, sources = prev.docnos, prev.sources
        else:
            pairs = doc.cover_pairs()
            txn.load_names(doc.sources().tolist())  # the tie-break reads every source's URL
            cover = greedy_cover(pairs, len(doc.slots), txn.url_of,
                                 old[:kept] if kept else ())
            docnos = tuple(s for s, _ in cover)
            sources = prev.sources[:kept] + tuple((txn.url_of(s), n) for s, n in cover[kept:])
        quilted = self.params.is_quilted(doc.patch_fraction, doc.n_patch,
                                         (n for _, n in sources))
        if not prev.stale and (quilted, doc.n_patch, doc.n_grams, docnos) == (
                prev.quilted, prev.n_patch, prev.n_grams, prev.docnos) and sources == prev.sources:
            return prev  # unchanged: the same object, whose encoding can be reused
        return DocResult(sources, quilted, doc.n_patch, doc.n_grams, docnos)


def current(txn: DocView, doc: DocState) -> DocResult:
    """The document's result with its cover, computed now if re-scoring left it stale
    (for readers: dump, explain; nothing is written). A stale result is not quilted, and
    its patch set has not changed since, so only the cover is missing."""
    r = doc.result
    if not r.stale:
        return r
    pairs = doc.cover_pairs()
    txn.load_names(doc.sources().tolist())
    cover = greedy_cover(pairs, len(doc.slots), txn.url_of)
    return DocResult(tuple((txn.url_of(s), n) for s, n in cover), False, doc.n_patch, doc.n_grams,
                 tuple(s for s, _ in cover))
