"""Reading an internal partition without a hole (adapters.contiguity): the run a shard may
apply, the patience before a hole counts as lost records, and a gapless read of a real
broker's partition that several producers write at once (tansu may serve a later batch
before an earlier one it already counted)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from streamdet.adapters import kafka
from streamdet.adapters.contiguity import Gaps, SkippedRecords, following_on
from streamdet.adapters.kafka import read_all

from .kafka_broker import KafkaBroker, kafka_broker_fixture, unique_name  # noqa: F401


def _offsets(*offsets: int) -> list:
    return [SimpleNamespace(offset=o) for o in offsets]


@pytest.mark.parametrize(("fetched", "start", "run", "missing"), [
    ((), 5, [], None),
    ((5, 6, 7), 5, [5, 6, 7], None),
    ((3, 4, 5, 6), 5, [5, 6], None),        # applied already: dropped
    ((3, 4), 5, [], None),                  # nothing new
    ((7, 8), 5, [], 5),                     # starts past the state
    ((5, 6, 9, 10), 5, [5, 6], 7),          # a hole inside
    ((4, 5, 5, 6), 5, [5, 6], None),        # a record fetched twice (a seek back)
])
def test_the_run_that_follows_on_and_the_first_missing_offset(fetched, start, run, missing):
    got, hole = following_on(_offsets(*fetched), start)
    assert [r.offset for r in got] == run and hole == missing


def test_a_hole_fails_only_once_the_same_offset_stays_missing_past_the_patience():
    gaps = Gaps(patience_s=10.0)
    gaps.missing("p", 7, now=100.0, what="doc shard 1: deltas")
    gaps.missing("p", 7, now=110.0, what="doc shard 1: deltas")  # at the patience
    gaps.missing("q", 3, now=200.0, what="other")  # another partition's own clock
    gaps.missing("p", 9, now=111.0, what="doc shard 1: deltas")  # 7 came: a new hole
    gaps.missing("p", 9, now=121.0, what="doc shard 1: deltas")
    with pytest.raises(SkippedRecords, match="doc shard 1: deltas: offset 9 has been "
                                             "missing for 11 s"):
        gaps.missing("p", 9, now=122.0, what="doc shard 1: deltas")
    gaps.filled("p")
    gaps.missing("p", 9, now=500.0, what="doc shard 1: deltas")  # counted afresh
    assert gaps.since == {"p": (9, 500.0), "q": (3, 200.0)}


async def _write(bootstrap: str, topic: str, writer: int, batches: int) -> None:
    """Batches of 1-5 records, each value `writer:seq`, every batch awaited (acks=all)."""
    prod = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=2, acks="all")
    await prod.start()
    try:
        seq = 0
        for b in range(batches):
            sent = []
            for _ in range(1 + (b * 7 + writer) % 5):
                sent.append(await prod.send(topic, f"{writer}:{seq}".encode() + b"x" * 4000,
                                            partition=0))
                seq += 1
            await asyncio.gather(*sent)
    finally:
        await prod.stop()


def test_a_gapless_read_of_a_partition_three_producers_write_misses_no_offset(
        kafka_broker: KafkaBroker):
    """Read while three producers write one partition: every offset comes once, in
    order, and each producer's records come in the order it sent them."""
    topic = unique_name("gapless")
    kafka_broker.create_topics({topic: 1})

    async def main() -> list:
        writers = [asyncio.create_task(_write(kafka_broker.bootstrap, topic, w, 400))
                   for w in range(3)]
        got = []
        async for recs in read_all(kafka_broker.bootstrap, topic, 0, 0, None, idle_s=3.0,
                                   max_records=500, gapless=True):
            got.extend(recs)
        await asyncio.gather(*writers)
        return got

    got = asyncio.run(main())
    assert [r.offset for r in got] == list(range(len(got)))
    seqs: dict[str, list[int]] = {}
    for r in got:
        writer, seq = r.value.split(b"x", 1)[0].decode().split(":")
        seqs.setdefault(writer, []).append(int(seq))
    for w in range(3):
        sent = sum(1 + (b * 7 + w) % 5 for b in range(400))
        assert seqs[str(w)] == list(range(sent)), w


class _LateBatch(AIOKafkaConsumer):
    """A consumer whose first fetch that reaches offsets 10-12 comes without them, as
    tansu serves a batch it counted but has not stored yet."""

    served_late = False

    async def getmany(self, *partitions, **kwargs) -> dict:
        got = await super().getmany(*partitions, **kwargs)
        if not _LateBatch.served_late:
            for tp, recs in got.items():
                if any(r.offset in (10, 11, 12) for r in recs) and recs[-1].offset > 12:
                    _LateBatch.served_late = True
                    got[tp] = [r for r in recs if r.offset not in (10, 11, 12)]
        return got


@pytest.mark.parametrize("gapless", [True, False])
def test_a_batch_served_late_is_read_again_by_a_gapless_read(kafka_broker: KafkaBroker,
                                                             monkeypatch, gapless):
    """The worker's replays read gapless: every offset, in order. A read that is not
    (the review's, of topics that may be compacted) takes what it is served."""
    topic = unique_name("late")
    kafka_broker.create_topics({topic: 1})
    monkeypatch.setattr(kafka, "AIOKafkaConsumer", _LateBatch)
    monkeypatch.setattr(_LateBatch, "served_late", False)

    async def main() -> list[int]:
        prod = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all")
        await prod.start()
        try:
            for i in range(30):
                await prod.send_and_wait(topic, b"%d" % i, partition=0)
        finally:
            await prod.stop()
        got = []
        async for recs in read_all(kafka_broker.bootstrap, topic, 0, 0, 30,
                                   max_records=20, gapless=gapless):
            got.extend(r.offset for r in recs)
        return got

    got = asyncio.run(main())
    assert _LateBatch.served_late
    assert got == (list(range(30)) if gapless else [*range(10), *range(13, 30)])


def test_broker_gaps_reads_every_record_the_producers_sent(kafka_broker: KafkaBroker):
    """loadtest/broker_gaps.py: whatever the broker serves, the count of fetches that
    skipped offsets comes with every record read once (the reader went back each time)."""
    from loadtest.broker_gaps import measure

    got = asyncio.run(measure(kafka_broker, producers=2, batches=60,
                              topic=unique_name("gaps")))
    assert got["records"] == got["records_sent"] >= 120
    assert 0 <= got["fetches_that_skipped"] < got["fetches"]
