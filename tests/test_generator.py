"""loadtest/generator.py: deterministic for a seed, its truth consistent with the pages it
writes (quilts, mirrors and single-source scrapes), its pacing holds the rate (fake clock),
and its Kafka sink delivers every record to a real broker at that rate."""

from __future__ import annotations

import gzip
import json
import math
import time
from dataclasses import replace

import numpy as np
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from loadtest.corpus import write_jsonl
from loadtest.generator import (
    Generator,
    GeneratorConfig,
    Truth,
    main,
    sentences,
    to_kafka,
)
from streamdet.engine.analysis import analyze, page_text
from streamdet.engine.params import Params
from streamdet.engine.records import page_from_object
from streamdet.engine.servers import host_of, registered_domain
from streamdet.engine.tokens import tokenize

from .kafka_broker import kafka_broker_fixture, run_sync, unique_name  # noqa: F401

SMALL = GeneratorConfig(seed=5, pages=160, quilt_rate=0.08, mirror_rate=0.06,
                        scrape_rate=0.08, farms=2, farm_pool=16)
RUN = 30  # words: a quilt's passages are 30-150 consecutive words of a donor


@pytest.fixture(scope="module")
def drawn() -> tuple[list[dict], Truth]:
    gen = Generator(SMALL)
    return list(gen), gen.truth


def _jsonl(cfg: GeneratorConfig, path) -> tuple[bytes, dict]:
    gen = Generator(cfg)
    write_jsonl(iter(gen), path)
    return path.read_bytes(), gen.truth.to_json()


def test_same_seed_same_bytes_other_seed_other_stream(tmp_path):
    cfg = replace(SMALL, pages=60)
    a = _jsonl(cfg, tmp_path / "a.jsonl")
    assert a == _jsonl(cfg, tmp_path / "b.jsonl")
    assert a[0] != _jsonl(replace(cfg, seed=6), tmp_path / "c.jsonl")[0]
    # a prefix of a longer stream is the shorter stream
    longer = _jsonl(replace(cfg, pages=80), tmp_path / "d.jsonl")[0]
    assert longer.startswith(a[0])
    assert a[1]["scrapes"]  # scrapes are part of what is reproduced


def test_scrapes_leave_the_other_records_as_they_were():
    """Scrapes draw on random streams of their own: without them (scrape_rate=0) the
    stream is the other records of a stream with them, in the same order."""
    cfg = replace(SMALL, pages=100)
    gen = Generator(cfg)
    records = list(gen)
    plain = Generator(replace(cfg, scrape_rate=0))
    others = [r for r in records if r["url"] not in gen.truth.scrapes]
    assert gen.truth.scrapes and len(others) < len(records)
    assert list(plain)[:len(others)] == others
    assert not plain.truth.scrapes


def _words(rec: dict) -> list[str]:
    return page_text(page_from_object(rec)).split()


def _runs(words: list[str]) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + RUN]) for i in range(len(words) - RUN + 1)}


def test_quilts_are_stitched_from_earlier_pages_on_other_domains(drawn):
    records, truth = drawn
    position = {r["url"]: i for i, r in enumerate(records)}
    by_url = {r["url"]: r for r in records}
    assert len(truth.quilts) >= 5 and truth.summary()["records"] == len(records)
    for url, q in truth.quilts.items():
        donors = q["donors"]
        assert 4 <= len(donors) <= 12
        domains = {registered_domain(host_of(d)) for d in donors}
        assert len(domains) == len(donors)  # one donor per registered domain
        assert registered_domain(host_of(url)) not in domains
        assert all(position[d] < position[url] for d in donors)  # farms copy what exists
        quilt = _words(by_url[url])
        covered = np.zeros(len(quilt), bool)
        for d in donors:
            shared = _runs(_words(by_url[d]))
            hits = [i for i in range(len(quilt) - RUN + 1) if tuple(quilt[i:i + RUN]) in shared]
            assert hits, f"{url}: nothing of donor {d} in it"
            for i in hits:
                covered[i:i + RUN] = True
        assert covered.mean() > 0.9  # all but the title is donors' text


def test_donors_are_reused_across_quilts_of_a_farm(drawn):
    _, truth = drawn
    assert truth.donor_reuse() > 1.5
    farms = {q["farm"] for q in truth.quilts.values()}
    assert farms == {0, 1}


