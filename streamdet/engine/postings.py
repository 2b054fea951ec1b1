"""The gram-shard role: postings of up to m documents per gram, and the deltas they imply.

For an arriving document d and each of its grams g with live holders L (|L| = n):
  n = 0        -> g is d's alone: posting (d,)
  1 <= n < m   -> posting L + d; d gains patch gram g with sources L; each holder gains g
                  (n = 1, it was unique) or gains source d (n >= 2)
  n = m        -> g becomes common (sticky marker); every holder loses patch gram g
  common       -> nothing
For a withdrawn version x and each of its grams that others hold too (the embedded engine
passes x's patch grams; a gram shard, which cannot see x's document, all of x's grams in
the shard), the holders left either lose g (one left) or lose source x. Grams x held alone
keep their stale postings; readers drop x through the withdrawn set.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..state.schema import COMMON, Posting
from .deltas import ADD, DROP, GAIN, GAIN_FROM, LOSE, Delta


class GramIndexView:
    """What the gram role needs from the state (implemented by state.txn.Txn)."""

    def prefetch(self, grams: np.ndarray) -> np.ndarray: ...
    def posting(self, gram: int) -> Posting | None: ...
    def postings(self, grams: np.ndarray) -> list[Posting | None]: ...
    def set_posting(self, gram: int, posting: Posting) -> None: ...
    def add_fresh(self, grams: np.ndarray, docno: int, remember: np.ndarray) -> None: ...
    def live(self, posting: tuple[int, ...]) -> tuple[int, ...]: ...


@dataclass
class PagePlan:
    """For one page of a batch, per gram: whether it may already have a posting when the
    page is applied (held before the batch, or by an earlier page of the batch), and
    whether a later page of the batch holds it too."""

    known: np.ndarray
    later: np.ndarray


def plan_batch(txn: GramIndexView, page_grams: list[np.ndarray]) -> list[PagePlan]:
    """Look up a batch's grams at once and plan each page's work, vectorised: only grams
    with a posting need per-gram logic; all others are fresh, and only those a later page
    repeats need to be remembered in memory."""
    if not page_grams:
        return []
    every = np.concatenate(page_grams)
    if not len(every):
        return [PagePlan(g.astype(bool), g.astype(bool)) for g in page_grams]
    order = np.argsort(every, kind="stable")  # stable: equal grams stay in page order
    s = every[order]
    same_prev = np.empty(len(s), dtype=bool)
    same_prev[0] = False
    np.equal(s[1:], s[:-1], out=same_prev[1:])
    same_next = np.empty(len(s), dtype=bool)
    same_next[:-1] = same_prev[1:]
    same_next[-1] = False
    union = s[~same_prev]
    held = txn.prefetch(union)[np.cumsum(~same_prev) - 1]  # per sorted element
    known = np.empty(len(s), dtype=bool)
    known[order] = held | same_prev
    later = np.empty(len(s), dtype=bool)
    later[order] = same_next
    plans, start = [], 0
    for g in page_grams:
        stop = start + len(g)
        plans.append(PagePlan(known[start:stop], later[start:stop]))
        start = stop
    return plans


def add_document(txn: GramIndexView, docno: int, grams: np.ndarray, plan: PagePlan, m: int,
                 cause: str) -> list[Delta]:
    """Record that `docno` holds `grams`; return the deltas for every holder, d included."""
    fresh = ~plan.known
    txn.add_fresh(grams[fresh], docno, plan.later[fresh])
    gained: list[int] = []
    gained_holders: list[tuple[int, ...]] = []
    first: dict[int, list[int]] = {}  # holder -> grams that were its alone
    shared: dict[tuple[int, ...], list[int]] = {}  # holders -> grams that gain docno
    lost: dict[int, list[int]] = {}  # holder -> grams that become common
    for g in grams[plan.known].tolist():
        p = txn.posting(g)
        if p is None:  # a false "known": a repeat whose first holder was not remembered
            txn.add_fresh(np.asarray([g], dtype=np.uint64), docno, np.ones(1, dtype=bool))
            continue
        if p == COMMON:
            continue
        holders = txn.live(p)
        n = len(holders)
        if n == 0:
            txn.set_posting(g, (docno,))
        elif n < m:
            txn.set_posting(g, holders + (docno,))
            gained.append(g)
            gained_holders.append(holders)
            if n == 1:
                first.setdefault(holders[0], []).append(g)
            else:
                shared.setdefault(holders, []).append(g)
        else:
            txn.set_posting(g, COMMON)
            for y in holders:
                lost.setdefault(y, []).append(g)
    out = [Delta(docno, GAIN, gained, gained_holders, cause)] if gained else []
    out.extend(Delta(y, GAIN_FROM, gs, docno, cause) for y, gs in first.items())
    out.extend(Delta(y, ADD, gs, docno, cause) for y, gs in _per_holder(shared).items())
    out.extend(Delta(y, LOSE, gs, None, cause) for y, gs in lost.items())
    return out


def _per_holder(shared: dict[tuple[int, ...], list[int]]) -> dict[int, list[int]]:
    """Each holder's grams, from the grams grouped by their holders: a passage's grams
    share one holder tuple (the same copies hold all of it), so the pairs are made by a
    list extend per (tuple, holder) rather than one append per (gram, holder)."""
    out: dict[int, list[int]] = {}
    for holders, grams in shared.items():
        for y in holders:
            mine = out.get(y)
            if mine is None:
                out[y] = grams.copy()
            else:
                mine.extend(grams)
    return out


def withdraw_document(
    txn: GramIndexView, docno: int, patch_grams: list[int], cause: str
) -> list[Delta]:
    """Remove version `docno` from these grams' postings; deltas for the holders left."""
    if not patch_grams:
        return []
    grams = np.asarray(patch_grams, dtype=np.uint64)
    alone: dict[int, list[int]] = {}
    dropped: dict[int, list[int]] = {}
    for g, p in zip(patch_grams, txn.postings(grams), strict=True):
        if p is None or p == COMMON:
            continue
        live = txn.live(p)
        if docno not in live:
            continue
        rest = tuple(x for x in live if x != docno)
        if not rest:
            continue  # it was docno's alone: the stale posting is read through the withdrawn set
        txn.set_posting(g, rest)
        if len(rest) == 1:
            alone.setdefault(rest[0], []).append(g)
        else:
            for y in rest:
                dropped.setdefault(y, []).append(g)
    out = [Delta(y, LOSE, gs, None, cause) for y, gs in alone.items()]
    out.extend(Delta(y, DROP, gs, docno, cause) for y, gs in dropped.items())
    return out
