"""Pending additions (docs/rescoring.md#pending-additions) in the engine: a page below θ
that later pages share text with keeps their grams pending, and the result is the batch
definition's whatever the batches, with the store reopened between them."""

from __future__ import annotations

import pytest

from streamdet.engine.analysis import analyze
from streamdet.engine.core import Engine
from streamdet.engine.documents import add_record
from streamdet.engine.keyed import key_u64, u64key
from streamdet.engine.params import Params
from streamdet.engine.records import page_from_object
from streamdet.reading.views import dump_rows
from streamdet.state.kv import MemoryKV
from streamdet.state.txn import Store

from .harness import assert_same_rows, cut, memory_reopen_pipeline, memory_tight_pipeline
from .reference import reference


def _words(tag: str, n: int) -> str:
    return " ".join(f"{tag}{j}" for j in range(n))


def _stream() -> list[dict]:
    """A page whose opening copies on six sites share (it stays below θ, stale, while
    they come), then four sites that each copy one of its other passages (it is quilted)."""
    shared = _words("shared", 12)
    own = [_words(f"own{i}x", 12) for i in range(4)]
    page = {"url": "http://victim.example.org/p", "text": " ".join([shared, *own])}
    # the last copy has the least URL: the cover's tie-break picks it, from pending pairs
    copies = [{"url": f"http://copy{i}.example.net/c", "text": f"{shared} {_words(f'c{i}t', 8)}"}
              for i in reversed(range(6))]
    sources = [{"url": f"http://src{i}.example.com/s", "text": f"{own[i]} {_words(f's{i}t', 8)}"}
               for i in range(4)]
    return [page, *copies, *sources]


def _run(records: list[dict], params: Params, batches: list[int]) -> tuple[dict, int]:
    """The engine over the batches, each on a store opened anew (nothing may live only in
    memory between batches); the rows and the additions left pending."""
    kv, deferred = MemoryKV(), 0
    for batch in cut(records, batches):
        store, engine = Store(kv), Engine(params)
        txn = store.begin()
        _, stats = engine.process(txn, [analyze(page_from_object(r), params) for r in batch])
        txn.commit({})
        store.close()
        deferred += stats.deferred
    store = Store(kv)
    try:
        return {row["url"]: row for row in dump_rows(store, params)}, deferred
    finally:
        store.close()


@pytest.mark.parametrize("batches", [[1] * 11, [2, 3, 2, 4], [11]])
def test_a_stale_page_takes_sources_pending_and_is_quilted_exactly(batches):
    records, params = _stream(), Params()
    expected = reference(records, params)
    assert expected["http://victim.example.org/p"]["quilted"]
    # before its own passages are copied it is below θ, and not quilted
    assert not reference(records[:7], params)["http://victim.example.org/p"]["quilted"]
    rows, deferred = _run(records, params, batches)
    assert_same_rows(expected, rows)
    if batches[0] == 1:  # the copies came after it, each a batch: it was stale for them
        assert deferred >= 5

def test_every_prefix_reads_its_pending_sources():
    """After each page, a batch each: `dump` computes the stale page's cover from its
    pending pairs too (the least URL among the copies came last, and wins the tie)."""
    records, params = _stream(), Params()
    for n in range(1, len(records) + 1):
        assert_same_rows(reference(records[:n], params), _run(records[:n], params, [1] * n)[0])


