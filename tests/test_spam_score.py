"""`spam_score` on quilt and rescore events (SPEC §10): the score of the state the event's
batch leaves, by the signals `streamdet rank` uses and the model `streamdet label`
stored; a page's own label decides its own score. Runs of one batch each, so that every
event of a run is made on the state `rank` then reads."""

from __future__ import annotations

import json

import pytest

from streamdet.engine.pair_index import partners_of
from streamdet.engine.spam_model import blind, stored_model
from streamdet.ranking.features import signals
from streamdet.ranking.rank import model_of
from streamdet.ranking.reading import corpus_of
from streamdet.reading.states import open_store

from .cli_helpers import build_crawl, read_jsonl, streamdet, write_jsonl

ONE_BATCH = "100000"  # records per batch: more than any run here
FIRST = 52  # build_crawl's first records: its pages and quilts, before re-fetches and copies


def run(d, name: str, records: list[dict], batch: str = ONE_BATCH) -> list[dict]:
    """Run `records` into d/state; its quilt and rescore events."""
    path = write_jsonl(d / f"{name}.jsonl", records)
    streamdet("run", "--input", path, "--state", d / "state", "--events", d / f"{name}-ev.jsonl",
              "--batch", batch)
    return [e for e in read_jsonl(d / f"{name}-ev.jsonl") if e["event"] in ("quilt", "rescore")]


def rank(d, *args) -> dict[str, float]:
    out = streamdet("rank", "--state", d / "state", "--json", *args).stdout
    return {r["url"]: r["score"] for r in map(json.loads, out.splitlines())}


def read_state(d):
    """The state's corpus (as `rank` reads it), its pair index of every live page, and
    the model it stores."""
    store = open_store(str(d / "state"), must_exist=True, read_only=True)
    try:
        corpus = corpus_of(store)
        urls = sorted(corpus.rows)
        txn = store.begin()
        index = dict(zip(urls, partners_of(txn.partials, urls), strict=True))
        return corpus, index, stored_model(txn.chunks)
    finally:
        store.close()


@pytest.fixture(scope="module")
def crawl():
    records = build_crawl(seed=5, n_pages=40, n_quilts=12)
    return records[:FIRST], records[FIRST:]


def test_events_score_pages_as_rank_does_on_the_state_they_leave(crawl, tmp_path):
    for name, part in zip(("one", "two"), crawl, strict=True):
        events = run(tmp_path, name, part)
        ranked = rank(tmp_path)
        assert events, name
        assert {e["url"]: e["spam_score"] for e in events} == {
            e["url"]: ranked[e["url"]] for e in events}
        corpus, index, model = read_state(tmp_path)
        assert model == blind()
        # the partners both sides see: the pairs `dump --partials` lists
        assert {u: set(p) for u, p in index.items() if p} == corpus.partner_sets
    assert any(corpus.partner_sets) and any(e["event"] == "rescore" for e in events)


def test_labels_reach_events_through_the_stored_model_and_decide_their_page(crawl, tmp_path):
    first, later = crawl
    refetched = "https://www.quiltfarm10.com/story/10"
    # re-fetched as another page, then as itself: unquilted, then quilted again
    tail = [{"url": refetched, "text": " ".join(f"w{i:07d}" for i in range(300))},
            next(r for r in first if r["url"] == refetched)]
    run(tmp_path, "base", first)
    ranked = rank(tmp_path, "--desk", tmp_path / "desk")
    low = min(ranked, key=lambda u: (ranked[u], u))
    for url, verdict in ((refetched, "--not-spam"), (low, "--spam")):
        streamdet("label", url, verdict, "--state", tmp_path / "state", "--desk",
                  tmp_path / "desk")
    verdicts = {refetched: "not_spam", low: "spam"}
    corpus, _, stored = read_state(tmp_path)
    assert stored == model_of(corpus, verdicts) != blind()
    # later events: the stored model on the signals of the state after their batch
    events = run(tmp_path, "more", [r for r in later if r["url"] != refetched])
    corpus, _, _ = read_state(tmp_path)
    own = {refetched: 0.0, low: 1.0}
    assert events and {e["url"]: e["spam_score"] for e in events} == {
        e["url"]: own.get(e["url"], stored.rounded(signals(corpus, e["url"]).values))
        for e in events}
    assert any(e["url"] not in own for e in events)
    # the labelled page's own events say its label
    again = run(tmp_path, "again", tail, batch="1")
    assert [e["spam_score"] for e in again if e["url"] == refetched] == [0.0]
