"""How often the test broker serves a fetch that skips offsets.

tansu advances a partition's high watermark before it stores the batch that advanced it.
A fetch that arrives in between, while a later batch from another producer is already
stored, gets the later batch without the earlier one; the earlier one is served to the
next fetch from its offset. A pipeline writes its internal partitions from several
workers at once, so a worker that took such a fetch as it came would skip records
(adapters.contiguity reads again from the hole). This writes one partition from
--producers producers at once (batches of 1-5 records of up to 20 kB, each batch
awaited) while a consumer reads its end with a short fetch wait, and counts the fetches
that skipped offsets. Prints one line and writes the JSON to loadtest/out.

    python -m loadtest.broker_gaps                      # 3 producers, 3,000 batches each
    python -m loadtest.broker_gaps --batches 300        # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from pathlib import Path

from loadtest.kafka_broker import broker_session

OUT = Path(__file__).resolve().parent / "out"


async def _write(bootstrap: str, topic: str, batches: int, rng: random.Random) -> int:
    """Records sent."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=2, acks="all")
    await producer.start()
    n = 0
    try:
        for _ in range(batches):
            sent = [await producer.send(topic, b"x" * rng.randint(100, 20000), partition=0)
                    for _ in range(rng.randint(1, 5))]
            await asyncio.gather(*sent)
            n += len(sent)
    finally:
        await producer.stop()
    return n


async def measure(broker, producers: int, batches: int, topic: str = "gaps") -> dict:
    """Fetches, those that skipped offsets, records sent and records read (each offset
    once: after a skip the consumer goes back to the hole)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    broker.create_topics({topic: 1})
    writers = [asyncio.create_task(_write(broker.bootstrap, topic, batches,
                                          random.Random(seed))) for seed in range(producers)]
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                                fetch_max_wait_ms=20, auto_offset_reset="earliest")
    await consumer.start()
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    fetches = skipped = at = 0
    try:
        while True:
            got = (await consumer.getmany(tp, timeout_ms=200)).get(tp, [])
            if not got:
                if all(w.done() for w in writers):
                    break
                continue
            fetches += 1
            for rec in got:
                if rec.offset > at:
                    skipped += 1
                    consumer.seek(tp, at)
                    break
                at = max(at, rec.offset + 1)
    finally:
        await consumer.stop()
    sent = sum(await asyncio.gather(*writers))
    return {"producers": producers, "batches_each": batches, "fetches": fetches,
            "fetches_that_skipped": skipped, "records_sent": sent, "records": at}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--producers", type=int, default=3)
    ap.add_argument("--batches", type=int, default=3000, help="batches each producer sends")
    args = ap.parse_args()
    with broker_session() as broker:
        result = asyncio.run(measure(broker, args.producers, args.batches))
    print(f"{result['producers']} producers, {result['records']:,} records: "
          f"{result['fetches_that_skipped']} of {result['fetches']:,} fetches skipped offsets",
          flush=True)
    OUT.mkdir(exist_ok=True)
    (OUT / "broker_gaps.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
