"""loadtest.corpus: seeded generators of planted quilts and replay streams from real pages."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from loadtest import corpus
from streamdet.engine.analysis import analyze, page_text
from streamdet.engine.params import Params
from streamdet.engine.records import Page, page_from_object
from streamdet.engine.servers import host_of, registered_domain
from streamdet.engine.tokens import tokenize

# The real pages are part of the test setup (the tests' slice in tests/data, which
# tests/conftest.py points $STREAMDET_DATA at): missing data is a failure, not a skip.
assert (corpus.data_dir() / corpus.PAGES_FILE).exists(), (
    f"no {corpus.PAGES_FILE} in {corpus.data_dir()}")

SAMPLE = Path(corpus.REPO_ROOT) / "streamdet" / "sample" / "sample-crawl.jsonl.gz"
SAMPLE_TRUTH = SAMPLE.with_name("sample-truth.json")


def domain(url: str) -> str:
    return registered_domain(host_of(url))


def tokens_of(rec: dict) -> list[str]:
    return tokenize(page_text(Page(url=rec["url"], html=rec.get("html"), text=rec.get("text"))))


def contains_run(haystack: list[str], needle: list[str]) -> bool:
    """Whether needle is a contiguous run of haystack (tokens have no \\x00)."""
    return f"\x00{chr(0).join(needle)}\x00" in f"\x00{chr(0).join(haystack)}\x00"


def check_planted(records: list[dict], truth: dict, donors: tuple[int, int],
                  farm: int = 1) -> None:
    """`farm`: how many quilts share the one domain that holds more than one (1: none)."""
    by_url = {r["url"]: r for r in records}
    assert len(by_url) == len(records), "URLs must be unique"
    real_domains = {domain(r["url"]) for r in records if "html" in r}
    assert set(truth) <= set(by_url)
    assert {u for u, r in by_url.items() if "text" in r} == set(truth)
    quilt_domains = [domain(q) for q in truth]
    shared = sorted(quilt_domains.count(d) for d in set(quilt_domains))
    assert shared == [1] * (len(set(quilt_domains)) - 1) + [farm], (
        "each quilt on a domain of its own, but for one farm of `farm` quilts")
    donor_tokens: dict[str, list[str]] = {}
    for q, donor_urls in truth.items():
        qdom = domain(q)
        assert qdom not in real_domains, "a quilt's domain is new"
        assert donors[0] <= len(donor_urls) <= donors[1]
        assert len(set(donor_urls)) == len(donor_urls)
        doms = [domain(d) for d in donor_urls]
        assert qdom not in doms, "donors are on other registered domains than the quilt"
        assert len(set(doms)) == len(doms), "a quilt's donors are on distinct domains"
        for d in donor_urls:
            assert d in by_url and "html" in by_url[d], "donors are real pages of the corpus"
            if d not in donor_tokens:
                donor_tokens[d] = tokens_of(by_url[d])
        used = set()
        passages = corpus.quilt_passages(by_url[q]["text"])
        assert passages
        for p in passages:
            words = p.split()
            assert corpus.PASSAGE_WORDS[0] <= len(words) <= corpus.PASSAGE_WORDS[1]
            toks = tokenize(p)
            assert len(toks) >= 5
            src = [d for d in donor_urls if contains_run(donor_tokens[d], toks)]
            assert src, f"a passage of {q} is in none of its donors: {p[:80]!r}"
            used.update(src)
        assert used == set(donor_urls), "every donor gives at least one passage"


@pytest.fixture(scope="module")
def planted():
    return corpus.planted_corpus(11, 80, 6)


def test_tests_read_the_slice_in_the_repository():
    """Tests never read ../shared: a clone of the repository alone runs them."""
    assert corpus.data_dir() == Path(__file__).resolve().parent / "data"


def test_load_pages():
    pages = corpus.load_pages(limit=5)
    assert len(pages) == 5
    assert all(set(p) == {"url", "html"} for p in pages)
    with gzip.open(corpus.data_dir() / corpus.PAGES_FILE, "rt", encoding="utf-8") as f:
        lines = sum(1 for _ in f)
    assert lines >= 250
    assert len(corpus.load_pages()) == lines - 1  # all of them, but the one without a host
    for p in corpus.load_pages():
        page_from_object(p)  # every record returned is one the pipeline accepts
    assert len(corpus.load_pages(include_invalid=True)) == len(corpus.load_pages()) + 1


def test_planted_is_deterministic(planted):
    again = corpus.planted_corpus(11, 80, 6)
    assert again == planted
    other = corpus.planted_corpus(12, 80, 6)
    assert other != planted


def test_planted_shape(planted):
    records, truth = planted
    assert len(records) == 86 and len(truth) == 6
    assert sum("html" in r for r in records) == 80
    assert all(set(r) in ({"url", "html"}, {"url", "text"}) for r in records)
    # shuffled: the quilts are not all at the end
    assert any("text" in r for r in records[:-6])


def test_planted_truth_matches_pages(planted):
    check_planted(*planted, donors=(4, 12))


def test_planted_reuses_donors():
    records, truth = corpus.planted_corpus(5, 120, 12, donors=(4, 8))
    check_planted(records, truth, donors=(4, 8))
    uses: dict[str, int] = {}
    for donors in truth.values():
        for d in donors:
            uses[d] = uses.get(d, 0) + 1
    assert max(uses.values()) >= 2
    assert sum(uses.values()) / len(uses) >= 1.5, "donors are reused across quilts"


def test_replay_is_deterministic():
    a = list(corpus.replay_stream(3, 12))
    assert a == list(corpus.replay_stream(3, 12))
    assert a[:5] == list(corpus.replay_stream(3, 5)), "a prefix does not depend on n"
    b = list(corpus.replay_stream(4, 12))
    assert [r["url"] for r in a] != [r["url"] for r in b]
    assert all(set(r) == {"url", "html"} for r in a)


def test_replay_urls_unique_and_on_new_domains():
    pages = corpus.load_pages(limit=25)
    recs = list(corpus.replay_stream(2, 25 * 4 + 7, pages=pages))  # 4+ rounds
    urls = [r["url"] for r in recs]
    assert len(set(urls)) == len(urls), "replay URLs are unique"
    originals = {p["url"] for p in pages}
    real_domains = {domain(u) for u in originals}
    for r in recs:
        page_from_object(r)
        assert r["url"] not in originals
        assert domain(r["url"]) not in real_domains
        assert corpus.replay_original(r["url"]) in originals
    # each round puts a site on a domain of its own
    rounds: dict[str, set[str]] = {}
    for u in urls:
        rounds.setdefault(corpus.replay_original(u), set()).add(domain(u))
    assert all(len(d) >= 4 for d in rounds.values())


def test_replay_varies_content_keeps_template():
    params = Params()
    pages = [p for p in corpus.load_pages(limit=40)
             if len(tokens_of(p)) > 300][:6]
    same = list(corpus.replay_stream(9, len(pages), vary=0.0, pages=pages))
    varied = list(corpus.replay_stream(9, len(pages), vary=0.7, pages=pages))
    orig = {p["url"]: p for p in pages}
    new = total = 0
    for s, v in zip(same, varied, strict=True):
        o = orig[corpus.replay_original(s["url"])]
        assert tokens_of(s) == tokens_of(o), "vary=0 keeps the visible text"
        g0 = set(analyze(page_from_object(o), params).grams.tolist())
        g = analyze(page_from_object(v), params).grams.tolist()
        total += len(g)
        new += sum(1 for x in g if x not in g0)
    assert 0.5 < new / total < 0.97, "most grams new, template grams shared"


def test_bundled_sample_matches_its_truth():
    assert SAMPLE.exists() and SAMPLE_TRUTH.exists(), (
        "no bundled sample (run python -m loadtest.make_sample)")
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    truth = json.loads(SAMPLE_TRUTH.read_text())
    assert 120 <= len(records) - len(truth) <= 200 and 6 <= len(truth) <= 10
    assert SAMPLE.stat().st_size < 1_500_000
    check_planted(records, truth, donors=(4, 12), farm=3)
    # the mirrors: real pages again on a host of their own, each a near-duplicate
    mirrors = [r for r in records if r["url"].startswith("https://mirror.readinglist.example/")]
    assert len(mirrors) == 4 and all("Mirrored for offline reading." in r["html"]
                                     for r in mirrors)
