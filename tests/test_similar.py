"""`streamdet similar` (Broder's on-the-fly query): a page's near-duplicates and what it
would be made of, against a state, without adding anything.

Checked against the reference: the near-duplicates are exactly the live documents that
share ≥ 2 of 6 supershingles with the page (ref_sketch, ref_near), with ref_resemblance;
the cover and cluster are what `dump` shows after the page really arrives; and the state
is left as it was, byte for byte in its dump.
"""

from __future__ import annotations

import json
import random

from loadtest.sharded import Simulation, analysed
from streamdet.engine.analysis import analyze
from streamdet.engine.core import Engine
from streamdet.engine.params import Params
from streamdet.engine.records import Page, page_from_object
from streamdet.reading.similar import QUERY_URL, similar, similar_sharded
from streamdet.reading.views import dump_rows
from streamdet.state.kv import MemoryKV
from streamdet.state.txn import Store

from .cli_helpers import build_crawl, dump, streamdet, write_jsonl
from .reference import (
    ref_near,
    ref_record,
    ref_resemblance,
    ref_sketch,
    ref_supershingles,
    ref_tokenize,
)

PARAMS = Params(k=5)


def _mirrors(seed: int) -> list[dict]:
    """A crawl with mirrors: some pages copied whole to other domains, some with a word
    or a few changed (near-duplicates), some re-fetched."""
    rng = random.Random(seed)
    crawl = build_crawl(seed=seed, n_pages=40, n_quilts=6)
    out = list(crawl)
    for i, rec in enumerate(rng.sample(crawl, 12)):
        words = ref_tokenize(ref_record(rec).text)
        for _ in range(rng.choice([0, 0, 1, 3])):
            if words:
                words[rng.randrange(len(words))] = f"edit{rng.randrange(10**6)}"
        out.append({"url": f"https://mirror{i}.example.net/copy", "text": " ".join(words)})
    return out


def _state(records: list[dict]) -> tuple[Store, MemoryKV]:
    kv = MemoryKV()
    store = Store(kv)
    store.set_meta("params", PARAMS.fingerprint())
    txn = store.begin()
    Engine(PARAMS).process(txn, [analyze(page_from_object(r), PARAMS) for r in records])
    txn.commit({})
    return store, kv


def _arrived(kv: MemoryKV, rec: dict) -> Store:
    """A copy of the state in `kv` after one more arrival, committed."""
    copy = MemoryKV()
    copy._tables = {t: dict(rows) for t, rows in kv._tables.items()}
    store = Store(copy)
    txn = store.begin()
    Engine(PARAMS).process(txn, [analyze(page_from_object(rec), PARAMS)])
    txn.commit({})
    return store


class RefSketches:
    """The reference sketches of the live documents after `records`, made once."""

    def __init__(self, records: list[dict]) -> None:
        latest = {}
        for rec in records:
            doc = ref_record(rec)
            if doc is not None:
                latest[doc.url] = doc.text
        self.mins = {u: ref_sketch(ref_tokenize(t), PARAMS.k) for u, t in latest.items()}
        self.supers = {u: ref_supershingles(m) for u, m in self.mins.items()}

    def near(self, query_text: str, exclude: str) -> dict[str, float]:
        """Live documents sharing ≥ 2 supershingles with the query, and their resemblance."""
        mins = ref_sketch(ref_tokenize(query_text), PARAMS.k)
        supers = ref_supershingles(mins)
        return {u: round(ref_resemblance(mins, m), 4) for u, m in self.mins.items()
                if u != exclude and ref_near(supers, self.supers[u])}


def test_similar_equals_the_reference_and_an_arrival_and_adds_nothing():
    records = _mirrors(3)
    store, kv = _state(records)
    ref = RefSketches(records)
    before = list(dump_rows(store, PARAMS))
    asked = 0
    for rec in records[-12:] + records[:5]:
        doc = ref_record(rec)
        for url in (doc.url, QUERY_URL, "https://elsewhere.example.org/x"):
            answer = similar(store, Page(url, text=doc.text), PARAMS)
            want = ref.near(doc.text, url)
            assert {n["url"]: n["resemblance"] for n in answer["near"]} == want
            assert answer["near_total"] == len(want)
            # as if it arrived now: the dump row of the page after a real arrival
            after = _arrived(kv, {"url": url, "text": doc.text})
            row = next(r for r in dump_rows(after, PARAMS) if r["url"] == url)
            for key in ("n_grams", "n_patch_grams", "patch_fraction", "sources", "quilted",
                        "cluster_size", "exact_dups"):
                assert answer[key] == row[key], (url, key)
            if url != QUERY_URL:
                assert answer["cluster"] == row["cluster"]
            asked += bool(want)
    assert asked >= 12  # mirrors were asked about, and found
    assert list(dump_rows(store, PARAMS)) == before  # nothing was added


def test_similar_on_worker_states_equals_a_run_state():
    """The Kafka pipeline's shards (simulated, 1-3 shards) answer as a `streamdet run`
    state of the same records does, and keep nothing of the query."""
    records = _mirrors(7)
    store, _ = _state(records)
    for shards in (1, 3):
        sim = Simulation(PARAMS, shards, seed=shards)
        for page in analysed(records, PARAMS):
            sim.publish(page)
        sim.run_until_idle()
        docs = {sh.index: sh.state.store for sh in sim.doc}
        grams = {sh.index: sh.state.store for sh in sim.gram}
        before = sim.rows()
        for rec in records[-6:] + records[:3]:
            doc = ref_record(rec)
            for url in (doc.url, QUERY_URL):
                page = Page(url, text=doc.text)
                assert similar_sharded(docs, grams, page, PARAMS, shards) == \
                    similar(store, page, PARAMS), (shards, url)
        assert sim.rows() == before


def test_similar_on_the_command_line(tmp_path):
    """A URL of the state, a text file and an HTML file; --json; the state unchanged."""
    records = _mirrors(5)
    path = write_jsonl(tmp_path / "crawl.jsonl", records)
    state = tmp_path / "s"
    streamdet("run", "--input", path, "--state", state, "--events", tmp_path / "ev")
    before = dump(state)
    mirror = records[-1]
    ref = RefSketches(records)
    got = json.loads(streamdet("similar", mirror["url"], "--state", state, "--json").stdout)
    assert {n["url"] for n in got["near"]} == set(ref.near(mirror["text"], mirror["url"]))
    (tmp_path / "page.txt").write_text(mirror["text"], encoding="utf-8")
    text = streamdet("similar", "--text", tmp_path / "page.txt", "--state", state).stdout.decode()
    assert text.startswith("the given page\n") and "patch fraction" in text
    html = "<html><body><p>" + mirror["text"] + "</p></body></html>"
    (tmp_path / "page.html").write_text(html, encoding="utf-8")
    as_html = json.loads(streamdet("similar", "--html", tmp_path / "page.html", "--url",
                                   "https://new.example.com/", "--state", state,
                                   "--json").stdout)
    assert as_html["url"] == "https://new.example.com/"
    assert {n["url"] for n in as_html["near"]} == set(ref.near(mirror["text"], ""))
    missing = streamdet("similar", "https://never.example.com/", "--state", state, check=False)
    assert missing.returncode == 2 and b"is not in this state" in missing.stderr
    assert dump(state) == before
