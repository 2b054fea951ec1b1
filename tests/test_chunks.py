"""SPEC §8's paragraph chunks, the labelled set L, contains(L, f) and bad neighbourhoods
against the reference (tests/reference.py: token tuples, exact fractions), with their
`site` events, under random orders, batchings, stop lists and labels."""

from __future__ import annotations

import dataclasses
import json
import math
import tempfile
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadtest.sharded import analysed
from streamdet.engine.chunks import Chunks, page_chunks, text_keys
from streamdet.engine.core import Engine
from streamdet.engine.grams import token_hashes
from streamdet.engine.labelled import INLINE
from streamdet.engine.params import Params
from streamdet.engine.tokens import token_spans
from streamdet.reading import views
from streamdet.reading.views import neighbourhoods_of
from streamdet.state.kv import MemoryKV
from streamdet.state.rocks import RocksKV
from streamdet.state.txn import Store

from .cli_helpers import dump_rows, streamdet, write_jsonl
from .harness import cut
from .reference import ref_badness, ref_chunks, ref_record, ref_tokenize, reference
from .strategies import WORDS, any_corpus_st

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                      HealthCheck.data_too_large])


def run(records: list[dict], params: Params, batches: list[int], *, kv=None,
        reopen: bool = False, labels: dict[int, str] | None = None
        ) -> tuple[dict[str, dict], list[dict], list[dict]]:
    """The embedded engine batch by batch (a text labelled before batch i when
    `labels[i]`, i up to the number of batches: after the last); returns the dump rows by
    URL, the neighbourhood rows of every neighbourhood, and the events."""
    kv = kv or MemoryKV()
    store, engine, events = Store(kv), Engine(params), []
    for i, batch in enumerate([*cut(records, batches), []]):
        txn = store.begin()
        if labels and i in labels:
            evs, _ = engine.label(txn, text_keys(labels[i]), "label")
            events += evs
        evs, _ = engine.process(txn, analysed(batch, params))
        events += evs
        txn.commit({})
        if reopen:
            store.close()
            store, engine = Store(kv), Engine(params)
    rows = {r["url"]: r for r in views.dump_rows(store, params)}
    hoods = neighbourhoods_of(store)
    store.close()
    return rows, hoods, events


def last_bad(events: list[dict]) -> dict[str, bool]:
    """Each neighbourhood's last `site` event: bad or not (seq rising per neighbourhood)."""
    last: dict[str, tuple[int, bool]] = {}
    for ev in events:
        if ev["event"] == "site" and ev.get("level") == "neighbourhood":
            name = ev["neighbourhood"]
            assert name not in last or ev["seq"] > last[name][0]
            last[name] = (ev["seq"], ev["bad"])
    return {n: bad for n, (_, bad) in last.items()}


def check(records, params, rows, hoods, events, stop=(), labels=()) -> None:
    expected = reference(records, params, stop, labels)
    assert set(rows) == set(expected)
    for url, want in expected.items():
        assert rows[url]["contains"] == want["contains"], (url, rows[url], want)
    want_hoods = ref_badness(expected)
    got = {h["neighbourhood"]: h for h in hoods}
    assert set(got) == set(want_hoods)
    for name, want in want_hoods.items():
        h = got[name]
        assert h["docs"] == want["docs"] and h["bad"] == want["bad"], (name, h, want)
        assert math.isclose(h["badness"], want["badness"], abs_tol=0), (name, h, want)
    order = [(-h["badness"], h["neighbourhood"].encode("utf-8")) for h in hoods]
    assert order == sorted(order)
    shown = last_bad(events)
    for name, want in want_hoods.items():
        assert shown.get(name, False) == want["bad"], name
    assert all(name in want_hoods or not bad for name, bad in shown.items())


def _label_text(draw, records: list[dict]) -> str:
    """A text to label: a few paragraphs of the corpus's pages (so that labels meet pages)
    and a line of other words."""
    docs = [d for d in map(ref_record, records) if d is not None]
    chunks = [c for d in docs for c in ref_chunks(d.lines) if len(c) >= 3]
    picked = draw(st.lists(st.sampled_from(chunks), max_size=3)) if chunks else []
    return "\n".join([*(" ".join(c) for c in picked), _lines(draw, 1)])


