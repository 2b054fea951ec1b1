"""The streaming engine equals the brute-force reference of SPEC §1 after every stream.

Random small corpora (tests/strategies.py) are run through the engine in random batchings
and compared, URL by URL, with `tests.reference.reference` on the same records in the same
arrival order. Another pipeline (e.g. Kafka with several shards) joins these tests by
adding a `records, params, batches -> rows` callable to PIPELINES.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdet.engine.params import Params
from streamdet.state.budget import MemoryBudget

from .harness import (
    TIGHT_MEMORY,
    assert_same_rows,
    check_events,
    memory_pipeline,
    memory_reopen_pipeline,
    memory_tight_pipeline,
    recent_capacity,
    rocks_pipeline,
    rocks_reopen_pipeline,
    run_embedded,
)
from .reference import reference
from .strategies import (
    any_corpus_st,
    away_and_back_st,
    batches_st,
    corpus_st,
    large_corpus_st,
)

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                      HealthCheck.data_too_large])

def memory_nocompact_pipeline(records, params, batches):
    return run_embedded(records, params, batches, backend="memory", compact=False)


PIPELINES = {
    "memory": (memory_pipeline, 250),
    "memory-nocompact": (memory_nocompact_pipeline, 40),
    "memory-reopen": (memory_reopen_pipeline, 60),
    "memory-tight": (memory_tight_pipeline, 60),
    "rocks": (rocks_pipeline, 12),
    "rocks-reopen": (rocks_reopen_pipeline, 6),
}


def _check(pipeline, records, params, batches):
    expected = reference(records, params)
    got = pipeline(records, params, batches)
    assert_same_rows(expected, got, f"params={params} batches={batches}\nrecords={records!r}")


# New first-holder pairs stay among the recent pairs until this many gather, then become a
# segment: tiny capacities send nearly every batch through segments and their merges,
# the default keeps small corpora in the recent pairs (and their log, on reopening).
CAPACITIES = st.sampled_from([1, 8, 64, None])


def _make_test(name):
    pipeline, examples = PIPELINES[name]

    @settings(max_examples=examples, **SETTINGS)
    @given(corpus=any_corpus_st(), capacity=CAPACITIES)
    def test(corpus, capacity):
        with recent_capacity(capacity):
            _check(pipeline, *corpus)

    test.__name__ = f"test_random_corpus_{name.replace('-', '_')}"
    return test


test_random_corpus_memory = _make_test("memory")
test_random_corpus_memory_reopen = _make_test("memory-reopen")
test_random_corpus_rocks = _make_test("rocks")
test_random_corpus_rocks_reopen = _make_test("rocks-reopen")
test_random_corpus_memory_nocompact = _make_test("memory-nocompact")
test_random_corpus_memory_tight = _make_test("memory-tight")


@pytest.mark.parametrize("name, examples", [
    ("memory", 6), ("memory-reopen", 3), ("memory-nocompact", 2), ("memory-tight", 3),
    ("rocks", 3), ("rocks-reopen", 2)])
def test_large_corpus(name, examples):
    """Hundreds of fresh grams per page: multi-chunk segments, Bloom filters at scale,
    segment merges that drop withdrawn versions (with recent pairs of a few pages)."""
    pipeline = PIPELINES[name][0]

    @settings(max_examples=examples, database=None, **SETTINGS)
    @given(corpus=large_corpus_st(), capacity=st.sampled_from([256, 2048]))
    def run(corpus, capacity):
        with recent_capacity(capacity):
            _check(pipeline, *corpus)

    run()


@settings(max_examples=60, **SETTINGS)
@given(corpus=corpus_st(max_records=16, small=True, html_ok=False))
def test_overflow_heavy_small_m(corpus):
    """Many records, small k and m: grams overflow m and re-fetches withdraw versions."""
    records, params, batches = corpus
    _check(memory_pipeline, records, params, batches)


@settings(max_examples=60, **SETTINGS)
@given(data=st.data(), corpus=any_corpus_st(max_records=10))
def test_arrival_order_and_batching(data, corpus):
    """The same records in another order and another batching: each run equals the
    reference for its own order (orders may differ in re-fetch winners and sticky grams)."""
    records, params, batches = corpus
    _check(memory_pipeline, records, params, batches)
    shuffled = data.draw(st.permutations(records), label="shuffled")
    batches2 = data.draw(batches_st(len(shuffled)), label="batches2")
    _check(memory_pipeline, shuffled, params, batches2)


# The stores events are checked on (run_embedded's options): in memory, reopened after
# every batch, under a budget that folds nearly every document, and RocksDB.
EVENT_STORES = {
    "memory": {},
    "memory-reopen": {"reopen": True},
    "memory-tight": {"budget": MemoryBudget(TIGHT_MEMORY)},
    "rocks": {"backend": "rocks"},
}


@settings(max_examples=80, **SETTINGS)
@given(corpus=any_corpus_st(), data=st.data())
def test_events_tell_the_final_state(corpus, data):
    """SPEC §3 from a consumer's side (harness.check_events): per URL, seq strictly
    increases and each event's kind is the change it shows (quilt and unquilt alternate,
    rescore only while quilted); keeping the newest event per URL gives the final quilted
    set and covers. Pages are also re-fetched as another page and back again, and the
    stream is cut as drawn or one page a batch (`streamdet run --batch 1`), on each store."""
    records, params, _ = corpus
    records = records + data.draw(away_and_back_st(records), label="away and back")
    batches = data.draw(st.one_of(st.just([1] * len(records)), batches_st(len(records))),
                        label="batches")
    store = data.draw(st.sampled_from(sorted(EVENT_STORES)), label="store")
    events: list[dict] = []
    run_embedded(records, params, batches, events=events, **EVENT_STORES[store])
    problems = check_events(events, reference(records, params))
    assert not problems, (f"store={store} params={params} batches={batches}\n"
                          f"records={records!r}\n" + "\n".join(problems))


# ----------------------------------------------------------------------------- by hand


def _docs(*pairs, ip=None):
    out = []
    for url, text in pairs:
        rec = {"url": url, "text": text}
        if ip is not None:
            rec["ip"] = ip
        out.append(rec)
    return out


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_classic_quilt_defaults(name):
    """Default parameters: a page stitched from 4 foreign pages is quilted; they are not."""
    srcs = [" ".join(f"w{i}x{j}" for j in range(10)) for i in range(4)]
    records = _docs(
        ("http://s0.org/a", srcs[0]), ("http://s1.org/a", srcs[1]),
        ("http://s2.org/a", srcs[2]), ("http://s3.org/a", srcs[3]),
        ("http://quilt.com/", " . ".join(srcs)),
    )
    params = Params()
    expected = reference(records, params)
    q = expected["http://quilt.com/"]
    # 4 x 6 shared grams + 3 x 4 grams across the joins = 36 grams, 24 patch grams
    assert (q["n_grams"], q["n_patch_grams"], q["quilted"]) == (36, 24, True)
    # SPEC §5: each source's share of the 24 patch grams, and the passage it covers (the
    # sources are 49 characters each, joined by " . ")
    assert q["sources"] == [{"url": f"http://s{i}.org/a", "grams": 6, "share": 0.25,
                             "spans": [[52 * i, 52 * i + 49]]} for i in range(4)]
    assert not expected["http://s0.org/a"]["quilted"]  # a single source
    pipeline = PIPELINES[name][0]
    for batches in ([5], [1, 1, 1, 1, 1], [2, 3]):
        assert_same_rows(expected, pipeline(records, params, batches))
        assert_same_rows(expected, pipeline(records[::-1], params, batches))


def test_sticky_common_after_refetch():
    """SPEC's documented exception: a gram that had more than m documents stays common
    after a re-fetch brings it back to m."""
    params = Params(k=2, m=2, c=1, theta=0.5)
    records = _docs(("http://a.org/", "p q"), ("http://b.org/", "p q"),
                    ("http://c.org/", "p q"),  # "p q" now has 3 > m documents
                    ("http://c.org/", "r s"))  # back to 2 documents, stays common
    expected = reference(records, params)
    assert expected["http://a.org/"]["n_patch_grams"] == 0
    assert_same_rows(expected, memory_pipeline(records, params, [4]))
    assert_same_rows(expected, memory_pipeline(records, params, [1, 1, 1, 1]))
    # without the overflow, the same final corpus has the gram as a patch gram
    direct = _docs(("http://a.org/", "p q"), ("http://b.org/", "p q"), ("http://c.org/", "r s"))
    assert reference(direct, params)["http://a.org/"]["sources"] == [
        {"url": "http://b.org/", "grams": 1, "share": 1.0, "spans": [[0, 3]]}]
    assert_same_rows(reference(direct, params), memory_pipeline(direct, params, [3]))


def test_refetch_same_batch_and_server_change_ip_mode():
    """A URL re-fetched within one batch, from another ip (its server changes)."""
    params = Params(k=2, m=4, c=1, theta=0.5, foreign="ip")
    records = [
        {"url": "http://a.org/1", "text": "x y z", "ip": "10.0.0.1"},
        {"url": "http://b.org/1", "text": "x y z", "ip": "10.0.0.1"},
        {"url": "http://b.org/1", "text": "x y z w", "ip": "10.0.0.2"},
    ]
    expected = reference(records, params)
    assert expected["http://a.org/1"]["sources"] == [
        {"url": "http://b.org/1", "grams": 2, "share": 1.0, "spans": [[0, 5]]}]
    for batches in ([3], [1, 2], [2, 1], [1, 1, 1]):
        assert_same_rows(expected, memory_pipeline(records, params, batches))


def _batchings(n: int):
    """Every way to cut n records into consecutive non-empty batches."""
    for cuts in itertools.product((False, True), repeat=n - 1):
        sizes, size = [], 1
        for cut_here in cuts:
            if cut_here:
                sizes.append(size)
                size = 0
            size += 1
        yield sizes + [size]


def quilt_away_and_back() -> tuple[list[dict], Params]:
    """A quilt of 4 sources (its 5th record), re-fetched as an original page (6th) and as
    itself again (7th), then a copy of one source (8th); default parameters."""
    srcs = [" ".join(f"w{i}x{j}" for j in range(10)) for i in range(4)]
    quilt = ("http://quilt.com/", " . ".join(srcs))
    records = _docs(*((f"http://s{i}.org/a", t) for i, t in enumerate(srcs)), quilt,
                    ("http://quilt.com/", " ".join(f"own{j}" for j in range(30))), quilt,
                    ("http://s4.org/a", srcs[0]))
    return records, Params()


def test_quilt_refetched_away_and_back_in_every_batching():
    """A quilt re-fetched as an original page and then as itself again (as a crawler
    finds it changed and changed back): in every batching, per URL seq strictly increases
    and the events follow the state (harness.check_events); the quilt's own events are
    quilt, then unquilt and quilt again exactly when batches end between the quilt and
    the first re-fetch and between the two re-fetches. One page a batch (`streamdet run
    --batch 1`) on every store."""
    records, params = quilt_away_and_back()
    expected = reference(records, params)
    assert expected["http://quilt.com/"]["quilted"]
    runs = [(sizes, {}) for sizes in _batchings(len(records))]
    runs += [([1] * len(records), options) for options in EVENT_STORES.values()]
    for sizes, options in runs:
        events: list[dict] = []
        run_embedded(records, params, sizes, events=events, **options)
        context = f"batches={sizes} {options}"
        problems = check_events(events, expected)
        assert not problems, context + "\n" + "\n".join(problems)
        ends = set(itertools.accumulate(sizes))
        apart = {5, 6} <= ends  # batches end after the quilt (5th record) and the 6th
        kinds = [e["event"] for e in events
                 if e["url"] == "http://quilt.com/" and e["event"] != "rescore"]
        want = ["quilt", "unquilt", "quilt"] if apart else ["quilt"]
        assert kinds == want, context


def test_same_site_is_not_a_source():
    """foreign=domain: hosts of one registered domain are one server; blogspot sites are
    separate servers (PSL private section)."""
    params = Params(k=2, m=10, c=1, theta=0.5)
    t = "one two three"
    records = _docs(("http://a.example.com/", t), ("http://b.example.com/", t),
                    ("http://foo.blogspot.com/", t), ("http://bar.blogspot.com/", t))
    expected = reference(records, params)
    assert [s["url"] for s in expected["http://a.example.com/"]["sources"]] == [
        "http://bar.blogspot.com/"]  # tie on everything: smallest URL; b.example.com excluded
    assert [s["url"] for s in expected["http://foo.blogspot.com/"]["sources"]] == [
        "http://a.example.com/"]
    assert_same_rows(expected, memory_pipeline(records, params, [4]))
