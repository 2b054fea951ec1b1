"""DocState: patch-gram slots and per-source masks against a plain model, through any
sequence of gains, losses, source changes and encode/decode round trips."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdet.state import schema
from streamdet.state.budget import DOC_SLOT_BYTES, MemoryBudget
from streamdet.state.kv import MemoryKV
from streamdet.state.maskcodec import decode_masks, encode_masks
from streamdet.state.schema import (
    COMMON,
    DocResult,
    DocState,
    decode_doc,
    decode_posting,
    encode_doc,
    encode_posting,
    encode_slots,
    u64key,
    u64keys,
)
from streamdet.state.txn import Store

GRAMS = st.integers(min_value=0, max_value=12)
SOURCES = st.integers(min_value=1, max_value=5)
OPS = st.lists(st.tuples(st.sampled_from(["gain", "lose", "add", "drop", "roundtrip", "fold"]),
                         st.lists(GRAMS, max_size=5, unique=True), SOURCES), max_size=40)


def _view(d: DocState) -> dict[int, set[int]]:
    """gram -> sources, read through the slots and masks."""
    grams = d.patch_grams()
    at = d.index.find(grams).tolist()
    return {g: {s for s, m in d.masks.items() if m >> i & 1}
            for g, i in zip(grams, at, strict=True)}


def _apply(d: DocState, model: dict[int, set[int]], op: str, grams: list[int], src: int) -> None:
    """One change to a document and to the plain model beside it."""
    if op == "gain":  # grams it holds already are left where they are
        at = d.gain(grams)
        model.update({g: set() for g in grams if g not in model})
        assert at.tolist() == d.index.find(grams).tolist()
        assert min(at, default=0) >= 0
    elif op == "lose":
        gone = [g for g in grams if g in model]
        d.lose(gone)
        for g in gone:
            del model[g]
    elif op == "add":
        have = [g for g in grams if g in model]
        d.add_source(src, d.bits(have))
        for g in have:
            model[g].add(src)
    elif op == "drop":
        have = [g for g in grams if g in model]
        d.drop_source(src, d.bits(have))
        for g in have:
            model[g].discard(src)
    elif src % 3 == 0:  # a result whose cover was not computed (below theta)
        d.result = DocResult((), False, d.n_patch, d.n_grams, (), stale=True)
    else:
        d.result = DocResult(((f"http://s{src}.example/", len(grams)),), bool(src % 2),
                         d.n_patch, d.n_grams, (src,))


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_slots_and_masks_follow_a_plain_model(ops):
    d = DocState(100)
    model: dict[int, set[int]] = {}
    for op, grams, src in ops:
        if op == "fold":  # the index goes and comes back built from the slots
            d.fold()
            assert d.folded
        elif op != "roundtrip":
            _apply(d, model, op, grams, src)
        else:
            again = decode_doc(encode_doc(d), encode_slots(d))
            assert encode_doc(again) == encode_doc(d)
            assert encode_slots(again) == encode_slots(d)
            d = again
        assert _view(d) == model
        assert d.n_patch == len(model)
        assert all(m for m in d.masks.values())  # no empty masks kept
        assert d.foreign_patch_grams() == sum(1 for v in model.values() if v)


def test_postings_round_trip():
    for p in [(), (1,), (3, 2**64 - 1, 7), COMMON]:
        assert decode_posting(encode_posting(p)) == p


MASKS = st.integers(min_value=1, max_value=3000).flatmap(
    lambda n: st.tuples(st.just(n), st.lists(st.sets(st.integers(0, n - 1), min_size=1,
                                                     max_size=5), min_size=1, max_size=4)),
).flatmap(lambda case: st.tuples(st.just(case[0]), st.lists(st.sampled_from(case[1]),
                                                             max_size=12)))


@settings(max_examples=200, deadline=None)
@given(MASKS)
def test_masks_round_trip_with_repeats(case):
    n_slots, bit_sets = case
    masks = [sum(1 << i for i in bits) for bits in bit_sets]
    blob = b"prefix" + encode_masks(masks, n_slots) + b"suffix"
    decoded, end = decode_masks(blob, len(b"prefix"), len(masks), n_slots)
    assert decoded == masks
    assert blob[end:] == b"suffix"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.sets(SOURCES, max_size=4)),
                unique_by=lambda t: t[0], max_size=30),
       st.lists(GRAMS, max_size=8, unique=True))
def test_holder_bits_equal_one_bits_call_per_holder(gram_holders, earlier):
    """Both ways of making the masks: per group of equal holder tuples, and (past
    HOLDER_GROUPS groups) one bit matrix."""
    for limit in (schema.HOLDER_GROUPS, 0):
        with patch.object(schema, "HOLDER_GROUPS", limit):
            _check_holder_bits(gram_holders, earlier)


def _check_holder_bits(gram_holders, earlier):
    d = DocState(100)
    d.gain(earlier)  # slots taken before, and one freed, as in a document seen before
    d.lose(earlier[:1])
    grams = [g for g, _ in gram_holders]
    at = d.gain(grams)
    holders = [tuple(h) for _, h in gram_holders]
    expected = {s: d.bits([g for g, h in zip(grams, holders, strict=True) if s in h])
                for s in set().union(*holders)}
    assert d.holder_bits(at, holders) == expected


STORED_OPS = st.lists(st.tuples(st.sampled_from(["gain", "lose", "add", "drop", "result"]),
                                st.lists(GRAMS, max_size=5, unique=True),
                                st.integers(min_value=1, max_value=30),
                                st.booleans()), max_size=40)


@settings(max_examples=300, deadline=None)
@given(STORED_OPS)
def test_documents_stored_as_snapshot_plus_delta_read_back_equal(ops):
    """Each change is committed (as a delta while it stays small, else a snapshot) and,
    now and then, read back by a new store with nothing cached."""
    kv = MemoryKV()
    store = Store(kv)
    txn = store.begin()
    txn.put_doc(7, DocState(100))
    txn.commit()
    model: dict[int, set[int]] = {}
    for op, grams, src, reload in ops:
        if reload:
            store = Store(kv)
        txn = store.begin()
        d = txn.doc(7)
        assert _view(d) == model
        _apply(d, model, op, grams, src)
        result = d.result
        txn.touch_doc(7)
        txn.commit()
        again = Store(kv).begin().doc(7)
        assert _view(again) == model
        assert encode_doc(again) == encode_doc(d)  # same masks, same result
        assert (again.result.sources, again.result.quilted, again.result.docnos,
                again.result.stale) == (result.sources, result.quilted, result.docnos,
                                        result.stale)
        assert encode_slots(again) == encode_slots(d)


def test_a_transaction_folds_its_oldest_documents_past_the_budget_and_loses_nothing():
    """Each document has 100 slots and the budget's share is 250: handing out more folds
    the least recently handed out (the store's cached documents go first), and what a
    caller changes in a document still held, folded or not, is committed."""
    kv = MemoryKV()
    budget = MemoryBudget(250 * DOC_SLOT_BYTES * 16 // 3 + 16)
    assert budget.doc_slots == 250
    store = Store(kv, budget)
    txn = store.begin()
    for docno in range(1, 7):
        d = DocState(500)
        d.gain([docno * 1000 + i for i in range(100)])
        txn.put_doc(docno, d)
    txn.commit()
    assert store.cached_slots <= 250
    txn = store.begin()
    held = []
    for docno in range(1, 7):
        held.append(d := txn.doc(docno))
        assert d.bits([docno * 1000 + 2]) == 1 << 2  # its index is built
    assert store.cached_slots == 0  # the transaction needed their room
    assert sum(not d.folded for d in held) <= 3 and not held[-1].folded
    assert held[0].folded
    for docno, d in enumerate(held, 1):  # changes through references kept meanwhile
        d.add_source(50 + docno, d.bits([docno * 1000 + 5, docno * 1000 + 99]))
        d.lose([docno * 1000])
        txn.touch_doc(docno)
    assert sum(not d.folded for d in held) == 6  # using them built every index again
    txn.commit()
    again = Store(kv).begin()
    for docno in range(1, 7):
        d = again.doc(docno)
        assert d.masks == {50 + docno: 1 << 5 | 1 << 99} and d.n_patch == 99
        assert d.index.find([docno * 1000, docno * 1000 + 1]).tolist() == [-1, 1]


def test_an_added_source_is_stored_as_a_small_delta_not_a_new_snapshot():
    kv = MemoryKV()
    store = Store(kv)
    txn = store.begin()
    d = DocState(500)
    d.gain(list(range(200)))
    for s in range(1, 41):
        d.add_source(s, d.bits(list(range(s, 200, 7))))
    txn.put_doc(7, d)
    txn.commit()
    snapshot = kv.get("docs", u64key(7))
    assert kv.get("docdelta", u64key(7)) is None
    for s in (41, 42):
        txn = store.begin()
        txn.doc(7).add_source(s, 0b1011)
        txn.touch_doc(7)
        txn.commit()
        assert kv.get("docs", u64key(7)) == snapshot  # not rewritten
        assert len(kv.get("docdelta", u64key(7))) < len(snapshot) // 4
    txn = store.begin()
    txn.doc(7).lose([0, 1])  # every mask changes: a new snapshot, no delta
    txn.touch_doc(7)
    txn.commit()
    assert kv.get("docs", u64key(7)) != snapshot
    assert kv.get("docdelta", u64key(7)) is None
    again = Store(kv).begin().doc(7)
    assert again.masks == txn.doc(7).masks and 41 in again.masks and 42 in again.masks


@given(st.lists(st.integers(0, 2**64 - 1) | st.sampled_from([0, 256, 2**64 - 1, 1 << 56]),
                max_size=20))
def test_u64keys_are_the_keys_one_at_a_time(values):
    """Keys ending in zero bytes keep them (a byte-string view would strip them)."""
    assert u64keys(np.array(values, dtype=np.uint64)) == [u64key(v) for v in values]
