"""The greedy source cover of one document (SPEC §1 "cover").

Repeatedly take the foreign source holding the most still-uncovered patch grams; break
ties by the most patch grams held overall, then by the smallest URL in code-point order;
stop when no source covers anything new. Each source's patch grams are a Python int used
as a bitmask (kept by the document, see state.schema.DocState), so "still uncovered" is
one AND and a popcount per source and step.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence


def greedy_cover(masks: Mapping[int, int], url_of: Callable[[int], str],
                 prefix: Sequence[tuple[int, int]] = ()) -> list[tuple[int, int]]:
    """(source, newly covered grams) in the order the greedy algorithm picks them;
    `prefix`, when given, is known to be its first steps (see first_change).

    Lazy evaluation (as in CELF): a source's gain can only shrink as the cover grows, so a
    heap keyed by (stale gain, total, URL) is re-checked only at its top. A popped source
    whose fresh key still beats the next stale key is the exact greedy choice, ties
    included: the key order *is* the SPEC's tie-breaking order. Sources that cover nothing
    still uncovered never enter the heap (nor need their URL).
    """
    uncovered = 0
    for m in masks.values():
        uncovered |= m
    for s, _ in prefix:
        uncovered &= ~masks[s]
    heap = []
    for s, m in masks.items():
        if m & uncovered:
            total = m.bit_count()
            heap.append((-total, -total, url_of(s), s, m))
    heapq.heapify(heap)
    cover = list(prefix)
    while heap and uncovered:
        _, neg_total, url, s, m = heapq.heappop(heap)
        gain = (m & uncovered).bit_count()
        if gain == 0:
            continue
        fresh = (-gain, neg_total, url, s, m)
        if heap and fresh > heap[0]:
            heapq.heappush(heap, fresh)
            continue
        cover.append((s, gain))
        uncovered &= ~m
    return cover


def first_change(masks: Mapping[int, int], cover: Sequence[tuple[int, int]],
                 cover_urls: Sequence[str], new: Iterable[tuple[int, str]]) -> int | None:
    """None when `cover` is still exactly the greedy cover after sources `new` were added;
    else how many of its first steps still stand (the greedy may resume after them).

    Valid when, since `cover` was computed from the masks, the only changes are new sources
    (given with their URLs), possibly holding new patch grams that no earlier source holds:
    every earlier source then has the same gain at every step as before, so the old
    sequence stands unless, at some step, a new source's key beats the chosen one's, or a
    new source still covers something once the old sequence has run out. The steps before
    the first such step are the greedy's own either way. Checking that costs one AND and
    popcount per (step, new source) instead of a greedy run over all sources, and stops
    as soon as the new sources hold nothing still uncovered.
    """
    added = []
    uncovered = 0
    for m in masks.values():
        uncovered |= m
    for s, url in new:
        m = masks.get(s, 0)
        if m:
            added.append((m, m.bit_count(), url))
    if not added:
        return None
    for step, ((s, gain), url) in enumerate(zip(cover, cover_urls, strict=True)):
        m = masks.get(s, 0)
        if (m & uncovered).bit_count() != gain:  # not the situation this check is for
            return 0
        live = False
        for am, total, aurl in added:
            g = (am & uncovered).bit_count()
            if g > gain or (g == gain and g and (total, url) > (m.bit_count(), aurl)):
                return step
            live = live or g > 0
        if not live:  # the new sources cover nothing left: later steps are theirs alone
            return None
        uncovered &= ~m
    return len(cover) if any(am & uncovered for am, _, _ in added) else None
