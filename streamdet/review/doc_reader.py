"""The Kafka desk's reads of the pipeline's docs topic: pages' records at the places its
index gives (partition, offset), for the page view (page_view.page_of_records).

One consumer outside any group reads them: a page's record and its sources' in rounds,
each round one fetch that seeks every partition concerned to the next place wanted on
it (a quilt's sources are spread over the doc shards' partitions). A fetch returns
whole record batches from the place on, so the most a partition returns per fetch is
kept small: the broker still returns the batch that holds the record, and not the
batches after it. The newest records read are kept (a farm's donors are the sources of
many of its quilts, and a reviewer opens a quilt's sources too)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition

from ..adapters.kafka import connection

KEEP = 2048  # records kept (a page's record is tens of KB: some 50 MB). A reviewer's
# round of 50 quilts reads their pages and sources, 300 records and more; with fewer
# kept, going through the same quilts again found none of them (least recently used)
WAIT_S = 10.0  # for a record the index names: longer is a broker in trouble
FETCH_WAIT_MS = 20  # the broker answers a fetch after about half this when it has nothing
PARTITION_FETCH_BYTES = 64 << 10  # a fetch still returns the whole batch holding a record

Place = tuple[int, int]  # (partition, offset)


class DocReader:
    def __init__(self, broker: str, topic: str, keep: int = KEEP) -> None:
        self.broker, self.topic, self.keep = broker, topic, keep
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()
        self._kept: OrderedDict[Place, bytes | None] = OrderedDict()

    async def start(self) -> None:
        c = AIOKafkaConsumer(**connection(self.broker), enable_auto_commit=False,
                             fetch_max_wait_ms=FETCH_WAIT_MS,
                             max_partition_fetch_bytes=PARTITION_FETCH_BYTES)
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

    async def read(self, places: Iterable[Place]) -> dict[Place, bytes | None]:
        """The value of the record at each place (None: not there any more)."""
        wanted = list(dict.fromkeys(places))
        async with self._lock:
            found = {p: self._kept[p] for p in wanted if p in self._kept}
            for p in found:
                self._kept.move_to_end(p)
            todo = sorted(p for p in wanted if p not in found)
            while todo:
                first: dict[int, int] = {}
                for part, offset in todo:
                    first.setdefault(part, offset)
                got = await self._fetch(first)
                for place, value in got.items():
                    found[place] = value
                    self._kept[place] = value
                todo = [p for p in todo if p not in got]
            while len(self._kept) > self.keep:
                self._kept.popitem(last=False)
        return {p: found[p] for p in wanted}

    async def _fetch(self, offsets: dict[int, int]) -> dict[Place, bytes | None]:
        """One record from each partition, at its offset (None: past it, deleted)."""
        c = self._consumer
        assert c is not None, "DocReader.start() first"
        tps = {TopicPartition(self.topic, p): o for p, o in offsets.items()}
        c.resume(*tps)
        try:
            for tp, offset in tps.items():
                c.seek(tp, offset)
            out: dict[Place, bytes | None] = {}
            loop = asyncio.get_running_loop()
            end = loop.time() + WAIT_S
            while len(out) < len(tps) and loop.time() < end:
                got = await c.getmany(*tps, timeout_ms=200, max_records=len(tps))
                for tp, recs in got.items():
                    place = (tp.partition, tps[tp])
                    if recs and place not in out:
                        out[place] = recs[0].value if recs[0].offset == tps[tp] else None
                        c.pause(tp)
            if len(out) < len(tps):
                raise TimeoutError(f"no record at {sorted(tps.items())} within {WAIT_S:.0f} s")
            return out
        finally:
            c.pause(*tps)
