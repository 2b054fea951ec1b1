"""The spam score's model and its labels (SPEC §10): blind weights as written, training
moves them towards the labels and is deterministic, a page's own label decides it, and a
label reaches another page only through the model it trains."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdet.ranking.features import FEATURES, Corpus, signals, texts_of
from streamdet.ranking.model import (
    BLIND,
    BLIND_BIAS,
    PRIOR_SD,
    THRESHOLD,
    Model,
    blind,
    trained,
)
from streamdet.ranking.rank import model_of, ranking


def row(url: str, sources: list[tuple[str, int]], quilted: bool = True, patch: float = 0.9,
        cluster: str | None = None, cluster_size: int = 1, contains: float = 0.0) -> dict:
    total = sum(g for _, g in sources) or 1
    return {"url": url, "quilted": quilted, "patch_fraction": patch, "n_grams": 100,
            "sources": [{"url": u, "grams": g, "share": g / total} for u, g in sources],
            "cluster": cluster or url, "cluster_size": cluster_size, "pop": 0,
            "contains": contains}


def farm_and_reuse() -> Corpus:
    """Two farm pages of six unrelated donors each, a page quoting one text in three
    editions (near-duplicates of each other), the donors and the editions."""
    donors = [f"http://donor{i}.com/p" for i in range(12)]
    editions = [f"http://bible{i}.org/john" for i in range(3)]
    rows = [row(u, [], quilted=False, patch=0.3) for u in donors]
    rows += [row(u, [], quilted=False, patch=1.0, cluster=editions[0], cluster_size=3)
             for u in editions]
    rows.append(row("http://farm.net/1", [(d, 20) for d in donors[:6]]))
    rows.append(row("http://farm.net/2", [(d, 20) for d in donors[6:]]))
    rows.append(row("http://church.org/sermon", [(editions[0], 80), (editions[1], 15),
                                                 (editions[2], 5)], patch=0.95))
    pairs = [{"url": "http://donor0.com/p", "other": "http://farm.net/1"}]
    return Corpus(rows, pairs)


def test_blind_model_is_the_written_weights():
    m = blind()
    assert m.bias == BLIND_BIAS
    assert dict(zip(FEATURES, m.weights, strict=True)) == BLIND
    assert trained([]) == m


def test_blind_scores_farm_above_editions_of_one_text():
    c = farm_and_reuse()
    scores = {r.url: r for r in ranking(c)}
    assert scores["http://farm.net/1"].spam and scores["http://farm.net/2"].spam
    assert not scores["http://church.org/sermon"].spam
    # three editions of one text are one source in spirit
    sermon = signals(c, "http://church.org/sermon")
    assert sermon.figures["texts"] == 1 and sermon.values[FEATURES.index("kin")] > 0.6
    assert scores["http://farm.net/1"].why, "a verdict names what decided it"
    assert all(0.0 <= r.score <= 1.0 for r in scores.values())


def test_ranked_pages_are_quilts_and_partial_duplicates_highest_first():
    c = farm_and_reuse()
    rows = ranking(c)
    assert {r.url for r in rows} == {"http://farm.net/1", "http://farm.net/2",
                                     "http://church.org/sermon", "http://donor0.com/p"}
    assert [r.score for r in rows] == sorted((r.score for r in rows), reverse=True)


def test_kin_sources_merge_transitively_through_partial_duplicates():
    rows = [row(u, [], quilted=False) for u in ("http://a.com/", "http://b.com/",
                                                "http://c.com/", "http://d.com/")]
    c = Corpus(rows, [{"url": "http://a.com/", "other": "http://b.com/"},
                      {"url": "http://c.com/", "other": "http://b.com/"}])
    got = texts_of(c, [("http://a.com/", 5), ("http://c.com/", 3), ("http://b.com/", 2),
                       ("http://d.com/", 7)])
    assert sorted(got) == [7, 10]


def _texts_pairwise(corpus: Corpus, sources: list[tuple[str, int]]) -> list[int]:
    """texts_of straight from its definition: every pair of sources asked `kin`, the
    components grown from each text's first source."""
    text_of: dict[int, int] = {}
    for first in range(len(sources)):
        if first in text_of:
            continue
        text_of[first], todo = first, [first]
        while todo:
            a = todo.pop()
            for b in range(len(sources)):
                if b not in text_of and corpus.kin(sources[a][0], sources[b][0]):
                    text_of[b] = first
                    todo.append(b)
    grams: dict[int, int] = {}
    for i, (_, g) in enumerate(sources):
        grams[text_of[i]] = grams.get(text_of[i], 0) + g
    return list(grams.values())


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_texts_are_the_kin_components_in_first_source_order(data):
    urls = [f"http://s{i}.example/" for i in range(12)]
    clusters = data.draw(st.lists(st.sampled_from("abcdefgh"), min_size=12, max_size=12))
    rows = [row(u, [], quilted=False, cluster=f"http://{c}.example/",
                cluster_size=clusters.count(c)) for u, c in zip(urls, clusters, strict=True)]
    pairs = data.draw(st.lists(st.tuples(st.sampled_from(urls), st.sampled_from(urls)),
                               max_size=10))
    corpus = Corpus(rows, [{"url": a, "other": b} for a, b in pairs])
    sources = data.draw(st.lists(st.tuples(st.sampled_from(urls + ["http://gone.example/"]),
                                           st.integers(1, 50)), max_size=15))
    assert texts_of(corpus, sources) == _texts_pairwise(corpus, sources)


