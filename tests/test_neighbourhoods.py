"""URL-prefix neighbourhoods and crawler traps (SPEC §8): the engine's reading of a URL's
path against tests/reference.py's (RFC 3986's dot-segment algorithm as written, on the
path with its slashes collapsed and its unreserved escapes decoded), over random paths of
escapes, dot segments, doubled slashes, queries and scripts; and by hand."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streamdet.engine.neighbourhoods import MAX_DEPTH, neighbourhoods, path_segments, trap_segment

from .harness import assert_same_rows, run_embedded
from .reference import ref_is_trap, ref_neighbourhoods, ref_path, ref_record, reference
from .strategies import corpus_st

PIECES = ["a", "b", "A", "%41", "%61", "%2F", "%2f", "%2e", "%2E%2E", ".", "..", "", "x%20y",
          "é", "%7E", "~", "%zz", "p.html", "..a", ".b", "%252F", "日本"]

path_st = st.lists(st.sampled_from(PIECES), max_size=12).map(lambda s: "/" + "/".join(s))
url_st = st.builds(lambda host, path, tail: f"http://{host}{path}{tail}",
                   st.sampled_from(["h.example", "H.Example.", "u:p@h.example:8080"]),
                   path_st, st.sampled_from(["", "?q=/a/a/a", "#/x/x/x", "?a=1#b"]))


def is_trap(url: str) -> bool:
    return trap_segment(url) is not None


@settings(max_examples=800, deadline=None)
@given(url=url_st)
def test_paths_neighbourhoods_and_traps_equal_the_reference(url):
    assert path_segments(url) == ref_path(url)
    assert neighbourhoods(url) == ref_neighbourhoods(url, MAX_DEPTH)
    assert is_trap(url) == ref_is_trap(url)


def test_by_hand():
    assert neighbourhoods("http://h/a/b/p.html") == ["h/", "h/a/", "h/a/b/"]  # SPEC §8
    assert neighbourhoods("http://H.example:81/a/b/") == ["h.example/", "h.example/a/",
                                                          "h.example/a/b/"]
    assert neighbourhoods("http://h/a//b/./c/../p?x=/y/z") == ["h/", "h/a/", "h/a/b/"]
    assert neighbourhoods("http://h/a%2Fb/p") == ["h/", "h/a%2Fb/"]  # %2F: not a separator
    assert neighbourhoods("http://h/%7Euser/p") == ["h/", "h/~user/"]
    assert neighbourhoods("http://h/../../p") == ["h/"]  # never above the root
    assert path_segments("http://h/a/%2e%2E/b") == (["b"], False)
    assert is_trap("http://h/cal/2020/cal/2020/cal/2020/") and is_trap("http://h/a/a/a")
    assert not is_trap("http://h/a/a/b") and not is_trap("http://h/a/b/c?x=/a/a/a")
    assert is_trap("http://h/a/%61/A%2F/a")  # %61 is a
    deep = "http://h/" + "/".join(f"d{i}" for i in range(1000)) + "/p"
    assert len(neighbourhoods(deep)) == MAX_DEPTH + 1 and not is_trap(deep)


TRAP_URLS = ["http://h1.example/a/a/a", "https://h2.example/x/y/x/%78/p.html",
             "http://h1.example/cal/./cal/2024/../cal/"]


@settings(max_examples=60, deadline=None)
@given(corpus=corpus_st(), at=st.lists(st.tuples(st.integers(0, 20),
                                                  st.sampled_from(TRAP_URLS)), max_size=4))
def test_traps_are_turned_away_with_an_event_and_the_state_is_the_rest(corpus, at):
    """SPEC §8: a trap's page enters no state (the rows are the reference's for the other
    records, whatever the batching) and gets one `trap` event, in arrival order."""
    records, params, batches = corpus
    records = list(records)
    for i, url in at:
        records.insert(min(i, len(records)), dict(records[min(i, len(records) - 1)], url=url))
    events: list[dict] = []
    rows = run_embedded(records, params, [*batches, len(at)], events=events)
    assert_same_rows(reference(records, params), rows)
    traps = [e for e in events if e["event"] == "trap"]
    want = [r["url"] for r in records if r.get("url") in TRAP_URLS  # and valid otherwise
            and ref_record(dict(r, url="http://valid.example/p")) is not None]
    assert sorted(e["url"] for e in traps) == sorted(want)
    assert all(e["repeats"] == 3 and e["seq"] == 0 and e["cause"] == e["url"] for e in traps)
    assert not {e.get("url") for e in events if e["event"] != "trap"} & set(TRAP_URLS)
    assert all(ref_record(dict(html="<p>x</p>", url=u)) is None for u in TRAP_URLS)


def test_the_repeated_segment_is_named():
    from streamdet.engine.events import trap_event
    from streamdet.engine.params import Params

    ev = trap_event("https://h2.example/x/y/x/%78/p.html?x=x", Params())
    assert (ev["event"], ev["segment"], ev["repeats"]) == ("trap", "x", 3)
    assert trap_event("http://h.example/a/b/a/c.html", Params()) is None