def _lines(draw, n: int) -> str:
    """A text of n lines of 1-5 words (some too short to be chunks)."""
    return "\n".join(" ".join(draw(st.lists(st.sampled_from(WORDS[:8]), min_size=1,
                                            max_size=5))) for _ in range(n))


LINE_WORDS = WORDS[:8] + ["中文", "ภาษาไทย"]
CHUNK_HOSTS = ["a.example.com", "b.example.com", "c.example.org"]
CHUNK_DIRS = ["/", "/x/", "/x/y/", "/z/"]


@st.composite
def chunk_corpus_st(draw) -> tuple[list[dict], Params, list[int]]:
    """Corpora made for SPEC §8's chunks: pages of a few lines from a small pool (some
    too short to be chunks), on a few hosts and directories, re-fetched often; T small."""
    pool = [" ".join(draw(st.lists(st.sampled_from(LINE_WORDS), min_size=1, max_size=5)))
            for _ in range(draw(st.integers(2, 7)))]
    urls = [f"http://{h}{d}{p}" for h in CHUNK_HOSTS for d in CHUNK_DIRS for p in ("p", "q")]
    records = []
    for _ in range(draw(st.integers(1, 24))):
        lines = draw(st.lists(st.sampled_from(pool), min_size=0, max_size=5))
        url = draw(st.sampled_from(urls))
        if draw(st.booleans()):
            records.append({"url": url, "text": "\n".join(lines) or " "})
        else:
            records.append({"url": url, "html": "".join(f"<p>{x}</p>" for x in lines)
                            or "<p> </p>"})
    params = Params(k=draw(st.sampled_from([1, 3, 5])),
                    chunk_threshold=draw(st.sampled_from([0, 2, 2, 3, 4])))
    sizes = draw(st.lists(st.integers(0, 6), max_size=len(records)))
    batches, left = [], len(records)
    for n in sizes:
        batches.append(min(n, left))
        left -= batches[-1]
    return records, params, [*batches, left]


@settings(max_examples=200, **SETTINGS)
@given(corpus=chunk_corpus_st(), reopen=st.booleans(), data=st.data())
def test_chunk_corpora_equal_the_reference(corpus, reopen, data):
    """As below, on corpora where chunks are shared, cross T, and neighbourhoods turn
    bad and stop being bad as pages are re-fetched."""
    test_contains_and_badness_equal_the_reference.hypothesis.inner_test(corpus, reopen, data)


@settings(max_examples=100, **SETTINGS)
@given(corpus=any_corpus_st(), reopen=st.booleans(), data=st.data())
def test_contains_and_badness_equal_the_reference(corpus, reopen, data):
    """Whatever the order, batching, stop list and labels (given at any point of the
    stream): every page's contains(L, f), every neighbourhood's figures, and the last
    `site` event of each neighbourhood says whether it is bad now."""
    records, params, batches = corpus
    stop_text = _lines(data.draw, data.draw(st.integers(0, 3)))
    params = dataclasses.replace(params, stop_chunks=tuple(text_keys(stop_text).tolist()),
                                 stop_list="")
    labels = {data.draw(st.integers(0, len(batches))): _label_text(data.draw, records)
              for _ in range(data.draw(st.integers(0, 2)))}
    rows, hoods, events = run(records, params, batches, reopen=reopen, labels=labels)
    labelled = [c for text in labels.values() for c in ref_chunks(text)]
    check(records, params, rows, hoods, events, ref_chunks(stop_text), labelled)


@settings(max_examples=8, **SETTINGS)
@given(corpus=any_corpus_st())
def test_a_rocksdb_state_equals_the_reference(corpus):
    records, params, batches = corpus
    with tempfile.TemporaryDirectory(prefix="streamdet-test-") as tmp:
        rows, hoods, events = run(records, params, batches, kv=RocksKV(tmp))
    check(records, params, rows, hoods, events)


BOILER = "all rights reserved by the owners"


def _page(url: str, *lines: str) -> dict:
    return {"url": url, "html": "".join(f"<p>{line}</p>" for line in lines)}


