"""The greedy cover's rule and tie-breaks (SPEC §1 "cover"), computed by hand.

Each case is a document's patch grams (small ints) and the patch grams each foreign
candidate holds. It is checked three ways: the engine's `greedy_cover` on (source, slot)
pairs, the reference's `ref_cover` on sets, and end to end through the engine with k=1
(each gram a word) on pages built so that their patch grams are exactly the case's sets.
The incremental checks (first_change) write a document's sources as bitmasks for brevity.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdet.engine.analysis import analyze
from streamdet.engine.core import Engine
from streamdet.engine.cover import first_change, greedy_cover
from streamdet.engine.params import Params
from streamdet.engine.records import page_from_object
from streamdet.reading.views import dump_rows
from streamdet.state.kv import MemoryKV
from streamdet.state.txn import Store

from .harness import assert_same_rows, memory_pipeline
from .reference import ref_cover, reference

# (name, patch grams of d, {candidate URL: grams it holds}, expected [(url, newly covered)])
CASES = [
    (
        "most newly covered first; a source adding nothing new is left out",
        {1, 2, 3, 4, 5, 6},
        {"http://a.org/": {1, 2, 3, 4}, "http://b.org/": {1, 2, 3},
         "http://c.org/": {5}, "http://d.org/": {5, 6}},
        [("http://a.org/", 4), ("http://d.org/", 2)],
    ),
    (
        "equal new grams: the one holding more patch grams overall wins",
        {1, 2, 3, 4, 5, 6},
        {"http://a.org/": {1, 2, 3, 4}, "http://y.org/": {1, 2, 5},
         "http://b.org/": {6}, "http://c.org/": {5}},
        # after a: y, b and c each add 1; y holds 3 overall -> y; then b (6); c adds nothing
        [("http://a.org/", 4), ("http://y.org/", 1), ("http://b.org/", 1)],
    ),
    (
        "overall count breaks the tie even on the first pick",
        {1, 2, 3, 4},
        {"http://a.org/": {1, 2}, "http://z.org/": {3, 4}, "http://m.org/": {1, 2}},
        # all gain 2 and hold 2: smallest URL a, then z (m adds nothing new)
        [("http://a.org/", 2), ("http://z.org/", 2)],
    ),
    (
        "equal new and overall: smallest URL by code point (upper case before lower)",
        {1, 2},
        {"http://b.org/": {1, 2}, "http://a.org/": {1, 2}, "http://B.org/": {1, 2}},
        [("http://B.org/", 2)],
    ),
    (
        "code-point order, not locale order: z before a-umlaut",
        {1, 2},
        {"http://\u00e4.org/": {1}, "http://z.org/": {1}, "http://x.org/": {2}},
        [("http://x.org/", 1), ("http://z.org/", 1)],
    ),
    (
        "patch grams nobody foreign holds stay uncovered; the cover stops",
        {1, 2, 3, 4},
        {"http://a.org/": {1}},
        [("http://a.org/", 1)],
    ),
    (
        "newly covered counts, not holdings",
        {1, 2, 3, 4, 5},
        {"http://a.org/": {1, 2, 3}, "http://b.org/": {2, 3, 4}, "http://c.org/": {3, 4, 5}},
        # a (3, ties with b and c on 3/3; smallest URL); then c adds {4,5} = 2, b adds {4} = 1
        [("http://a.org/", 3), ("http://c.org/", 2)],
    ),
    (
        "no candidates",
        {1, 2},
        {},
        [],
    ),
]


def pairs(masks: dict[int, int], n_slots: int = 64) -> tuple[tuple, int]:
    """A document's (source, slot) pairs, sorted, from a bitmask per source."""
    rows = sorted((s, i) for s, m in masks.items() for i in range(n_slots) if m >> i & 1)
    src = np.asarray([s for s, _ in rows], dtype=np.uint64)
    return (src, np.asarray([i for _, i in rows], dtype=np.int32)), n_slots


def cover_of(masks: dict[int, int], url_of, prefix=()) -> list[tuple[int, int]]:
    return greedy_cover(*pairs(masks), url_of, prefix)


@pytest.mark.parametrize("name, patch, cands, expected", CASES, ids=[c[0] for c in CASES])
def test_engine_greedy_cover(name, patch, cands, expected):
    urls = sorted(cands, reverse=True)  # source ids not in URL order
    bit = {g: 1 << i for i, g in enumerate(sorted(patch))}
    masks = {}
    for sid, u in enumerate(urls):
        mask = 0
        for g in cands[u]:
            mask |= bit[g]
        if mask:
            masks[sid] = mask
    got = cover_of(masks, lambda s: urls[s])
    assert [(urls[s], n) for s, n in got] == expected


