"""DocState: patch-gram slots and (source, slot) pairs against a plain model, through any
sequence of gains, losses, source changes and encode/decode round trips."""

from __future__ import annotations

import struct

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streamdet.engine.documents import (
    COMMON,
    DOC_SLOT_BYTES,
    DocResult,
    DocState,
    add_records,
)
from streamdet.engine.keyed import u64key, u64keys
from streamdet.engine.paircodec import count_pairs, decode_pairs, decode_some, encode_pairs
from streamdet.state.budget import MemoryBudget
from streamdet.state.doc_cache import DocCache
from streamdet.state.kv import MemoryKV
from streamdet.state.maskcodec import decode_mask_pairs
from streamdet.state.schema import (
    decode_doc,
    decode_posting,
    encode_doc,
    encode_doc_delta,
    encode_doc_packing,
    encode_posting,
    encode_slots,
)
from streamdet.state.txn import Store

GRAMS = st.integers(min_value=0, max_value=12)
SOURCES = st.integers(min_value=1, max_value=5)
OPS = st.lists(st.tuples(st.sampled_from(["gain", "lose", "add", "defer", "drop", "roundtrip",
                                          "fold"]),
                         st.lists(GRAMS, max_size=5, unique=True), SOURCES), max_size=40)


def _holdings(d: DocState) -> dict[int, set[int]]:
    """source -> the slots it holds, its pending additions included (settled on a copy,
    so that looking changes nothing)."""
    if d.adds:
        d = decode_doc(encode_doc(d), encode_slots(d), None, d.adds)
    out: dict[int, set[int]] = {}
    for s, x in zip(*(a.tolist() for a in d.cover_pairs()), strict=True):
        out.setdefault(s, set()).add(x)
    return out