def test_a_chunk_crossing_t_and_falling_back():
    """T = 3: the boilerplate line enters L with its third page (all three holders gain
    it), leaves with a re-fetch that drops it (the two left lose it), and comes back."""
    params = Params(chunk_threshold=3)
    own = [f"page {w} has its own words" for w in ("one", "two", "three", "four")]
    records = [_page(f"http://s{i}.example/a/p", BOILER, own[i]) for i in range(3)]
    records.append(_page("http://s0.example/a/p", own[0]))  # s0 drops the boilerplate
    records.append(_page("http://s3.example/a/p", BOILER, own[3]))  # back to 3 holders
    for n, want in ((2, 0.0), (3, 0.5)):
        rows, _, _ = run(records[:n], params, [n])
        assert [r["contains"] for r in rows.values()] == [want] * n
    rows, _, _ = run(records[:4], params, [1, 1, 1, 1])
    assert {u: r["contains"] for u, r in rows.items()} == {
        "http://s0.example/a/p": 0.0, "http://s1.example/a/p": 0.0,
        "http://s2.example/a/p": 0.0}
    rows, hoods, events = run(records, params, [1, 1, 1, 1, 1])
    assert rows["http://s3.example/a/p"]["contains"] == 0.5
    assert rows["http://s1.example/a/p"]["contains"] == 0.5
    check(records, params, rows, hoods, events)


def test_a_page_moves_between_neighbourhoods():
    """A page's words re-fetched under another URL (another directory), its old URL
    re-fetched with other words: its contribution leaves one neighbourhood for the
    other, which turns bad while the first stops being bad."""
    params = Params(chunk_threshold=2)
    spam = ["cheap pills for sale today", "best casino bonus codes here", BOILER]
    clean = [f"an essay on {w} and its history" for w in ("rivers", "hills", "roads")]
    records = [_page("http://h.example/spam/1", *spam), _page("http://h.example/spam/2", *spam)]
    records += [_page(f"http://h.example/clean/{i}", c) for i, c in enumerate(clean)]
    records += [_page(f"http://h.example/misc/{i}", f"misc note {i} of the day") for i in
                range(2)]
    rows, hoods, events = run(records, params, [len(records)])
    check(records, params, rows, hoods, events)
    assert {h["neighbourhood"] for h in hoods if h["bad"]} == {"h.example/spam/"}
    moved = records + [_page("http://h.example/clean/9", *spam),
                       _page("http://h.example/clean/8", *spam),
                       _page("http://h.example/spam/1", "now a page about gardening"),
                       _page("http://h.example/spam/2", "and one about cooking pasta")]
    rows, hoods, events = run(moved, params, [len(records), 2, 2])
    check(moved, params, rows, hoods, events)
    bad = {h["neighbourhood"] for h in hoods if h["bad"]}
    assert "h.example/spam/" not in bad and "h.example/clean/" in bad
    flips = [(e["neighbourhood"], e["bad"]) for e in events if e["event"] == "site"]
    assert flips[-2:] == [("h.example/clean/", True), ("h.example/spam/", False)] or \
        set(flips[-2:]) == {("h.example/clean/", True), ("h.example/spam/", False)}


def test_stop_chunks_and_short_chunks_do_not_count():
    """A line of fewer than 3 tokens and a line in the stop list are stop chunks: out of
    both sides of contains."""
    text = "Home\nall rights reserved by us\nshared line of text here\nown words of page"
    tokens, starts, _ = token_spans(text)
    stop = text_keys("All Rights   reserved, by US")
    chunks = page_chunks(text, token_hashes(tokens), starts, stop)
    assert len(chunks) == 2 and chunks.total() == 2
    params = Params(chunk_threshold=2, stop_chunks=tuple(stop.tolist()))
    records = [{"url": f"http://s{i}.example/", "text": text.replace("own", w)}
               for i, w in enumerate(("own", "mine"))]
    rows, hoods, events = run(records, params, [2])
    assert [r["contains"] for r in rows.values()] == [0.5, 0.5]
    check(records, params, rows, hoods, events, [tuple(ref_tokenize("all rights reserved by us"))])


class CountingKV(MemoryKV):
    """A MemoryKV that counts its batched reads of the chunks table."""

    def __init__(self) -> None:
        super().__init__()
        self.chunk_reads = 0

    def get_many(self, table: str, keys: list[bytes]) -> list[bytes | None]:
        self.chunk_reads += table == "chunks"
        return super().get_many(table, keys)


