"""`streamdet review sample N | export | precision --broker`: the desk's commands on Kafka,
with or without a desk running. They read the labels topic (and, to draw, the events
topic) from the start to its end, the Fetch high watermark (ListOffsets is wrong on the
test broker), and fold the records as the desk's agents do; a draw, or a judgement of
`streamdet label --broker`, is written to the labels topic as the desk writes one, so
every desk of the pipeline shows it."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from dataclasses import replace

from aiokafka import TopicPartition

from ..adapters.kafka import (
    Topics,
    ensure_topic,
    high_watermarks,
    producer,
    read_all,
    topic_names,
)
from .kafka_desk import DeskUnavailable
from .kafka_labels import KafkaLabels, draw_record, label_record, parse_record
from .labels import Label
from .projection import View, apply, event_of
from .sampling import draw


async def _records(broker: str, topic: str) -> AsyncIterator:
    """Every record of every partition of `topic`, to its end when asked."""
    from aiokafka import AIOKafkaConsumer

    from ..adapters.kafka import connection

    c = AIOKafkaConsumer(**connection(broker), enable_auto_commit=False)
    await c.start()
    try:
        await c.topics()
        parts = sorted(c.partitions_for_topic(topic) or ())
    finally:
        await c.stop()
    ends = await high_watermarks(broker, {TopicPartition(topic, p): 0 for p in parts})
    for tp, end in ends.items():
        async for batch in read_all(broker, topic, tp.partition, 0, end):
            for rec in batch:
                yield rec


async def read_labels(broker: str, topic: str) -> KafkaLabels:
    """The labels and draws on the labels topic, folded (read-only: no writer)."""
    labels = KafkaLabels(_no_writes, threading.RLock())
    if topic not in await topic_names(broker):
        return labels
    async for rec in _records(broker, topic):
        found = parse_record(rec.value, rec.offset)
        if found is not None and found[0] == "label":
            labels.fold(found[1])
        elif found is not None:
            labels.fold_draw(found[1]["name"], found[1])
    return labels


async def read_view(broker: str, topics: Topics) -> View:
    """The events topic folded into the desk's view."""
    if topics.events not in await topic_names(broker):
        raise DeskUnavailable(f"no events topic {topics.events} on {broker}")
    view = View()
    async for rec in _records(broker, topics.events):
        ev = event_of(rec.value)
        if ev is not None:
            apply(view, ev)
    return view


async def sample(broker: str, topics: Topics, labels_topic: str, n: int, seed: int,
                 params: dict, at: str) -> dict:
    """Draw n pages quilted now and write the draw to the labels topic; the draw."""
    view = await read_view(broker, topics)
    quilted = [u for u, ev in view.quilts.items() if ev.get("event") != "unquilt"]
    if not quilted:
        raise DeskUnavailable("no quilted page to draw from yet")
    urls = draw(quilted, n, seed)
    offset = await _write(broker, labels_topic, draw_record(urls, seed, params, at))
    return {"name": f"s{offset + 1}", "at": at, "seed": seed, "params": params,
            "urls": urls}


async def write_label(broker: str, labels_topic: str, label: Label) -> Label:
    """Write a judgement to the labels topic as the desk writes one (every desk of the
    pipeline shows it, and the workers train on it); the label with its id."""
    return replace(label, id=await _write(broker, labels_topic, label_record(label)) + 1)


async def _write(broker: str, labels_topic: str, value: bytes) -> int:
    """A record on the labels topic (one partition, made if missing), acknowledged by
    the brokers; its offset."""
    await ensure_topic(broker, labels_topic, 1)
    p = producer(broker)
    await p.start()
    try:
        return (await p.send_and_wait(labels_topic, value, partition=0)).offset
    finally:
        await p.stop()


def _no_writes(value: bytes) -> int:
    raise DeskUnavailable("these labels were read to report, not to write")
