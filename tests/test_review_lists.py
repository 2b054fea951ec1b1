"""The desk's lists against references written from what they promise (filters, newest
first, flagged first, largest first), and the page text's pieces against the spans."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from streamdet.review.highlight import pieces
from streamdet.review.labels import Label
from streamdet.review.lists import (
    LABEL_STATES,
    ORDERS,
    QUILT_STATES,
    SPAM_STATES,
    QuiltFilter,
    cluster_rows,
    quilt_rows,
    site_rows,
)

URLS = ["http://a.example.com/1", "http://b.example.com/", "http://a.other.org/x/2",
        "http://www.other.org/", "http://c.example.com/y"]


@st.composite
def desks(draw):
    quilts, labels, clusters = {}, {}, {}
    for url in URLS:
        if draw(st.booleans()):
            kind = draw(st.sampled_from(["quilt", "rescore", "unquilt"]))
            quilts[url] = {"event": kind, "url": url, "seq": draw(st.integers(1, 3)),
                           "at": draw(st.sampled_from(["t1", "t2", "t3"])),
                           "patch_fraction": 0.5, "sources": [], "params": {"k": 5}}
        if draw(st.booleans()):
            labels[url] = Label(url, draw(st.sampled_from(["spam", "not_spam", "unsure"])),
                                "ann", "t")
        if draw(st.booleans()):
            clusters[url] = {"seq": 1, "cluster": draw(st.sampled_from(URLS[:2])),
                             "cluster_size": draw(st.integers(1, 3))}
    return quilts, labels, clusters


def _kept(ev, label, cluster, f: QuiltFilter) -> bool:
    """The filter, written out from its fields."""
    from streamdet.engine.servers import host_of, registered_domain

    url = ev["url"]
    state = "unquilted" if ev["event"] == "unquilt" else "quilted"
    verdict = label.verdict if label else "unlabelled"
    return ((f.state in ("all", state))
            and (f.label == "any" or f.label == verdict
                 or (f.label == "labelled" and label is not None))
            and (not f.site or host_of(url) == f.site)
            and (not f.domain or registered_domain(host_of(url)) == f.domain)
            and (not f.cluster or (cluster or {}).get("cluster") == f.cluster))


@settings(max_examples=300, deadline=None)
@given(desk=desks(), label=st.sampled_from(LABEL_STATES), state=st.sampled_from(QUILT_STATES),
       site=st.sampled_from(["", "a.example.com", "www.other.org"]),
       domain=st.sampled_from(["", "example.com", "other.org"]),
       cluster=st.sampled_from(["", *URLS[:2]]), offset=st.integers(0, 3),
       limit=st.integers(1, 4))
def test_quilt_rows_are_the_filtered_quilts_newest_first(desk, label, state, site, domain,
                                                           cluster, offset, limit):
    quilts, labels, clusters = desk
    f = QuiltFilter(domain=domain, site=site, cluster=cluster, label=label, state=state,
                    order="newest")
    want = sorted((ev for url, ev in quilts.items()
                   if _kept(ev, labels.get(url), clusters.get(url), f)),
                  key=lambda e: (e["at"], e["seq"], e["url"]), reverse=True)
    rows, total = quilt_rows(quilts, labels, clusters, f, offset, limit)
    assert total == len(want)
    assert [r["url"] for r in rows] == [e["url"] for e in want[offset : offset + limit]]
    for r in rows:
        lab = labels.get(r["url"])
        assert r["label"] == (None if lab is None else {"verdict": lab.verdict, "who": "ann",
                                                        "at": "t"})


@settings(max_examples=300, deadline=None)
@given(desk=desks(), scores=st.lists(st.sampled_from([None, 0.0, 0.2, 0.5, 0.9, 1.0]),
                                     min_size=len(URLS), max_size=len(URLS)),
       spam=st.sampled_from(SPAM_STATES), order=st.sampled_from(ORDERS))
def test_quilt_rows_by_spam_score_with_the_spam_filter(desk, scores, spam, order):
    """Default order: highest spam_score first (none last), equal ones newest first; the
    spam filter keeps scores at or past 0.5 (spam) or below it (not_spam)."""
    quilts, labels, clusters = desk
    for url, score in zip(URLS, scores, strict=True):
        if url in quilts and score is not None:
            quilts[url] = {**quilts[url], "spam_score": score}
    f = QuiltFilter(state="all", spam=spam, order=order)
    assert QuiltFilter().order == "score" and QuiltFilter().spam == "all"

    def kept(ev) -> bool:
        score = ev.get("spam_score")
        return spam == "all" or score is not None and (score >= 0.5) == (spam == "spam")

    newest = sorted(filter(kept, quilts.values()), key=lambda e: (e["at"], e["seq"], e["url"]),
                    reverse=True)
    want = newest if order == "newest" else [
        e for s in sorted({e.get("spam_score", -1) for e in newest}, reverse=True)
        for e in newest if e.get("spam_score", -1) == s]
    rows, total = quilt_rows(quilts, labels, clusters, f, 0, 10)
    assert total == len(want)
    assert [(r["url"], r["spam_score"]) for r in rows] == [
        (e["url"], e.get("spam_score")) for e in want]


def test_sites_flagged_first_and_clusters_largest_first():
    sites = {
        "host a": {"level": "host", "site": "a", "monster": False, "pop_mean": 50.0, "seq": 2},
        "host b": {"level": "host", "site": "b", "monster": True, "pop_mean": 31.0, "seq": 1},
        "domain c": {"level": "domain", "site": "c", "monster": True, "pop_mean": 40.0,
                     "seq": 1},
        "neighbourhood x/": {"level": "neighbourhood", "neighbourhood": "x/", "bad": False,
                             "badness": 0.9, "docs": 3, "seq": 2},
        "neighbourhood y/": {"level": "neighbourhood", "neighbourhood": "y/", "bad": True,
                             "badness": 0.4, "docs": 2, "seq": 1},
    }
    out = site_rows(sites)
    assert [r["site"] for r in out["sites"]] == ["c", "b", "a"]
    assert [r["neighbourhood"] for r in out["neighbourhoods"]] == ["y/", "x/"]
    clusters = {"u1": {"cluster": "u1", "cluster_size": 3}, "u2": {"cluster": "u1",
                                                                   "cluster_size": 3},
                "u3": {"cluster": "u1", "cluster_size": 3}, "v1": {"cluster": "v1",
                                                                   "cluster_size": 2},
                "v2": {"cluster": "v1", "cluster_size": 2}, "w": {"cluster": "w",
                                                                  "cluster_size": 1}}
    assert cluster_rows(clusters) == [{"cluster": "u1", "size": 3, "urls": ["u1", "u2", "u3"]},
                                      {"cluster": "v1", "size": 2, "urls": ["v1", "v2"]}]


spans_st = st.lists(st.lists(st.tuples(st.integers(-2, 30), st.integers(0, 32)).map(
    lambda t: [min(t), max(t)]), max_size=4), max_size=4)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=25), spans=spans_st)
def test_pieces_cover_the_text_and_mark_exactly_each_span(text, spans):
    """The pieces spell the text; the code points marked (s, i) are span i of source s cut
    to the text, and no other."""
    got = pieces(text, spans)
    assert "".join(p.text for p in got) == text
    marked: dict[tuple[int, int], set[int]] = {}
    at = 0
    for p in got:
        for mark in p.marks:
            marked.setdefault(mark, set()).update(range(at, at + len(p.text)))
        at += len(p.text)
    want = {(s, i): set(range(max(a, 0), min(b, len(text))))
            for s, ranges in enumerate(spans) for i, (a, b) in enumerate(ranges)}
    assert marked == {k: v for k, v in want.items() if v}


def test_the_style_sheet_colours_every_source_class():
    """Marks take class src<i % COLOURS>: the style sheet defines each of them."""
    from pathlib import Path

    from streamdet.review import highlight

    css = (Path(highlight.__file__).parent / "static" / "desk.css").read_text()
    assert sorted(int(i) for i in re.findall(r"^\.src(\d+) \{ background", css, re.M)) == list(
        range(highlight.COLOURS))