def test_a_batch_reads_its_chunks_counts_once():
    """The counts of a batch's chunks are read in one batched read, not one a page: the
    pages of a batch share a site's paragraphs, and a read a page cost more than its keys."""
    lines = [f"line {i} of the shared text here" for i in range(6)]
    records = [{"url": f"http://s{i % 3}.example/{i}",
                "text": "\n".join(lines[: 3 + i % 4] + [f"page {i} has words of its own"])}
               for i in range(12)]
    params = Params(chunk_threshold=3)
    kv = CountingKV()
    rows, hoods, events = run(records, params, [12], kv=kv)
    assert kv.chunk_reads == 1
    check(records, params, rows, hoods, events)


def test_chunks_encode_and_repeat():
    """Occurrences count: a line twice on a page counts twice on both sides."""
    text = "the same line again\nthe same line again\nanother line of words"
    tokens, starts, _ = token_spans(text)
    chunks = page_chunks(text, token_hashes(tokens), starts, np.zeros(0, np.uint64))
    assert sorted(chunks.counts.tolist()) == [1, 2]
    back = Chunks.decode(chunks.encode())
    assert back.keys.tolist() == chunks.keys.tolist()
    assert back.counts.tolist() == chunks.counts.tolist()
    empty = page_chunks("a b", token_hashes(["a", "b"]), np.array([0, 2]), np.zeros(0, np.uint64))
    assert len(empty) == 0 and Chunks.decode(empty.encode()).total() == 0
    params = Params(chunk_threshold=2)
    records = [{"url": f"http://s{i}.example/", "text": text} for i in range(2)]
    rows, hoods, events = run(records, params, [1, 1])
    check(records, params, rows, hoods, events)


def test_label_chunks_stop_chunks_and_sites_cli(tmp_path):
    """`run --stop-chunks`, `label-chunks --text` and `--url`, `sites` with its
    neighbourhood lines, `dump` and `explain` with contains(L, f)."""
    spam = ["cheap pills for sale today", "best casino bonus codes here"]
    records = [_page(f"http://farm.example/blog/{i}", *spam, BOILER, f"farm page {i} words")
               for i in range(3)]
    records += [_page(f"http://ok{i % 3}.example/docs/{i}", f"an essay about topic {i} here",
                      BOILER) for i in range(6)]
    src = write_jsonl(tmp_path / "in.jsonl", records)
    stop = tmp_path / "stop.txt"
    stop.write_text(BOILER.upper() + "\n")
    state = tmp_path / "state"
    base = ("--state", state, "--chunk-threshold", "0", "--stop-chunks", stop)
    streamdet("run", "--input", src, *base, "--events", tmp_path / "ev.jsonl")
    assert {r["contains"] for r in dump_rows(state).values()} == {0.0}
    (tmp_path / "label.txt").write_text(spam[0] + "\nshort line\n")
    told = streamdet("label-chunks", "--text", tmp_path / "label.txt", "--state", state)
    assert b"1 paragraph chunks labelled" in told.stderr
    events = [json.loads(x) for x in told.stdout.splitlines()]
    assert {(e["neighbourhood"], e["bad"]) for e in events} == {
        ("farm.example/", True), ("farm.example/blog/", True)}
    assert all(e["cause"].endswith("label.txt") and e["level"] == "neighbourhood"
               for e in events)
    again = streamdet("label-chunks", "--url", "http://farm.example/blog/1", "--state", state)
    assert b"2 paragraph chunks labelled (1 of the 3 were already)" in again.stderr
    params = Params(chunk_threshold=0, stop_chunks=tuple(text_keys(BOILER).tolist()))
    stop_tuples = [tuple(ref_tokenize(BOILER))]
    labels = [tuple(ref_tokenize(x)) for x in [*spam, "farm page 1 words"]]
    expected = reference(records, params, stop_tuples, labels)
    rows = dump_rows(state)
    assert {u: r["contains"] for u, r in rows.items()} == {
        u: r["contains"] for u, r in expected.items()}
    assert rows["http://farm.example/blog/1"]["contains"] == 1.0
    lines = [json.loads(x) for x in streamdet("sites", "--state", state, "--json",
                                              "--level", "neighbourhood").stdout.splitlines()]
    want = ref_badness(expected)
    assert lines == [{"neighbourhood": n, **want[n]} for n in
                     sorted((n for n in want if want[n]["docs"] >= 2),
                            key=lambda n: (-want[n]["badness"], n))]
    bad = streamdet("sites", "--state", state, "--bad").stdout.decode()
    assert bad.splitlines()[0].split() == ["bad", "docs", "badness", "neighbourhood"]
    assert [x.split()[-1] for x in bad.splitlines()[1:]] == ["farm.example/",
                                                             "farm.example/blog/"]
    page = json.loads(streamdet("explain", "http://farm.example/blog/2", "--state", state,
                                "--json").stdout)
    assert page["chunks"] == {"in_l": 2, "counted": 3} and page["contains"] == 2 / 3
    assert [n["neighbourhood"] for n in page["neighbourhoods"] if n["bad"]] == [
        "farm.example/", "farm.example/blog/"]
    text = streamdet("explain", "http://farm.example/blog/2", "--state", state).stdout
    assert b"contains(L, f): 0.667 (2 of its 3 paragraph chunks" in text
    assert b"neighbourhood farm.example/blog/: 3 pages" in text and b"BAD" in text
    other = streamdet("run", "--input", src, "--state", state, "--chunk-threshold", "0",
                      check=False)
    assert other.returncode != 0 and b"stop_list" in other.stderr
    missing = streamdet("label-chunks", "--url", "http://nowhere.example/", "--state", state,
                        check=False)
    assert missing.returncode != 0 and b"not in this state" in missing.stderr


