"""SPEC §8's site statistics and monster candidates against the reference, with their
`site` events, and `streamdet sites`."""

from __future__ import annotations

import json
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdet.engine.params import Params
from streamdet.engine.sites import FIXED_ONE, LEVELS, Contribution, Totals

from .cli_helpers import streamdet, write_jsonl
from .harness import run_embedded
from .reference import ref_sites, reference
from .strategies import any_corpus_st

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                      HealthCheck.data_too_large])


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def assert_same_sites(got: list[dict], expected: dict[tuple[str, str], dict]) -> None:
    """`sites` rows equal the reference's figures (floats to 1e-9: the patch fractions
    are summed in units of 2^-32), and come in their order."""
    by_site = {(r["site"], r["level"]): r for r in got}
    assert len(by_site) == len(got), "a site listed twice (kept under both of its keys)"
    assert set(by_site) == set(expected)
    for site, want in expected.items():
        row = by_site[site]
        for key in ("pages", "quilted", "monster"):
            assert row[key] == want[key], (site, key, row, want)
        for key in ("pop_mean", "pop_sd", "patch_mean"):
            assert _close(row[key], want[key]), (site, key, row, want)
    order = [(not r["monster"], -r["pop_mean"], r["site"].encode("utf-8"), r["level"])
             for r in got]
    assert order == sorted(order)


def _last_shown(events: list[dict]) -> dict[tuple[str, str], bool]:
    """Each host's and domain's last `site` event: monster or not (neighbourhoods' events
    are tests/test_chunks.py's)."""
    last: dict[tuple[str, str], tuple[int, bool]] = {}
    for ev in events:
        if ev["event"] == "site" and ev["level"] != "neighbourhood":
            key = (ev["site"], ev["level"])
            assert key not in last or ev["seq"] > last[key][0]
            last[key] = (ev["seq"], ev["monster"])
    return {k: shown for k, (_, shown) in last.items()}


@settings(max_examples=120, **SETTINGS)
@given(corpus=any_corpus_st(), how=st.sampled_from([{}, {"reopen": True}, {"compact": False}]))
def test_sites_equal_the_reference_and_events_tell_monsters(corpus, how):
    """Whatever the order and batching, and with the state reopened after every batch:
    every host's and domain's figures, and the `site` events' last word per site is
    whether it is a monster candidate now (no event: it never was)."""
    records, params, batches = corpus
    sites: list[dict] = []
    events: list[dict] = []
    run_embedded(records, params, batches, sites=sites, events=events, **how)
    expected = ref_sites(reference(records, params), params)
    assert_same_sites(sites, expected)
    shown = _last_shown(events)
    for site, want in expected.items():
        assert shown.get(site, False) == want["monster"], site
    assert all(site in expected or not monster for site, monster in shown.items())


@settings(max_examples=6, **SETTINGS)
@given(corpus=any_corpus_st())
def test_sites_of_a_rocksdb_state_equal_the_reference(corpus):
    records, params, batches = corpus
    sites: list[dict] = []
    run_embedded(records, params, batches, backend="rocks", reopen=True, sites=sites)
    assert_same_sites(sites, ref_sites(reference(records, params), params))


def _farm(n: int, host: str) -> list[dict]:
    phrase = " ".join(f"w{i}" for i in range(40))
    return [{"url": f"http://{host}/p{i}", "text": f"{phrase} page {i}"} for i in range(n)]


def copied_farm() -> tuple[list[dict], str]:
    """Ten farm pages, each a phrase of its own (36 5-grams), then four copies of each
    phrase on another site, phrase by phrase: each phrase turns popular (5 pages) at its
    fourth copy, raising its farm page's pop(d) from 0 to 36. The farm is a monster
    once nine of them are (mean 32.4, σ 10.8): at the fourth copy of phrase 8, whose
    URL is returned."""
    def phrase(i: int) -> str:
        return " ".join(f"f{i}w{n}" for n in range(40))
    farm = [{"url": f"http://farm.example.com/p{i}", "text": phrase(i)} for i in range(10)]
    copies = [{"url": f"http://copy.example.net/c{i}-{j}", "text": phrase(i)}
              for i in range(10) for j in range(4)]
    return farm + copies, "http://copy.example.net/c8-3"


