"""Kafka plumbing shared by `streamdet worker`, `produce` and `events`: topic names, topic
creation, the pipeline's parameter record, client settings.

Topics (SPEC §4 names the public ones; the internal ones are ours):
    streamdet-pages        the crawler's fetch topic (any partitioning, any keys)
    streamdet-docs         pages routed to their doc shard (partition = hash(URL) mod P)
    streamdet-grams        grams of a document for one gram shard (partition = gram shard)
    streamdet-deltas       deltas for one doc shard's documents, and that doc shard's own
                           records of what its events showed (partition = doc shard)
    streamdet-events       quilt / rescore / unquilt / partial / partial_gone, keyed by URL
    streamdet-dead-letter  bad records: the original bytes, the reason in headers
    streamdet-meta         the parameters and shard count of the pipeline (its first
                           record), then one ownership epoch record per shard claimed
    streamdet-review-labels  the spam team's labels (SPEC §10), one partition: the review
                           desk's judgements and draws, and `streamdet label --broker`'s

Every topic is created explicitly before any client touches it: a broker that
auto-creates topics (tansu does, with 4 partitions) would otherwise pick partition counts.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from ..engine.params import Params, ParamsError
from .contiguity import Gaps, following_on

# How the shards of a pipeline talk. shards-2: grams adds leave from the pages stage and
# gram shards keep a URL table (see engine.shards). shards-3: a page's record carries its
# packed visible text (SPEC §5 evidence), which a shards-2 doc shard would refuse as
# trailing bytes and skip, losing the page; and a ShownMsg carries its round's events.
# shards-4: a page's record carries its sentences, a grams add the rows of its sentence
# keys and a deltas message links (SPEC §7), which a shards-3 shard would misread (a page
# record of four arrays) or drop. shards-5: a page's record and its add to gram shard 0
# carry its sketch, and deltas messages cluster rows (SPEC §6), which a shards-4 shard
# would misread (a page record of five arrays loses its sentences) or drop. shards-6: a
# page's record and its adds carry its paragraph chunks, deltas messages the site shard's
# shares and parts, and grams messages labels (SPEC §8), which a shards-5 shard would
# drop (its pages would count in no neighbourhood) or refuse. shards-7: a page's sentences
# have runs of repeats as one and keys common in the page as NO_KEY (SPEC §9), which a
# shards-6 shard would post. shards-8: every doc shard keeps copies of what the spam
# score reads (parts, pair moves and cluster rows to every doc shard, shares to their
# documents' doc shards: engine.score_replica), which a shards-7 shard neither sends nor
# keeps (its events would carry scores of figures it never received). shards-9: a page's
# record carries its grams' count, not its grams (they go to the gram shards alone), a
# deltas message each distinct gram list once (messages version 3), the workers forward
# the labels topic's labels to every doc shard, and doc shards send each other the
# examples the model trains on (engine.spam_labels), which a shards-8 shard would read as
# a page of no grams, refuse, or pass over (the others would wait for its examples for
# ever). shards-10: doc shards tell each other's copies of the pairs from both sides each
# URL's whole set of owned partners, stamped (engine.pair_records), not pair moves, which
# a shards-9 shard would pass over (its copies would keep pairs that are gone). A pipeline
# of another format is refused rather than mixed with it.
PIPELINE_FORMAT = "shards-10"
PRODUCER_BATCH_BYTES = 1 << 20  # per partition and request (see producer())
COMPRESSION_TYPES = ("zstd", "lz4", "gzip", "none")


class PipelineError(RuntimeError):
    """The pipeline on this broker cannot be joined (other parameters, other shards)."""


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def connection(broker: str) -> dict:
    """How every client of this process reaches the brokers: the bootstrap server, and
    TLS and SASL as the environment asks (STREAMDET_KAFKA_SECURITY_PROTOCOL, _SASL_
    MECHANISM, _SASL_USERNAME, _SASL_PASSWORD, _SSL_CAFILE; deploy/README.md). The
    secrets stay out of the process list."""
    env = os.environ.get
    protocol = (env("STREAMDET_KAFKA_SECURITY_PROTOCOL") or "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise PipelineError(f"STREAMDET_KAFKA_SECURITY_PROTOCOL must be one of "
                            f"{', '.join(SECURITY_PROTOCOLS)}, not {protocol!r}")
    settings: dict = {"bootstrap_servers": broker, "security_protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        from aiokafka.helpers import create_ssl_context

        settings["ssl_context"] = create_ssl_context(cafile=env("STREAMDET_KAFKA_SSL_CAFILE"))
    if protocol.startswith("SASL"):
        mechanism = (env("STREAMDET_KAFKA_SASL_MECHANISM") or "SCRAM-SHA-512").upper()
        if mechanism not in SASL_MECHANISMS:
            raise PipelineError(f"STREAMDET_KAFKA_SASL_MECHANISM must be one of "
                                f"{', '.join(SASL_MECHANISMS)}, not {mechanism!r}")
        user, password = env("STREAMDET_KAFKA_SASL_USERNAME"), env("STREAMDET_KAFKA_SASL_PASSWORD")
        if not user or password is None:
            raise PipelineError("SASL needs STREAMDET_KAFKA_SASL_USERNAME and "
                                "STREAMDET_KAFKA_SASL_PASSWORD")
        settings.update(sasl_mechanism=mechanism, sasl_plain_username=user,
                        sasl_plain_password=password)
    return settings


@dataclass(frozen=True)
class Topics:
    pages: str = "streamdet-pages"
    docs: str = "streamdet-docs"
    grams: str = "streamdet-grams"
    deltas: str = "streamdet-deltas"
    events: str = "streamdet-events"
    dead: str = "streamdet-dead-letter"
    meta: str = "streamdet-meta"
    labels: str = "streamdet-review-labels"

    @classmethod
    def named(cls, prefix: str = "streamdet") -> Topics:
        """The topics of one pipeline; another prefix runs another pipeline on the same
        cluster (and in tests, on the same broker)."""
        return cls(*(f"{prefix}-{name}" for name in
                     ("pages", "docs", "grams", "deltas", "events", "dead-letter", "meta",
                      "review-labels")))


@dataclass(frozen=True)
class Timing:
    """Consumer-group timing. Short defaults suit a local broker and let a dead worker's
    shards move within seconds; a deployment may raise them (STREAMDET_SESSION_MS)."""

    session_ms: int = int(os.environ.get("STREAMDET_SESSION_MS", "6000"))
    heartbeat_ms: int = int(os.environ.get("STREAMDET_HEARTBEAT_MS", "500"))
    # the longest a worker lets records gather between the starts of two rounds, reached
    # while rounds keep it busy (adapters.round_pacer); 0: a round as soon as records come
    round_ms: int = int(os.environ.get("STREAMDET_ROUND_MS", "250"))

    def group_settings(self) -> dict:
        return dict(session_timeout_ms=self.session_ms, heartbeat_interval_ms=self.heartbeat_ms,
                    rebalance_timeout_ms=max(self.session_ms, 10000))


def producer(broker: str) -> AIOKafkaProducer:
    """acks=all: a message is only "sent" (and its input committed) once the broker has it.

    Record batches of up to 1 MB (aiokafka's default is 16 KB): our records are large (a
    page's grams are ~20 KB), so at 16 KB every record was a batch of its own, and ready
    at once, which sent a produce request per record or two instead of one per linger.
    The broker pays per batch and per request: the test broker spent ~0.35 ms of CPU per
    batch (2,000 records of 20 KB: 0.78 CPU s in single-record batches, 0.16 in 1 MB
    ones), and a worker's produce requests fell from ~1,650 to ~190 for 2,000 pages.

    Batches are compressed (Kafka's own `compression.type`, zstd by default,
    STREAMDET_COMPRESSION): the broker keeps and serves them as they are, and its cost
    grows with what it holds. The JSON of deltas messages and events, and the small
    numbers beside the grams, shrink several times; the grams themselves are random
    64-bit hashes and do not."""
    return AIOKafkaProducer(**connection(broker), acks="all", linger_ms=5,
                            max_batch_size=PRODUCER_BATCH_BYTES, max_request_size=64 << 20,
                            request_timeout_ms=30000, compression_type=compression())


def compression() -> str | None:
    """The producers' batch compression, STREAMDET_COMPRESSION (`none`: uncompressed,
    for a broker or consumers that cannot read zstd)."""
    name = os.environ.get("STREAMDET_COMPRESSION", "zstd").strip().lower()
    if name not in COMPRESSION_TYPES:
        raise PipelineError(f"STREAMDET_COMPRESSION is {name!r}; one of "
                            f"{', '.join(COMPRESSION_TYPES)}")
    return None if name == "none" else name


def pipeline_record(params: Params, shards: int) -> bytes:
    return json.dumps({"params": params.to_dict(), "shards": shards,
                       "format": PIPELINE_FORMAT}, sort_keys=True).encode()


async def ensure_topics(broker: str, topics: Topics, shards: int, pages_partitions: int) -> None:
    """Create the pipeline's topics that do not exist yet (an existing pages topic keeps
    the crawler's partitioning). Internal topics must have `shards` partitions."""
    admin = AIOKafkaAdminClient(**connection(broker))
    await admin.start()
    try:
        wanted = {topics.pages: pages_partitions, topics.docs: shards, topics.grams: shards,
                  topics.deltas: shards, topics.events: pages_partitions,
                  topics.dead: 1, topics.meta: 1, topics.labels: 1}
        # Create first, one by one: asking a broker that auto-creates topics (tansu) to
        # describe a missing topic would create it with its default partition count.
        for name, n in wanted.items():
            try:
                await admin.create_topics([NewTopic(name, n, 1)])
            except TopicAlreadyExistsError:
                pass
        await _wait_leaders(admin, list(wanted))
        existing = await admin.describe_topics([topics.docs, topics.grams, topics.deltas])
        for t in existing:
            if len(t["partitions"]) != shards:
                raise PipelineError(f"topic {t['topic']} has {len(t['partitions'])} partitions "
                                    f"but this pipeline runs {shards} shards; use --shards "
                                    f"{len(t['partitions'])}")
    finally:
        await admin.close()


