"""The doc-shard role: patch sets kept current by deltas, and re-scoring.

Each document keeps its patch grams with their foreign holders (DocState.pg). Deltas from
the gram role are applied in order as they come; a document whose patch set or foreign
sources changed is marked dirty with the URL that caused it, and re-scored once per batch.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..state.schema import Cover, DocState
from .cover import greedy_cover, source_masks
from .deltas import ADD, DROP, GAIN, GAIN_FROM, LOSE, Delta
from .params import Params


class DocView:
    """What the doc role needs from the state (implemented by state.txn.Txn)."""

    def doc(self, docno: int) -> DocState | None: ...
    def touch_doc(self, docno: int) -> None: ...
    def name(self, docno: int) -> tuple[str, str] | None: ...
    def server(self, docno: int) -> str: ...


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
            pg = doc.pg
            if op == GAIN:
                if self._anywhere:
                    for g, holders in zip(grams, arg, strict=True):
                        pg[g] = list(holders)
                else:
                    mine, server = txn.server(t), txn.server
                    for g, holders in zip(grams, arg, strict=True):
                        pg[g] = [s for s in holders if server(s) != mine]
            elif op == GAIN_FROM:
                src = [arg] if self.is_foreign(txn, t, arg) else []
                for g in grams:
                    pg[g] = src.copy()
            elif op == ADD:
                if not self.is_foreign(txn, t, arg):
                    continue
                for g in grams:
                    pg[g].append(arg)
            elif op == LOSE:
                for g in grams:
                    del pg[g]
            elif op == DROP:
                if not self.is_foreign(txn, t, arg):
                    continue  # never listed: only foreign holders are kept
                for g in grams:
                    pg[g].remove(arg)
            txn.touch_doc(t)
            dirty[t] = cause
            changed.add(t)
        return changed

    def score(self, txn: DocView, doc: DocState) -> Cover:
        """The document's cover and quilted flag from its current patch set."""
        cover = greedy_cover(source_masks(doc.pg), lambda s: txn.name(s)[1])
        sources = tuple((txn.name(s)[1], n) for s, n in cover)
        n_patch = len(doc.pg)
        frac = n_patch / doc.n_grams if doc.n_grams else 0.0
        quilted = frac >= self.params.theta and len(sources) >= self.params.c
        return Cover(sources, quilted, n_patch, doc.n_grams)
