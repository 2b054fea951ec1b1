"""Partial duplicates (SPEC §7): sentences, their keys, Zhang's diagonals, pair events.

The engine's pairs are checked against tests/reference.py's `ref_partials` (token tuples,
the match matrix cell by cell) over random corpora built from a pool of sentences in many
scripts, with re-fetches, random batchings, small m (keys going common, and staying so)
and every foreign mode; the events against the final pairs; and by hand:
`text[start:end]` is the copied passage.
"""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdet.engine.analysis import analyze
from streamdet.engine.core import Engine
from streamdet.engine.grams import token_hashes
from streamdet.engine.params import FOREIGN_MODES, Params, ParamsError
from streamdet.engine.records import page_from_object
from streamdet.engine.sentences import NO_KEY, split_sentences
from streamdet.engine.tokens import token_spans
from streamdet.reading.views import partial_pairs, partial_rows
from streamdet.state.kv import MemoryKV
from streamdet.state.txn import Store

from .harness import check_pair_events, cut
from .reference import ref_page_sentences, ref_partials
from .strategies import WORDS, batches_st, url_st
from .test_tokens import char_st

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                      HealthCheck.data_too_large])
ENDS = [". ", "! ", "? ", "\n", "。", "… ", "؟ ", " । ", ".", "\r\n", "\u2029"]


def run(records: list[dict], params: Params, batches: list[int] | None = None,
        events: list[dict] | None = None, reopen: bool = False) -> list[dict]:
    """The embedded engine over the records in batches; the dump --partials rows."""
    kv = MemoryKV()
    store = Store(kv)
    store.set_meta("params", params.fingerprint())
    engine = Engine(params)
    for batch in cut(records, batches or [len(records)]):
        pages = [analyze(page_from_object(r), params) for r in batch]
        txn = store.begin()
        evs, _ = engine.process(txn, pages)
        txn.commit({})
        if events is not None:
            events.extend(evs)
        if reopen:
            store, engine = Store(kv), Engine(params)
    rows = partial_rows(store, params)
    # who is paired with whom, read without the diagonals, is the same
    assert partial_pairs(store, params) == [{"url": r["url"], "other": r["other"]}
                                            for r in rows]
    return rows


# ----------------------------------------------------------------------------- sentences


def engine_sentences(text: str, m: int = 50) -> list[tuple[int, int, int]]:
    tokens, starts, ends = token_spans(text)
    s = split_sentences(text, token_hashes(tokens), starts, ends, m)
    return list(zip(s.keys.tolist(), s.starts.tolist(), s.ends.tolist(), strict=True))


piece_st = st.lists(st.one_of(st.sampled_from(WORDS), char_st), min_size=0, max_size=9)


@settings(max_examples=300, **SETTINGS)
@given(pieces=st.lists(st.tuples(piece_st, st.sampled_from(ENDS + [" ", ", ", "\u3000"])),
                       max_size=8),
       repeats=st.lists(st.integers(0, 7), max_size=12), m=st.sampled_from([1, 2, 50]))
def test_sentences_and_their_keys_equal_the_reference(pieces, repeats, m):
    """Same sentences, same spans in code points, and equal keys exactly where the token
    sequences are equal, on text in any script; runs of repeats are one sentence, and a
    key on more than m positions is NO_KEY where the reference says None (SPEC §9)."""
    pieces += [pieces[i] for i in repeats if i < len(pieces)]  # repeats, runs and not
    text = "".join(" ".join(words) + end for words, end in pieces)
    got = engine_sentences(text, m)
    want = ref_page_sentences(text, m)
    assert [(s, e) for _, s, e in got] == [(s, e) for _, s, e in want]
    for a in range(len(got)):
        assert (got[a][0] == NO_KEY) == (want[a][0] is None)
        for b in range(len(got)):
            if want[a][0] is not None:
                assert (got[a][0] == got[b][0]) == (want[a][0] == want[b][0])


def test_sentence_bounds_in_every_script():
    text = ("Zhang split pages at full stops here. 人工智能正在改变世界。"
            "हिंदी किताब पढ़ना अच्छा लगता है। short one!\nOne more line of five words")
    got = engine_sentences(text)
    assert [text[s:e] for _, s, e in got] == [
        "Zhang split pages at full stops here", "人工智能正在改变世界",
        "हिंदी किताब पढ़ना अच्छा लगता है", "One more line of five words"]


