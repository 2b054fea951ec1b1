"""`streamdet produce` and `streamdet events`: records into the pages topic, events out.

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
from typing import BinaryIO

from aiokafka import AIOKafkaConsumer, TopicPartition

from .inputs import ReadOptions, Source
from .kafka import Topics, connection, ensure_topics, producer
from .pacing import RateLimiter

IN_FLIGHT = 500  # sends awaited in groups of this many


def _url_key(payload: bytes | dict) -> bytes | None:
    try:
        obj = payload if isinstance(payload, dict) else json.loads(payload)
        url = obj.get("url") if isinstance(obj, dict) else None
        return url.encode("utf-8") if isinstance(url, str) else None
    except (ValueError, UnicodeError, AttributeError):
        return None


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
                value = rec.payload if isinstance(rec.payload, bytes) else json.dumps(
                    rec.payload, ensure_ascii=False).encode("utf-8")
                if rec.spilled:  # an oversized line kept on disk by the reader
                    with open(rec.spilled, "rb") as f:
                        value = f.read()
                pending.append(await p.send(topics.pages, value=value, key=_url_key(rec.payload)))
                n += 1
                if len(pending) >= IN_FLIGHT:
                    await asyncio.gather(*pending)
                    pending = []
        await asyncio.gather(*pending)
    finally:
        await p.stop()
    return n


async def print_events(broker: str, out: BinaryIO, idle: float, topics: Topics | None = None
                       ) -> int:
    """Write the events topic as JSONL from its start until it has been idle `idle` s."""
    topics = topics or Topics()
    c = AIOKafkaConsumer(**connection(broker), enable_auto_commit=False,
                         auto_offset_reset="earliest")
    await c.start()
    n = 0
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
                    out.write(r.value.rstrip(b"\n") + b"\n")
                    n += 1
                last = loop.time()
            out.flush()
    finally:
        await c.stop()
    return n


def stdout() -> BinaryIO:
    return sys.stdout.buffer
