"""sorted_unique against the numpy call it stands in for."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdet.engine.sorting import sorted_unique

# few distinct values from both ends of the uint64 range (many repeats), or many (few)
FEW = st.one_of(st.integers(0, 6), st.integers(2**64 - 6, 2**64 - 1))
MANY = st.integers(0, 2**64 - 1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(FEW, MANY), max_size=300))
def test_sorted_unique_is_np_unique(values):
    for keys in (np.array(values, dtype=np.uint64), (np.array(values, dtype=np.uint64) % 7)
                 .astype(np.int64)):
        got = sorted_unique(keys)
        assert got.dtype == keys.dtype and got.tolist() == np.unique(keys).tolist()