def test_a_two_million_token_sentence_is_one_key():
    """No terminator in 2 M tokens: one sentence, hashed in linear time and memory (the
    prefix sums of engine.sentences); one token changed at its end changes its key."""
    words = [f"w{i % 1000}" for i in range(2_000_000)]
    text = " ".join(words)
    one = engine_sentences(text)
    other = engine_sentences(text[:-1] + "x")
    assert len(one) == 1 and one[0][1:] == (0, len(text))
    assert one[0][0] != other[0][0]
    assert engine_sentences(text + ". " + text)[0][0] == one[0][0]


# ----------------------------------------------------------------------------- pairs

SENTENCES = [
    "the quick brown fox jumps over",
    "a press release about the merger of two firms",
    "人工智能正在改变世界",
    "हिंदी किताब पढ़ना अच्छा लगता है",
    "e\u0301te\u0301 cafe\u0301 na\u0131\u0308ve re\u0301sume\u0301 encore",
    "שלום עולם זה ספר טוב מאוד",
    "short bit here",
]


def doc(*idx: int, end: str = ". ") -> str:
    return end.join(SENTENCES[i] for i in idx) + end


def test_a_copied_passage_is_found_with_its_spans_in_both_texts():
    a = "Intro of our own words here. " + doc(0, 1, 2, 3) + "Outro text of the first site."
    b = "Totally other opening of page b. " + doc(1, 2, 3, 4)
    rows = run([{"url": "http://a.example/x", "text": a},
                {"url": "http://b.example.org/y", "text": b}], Params())
    assert len(rows) == 1
    (d,) = rows[0]["diagonals"]
    assert d["sentences"] == 3
    s, e = d["spans"]
    os_, oe = d["other_spans"]
    assert a[s:e] == b[os_:oe] == doc(1, 2, 3)[: -len(". ")]


def test_same_server_and_too_short_runs_are_not_pairs():
    recs = [{"url": "http://a.com/1", "text": doc(0, 1, 2, 3)},
            {"url": "http://www.a.com/2", "text": doc(0, 1, 2, 3)},
            {"url": "http://c.com/3", "text": doc(0, 1, 4, 2, 3)}]
    rows = run(recs, Params())
    assert rows == ref_partials(recs, Params())
    assert {(r["url"], r["other"]) for r in rows} == set()  # c: runs of 2 only
    rows = run(recs, Params(gamma=2))
    assert {(r["url"], r["other"]) for r in rows} == {
        ("http://a.com/1", "http://c.com/3"), ("http://c.com/3", "http://www.a.com/2")}
    assert run(recs, Params(foreign="none")) == ref_partials(recs, Params(foreign="none"))


def test_a_press_release_gives_one_pair_per_copy_until_it_is_common():
    """An original copied on 3 sites: one pair with each copy (and the copies with each
    other), one diagonal each. On more than m pages its sentences are common: no pairs."""
    release = doc(1, 0, 2, 3)
    recs = [{"url": f"http://site{i}.example/news", "text": f"Site {i} header words. " + release}
            for i in range(4)]
    rows = run(recs, Params(m=4))
    assert len(rows) == 6 and all(len(r["diagonals"]) == 1 for r in rows)
    assert rows == ref_partials(recs, Params(m=4))
    assert run(recs, Params(m=3)) == []


def test_a_refetch_removes_the_pair_with_partial_gone():
    a = {"url": "http://a.example/x", "text": doc(0, 1, 2, 3)}
    b = {"url": "http://b.example/y", "text": doc(0, 1, 2, 4)}
    events: list[dict] = []
    rows = run([a, b, {**b, "text": doc(5, 4)}, {**b, "text": doc(1, 2, 3)}], Params(),
               [2, 1, 1], events)
    kinds = [(e["event"], e["url"], e["other"]) for e in events]
    assert kinds == [("partial", a["url"], b["url"]), ("partial_gone", a["url"], b["url"]),
                     ("partial", a["url"], b["url"])]
    assert [e["seq"] for e in events] == [1, 2, 3]
    assert events[-1]["diagonals"] == rows[0]["diagonals"]
    assert not check_pair_events(events, rows)


@st.composite
def repeats_st(draw) -> list[int]:
    """Indexes into SENTENCES of a hostile page: runs of one sentence, alternations of a
    few, and stretches of distinct ones, each up to a few hundred long."""
    out: list[int] = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["run", "alternation", "distinct"]))
        n = draw(st.integers(1, 300))
        if kind == "run":
            out += [draw(st.integers(0, 5))] * n
        elif kind == "alternation":
            cycle = draw(st.lists(st.integers(0, 5), min_size=2, max_size=3))
            out += [cycle[i % len(cycle)] for i in range(n)]
        else:
            out += draw(st.lists(st.integers(0, 5), min_size=1, max_size=6))
    return out


