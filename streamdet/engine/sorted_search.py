"""Where queries sit in a sorted key array, and which of them it holds.

`searchsorted` gives each query's insertion point; the query is held where the key at
that point equals it. A point past the end (a query above every key) is clipped by
`take(mode="clip")` to the last key, which is below the query and so never equal to it:
no bounds test is needed (the fixed cost of each numpy call counts for the small arrays
of one delta).
"""

from __future__ import annotations

import numpy as np


def locate(keys: np.ndarray, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(insertion points, held): `held[i]` is whether `keys[points[i]] == queries[i]`.
    `keys` must be sorted and not empty."""
    points = keys.searchsorted(queries)
    return points, keys.take(points, mode="clip") == queries