async def ensure_topic(broker: str, name: str, partitions: int) -> None:
    """Create a topic of `partitions` partitions unless it exists (with any count)."""
    admin = AIOKafkaAdminClient(**connection(broker))
    await admin.start()
    try:
        try:
            await admin.create_topics([NewTopic(name, partitions, 1)])
        except TopicAlreadyExistsError:
            pass
        await _wait_leaders(admin, [name])
    finally:
        await admin.close()


async def topic_names(broker: str) -> set[str]:
    """The topics the brokers hold (asking for all of them creates none)."""
    admin = AIOKafkaAdminClient(**connection(broker))
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def _wait_leaders(admin: AIOKafkaAdminClient, names: list[str], timeout: float = 20.0
                        ) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        ready = await admin.describe_topics(names)
        if all(t.get("error_code", 0) == 0 and t["partitions"]
               and all(p.get("leader", -1) >= 0 for p in t["partitions"]) for t in ready):
            return
        if loop.time() > end:
            raise PipelineError(f"topics {names} have no leaders after {timeout:.0f} s")
        await asyncio.sleep(0.1)


async def read_all(broker: str, topic: str, partition: int, start: int, end: int | None,
                   idle_s: float = 2.0, max_records: int = 2000, gapless: bool = False):
    """Records of one partition from `start` up to `end` (exclusive), or, with end None,
    until nothing new arrived for idle_s. Async iterator of batches. `gapless` (an
    internal topic, where every offset holds a record): past a missing offset the read
    goes back to it, as a worker's rounds do (adapters.contiguity)."""
    if end is not None and start >= end:
        return
    c = AIOKafkaConsumer(**connection(broker), enable_auto_commit=False,
                         auto_offset_reset="earliest", fetch_max_bytes=64 << 20,
                         max_partition_fetch_bytes=64 << 20)
    await c.start()
    try:
        tp = TopicPartition(topic, partition)
        c.assign([tp])
        c.seek(tp, start)
        pos = start
        loop = asyncio.get_running_loop()
        last = loop.time()
        gaps = Gaps()
        while end is None or pos < end:
            got = await c.getmany(tp, timeout_ms=200, max_records=max_records)
            recs = got.get(tp, [])
            if gapless:
                recs, missing = following_on(recs, pos)
                if missing is not None and (end is None or missing < end):
                    gaps.missing(tp, missing, loop.time(), f"{topic}[{partition}]")
                    c.seek(tp, missing)
            if end is not None:
                recs = [r for r in recs if r.offset < end]
            if recs:
                pos = recs[-1].offset + 1
                last = loop.time()
                yield recs
            elif end is None and loop.time() - last > idle_s:
                return
    finally:
        await c.stop()