def test_a_site_made_a_monster_by_pages_elsewhere_names_the_page_that_made_it():
    """The farm's pages came long before; the `site` event names the copy whose arrival
    made the farm a monster (SPEC §3: the record whose arrival produced the event)."""
    params = Params()
    records, cause = copied_farm()
    events: list[dict] = []
    sites: list[dict] = []
    run_embedded(records, params, [10] + [1] * 40, events=events, sites=sites)
    assert_same_sites(sites, ref_sites(reference(records, params), params))
    [ev] = [e for e in events if e["event"] == "site" and e.get("site") == "farm.example.com"]
    assert (ev["monster"], ev["pages"], ev["cause"]) == (True, 10, cause)


def test_a_farm_becomes_a_monster_and_stops_being_one():
    """A host of 10 pages sharing 37 popular 5-grams (mean pop 37, σ 0) is a monster
    candidate; re-fetched as different pages, it stops being one; the events say so."""
    params = Params()
    records = _farm(10, "farm.example.com")
    events: list[dict] = []
    sites: list[dict] = []
    run_embedded(records, params, [3, 7], events=events, sites=sites)
    expected = ref_sites(reference(records, params), params)
    assert expected[("farm.example.com", "host")]["monster"]
    assert_same_sites(sites, expected)
    [ev] = [e for e in events if e["event"] == "site" and e["level"] == "host"]
    assert (ev["site"], ev["monster"], ev["pages"], ev["pop_mean"], ev["seq"]) == (
        "farm.example.com", True, 10, 37.0, 1)
    assert ev["cause"] == "http://farm.example.com/p9"
    changed = records + [{"url": f"http://farm.example.com/p{i}", "text": f"own words {i} x y z"}
                         for i in range(5)]
    events, sites = [], []
    run_embedded(changed, params, [10, 5], events=events, sites=sites)
    assert_same_sites(sites, ref_sites(reference(changed, params), params))
    host = [(e["seq"], e["monster"]) for e in events
            if e["event"] == "site" and e["level"] == "host"]
    assert host == [(1, True), (2, False)]


def test_totals_are_exact_integers():
    t = Totals()
    cs = [Contribution.of("http://a.org/x", pop, n, 3, q)
          for pop, n, q in ((30, 1, True), (44, 2, False), (31, 3, False))]
    for c in cs:
        t.add(c, 1)
    t.add(cs[1], -1)
    back = Totals.decode(t.encode())
    assert (back.pages, back.pop, back.pop2, back.quilted) == (2, 61, 30 * 30 + 31 * 31, 1)
    assert back.fraction == FIXED_ONE // 3 + FIXED_ONE
    assert back.monster(Params(monster_pages=2, monster_pop=30.5, monster_sd=0.51))
    assert not back.monster(Params(monster_pages=2, monster_pop=30.5, monster_sd=0.5))


SITES = ("--level", "host", "--level", "domain")  # no neighbourhood lines (tests/test_chunks)