def test_a_state_from_before_chunks_goes_on():
    """Pages of a state upgraded from before chunks have no chunk records and no place in
    the neighbourhoods: re-fetching them, or pages sharing their paragraphs, works, and
    their contains reads as not known (null) until they are re-fetched."""
    params = Params(chunk_threshold=2)
    spam = ["cheap pills for sale today", "best casino bonus codes here"]
    old = [_page(f"http://h{i}.example/d/p", *spam) for i in range(3)]
    kv = MemoryKV()
    run(old, params, [3], kv=kv)
    for table, prefixes in (("chunks", b"dlnp"), ("sites", b"vnBg")):
        gone = [k for k, _ in kv.items(table) if k[:1] in prefixes]
        kv.write([(table, k, None) for k in gone])
    new = [_page("http://h0.example/d/p", "a page of its own now"),
           _page("http://h9.example/d/p", *spam), _page("http://h9.example/d/q", *spam)]
    rows, hoods, _ = run(new, params, [1, 2], kv=kv)
    assert rows["http://h1.example/d/p"]["contains"] is None
    assert rows["http://h0.example/d/p"]["contains"] == 0.0
    assert rows["http://h9.example/d/p"]["contains"] == 1.0
    assert {h["neighbourhood"]: h["docs"] for h in hoods} == {
        "h0.example/": 1, "h0.example/d/": 1, "h9.example/": 2, "h9.example/d/": 2}


@settings(max_examples=100, **SETTINGS)
@given(corpus=chunk_corpus_st(), shards=st.integers(1, 4), seed=st.integers(0, 2**16),
       data=st.data())
def test_labels_reach_the_shards(corpus, shards, seed, data):
    """`label-chunks --broker`: labels on the gram shards at any point of the stream,
    under crashes and rebuilds; contains and the neighbourhoods equal the reference's."""
    from .sharded import sharded_pipeline

    records, params, batches = corpus
    text = _label_text(data.draw, records)
    at = data.draw(st.integers(0, len(batches) - 1))
    sites: list[dict] = []
    hoods: list[dict] = []
    rows = sharded_pipeline(records, params, batches, shards=shards, seed=seed, sites=sites,
                            hoods=hoods, labels={at: text_keys(text)}, crash_rate=0.15,
                            wipe_rate=0.15)
    expected = reference(records, params, (), ref_chunks(text))
    assert {u: r["contains"] for u, r in rows.items()} == {
        u: r["contains"] for u, r in expected.items()}
    want = ref_badness(expected)
    assert {h["neighbourhood"]: (h["docs"], h["badness"], h["bad"]) for h in hoods} == {
        n: (w["docs"], w["badness"], w["bad"]) for n, w in want.items()}


