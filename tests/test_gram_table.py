"""state.gram_table against a dict: the compiled map the transaction keeps its batch's
postings in (gram -> posting id)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streamdet.state.gram_table import GramTable

# few distinct grams, so that writes hit grams already held; 0 and 2**64 - 1 included
GRAMS = st.sampled_from([0, 1, 2, 3, 2**63, 2**64 - 1] + [17 * i for i in range(4, 60)])
WRITE = st.tuples(st.lists(GRAMS, max_size=40), st.integers(-5, 2**31 - 1), st.booleans())


@given(st.lists(WRITE, max_size=12), st.integers(1, 64))
@settings(max_examples=200, deadline=None)
def test_a_gram_table_answers_as_a_dict_does(writes, capacity):
    table, truth = GramTable(capacity), {}
    for grams, value, each in writes:
        g = np.asarray(grams, dtype=np.uint64)
        if each:  # a value each: value, value + 1, ...
            values = np.arange(value, value + len(g), dtype=np.int64).astype(np.int32)
            table.assign_each(g, values)
            truth.update(zip(grams, values.tolist(), strict=True))
        else:
            table.assign(g, value)
            truth.update(dict.fromkeys(grams, value))
        assert len(table) == len(truth)
    probe = sorted(set(truth) | {5, 2**62})
    got = table.lookup(np.asarray(probe, dtype=np.uint64))
    assert got.dtype == np.int32
    assert got.tolist() == [truth.get(g, -1) for g in probe]
    keys, values = table.contents()
    assert keys.tolist() == sorted(truth)
    assert values.tolist() == [truth[g] for g in sorted(truth)]


def test_a_gram_table_grows_past_its_first_capacity():
    rng = np.random.default_rng(7)
    grams = np.unique(rng.integers(0, 2**64, 50_000, dtype=np.uint64))
    table = GramTable(8)
    for part in np.array_split(grams, 10):
        table.assign(part, 3)
    table.assign_each(grams[::2], np.arange(len(grams[::2]), dtype=np.int32))
    want = np.full(len(grams), 3, dtype=np.int32)
    want[::2] = np.arange(len(grams[::2]))
    assert len(table) == len(grams)
    assert (table.lookup(grams) == want).all()
    assert (table.lookup(grams + np.uint64(1)) == -1).sum() > len(grams) - 10


def test_assign_each_wants_a_value_a_gram():
    with pytest.raises(ValueError, match="as many values"):
        GramTable().assign_each(np.arange(3, dtype=np.uint64), np.zeros(2, dtype=np.int32))


def test_grams_a_page_chose_to_share_their_low_bits_start_in_slots_far_apart():
    """A hostile page's grams that agree on their low 20 bits (one slot each on their
    own low bits) start their probes in slots spread as random ones' would, under a
    multiplier drawn for each table (SPEC §9); two tables spread them differently."""
    grams = np.arange(1, 1001, dtype=np.uint64) << np.uint64(20)
    one, two = GramTable(2048), GramTable(2048)  # 4,096 slots
    homes = one.home(grams)
    assert homes.min() >= 0 and homes.max() < 4096
    assert np.bincount(homes).max() <= 8  # not one run of 1,000
    assert not np.array_equal(homes, two.home(grams))
