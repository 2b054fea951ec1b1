"""Evidence (SPEC §5): each cover source's share of the patch grams and the spans of the
page's visible text it newly covered, in code points; φ; the kept text.

The engine's spans are checked against tests/reference.py's (windows of tokens with
offsets, one character at a time) over random corpora in many scripts, and by hand:
`text[start:end]` is the copied passage, whatever the script.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdet.engine.analysis import analyze
from streamdet.engine.core import Engine
from streamdet.engine.evidence import merged
from streamdet.engine.params import Params, ParamsError
from streamdet.engine.records import page_from_object
from streamdet.engine.text import pack_text, unpack_text
from streamdet.reading.explain import explain_json, look_up, marked, owners
from streamdet.reading.views import dump_rows
from streamdet.state.kv import MemoryKV
from streamdet.state.txn import Store

from .harness import assert_same_rows, memory_pipeline
from .reference import reference
from .test_tokens import char_st

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                      HealthCheck.data_too_large])

# Passages in several scripts, each with its own words: CJK, Thai, Devanagari and Latin
# with combining marks, Hebrew and Arabic (right to left), emoji between words.
PASSAGES = {
    "http://zh.example.org/": "人工智能正在改变世界的每一个角落和行业",
    "http://th.example.org/": "ภาษาไทยเป็นภาษาที่ไม่มีการเว้นวรรคระหว่างคำ",
    "http://hi.example.org/": "हिंदी किताब पढ़ना अच्छा लगता है मुझे बहुत",
    "http://fr.example.org/": "e\u0301te\u0301 cafe\u0301 na\u0131\u0308ve re\u0301sume\u0301 "
                              "de\u0301ja\u0300 vu encore",
    "http://he.example.org/": "שלום עולם זה ספר טוב מאוד",
    "http://ar.example.org/": "مرحبا \U0001f600 بكم في هذا المكان الجميل",
}


def _run(records: list[dict], params: Params) -> Store:
    store = Store(MemoryKV())
    store.set_meta("params", params.fingerprint())
    txn = store.begin()
    Engine(params).process(txn, [analyze(page_from_object(r), params) for r in records])
    txn.commit({})
    return store


def test_each_source_spans_exactly_its_passage_in_every_script():
    """A page stitched from six passages in six scripts, joined by a separator of its
    own: each source's one span is its passage, character for character."""
    params = Params(k=3, m=50, c=6, theta=0.5)
    sep = " \U0001f30d | "
    quilt = sep.join(PASSAGES.values())
    records = [{"url": u, "text": t} for u, t in PASSAGES.items()]
    records.append({"url": "http://quilt.example.com/", "text": quilt})
    rows = {r["url"]: r for r in dump_rows(_run(records, params), params)}
    row = rows["http://quilt.example.com/"]
    assert row["quilted"]
    assert sorted(s["url"] for s in row["sources"]) == sorted(PASSAGES)
    for s in row["sources"]:
        [(a, b)] = s["spans"]
        assert quilt[a:b] == PASSAGES[s["url"]], s["url"]
        assert s["share"] == s["grams"] / row["n_patch_grams"]
    assert_same_rows(reference(records, params), rows)


def test_overlapping_and_touching_ranges_merge():
    starts, ends = [0, 2, 5, 9, 9], [3, 5, 7, 10, 12]
    assert merged(np.array(starts), np.array(ends)) == [[0, 7], [9, 12]]
    assert merged(np.array([], dtype=np.int64), np.array([], dtype=np.int64)) == []


passage_st = st.text(alphabet=char_st, min_size=1, max_size=30)


@settings(max_examples=150, **SETTINGS)
@given(sources=st.lists(passage_st, min_size=1, max_size=4),
       own=st.lists(passage_st, max_size=3), seps=st.lists(passage_st, min_size=4, max_size=8),
       k=st.integers(1, 4), refetch=st.booleans())
def test_spans_equal_the_reference_on_any_text(sources, own, seps, k, refetch):
    """Pages copied from random passages of any script (marks, segmented scripts, astral
    letters, casefold specials) into another page with separators and text of its own:
    the engine's shares and spans equal the reference's, and each span holds tokens."""
    params = Params(k=k, m=50, c=1, theta=0.0)
    records = [{"url": f"http://s{i}.example.net/", "text": t} for i, t in enumerate(sources)]
    parts = sources + own
    page = "".join(p + seps[i % len(seps)] for i, p in enumerate(parts))
    records.append({"url": "http://page.example.com/", "text": page or " "})
    if refetch:  # a re-fetched source: the old version's text goes with it
        records.append({"url": "http://s0.example.net/", "text": sources[0] + " again"})
    expected = reference(records, params)
    got = memory_pipeline(records, params, [len(records)])
    assert_same_rows(expected, got)
    for s in got["http://page.example.com/"]["sources"]:
        for a, b in s["spans"]:
            assert 0 <= a < b <= len(page)


