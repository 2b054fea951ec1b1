"""Sorted distinct values at numpy's sort speed.

numpy 2's `np.unique` finds distinct values with a hash table and sorts them after:
1.5 ms for 20,000 int64 or uint64 values on the project's machine (numpy 2.4), against
0.25 ms for a sort and a compare of neighbours (3x for 300 values). Every layer takes its
distinct grams, keys and chunk numbers from here: analysis (a page's grams), the engine
(a batch's paragraph chunks) and the state (a segment's chunks to read).

Argsorts have a gap of the same kind: numpy's default (a SIMD quicksort where the CPU
has the instructions) orders random uint64 keys up to 4.5 times faster than its stable
sort, a timsort (1.7 times for 1,000 keys), so a sort of keys known to be distinct asks
for the default. The stable sort stays where equal keys must keep their order, and where
the input is a few long sorted runs.
"""

from __future__ import annotations

import numpy as np


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """What `np.unique(a)` returns (its sorted distinct values), by sorting."""
    if len(a) < 2:
        return a.copy()
    s = np.sort(a)
    keep = np.empty(len(s), dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]
