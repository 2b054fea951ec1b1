"""The review desk's view folded from events: whatever the repeats and the interleaving,
it holds each URL's newest verdict, cluster and history, and each site's newest figures
(a reference written from the definitions: the event with the highest seq)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streamdet.review.projection import HISTORY, View, apply, site_key, summary

URLS = ["http://a.example/1", "http://b.example/", "http://c.example/x/2"]


@st.composite
def event_streams(draw):
    """Per URL, events with rising seq; then repeats (SPEC §9) and any interleaving."""
    events = []
    for url in URLS:
        seq = 0
        for _ in range(draw(st.integers(0, 8))):
            seq += draw(st.integers(1, 3))
            kind = draw(st.sampled_from(["quilt", "rescore", "unquilt", "cluster", "partial"]))
            ev = {"event": kind, "url": url, "seq": seq, "at": f"t{seq}", "cause": url}
            if kind in ("quilt", "rescore"):
                ev |= {"quilted": True, "patch_fraction": seq / 10,
                       "sources": [{"url": "http://d.example/", "grams": seq}]}
            elif kind == "unquilt":
                ev |= {"quilted": False, "patch_fraction": 0.0, "sources": []}
            elif kind == "cluster":
                ev |= {"cluster": url, "cluster_size": seq, "exact_dups": 0}
            else:
                ev |= {"other": "http://e.example/"}
            events.append(ev)
    for n in range(draw(st.integers(0, 3))):
        events.append({"event": "site", "level": "neighbourhood", "neighbourhood": "a.example/",
                       "seq": n + 1, "bad": n % 2 == 0, "docs": 2, "badness": 0.5})
    repeats = draw(st.lists(st.sampled_from(events), max_size=5)) if events else []
    return draw(st.permutations(events + repeats))


@settings(max_examples=200, deadline=None)
@given(events=event_streams())
def test_the_view_holds_the_newest_of_everything(events):
    view = View()
    for ev in events:
        apply(view, ev)
    newest = {}
    for ev in events:
        key = site_key(ev) if ev["event"] == "site" else (ev["event"] in (
            "quilt", "rescore", "unquilt") and ev["url"])
        if key and (key not in newest or ev["seq"] > newest[key]["seq"]):
            newest[key] = ev
    assert view.quilts == {k: v for k, v in newest.items() if not k.startswith(
        ("neighbourhood ", "host ", "domain "))}
    assert view.sites == {k: v for k, v in newest.items() if k.startswith("neighbourhood ")}
    for url in URLS:
        own = {(e["event"], e["seq"]): e for e in events if e.get("url") == url}
        want = [summary(own[k]) for k in sorted(own, key=lambda k: (k[1], k[0]))][-HISTORY:]
        assert view.history.get(url, []) == want
        clusters = [e for e in own.values() if e["event"] == "cluster"]
        if clusters:
            top = max(clusters, key=lambda e: e["seq"])
            assert view.clusters[url]["cluster_size"] == top["cluster_size"]
        else:
            assert url not in view.clusters


def test_a_repeat_changes_nothing_and_odd_events_are_passed_over():
    view = View()
    ev = {"event": "quilt", "url": URLS[0], "seq": 5, "quilted": True, "sources": []}
    assert apply(view, ev) and not apply(view, dict(ev))
    older = {"event": "rescore", "url": URLS[0], "seq": 4, "quilted": True, "sources": []}
    assert apply(view, older)  # late: into the history, not over the newer verdict
    assert view.quilts[URLS[0]]["seq"] == 5
    assert [e["seq"] for e in view.history[URLS[0]]] == [4, 5]
    assert not apply(view, {"event": "quilt", "seq": 1})  # no URL
    assert not apply(view, {"event": "quilt", "url": URLS[1], "seq": "7"})
    assert URLS[1] not in view.quilts
