"""The greedy source cover of one document (SPEC §1 "cover").

Repeatedly take the foreign source holding the most still-uncovered patch grams; break
ties by the most patch grams held overall, then by the smallest URL in code-point order;
stop when no source covers anything new. Each source's patch grams are a Python int used
as a bitmask (kept by the document, see state.schema.DocState), so "still uncovered" is
one AND and a popcount per source and step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping


def greedy_cover(masks: Mapping[int, int], url_of: Callable[[int], str]) -> list[tuple[int, int]]:
    """(source, newly covered grams) in the order the greedy algorithm picks them."""
    if not masks:
        return []
    candidates = {s: (m, m.bit_count(), url_of(s)) for s, m in masks.items()}
    uncovered = 0
    for m in masks.values():
        uncovered |= m
    cover: list[tuple[int, int]] = []
    while uncovered and candidates:
        best, best_key = None, None
        for s, (m, total, url) in candidates.items():
            gain = (m & uncovered).bit_count()
            if gain == 0:
                continue
            key = (-gain, -total, url)
            if best_key is None or key < best_key:
                best, best_key = s, key
        if best is None:
            break
        cover.append((best, -best_key[0]))
        uncovered &= ~candidates.pop(best)[0]
    return cover
