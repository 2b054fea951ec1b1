"""engine.shard_opening's ShardLog on Kafka: what opening a shard needs from the worker
and the broker (adapters.worker opens its shards through it).

A shard's state lives under the worker's state directory and is kept in its shard
tables from the moment it is opened, so a failed opening's membership closes it; epochs
come from the meta topic (adapters.kafka.claim_shard), records and partition ends from
the broker, committed offsets from the worker's group consumer; sends go through the
worker's producer (its outbox sending), CPU work runs on its engine thread.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from ..engine.shard_step import Outbox, ShardState
from . import failpoints
from .kafka import Topics, claim_shard, high_watermarks, read_all
from .sensor import Sensor

REPLAY_CHUNK = 500  # records per transaction while rebuilding a shard


class KafkaShardLog:
    """A worker's ShardLog: `open_state` opens a state and keeps it in the worker's
    tables, `run` is its engine thread, `send` its outbox sending (acknowledged, then
    cleared), `cut` whether a rebalance is revoking."""

    def __init__(self, broker: str, topics: Topics, producer, consumer: AIOKafkaConsumer,
                 sensor: Sensor, *, open_state: Callable[[str, int], Awaitable[Any]],
                 run: Callable[..., Awaitable[Any]],
                 send: Callable[[Any, list[Outbox]], Awaitable[None]],
                 cut: Callable[[], bool]) -> None:
        self.broker, self.topics, self.sensor = broker, topics, sensor
        self.producer, self.consumer = producer, consumer
        self.open, self.run, self.send, self.cut = open_state, run, send, cut

    async def wipe(self, state: ShardState) -> ShardState:
        """The state's directory deleted and opened anew (adapters.worker.Shard)."""
        await self.run(state.close)
        await self.run(shutil.rmtree, state.path)
        return await self.open(state.kind, state.index)

    async def claim(self, kind: str, index: int) -> tuple[int, int]:
        return await claim_shard(self.broker, self.topics.meta, self.producer, kind, index)

    async def committed(self, name: str, index: int) -> int:
        return await self.consumer.committed(TopicPartition(self.topic(name), index)) or 0

    async def chunks(self, name: str, index: int, start: int, end: int
                     ) -> AsyncGenerator[list[tuple[int, bytes | None]], None]:
        async with contextlib.aclosing(read_all(self.broker, self.topic(name), index, start,
                                                end, max_records=REPLAY_CHUNK,
                                                gapless=True)) as reader:
            async for recs in reader:
                yield [(rec.offset, rec.value) for rec in recs]

    async def ends(self, index: int, reached: dict[str, int]) -> dict[str, int]:
        tps = {name: TopicPartition(self.topic(name), index) for name in reached}
        high = await high_watermarks(self.broker, {tps[n]: at for n, at in reached.items()})
        return {name: high[tp] for name, tp in tps.items()}

    def topic(self, name: str) -> str:
        return getattr(self.topics, name)

    def replayed(self, name: str, index: int, records: int) -> None:
        self.sensor.on_replayed(records)
        if name == "deltas":
            failpoints.hit(f"replayed-deltas-{index}")  # tests: die amid a take-over's replay
