"""The spam crawl: a stream whose quilts' spam scores read every kind of figure the signals
read (SPEC §10), for the tests that compare `streamdet run` with the Kafka pipeline, and
the engine's scores of it."""

from __future__ import annotations

import copy
import functools

from streamdet.engine.core import Engine
from streamdet.engine.params import Params
from streamdet.engine.spam_model import Model, store_labels
from streamdet.engine.spam_score import SCORED, page_scores
from streamdet.ranking.rank import model_of
from streamdet.ranking.reading import corpus_of
from streamdet.reading.views import dump_rows
from streamdet.state.kv import MemoryKV
from streamdet.state.txn import Store

from .cli_helpers import build_crawl
from .sharded import analysed

TEMPLATE = ("Sign up for our weekly newsletter to get the latest stories, reviews and "
            "offers delivered to your inbox every single Friday morning")


def spam_crawl() -> tuple[list[dict], list[dict]]:
    """The crawl and its re-fetches (see _built), a copy of its own for the caller."""
    records, touched, _ = _built()
    return copy.deepcopy(records), copy.deepcopy(touched)


def crawl_scores() -> dict[str, float]:
    """run_spam(records, [len(records)])'s scores of spam_crawl()'s records: the score
    `streamdet run`'s state gives each live quilt once the crawl is applied."""
    return dict(_built()[2])


@functools.cache
def _built() -> tuple[list[dict], list[dict], dict[str, float]]:
    """Real pages with planted quilts, boilerplate, re-fetches, mirrors and copies
    (build_crawl), three quilts moved onto one farm host, pages copied to another site
    (sources with near-duplicates), quilts copied on their own domain (quilts with
    near-duplicates), a template paragraph on a dozen pages and some quilts (contains);
    and each live quilt but those with mirrors again, with a paragraph of its own added
    (new grams, the same sources): a re-fetch that makes it a `rescore` event and, once
    applied, changes no other page's signals (a quilt's mirror would stop being one)."""
    records = [dict(r) for r in build_crawl(seed=5, n_pages=60, n_quilts=24)]
    for r in records:
        if any(r["url"].startswith(f"https://www.quiltfarm{i:02d}.com/") for i in (13, 14, 15)):
            r["url"] = r["url"].replace("www.quiltfarm", "farm.example/q")
    pages = [r for r in records if "html" in r and "quiltfarm" not in r["url"]]
    records += [dict(r, url=f"https://mirror.example/{i}") for i, r in enumerate(pages[:20])]
    for r in [*pages[20:32], *(r for r in records if "quiltfarm1" in r["url"] and "html" in r)]:
        r["html"] = r["html"].replace("</body>", f"<p>{TEMPLATE}</p></body>")
    records += [dict(r, url=r["url"].replace("www.", "news.")) for r in records
                if "www.quiltfarm2" in r["url"] and "html" in r]  # quilts' own mirrors
    scores = run_spam(records, [len(records)])[0]
    touched = [dict(r, html=r["html"].replace("</body>", "<p>" + " ".join(
        f"zq{i}w{j}" for j in range(12)) + "</p></body>"))
        for i, r in enumerate(r for r in records if r["url"] in scores and "html" in r
                              and "quiltfarm2" not in r["url"])]  # not a quilt's mirror
    return records, list({r["url"]: r for r in touched}.values()), scores


SPAM_PARAMS = Params(c=3, theta=0.3)  # more of the crawl's quilts, of fewer sources


def run_spam(records: list[dict], batches: list[int], params: Params = SPAM_PARAMS
             ) -> tuple[dict[str, float], list[dict]]:
    """`streamdet run`'s engine on the records in these batches: the score its final
    state gives each live quilt (as `rank` and a new event would), and its events."""
    run = SpamRun(params)
    i = 0
    for b in batches:
        run.add(records[i : i + b])
        i += b
    return run.scores(), run.events


class SpamRun:
    """A `streamdet run` state of the spam crawl's parameters, fed batch by batch, and
    taught labels as `streamdet label` teaches it."""

    def __init__(self, params: Params = SPAM_PARAMS) -> None:
        self.params = params
        self.store, self.engine = Store(MemoryKV()), Engine(params)
        self.store.set_meta("params", params.fingerprint())
        self.events: list[dict] = []

    def add(self, records: list[dict]) -> list[dict]:
        """One batch of records; its events."""
        txn = self.store.begin()
        events = self.engine.process(txn, analysed(records, self.params))[0]
        txn.commit({})
        self.events += events
        return events

    def scores(self) -> dict[str, float]:
        """The score of each live quilt, as `rank` and a new event would give it."""
        quilts = sorted(r["url"] for r in dump_rows(self.store, self.params) if r["quilted"])
        return page_scores(self.store.begin(), quilts)

    def teach(self, verdicts: dict[str, str]) -> Model:
        """`streamdet label`: the model the labels (URL -> newest verdict) train on the
        state as it is, stored with the verdicts; the model."""
        model = model_of(corpus_of(self.store), verdicts)
        txn = self.store.begin()
        store_labels(txn.chunks, model, verdicts)
        txn.commit({})
        return model


def last_scores(events: list[dict], urls: set[str]) -> dict[str, float]:
    """The spam_score of the newest quilt or rescore event of each of these URLs."""
    return {e["url"]: e["spam_score"] for e in events
            if e["event"] in SCORED and e["url"] in urls}
