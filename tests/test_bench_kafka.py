"""loadtest/bench_kafka.py: the records its sender reads back from a stream's half, how
latency is bucketed, and which events a latency run counts."""

from __future__ import annotations

import asyncio
import json
import time

from aiokafka import AIOKafkaProducer

from loadtest import bench_kafka as bk
from loadtest.bench_kafka import raw_records

from .kafka_broker import KafkaBroker, kafka_broker_fixture, run_sync  # noqa: F401 - fixture


def test_raw_records_are_the_lines_bytes_as_written(tmp_path):
    """Each record is its line's bytes, unchanged (no re-encoding; U+2028 and non-ASCII
    text stay raw inside strings), blank lines skipped, a last line without b"\\n" kept."""
    pages = [{"url": "http://a.example/1", "html": "caf\u00e9 \u2028 line\u2029 \U0001f600"},
             {"url": "http://b.example/2", "html": "<p>x\r</p>"}]
    lines = [json.dumps(p, ensure_ascii=False).encode("utf-8") for p in pages]
    path = tmp_path / "segment.jsonl"
    path.write_bytes(lines[0] + b"\n\n" + lines[1])
    assert raw_records(path) == [(p["url"], raw) for p, raw in zip(pages, lines, strict=True)]


def test_latency_by_minute_buckets_events_by_send_time_with_the_cores_of_that_minute():
    """Events go to the minute their page was sent in; the cores of a minute come from
    the CPU samples that bracket it (here the broker uses 1 CPU s per s in the first
    minute and 0.5 in the second, the workers 0.25 throughout)."""
    from loadtest.bench_kafka import by_minute, format_minute

    t0 = 1_000.0
    series = [(1.0, 0.1), (30.0, 0.3), (59.9, 0.2), (60.0, 2.0), (119.0, 4.0)]
    samples = [(t0 + s, (s if s <= 60 else 60 + (s - 60) * 0.5), 0.25 * s)
               for s in (0.0, 30.0, 60.0, 90.0, 120.0)]
    rows = by_minute(series, t0, samples)
    assert [r["minute"] for r in rows] == [0, 1]
    assert [r["events"] for r in rows] == [3, 2]
    assert rows[0]["p50_s"] == 0.2 and rows[1]["p50_s"] == 3.0
    assert abs(rows[0]["broker_cores"] - 1.0) < 1e-9
    assert abs(rows[1]["broker_cores"] - 0.5) < 1e-9
    assert abs(rows[1]["workers_cores"] - 0.25) < 1e-9
    assert "broker 1.00 cores" in format_minute(rows[0])
    assert by_minute([], t0, samples) == []
    own = [(1.0, 0.05), (30.0, 0.1), (61.0, 0.9)]
    rows = by_minute(series, t0, samples, own=own)
    assert abs(rows[0]["own_p50_s"] - 0.075) < 1e-9 and rows[1]["own_p99_s"] == 0.9
    assert "own p99    900 ms" in format_minute(rows[1])


def test_stages_cut_each_latency_at_the_pipelines_own_records():
    """intake: send -> the analysed page's record; own: -> the event's record; delivery:
    -> receipt. Events of pages not sent here, or never seen analysed, are left out."""
    from loadtest.bench_kafka import format_stages, stages

    sent = {"http://a/": 100.0, "http://b/": 110.0, "http://c/": 120.0}
    analysed = {"http://a/": 100.5, "http://b/": 110.25, "http://warm/": 50.0}
    stamped = [("http://a/", 101.0, 101.125), ("http://b/", 112.25, 112.5),
               ("http://c/", 121.0, 121.5), ("http://warm/", 51.0, 51.5)]
    cut = stages(sent, analysed, stamped)
    assert cut["events"] == 2
    assert cut["own_series"] == [(0.0, 0.5), (10.0, 2.0)]
    assert cut["intake"]["max_s"] == 0.5 and cut["own"]["max_s"] == 2.0
    assert cut["delivery"]["p50_s"] == (0.125 + 0.25) / 2
    assert "own p50 1250 / p99 1985 ms" in format_stages(cut)
    assert stages(sent, {}, stamped)["events"] == 0
    assert "none" in format_stages(stages(sent, {}, stamped))


