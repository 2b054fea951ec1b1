"""The gram-shard role: postings of up to m documents per gram, and the deltas they imply.

For an arriving document d and each of its grams g with live holders L (|L| = n):
  n = 0        -> g is d's alone: posting (d,)
  1 <= n < m   -> posting L + d; d gains patch gram g with sources L; each holder gains g
                  (n = 1, it was unique) or gains source d (n >= 2)
  n = m        -> g becomes common (sticky marker); every holder loses patch gram g
  common       -> nothing
For a withdrawn version x and each of its patch grams (the only grams where x's leaving
matters to anyone), the holders left either lose g (one left) or lose source x.
Unique grams of x keep their stale postings; readers drop x through the dead set.
"""

from __future__ import annotations

import numpy as np

from ..state.schema import COMMON, Posting
from .deltas import ADD, DROP, GAIN, LOSE, Delta


class GramIndexView:
    """What the gram role needs from the state (implemented by state.txn.Txn)."""

    def postings(self, grams: np.ndarray) -> list[Posting | None]: ...
    def set_posting(self, gram: int, posting: Posting) -> None: ...
    def set_new_postings(self, grams: list[int], docno: int) -> None: ...
    def is_dead(self, docno: int) -> bool: ...


def live(posting: tuple[int, ...], txn: GramIndexView) -> tuple[int, ...]:
    return tuple(x for x in posting if not txn.is_dead(x))


def add_document(
    txn: GramIndexView, docno: int, grams: np.ndarray, m: int, cause: str
) -> list[Delta]:
    """Record that `docno` holds `grams`; return the deltas for every holder, d included."""
    found = txn.postings(grams)
    glist = grams.tolist()
    fresh = [g for g, p in zip(glist, found, strict=True) if p is None]
    txn.set_new_postings(fresh, docno)
    out: list[Delta] = []
    for g, p in zip(glist, found, strict=True):
        if p is None or p == COMMON:
            continue
        holders = live(p, txn)
        n = len(holders)
        if n == 0:
            txn.set_posting(g, (docno,))
        elif n < m:
            txn.set_posting(g, holders + (docno,))
            out.append(Delta(docno, GAIN, g, holders, cause))
            if n == 1:
                out.append(Delta(holders[0], GAIN, g, (docno,), cause))
            else:
                out.extend(Delta(y, ADD, g, docno, cause) for y in holders)
        else:
            txn.set_posting(g, COMMON)
            out.extend(Delta(y, LOSE, g, 0, cause) for y in holders)
    return out


def withdraw_document(
    txn: GramIndexView, docno: int, patch_grams: list[int], cause: str
) -> list[Delta]:
    """Remove version `docno` from its patch grams' postings; deltas for the holders left."""
    if not patch_grams:
        return []
    grams = np.asarray(patch_grams, dtype=np.uint64)
    out: list[Delta] = []
    for g, p in zip(patch_grams, txn.postings(grams), strict=True):
        if p is None or p == COMMON:
            continue
        rest = tuple(x for x in live(p, txn) if x != docno)
        txn.set_posting(g, rest)
        if len(rest) == 1:
            out.append(Delta(rest[0], LOSE, g, 0, cause))
        else:
            out.extend(Delta(y, DROP, g, docno, cause) for y in rest)
    return out
