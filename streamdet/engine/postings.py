"""The gram-shard role: postings of up to m documents per gram, and the deltas they imply.

For an arriving document d and each of its grams g with live holders L (|L| = n):
  n = 0        -> g is d's alone: posting (d,)
  1 <= n < m   -> posting L + d; d gains patch gram g with sources L; each holder gains g
                  (n = 1, it was unique) or gains source d (n >= 2)
  n = m        -> g becomes common (sticky marker, and a tally of its exact count);
                  every holder loses patch gram g
  common       -> its tally counts d
For a withdrawn version x and each of its grams (all of them, in the shard), the holders
left either lose g (one left) or lose source x, and a common gram's tally stops counting
x. Grams x held alone keep their stale postings; readers drop x through the withdrawn set.
Counts reaching or leaving P change pop(d) (SPEC §8, engine.popular).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain, repeat

import numpy as np

from .deltas import ADD, DROP, GAIN, GAIN_FROM, LOSE, Delta
from .documents import COMMON, Posting
from .grouping import by_group, first_seen
from .popular import PopChanges, Tally


class GramIndexView:
    """What the gram role needs from the state (implemented by state.txn.Txn)."""

    def prefetch(self, grams: np.ndarray) -> np.ndarray: ...
    def prefetched(self, grams: np.ndarray) -> np.ndarray: ...
    def posting_of(self, posting_id: int) -> Posting | None: ...
    def postings(self, grams: np.ndarray) -> list[Posting | None]: ...
    def set_postings(self, grams: np.ndarray, posting: Posting) -> None: ...
    def add_fresh(self, grams: np.ndarray, docno: int, remember: np.ndarray) -> None: ...
    def live(self, posting: tuple[int, ...]) -> tuple[int, ...]: ...
    def tally_many(self, grams: list[int]) -> list[bytes | None]: ...
    def put_tally(self, gram: int, raw: bytes) -> None: ...
    def pop_many(self, docnos: list[int]) -> list[int]: ...
    def put_pop(self, docno: int, pop: int | None) -> None: ...


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
                 cause: str, popular: int) -> list[Delta]:
    """Record that `docno` holds `grams`; return the deltas for every holder, d included.

    A page's known grams share few postings (the same copies hold a whole passage: ~17
    distinct among ~370 known grams of a replayed page), so they are grouped by their
    live holders and each group is decided once; every list keeps the grams' page order."""
    fresh = ~plan.known
    txn.add_fresh(grams[fresh], docno, plan.later[fresh])
    known = grams[plan.known]
    if not len(known):
        return []
    gained: list[np.ndarray] = []  # positions in `known`
    gained_holders: list[tuple[tuple[int, ...], int]] = []
    first: list[tuple[tuple[int, ...], np.ndarray]] = []  # holder -> grams that were its alone
    shared: list[tuple[tuple[int, ...], np.ndarray]] = []  # holders -> grams that gain docno
    lost: list[tuple[tuple[int, ...], np.ndarray]] = []  # holders -> grams that become common
    pop = PopChanges(popular)
    groups, common = _by_live_holders(txn, known)
    for holders, at in groups:
        gs = known[at]
        if holders is None:  # a false "known": a repeat whose first holder was not remembered
            txn.add_fresh(gs, docno, np.ones(len(gs), dtype=bool))
            continue
        n = len(holders)
        pop.added(docno, holders, len(at))
        if n == 0:
            txn.set_postings(gs, (docno,))
        elif n < m:
            txn.set_postings(gs, holders + (docno,))
            gained.append(at)
            gained_holders.append((holders, len(at)))
            (first if n == 1 else shared).append((holders, at))
        else:
            txn.set_postings(gs, COMMON)
            lost.append((holders, at))
            raw = Tally.of((docno, *holders), popular - 1).encode()
            for g in gs.tolist():
                txn.put_tally(g, raw)
    if len(common):
        _join_common(txn, docno, known[common].tolist(), pop)
    out = []
    if gained:
        at = np.concatenate(gained)
        order = np.argsort(at, kind="stable")
        tuples = list(chain.from_iterable(repeat(h, n) for h, n in gained_holders))
        out.append(Delta(docno, GAIN, known[at[order]].tolist(),
                         [tuples[i] for i in order.tolist()], cause))
    out.extend(Delta(y, GAIN_FROM, gs, docno, cause) for y, gs in _per_holder(known, first))
    out.extend(Delta(y, ADD, gs, docno, cause) for y, gs in _per_holder(known, shared))
    out.extend(Delta(y, LOSE, gs, None, cause) for y, gs in _per_holder(known, lost))
    pop.apply(txn)
    return out


