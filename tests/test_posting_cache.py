"""The store's packed cache of overlay postings (state.posting_cache) against a dict:
whatever it returns is the last value put for that key, it forgets only past its bytes,
and a key it has not forgotten is found."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdet.engine.documents import COMMON
from streamdet.state import posting_cache
from streamdet.state.posting_cache import ENTRY_BYTES, PostingCache


def _update(cache: PostingCache, entries: dict) -> None:
    """Put a dict's postings (PostingCache.put: keys, postings, which one each)."""
    cache.put(np.fromiter(entries, dtype=np.uint64, count=len(entries)),
              list(entries.values()), np.arange(len(entries)))


def _get_many(cache: PostingCache, keys: list[int], into: dict) -> list[int]:
    """The postings of `keys` the cache holds, into `into`; the others, in order."""
    parts, missing = cache.find(np.asarray(keys, dtype=np.uint64))
    for found, postings, which in parts:
        into.update(zip(found.tolist(), [postings[i] for i in which.tolist()], strict=True))
    return missing.tolist()


postings = st.one_of(st.just(COMMON), st.tuples(), st.lists(
    st.integers(1, 2**64 - 1), min_size=1, max_size=7).map(tuple))
keys = st.integers(0, 2**64 - 1) | st.integers(0, 40)  # small keys repeat
ops = st.lists(st.one_of(
    st.tuples(st.just("put"), keys, postings),
    st.tuples(st.just("update"), st.dictionaries(keys, postings, max_size=30)),
    st.tuples(st.just("get"), st.lists(keys, max_size=40))), max_size=60)


@settings(max_examples=400, deadline=None)
@given(ops, st.sampled_from([1, 300, 2_000, 1 << 20]), st.sampled_from([1, 2, 3, 1 << 16]))
def test_the_cache_returns_the_last_value_put_and_misses_only_what_it_forgot(ops, capacity,
                                                                             chunk):
    saved, posting_cache.CHUNK = posting_cache.CHUNK, chunk  # a packing's step, in entries
    try:
        check_against_a_dict(ops, capacity)
    finally:
        posting_cache.CHUNK = saved


def check_against_a_dict(ops: list, capacity: int) -> None:
    cache, model = PostingCache(capacity), {}
    for op in ops:
        if op[0] == "put":
            _update(cache, {op[1]: op[2]})
            model[op[1]] = op[2]
        elif op[0] == "update":
            _update(cache, op[1])
            model.update(op[1])
        else:
            asked = sorted(set(op[1]))
            into: dict = {}
            missing = _get_many(cache, asked, into)
            assert set(missing) | set(into) == set(asked) and not set(missing) & set(into)
            assert missing == [k for k in asked if k in missing]  # in the order asked
            for k, v in into.items():
                assert v == model[k] and type(v) is type(model[k])
            if not cache.dropped:  # nothing forgotten: every key put is found
                assert set(into) == {k for k in asked if k in model}
    assert cache.nbytes <= cache.packed_bytes + 8  # `starts` has a cell more than entries


def test_a_packing_keeps_the_entries_used_lately_and_forgets_the_rest():
    one = ENTRY_BYTES + 2 * 4  # a packed posting of two holders of 32 bits
    cache = PostingCache(0)
    cache.young_entries, cache.packed_bytes = 4, 8 * one + 8  # starts has one more cell
    _update(cache, {k: (k + 1, k + 2) for k in range(4)})  # packed: round 0
    _update(cache, {k: (k + 1, k + 2) for k in range(4, 8)})  # packed: round 1
    assert len(cache.keys) == 8 and not cache.dropped
    into: dict = {}
    assert _get_many(cache, [0, 1], into) == [] and into == {0: (1, 2), 1: (2, 3)}  # round 2
    _update(cache, {k: (k + 1, k + 2) for k in range(8, 12)})  # round 2: over the bytes
    assert cache.dropped
    assert cache.keys.tolist() == [0, 1, 8, 9, 10, 11]  # 0 and 1 were used in round 2
    into = {}
    assert _get_many(cache, list(range(12)), into) == [2, 3, 4, 5, 6, 7]
    assert into[9] == (10, 11)


def test_young_values_replace_packed_ones_and_common_and_empty_postings_survive_packing():
    cache = PostingCache(0)
    cache.young_entries, cache.packed_bytes = 3, 1 << 20
    _update(cache, {5: (1, 2), 7: COMMON, 9: ()})
    _update(cache, {5: (3,), 11: (4, 5, 6), 12: (7,)})
    into: dict = {}
    assert _get_many(cache, [5, 7, 9, 11, 12, 13], into) == [13]
    assert into == {5: (3,), 7: COMMON, 9: (), 11: (4, 5, 6), 12: (7,)}
    assert cache.keys.tolist() == [5, 7, 9, 11, 12] and not cache.young and len(cache) == 5


def test_holders_are_kept_in_32_bits_until_a_docno_needs_more():
    cache = PostingCache(0)
    cache.young_entries, cache.packed_bytes = 2, 1 << 20
    _update(cache, {1: (3, 4), 2: (5,)})
    assert str(cache.holders.dtype) == "uint32"
    _update(cache, {3: (2**40, 6), 4: COMMON})
    assert str(cache.holders.dtype) == "uint64"
    into: dict = {}
    assert _get_many(cache, [1, 2, 3, 4], into) == []
    assert into == {1: (3, 4), 2: (5,), 3: (2**40, 6), 4: COMMON}


def test_a_packing_reuses_its_buffers_and_forgets_down_to_its_share(monkeypatch):
    """The packed arrays stay views of the buffers made at the first packing (no second
    copy of them is made), through packings that keep, replace and forget entries."""
    cache = PostingCache(0)
    cache.young_entries, cache.packed_bytes = 50, 64 * (ENTRY_BYTES + 3 * 4)
    monkeypatch.setattr(posting_cache, "CHUNK", 7)  # several steps a packing
    _update(cache, {k: (k, k + 1, k + 2) for k in range(50)})
    buffers = [id(b) for b in cache._buffers]
    for r in range(1, 8):
        _update(cache, {k: (k, k + 1, k + 2) for k in range(40 * r, 40 * r + 50)})
        assert [id(b) for b in cache._buffers] == buffers
        assert all(v.base is b for v, b in zip(
            (cache.keys, cache.starts, cache.holders, cache.common, cache.used),
            cache._buffers, strict=True))
        assert cache.nbytes <= cache.packed_bytes + 8
    assert cache.dropped
    kept = cache.keys.tolist()
    assert kept == sorted(kept) and kept[-50:] == list(range(280, 330))  # the last round
    into: dict = {}
    assert _get_many(cache, kept, into) == []
    assert into == {k: (k, k + 1, k + 2) for k in kept}


@given(st.lists(st.lists(st.integers(0, 3), min_size=3, max_size=3), min_size=1, max_size=40),
       st.sampled_from([posting_cache._MIX, np.uint64(0)]))  # 0: every row hashes alike
@settings(max_examples=100, deadline=None)
def test_distinct_rows_are_exact_even_when_their_hashes_collide(rows, mix):
    block = np.asarray(rows, dtype=np.uint32)
    saved, posting_cache._MIX = posting_cache._MIX, mix
    try:
        distinct, which = posting_cache._distinct_rows(block)
    finally:
        posting_cache._MIX = saved
    assert (distinct[which] == block).all()
    assert len(distinct) == len({tuple(r) for r in rows})