def test_mirrors_are_near_duplicates_of_earlier_pages(drawn):
    records, truth = drawn
    position = {r["url"]: i for i, r in enumerate(records)}
    by_url = {r["url"]: r for r in records}
    params = Params()
    compared = near = 0
    for url, orig in truth.mirrors.items():
        assert position[orig] < position[url]
        assert registered_domain(host_of(url)) != registered_domain(host_of(orig))
        pa = analyze(page_from_object(by_url[url]), params)
        pb = analyze(page_from_object(by_url[orig]), params)
        a, b = pa.grams, pb.grams
        if not len(b):  # a page without text (some real pages are scripts only)
            assert not len(a)
            continue
        compared += 1
        jaccard = len(np.intersect1d(a, b)) / len(np.union1d(a, b))
        assert jaccard > 0.8, (url, jaccard)  # one word replaced: 5 grams of the page
        near += bool(np.intersect1d(pa.sketch.bands, pb.sketch.bands).size)
    assert compared >= 3
    assert near >= compared - 1  # near-duplicates by SPEC §6 (short pages may not be)


def test_most_grams_occur_once(drawn):
    records, _ = drawn
    params = Params()
    _, df = np.unique(np.concatenate(
        [analyze(page_from_object(r), params).grams for r in records]), return_counts=True)
    assert (df == 1).mean() > 0.7
    assert df.max() >= 5  # and some are popular (template text, mirrors, donors)


def test_scrapes_appear_at_about_the_rate(drawn):
    records, truth = drawn
    n, rate = len(records), SMALL.scrape_rate
    assert truth.summary()["scrapes"] == len(truth.scrapes)
    assert abs(len(truth.scrapes) - rate * n) <= 3 * math.sqrt(n * rate * (1 - rate)) + 1
    assert set(truth.scrapes).isdisjoint(set(truth.quilts) | set(truth.mirrors))


def _sentence_keys(text: str) -> list[tuple[str, ...]]:
    """SPEC §7's sentence keys: token sequences, sentences under 5 tokens skipped."""
    return [k for k in (tuple(tokenize(s)) for s in sentences(text)) if len(k) >= 5]


def _longest_diagonal(a: list, b: list) -> int:
    best = 0
    for i in range(len(a)):
        for j in range(len(b)):
            n = 0
            while i + n < len(a) and j + n < len(b) and a[i + n] == b[j + n]:
                n += 1
            best = max(best, n)
    return best


def _has_run(seq: list[str], run: list[str]) -> bool:
    return any(seq[i:i + len(run)] == run for i in range(len(seq) - len(run) + 1))


def test_scrapes_copy_consecutive_sentences_of_an_earlier_crawled_page(drawn):
    records, truth = drawn
    position = {r["url"]: i for i, r in enumerate(records)}
    by_url = {r["url"]: r for r in records}
    planted = set(truth.quilts) | set(truth.mirrors) | set(truth.scrapes)
    assert len(truth.scrapes) >= 5
    for url, s in truth.scrapes.items():
        orig = s["original"]
        assert position[orig] < position[url]  # scrapers copy what exists
        assert orig not in planted  # a crawled page
        assert registered_domain(host_of(url)) != registered_domain(host_of(orig))
        passage = s["passage"].split("\n")
        assert 4 <= len(passage) <= 12
        assert all(len(tokenize(p)) >= 5 for p in passage)
        original_text = page_text(page_from_object(by_url[orig]))
        scrape_text = page_text(page_from_object(by_url[url]))
        # the copied sentences, in order and consecutive, in both pages, words unchanged
        assert _has_run(sentences(original_text), passage), url
        assert _has_run(sentences(scrape_text), passage), url
        # so SPEC §7 finds a diagonal of >= 3 equal sentences between the two
        assert _longest_diagonal(_sentence_keys(scrape_text),
                                 _sentence_keys(original_text)) >= len(passage)


def test_scraper_sites_keep_their_own_boilerplate(drawn):
    records, truth = drawn
    by_url = {r["url"]: r for r in records}
    frame: dict[str, set[tuple[str, str]]] = {}
    for url in truth.scrapes:
        html = by_url[url]["html"]
        head, rest = html.split("<main>")
        frame.setdefault(host_of(url), set()).add(
            (head.split("</title>")[1], rest.split("</main>")[1]))
    assert len(frame) >= 2  # a few sites, one registered domain each
    assert len({registered_domain(h) for h in frame}) == len(frame)
    assert all(len(f) == 1 for f in frame.values())  # the same header, menu and footer
    footers = [next(iter(f))[1] for f in frame.values()]
    assert len(set(footers)) == len(footers)  # and each site its own
    assert all(len(sentences(page_text(page_from_object({"url": "https://x.example/",
                                                         "html": f})))) >= 3
               for f in footers)


