"""The doc-shard role: patch sets kept current by deltas, and re-scoring.

Each document keeps its patch grams with their foreign holders (DocState.pg). Deltas from
the gram role are applied in order as they come; a document whose patch set or foreign
sources changed is marked dirty with the URL that caused it, and re-scored once per batch.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..state.schema import Cover, DocState
from .cover import greedy_cover, source_masks
from .deltas import ADD, DROP, GAIN, LOSE, Delta
from .params import Params


class DocView:
    """What the doc role needs from the state (implemented by state.txn.Txn)."""

    def doc(self, docno: int) -> DocState | None: ...
    def touch_doc(self, docno: int) -> None: ...
    def name(self, docno: int) -> tuple[str, str] | None: ...


class DocRole:
    def __init__(self, params: Params) -> None:
        self.params = params

    def is_foreign(self, txn: DocView, doc: int, source: int) -> bool:
        """Whether `source` may appear in `doc`'s cover (another server, or foreign=none)."""
        if self.params.foreign == "none":
            return source != doc
        return txn.name(doc)[0] != txn.name(source)[0]

    def apply(self, txn: DocView, deltas: Iterable[Delta], dirty: dict[int, str]) -> set[int]:
        """Apply deltas in order; record each changed document with its cause in `dirty`.

        Returns the documents this call changed."""
        changed: set[int] = set()
        for t, op, g, arg, cause in deltas:
            doc = txn.doc(t)
            if doc is None:
                continue
            if op == GAIN:
                doc.pg[g] = [s for s in arg if self.is_foreign(txn, t, s)]
            elif op == LOSE:
                del doc.pg[g]
            elif op == ADD:
                if not self.is_foreign(txn, t, arg):
                    continue
                doc.pg[g].append(arg)
            elif op == DROP:
                srcs = doc.pg[g]
                if arg not in srcs:
                    continue
                srcs.remove(arg)
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