@pytest.mark.parametrize("threshold", [0, 3, 10])
def test_chunks_past_inline_holders(threshold):
    """A chunk on more pages than its record names (engine.labelled.INLINE) keeps a key
    per holder: crossing T upward (T = 10) and downward (T = 3) after that, and a label
    (T = 0), reach every holder, those named before the spill too."""
    n = max(INLINE + 2, threshold + 2)
    records = [_page(f"http://s{i}.example/a/p", BOILER, f"own words of page {i}")
               for i in range(n)]
    records += [_page(f"http://s{i}.example/a/p", f"new words of page {i}")
                for i in range(n - 2)]  # down to 2 holders
    labels = {1: BOILER} if threshold == 0 else None
    for batches in ([n, n - 2], [1] * (2 * n - 2)):
        params = Params(chunk_threshold=threshold)
        rows, hoods, events = run(records[: len(records)], params, batches, labels=labels)
        check(records, params, rows, hoods, events,
              labels=[tuple(ref_tokenize(BOILER))] if labels else ())
        upto = n  # before the re-fetches: every holder counted
        rows, hoods, events = run(records[:upto], params, [upto], labels=labels)
        check(records[:upto], params, rows, hoods, events,
              labels=[tuple(ref_tokenize(BOILER))] if labels else ())
        assert all(r["contains"] == 0.5 for r in rows.values()), rows


def test_the_end_of_a_catch_up_tells_consumers_every_status_they_hold_wrongly():
    """A Kafka doc shard's new owner ends its catch-up by comparing every site and
    neighbourhood with what consumers hold (SiteShard.reconcile): one they hold bad that
    is not, one bad that they never saw, a monster candidate they never saw and one they
    hold that is gone each get an event; what they hold rightly gets none."""
    from streamdet.engine.site_shard import SiteShard
    from streamdet.engine.sites import site_slot

    params = Params(chunk_threshold=2, monster_pages=2, monster_pop=0.0, monster_sd=1e9)
    spam = ["cheap pills for sale today", "best casino bonus codes here", BOILER]
    records = [_page(f"http://h.example/spam/{i}", *spam) for i in range(2)]
    records += [_page(f"http://h.example/clean/{i}", f"an essay on {w} and its history")
                for i, w in enumerate(("rivers", "hills", "roads"))]
    records += [_page(f"http://h.example/misc/{i}", f"misc note {i} of the day")
                for i in range(2)]
    kv = MemoryKV()
    _, hoods, _ = run(records, params, [len(records)], kv=kv)
    assert {h["neighbourhood"] for h in hoods if h["bad"]} == {"h.example/spam/"}
    held = {site_slot("neighbourhood", "h.example/clean/"): "1",  # wrong: not bad
            site_slot("neighbourhood", "h.example/misc/"): "0",  # right
            site_slot("domain", "h.example"): "1",  # right: a candidate
            site_slot("host", "gone.example"): "1"}  # wrong: no page left
    store = Store(kv)
    txn = store.begin()
    shown = dict(held)
    events = SiteShard(params, 2).reconcile(txn, lambda last: max(last + 1, 1000), shown)
    told = {(e.get("site") or e["neighbourhood"], e["level"]): e.get("monster", e.get("bad"))
            for e in events}
    assert told == {("h.example/clean/", "neighbourhood"): False,
                    ("h.example/spam/", "neighbourhood"): True,
                    ("h.example", "host"): True, ("gone.example", "host"): False}
    assert all(e["seq"] >= 1000 for e in events)
    assert shown == held | {site_slot("neighbourhood", "h.example/clean/"): "0",
                            site_slot("neighbourhood", "h.example/spam/"): "1",
                            site_slot("host", "h.example"): "1",
                            site_slot("host", "gone.example"): "0"}
    assert SiteShard(params, 2).reconcile(txn, lambda last: last + 1, shown) == []
    store.close()


