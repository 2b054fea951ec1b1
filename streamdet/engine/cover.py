"""The greedy source cover of one document (SPEC §1 "cover").

Repeatedly take the foreign source holding the most still-uncovered patch grams; break
ties by the most patch grams held overall, then by the smallest URL in code-point order;
stop when no source covers anything new. Each source's patch grams are a Python int used
as a bitmask (kept by the document, see state.schema.DocState), so "still uncovered" is
one AND and a popcount per source and step.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping


def greedy_cover(masks: Mapping[int, int], url_of: Callable[[int], str]) -> list[tuple[int, int]]:
    """(source, newly covered grams) in the order the greedy algorithm picks them.

    Lazy evaluation (as in CELF): a source's gain can only shrink as the cover grows, so a
    heap keyed by (stale gain, total, URL) is re-checked only at its top. A popped source
    whose fresh key still beats the next stale key is the exact greedy choice, ties
    included: the key order *is* the SPEC's tie-breaking order.
    """
    heap = []
    uncovered = 0
    for s, m in masks.items():
        total = m.bit_count()
        heap.append((-total, -total, url_of(s), s, m))
        uncovered |= m
    heapq.heapify(heap)
    cover: list[tuple[int, int]] = []
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
