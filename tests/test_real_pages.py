"""The engine against the brute-force reference on real pages with planted quilts.

Real WCXB pages (syndicated articles, shared templates, cookie banners) plus pages stitched
from passages of 4-12 donors on other domains, in a random order and random batches, on
real RocksDB. Both sides get the same visible text (the engine's `visible_text`, which
tests/test_text.py checks on its own), because the reference's simple HTML parser and
lexbor disagree on some of the malformed markup real pages carry.
"""

from __future__ import annotations

import random

import pytest

from loadtest.corpus import planted_corpus
from streamdet.engine.params import Params
from streamdet.engine.servers import host_of, registered_domain
from streamdet.engine.text import visible_text

from .harness import assert_same_rows, run_embedded
from .reference import reference


def _as_text(records: list[dict]) -> list[dict]:
    out = []
    for r in records:
        text = r["text"] if "text" in r else visible_text(r["html"])
        out.append({"url": r["url"], "text": text})
    return out


@pytest.fixture(scope="module")
def planted():
    records, truth = planted_corpus(seed=5, n_pages=160, n_quilts=10)
    return _as_text(records), truth


@pytest.mark.parametrize("params", [
    Params(),
    Params(k=4, m=8, c=3, theta=0.4),
    Params(k=6, m=20, c=2, theta=0.6, foreign="host"),
], ids=["defaults", "small-m", "host"])
def test_real_pages_match_the_reference(planted, params):
    records, _ = planted
    rng = random.Random(params.k * 31 + params.m)
    order = records[:]
    rng.shuffle(order)
    # re-fetch a few pages with another page's text, so withdrawals are exercised too
    for i in range(6):
        order.append({"url": order[i]["url"], "text": order[-(i + 1)]["text"]})
    cuts = []
    while sum(cuts) < len(order):
        cuts.append(min(rng.randint(1, 40), len(order) - sum(cuts)))
    want = reference(order, params)
    got = run_embedded(order, params, cuts, backend="rocks")
    assert_same_rows(want, got)


def test_planted_quilts_are_found_with_their_donors(planted):
    records, truth = planted
    cuts = [64] * (len(records) // 64) + ([len(records) % 64] if len(records) % 64 else [])
    rows = run_embedded(records, Params(), cuts, backend="rocks")
    found = [u for u in truth if rows[u]["quilted"]]
    assert len(found) >= 0.8 * len(truth), f"recall {len(found)}/{len(truth)}"
    named = [s["url"] for u in found for s in rows[u]["sources"]]
    donors = {d for u in found for d in truth[u]}
    precision = sum(1 for s in named if s in donors) / len(named)
    assert precision >= 0.8, f"only {precision:.0%} of the named sources are donors"
    for u in found:  # sources are always on other registered domains
        mine = registered_domain(host_of(u))
        assert all(registered_domain(host_of(s["url"])) != mine for s in rows[u]["sources"])
