"""The recent first-holder pairs: a numpy hash table against a dict, its log in the KV,
and the flush into a segment."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdet.state.kv import MemoryKV
from streamdet.state.recent import TABLE, RecentPairs
from streamdet.state.rocks import RocksKV
from streamdet.state.txn import Store

CAPACITY = 64

# grams sharing their top bits (under a multiplier of 1, the table's first slot) with
# different low bits: long probe chains
GRAM = st.builds(lambda slot, low: (slot << 56) | low, st.integers(0, 7), st.integers(0, 2**56 - 1))
BATCHES = st.lists(st.lists(st.tuples(GRAM, st.integers(1, 10**12)), max_size=12,
                            unique_by=lambda p: p[0]), max_size=8)


def _arrays(pairs):
    grams = np.asarray([g for g, _ in pairs], dtype=np.uint64)
    return grams, np.asarray([d for _, d in pairs], dtype=np.uint64)


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # set once, not reset
@given(batches=BATCHES, probes=st.lists(GRAM, max_size=20))
def test_hash_table_and_its_log_equal_a_dict(batches, probes, monkeypatch):
    """With grams that crowd a few runs of slots, the table answers as a dict does."""
    monkeypatch.setattr("secrets.randbits", lambda _bits: 0)  # the tables' multiplier: 1
    kv = MemoryKV()
    recent = RecentPairs(kv, CAPACITY)
    model: dict[int, int] = {}
    for pairs in batches:
        pairs = [(g, d) for g, d in pairs if g not in model]  # a gram has one first holder
        if not recent.fits(len(pairs)):
            break
        grams, docnos = _arrays(pairs)
        kv.write(recent.log_ops(grams, docnos))
        recent.logged(grams, docnos)
        model.update(pairs)
        assert recent.n == len(model)
    asked = list(dict.fromkeys([*model, *probes]))
    for r in (recent, RecentPairs(kv, CAPACITY)):  # and read back from the log
        held, holders, rest = r.find(np.asarray(asked, dtype=np.uint64))
        assert dict(zip(held.tolist(), holders.tolist(), strict=True)) == {
            g: model[g] for g in asked if g in model}
        assert held.tolist() == [g for g in asked if g in model]
        assert rest.tolist() == [g for g in asked if g not in model]
        assert r.maybe(np.asarray(asked, dtype=np.uint64)).tolist() == [
            g in model for g in asked]
        _, grams, docnos = r.flush_ops()
        assert dict(zip(grams.tolist(), docnos.tolist(), strict=True)) == model


@pytest.mark.parametrize("backend", ["memory", "rocks"])
def test_pairs_that_do_not_fit_go_into_one_segment_with_the_recent_ones(backend, tmp_path,
                                                                        monkeypatch):
    monkeypatch.setattr("streamdet.state.recent.CAPACITY", 256)

    def open_kv():
        return MemoryKV() if backend == "memory" else RocksKV(str(tmp_path / "db"))

    kv = open_kv()
    store = Store(kv)
    rng = np.random.default_rng(5)
    truth: dict[int, int] = {}

    def batch(n: int, docno: int) -> None:
        txn = store.begin()
        grams = np.unique(rng.integers(0, 2**63, n, dtype=np.uint64))
        held = txn.prefetch(grams)
        assert not held.any()  # fresh grams
        txn.add_fresh(grams, docno, np.zeros(len(grams), dtype=bool))
        txn.commit({})
        truth.update(dict.fromkeys(grams.tolist(), docno))

    batch(100, 1)
    batch(100, 2)
    assert store.recent.n == 200 and not store.segments.segments
    assert len(list(kv.items(TABLE))) == 2
    batch(100, 3)  # 300 > 256: all three batches become one segment
    assert store.recent.n == 0 and len(store.segments.segments) == 1
    assert store.segments.segments[0].n == 300
    assert list(kv.items(TABLE)) == []
    batch(50, 4)
    assert store.recent.n == 50
    if backend == "rocks":
        store.close()
        kv = open_kv()
    store = Store(kv)  # reopened: segment and recent log read back
    assert store.recent.n == 50 and len(store.segments.segments) == 1
    txn = store.begin()
    grams = np.asarray(sorted(truth), dtype=np.uint64)
    assert txn.prefetch(grams).all()
    assert dict(zip(grams.tolist(), map(txn.posting_of, txn.prefetched(grams).tolist()),
                    strict=True)) == {
        g: (d,) for g, d in truth.items()}
    store.close()


def test_grams_a_page_chose_to_share_their_low_bits_are_all_found():
    """A hostile page's grams that agree on their low 20 bits (state.gram_table spreads
    them: tests/test_gram_table.py) are held and found like any others."""
    recent = RecentPairs(MemoryKV(), 1024)
    grams = np.arange(1, 1001, dtype=np.uint64) << np.uint64(20)
    recent.logged(grams, np.arange(1000, dtype=np.uint64))
    held, holders, rest = recent.find(grams)
    assert held.tolist() == grams.tolist() and holders.tolist() == list(range(1000))
    assert recent.n == 1000 and not len(rest)
