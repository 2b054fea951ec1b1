"""Alerts from the events topic (`PREFIX-events`) in a consumer group of the alerter's own.

The group's offsets are committed (the offset metadata field is too small for the seqs,
which stay in the position file). Over `--max-pending` the partitions are paused, the
group membership kept. Several alerters in one group share the partitions; each keeps its
own position file, so an event delivered but not yet committed when its partition moves
may be alerted again by the new owner."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from ..adapters.kafka import Timing, connection
from .alerter import Alerter
from .config import AlertsConfig
from .lifecycle import OnStart, drive
from .position import Position
from .stats import Stats
from .timing import Clock, sleep_unless

log = logging.getLogger("streamdet.alerts")

POLL_S = 0.2  # how long an idle consumer waits for records
KAFKA_BATCH = 1000
TOPIC_WAIT_LOG_S = 30.0



class Rebalance(ConsumerRebalanceListener):
    """Revoked partitions: commit what is done there, forget the rest (the next owner reads
    it again)."""

    def __init__(self) -> None:
        self.alerter: Alerter | None = None

    async def on_partitions_revoked(self, revoked) -> None:
        if self.alerter is not None and revoked:
            try:
                await self.alerter.commit(force=True)
            except Exception as exc:  # noqa: BLE001 - the next owner re-reads; no loss
                log.warning("commit on revocation failed: %s", exc)
            self.alerter.drop_keys(set(revoked))

    async def on_partitions_assigned(self, assigned) -> None:
        if assigned:
            log.info("assigned %s", ", ".join(f"{tp.topic}[{tp.partition}]"
                                              for tp in sorted(assigned)))


async def wait_topic(broker: str, topic: str, stop: asyncio.Event) -> bool:
    """Until the events topic exists (listing topics, which never auto-creates one, unlike
    subscribing to it on a broker that auto-creates topics). False if stopped first."""
    admin = AIOKafkaAdminClient(**connection(broker))
    await admin.start()
    try:
        waited = 0.0
        while True:
            if topic in await admin.list_topics():
                return True
            if waited == 0 or waited >= TOPIC_WAIT_LOG_S:
                log.info("waiting for topic %s to exist", topic)
                waited = 0.0
            if await sleep_unless(stop, 1.0):
                return False
            waited += 1.0
    finally:
        await admin.close()


def _consumer(cfg: AlertsConfig, listener: Rebalance):
    consumer = AIOKafkaConsumer(**connection(cfg.broker), group_id=cfg.group_id,
                                enable_auto_commit=False, auto_offset_reset=cfg.start,
                                fetch_max_wait_ms=100, **Timing().group_settings())
    consumer.subscribe([cfg.events_topic], listener=listener)
    return consumer


def _committer(consumer, state: Position, pool: ThreadPoolExecutor, box: list[Alerter]):
    """The alerter's commit: the seqs to the position file, then the group's offsets."""
    loop = asyncio.get_running_loop()
    committed: dict[Any, int] = {}

    async def commit(ready: dict, alerted: list) -> None:
        if alerted:
            await loop.run_in_executor(pool, state.save, None, alerted)
        owned = consumer.assignment()
        offsets = {tp: pos for tp, pos in ready.items()
                   if tp in owned and committed.get(tp) != pos}
        if not offsets:
            return
        try:
            await consumer.commit(offsets)
        except (CommitFailedError, IllegalStateError, KafkaError) as exc:
            # Rebalanced meanwhile: the next owner reads these again; our seqs are saved.
            log.warning("offset commit failed (%s); continuing", exc)
            return
        committed.update(offsets)
        box[0].stats.position = {tp.partition: off for tp, off in sorted(committed.items())}

    return commit


async def run_kafka(cfg: AlertsConfig, state: Position, pool: ThreadPoolExecutor,
                    stop: asyncio.Event, on_start: OnStart, clock: Clock) -> Stats:
    if not await wait_topic(cfg.broker, cfg.events_topic, stop):
        return Stats()

    listener = Rebalance()
    consumer = _consumer(cfg, listener)
    await consumer.start()
    box: list[Alerter] = []
    try:
        alerter = Alerter(cfg, state.alerted, _committer(consumer, state, pool, box), clock)
        box.append(alerter)
        listener.alerter = alerter
        if on_start:
            on_start(alerter)
        await drive(alerter, lambda: _read(cfg, consumer, alerter, stop), stop)
        return alerter.stats
    finally:
        listener.alerter = None
        await consumer.stop()


async def _read(cfg: AlertsConfig, consumer, alerter: Alerter, stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    last = None  # the idle clock starts once partitions are assigned
    paused = False
    while not stop.is_set():
        owned = consumer.assignment()
        if last is None and owned:
            last = loop.time()
        if not alerter.has_room():
            consumer.pause(*owned)  # keep polling: the group membership stays
            paused = True
        elif paused:
            consumer.resume(*owned)
            paused = False
        batch = await consumer.getmany(timeout_ms=int(POLL_S * 1000), max_records=KAFKA_BATCH)
        for tp, recs in batch.items():
            for r in recs:
                if r.value is None:
                    alerter.skip(tp, r.offset + 1)
                else:
                    alerter.offer(r.value, tp, r.offset + 1)
            if recs:
                last = loop.time()
        if cfg.idle is not None and last is not None and loop.time() - last >= cfg.idle:
            return