def test_own_label_decides_its_page():
    c = farm_and_reuse()
    got = {r.url: r for r in ranking(c, {"http://farm.net/1": "not_spam",
                                         "http://church.org/sermon": "spam",
                                         "http://farm.net/2": "unsure"})}
    assert got["http://farm.net/1"].score == 0.0 and not got["http://farm.net/1"].spam
    assert got["http://church.org/sermon"].score == 1.0 and got["http://church.org/sermon"].spam
    assert got["http://farm.net/1"].why == ["labelled not_spam"]
    assert got["http://farm.net/2"].why != ["labelled unsure"]  # unsure decides nothing


def test_labels_reach_other_pages_only_through_the_model():
    """Every unlabelled page's score is the score of the model trained on the labelled
    pages' signals, and labels of URLs the state does not hold change nothing."""
    c = farm_and_reuse()
    verdicts = {"http://farm.net/1": "spam", "http://church.org/sermon": "not_spam"}
    model = trained([(signals(c, "http://church.org/sermon").values, False),
                     (signals(c, "http://farm.net/1").values, True)])
    for r in ranking(c, verdicts):
        if r.url not in verdicts:
            assert r.score == pytest.approx(model.score(signals(c, r.url).values), abs=2e-6)
    assert ranking(c, {**verdicts, "http://elsewhere.com/": "spam"}) == ranking(c, verdicts)
    assert ranking(c, {"http://elsewhere.com/": "spam"}) == ranking(c)


def test_training_moves_weights_towards_labels_and_the_prior_holds_them():
    x = tuple(0.5 for _ in FEATURES)
    base = blind().score(x)
    up = trained([(x, True)] * 5)
    down = trained([(x, False)] * 5)
    assert down.score(x) < base < up.score(x)
    many = trained([(x, False)] * 500)
    assert many.score(x) < down.score(x) < base  # more labels, further from the prior
    assert math.isfinite(many.bias)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.lists(st.floats(0, 1), min_size=len(FEATURES),
                                   max_size=len(FEATURES)), st.booleans()),
                max_size=30), st.randoms(use_true_random=False))
def test_training_is_deterministic_and_order_free(examples, rnd):
    """The same labels give the same model bit for bit; in another order, the same up to
    float rounding (the posterior has one maximum); scores stay in [0, 1]."""
    a, b = trained(examples), trained(list(examples))
    assert a == b
    shuffled = examples[:]
    rnd.shuffle(shuffled)
    c = trained(shuffled)
    for w, v in zip((a.bias, *a.weights), (c.bias, *c.weights), strict=True):
        assert w == pytest.approx(v, abs=1e-6)
    for x, _ in examples:
        assert 0.0 <= a.score(x) <= 1.0