class _ReadsOf(MemoryKV):
    """A MemoryKV that counts the keys read from each table."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: dict[str, list[bytes]] = {}

    def get(self, table, key):
        self.reads.setdefault(table, []).append(key)
        return super().get(table, key)

    def get_many(self, table, keys):
        self.reads.setdefault(table, []).extend(keys)
        return super().get_many(table, keys)


def _batches(kv: MemoryKV, records: list[dict], params: Params) -> None:
    """The records a batch each, each batch on a store opened anew (nothing cached)."""
    for record in records:
        store, engine = Store(kv), Engine(params)
        txn = store.begin()
        engine.process(txn, [analyze(page_from_object(record), params)])
        txn.commit({})
        store.close()


def _docno(kv: MemoryKV, url: str) -> int:
    store = Store(kv)
    try:
        return store.begin().url_entry(url)[0]
    finally:
        store.close()


def test_a_stale_page_takes_its_copies_sources_unread():
    """Once the first copy made the victim stale (and marked it so), the next copies'
    additions are stored as records of their own, one a copy, and the victim's document
    is not read - neither by the deltas nor to re-score it - until it is needed."""
    records, params = _stream(), Params()
    kv = _ReadsOf()
    _batches(kv, records[:2], params)
    victim = u64key(_docno(kv, "http://victim.example.org/p"))
    assert kv.get("stale", victim) is not None  # stale, marked
    kv.reads.clear()
    _batches(kv, records[2:7], params)
    assert victim not in kv.reads.get("docs", [])
    assert victim not in kv.reads.get("slots", [])
    added = [k for k, _ in kv.items_between("docadds", victim, u64key(key_u64(victim) + 1))]
    assert len(added) == 5 and all(len(k) == 24 for k in added)  # one record a copy
    store = Store(kv)
    try:
        assert_same_rows(reference(records[:7], params),
                         {r["url"]: r for r in dump_rows(store, params)})
    finally:
        store.close()


def test_pending_additions_stored_in_one_record_are_read_and_written_as_records():
    """A state of format 15 kept a document's pending additions in one record under its
    docno, and no stale marks: such a document is read before it takes more, its record
    is read with it, and the additions are written again as records of their own."""
    records, params = _stream(), Params()
    kv = MemoryKV()
    _batches(kv, records[:5], params)
    victim = u64key(_docno(kv, "http://victim.example.org/p"))
    end = u64key(key_u64(victim) + 1)
    kept = list(kv.items_between("docadds", victim, end))
    assert len(kept) == 3
    one = b"".join(add_record(key_u64(k[8:16]), v) for k, v in kept)
    kv.write([*(("docadds", k, None) for k, _ in kept), ("docadds", victim, one),
              *(("stale", k, None) for k, _ in list(kv.items("stale")))])
    _batches(kv, records[5:7], params)  # two more copies: still stale, pending five
    now = [k for k, _ in kv.items_between("docadds", victim, end)]
    assert len(now) == 5 and all(len(k) == 24 for k in now)
    assert kv.get("stale", victim) is not None  # rewritten: marked
    _batches(kv, records[7:], params)
    store = Store(kv)
    try:
        assert_same_rows(reference(records, params),
                         {r["url"]: r for r in dump_rows(store, params)})
    finally:
        store.close()


# In the last batch, b.example.com/'s new version gives a/p3 (stale, unread) a pending
# source; then ü's new version withdraws ü's old one, which held a gram with a/p3: its
# delta makes the transaction read a/p3, and is then skipped (the same host is no
# source). The page read must keep the addition it took unread.
_READ_AFTER_AN_UNREAD_ADDITION = [
    {"url": "http://a.example.com/", "text": "alpha alpha alpha gamma ", "ip": "10.0.0.1"},
    {"url": "http://a.example.com/p1", "text": "alpha alpha alpha "},
    {"url": "http://a.example.com/p2", "text": "alpha alpha alpha alpha alpha "},
    {"url": "http://b.example.com/", "text": "alpha alpha alpha alpha alpha alpha alpha "},
    {"url": "http://a.example.com/Z", "ip": "10.0.0.1",
     "html": "<body><p><b>alpha</b> </p><p>alpha </p><p><b>alpha</b> </p></body>"},
    {"url": "http://a.example.com/ü", "ip": "10.0.0.1",
     "html": "<body>gamma alpha alpha <p><b>alpha</b> </p></body>"},
    {"url": "http://a.example.com/", "ip": "10.0.0.1",
     "html": "<body><p><b>alpha</b> </p><p><b>alpha</b> </p><p><b>gamma</b> </p></body>"},
    {"url": "http://a.example.com/a/p3", "text": "gamma alpha alpha alpha ", "ip": "10.0.0.1"},
    {"url": "http://b.example.com/", "text": "gamma alpha "},
    {"url": "http://a.example.com/ü", "text": "alpha " * 10, "ip": "10.0.0.1"},
]


@pytest.mark.parametrize("pipeline", [memory_reopen_pipeline, memory_tight_pipeline])
def test_a_stale_page_read_after_an_addition_it_took_unread_keeps_it(pipeline):
    params = Params(k=2, m=4, theta=2 / 3, foreign="host", popular=2, chunk_threshold=0)
    records = _READ_AFTER_AN_UNREAD_ADDITION
    expected = reference(records, params)
    assert [(s["url"], s["grams"]) for s in expected["http://a.example.com/a/p3"]["sources"]] == [
        ("http://b.example.com/", 1)]
    assert_same_rows(expected, pipeline(records, params, [1, 1, 6, 2]))
