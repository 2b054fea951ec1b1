"""`streamdet produce` and `streamdet events`: records into the pages topic, events out;
`streamdet label-chunks --broker`: labelled chunks to the gram shards.

produce sends each record's bytes as they are (a JSONL line, or a WARC page as JSON), so
bad records reach the workers - and their dead-letter topic - exactly as a crawler's
would. The key is the record's URL when one can be read (the crawler's usual choice);
workers do not depend on it.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterable
from typing import BinaryIO, TextIO

import numpy as np
from aiokafka import AIOKafkaConsumer, TopicPartition

from ..engine.messages import GramsMsg
from .inputs import ReadOptions, Source
from .kafka import PipelineError, Topics, connection, ensure_topics, pipeline_shards, producer
from .outputs import json_line
from .rate_limiter import RateLimiter

IN_FLIGHT = 500  # sends awaited in groups of this many


def _url_key(payload: bytes | dict) -> bytes | None:
    try:
        obj = payload if isinstance(payload, dict) else json.loads(payload)
        url = obj.get("url") if isinstance(obj, dict) else None
        return url.encode("utf-8", "surrogatepass") if isinstance(url, str) else None
    except (ValueError, UnicodeError, AttributeError, RecursionError):
        return None


def payload_value(payload: bytes | dict) -> bytes:
    """A record as a pages-topic value: bytes as they came; an object (a WARC record's)
    as UTF-8 JSON, or, should it hold a lone surrogate, as ASCII JSON that escapes it, so
    that a worker validates the very object `run` would (SPEC §9)."""
    if isinstance(payload, bytes):
        return payload
    try:
        return json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(payload).encode("ascii")


async def produce(broker: str, sources: Iterable[Source], topics: Topics | None = None,
                  rate: float | None = None, shards: int = 4, partitions: int = 4) -> int:
    """Publish every record of the sources; returns how many. `rate` limits pages/s."""
    topics = topics or Topics()
    await ensure_topics(broker, topics, shards, partitions)
    p = producer(broker)
    await p.start()
    n, pending = 0, []
    # no burst limit: a producer held up by the broker sends what it owes at once
    limiter = RateLimiter(rate, asyncio.get_running_loop().time, burst=None) if rate else None
    try:
        for source in sources:
            for rec in source.records(ReadOptions(max_body=1 << 62)):
                if limiter:
                    await limiter.wait_async()
                value = payload_value(rec.payload)
                pending.append(await p.send(topics.pages, value=value, key=_url_key(rec.payload)))
                n += 1
                if len(pending) >= IN_FLIGHT:
                    await asyncio.gather(*pending)
                    pending = []
        await asyncio.gather(*pending)
    finally:
        await p.stop()
    return n


async def print_events(broker: str, out: BinaryIO, idle: float, topics: Topics | None = None,
                       err: TextIO = sys.stderr) -> int:
    """Write the events topic as JSONL from its start until it has been idle `idle` s.
    What is not an event - a tombstone, a value that is not a JSON object - is skipped,
    told on `err` (the first few with their offsets, then a count), never written: the
    output stays JSONL whatever the topic holds (SPEC §9)."""
    topics = topics or Topics()
    c = AIOKafkaConsumer(**connection(broker), enable_auto_commit=False,
                         auto_offset_reset="earliest")
    await c.start()
    n, skipped = 0, SkippedEvents(err)
    try:
        parts = c.partitions_for_topic(topics.events) or set()
        if not parts:
            await c.force_metadata_update() if hasattr(c, "force_metadata_update") else None
            parts = c.partitions_for_topic(topics.events) or set()
        tps = [TopicPartition(topics.events, p) for p in sorted(parts)]
        if not tps:
            return 0
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        loop = asyncio.get_running_loop()
        last = loop.time()
        while loop.time() - last < idle:
            got = await c.getmany(timeout_ms=200)
            for recs in got.values():
                for r in recs:
                    line = event_line(r.value)
                    if line is None:
                        skipped.add(r.topic, r.partition, r.offset, r.value)
                        continue
                    out.write(line)
                    n += 1
                last = loop.time()
            out.flush()
    finally:
        await c.stop()
        skipped.summary()
    return n


def event_line(value: bytes | None) -> bytes | None:
    """An events-topic value as one JSONL line, or None when it is no event (a tombstone,
    not JSON, not an object). A value already on one line is written as it came."""
    if value is None:
        return None
    try:
        obj = json.loads(value)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    raw = value.rstrip(b"\r\n")
    return raw + b"\n" if b"\n" not in raw and b"\r" not in raw else json_line(obj)


class SkippedEvents:
    """Values of the events topic that were no event: the first few told with where they
    are, then how many in all."""

    TOLD = 5

    def __init__(self, err: TextIO) -> None:
        self.err = err
        self.tombstones = self.other = 0

    def add(self, topic: str, partition: int, offset: int, value: bytes | None) -> None:
        if value is None:
            self.tombstones += 1
        else:
            self.other += 1
        if self.tombstones + self.other <= self.TOLD:
            why = "a tombstone" if value is None else "not a JSON object"
            print(f"streamdet events: skipped {topic}[{partition}]@{offset}: {why}",
                  file=self.err)

    def summary(self) -> None:
        if self.tombstones or self.other:
            print(f"streamdet events: skipped {self.tombstones} tombstones and "
                  f"{self.other} values that are not JSON objects", file=self.err)


async def send_labels(broker: str, keys: np.ndarray, cause: str, topics: Topics | None = None
                      ) -> int:
    """Send chunk keys a user labels (SPEC §8's informed discovery) to the gram shards
    that own them, one grams message per shard (a label sent twice changes nothing);
    returns the pipeline's shard count."""
    topics = topics or Topics()
    shards = await pipeline_shards(broker, topics)
    if shards is None:
        raise PipelineError(f"no pipeline on topic {topics.meta}: start its workers first")
    owner = keys % np.uint64(shards)
    p = producer(broker)
    await p.start()
    try:
        await asyncio.gather(*[await p.send(topics.grams, partition=g, value=GramsMsg(
            "label", 0, keys[owner == g], url=cause).encode()) for g in range(shards)])
    finally:
        await p.stop()
    return shards


def stdout() -> BinaryIO:
    return sys.stdout.buffer