def test_phi_drops_small_sources_from_the_count():
    """SPEC §5: with φ, a source counts toward c only with grams >= φ·|pgrams|; the cover
    itself is unchanged."""
    big = [" ".join(f"b{i}w{j}" for j in range(12)) for i in range(2)]
    small = " ".join(f"sw{j}" for j in range(3))
    records = [{"url": "http://big0.org/", "text": big[0]}, {"url": "http://big1.org/",
               "text": big[1]}, {"url": "http://small.org/", "text": small},
               {"url": "http://q.com/", "text": " . ".join([*big, small])}]
    for phi, quilted in ((0.0, True), (0.1, False)):
        params = Params(k=2, m=50, c=3, theta=0.5, phi=phi)
        rows = {r["url"]: r for r in dump_rows(_run(records, params), params)}
        q = rows["http://q.com/"]
        assert [s["grams"] for s in q["sources"]] == [11, 11, 2]
        assert q["quilted"] is quilted  # 2/24 < 0.1: the small source does not count
        assert_same_rows(reference(records, params), rows)


def test_a_state_refuses_another_phi():
    with pytest.raises(ParamsError, match="phi=0.0 \\(asked 0.2\\)"):
        Params(phi=0.2).check_same(Params(), "this state directory")
    with pytest.raises(ParamsError, match="phi must be within"):
        Params(phi=1.5)


def test_the_text_is_kept_and_goes_with_its_version():
    params = Params(k=2, m=50, c=1, theta=0.0)
    text = "Straße \u05e9\u05dc\u05d5\u05dd 中文 \U0001f600 e\u0301te\u0301"
    assert unpack_text(pack_text(text)) == text and unpack_text(b"") is None
    records = [{"url": "http://a.org/", "html": f"<p>{text}</p><script>x()</script>"},
               {"url": "http://b.org/", "text": "old words here"},
               {"url": "http://b.org/", "text": "new words here"}]
    store = _run(records, params)
    a, b = look_up(store, "http://a.org/"), look_up(store, "http://b.org/")
    assert a.text.split() == text.split()  # the visible text: no script, block spaces
    assert b.text == "new words here"
    assert len(list(store.kv.items("texts"))) == 2  # the replaced version's text is gone


def test_a_document_stored_without_its_text_has_no_spans():
    """A state written before texts were kept: its documents show their sources and
    shares, and spans null; `explain` says the text was not kept."""
    params = Params(k=2, m=50, c=1, theta=0.0)
    records = [{"url": "http://a.org/", "text": "one two three"},
               {"url": "http://b.org/", "text": "one two three four"}]
    store = _run(records, params)
    store.kv.write([("texts", key, None) for key, _ in list(store.kv.items("texts"))])
    [row, _] = dump_rows(store, params)
    assert row["sources"] == [{"url": "http://b.org/", "grams": 2, "share": 1.0,
                               "spans": None}]
    page = look_up(store, "http://a.org/")
    assert page.text is None and explain_json(page)["sources"][0]["spans"] is None


def test_explain_marks_each_sources_passages():
    text = "aa bb cc dd"
    sources = [{"spans": [[0, 5]]}, {"spans": [[3, 8]]}, {"spans": None}]
    assert owners(text, sources)[:9] == [1, 1, 1, 1, 1, 2, 2, 2, 0]
    assert marked(text, sources, colour=False) == "[1>aa bb<1][2> cc<2] dd"
    assert marked(text, sources, colour=True).count("\x1b[0m") == 2


def test_spans_are_located_in_the_first_part_of_a_huge_page(monkeypatch):
    """Past EVIDENCE_MAX_CHARS code points a page's spans are not looked for (the scan
    runs on the engine thread for each of its events); its shares stay exact, and a word
    the cut shortens is not taken for another."""
    from streamdet.engine import evidence as ev

    params = Params(k=2, m=50, c=1, theta=0.0)
    records = [{"url": "http://a.org/", "text": "one two alpha"},
               {"url": "http://b.org/", "text": "three four"},
               {"url": "http://q.com/", "text": "one two alphabet xx three four"}]
    full = {r["url"]: r for r in dump_rows(_run(records, params), params)}
    assert [s["spans"] for s in full["http://q.com/"]["sources"]] == [[[0, 7]], [[20, 30]]]
    monkeypatch.setattr(ev, "EVIDENCE_MAX_CHARS", 13)  # "one two alpha|bet ..."
    cut = {r["url"]: r for r in dump_rows(_run(records, params), params)}["http://q.com/"]
    assert [s["spans"] for s in cut["sources"]] == [[[0, 7]], []]
    assert [s["share"] for s in cut["sources"]] == [s["share"] for s in full[
        "http://q.com/"]["sources"]]


def test_the_windows_cache_answers_as_the_text_does_within_its_budget():
    from streamdet.engine.evidence import WindowsCache, text_windows
    from streamdet.engine.text import pack_text

    texts = [f"page {i} " + " ".join(f"w{j % (i + 3)}" for j in range(200)) for i in range(12)]
    cache = WindowsCache(budget=40_000)
    for _ in range(2):
        for t in texts:
            got, want = cache.get(pack_text(t), 3), text_windows(t, 3)
            assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
            assert 0 < cache.bytes <= 40_000
    assert cache.get(b"", 3) is None
    big = " ".join(f"x{j}" for j in range(5000))  # more than a quarter of the budget
    before = cache.bytes
    assert len(cache.get(pack_text(big), 3)[0]) == 4998 and cache.bytes == before