async def high_watermarks(broker: str, positions: dict[TopicPartition, int]
                          ) -> dict[TopicPartition, int]:
    """Each partition's high watermark, as a fetch from `positions` reports it (the end
    offsets ListOffsets gives are wrong on tansu; fetching from a recent position reads
    little)."""
    c = AIOKafkaConsumer(**connection(broker), enable_auto_commit=False,
                         fetch_max_wait_ms=50)
    await c.start()
    try:
        c.assign(list(positions))
        for tp, offset in positions.items():
            c.seek(tp, offset)
        while any(c.highwater(tp) is None for tp in positions):
            await c.getmany(*positions, timeout_ms=200, max_records=1)
        return {tp: c.highwater(tp) for tp in positions}
    finally:
        await c.stop()


async def join_pipeline(broker: str, topics: Topics, params: Params, shards: int) -> None:
    """Record this pipeline's parameters on the meta topic, or check them against the
    record already there; refuse to join a pipeline built with other ones."""
    first = await _first_meta(broker, topics.meta)
    if first is None:
        p = producer(broker)
        await p.start()
        try:
            await p.send_and_wait(topics.meta, pipeline_record(params, shards), partition=0)
        finally:
            await p.stop()
        first = await _first_meta(broker, topics.meta)  # another worker may have been first
    stored = json.loads(first)
    if stored.get("format", "shards-1") != PIPELINE_FORMAT:
        raise PipelineError(
            f"the pipeline on topic {topics.meta} was built by a streamdet whose shards talk "
            f"another way (format {stored.get('format', 'shards-1')}, this one "
            f"{PIPELINE_FORMAT}); start a new pipeline (--prefix) or stop every worker of it "
            "and run one version")
    try:
        params.check_same(Params(**stored["params"]), f"the pipeline on topic {topics.meta}")
    except ParamsError as exc:
        raise PipelineError(str(exc)) from None
    if stored["shards"] != shards:
        raise PipelineError(f"the pipeline on topic {topics.meta} runs {stored['shards']} "
                            f"shards; this worker was started with {shards}")