def _join_common(txn: GramIndexView, docno: int, grams: list[int], pop: PopChanges) -> None:
    """`docno` joins common grams: their tallies count it (engine.popular). A common gram
    with no tally went common in a state from before tallies (format 9): its holders were
    never counted, so it is left uncounted (withdrawals pass it over too), rather than
    counted from zero and taken below it by the withdrawal of a holder from before."""
    width = pop.popular - 1
    for g, raw in zip(grams, txn.tally_many(grams), strict=True):
        if raw is None:
            continue
        tally = Tally.decode(raw, width)
        pop.tally_add(tally, docno)
        txn.put_tally(g, tally.encode())


_SKIP = object()  # a common gram's group: nothing to do


def _by_live_holders(txn: GramIndexView, known: np.ndarray
                     ) -> tuple[list[tuple[tuple[int, ...] | None, np.ndarray]], np.ndarray]:
    """The known grams grouped by their live holders (None: no posting after all), as
    positions in `known`, ascending; groups in order of first appearance. The common
    grams' positions come apart."""
    ids = np.ascontiguousarray(txn.prefetched(known), dtype=np.int32)
    distinct, which = first_seen(ids)  # postings in order of first appearance
    live: dict = {}  # live holders -> group number
    to_group = np.empty(len(distinct), dtype=np.int64)
    for i, posting_id in enumerate(distinct.tolist()):
        p = txn.posting_of(posting_id)
        key = _SKIP if p == COMMON else None if p is None else txn.live(p)
        to_group[i] = live.setdefault(key, len(live))
    order, ends = by_group(which, to_group, len(live))
    common = np.zeros(0, dtype=np.intp)
    groups = []
    start = 0
    for key, end in zip(live, ends.tolist(), strict=True):
        at, start = order[start:end], end
        if key is _SKIP:
            common = at
        else:
            groups.append((key, at))
    return groups, common


def _per_holder(known: np.ndarray, groups: list[tuple[tuple[int, ...], np.ndarray]]
                ) -> list[tuple[int, list[int]]]:
    """Each holder's grams (page order), from the groups of grams it is among the holders
    of; holders in order of first appearance. A passage's ~10 copies share its group, so
    a group's grams are listed once for all of them, and the copies of a page share the
    same groups, so holders in the same groups share one list of their merged positions
    (the lists are shared, never changed: a deltas message writes each once)."""
    out: dict[int, list[int]] = {}  # holder -> its groups
    for i, (holders, _) in enumerate(groups):
        for y in holders:
            mine = out.get(y)
            if mine is None:
                out[y] = [i]
            else:
                mine.append(i)
    lists: dict[tuple[int, ...], list[int]] = {}  # groups -> their grams

    def listed(mine: list[int]) -> list[int]:
        key = tuple(mine)
        gs = lists.get(key)
        if gs is None:
            at = groups[mine[0]][1] if len(mine) == 1 else np.sort(
                np.concatenate([groups[i][1] for i in mine]))
            gs = lists[key] = known[at].tolist()
        return gs

    return [(y, listed(mine)) for y, mine in out.items()]


def withdraw_document(
    txn: GramIndexView, docno: int, grams: list[int], cause: str, popular: int
) -> list[Delta]:
    """Remove version `docno` from these grams' postings, all of its grams (its common
    grams' tallies count it too); deltas for the holders left."""
    if not grams:
        return []
    alone: dict[int, list[int]] = {}
    dropped: dict[int, list[int]] = {}
    pop = PopChanges(popular)
    common: list[int] = []
    left: dict[tuple[int, ...], list[int]] = {}  # holders left -> their grams
    for g, p in zip(grams, txn.postings(np.asarray(grams, dtype=np.uint64)), strict=True):
        if p is None:
            continue
        if p == COMMON:
            common.append(g)
            continue
        live = txn.live(p)
        if docno not in live:
            continue
        rest = tuple(x for x in live if x != docno)
        if not rest:
            continue  # it was docno's alone: the stale posting is read through the withdrawn set
        pop.withdrawn(rest)
        left.setdefault(rest, []).append(g)
        if len(rest) == 1:
            alone.setdefault(rest[0], []).append(g)
        else:
            for y in rest:
                dropped.setdefault(y, []).append(g)
    for rest, gs in left.items():
        txn.set_postings(np.asarray(gs, dtype=np.uint64), rest)
    width = popular - 1
    for g, raw in zip(common, txn.tally_many(common), strict=True):
        if raw is not None:  # none: common in a state from before tallies (format 9)
            tally = Tally.decode(raw, width)
            pop.tally_remove(tally, docno)
            txn.put_tally(g, tally.encode())
    out = [Delta(y, LOSE, gs, None, cause) for y, gs in alone.items()]
    out.extend(Delta(y, DROP, gs, docno, cause) for y, gs in dropped.items())
    pop.apply(txn)
    txn.put_pop(docno, None)
    return out