def _gradient(model: Model, examples) -> np.ndarray:
    """The log-posterior's gradient at `model` (zero at its maximum)."""
    prior = blind()
    w = np.array((model.bias, *model.weights))
    mean = np.array((prior.bias, *prior.weights))
    x = np.array([(1.0, *v) for v, _ in examples])
    y = np.array([1.0 if spam else 0.0 for _, spam in examples])
    p = 1.0 / (1.0 + np.exp(-(x @ w)))
    return x.T @ (y - p) - (w - mean) / PRIOR_SD**2


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(20, 300))
def test_training_reaches_the_posterior_maximum(seed, n):
    """Labels that contradict the blind model on corner signals (0 or 1): an undamped
    Newton step overshoots there and diverges; training must still end at the maximum."""
    rng = random.Random(seed)
    examples = [(tuple(float(rng.random() < 0.5) for _ in FEATURES), rng.random() < 0.2)
                for _ in range(n)]
    model = trained(examples)
    assert all(math.isfinite(w) for w in (model.bias, *model.weights))
    assert np.max(np.abs(_gradient(model, examples))) < 1e-6


def test_ranking_does_not_depend_on_the_order_labels_come_in():
    c = farm_and_reuse()
    verdicts = [("http://farm.net/1", "spam"), ("http://church.org/sermon", "not_spam"),
                ("http://donor0.com/p", "not_spam")]
    want = ranking(c, dict(verdicts))
    for seed in range(3):
        random.Random(seed).shuffle(verdicts)
        assert ranking(c, dict(verdicts)) == want
        assert model_of(c, dict(verdicts)) == model_of(c, dict(sorted(verdicts)))


def test_threshold_and_extreme_logits():
    m = Model(0.0, tuple(0.0 for _ in FEATURES))
    assert m.score([0.0] * len(FEATURES)) == 0.5
    huge = Model(1e4, tuple(0.0 for _ in FEATURES))
    assert huge.score([0.0] * len(FEATURES)) == 1.0
    assert Model(-1e4, huge.weights).score([0.0] * len(FEATURES)) == 0.0


def test_why_names_at_most_three_signals_each_once():
    c = farm_and_reuse()
    got = {r.url: r.why for r in ranking(c)}
    farm = got["http://farm.net/1"]
    assert 1 <= len(farm) <= 3
    assert any("copied from beyond its largest source text" in w for w in farm)
    assert sum("distinct" in w for w in farm) <= 1  # texts and kin are one figure
    sermon = got["http://church.org/sermon"]
    assert sermon and all(w not in farm for w in sermon)


@st.composite
def corpus_st(draw) -> tuple[Corpus, list[str]]:
    """Random rows and pairs: pages on a few hosts, sources among them, clusters, pairs."""
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    urls = [f"http://h{rng.randrange(4)}.d{rng.randrange(3)}.com/{i}" for i in range(12)]
    rows = []
    for u in urls:
        sources = [(s, rng.randint(1, 50)) for s in rng.sample(urls, rng.randint(0, 6))
                   if s != u]
        rows.append(row(u, sources, quilted=rng.random() < 0.5, patch=rng.random(),
                        cluster=rng.choice([None, urls[0], urls[1]]),
                        cluster_size=rng.randint(1, 3), contains=rng.random()))
    pairs = [{"url": a, "other": b} for a, b in (rng.sample(urls, 2) for _ in range(4))]
    return Corpus(rows, pairs), urls


@settings(max_examples=60, deadline=None)
@given(corpus_st(), st.data())
def test_labels_on_random_corpora(case, data):
    """A page's label decides it; every other page scores as the trained model scores its
    signals; labels of URLs not live change nothing; the ranking does not depend on the
    order the state's rows or pairs are read in."""
    corpus, urls = case
    labelled = data.draw(st.lists(st.sampled_from(urls), unique=True, max_size=6))
    verdicts = {u: data.draw(st.sampled_from(["spam", "not_spam", "unsure"])) for u in labelled}
    rows = ranking(corpus, verdicts)
    model = model_of(corpus, verdicts)
    for r in rows:
        if verdicts.get(r.url) in ("spam", "not_spam"):
            assert r.score == (1.0 if verdicts[r.url] == "spam" else 0.0)
        else:
            assert r.score == round(model.score(signals(corpus, r.url).values), 6)
        assert r.spam == (r.score >= THRESHOLD) and len(r.why) <= 3
    assert ranking(corpus, {**verdicts, "http://gone.example/": "spam"}) == rows
    backwards = Corpus(list(corpus.rows.values())[::-1],
                       [{"url": b, "other": a} for a in corpus.partner_sets
                        for b in corpus.partner_sets[a]])
    assert ranking(backwards, verdicts) == rows