@settings(max_examples=200, deadline=None)
@given(holdings=st.lists(st.sets(st.integers(0, 60), max_size=12), max_size=40),
       names=st.lists(st.sampled_from("abc"), min_size=40, max_size=40))
def test_engine_greedy_cover_equals_the_reference_with_many_sources_and_ties(holdings, names):
    """Many sources, most of them tied on gain and total (few URLs' letters), against the
    reference's cover on sets."""
    urls = [f"http://{names[i]}{i}.org/" for i in range(len(holdings))]
    patch = frozenset().union(*holdings) if holdings else frozenset()
    want = ref_cover(patch, {u: frozenset(h) for u, h in zip(urls, holdings, strict=False)})
    masks = {i: sum(1 << g for g in h) for i, h in enumerate(holdings) if h}
    got = cover_of(masks, urls.__getitem__)
    assert [(urls[s], n) for s, n in got] == want


@pytest.mark.parametrize("name, patch, cands, expected", CASES, ids=[c[0] for c in CASES])
def test_reference_cover(name, patch, cands, expected):
    assert ref_cover(frozenset(patch), {u: frozenset(g) for u, g in cands.items()}) == expected


@settings(max_examples=100, deadline=None)
@given(pages=st.integers(2, 30), block=st.integers(1, 6), extra=st.lists(
    st.sets(st.integers(0, 400), max_size=30), max_size=20))
def test_the_greedy_work_is_linear_in_the_pairs(pages, block, extra):
    """SPEC §9: heap pops, slots visited and gains lowered stay within sources + 3 pairs,
    for the shape where every pick lowers every other source's gain (each pair of `pages`
    sources shares a block of its own) and for random holdings beside it."""
    from streamdet.engine.greedy import cover_steps

    held: dict[int, set[int]] = {i: set() for i in range(pages + len(extra))}
    slot = 0
    for i in range(pages):
        for j in range(i + 1, pages):
            for _ in range(block):
                held[i].add(slot)
                held[j].add(slot)
                slot += 1
    for k, h in enumerate(extra):
        held[pages + k] = {slot + x for x in h}
    rows = sorted((s, x) for s, xs in held.items() for x in xs)
    src = np.asarray([s for s, _ in rows], dtype=np.int32)
    slots = np.asarray([x for _, x in rows], dtype=np.int32)
    n_slots = int(slots.max(initial=0)) + 1
    rank = np.arange(len(held), dtype=np.int64)
    picks, gains, _, work = cover_steps(src, slots, len(held), n_slots, rank,
                                        np.zeros(0, np.int32), True)
    assert int(gains.sum()) == len(set(slots.tolist()))  # every held slot covered once
    assert work <= len(held) + 3 * len(rows)


def test_astral_urls_sort_by_code_point():
    """U+FFFF < U+10000 in code points (UTF-16 order would put the astral one first)."""
    cands = {"http://h/\U00010000": {1}, "http://h/\uffff": {1}}
    assert ref_cover(frozenset({1}), {u: frozenset(g) for u, g in cands.items()}) == [
        ("http://h/\uffff", 1)]
    urls = list(cands)
    assert [(urls[s], n) for s, n in cover_of({0: 1, 1: 1}, lambda s: urls[s])] == [
        ("http://h/\uffff", 1)]


def _word(g: int) -> str:
    return f"g{g}"


@pytest.mark.parametrize("name, patch, cands, expected", CASES, ids=[c[0] for c in CASES])
def test_cover_end_to_end(name, patch, cands, expected):
    """d holds its patch grams plus one word of its own; each candidate page holds its
    grams; one extra page on d's own server holds every patch gram so that each one has
    at least two documents but it can never be a source (same registered domain)."""
    params = Params(k=1, m=50, c=len(expected), theta=0.5, foreign="domain")
    d = "http://www.d.com/"
    records = [{"url": d, "text": " ".join(map(_word, sorted(patch))) + " own"}]
    records += [{"url": u, "text": " ".join(map(_word, sorted(g)))} for u, g in cands.items()]
    records.append({"url": "http://blog.d.com/", "text": " ".join(map(_word, sorted(patch)))})
    rows = reference(records, params)
    row = rows[d]
    assert row["n_grams"] == len(patch) + 1
    assert row["n_patch_grams"] == len(patch)
    assert [(s["url"], s["grams"]) for s in row["sources"]] == expected
    assert row["quilted"]
    for batches in ([len(records)], [1] * len(records)):
        assert_same_rows(rows, memory_pipeline(records, params, batches))
        assert_same_rows(rows, memory_pipeline(records[::-1], params, batches))


