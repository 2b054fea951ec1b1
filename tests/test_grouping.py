"""engine.grouping against plain Python: a page's known grams grouped by their posting,
groups in order of first appearance, each group's places ascending."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from streamdet.engine.grouping import by_group, first_seen

IDS = st.lists(st.integers(0, 40) | st.integers(2**31 - 5, 2**31 - 1), max_size=300)


@settings(max_examples=300, deadline=None)
@given(IDS, st.data())
def test_places_group_by_first_appearance(ids, data):
    distinct, which = first_seen(np.asarray(ids, dtype=np.int32))
    model = list(dict.fromkeys(ids))
    assert distinct.tolist() == model
    assert which.tolist() == [model.index(v) for v in ids]
    # distinct values may share a group (postings with the same live holders)
    to_group = data.draw(st.lists(st.integers(0, 4), min_size=len(model), max_size=len(model)))
    n_groups = max(to_group, default=-1) + 1
    order, ends = by_group(which, np.asarray(to_group, dtype=np.int64), n_groups)
    starts = [0, *ends.tolist()[:-1]]
    for g in range(n_groups):
        assert order[starts[g]:ends[g]].tolist() == [
            i for i, v in enumerate(ids) if to_group[model.index(v)] == g]
    assert ends.tolist()[-1:] == ([len(ids)] if n_groups else [])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 30) | st.integers(2**64 - 30, 2**64 - 1), max_size=300))
def test_grams_number_by_first_appearance(grams):
    """The same table over uint64 grams (DocState._append numbers a document's new patch
    grams so), both ends of the range included."""
    distinct, which = first_seen(np.asarray(grams, dtype=np.uint64))
    model = list(dict.fromkeys(grams))
    assert distinct.dtype == np.uint64 and distinct.tolist() == model
    assert which.tolist() == [model.index(g) for g in grams]
