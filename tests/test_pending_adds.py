"""Pending additions (docs/rescoring.md#pending-additions) in the engine: a page below θ
that later pages share text with keeps their grams pending, and the result is the batch
definition's whatever the batches, with the store reopened between them."""

from __future__ import annotations

import pytest

from streamdet.engine.analysis import analyze
from streamdet.engine.core import Engine
from streamdet.engine.params import Params
from streamdet.engine.records import page_from_object
from streamdet.reading.views import dump_rows
from streamdet.state.kv import MemoryKV
from streamdet.state.txn import Store

from .harness import assert_same_rows, cut
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
