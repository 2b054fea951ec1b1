"""loadtest/bench_quality.py's scoring of SPEC §7 partial duplicates: the span arithmetic,
where a scrape's planted passage is, which planted relation explains a pair, and the smoke
run end to end (its "partials" figures; no timing is judged)."""

from __future__ import annotations

import json

import pytest

from loadtest import bench_quality as bq


def test_spans_merge_and_overlap():
    assert bq.merge_spans([[5, 9], [0, 3], [3, 4], [8, 12], [20, 20]]) == [[0, 4], [5, 12]]
    assert bq.span_length([[0, 4], [5, 12]]) == 11
    assert bq.overlap_length([[0, 4], [5, 12]], [[2, 6], [10, 30]]) == 2 + 1 + 2
    assert bq.overlap_length([], [[0, 5]]) == 0


TEXT = ("Site name | tagline here\nHome News\nA title\n"
        "First copied sentence is here. Second copied sentence goes on!\n"
        "Third  one has five tokens.\nFooter words are here too.")
PASSAGE = ["First copied sentence is here.", "Second copied sentence goes on!",
           "Third one has five tokens."]


def test_passage_location_spans_the_copied_sentences_token_to_token():
    spans, missing = bq.passage_location(TEXT, PASSAGE)
    start = TEXT.index("First")
    end = TEXT.index("tokens.") + len("tokens")  # the last token's end, as §7 spans it
    assert (spans, missing) == ([[start, end]], 0)  # one run: the gaps hold no token
    # a sentence that is not there is counted, the others still located
    spans, missing = bq.passage_location(TEXT, [*PASSAGE, "Not in the page at all."])
    assert (spans, missing) == ([[start, end]], 1)


def test_span_accuracy_reads_the_scrapes_side():
    (planted,), _ = bq.passage_location(TEXT, PASSAGE)
    s, e = planted
    row = {"url": "https://a.example/", "other": "https://b.example/",
           "diagonals": [{"spans": [0, 10], "other_spans": [s, e], "sentences": 3}]}
    exact = bq.span_accuracy(row, "https://b.example/", "\n".join(PASSAGE), TEXT)
    assert exact["accuracy"] == 1.0 and exact["reported"] == [[s, e]]
    # the scrape is `url` here: its spans are "spans", which cover half of the passage
    mid = (s + e) // 2
    row = {"url": "https://b.example/", "other": "https://c.example/",
           "diagonals": [{"spans": [s, mid], "other_spans": [0, 10], "sentences": 3}]}
    half = bq.span_accuracy(row, "https://b.example/", "\n".join(PASSAGE), TEXT)
    assert half["accuracy"] == pytest.approx((mid - s) / (e - s))
    assert half["precision"] == 1.0 and half["recall"] == half["accuracy"]


def u(name: str) -> str:
    """A page's URL: each name on a registered domain of its own, but `a` and `b` share
    one site (two pages of one template)."""
    if name in ("a", "b"):
        return f"https://www.site.example/{name}"
    return f"https://www.{name}.example/"


def truth() -> bq.Truth:
    return bq.Truth(quilts={u("q1"): [u("r1"), u("r2")], u("q2"): [u("r2"), u("r3")]},
                    mirrors={u("m1"): u("r1"), u("m2"): u("r4"), u("m3"): u("a")},
                    scrapes={u("s1"): {"original": u("r1"), "passage": "x"},
                             u("s2"): {"original": u("r1"), "passage": "x"},
                             u("s3"): {"original": u("r3"), "passage": "x"}})


def test_relation_names_what_explains_a_pair():
    t = truth()

    def rel(a: str, b: str) -> str | None:
        return bq.relation(u(a), u(b), t)

    assert rel("r1", "s1") == "scrape-original"
    assert rel("m1", "r1") == "mirror-original"
    assert rel("r2", "q1") == "quilt-donor"
    assert rel("s1", "s2") == "same original (scrape/scrape)"
    assert rel("m1", "s1") == "same original (mirror/scrape)"
    assert rel("q1", "q2") == "same original (quilt/quilt)"  # a shared donor
    assert rel("q2", "s3") == "same original (quilt/scrape)"
    assert rel("r1", "r4") is None  # two real pages: the truth does not know
    assert rel("s1", "r3") is None
    assert rel("m2", "r1") is None


def test_score_partials_counts_recall_precision_and_echoes():
    t = truth()
    texts = {u(n): "One two three four five. Six seven eight nine ten." for n in
             ("r1", "r3", "r4", "m2", "m3", "b", "s1", "s2", "s3", "q1")}
    texts[u("s1")] = "x"

    def pair(a: str, b: str, n: int = 1) -> dict:
        a, b = sorted((u(a), u(b)))
        return {"url": a, "other": b, "diagonals": [
            {"spans": [0, 24], "other_spans": [0, 24], "sentences": 3}] * n}

    pairs = [pair("r1", "s1"), pair("r1", "s2", 2), pair("q1", "r1"), pair("r1", "r4"),
             pair("m2", "r1"), pair("m3", "b")]
    p = bq.score_partials(pairs, t, texts.__getitem__)
    assert (p["planted_scrapes"], p["scrapes_found"]) == (3, 2)
    assert p["scrapes_missed"] == [{"url": u("s3"), "original": u("r3")}]
    assert (p["pairs"], p["explained"], p["unexplained"]) == (6, 3, 3)
    assert p["precision"] == pytest.approx(3 / 6)
    assert p["by_kind"] == {"mirror/real": 2, "quilt/real": 1, "real/real": 1,
                            "real/scrape": 2}
    assert p["unexplained_by_kind"] == {"mirror/real": 2, "real/real": 1}
    # m2 copies r4, which shares text with r1; m3 copies a, whose site b is on
    assert p["unexplained_echoes"] == 2
    assert p["diagonals_per_pair"] == pytest.approx(7 / 6)
    assert p["diagonals_per_pair_by_kind"]["real/scrape"] == 1.5
    # one example per distinct copied text
    assert len(p["unexplained_examples"]) == 1
    assert p["span_accuracy"]["pairs"] == 2


@pytest.mark.slow
def test_smoke_run_scores_the_planted_scrapes(tmp_path):
    out = tmp_path / "quality.json"
    assert bq.main(["--smoke", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    p = r["partials"]
    assert r["truth"]["scrapes"] == p["planted_scrapes"] >= 4
    assert p["params"]["gamma"] == 3
    assert p["recall"] >= 0.9
    assert p["precision"] >= 0.8
    assert p["span_accuracy"]["mean"] >= 0.95
    assert sum(p["by_kind"].values()) == p["pairs"] == p["explained"] + p["unexplained"]
    assert p["diagonals_per_pair"] >= 1
    runs = {(x["k"], x["m"]): x for x in r["engine_runs"]}
    assert runs[(5, 50)]["partial_pairs"] == p["pairs"]
    assert runs[(3, 50)]["partial_pairs"] == 0  # sentences are kept at the default k only
