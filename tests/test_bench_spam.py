"""loadtest/bench_spam.py end to end at smoke size, on tests/data's slice of the main
texts: the corpus holds every kind of farm and natural reuse, `streamdet run` builds its
state, the ranking is judged blind and with labels, and the figures are consistent with
one another (no figure is judged: at this size they say nothing)."""

from __future__ import annotations

import json

import pytest

from loadtest import bench_spam as bs
from loadtest.spam_corpus import SMOKE, spam_corpus

FARMS = {"stitch-one", "stitch-many", "shuffle-one", "shuffle-many"}
REUSE = {"crawl", "mirror", "edition", "reading", "syndicated", "aggregator", "translation",
         "template"}


def test_smoke_corpus_holds_every_kind_and_its_truth():
    c = spam_corpus(1, SMOKE, bs.SMOKE_DATA)
    kinds = set(c.kinds.values())
    assert kinds == FARMS | REUSE
    assert c.farm == {u for u, k in c.kinds.items() if k in FARMS}
    assert len(c.farm) == len(FARMS) * SMOKE.farm_pages
    assert len({r["url"] for r in c.records}) == len(c.records) == len(c.kinds)


def _sane(f: dict, one_draw: bool = True) -> None:
    """A judged set of pages: precision and recall are shares, or None with nothing to
    share (a mean over draws is None when one draw has nothing)."""
    for name, count in (("precision", f["flagged"]), ("recall", f["farm"])):
        assert f[name] is None or 0.0 <= f[name] <= 1.0
        if one_draw:
            assert (f[name] is None) == (count == 0)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("spam") / "s.json"
    assert bs.main(["--smoke", "--out", str(out)]) == 0
    return json.loads(out.read_text())


def test_smoke_run_ranks_and_judges_the_corpus(smoke):
    r = smoke
    assert r["config"]["smoke"] and r["config"]["draws"] == bs.SMOKE_DRAWS
    assert r["config"]["records"] < 1000  # the report takes it for a smoke
    assert 0 < r["farm_ranked"] <= r["config"]["farm_pages"] == r["blind"]["farm"]
    assert r["ranked"] == sum(r["ranked_by_kind"].values()) <= r["config"]["records"]
    assert r["farm_ranked"] == sum(r["ranked_by_kind"][k] for k in FARMS)
    blind = r["blind"]
    _sane(blind)
    assert blind["flagged"] == sum(r["flagged_by_kind"].values()) > 0
    assert all(r["flagged_by_kind"][k] <= r["ranked_by_kind"][k] for k in r["ranked_by_kind"])
    assert 0.0 <= blind["precision_at_100"] <= 1.0
    assert blind["recall"] <= r["farm_ranked"] / r["config"]["farm_pages"]
    assert set(r["pass"]) == {"blind", "labels_20"}


def test_smoke_run_reports_every_label_policy_and_count(smoke):
    labels = smoke["labels"]
    assert set(labels) == {"uniform", "top", "uncertain"}
    for policy, by_n in labels.items():
        assert list(by_n) == [str(n) for n in bs.LABELS]
        for n, f in by_n.items():
            _sane(f["all"])
            assert f["all"]["farm"] == smoke["config"]["farm_pages"]
            unlabelled = f["unlabelled"]
            _sane(unlabelled, one_draw=policy != "uniform")
            assert 0.0 <= f["precision_at_100"] <= 1.0
            labelled = min(int(n), smoke["ranked"])
            assert unlabelled["farm"] <= f["all"]["farm"]
            assert f["all"]["flagged"] - labelled <= unlabelled["flagged"] \
                <= f["all"]["flagged"]
