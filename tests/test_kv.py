"""The state backends' range reads, forwards and backwards, and a transaction's lazy walk
over them, against sorted lists of the same records (a real RocksDB and the in-memory
backend, with keys that end, repeat and straddle the bounds)."""

from __future__ import annotations

import struct
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdet.state.budget import MemoryBudget
from streamdet.state.keyed import KeyedTable
from streamdet.state.kv import KV, MemoryKV
from streamdet.state.rocks import RocksKV, RocksMemory

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])

keys_st = st.sets(st.binary(min_size=0, max_size=3), max_size=30)
bound_st = st.binary(max_size=3)


@contextmanager
def _both(records: dict[bytes, bytes]) -> Iterator[tuple[KV, KV]]:
    """The same records in each backend."""
    with tempfile.TemporaryDirectory(prefix="streamdet-kv-") as path:
        kvs = (MemoryKV(), RocksKV(path))
        for kv in kvs:
            kv.write([("sites", k, v) for k, v in records.items()])
        yield kvs
        kvs[1].close()


@settings(max_examples=60, **SETTINGS)
@given(keys=keys_st, start=bound_st, end=bound_st)
def test_items_forwards_backwards_and_between_equal_the_sorted_records(keys, start, end):
    records = {k: b"v" + k for k in keys if k}  # the tables never write an empty key
    with _both(records) as kvs:
        for kv in kvs:
            for bound in (start, end, *records):  # bounds between keys and on them
                assert list(kv.items("sites", bound)) == sorted(
                    (k, v) for k, v in records.items() if k >= bound)
                assert list(kv.items_back("sites", bound)) == sorted(
                    ((k, v) for k, v in records.items() if k < bound), reverse=True)
                for upper in (start, end, *records):
                    assert list(kv.items_between("sites", bound, upper)) == sorted(
                        (k, v) for k, v in records.items() if bound <= k < upper)


@settings(max_examples=60, **SETTINGS)
@given(keys=keys_st, written=st.dictionaries(st.binary(min_size=1, max_size=3),
                                             st.sampled_from([None, b"w"]), max_size=6),
       start=bound_st, end=bound_st, back=st.booleans())
def test_a_walk_equals_the_scan_with_or_without_the_transactions_writes(
        keys, written, start, end, back):
    """A walk is the scan, lazily: of the KV's records alone, and with this transaction's
    writes and deletes over them when it wrote into the range."""
    records = {k: b"v" + k for k in keys if k}
    with _both(records) as kvs:
        for kv in kvs:
            table = KeyedTable(kv, "sites")
            want = table.scan(start, end)
            assert list(table.walk(start, end, back)) == (want[::-1] if back else want)
            for key, value in written.items():
                table.put(key, value)
            want = table.scan(start, end)
            assert list(table.walk(start, end, back)) == (want[::-1] if back else want)


def test_a_range_read_of_rocksdb_goes_to_its_end_whatever_is_allocated_meanwhile(tmp_path):
    """The upper bound lives in read options the iterator does not keep: a range read
    must keep them itself (it stopped after the first pair when they were freed)."""
    kv = RocksKV(str(tmp_path / "db"))
    try:
        key = struct.Struct(">IcI")
        kv.write([("segs", key.pack(1, b"c", i), b"v%d" % i) for i in range(300)])
        kv.write([("segs", key.pack(2, b"c", 0), b"after")])
        it = kv.items_between("segs", key.pack(1, b"c", 0), key.pack(1, b"d", 0))
        churn = [bytes([i % 256]) * 9 for i in range(10_000)]  # reuse of freed memory
        got = list(it)
        assert len(churn) == 10_000
        assert got == [(key.pack(1, b"c", i), b"v%d" % i) for i in range(300)]
    finally:
        kv.close()


def test_a_workers_states_share_one_cache_and_their_empty_memtables_leave_room(tmp_path):
    """A worker's shard states share one block cache and one write buffer manager
    (state.rocks.RocksMemory); their memtables, all tables' of all states together, must
    fit well within the manager's limit when empty, or it is over its limit from the
    start and switches a memtable (a new WAL file) on every write
    (state.rocks._hash_buckets)."""
    states = MemoryBudget(MemoryBudget().total // 2)
    memory = RocksMemory(states)
    kvs = [RocksKV(str(tmp_path / f"{role}-{i}"), budget=states.shard_state(role, 8),
                   memory=memory) for role in ("doc", "gram") for i in range(8)]
    try:
        assert all(kv.cache is memory.cache and kv.memtables is memory.memtables
                   for kv in kvs)
        assert memory.memtables.get_buffer_size() == states.memtables
        assert memory.memtables.get_usage() < states.memtables // 2
        for kv in kvs:
            kv.write([("grams", struct.pack(">Q", i), b"x" * 8) for i in range(1000)])
        assert memory.memtables.get_usage() < states.memtables // 2
        assert all(kv.get("grams", struct.pack(">Q", 999)) == b"x" * 8 for kv in kvs)
    finally:
        for kv in kvs:
            kv.close()