@settings(max_examples=60, **SETTINGS)
@given(a=repeats_st(), b=repeats_st(), m=st.sampled_from([2, 5, 50]))
def test_a_pair_of_pages_has_at_most_m_cells_per_sentence(a, b, m):
    """SPEC §9: however a pair of pages repeats its sentences (runs, alternations), the
    match matrix has at most m cells per sentence of the smaller page, not copy against
    copy (a sentence repeated n times in both pages once gave n² cells)."""
    from streamdet.engine.diagonals import cells
    from streamdet.engine.sentence_postings import rows_of

    def sentences(idx: list[int]):
        text = doc(*idx)
        tokens, starts, ends = token_spans(text)
        return split_sentences(text, token_hashes(tokens), starts, ends, m)

    own, other = sentences(a), sentences(b)
    i, _ = cells(own.keys, rows_of(other))
    assert len(i) <= m * min(len(own), len(other))


def _sentences(idx: list[int], m: int = 50):
    text = doc(*idx)
    tokens, starts, ends = token_spans(text)
    return split_sentences(text, token_hashes(tokens), starts, ends, m)


@settings(max_examples=80, **SETTINGS)
@given(own=st.lists(st.integers(0, 5), max_size=40),
       others=st.lists(st.lists(st.integers(0, 5), max_size=40), max_size=6),
       gamma=st.sampled_from([1, 2, 3, 5]))
def test_paired_names_the_partners_with_a_diagonal(own, others, gamma):
    """`paired` (all partners at once, for readers of who is paired) names exactly the
    partners that `diagonals` (one partner at a time, for events and dumps) finds a
    diagonal of at least gamma sentences with, in the partners' order."""
    from streamdet.engine.diagonals import diagonals, paired
    from streamdet.engine.sentence_postings import rows_of

    mine = _sentences(own)
    partners = {10 + n: rows_of(_sentences(idx)) for n, idx in enumerate(others)}
    want = [p for p, rows in partners.items() if diagonals(mine, rows, gamma)]
    assert paired(mine, partners, gamma) == want


def poison_records() -> list[dict]:
    """Two pages that repeat one sentence 3,000 times, two that alternate two sentences,
    and a pair that copies three distinct sentences (the one partial duplicate)."""
    return [{"url": "http://a.example/x", "text": doc(*[0] * 3000)},
            {"url": "http://b.example/y", "text": doc(*[0] * 3000)},
            {"url": "http://c.example/x", "text": doc(*[0, 1] * 1500)},
            {"url": "http://d.example/y", "text": doc(*[1, 0] * 1500)},
            {"url": "http://e.example/z", "text": doc(2, 3, 4)},
            {"url": "http://f.example/z", "text": doc(5, 2, 3, 4)}]


def test_a_poison_pair_is_matched_once_per_run():
    """Two pages on two domains, each one sentence repeated 3,000 times, and two more that
    alternate two sentences 1,500 times: each run is one sentence, and keys on more than
    m positions of a page match nothing, so none of them is a partial duplicate (copy
    against copy, the first pair gave 5,999 diagonals and 9 M cells; at 20,000 repeats
    23 GB). A page of the same batch that copies three distinct sentences is still found."""
    records = poison_records()
    params = Params()
    events: list[dict] = []
    rows = run(records, params, events=events)
    assert rows == ref_partials(records, params)
    assert [(r["url"], r["other"]) for r in rows] == [("http://e.example/z",
                                                      "http://f.example/z")]
    assert [e["url"] for e in events if e["event"] == "partial"] == ["http://e.example/z"]


def test_a_state_refuses_another_gamma():
    p = Params(gamma=4)
    assert Params.from_fingerprint(p.fingerprint()) == p
    try:
        Params().check_same(p, "the state")
    except ParamsError as exc:
        assert "gamma=4" in str(exc)
    else:
        raise AssertionError("another gamma was accepted")
    # a state recorded before gamma existed reads as the default
    old = json.loads(Params().fingerprint())
    del old["gamma"]
    assert Params.from_fingerprint(json.dumps(old)) == Params()