def _view(d: DocState) -> dict[int, set[int]]:
    """gram -> sources, read through the slots and pairs."""
    grams = d.patch_grams()
    at = d.index.find(grams).tolist()
    held = _holdings(d)
    return {g: {s for s, slots in held.items() if i in slots}
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
        d.add_source(src, d.slots_of(have))
        for g in have:
            model[g].add(src)
    elif op == "defer":  # as a stale document takes a source: its grams, slots found later
        # as the engine gives them: a source names a document's grams once, at its
        # arrival (none it holds already), or a delta is delivered twice (here: no
        # grams drawn, and the source has a list pending, which it gives again)
        pending = [np.frombuffer(raw, dtype="<u8").tolist()
                   for s, raw in add_records(d.adds) if s == src]
        if not grams and pending:
            have = pending[-1]
        else:
            have = [g for g in grams if g in model and src not in model[g]]
        if not d.result.stale:  # the engine defers only a stale document's additions
            d.result = DocResult((), False, d.n_patch, d.n_grams, (), stale=True)
        d.defer_add(src, have)
        for g in have:
            model[g].add(src)
    elif op == "drop":
        have = [g for g in grams if g in model]
        d.drop_source(src, d.slots_of(have))
        for g in have:
            model[g].discard(src)
    elif src % 3 == 0:  # a result whose cover was not computed (below theta)
        d.result = DocResult((), False, d.n_patch, d.n_grams, (), stale=True)
    else:  # a cover computed: from every pair, the pending ones settled (DocRole.score)
        d.cover_pairs()
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
            again = decode_doc(encode_doc(d), encode_slots(d), None, d.adds or None)
            assert encode_doc(again) == encode_doc(d)
            assert encode_slots(again) == encode_slots(d)
            assert again.adds == d.adds
            d = again
        assert _view(d) == model
        assert d.n_patch == len(model)
        src, slot = d.pairs.settled()  # sorted by (source, slot), no pair twice
        assert sorted(zip(src.tolist(), slot.tolist(), strict=True)) == list(
            zip(src.tolist(), slot.tolist(), strict=True))
        assert len(set(zip(src.tolist(), slot.tolist(), strict=True))) == len(src)
        settled = decode_doc(encode_doc(d), encode_slots(d), None, d.adds or None)
        assert settled.foreign_patch_grams() == sum(1 for v in model.values() if v)


def test_a_pending_addition_whose_gram_went_and_came_back_adds_nothing():
    """A stale document's pending addition names grams, not slots: a gram lost and
    gained again (its posting fell to one holder, then another page came) sits in a slot
    the source never held, so the additions are settled before the patch set changes."""
    d = DocState(100)
    d.gain([5, 6])
    d.defer_add(1, [5, 6])
    d.lose([5])
    d.gain([5])
    assert [tuple(a.tolist()) for a in d.cover_pairs()] == [(1,), (1,)]  # slot 1 only


def test_postings_round_trip():
    for p in [(), (1,), (3, 2**64 - 1, 7), COMMON]:
        assert decode_posting(encode_posting(p)) == p


LISTS = st.integers(min_value=1, max_value=70000).flatmap(
    lambda n: st.tuples(st.just(n), st.lists(st.sets(st.integers(0, n - 1), max_size=5),
                                             min_size=1, max_size=4)),
).flatmap(lambda case: st.tuples(st.just(case[0]), st.lists(st.sampled_from(case[1]),
                                                             max_size=12)))


@settings(max_examples=200, deadline=None)
@given(LISTS)
def test_slot_lists_round_trip_with_repeats(case):
    """Each source's slots, the same lists repeated (replicas), empty ones (a delta's gone
    sources), over slot counts both sides of the 16-bit width."""
    n_slots, lists = case
    sources = list(range(10, 10 + len(lists)))
    rows = sorted((s, x) for s, xs in zip(sources, lists, strict=True) for x in xs)
    src = np.asarray([s for s, _ in rows], dtype=np.uint64)
    slot = np.asarray([x for _, x in rows], dtype=np.int32)
    blob = b"prefix" + encode_pairs(src, slot, sources, n_slots) + b"suffix"
    got_src, got_slot, end = decode_pairs(blob, len(b"prefix"), sources, n_slots)
    assert got_src.tolist() == src.tolist() and got_slot.tolist() == slot.tolist()
    assert blob[end:] == b"suffix"


@settings(max_examples=200, deadline=None)
@given(LISTS)
def test_slot_lists_are_stored_each_distinct_one_once_in_order_of_first_appearance(case):
    """The bytes, against the layout as engine.paircodec's docstring gives it: stored
    documents are read by this layout whatever wrote them."""
    n_slots, lists = case
    sources = list(range(10, 10 + len(lists)))
    rows = sorted((s, x) for s, xs in zip(sources, lists, strict=True) for x in xs)
    raw = encode_pairs(np.asarray([s for s, _ in rows], dtype=np.uint64),
                       np.asarray([x for _, x in rows], dtype=np.int32), sources, n_slots)
    if not lists:
        assert raw == b""  # no source: no lists, not even their count
        return
    distinct = list(dict.fromkeys(tuple(sorted(xs)) for xs in lists))
    slot_type = "<u2" if n_slots <= 1 << 16 else "<u4"
    assert raw == b"".join((
        struct.pack("<I", len(distinct)),
        np.asarray([len(xs) for xs in distinct], dtype="<u4").tobytes(),
        *(np.asarray(xs, dtype=slot_type).tobytes() for xs in distinct),
        np.asarray([distinct.index(tuple(sorted(xs))) for xs in lists], dtype="<u2").tobytes()))


@settings(max_examples=200, deadline=None)
@given(LISTS, st.sets(st.integers(5, 40)))
def test_some_sources_lists_read_alone(case, wanted):
    """A delta reads only its sources' lists of a packed snapshot: the same pairs as the
    whole decode restricted to them; a wanted source not stored has none."""
    n_slots, lists = case
    sources = list(range(10, 10 + len(lists)))
    rows = sorted((s, x) for s, xs in zip(sources, lists, strict=True) for x in xs)
    raw = encode_pairs(np.asarray([s for s, _ in rows], dtype=np.uint64),
                       np.asarray([x for _, x in rows], dtype=np.int32), sources, n_slots)
    assert count_pairs(raw, len(sources), n_slots) == len(rows)
    src, slot = decode_some(raw, np.asarray(sources, dtype=np.uint64),
                            np.asarray(sorted(wanted), dtype=np.uint64), n_slots)
    assert list(zip(src.tolist(), slot.tolist(), strict=True)) == [
        (s, x) for s, x in rows if s in wanted]


def test_a_document_stored_as_bitmasks_reads_as_pairs():
    """Formats up to 13 stored each source's slots as a bitmask, each distinct one once."""
    n_slots, width = 20, 3
    masks = [(1 << 3) | (1 << 17), 1 << 0]
    blob = (struct.pack("<I", 2) + b"".join(m.to_bytes(width, "little") for m in masks)
            + np.asarray([0, 1, 0], dtype="<u2").tobytes() + b"end")
    src, slot, end = decode_mask_pairs(blob, 0, [5, 6, 7], n_slots)
    assert list(zip(src.tolist(), slot.tolist(), strict=True)) == [
        (5, 3), (5, 17), (6, 0), (7, 3), (7, 17)]
    assert blob[end:] == b"end"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.sets(SOURCES, max_size=4)),
                unique_by=lambda t: t[0], max_size=30),
       st.lists(GRAMS, max_size=8, unique=True))