def test_minutes_pass_every_minute_or_own_with_the_early_minutes():
    from loadtest.bench_kafka import minute_verdict

    def rows(e2e, own):
        return [{"minute": m, "events": 1, "p99_s": a, "own_p99_s": b}
                for m, (a, b) in enumerate(zip(e2e, own, strict=True))]

    assert minute_verdict(rows([1.0] * 12, [1.5] * 12))["pass"]
    late = rows([1.0] * 10 + [5.0, 9.0], [0.5] * 12)  # the broker's growth, late
    assert minute_verdict(late) == {"every_minute": False, "own_every_minute": True,
                                    "early_minutes": True, "pass": True}
    assert not minute_verdict(rows([1.0] * 10 + [5.0], [0.5] * 10 + [1.2]))["pass"]
    assert not minute_verdict(rows([3.0] + [1.0] * 11, [0.5] * 12))["pass"]
    assert not minute_verdict([])["pass"]


def test_latency_by_kind_keeps_each_kind_apart_with_its_slowest_cause():
    """A site event that names a page sent long before shows under `site`, not in the
    page events' figures; events of pages this run did not send are left out."""
    from loadtest.bench_kafka import by_kind, format_kind

    sent = {"http://a/": 100.0, "http://b/": 101.0}
    received = [("http://a/", 100.2, "quilt"), ("http://b/", 101.4, "quilt"),
                ("http://b/", 101.5, "rescore"), ("http://a/", 160.0, "site"),
                ("http://warm-up/", 102.0, "quilt")]
    rows = by_kind(received, sent)
    assert sorted(rows) == ["quilt", "rescore", "site"]
    assert rows["quilt"]["events"] == 2
    assert abs(rows["quilt"]["max_s"] - 0.4) < 1e-9
    assert rows["quilt"]["slowest_cause"] == "http://b/"
    assert abs(rows["site"]["p50_s"] - 60.0) < 1e-9
    assert rows["site"]["slowest_cause"] == "http://a/"
    assert "site" in format_kind("site", rows["site"])
    assert by_kind([], sent) == {}


class _Pipe:
    """What _latency_run reads of a bench pipeline: its broker and topic prefix."""

    def __init__(self, broker: KafkaBroker, prefix: str) -> None:
        self.broker, self.prefix = broker, prefix


def _late_event_run(kafka_broker: KafkaBroker, monkeypatch, prefix: str, wait: bool) -> dict:
    """A latency run of one page whose event leaves 1 s after the page is sent (a shard
    behind), with a `wait_done` that returns once it is out (the pipeline idle). Without
    the wait it leaves 4 s after: well after the run's own reading has ended, however
    slowly a loaded machine starts its consumer."""
    kafka_broker.create_topics({f"{prefix}-events": 1, f"{prefix}-docs": 1})
    sent_at = time.time()
    late_s = 1.0 if wait else 4.0

    async def send(bootstrap, topic, records, rate=None):
        return {"http://a.example/1": sent_at}

    async def late_event() -> None:
        await asyncio.sleep(late_s)
        producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
        await producer.start()
        # the page analysed 250 ms after its send, its event's record 500 ms after that
        analysed_ms = int(sent_at * 1000) + 250
        await producer.send_and_wait(f"{prefix}-docs", b"page", key=b"http://a.example/1",
                                     timestamp_ms=analysed_ms)
        ev = {"event": "quilt", "url": "http://a.example/1", "seq": 1,
              "cause": "http://a.example/1"}
        await producer.send_and_wait(f"{prefix}-events", json.dumps(ev).encode(),
                                     timestamp_ms=analysed_ms + 500)
        await producer.stop()

    async def done(pipe, n_pages, on_look=None):
        assert n_pages == 1
        await late_event()

    async def run() -> dict:
        pipe = _Pipe(kafka_broker, prefix)
        if wait:
            return await bk._latency_run(pipe, [("u", b"{}")], 1.0, None, 1)
        task = asyncio.create_task(late_event())
        res = await bk._latency_run(pipe, [("u", b"{}")], 1.0)
        await task
        return res

    monkeypatch.setattr(bk, "send_records", send)
    monkeypatch.setattr(bk, "wait_done", done)
    monkeypatch.setattr(bk, "LAST_EVENTS_S", 0.2)
    monkeypatch.setattr(bk, "DRAIN_GRACE_S", 0.5)
    return run_sync(run())


