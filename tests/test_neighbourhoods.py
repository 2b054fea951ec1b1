"""URL-prefix neighbourhoods and crawler traps (SPEC §8): the engine's reading of a URL's
path against tests/reference.py's (RFC 3986's dot-segment algorithm as written, on the
path with its slashes collapsed and its unreserved escapes decoded), over random paths of
escapes, dot segments, doubled slashes, queries and scripts; and by hand."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streamdet.engine.neighbourhoods import MAX_DEPTH, is_trap, neighbourhoods, path_segments

from .reference import ref_is_trap, ref_neighbourhoods, ref_path

PIECES = ["a", "b", "A", "%41", "%61", "%2F", "%2f", "%2e", "%2E%2E", ".", "..", "", "x%20y",
          "é", "%7E", "~", "%zz", "p.html", "..a", ".b", "%252F", "日本"]

path_st = st.lists(st.sampled_from(PIECES), max_size=12).map(lambda s: "/" + "/".join(s))
url_st = st.builds(lambda host, path, tail: f"http://{host}{path}{tail}",
                   st.sampled_from(["h.example", "H.Example.", "u:p@h.example:8080"]),
                   path_st, st.sampled_from(["", "?q=/a/a/a", "#/x/x/x", "?a=1#b"]))


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