def test_holder_pairs_equal_one_slot_lookup_per_holder(gram_holders, earlier):
    d = DocState(100)
    d.gain(earlier)  # slots taken before, and one freed, as in a document seen before
    d.lose(earlier[:1])
    grams = [g for g, _ in gram_holders]
    at = d.gain(grams)
    holders = [tuple(h) for _, h in gram_holders]
    src, slot = d.holder_pairs(at, holders)
    got = sorted(zip(src.tolist(), slot.tolist(), strict=True))
    want = sorted((s, x) for s in set().union(*holders)
                  for x in d.slots_of([g for g, h in zip(grams, holders, strict=True)
                                       if s in h]).tolist())
    assert got == want


STORED_OPS = st.lists(st.tuples(st.sampled_from(["gain", "lose", "add", "defer", "drop",
                                                 "result"]),
                                st.lists(GRAMS, max_size=5, unique=True),
                                st.integers(min_value=1, max_value=30),
                                st.booleans()), max_size=40)


@settings(max_examples=300, deadline=None)
@given(STORED_OPS)
# a pending list delivered again, read back by a new store: stored once
@example([("gain", [0, 1], 1, False), ("defer", [0, 1], 1, False), ("defer", [], 1, True)])
# a source's second list starting with the gram of its first (it gives only what is new)
@example([("gain", [0, 1], 1, False), ("defer", [0], 1, False), ("defer", [0, 1], 1, False)])
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
        assert encode_doc(again) == encode_doc(d)  # same pairs, same result
        # the same additions pending (stored a record each: in key order, one given
        # twice - a delta delivered twice - stored once)
        assert set(add_records(again.adds)) == set(add_records(d.adds))
        assert (again.result.sources, again.result.quilted, again.result.docnos,
                again.result.stale) == (result.sources, result.quilted, result.docnos,
                                        result.stale)
        assert encode_slots(again) == encode_slots(d)


def test_the_document_cache_folds_the_oldest_before_it_forgets_any():
    """Documents wait whole; past the limit the least recently used are folded (their
    index dropped) and only then forgotten; a folded one comes back whole."""
    cache = DocCache()
    for docno in range(1, 5):
        d = DocState(5000)
        d.gain([docno * 10_000 + i for i in range(2000)])
        d.add_source(9, d.slots_of([docno * 10_000, docno * 10_000 + 1]))
        assert not d.folded  # built, as a batch's use leaves it
        cache.put(docno, d)
    whole = d.resident_weight
    d.fold()
    folded = d.resident_weight
    d.index  # noqa: B018
    assert folded < whole and cache.weight == 4 * whole
    cache.shrink(2 * whole + 2 * folded)
    assert [cache.folded(n) for n in range(1, 5)] == [True, True, False, False]
    assert cache.weight == 2 * whole + 2 * folded
    cache.shrink(4 * folded)  # every one fits folded: none is forgotten
    assert [cache.folded(n) for n in range(1, 5)] == [True] * 4 and cache.weight == 4 * folded
    cache.shrink(3 * folded)  # now the oldest goes
    assert cache.folded(1) is None and len(cache) == 3
    again = cache.take(2)
    assert cache.weight == 2 * folded and again.folded
    assert again.slots_of([20_000, 20_050, 5]).tolist() == [0, 50]
    assert _holdings(again) == {9: {0, 1}}


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
        assert d.slots_of([docno * 1000 + 2]).tolist() == [2]  # its index is built
    assert store.cached_slots == 0  # the transaction needed their room
    assert sum(not d.folded for d in held) <= 3 and not held[-1].folded
    assert held[0].folded
    for docno, d in enumerate(held, 1):  # changes through references kept meanwhile
        d.add_source(50 + docno, d.slots_of([docno * 1000 + 5, docno * 1000 + 99]))
        d.lose([docno * 1000])
        txn.touch_doc(docno)
    assert sum(not d.folded for d in held) == 6  # using them built every index again
    txn.commit()
    again = Store(kv).begin()
    for docno in range(1, 7):
        d = again.doc(docno)
        assert _holdings(d) == {50 + docno: {5, 99}} and d.n_patch == 99
        assert d.index.find([docno * 1000, docno * 1000 + 1]).tolist() == [-1, 1]