@settings(max_examples=40, **SETTINGS)
@given(corpus=chunk_corpus_st())
def test_neighbourhoods_of_two_pages_read_from_the_index_alone(corpus):
    """`sites` reads the neighbourhoods of 2 pages or more from the badness index (its
    entries hold their document counts), in order without a sort: the same rows as the
    full scan's, also from entries written before they held counts; and lazily, so that
    the first N rows taken are the first N of the list, also where a badness is crowded
    (its entries' counts looked up two at a time here)."""
    from itertools import islice

    from streamdet.engine import badness
    from streamdet.engine.badness import neighbourhood_rows, ranked_neighbourhoods

    records, params, batches = corpus
    kv = MemoryKV()
    run(records, params, batches, kv=kv)
    store = Store(kv)
    every = neighbourhood_rows(store.begin(), 1)
    want = [r for r in every if r["docs"] >= 2]
    assert neighbourhood_rows(store.begin(), 2) == want
    assert neighbourhood_rows(store.begin(), 3) == [r for r in every if r["docs"] >= 3]
    with patch.object(badness, "CROWD", 2):
        assert neighbourhood_rows(store.begin(), 2) == want
        for n in range(len(want) + 1):
            assert list(islice(ranked_neighbourhoods(store.begin(), 2), n)) == want[:n]
        for least in (1, 2, 3):  # `sites --bad`: the walk ends at the threshold
            assert list(ranked_neighbourhoods(store.begin(), least, bad=True)) == [
                r for r in every if r["bad"] and r["docs"] >= least]
    older = [("sites", k, b"\x01") for k, _ in kv.items("sites", b"B") if k[:1] == b"B"]
    kv.write(older)
    assert neighbourhood_rows(store.begin(), 2) == want
    with patch.object(badness, "CROWD", 2):
        assert neighbourhood_rows(store.begin(), 2) == want
    store.close()


@pytest.mark.parametrize("records", [
    # badness 0.5 exactly and 0.5 less a unit of the fixed point (2/3 + 1/3 rounded down)
    [{"url": "http://c.example.org/p",
      "html": "<p>alpha alpha alpha</p><p>alpha alpha alpha</p><p>alpha alpha beta</p>"},
     {"url": "http://c.example.org/z/p", "html": "<p>alpha alpha alpha</p>"},
     {"url": "http://c.example.org/z/q", "html": "<p> </p>"},
     {"url": "http://c.example.org/q",
      "html": "<p>alpha alpha alpha</p><p>alpha alpha beta</p><p>alpha alpha beta</p>"},
     {"url": "http://a.example.com/p", "html": "<p> </p>"}],
    # two that differ below the sixth decimal
    [{"url": "http://c.example.org/q", "html": "<p> </p>"},
     {"url": "http://a.example.com/q",
      "html": "<p>alpha alpha alpha</p><p>alpha alpha alpha</p><p>ภาษาไทย</p>"},
     {"url": "http://a.example.com/p", "html": "<p> </p>"},
     {"url": "http://a.example.com/p",
      "html": "<p>alpha alpha alpha</p><p>ภาษาไทย</p><p>ภาษาไทย</p>"},
     {"url": "http://c.example.org/p", "html": "<p>alpha alpha alpha</p>"}]])
def test_neighbourhoods_that_print_alike_come_by_name_from_the_scan_and_the_index(records):
    """Two neighbourhoods whose fixed-point badness differs by less than shows (6 places)
    print alike: the full scan (`sites` of one page and more) and the index (two pages
    and more) both list them by name, the index also when it reads one entry at a time."""
    from streamdet.engine import badness
    from streamdet.engine.badness import neighbourhood_rows

    kv = MemoryKV()
    run(records, Params(k=1, c=4, chunk_threshold=3), [len(records)], kv=kv)
    store = Store(kv)
    every = neighbourhood_rows(store.begin(), 1)
    order = [(-r["badness"], r["neighbourhood"].encode("utf-8")) for r in every]
    assert order == sorted(order)
    assert len({r["badness"] for r in every if r["docs"] >= 2}) < len(
        [r for r in every if r["docs"] >= 2])  # two of them print alike
    with patch.object(badness, "CROWD", 1):
        assert [r for r in every if r["docs"] >= 2] == neighbourhood_rows(store.begin(), 2)
    assert [r for r in every if r["docs"] >= 2] == neighbourhood_rows(store.begin(), 2)
    store.close()
