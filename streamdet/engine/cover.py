"""The greedy source cover of one document (SPEC §1 "cover").

Repeatedly take the foreign source holding the most still-uncovered patch grams; break
ties by the most patch grams held overall, then by the smallest URL in code-point order;
stop when no source covers anything new. The document's (source, slot) pairs are the
input (engine.source_pairs); the greedy itself runs compiled (engine.greedy), in time
linear in the pairs up to a log factor, whatever the number of sources (SPEC §9).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from .greedy import cover_steps, first_change_at

Pairs = tuple[np.ndarray, np.ndarray]  # (source docnos, slots), sorted by source


class _Indexed:
    """A document's pairs with its sources numbered 0 .. n - 1 (ascending docno), as the
    kernel takes them."""

    def __init__(self, pairs: Pairs, n_slots: int) -> None:
        src, slot = pairs
        first = np.ones(len(src), dtype=bool)
        first[1:] = src[1:] != src[:-1]
        self.sources = src[first]
        self.src = (np.cumsum(first) - 1).astype(np.int32)
        self.slot = slot.astype(np.int32, copy=False)
        self.n_slots = n_slots

    def index(self, docnos: Iterable[int]) -> np.ndarray:
        """The numbers of these sources (-1 for one it does not have)."""
        q = np.fromiter(docnos, dtype=np.uint64)
        at = np.searchsorted(self.sources, q)
        found = (at < len(self.sources)) & (self.sources.take(at, mode="clip") == q)
        return np.where(found, at, -1).astype(np.int32)

    def steps(self, rank: np.ndarray, prefix: np.ndarray, resume: bool
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        picks, gains, step_of, _ = cover_steps(self.src, self.slot, len(self.sources),
                                               self.n_slots, rank, prefix, resume)
        return picks, gains, step_of


def _url_rank(urls: list[str]) -> np.ndarray:
    """Each URL's place in code-point order."""
    rank = np.empty(len(urls), dtype=np.int64)
    rank[sorted(range(len(urls)), key=urls.__getitem__)] = np.arange(len(urls))
    return rank


def greedy_cover(pairs: Pairs, n_slots: int, url_of: Callable[[int], str],
                 prefix: Sequence[tuple[int, int]] = ()) -> list[tuple[int, int]]:
    """(source, newly covered grams) in the order the greedy algorithm picks them;
    `prefix`, when given, is known to be its first steps (see first_change)."""
    ix = _Indexed(pairs, n_slots)
    if not len(ix.sources):
        return []
    rank = _url_rank([url_of(s) for s in ix.sources.tolist()])
    taken = ix.index(s for s, _ in prefix)
    if (taken < 0).any():
        raise ValueError("a cover's first steps name a source the document does not have")
    picks, gains, _ = ix.steps(rank, taken, True)
    return list(zip(ix.sources[picks].tolist(), gains.tolist(), strict=True))


def replay(pairs: Pairs, n_slots: int, docnos: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """A cover's steps taken again on the pairs: (each step's newly covered count, the
    step that covered each slot, -1 for none). A source the pairs lack covers nothing."""
    ix = _Indexed(pairs, n_slots)
    at = ix.index(docnos)
    known = at >= 0
    picks, gains, step_of = ix.steps(np.zeros(len(ix.sources), np.int64), at[known], False)
    newly = np.zeros(len(docnos), dtype=np.int64)
    newly[known] = gains
    if not known.all():  # steps numbered as the kernel took them: renumber to the cover's
        step_of = np.where(step_of >= 0, np.flatnonzero(known)[np.maximum(step_of, 0)], -1)
    return newly, step_of


def first_change(pairs: Pairs, n_slots: int, cover: Sequence[tuple[int, int]],
                 cover_urls: Sequence[str], new: Iterable[tuple[int, str]]) -> int | None:
    """None when `cover` is still exactly the greedy cover after sources `new` were added;
    else how many of its first steps still stand (the greedy may resume after them).

    Valid when, since `cover` was computed, the only changes are new sources (given with
    their URLs), possibly holding new patch grams that no earlier source holds: every
    earlier source then has the same gain at every step as before, so the old sequence
    stands unless, at some step, a new source's key beats the chosen one's, or a new
    source still covers something once the old sequence has run out. The steps before the
    first such step are the greedy's own either way. The old steps are replayed once (the
    step covering each slot); a new source's gain at every step follows from the steps of
    its slots, so the check needs no greedy and no URL but the new sources' and the
    cover's. It runs compiled (engine.greedy.first_change_at), in one call: most
    re-scores of a quilted document end here.
    """
    new = list(new)
    if not new:
        return None
    src, slot = pairs
    urls = list(cover_urls)
    rank = _dense_rank(urls + [u for _, u in new])
    kept = first_change_at(
        np.ascontiguousarray(src, dtype=np.uint64), np.ascontiguousarray(slot, dtype=np.int32),
        n_slots, np.fromiter((s for s, _ in cover), dtype=np.uint64, count=len(cover)),
        np.fromiter((g for _, g in cover), dtype=np.int64, count=len(cover)),
        rank[: len(urls)], np.fromiter((s for s, _ in new), dtype=np.uint64, count=len(new)),
        rank[len(urls):])
    return None if kept < 0 else kept


def _dense_rank(urls: list[str]) -> np.ndarray:
    """Each URL's place among the distinct URLs in code-point order (equal URLs, equal
    places: a tie on the URL breaks no tie)."""
    place = {u: i for i, u in enumerate(sorted(set(urls)))}
    return np.fromiter(map(place.__getitem__, urls), dtype=np.int64, count=len(urls))
