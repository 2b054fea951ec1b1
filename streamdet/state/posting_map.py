"""gram -> posting for a batch's worth of grams, the postings interned.

The grams of a passage share their posting (the same copies hold the whole passage, so
a page's known grams come to a few distinct postings), so a map of grams to
posting ids (state.gram_table, compiled) and a list of the distinct postings hold them
without an object a gram, and are read and written an array of grams at a time: the
transaction's postings (state.txn) and the young part of the store's cache of them
(state.posting_cache) are such maps.
"""

from __future__ import annotations

import numpy as np

from ..engine.documents import Posting
from .gram_table import GramTable


class PostingMap:
    """gram -> posting; `postings[i]` is the posting of id i (id 0: None)."""

    def __init__(self) -> None:
        self.table = GramTable()
        self.postings: list[Posting | None] = [None]
        self._ids: dict[Posting | None, int] = {None: 0}

    def __len__(self) -> int:
        return len(self.table)

    def intern(self, posting: Posting | None) -> int:
        """The id of a posting (equal postings share one)."""
        i = self._ids.get(posting)
        if i is None:
            i = self._ids[posting] = len(self.postings)
            self.postings.append(posting)
        return i

    def ids(self, grams: np.ndarray) -> np.ndarray:
        """The posting id of each gram (int32), -1 where the map has none."""
        return self.table.lookup(grams)

    def assign(self, grams: np.ndarray, posting: Posting | None) -> int:
        """The same posting for many grams; returns its id."""
        i = self.intern(posting)
        self.table.assign(grams, i)
        return i

    def assign_from(self, grams: np.ndarray, postings: list[Posting | None],
                    which: np.ndarray) -> None:
        """grams[k] gets postings[which[k]] (only the postings named are interned)."""
        if len(grams):
            used, inverse = np.unique(which, return_inverse=True)
            ids = np.fromiter((self.intern(postings[i]) for i in used.tolist()),
                              dtype=np.int32, count=len(used))
            self.table.assign_each(grams, ids[inverse])

    def contents(self) -> tuple[np.ndarray, np.ndarray]:
        """(grams ascending, their posting ids)."""
        return self.table.contents()