def test_an_added_source_is_stored_as_a_small_delta_not_a_new_snapshot():
    kv = MemoryKV()
    store = Store(kv)
    txn = store.begin()
    d = DocState(500)
    d.gain(list(range(200)))
    for s in range(1, 41):
        d.add_source(s, d.slots_of(list(range(s, 200, 7))))
    txn.put_doc(7, d)
    txn.commit()
    snapshot = kv.get("docs", u64key(7))
    assert kv.get("docdelta", u64key(7)) is None
    for s in (41, 42):
        txn = store.begin()
        txn.doc(7).add_source(s, np.asarray([0, 1, 3], dtype=np.int32))
        txn.touch_doc(7)
        txn.commit()
        assert kv.get("docs", u64key(7)) == snapshot  # not rewritten
        assert len(kv.get("docdelta", u64key(7))) < len(snapshot) // 4
    txn = store.begin()
    txn.doc(7).lose([0, 1])  # every source's list may change: a new snapshot, no delta
    txn.touch_doc(7)
    txn.commit()
    assert kv.get("docs", u64key(7)) != snapshot
    assert kv.get("docdelta", u64key(7)) is None
    again = Store(kv).begin().doc(7)
    assert _holdings(again) == _holdings(txn.doc(7)) and {41, 42} <= set(_holdings(again))


@given(st.lists(st.integers(0, 2**64 - 1) | st.sampled_from([0, 256, 2**64 - 1, 1 << 56]),
                max_size=20))
def test_u64keys_are_the_keys_one_at_a_time(values):
    """Keys ending in zero bytes keep them (a byte-string view would strip them)."""
    assert u64keys(np.array(values, dtype=np.uint64)) == [u64key(v) for v in values]


PACKED_OPS = st.lists(st.tuples(st.sampled_from(["gain", "lose", "add", "drop", "pack", "check",
                                                 "roundtrip", "snapshot", "delta",
                                                 "delta_reload"]),
                                st.lists(GRAMS, max_size=5, unique=True), SOURCES), max_size=50)


@settings(max_examples=300, deadline=None)
@given(PACKED_OPS)
def test_packed_pairs_read_as_the_unpacked_ones(ops):
    """Pairs kept packed between batches (engine.source_pairs) take changes while packed
    and answer every read as a document that was never packed."""
    d, ref = DocState(100), DocState(100)
    model: dict[int, set[int]] = {}
    stored: bytes | None = None  # the snapshot a commit wrote last
    for op, grams, src in ops:
        if op in ("delta", "delta_reload"):  # a commit writes a delta beside the snapshot
            delta = d.delta_pairs() if stored is not None else None
            if delta is None:
                continue
            keys, pair_src, _ = delta
            assert set(keys.tolist()) >= set(pair_src.tolist())
            raw = encode_doc_delta(d, *delta)  # d keeps them as its overlay
            assert set(d.sources().tolist()) == set(_holdings(ref))
            if op == "delta_reload":
                d = decode_doc(stored, encode_slots(d), raw)
            assert encode_doc(d) == encode_doc(ref)
        elif op == "pack":
            held = set(_holdings(d))  # settles: a pack needs nothing pending
            d.pairs.pack(len(d.slots))
            assert set(d.sources().tolist()) == held
            assert all(d.held_before(s) == (s in held) for s in range(1, 6))
            assert d.pairs.nbytes > 0 or not held
        elif op == "check":
            assert _holdings(d) == _holdings(ref)
            assert d.weight <= ref.weight or d.pairs.nbytes == ref.pairs.nbytes
        elif op == "roundtrip":  # decoded, a snapshot's pairs come packed
            stored = encode_doc(d)
            d = decode_doc(stored, encode_slots(d))
            assert encode_doc(d) == encode_doc(ref)
        elif op == "snapshot":  # written by a commit: the same bytes, its pairs packed
            stored = encode_doc_packing(d)
            d.unsaved = set()
            assert stored == encode_doc(ref)
            ref.pairs.settled()
            assert d.pairs.nbytes <= ref.pairs.nbytes  # packed only when smaller
        else:
            _apply(ref, dict(model), op, grams, src)
            _apply(d, model, op, grams, src)
    assert _holdings(d) == _holdings(ref)
    assert encode_doc(d) == encode_doc(ref) and encode_slots(d) == encode_slots(ref)
