"""The Kafka desk's reads of the pipeline's docs topic: a page's record at the place its
index gives (partition, offset), for the page view (page_view.page_of_records).

One consumer outside any group, every partition assigned and all but the one read
paused, reads one record at a time; the newest records read are kept (a farm's donors
are the sources of many of its quilts, and a reviewer opens a quilt's sources too)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from aiokafka import AIOKafkaConsumer, TopicPartition

from ..adapters.kafka import connection

KEEP = 256  # records kept (a page's record is tens of KB)
WAIT_S = 10.0  # for a record the index names: longer is a broker in trouble
FETCH_WAIT_MS = 20  # the broker answers a fetch after about half this when it has nothing


class DocReader:
    def __init__(self, broker: str, topic: str, keep: int = KEEP) -> None:
        self.broker, self.topic, self.keep = broker, topic, keep
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()
        self._kept: OrderedDict[tuple[int, int], bytes | None] = OrderedDict()

    async def start(self) -> None:
        c = AIOKafkaConsumer(**connection(self.broker), enable_auto_commit=False,
                             fetch_max_wait_ms=FETCH_WAIT_MS, max_partition_fetch_bytes=8 << 20,
                             fetch_max_bytes=64 << 20)
        await c.start()
        await c.topics()  # the cluster's metadata, so that the topic's partitions are known
        parts = c.partitions_for_topic(self.topic) or set()
        c.assign([TopicPartition(self.topic, p) for p in sorted(parts)])
        c.pause(*c.assignment())
        self._consumer = c

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    async def read(self, partition: int, offset: int) -> bytes | None:
        """The value of the record at (partition, offset) (None: not there any more)."""
        place = (partition, offset)
        async with self._lock:
            if place in self._kept:
                self._kept.move_to_end(place)
                return self._kept[place]
            value = await self._fetch(TopicPartition(self.topic, partition), offset)
            self._kept[place] = value
            while len(self._kept) > self.keep:
                self._kept.popitem(last=False)
            return value

    async def _fetch(self, tp: TopicPartition, offset: int) -> bytes | None:
        c = self._consumer
        assert c is not None, "DocReader.start() first"
        c.resume(tp)
        try:
            c.seek(tp, offset)
            loop = asyncio.get_running_loop()
            end = loop.time() + WAIT_S
            while loop.time() < end:
                got = await c.getmany(tp, timeout_ms=200, max_records=1)
                for rec in got.get(tp, []):
                    return rec.value if rec.offset == offset else None  # past it: deleted
            raise TimeoutError(f"no record at {tp.topic}[{tp.partition}]@{offset} within "
                               f"{WAIT_S:.0f} s")
        finally:
            c.pause(tp)