def test_sites_cli(tmp_path):
    records = _farm(12, "farm.example.com") + [
        {"url": "http://blog.other.org/a", "text": "nothing in common with anyone"}]
    src = write_jsonl(tmp_path / "in.jsonl", records)
    state = tmp_path / "state"
    streamdet("run", "--input", src, "--state", state, "--events", tmp_path / "ev.jsonl")
    out = streamdet("sites", "--state", state, "--json", "--min-pages", "1", *SITES).stdout
    rows = [json.loads(x) for x in out.splitlines()]
    params = Params()
    assert_same_sites(rows, ref_sites(reference(records, params), params))
    assert rows[0] == {"site": "example.com", "level": "domain", "pages": 12, "pop_mean": 37.0,
                       "pop_sd": 0.0, "patch_mean": rows[0]["patch_mean"], "quilted": 0,
                       "monster": True}
    text = streamdet("sites", "--state", state).stdout.decode()
    assert "farm.example.com" in text and "monster" in text
    few = streamdet("sites", "--state", state, "--json", *SITES).stdout  # --min-pages 2
    assert [json.loads(x) for x in few.splitlines()] == [r for r in rows if r["pages"] >= 2]
    assert len(few.splitlines()) == 2 < len(rows)
    top = streamdet("sites", "--state", state, "--json", "--monsters", "--top", "1",
                    *SITES).stdout
    assert [json.loads(x) for x in top.splitlines()] == rows[:1]
    page = json.loads(streamdet("explain", "http://farm.example.com/p3", "--state", state,
                                "--json").stdout)
    assert [(s["site"], s["level"], s["pages"], s["monster"]) for s in page["sites"]] == [
        ("farm.example.com", "host", 12, True), ("example.com", "domain", 12, True)]
    told = streamdet("explain", "http://farm.example.com/p3", "--state", state).stdout
    assert b"host farm.example.com: 12 pages, pop mean 37.0 sd 0.0" in told
    assert b"a MONSTER candidate" in told
    events = [json.loads(x) for x in (tmp_path / "ev.jsonl").read_text().splitlines()]
    assert {(e["site"], e["monster"]) for e in events
            if e["event"] == "site" and e["level"] != "neighbourhood"} == {
        ("farm.example.com", True), ("example.com", True)}


def test_a_reader_opens_only_the_tables_it_reads(tmp_path):
    """`sites` opens a state's meta and sites tables alone (each table's files are opened
    with it); the others read as empty, and a writer cannot open part of a state."""
    import pytest

    from streamdet.state.rocks import RocksKV

    kv = RocksKV(str(tmp_path / "s"))
    kv.write([("meta", b"m", b"1"), ("sites", b"hx", b"2"), ("docs", b"d", b"3")])
    kv.close()
    part = RocksKV(str(tmp_path / "s"), read_only=True, tables=("meta", "sites"))
    try:
        assert part.get("meta", b"m") == b"1" and part.get("sites", b"hx") == b"2"
        assert part.get("docs", b"d") is None and list(part.items("docs")) == []
    finally:
        part.close()
    with pytest.raises(ValueError):
        RocksKV(str(tmp_path / "s"), tables=("meta",))


totals_st = st.dictionaries(
    st.tuples(st.sampled_from([b"h", b"d", b"H", b"D"]),
              st.sampled_from(["a.x", "b.x", "c.y", "a.x.y", "é.x", "z"])),
    st.tuples(st.integers(0, 4), st.lists(st.integers(-2, 3), min_size=1, max_size=4)),
    max_size=14)


@settings(max_examples=200, **SETTINGS)
@given(totals=totals_st, min_pages=st.integers(0, 3),
       levels=st.sampled_from([None, {"host"}, {"domain"}, {"host", "domain"}]),
       monsters=st.booleans(), top=st.one_of(st.none(), st.integers(0, 5)))
def test_sites_selected_before_their_rows_are_built_equal_the_filtered_list(
        totals, min_pages, levels, monsters, top):
    """`sites --level/--monsters/--top` select on the sort keys before building rows: the
    same rows as filtering and cutting the whole list (which tests above check against
    the reference)."""
    from streamdet.engine.sites import site_rows

    params = Params(monster_pages=2, monster_pop=1.0, monster_sd=0.5)
    items = []
    for (prefix, name), (pages, pops) in sorted(totals.items()):
        t = Totals()
        for pop in (pops * pages)[:pages]:
            t.add(Contribution(pop, 0, False, name, name), 1)
        items.append((prefix + name.encode(), t.encode()))
    every = site_rows(items, params, min_pages)
    # the order written out: monsters first, mean pop (most first), name, level
    reference = sorted(((not t.monster(params), -t.pop / t.pages, k[1:], LEVELS[k[:1]]), k, t)
                       for k, t in ((k, Totals.decode(raw)) for k, raw in items)
                       if t.pages >= max(min_pages, 1))
    assert every == [{"site": k[1:].decode(), "level": LEVELS[k[:1]], **t.figures(params)}
                     for _, k, t in reference]
    want = [r for r in every if (levels is None or r["level"] in levels)
            and (r["monster"] or not monsters)][:top]
    assert site_rows(items, params, min_pages, levels=levels, monsters=monsters,
                     top=top) == want