def test_same_server_excluded_unless_host_mode():
    """A same-site page holding everything is no source under foreign=domain, and is
    the first source under foreign=host; under foreign=none every other page counts."""
    records = [
        {"url": "http://www.d.com/", "text": "g1 g2 g3 g4"},
        {"url": "http://blog.d.com/", "text": "g1 g2 g3 g4"},
        {"url": "http://a.org/", "text": "g1 g2"},
        {"url": "http://b.org/", "text": "g3"},
    ]
    expect = {
        "domain": [("http://a.org/", 2), ("http://b.org/", 1)],
        "host": [("http://blog.d.com/", 4)],
        "none": [("http://blog.d.com/", 4)],
        "ip": [("http://blog.d.com/", 4)],  # no ip field: the host name
    }
    for foreign, sources in expect.items():
        params = Params(k=1, m=50, c=1, theta=0.5, foreign=foreign)
        rows = reference(records, params)
        assert [(s["url"], s["grams"]) for s in rows["http://www.d.com/"]["sources"]] == sources
        assert_same_rows(rows, memory_pipeline(records, params, [4]))


URLS = st.sampled_from([f"http://{c}.org/" for c in "abcdefgh"])
MASKS = st.dictionaries(st.integers(1, 8), st.integers(1, 2**10 - 1), max_size=6)


def given_new_sources(test):
    """Old masks, new sources (some holding new grams), URLs: for the incremental checks."""
    return settings(max_examples=500, deadline=None)(given(
        old=MASKS, new=MASKS, fresh_bits=st.integers(0, 3),
        url_of=st.dictionaries(st.integers(1, 16), URLS, min_size=16, max_size=16))(test))


@given_new_sources
def test_first_change_tells_exactly_whether_new_sources_change_the_cover(
        old, new, url_of, fresh_bits):
    """first_change's "nothing changes" (None) equals running the greedy again, when the
    only changes are new sources (which may hold new patch grams no earlier source holds)."""
    new = {s + 8: m | (((1 << fresh_bits) - 1) << 10 if m & 1 else 0) for s, m in new.items()}
    cover = cover_of(old, url_of.__getitem__)
    after = {**old, **new}
    verdict = first_change(*pairs(after), cover, [url_of[s] for s, _ in cover],
                           [(s, url_of[s]) for s in new]) is None
    assert verdict == (cover_of(after, url_of.__getitem__) == cover)


@given_new_sources
def test_greedy_resumed_after_the_steps_new_sources_cannot_change_is_the_greedy(
        old, new, url_of, fresh_bits):
    """first_change says how many steps of the old cover stand; the greedy resumed after
    them equals the greedy run from scratch."""
    new = {s + 8: m | (((1 << fresh_bits) - 1) << 10 if m & 1 else 0) for s, m in new.items()}
    cover = cover_of(old, url_of.__getitem__)
    after = {**old, **new}
    kept = first_change(*pairs(after), cover, [url_of[s] for s, _ in cover],
                        [(s, url_of[s]) for s in new])
    fresh = cover_of(after, url_of.__getitem__)
    if kept is None:
        assert fresh == cover
    else:
        assert fresh[:kept] == cover[:kept]
        # ... and no more: the greedy's step `kept` differs, or the old cover had ended
        assert fresh[kept] != cover[kept] if kept < len(cover) else len(fresh) > kept
        assert cover_of(after, url_of.__getitem__, cover[:kept]) == fresh


def _engine_run(records: list[dict], params: Params) -> tuple[Store, list[dict]]:
    """Each record a batch of its own through the embedded engine: the store and events."""
    store, engine, events = Store(MemoryKV()), Engine(params), []
    for rec in records:
        txn = store.begin()
        evs, _ = engine.process(txn, [analyze(page_from_object(rec), params)])
        txn.commit({})
        events.extend(evs)
    return store, events


