"""A transaction's batched reads (load_docs, load_names) against a real RocksDB state:
they give what the one-at-a-time reads give, and leave nothing for those reads to fetch."""

from __future__ import annotations

import numpy as np

from streamdet.engine.keyed import key_u64
from streamdet.state.rocks import RocksKV
from streamdet.state.schema import encode_doc
from streamdet.state.txn import Store

from .cli_helpers import build_crawl, streamdet, write_jsonl


class CountingKV:
    """The state's KV, counting its single gets and the keys of its multi-gets."""

    def __init__(self, kv: RocksKV) -> None:
        self.kv, self.gets, self.many = kv, 0, 0

    def get(self, table, key):
        self.gets += 1
        return self.kv.get(table, key)

    def get_many(self, table, keys):
        self.many += 1
        return self.kv.get_many(table, keys)

    def __getattr__(self, name):
        return getattr(self.kv, name)


def _state(tmp_path):
    crawl = build_crawl(seed=9, n_pages=40, n_quilts=10)
    path = write_jsonl(tmp_path / "crawl.jsonl", crawl)
    state = tmp_path / "s"
    streamdet("run", "--input", path, "--state", state, "--events", tmp_path / "ev.jsonl")
    return state


def test_batched_reads_give_what_single_reads_give_and_need_no_more_gets(tmp_path):
    state = _state(tmp_path)
    kv = RocksKV(str(state))
    try:
        docnos = [key_u64(k) for k, _ in kv.items("docs")]
        names = [key_u64(k) for k, _ in kv.items("names")]
        absent = max(names) + 1000  # a version never stored
        assert len(docnos) >= 30 and len(names) >= len(docnos)
        asked = [*docnos, absent, docnos[0]]  # repeats and absent keys are allowed

        single = Store(kv).begin()
        one_docs = [single.doc(d) for d in asked]
        one_names = [single.name(d) for d in [*names, absent]]

        counting = CountingKV(kv)
        batched = Store(counting).begin()
        batched.load_docs(asked)
        batched.load_names([*names, absent])
        assert counting.many == 4 and counting.gets == 0  # docs, slots, docdelta; names
        docs = [batched.doc(d) for d in asked]
        got_names = [batched.name(d) for d in [*names, absent]]
        assert counting.gets == 0  # everything was read already
        assert [None if d is None else encode_doc(d) for d in docs] == \
            [None if d is None else encode_doc(d) for d in one_docs]
        assert docs[-2] is None and docs[-1] is docs[0]
        assert all(np.array_equal(a.slots, b.slots) for a, b in
                   zip(docs[:-2], one_docs[:-2], strict=True))
        assert got_names == one_names and got_names[-1] is None and all(got_names[:-1])
        assert [batched.url_of(d) for d in names] == [n[1] for n in one_names[:-1]]

    finally:
        kv.close()


def test_names_read_in_one_call_stay_cached_for_later_transactions(tmp_path):
    state = _state(tmp_path)
    kv = RocksKV(str(state))
    try:
        names = [key_u64(k) for k, _ in kv.items("names")]
        counting = CountingKV(kv)
        store = Store(counting)
        store.begin().load_names(names)
        calls = counting.many
        later = store.begin()
        later.load_names(names)
        assert counting.many == calls  # all from the store's name cache
        assert [later.url_of(d) for d in names] and counting.gets == 0
    finally:
        kv.close()
