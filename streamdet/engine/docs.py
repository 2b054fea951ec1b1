"""The doc-shard role: patch sets kept current by deltas, and re-scoring.

Each document keeps its patch grams and, per foreign holder, a bitmask of the patch grams it
holds (DocState). Deltas from
the gram role are applied in order as they come; a document whose patch set or foreign
sources changed is marked dirty with the URL that caused it, and re-scored once per batch.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..state.schema import Cover, DocState
from .cover import greedy_cover
from .deltas import ADD, DROP, GAIN, GAIN_FROM, LOSE, Delta
from .params import Params


class DocView:
    """What the doc role needs from the state (implemented by state.txn.Txn)."""

    def doc(self, docno: int) -> DocState | None: ...
    def touch_doc(self, docno: int) -> None: ...
    def name(self, docno: int) -> tuple[str, str] | None: ...
    def server(self, docno: int) -> str: ...
    def url_of(self, docno: int) -> str: ...


class DocRole:
    def __init__(self, params: Params) -> None:
        self.params = params
        self._anywhere = params.foreign == "none"

    def is_foreign(self, txn: DocView, doc: int, source: int) -> bool:
        """Whether `source` may appear in `doc`'s cover (another server, or foreign=none)."""
        if self._anywhere:
            return source != doc
        return txn.server(doc) != txn.server(source)

    def apply(self, txn: DocView, deltas: Iterable[Delta], dirty: dict[int, str]) -> set[int]:
        """Apply deltas in order; record each changed document with its cause in `dirty`.

        Returns the documents this call changed."""
        changed: set[int] = set()
        for t, op, grams, arg, cause in deltas:
            doc = txn.doc(t)
            if doc is None:  # withdrawn meanwhile
                continue
            if op == GAIN:
                doc.gain(grams)
                by_source: dict[int, list[int]] = {}
                for g, holders in zip(grams, arg, strict=True):
                    for s in holders:
                        by_source.setdefault(s, []).append(g)
                for s, gs in by_source.items():
                    if self.is_foreign(txn, t, s):
                        doc.add_source(s, doc.bits(gs))
            elif op == GAIN_FROM:
                doc.gain(grams)
                if self.is_foreign(txn, t, arg):
                    doc.add_source(arg, doc.bits(grams))
            elif op == ADD:
                if not self.is_foreign(txn, t, arg):
                    continue
                doc.add_source(arg, doc.bits(grams))
            elif op == LOSE:
                doc.lose(grams)
            elif op == DROP:
                if not self.is_foreign(txn, t, arg):
                    continue  # never listed: only foreign holders are kept
                doc.drop_source(arg, doc.bits(grams))
            txn.touch_doc(t)
            dirty[t] = cause
            changed.add(t)
        return changed

    def score(self, txn: DocView, doc: DocState) -> Cover:
        """The document's cover and quilted flag from its current patch set."""
        cover = greedy_cover(doc.masks, txn.url_of)
        sources = tuple((txn.url_of(s), n) for s, n in cover)
        quilted = doc.patch_fraction >= self.params.theta and len(sources) >= self.params.c
        return Cover(sources, quilted, doc.n_patch, doc.n_grams)
