"""The review desk on Kafka (streamdet/review/kafka_desk.py) against the test broker and a
real pipeline: it shows what the embedded desk shows for the same records (the quilts,
their sources and spans, the pages' texts and the sources' passages); two instances in
one group share the view, the labels and the draws; an acknowledged label survives a
kill -9; records that are not events or labels change nothing and stop nothing."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx
import pytest

from streamdet.reading.states import open_store
from streamdet.review.desk import Desk
from streamdet.review.embedded import EmbeddedSource
from streamdet.review.label_store import LabelStore
from streamdet.review.lists import QuiltFilter

from .cli_helpers import build_crawl, streamdet, write_jsonl
from .kafka_broker import KafkaBroker, kafka_broker_fixture, run_sync  # noqa: F401
from .review_helpers import TOKEN, KafkaReview, wait_for

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def review(kafka_broker: KafkaBroker, tmp_path_factory):
    """(the Kafka desks' runner, the embedded desk of `streamdet run` on the same records)."""
    tmp = tmp_path_factory.mktemp("kafka-review")
    records = build_crawl(seed=5, n_pages=100, n_quilts=14)
    path = write_jsonl(tmp / "crawl.jsonl", records)
    streamdet("run", "--input", path, "--state", tmp / "ref", "--events", tmp / "ref.jsonl")
    source = EmbeddedSource(lambda: open_store(str(tmp / "ref"), must_exist=True,
                                               read_only=True), str(tmp / "ref.jsonl"))
    embedded = Desk(source, LabelStore(str(tmp / "ref-labels.sqlite")), lambda: "now")
    run = KafkaReview(kafka_broker, tmp, path)
    run.base = run.start("a")
    yield run, embedded
    run.stop()
    source.close()


def _get(base: str, path: str, **params) -> dict:
    r = httpx.get(base + path, params=params, headers=AUTH, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def _post(base: str, path: str, body: dict) -> dict:
    r = httpx.post(base + path, json=body, headers=AUTH, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def _verdicts(rows: list[dict]) -> dict[str, tuple]:
    return {r["url"]: (r["quilted"], r["patch_fraction"], json.dumps(r["sources"]))
            for r in rows}


def _quilted(base: str) -> dict[str, tuple]:
    return _verdicts(_get(base, "/api/quilts", limit=1000)["rows"])


def _same_quilts(base: str, want: dict) -> bool:
    return _quilted(base) == want


def _shown(run, embedded) -> dict:
    """The quilts of the embedded desk, once the Kafka desk shows the same (each test
    waits for them: a process may run any of them first)."""
    want = _verdicts(embedded.quilts(QuiltFilter(), 0, 1000)["rows"])
    wait_for(lambda: _same_quilts(run.base, want), timeout=180)
    return want


def test_the_kafka_desk_shows_what_the_embedded_desk_shows(review):
    run, embedded = review
    want = _shown(run, embedded)
    assert len(want) >= 4  # quilts to show
    assert _quilted(run.base) == want
    for url in want:
        got, ref = _get(run.base, "/api/page", url=url), embedded.page(url)
        assert got["page"]["text"] == ref["page"]["text"]
        for g, r in zip(got["page"]["sources"], ref["page"]["sources"], strict=True):
            assert (g["url"], g["grams"], g["share"], g["spans"]) == (
                r["url"], r["grams"], r["share"], r["spans"])
            # the passages from shared grams hold every passage of the patch grams
            assert _covers(g["passages"], r["passages"]), (url, g["url"])
        assert got["page"]["verdict"] == ref["page"]["verdict"]
        assert got["cluster"] is not None or ref["cluster"] is None
    # a source no event names: its text, as a page of its own
    source = json.loads(next(iter(want.values()))[2])[0]["url"]
    html = httpx.get(run.base + "/page", params={"url": source}, headers=AUTH)
    assert html.status_code == 200 and "no verdict event names this page" in html.text
    got = _get(run.base, "/api/page", url=source)["page"]
    assert got["text"] == embedded.page(source)["page"]["text"] and got["sources"] == []


def _covers(outer: list[dict], inner: list[dict]) -> bool:
    return all(any(o["spans"][0] <= i["spans"][0] and i["spans"][1] <= o["spans"][1]
                   for o in outer) for i in inner)


def test_two_instances_share_the_view_the_labels_and_the_draws(review):
    run, embedded = review
    want = _shown(run, embedded)
    b = run.start("b")
    wait_for(lambda: _same_quilts(b, want), timeout=60)
    assert _quilted(b) == want
    first, second = sorted(want)[:2]
    on_a = _post(run.base, "/api/labels", {"url": first, "verdict": "spam", "note": "from a"})
    on_b = _post(b, "/api/labels", {"url": second, "verdict": "not_spam"})
    assert on_b["id"] > on_a["id"]  # ids are the labels topic's order
    for base in (run.base, b):
        got = wait_for(lambda base=base: [x["note"] for x in _get(base, "/api/page", url=first)
                                          ["labels"]], timeout=30)
        assert got == ["from a"]
    drawn = _post(b, "/api/draws", {"n": 3, "seed": 7})
    assert len(drawn["urls"]) == 3 and set(drawn["urls"]) <= set(want)
    shown = wait_for(lambda: httpx.get(run.base + f"/api/draws/{drawn['name']}", headers=AUTH
                                       ).status_code == 200, timeout=30)
    assert shown
    assert _get(run.base, f"/api/draws/{drawn['name']}")["urls"] == drawn["urls"]
    export = [httpx.get(base + "/api/labels.jsonl", headers=AUTH).text for base in (run.base, b)]
    assert export[0] == export[1] and len(export[0].splitlines()) >= 2


def test_the_commands_read_and_write_the_labels_topic(review):
    """`review export | precision | sample N --broker` without a desk's help: the same
    labels as the desks export, and a draw every desk then shows. It labels two pages
    itself: a process may run it without the test above (pytest-xdist deals tests out)."""
    run, embedded = review
    want = _shown(run, embedded)
    for url, verdict in zip(sorted(want)[-2:], ("spam", "not_spam"), strict=True):
        _post(run.base, "/api/labels", {"url": url, "verdict": verdict})
    wait_for(lambda: len(httpx.get(run.base + "/api/labels.jsonl", headers=AUTH
                                   ).text.splitlines()) >= 2, timeout=30)
    args = [*run.args]
    exported = streamdet("review", "export", *args).stdout.decode()
    assert exported == httpx.get(run.base + "/api/labels.jsonl", headers=AUTH).text
    assert len(exported.splitlines()) >= 2
    report = json.loads(streamdet("review", "precision", *args, "--all", "--json").stdout)
    assert report == _get(run.base, "/api/precision", all="1")
    out = streamdet("review", "sample", "2", *args, "--seed", "3")
    name = out.stderr.decode().split("draw ")[1].split(":")[0]
    urls = out.stdout.decode().split()
    assert len(urls) == 2 and set(urls) <= set(_quilted(run.base))
    assert wait_for(lambda: httpx.get(run.base + f"/api/draws/{name}", headers=AUTH
                                      ).status_code == 200, timeout=30)
    assert _get(run.base, f"/api/draws/{name}")["urls"] == urls


def test_an_acknowledged_label_survives_a_kill_9(review):
    run, embedded = review
    _shown(run, embedded)
    url = sorted(_quilted(run.base))[-1]
    label = _post(run.base, "/api/labels", {"url": url, "verdict": "unsure", "note": "kill"})
    run.desks["a"].send_signal(signal.SIGKILL)
    run.desks["a"].wait(30)
    run.base = run.start("a")
    labels = wait_for(lambda: [x for x in map(json.loads, httpx.get(
        run.base + "/api/labels.jsonl", headers=AUTH).text.splitlines()) if x["id"] == label["id"]])
    assert labels and labels[0]["note"] == "kill" and labels[0]["url"] == url
    assert _get(run.base, "/api/page", url=url)["labels"][-1]["note"] == "kill"


def test_records_that_are_not_events_or_labels_change_nothing(review, kafka_broker):
    from aiokafka import AIOKafkaProducer

    run, embedded = review
    _shown(run, embedded)
    before = _quilted(run.base)
    url = sorted(before)[0]
    junk = [b"not json", b"[1, 2]", b'{"event": "quilt", "url": "x", "seq": "1"}',
            json.dumps({"event": "quilt", "url": url, "seq": 10**15, "at": 5}).encode(),
            json.dumps({"event": "quilt", "url": url, "seq": 10**15, "sources": "s"}).encode(),
            json.dumps({"event": 5, "url": url, "seq": 10**15}).encode(),
            None, b"[" * 100_000 + b"]" * 100_000]  # a tombstone; JSON nested too deep
    labels = [b"\xff\xfe", b'{"record": "label", "label": {"url": "x", "verdict": "maybe"}}',
              b'{"record": "draw", "draw": {"urls": "x"}}', None, b"[" * 100_000]

    async def send() -> None:
        p = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
        await p.start()
        try:
            for value in junk:
                await p.send_and_wait(f"{run.prefix}-events", value, key=url.encode())
            for value in labels:
                await p.send_and_wait(f"{run.prefix}-review-labels", value, key=b"junk",
                                      partition=0)
        finally:
            await p.stop()
    def skipped() -> int:  # by the instances of the group, whichever reads each partition
        return sum(_get(base, "/api/status")["skipped"] for base in run.bases.values())
    before_skipped = skipped()
    run_sync(send())
    assert wait_for(lambda: skipped() >= before_skipped + len(junk) + len(labels), timeout=60)
    assert _quilted(run.base) == before
    assert _get(run.base, "/api/page", url=url)["page"]["url"] == url
    assert all(x["verdict"] != "maybe" for x in map(json.loads, httpx.get(
        run.base + "/api/labels.jsonl", headers=AUTH).text.splitlines()))
    assert run.desks["a"].poll() is None


def test_the_desk_refuses_a_broker_with_no_pipeline(kafka_broker, tmp_path: Path):
    from .kafka_broker import unique_name

    r = streamdet("review", "--broker", kafka_broker.bootstrap, "--prefix", unique_name("none"),
                  "--desk", tmp_path / "desk", check=False)
    assert r.returncode == 2 and b"no streamdet pipeline" in r.stderr


def test_the_desk_reaches_the_brokers_as_every_client_does(monkeypatch):
    """faust's credentials from the same environment as every aiokafka client's."""
    import faust

    from streamdet.review.faust_app import credentials

    assert credentials("b:9092") is None
    monkeypatch.setenv("STREAMDET_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("STREAMDET_KAFKA_SASL_USERNAME", "desk")
    monkeypatch.setenv("STREAMDET_KAFKA_SASL_PASSWORD", "pw")
    got = credentials("b:9092")
    assert isinstance(got, faust.SASLCredentials)
    assert (got.username, got.password, str(got.mechanism.value)) == ("desk", "pw",
                                                                        "SCRAM-SHA-512")
    monkeypatch.setenv("STREAMDET_KAFKA_SECURITY_PROTOCOL", "SSL")
    assert isinstance(credentials("b:9092"), faust.SSLCredentials)
    monkeypatch.setenv("STREAMDET_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    got = credentials("b:9092")
    assert isinstance(got, faust.SASLCredentials) and got.ssl_context is not None