def test_truth_written_before_scrapes_still_reads():
    old = {"summary": {"records": 3, "crawled": 2, "quilts": 1, "mirrors": 0},
           "quilts": {"https://q.example/p/a.html": {"farm": 0, "donors": ["https://d/"]}},
           "mirrors": {}}
    truth = Truth.from_json(old)
    assert truth.scrapes == {} and truth.crawled == 2
    assert truth.summary()["scrapes"] == 0 and truth.summary()["records"] == 3
    assert Truth.from_json(json.loads(json.dumps(truth.to_json()))) == truth


def test_rates_are_checked_together():
    with pytest.raises(ValueError):
        Generator(GeneratorConfig(quilt_rate=0.4, mirror_rate=0.4, scrape_rate=0.3))
    with pytest.raises(ValueError):
        Generator(GeneratorConfig(scrape_rate=-0.1))


def test_cli_writes_the_stream_and_truth_it_summarises(tmp_path, capsys):
    out, truth_path = tmp_path / "s.jsonl.gz", tmp_path / "t.json"
    cfg = replace(SMALL, pages=60)
    assert main(["--pages", "60", "--seed", "5", "--quilt-rate", "0.08", "--mirror-rate",
                 "0.06", "--scrape-rate", "0.08", "--farms", "2", "--farm-pool", "16",
                 "--out", str(out), "--truth", str(truth_path)]) == 0
    gen = Generator(cfg)
    want = list(gen)
    got = [json.loads(line) for line in gzip.decompress(out.read_bytes()).splitlines()]
    assert got == want
    written = json.loads(truth_path.read_text(encoding="utf-8"))
    assert written["config"]["seed"] == 5 and written["config"]["pages"] == 60
    assert Truth.from_json(written).to_json() == json.loads(json.dumps(gen.truth.to_json()))
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary == written["summary"]
    donors = {d for q in gen.truth.quilts.values() for d in q["donors"]}
    assert summary["records"] == len(got) and summary["donors"] == len(donors) > 0
    assert summary["quilts"] == len(gen.truth.quilts) > 0
    assert summary["scrapes"] == len(gen.truth.scrapes) > 0
    assert written["scrapes"] == gen.truth.scrapes


def test_cli_wants_one_sink(tmp_path):
    with pytest.raises(SystemExit):
        main(["--pages", "5"])
    with pytest.raises(SystemExit):
        main(["--pages", "5", "--out", str(tmp_path / "s.jsonl"), "--broker", "h:1"])


async def _read_topic(bootstrap: str, topic: str, want: int) -> list:
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                         auto_offset_reset="earliest")
    await c.start()
    try:
        tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or [])]
        c.assign(tps)
        for tp in tps:
            await c.seek_to_beginning(tp)
        out: list = []
        deadline = time.monotonic() + 30
        while len(out) < want and time.monotonic() < deadline:
            for recs in (await c.getmany(timeout_ms=500)).values():
                out.extend(recs)
        return out
    finally:
        await c.stop()


def test_kafka_sink_sends_every_record_at_the_rate(kafka_broker):
    cfg = replace(SMALL, pages=60)
    want = list(Generator(cfg))
    prefix, rate = unique_name("gen"), 30.0
    sent = run_sync(to_kafka(iter(Generator(cfg)), kafka_broker.bootstrap, prefix, rate))
    assert sent["sent"] == len(want)
    got = run_sync(_read_topic(kafka_broker.bootstrap, f"{prefix}-pages", len(want)))
    values = [json.loads(r.value) for r in got]
    assert all(isinstance(v.pop("fetched_at"), float) for v in values)
    assert sorted(values, key=lambda v: v["url"]) == sorted(want, key=lambda v: v["url"])
    assert all(r.key.decode() == json.loads(r.value)["url"] for r in got)
    stamps = sorted(r.timestamp for r in got)  # ms, set by the producer at send
    assert (stamps[-1] - stamps[0]) / 1000 >= 0.8 * (len(want) - 1) / rate  # not faster
