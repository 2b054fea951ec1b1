"""`streamdet events` (SPEC §4) prints the events topic as JSONL whatever it holds: a
tombstone or a value that is not a JSON object is skipped and told on stderr (SPEC §9),
never written raw, and a pretty-printed event comes out on one line."""

from __future__ import annotations

import json

import pytest

from streamdet.adapters.publish import event_line

from .cli_helpers import streamdet
from .kafka_broker import (  # noqa: F401 - fixtures
    KafkaBroker,
    kafka_broker_fixture,
    run_sync,
    unique_name,
)

QUILT = {"event": "quilt", "url": "http://a.example/1", "seq": 1, "quilted": True}
RESCORE = {"event": "rescore", "url": "http://b.example/2", "seq": 3, "quilted": False}


async def _produce(bootstrap: str, topic: str, values: list[bytes | None]) -> None:
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await p.start()
    try:
        for i, v in enumerate(values):
            await p.send_and_wait(topic, v, key=f"k{i}".encode(), partition=0)
    finally:
        await p.stop()


@pytest.mark.parametrize(("value", "line"), [
    (None, None),
    (b"", None),
    (b"not json", None),
    (b"[1, 2]", None),
    (b"\xff\xfe", None),
    (b"[" * 100_000, None),
    (b'{"event": "quilt"}', b'{"event": "quilt"}\n'),
    (b'{"event": "quilt"}\n', b'{"event": "quilt"}\n'),
    (b'{\n  "event": "quilt",\n  "url": "http://x/\\u2028"\n}', b'{"event":"quilt","url":"http://x/\xe2\x80\xa8"}\n'),
])
def test_an_events_value_is_one_jsonl_line_or_none(value, line):
    assert event_line(value) == line


def test_events_skips_tombstones_and_values_that_are_no_event(kafka_broker: KafkaBroker):
    prefix = unique_name("ev")
    topic = f"{prefix}-events"
    kafka_broker.create_topics({topic: 1})
    pretty = json.dumps(RESCORE, indent=2).encode()
    run_sync(_produce(kafka_broker.bootstrap, topic,
                      [json.dumps(QUILT).encode(), None, b"<html>", b"[]", pretty, None]))
    proc = streamdet("events", "--broker", kafka_broker.bootstrap, "--prefix", prefix,
                     "--idle", "2")
    lines = proc.stdout.splitlines()
    assert [json.loads(x) for x in lines] == [QUILT, RESCORE]
    err = proc.stderr.decode()
    assert f"{topic}[0]@1: a tombstone" in err and f"{topic}[0]@2: not a JSON object" in err
    assert "skipped 2 tombstones and 2 values that are not JSON objects" in err
    assert "Traceback" not in err
