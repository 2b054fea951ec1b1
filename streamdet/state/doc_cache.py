"""Decoded documents kept between batches, within the budget's document share.

A batch reaches thousands of earlier documents, most of them again and again as pages
sharing their text arrive; reading one back costs three RocksDB lookups and a decode, and
the first use of a decoded one builds its gram -> slot index (engine.slot_index, 12 bytes a
slot, two fifths of a document's memory). So the cache has two tiers, least recently used
first in each: documents come back from a commit whole (hot), and when the share is full
the oldest hot one is folded (its index dropped, rebuilt in microseconds when next used)
and waits cold; only when no hot one is left does the oldest cold one go. The share then
holds every document it can folded, and keeps the index of the ones used most recently.

Weights are in the budget's slot units (engine.documents.DOC_SLOT_BYTES), as each
document weighs when it comes in or is folded (DocState.resident_weight); a cached
document is not changed until it is taken out, so what is charged is what is given back.
"""

from __future__ import annotations

from collections import OrderedDict

from ..engine.documents import DocState


class DocCache:
    """docno -> DocState as of the last commit, at most `limit` slot units when shrunk."""

    def __init__(self) -> None:
        self._hot: OrderedDict[int, tuple[DocState, int]] = OrderedDict()
        self._cold: OrderedDict[int, tuple[DocState, int]] = OrderedDict()
        self.weight = 0

    def __len__(self) -> int:
        return len(self._hot) + len(self._cold)

    def take(self, docno: int) -> DocState | None:
        kept = self._hot.pop(docno, None) or self._cold.pop(docno, None)
        if kept is None:
            return None
        self.weight -= kept[1]
        return kept[0]

    def put(self, docno: int, d: DocState) -> None:
        """Keep `d` as the most recently used (in place of any copy of `docno`)."""
        self.take(docno)
        weight = d.resident_weight
        self._hot[docno] = (d, weight)
        self.weight += weight

    def shrink(self, limit: int) -> None:
        """Fold the least recently used hot documents, then forget the least recently used
        cold ones, until the cache weighs at most `limit`."""
        hot, cold = self._hot, self._cold
        while self.weight > limit and hot:
            docno, (d, weight) = hot.popitem(last=False)
            d.fold()
            folded = d.resident_weight
            cold[docno] = (d, folded)
            self.weight += folded - weight
        while self.weight > limit and cold:
            _, (_, weight) = cold.popitem(last=False)
            self.weight -= weight

    def folded(self, docno: int) -> bool | None:
        """Whether the cached `docno` waits folded (None: not cached)."""
        if docno in self._hot:
            return False
        return True if docno in self._cold else None
