"""What the test broker's requests cost as a partition fills with record batches.

bench_kafka runs on tansu with memory storage (loadtest/kafka_broker.py). Its latency step
slows over a run in a way a log-structured Kafka broker would not, and this measures why:
a fresh broker, one partition filled with one-record batches (a batch per worker round is
what a pipeline writes), and at each size the broker's CPU per produce-and-fetch of one
record at the partition's end, per produce alone, per offset commit, and while a consumer
polls the idle end. Prints a line per size and writes the JSON to loadtest/out.

    python -m loadtest.broker_costs                 # 100 to 200,000 batches (~3 min)
    python -m loadtest.broker_costs --smoke         # 100 and 2,000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from loadtest.bench_kafka import cpu_seconds
from loadtest.kafka_broker import broker_session

OUT = Path(__file__).resolve().parent / "out"
PAIRS = 100  # requests timed at each size


async def _fill(producer, topic: str, batches: int) -> None:
    """One-record batches: linger 0 and a yield between sends."""
    for _ in range(0, batches, 500):
        sent = []
        for _ in range(500):
            sent.append(await producer.send(topic, b"y" * 300))
            await asyncio.sleep(0)
        await asyncio.gather(*sent)


async def _per_request(pid: int, request, n: int = PAIRS) -> tuple[float, float]:
    """(broker CPU ms, wall ms at the median) of one `request()`, over n of them."""
    walls = []
    cpu = cpu_seconds(pid)
    for _ in range(n):
        t = time.perf_counter()
        await request()
        walls.append(time.perf_counter() - t)
    return (cpu_seconds(pid) - cpu) / n * 1000, sorted(walls)[n // 2] * 1000


async def measure(broker, sizes: list[int]) -> list[dict]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    broker.create_topics({"filled": 1})
    tp = TopicPartition("filled", 0)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0, acks="all")
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="costs",
                                enable_auto_commit=False, fetch_max_wait_ms=20)
    await producer.start()
    await consumer.start()
    consumer.assign([tp])
    pid, held, rows = broker.process.pid, 0, []
    try:
        for size in sizes:
            await _fill(producer, "filled", size - held)
            held = max(held, size)

            async def produce_and_fetch():
                md = await producer.send_and_wait("filled", b"x" * 300)
                consumer.seek(tp, md.offset)
                await consumer.getmany(tp, timeout_ms=2000)

            async def produce():
                await producer.send_and_wait("filled", b"x" * 300)

            async def commit():
                await consumer.commit({tp: 1})

            row = {"batches": held}
            for name, request in (("produce_and_fetch", produce_and_fetch),
                                  ("produce", produce), ("commit", commit)):
                cpu_ms, wall_ms = await _per_request(pid, request)
                row[name] = {"broker_cpu_ms": round(cpu_ms, 3), "median_ms": round(wall_ms, 3)}
                if name != "commit":
                    held += PAIRS  # a batch per request
            cpu, t = cpu_seconds(pid), time.perf_counter()
            await consumer.getmany(tp, timeout_ms=3000)  # at the end: empty fetches
            row["idle_poll_cores"] = round((cpu_seconds(pid) - cpu) / (time.perf_counter() - t), 3)
            rows.append(row)
            print(f"{held:>7} batches: produce+fetch {row['produce_and_fetch']['broker_cpu_ms']}"
                  f" ms of broker CPU, produce {row['produce']['broker_cpu_ms']}, commit "
                  f"{row['commit']['broker_cpu_ms']}; idle polling {row['idle_poll_cores']}"
                  " cores", flush=True)
    finally:
        await consumer.stop()
        await producer.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,25000,100000,200000",
                    help="batches the partition holds at each measurement")
    ap.add_argument("--smoke", action="store_true", help="100 and 2,000 batches")
    args = ap.parse_args(argv)
    sizes = [100, 2000] if args.smoke else [int(x) for x in args.sizes.split(",")]
    with broker_session() as broker:
        rows = asyncio.run(measure(broker, sorted(sizes)))
    OUT.mkdir(exist_ok=True)
    path = OUT / f"broker_costs-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    path.write_text(json.dumps({"sizes": sizes, "rows": rows}, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