@st.composite
def pair_corpus_st(draw):
    """Records built from a small pool of sentences (some shorter than 5 tokens), so that
    runs of equal sentences between pages are the rule; text or html bodies."""
    pool = [draw(st.lists(st.sampled_from(WORDS), min_size=3, max_size=7))
            for _ in range(draw(st.integers(2, 6)))]
    urls = draw(st.lists(url_st, min_size=2, max_size=6, unique=True))
    records = []
    for _ in range(draw(st.integers(1, 10))):
        idx = draw(st.lists(st.integers(0, len(pool) - 1), max_size=10))
        ends = [draw(st.sampled_from(ENDS)) for _ in idx]
        if draw(st.integers(0, 3)) == 0:
            body = "".join(f"<p>{' '.join(pool[i])}</p>" if draw(st.booleans())
                           else f"{' '.join(pool[i])}<br>" for i in idx)
            rec = {"url": draw(st.sampled_from(urls)), "html": body or "<p></p>"}
        else:
            body = "".join(" ".join(pool[i]) + e for i, e in zip(idx, ends, strict=True))
            rec = {"url": draw(st.sampled_from(urls)), "text": body or " "}
        if draw(st.integers(0, 3)) == 0:
            rec["ip"] = draw(st.sampled_from(["10.0.0.1", "10.0.0.2"]))
        records.append(rec)
    params = Params(m=draw(st.sampled_from([2, 3, 50])), gamma=draw(st.integers(1, 3)),
                    foreign=draw(st.sampled_from(FOREIGN_MODES)))
    return records, params, draw(batches_st(len(records)))


@settings(max_examples=250, **SETTINGS)
@given(corpus=pair_corpus_st(), reopen=st.booleans())
def test_pairs_and_events_equal_the_reference(corpus, reopen):
    records, params, batches = corpus
    events: list[dict] = []
    rows = run(records, params, batches, events, reopen)
    assert rows == ref_partials(records, params)
    assert not check_pair_events(events, rows)


@settings(max_examples=80, **SETTINGS)
@given(data=st.data(), corpus=pair_corpus_st())
def test_any_arrival_order_gives_the_reference_of_that_order(data, corpus):
    records, params, _ = corpus
    order = data.draw(st.permutations(records))
    batches = data.draw(batches_st(len(order)))
    assert run(order, params, batches) == ref_partials(order, params)


def test_sentences_are_kept_as_rows_of_the_state():
    """A document's sentences are one record; its partners' rows another (per document
    with the smaller URL), and the postings one per key."""
    params = Params()
    kv = MemoryKV()
    store = Store(kv)
    txn = store.begin()
    Engine(params).process(txn, [analyze(page_from_object(r), params) for r in (
        {"url": "http://a.example/x", "text": doc(0, 1, 2, 3)},
        {"url": "http://b.example/y", "text": doc(0, 1, 2)})])
    txn.commit({})
    kinds = sorted(k[:1] for k, _ in kv.items("partials"))
    assert kinds.count(b"s") == 2 and kinds.count(b"p") == 1 and kinds.count(b"u") == 1
    assert kinds.count(b"k") == len(np.unique([0, 1, 2, 3]))


def test_explain_names_the_pairs_from_both_sides():
    """`explain` lists a page's partial duplicates whichever page keeps the pair (the
    smaller URL), with the spans in its own text first."""
    from streamdet.reading.explain import explain_json, explain_text, look_up
    from streamdet.reading.views import pairs_of

    a = "Intro of our own words here. " + doc(0, 1, 2, 3)
    b = "Totally other opening of page b. " + doc(1, 2, 3, 4)
    params = Params()
    store = Store(MemoryKV())
    store.set_meta("params", params.fingerprint())
    txn = store.begin()
    Engine(params).process(txn, [analyze(page_from_object(r), params) for r in (
        {"url": "http://a.example/x", "text": a}, {"url": "http://b.example.org/y", "text": b})])
    txn.commit({})
    for url, text, other in (("http://a.example/x", a, "http://b.example.org/y"),
                             ("http://b.example.org/y", b, "http://a.example/x")):
        page = look_up(store, url)
        page.pairs = pairs_of(store, page.docno, params)
        (pair,) = page.pairs
        assert pair["other"] == other
        (d,) = pair["diagonals"]
        s, e = d["spans"]
        assert text[s:e] == doc(1, 2, 3)[: -len(". ")] and d["sentences"] == 3
        assert explain_json(page)["partials"] == page.pairs
        assert f"{other}: 3 sentences at {s}-{e}" in explain_text(page, colour=False)