def _stored_result(store: Store, url: str):
    txn = store.begin()
    return txn.doc(txn.url_entry(url)[0]).result


def test_below_theta_the_cover_is_left_stale_and_computed_when_read():
    """d (4 of 7 grams shared) is quilted with cover a, b; a re-fetch of b takes g4 away:
    3/7 < theta. The unquilt event shows the exact cover of that moment; a re-fetch of a
    then re-scores d below theta without computing its cover (stored stale), and dump
    computes it when read: the definition's cover all the same."""
    params = Params(k=1, m=50, c=2, theta=0.5)
    d, a, b = "http://d.com/", "http://a.org/", "http://b.org/"
    records = [{"url": d, "text": "g1 g2 g3 g4 own1 own2 own3"},
               {"url": a, "text": "g1 g2"}, {"url": b, "text": "g3 g4"},
               {"url": b, "text": "g3 x"}, {"url": a, "text": "g1 y"}]
    store, events = _engine_run(records, params)
    mine = [(e["event"], [(s["url"], s["grams"]) for s in e["sources"]])
            for e in events if e["url"] == d]
    assert mine == [("quilt", [(a, 2), (b, 2)]), ("unquilt", [(a, 2), (b, 1)])]
    stored = _stored_result(store, d)
    assert stored.stale and stored.sources == () and not stored.quilted
    expected = reference(records, params)
    assert expected[d]["sources"] == [{"url": a, "grams": 1, "share": 0.5, "spans": [[0, 2]]},
                                      {"url": b, "grams": 1, "share": 0.5, "spans": [[6, 8]]}]
    assert_same_rows(expected, {r["url"]: r for r in dump_rows(store, params)})


def test_a_stale_cover_is_computed_in_full_once_the_document_reaches_theta():
    """d is below theta with sources a and b (stale: 3 of 7 shared), then a page on its
    own server lifts it to theta without bringing a source. Its cover is the full greedy
    (a, b), not the stale one "kept" because no source was added; the quilt event shows
    it."""
    params = Params(k=1, m=50, c=2, theta=0.5)
    d, a, b = "http://d.com/", "http://a.org/", "http://b.org/"
    records = [{"url": d, "text": "g1 g2 g3 g4 own1 own2 own3"},
               {"url": a, "text": "g1 g2"}, {"url": b, "text": "g3"},
               {"url": "http://blog.d.com/", "text": "g4 own1"}]
    store, events = _engine_run(records[:3], params)
    assert _stored_result(store, d).stale
    store, events = _engine_run(records, params)
    expected = reference(records, params)
    assert expected[d]["quilted"]
    # k = 1: each occurrence is one token, and the space between two is no overlap
    assert expected[d]["sources"] == [
        {"url": a, "grams": 2, "share": 0.4, "spans": [[0, 2], [3, 5]]},
        {"url": b, "grams": 1, "share": 0.2, "spans": [[6, 8]]}]
    assert [(e["event"], e["sources"]) for e in events if e["url"] == d] == [
        ("quilt", expected[d]["sources"])]
    assert_same_rows(expected, {r["url"]: r for r in dump_rows(store, params)})


def test_a_refetch_that_unquilts_shows_the_new_versions_exact_cover():
    """The last result shown for d's URL was quilted; its new version is below theta, so
    its unquilt event must carry a computed cover, not a stale one."""
    params = Params(k=1, m=50, c=2, theta=0.5)
    d, a, b = "http://d.com/", "http://a.org/", "http://b.org/"
    records = [{"url": a, "text": "g1 g2"}, {"url": b, "text": "g3 g4"},
               {"url": d, "text": "g1 g2 g3 g4 own1 own2 own3"},
               {"url": d, "text": "g1 g3 own1 own2 own3 own4 own5"}]
    _store, events = _engine_run(records, params)
    expected = reference(records, params)
    assert not expected[d]["quilted"]
    assert [(e["event"], e["sources"]) for e in events if e["url"] == d] == [
        ("quilt", [{"url": a, "grams": 2, "share": 0.5, "spans": [[0, 2], [3, 5]]},
                   {"url": b, "grams": 2, "share": 0.5, "spans": [[6, 8], [9, 11]]}]),
        ("unquilt", expected[d]["sources"])]
    assert expected[d]["sources"] == [{"url": a, "grams": 1, "share": 0.5, "spans": [[0, 2]]},
                                      {"url": b, "grams": 1, "share": 0.5, "spans": [[3, 5]]}]