def test_a_latency_run_counts_the_events_a_shard_behind_sends_after_the_stream(
        kafka_broker: KafkaBroker, monkeypatch):
    res = _late_event_run(kafka_broker, monkeypatch, "drain-wait", wait=True)
    assert res["events"] == 1 and res["p99_s"] >= 1.0
    assert res["drain_s"] >= 1.0
    cut = res["stages"]  # the records' own timestamps, as the broker keeps them
    assert cut["events"] == 1
    assert abs(cut["own"]["p50_s"] - 0.5) < 1e-6
    assert abs(cut["intake"]["p50_s"] - 0.25) < 0.002  # the send time's sub-millisecond part
    assert cut["delivery"]["p50_s"] > 0


def test_without_waiting_for_the_pipeline_a_late_event_is_left_out(
        kafka_broker: KafkaBroker, monkeypatch):
    res = _late_event_run(kafka_broker, monkeypatch, "drain-none", wait=False)
    assert res["events"] == 0


def test_topic_traffic_counts_each_topics_records_and_bytes_a_page(kafka_broker: KafkaBroker):
    """Records from each partition's start to its end, bytes of keys, values and headers;
    the input topic's records counted, its bytes not (the crawler's, not the pipeline's);
    another prefix's topics left out. `stored` counts the record batches as the broker
    keeps them: compressed ones compressed."""
    kafka_broker.create_topics({"traffic-grams": 2, "traffic-pages": 1, "other-grams": 1,
                                "traffic-deltas": 1})

    async def fill() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=50)
        await producer.start()
        # several records a batch: the end is the high watermark, not ListOffsets (which
        # tansu answers with the last batch's first offset + 1)
        sent = [await producer.send("traffic-grams", b"v" * 10, key=b"kk", partition=i % 2,
                                    headers=[("h", b"xyz")]) for i in range(5)]
        await asyncio.gather(*sent)
        for _ in range(2):
            await producer.send_and_wait("traffic-pages", b"p" * 1000, key=b"url")
        await producer.send_and_wait("other-grams", b"o" * 99)
        await producer.stop()
        packed = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=50,
                                  compression_type="zstd")
        await packed.start()
        await asyncio.gather(*[await packed.send("traffic-deltas", b"d" * 5000)
                               for _ in range(20)])
        await packed.stop()

    run_sync(fill())
    got = run_sync(bk.topic_traffic(kafka_broker.bootstrap, "traffic", pages=2))
    assert sorted(got) == ["deltas", "grams", "pages"]
    assert got["grams"]["records"] == 5 and got["grams"]["bytes"] == 5 * (2 + 10 + 1 + 3)
    assert got["grams"]["records_a_page"] == 2.5 and got["grams"]["bytes_a_page"] == 40
    # uncompressed: the records and each batch's own header (61 bytes)
    assert got["grams"]["stored"] >= 5 * (2 + 10 + 1 + 3) + 2 * 61
    assert got["pages"] == {"records": 2, "bytes": 0, "stored": 0, "records_a_page": 1.0,
                            "bytes_a_page": 0, "stored_a_page": 0}
    deltas = got["deltas"]
    assert deltas["records"] == 20 and deltas["bytes"] == 100_000
    assert 0 < deltas["stored"] < 2_000 and deltas["stored_a_page"] == deltas["stored"] / 2
    lines = bk.format_traffic(got)
    assert "deltas" in lines[0] and "grams" in lines[1]
    assert lines[-1].split()[:3] == ["written", "by", "it"]