def epoch_record(kind: str, index: int, epoch: int) -> bytes:
    return json.dumps({"epoch": epoch, "kind": kind, "shard": index}, sort_keys=True).encode()


def _epoch_of(value: bytes | None, kind: str, index: int) -> int:
    """The epoch a meta record gives this shard (0: it is about something else)."""
    try:
        obj = json.loads(value or b"")
    except ValueError:
        return 0
    if isinstance(obj, dict) and obj.get("kind") == kind and obj.get("shard") == index:
        return int(obj.get("epoch", 0))
    return 0


async def claim_shard(broker: str, meta_topic: str, sender, kind: str, index: int
                      ) -> tuple[int, int]:
    """Ownership epochs of a shard, kept on the meta topic: returns (the newest recorded
    before, the one now recorded for this owner, newest + 1), the latter acknowledged.

    Why: an owner's outputs derive from its own history of the shard's inputs (its
    batching decides the intermediate states and the event seqs). A later owner numbers
    its events above every earlier owner's (seq carries the epoch), and a state written
    under an older epoch than the newest comes from a history another owner has since
    replaced, so it is rebuilt, not trusted, and its outboxes are not re-sent. The
    meta topic rather than group-commit metadata: the test broker drops that metadata."""
    newest = 0
    c = AIOKafkaConsumer(**connection(broker), enable_auto_commit=False)
    await c.start()
    try:
        tp = TopicPartition(meta_topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        while True:  # to the high watermark of a fetch (ListOffsets is wrong on tansu)
            got = await c.getmany(tp, timeout_ms=200, max_records=5000)
            for rec in got.get(tp, []):
                newest = max(newest, _epoch_of(rec.value, kind, index))
            high = c.highwater(tp)
            if high is not None and await c.position(tp) >= high:
                break
    finally:
        await c.stop()
    await sender.send_and_wait(meta_topic, epoch_record(kind, index, newest + 1), partition=0)
    return newest, newest + 1


async def pipeline_shards(broker: str, topics: Topics) -> int | None:
    """The shard count of the pipeline on these topics (None: no pipeline yet)."""
    first = await _first_meta(broker, topics.meta)
    return None if first is None else int(json.loads(first)["shards"])


async def pipeline_params(broker: str, topics: Topics) -> Params | None:
    """The parameters of the pipeline on these topics (None: no pipeline yet)."""
    first = await _first_meta(broker, topics.meta)
    return None if first is None else Params(**json.loads(first)["params"])


async def _first_meta(broker: str, topic: str) -> bytes | None:
    async for batch in read_all(broker, topic, 0, 0, None, idle_s=1.0, max_records=1):
        return batch[0].value
    return None
