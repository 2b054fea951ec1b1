"""`streamdet worker`: one member of the Kafka pipeline (aiokafka consumer group).

Every worker subscribes to the pages topic and the three internal topics; the group's
range assignor gives docs partition s and deltas partition s to the same worker, so a
worker owns whole doc shards, plus gram shards and a share of the crawler's partitions.
Each shard keeps its own RocksDB state under STATE/doc-<s> or STATE/gram-<g> (`Shard`).

Per fetched batch (a *round*, `_handle`): the pages stage validates and analyses; each
shard takes its step (engine.shard_step: process, commit state, offsets and the round's
outbox in one write), then the worker sends the outbox; `_finish` commits the group's
offsets once the round's records and every earlier round's are acknowledged. On
assignment a shard is claimed (a new ownership epoch), its outboxes are sent again, and
it replays its partitions up to the group's committed offsets (engine.shard_opening, on
adapters.kafka_shard_log). The protocol and why it
is exact through crashes, rebalances and changes of owner are written once, in
docs/kafka-protocol.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from ..engine.badness import bad_count
from ..engine.documents import DOC_ROLE, GRAM_ROLE
from ..engine.events import trap_event
from ..engine.messages import GramsMsg, PageMsg, decode_doc_input
from ..engine.params import Params
from ..engine.records import DEFAULT_MAX_BODY
from ..engine.routing import docno_for, url_shard
from ..engine.shard_opening import open_shard
from ..engine.shard_step import (
    GRAMS_OUT,
    SHOWN_OUT,
    Outbox,
    ShardState,
    process_docs,
    process_grams,
)
from ..engine.shards import DocShard, GramShard, label_forwards, page_adds
from ..engine.site_shard import SITE_SHARD
from ..engine.spam_labels import label_of_record
from ..reading.views import monster_counts
from ..state.budget import MemoryBudget
from ..state.rocks import RocksKV, RocksMemory, dir_bytes
from ..state.txn import StateError, Store
from ..state.write_counts import WriteCounts
from . import failpoints
from .allocator import release_free_memory
from .batch_sizer import BatchSizer
from .contiguity import Gaps, following_on
from .inputs import PREFIX_KEPT
from .kafka import (
    PipelineError,
    Timing,
    Topics,
    connection,
    ensure_topics,
    high_watermarks,
    join_pipeline,
    producer,
)
from .kafka_shard_log import KafkaShardLog
from .metrics import metrics
from .outputs import utc_at, utc_now
from .payloads import analyze_payloads, warm_up
from .round_pacer import RoundPacer
from .sensor import Sensor
from .state_format import SHARD, check_state
from .watchdog import DEFAULT_PAGE_TIMEOUT, Aborted, AnalysisPool

log = logging.getLogger("streamdet.worker")
FETCH_WAIT_MS = 20  # a fetch returns at once when data is there; this bounds the idle wait per hop
# a failed membership rejoins after a pause, doubled at each failure in a row, up to a max
REJOIN_PAUSE_S, REJOIN_PAUSE_MAX_S = 1.0, 60.0
REFUSALS = (PipelineError, StateError)  # not retried: the operator must act
# records a round takes at most (a doc shard's part of it also by the documents it holds:
# adapters.batch_sizer); under a backlog a round gathers several fetches (Worker._fetch)
ROUND_RECORDS = 2000
MAX_INFLIGHT = 3  # rounds waiting for acknowledgements while the next one is processed
# Group offsets are committed at most this often while rounds keep coming (and at once when
# the worker goes idle, before a rebalance and on shutdown): a commit per round was a third
# of the broker requests of a stream of small rounds. Committing later is always safe: a new
# owner replays up to the committed offsets and processes (and sends) again after them.
COMMIT_INTERVAL_S = 0.25
RELEASE_INTERVAL_S = 1.0  # freed memory goes back to the system at most this often


class Shard(ShardState):
    """One shard's state directory, opened and checked: its offsets, outboxes and step
    are engine.shard_step's."""

    def __init__(self, kind: str, index: int, path: str, params: Params, shards: int,
                 budget: MemoryBudget | None = None, memory: RocksMemory | None = None
                 ) -> None:
        self.kind, self.index, self.path = kind, index, path
        store = Store(RocksKV(path, budget=budget, memory=memory))
        try:
            check_state(store, SHARD, params, f"state {path}", shards)
        except Exception:
            store.close()
            raise
        super().__init__(store)
        # resolved once the shard's last queued events are on the producer: the next
        # round's events queue after them, so each URL's events leave in seq order
        self.events_queued: asyncio.Future | None = None

    def close(self) -> None:
        try:
            self.flush_cleared()
        finally:
            self.store.close()


def shard_budgets(budget: MemoryBudget, shards: int
                  ) -> tuple[RocksMemory, dict[str, MemoryBudget]]:
    """A worker's shard states share half of its budget: one RocksDB cache for all, and
    the engine's caches by role (state.budget.ShardShare)."""
    states = MemoryBudget(budget.total // 2)
    return RocksMemory(states), {kind: states.shard_state(kind, shards)
                                 for kind in (DOC_ROLE, GRAM_ROLE)}


class Worker:
    def __init__(self, broker: str, state_dir: str, params: Params, shards: int, *,
                 topics: Topics | None = None, group: str = "streamdet",
                 pages_partitions: int = 4, max_body: int = DEFAULT_MAX_BODY,
                 max_records: int = ROUND_RECORDS, timing: Timing | None = None,
                 on_batch: Callable[[Worker], None] | None = None, analyzers: int = 0,
                 page_timeout: float = DEFAULT_PAGE_TIMEOUT,
                 budget: MemoryBudget | None = None) -> None:
        self.broker, self.state_dir, self.params, self.shards = broker, state_dir, params, shards
        self.topics = topics or Topics()
        self.group, self.pages_partitions = group, pages_partitions
        self.max_body, self.max_records = max_body, max_records
        self.timing = timing or Timing()
        self.pacer = RoundPacer(self.timing.round_ms / 1000)
        self._left_behind = False  # the last fetch left records in a partition it read
        self.on_batch = on_batch
        # a worker may come to own every doc and gram shard: its states share half of the
        # budget (one RocksDB cache, the engine's caches by role: state.budget.ShardShare),
        # the rest is the records in flight (fetches, rounds) and the rounds' work: three
        # quarters keeps a worker that owns every shard, each share filled, within the
        # budget and its slack
        self.budget = budget or MemoryBudget()
        self._rocks_memory, self._shard_budgets = shard_budgets(self.budget, shards)
        self._fetch_bytes = min(64 << 20, self.budget.records // 4)
        # a doc shard's round holds the earlier documents its pages and deltas reach;
        # rounds run one shard at a time, so each may hold the budget's share for a batch
        self.batch_slots = self.budget.batch_slots
        self.sizers: dict[int, BatchSizer] = {}  # records of a doc shard's next round
        self._released = 0.0
        self.doc_shards: dict[int, Shard] = {}
        self.gram_shards: dict[int, Shard] = {}
        self.sensor: Sensor = metrics()  # what the loops tell (adapters.sensor)
        self._disk_checked = 0.0
        self.lock = asyncio.Lock()
        self.cpu = ThreadPoolExecutor(1, thread_name_prefix="streamdet-engine")
        # Page analysis (the pages stage: parse, tokenize, hash) in watched processes of
        # its own (adapters.watchdog), beside the engine thread's shard work of the same
        # round; with none, it takes its turn on the engine thread.
        self.analysis: AnalysisPool | None = None  # started once the pipeline is joined
        self._analyzers, self._page_timeout = analyzers, page_timeout
        self.consumer: AIOKafkaConsumer | None = None
        self.producer = None
        self.assigned: set[TopicPartition] = set()
        self.opening: list[tuple[str, int]] = []  # shards assigned, not opened yet
        self.revoking = False  # a rebalance began: openings stop at their next chunk
        self.gaps = Gaps()  # offsets a fetch skipped, read again (adapters.contiguity)
        self.applied: dict[TopicPartition, int] = {}  # next offset to apply, per partition
        self.inflight: deque[asyncio.Task] = deque()  # rounds waiting for acknowledgements
        self.uncommitted: dict[TopicPartition, int] = {}  # acknowledged, not committed yet
        self._committed_at = 0.0
        self._replaced = 0  # analysis processes replaced, as last counted in the metrics
        self.failure: BaseException | None = None  # the first of this membership

    # -- life cycle -----------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Join the pipeline, then be a member of its group until `stop`. A round that
        fails (a send the broker never acknowledged, records missing for good
        (adapters.contiguity), a shard that would not open) ends the membership: the
        worker leaves the group and joins again from its shards' committed states, as a
        restarted process would, after a pause that doubles up to REJOIN_PAUSE_MAX_S.
        Refusals (another pipeline's parameters or format) are not retried: they end the
        run."""
        os.makedirs(self.state_dir, exist_ok=True)
        loop = asyncio.get_running_loop()
        # imports and compiled patterns, before pages wait (analysis processes warm up
        # by themselves)
        await loop.run_in_executor(self.cpu, warm_up, self.params, self.max_body)
        await ensure_topics(self.broker, self.topics, self.shards, self.pages_partitions)
        await join_pipeline(self.broker, self.topics, self.params, self.shards)
        if self._analyzers > 0:
            self.analysis = AnalysisPool(self._analyzers, self.params, self.max_body,
                                         self._page_timeout)
        stopper = asyncio.create_task(self._abort_analysis_on(stop))
        self.sensor.on_worker_start()
        log.info("worker started: %d shards, group %s, state %s", self.shards, self.group,
                 self.state_dir)
        pause = REJOIN_PAUSE_S
        try:
            while not stop.is_set():
                joined = time.monotonic()
                try:
                    await self._member(stop)
                except REFUSALS:
                    raise
                except Exception as exc:  # noqa: BLE001 - any failed round: rejoin
                    if time.monotonic() - joined > REJOIN_PAUSE_MAX_S:
                        pause = REJOIN_PAUSE_S  # not a failure in a row
                    log.exception("worker: %s; leaving the group and joining it again "
                                  "from the shards' states in %.0f s", exc, pause)
                    self.sensor.on_rejoin()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), pause)
                    pause = min(pause * 2, REJOIN_PAUSE_MAX_S)
        finally:
            stopper.cancel()
            self.sensor.on_worker_stop()
            self.cpu.shutdown(wait=True)
            if self.analysis is not None:
                self.analysis.close()
            log.info("worker stopped")

    async def _member(self, stop: asyncio.Event) -> None:
        """One membership of the consumer group: rounds until `stop` or a failure; on
        the way out every round in flight is finished and every shard closed."""
        self.producer = producer(self.broker)
        t = self.topics
        self.consumer = AIOKafkaConsumer(
            **connection(self.broker), group_id=self.group, enable_auto_commit=False,
            auto_offset_reset="earliest", partition_assignment_strategy=(RangePartitionAssignor,),
            max_partition_fetch_bytes=self._fetch_bytes, fetch_max_bytes=self._fetch_bytes,
            fetch_max_wait_ms=FETCH_WAIT_MS,
            **self.timing.group_settings())
        self.consumer.subscribe([t.pages, t.docs, t.deltas, t.grams, t.labels],
                                listener=_Rebalance(self))
        self.failure = None
        self.opening, self.gaps = [], Gaps()  # a new membership opens what it is given
        self.revoking = False
        log.info("worker joining group %s", self.group)
        try:
            await self.producer.start()
            await self.consumer.start()
            await self._rounds(stop)
        finally:
            log.info("worker leaving the group: finishing the rounds in flight")
            await self._leave()
        if self.failure is not None:  # a round failed while leaving
            raise self.failure

    async def _rounds(self, stop: asyncio.Event) -> None:
        """Rounds until `stop`; a round starts once records came and the pacer's wait
        since the last one's start is over (adapters.round_pacer: none while the worker
        keeps up, nor while the last fetch left records behind)."""
        began = 0.0
        while not stop.is_set():
            now = time.monotonic()
            share = self.pacer.busy_share(now)
            # a fetch that left records behind (a backlog): they are there to take now
            gather = 0.0 if self._left_behind else self.pacer.gather_for(share)
            self.sensor.on_round(share, gather)
            if (wait := began + gather - now) > 0:
                await asyncio.sleep(wait)
            batch = await self._fetch()
            if batch:
                began = time.monotonic()
            async with self.lock:
                if self.failure is not None:  # in a rebalance listener: aiokafka only logs it
                    raise self.failure
                await self._open_assigned()
                if batch:
                    await self._handle(batch)
                    await self._bound_inflight(MAX_INFLIGHT)
                elif self.inflight or self.uncommitted:
                    await self._bound_inflight(0)  # idle: finish what is in flight
                    await self._commit_acknowledged(force=True)
                    await self._cpu(self._flush_cleared)
            if batch:
                self.pacer.ran(began, time.monotonic())
                if self.on_batch:
                    self.on_batch(self)
            self._gauges()

    async def _fetch(self) -> dict:
        """A round's records: a fetch, and while the partitions it read hold more (a
        backlog), further fetches, up to max_records and the records' bytes share. A
        fetch brings what one response holds (~6 MB from the test broker: ~70 pages and
        their internal records); a doc shard's work is per document a round touches and
        a document a backlog's pages share is touched in each of their rounds, so rounds
        grow under load and stay one fetch when the worker keeps up."""
        batch = await self.consumer.getmany(timeout_ms=100, max_records=self.max_records)
        records = sum(len(recs) for recs in batch.values())
        size = sum(len(rec.value or b"") for recs in batch.values() for rec in recs)
        while batch and records < self.max_records and size < self._fetch_bytes \
                and self._behind(batch):
            more = await self.consumer.getmany(timeout_ms=FETCH_WAIT_MS,
                                               max_records=self.max_records - records)
            if not more:
                break
            for tp, recs in more.items():
                held = batch.get(tp, [])
                # a rebalance between two fetches may have moved the position back (to
                # the group's committed offset): the records read since then are what
                # counts; a later start (a gap) is cut by the shard (_unapplied)
                batch[tp] = held + recs if held and recs[0].offset > held[-1].offset \
                    else recs
                records += len(recs)
                size += sum(len(rec.value or b"") for rec in recs)
        self._left_behind = self._behind(batch)
        return batch

    def _behind(self, batch: dict) -> bool:
        """Whether a partition the batch read holds records past the batch's last one (as
        of the partition's last fetch)."""
        for tp, recs in batch.items():
            high = self.consumer.highwater(tp)
            if high is not None and high > recs[-1].offset + 1:
                return True
        return False

    def _flush_cleared(self) -> None:
        """Delete the acknowledged outboxes' keys of every shard (the worker is idle: no
        commit comes soon to carry them)."""
        for shard in [*self.doc_shards.values(), *self.gram_shards.values()]:
            shard.flush_cleared()

    async def _abort_analysis_on(self, stop: asyncio.Event) -> None:
        """On a stop request, kill the analysis processes at once: a page in hand must
        not delay the stop (its round is left uncommitted, and read again on restart)."""
        await stop.wait()
        log.info("stop requested")
        if self.analysis is not None:
            self.analysis.abort()

    async def _bound_inflight(self, most: int) -> None:
        """Wait for the oldest rounds until at most `most` are in flight (re-raising what
        failed in them)."""
        while len(self.inflight) > most:
            await self.inflight.popleft()

    def _gauges(self) -> None:
        """Lag per assigned partition (high watermark from fetch responses, not ListOffsets),
        shards owned, and every ~10 s the state's size."""
        sensor = self.sensor
        for tp in self.assigned:
            high, done = self.consumer.highwater(tp), self.applied.get(tp)
            if high is not None and done is not None:
                sensor.on_lag(tp.topic, tp.partition, high - done)
        if self.analysis is not None and self.analysis.replaced > self._replaced:
            sensor.on_analysis_restarts(self.analysis.replaced - self._replaced)
            self._replaced = self.analysis.replaced
        sensor.on_shards(len(self.doc_shards), len(self.gram_shards))
        sensor.on_writes(_written(self.doc_shards.values(), self.gram_shards.values()))
        now = time.monotonic()
        if now - self._disk_checked > 10:
            self._disk_checked = now
            sensor.on_state(dir_bytes(self.state_dir), sum(
                s.store.first_holder_pairs for s in self.gram_shards.values()))
            sensor.on_documents(sum(s.documents for s in self.doc_shards.values()))

    async def _leave(self) -> None:
        """Finish the rounds in flight and commit what they acknowledged (a failure among
        them is kept in `failure`), leave the group, close every shard and forget this
        membership's offsets: a next membership starts from the shards' states."""
        try:
            async with self.lock:
                self._keep(await self._drain())
                await self._commit_acknowledged(force=True)
            await self.consumer.stop()  # leaves the group (no revocation call)
        finally:
            async with self.lock:
                t = self.topics
                await self._drop(self.assigned
                                 | {TopicPartition(t.docs, s) for s in self.doc_shards}
                                 | {TopicPartition(t.grams, g) for g in self.gram_shards})
            self.applied, self.uncommitted = {}, {}
            await self.producer.stop()

    async def _drain(self) -> BaseException | None:
        """Wait for every round in flight; the first failure among them, returned (a
        round waits for the one before it, so the rounds after a failed one fail too)."""
        first = None
        while self.inflight:
            try:
                await self.inflight.popleft()
            except Exception as exc:  # noqa: BLE001 - kept, raised by the member's loop
                first = first or exc
        return first

    def _keep(self, failure: BaseException | None) -> None:
        """Remember the first failure of this membership, for the loop to raise."""
        if failure is not None and self.failure is None:
            self.failure = failure

    async def _cpu(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.cpu, fn, *args)

    # -- one fetched batch --------------------------------------------------------------
    async def _handle(self, batch: dict) -> None:
        """Every stage's work on the batch, its records queued to the producer (the pages
        stage's analysis beside the shards' work: nothing in a round depends on it); then
        a task finishes the round (one wait for all its acknowledgements, the outboxes
        cleared, the offsets to commit) while the next batch is processed."""
        t = self.topics
        by_topic: dict[str, dict[int, list]] = {}
        for tp, recs in batch.items():
            if tp in self.assigned:  # a batch fetched just before a rebalance: drop the rest
                by_topic.setdefault(tp.topic, {})[tp.partition] = recs
        r = _Round()
        ingest = asyncio.create_task(self._ingest(by_topic.get(t.pages, {}), r))
        await self._forward_labels(by_topic.get(t.labels, {}), r)
        try:
            docs, deltas = by_topic.get(t.docs, {}), by_topic.get(t.deltas, {})
            steps = [*(self._gram_shard(g, recs, r)
                       for g, recs in sorted(by_topic.get(t.grams, {}).items())),
                     *(self._doc_shard(s, docs.get(s, []), deltas.get(s, []), r)
                       for s in sorted(set(docs) | set(deltas)))]
            await self._steps([step for step in steps if step is not None])
        finally:  # a failed shard step leaves no analysis running past its membership
            await ingest
        self.applied.update(r.offsets)
        previous = self.inflight[-1] if self.inflight else None
        self.inflight.append(asyncio.create_task(self._finish(r, previous)))
        if time.monotonic() - self._released >= RELEASE_INTERVAL_S:
            self._released = time.monotonic()
            # over budget: what rounds freed goes back (adapters.allocator)
            await self._cpu(release_free_memory, self.budget.total)

    async def _finish(self, r: _Round, previous: asyncio.Task | None) -> None:
        """Acknowledgements, outboxes cleared, then the group offsets - after every earlier
        round's, so a committed offset never runs ahead of an unacknowledged record."""
        began = time.perf_counter()
        await asyncio.gather(*r.sends)
        failpoints.hit("round-acknowledged")  # tests: a send the broker never acknowledged
        if previous is not None:
            await asyncio.shield(previous)
        if r.after:
            await self._cpu(_each, r.after)
        self.uncommitted.update(r.offsets)
        await self._commit_acknowledged()
        now = time.time()
        for cause_at in r.event_causes:
            self.sensor.on_event_latency(now - cause_at)
        self.sensor.on_stage("deliver", time.perf_counter() - began)

    async def _ingest(self, pages: dict[int, list], r: _Round) -> None:
        began = time.perf_counter()
        try:
            for p, recs in sorted(pages.items()):
                try:
                    await self._pages(p, recs, r)
                except Aborted:  # stopping: these pages are read again on restart
                    return
        finally:
            self.sensor.on_stage("ingest", time.perf_counter() - began)

    async def _pages(self, partition: int, recs: list, r: _Round) -> None:
        sensor = self.sensor
        began = time.perf_counter()
        payloads = [r.value for r in recs]
        if self.analysis is None:
            results = await self._cpu(analyze_payloads, payloads, self.params, self.max_body)
        else:
            results = await asyncio.wrap_future(self.analysis.submit(payloads))
        per_page = (time.perf_counter() - began) / len(recs)
        sensor.on_page_seconds("analyse", per_page, len(recs))
        for rec, res in zip(recs, results, strict=True):
            sensor.on_input(len(rec.value or b""))
            if isinstance(res, tuple):
                reason, detail = res
                sensor.on_dead_letter(reason)
                value = rec.value or b""
                headers = _dead_headers(reason, detail, self.topics.pages, partition, rec.offset,
                                        value)
                r.sends.append(await self.producer.send(
                    self.topics.dead, value=value[:PREFIX_KEPT] if rec.value is not None else None,
                    key=rec.key, headers=headers))
                continue
            sensor.on_pages(1, int(res.implausible_time))
            if (trap := trap_event(res.url, self.params, seq=rec.offset + 1)) is not None:
                # no state sees it; a record processed again repeats its event exactly
                trap["at"] = utc_at(rec.timestamp)
                sensor.on_events((trap,))
                r.sends.append(await self.producer.send(
                    self.topics.events, value=json.dumps(trap, ensure_ascii=False).encode(),
                    key=res.url.encode("utf-8")))
                continue
            msg = PageMsg(res.url, res.server, res.grams, res.fetched_at, res.text,
                          res.sentences, res.sketch, res.chunks)
            shard = url_shard(res.url, self.shards)
            placed = await self.producer.send(self.topics.docs, value=msg.encode(),
                                              key=res.url.encode("utf-8"), partition=shard)
            r.sends.append(asyncio.ensure_future(self._send_adds(msg, shard, placed)))
        r.offsets[TopicPartition(self.topics.pages, partition)] = recs[-1].offset + 1

    async def _forward_labels(self, parts: dict[int, list], r: _Round) -> None:
        """The labels stage (stateless, as the pages stage): the labels of the labels
        topic, each numbered by its offset, to every doc shard's deltas partition with
        where its docs partition ends now, whose pages the shard's examples for them
        wait for (engine.spam_labels). Draws and foreign records are passed over."""
        t = self.topics
        found = [lab for recs in parts.values() for rec in recs
                 if (lab := label_of_record(rec.value, rec.offset)) is not None]
        if found:
            ends = await high_watermarks(self.broker, {
                TopicPartition(t.docs, s): 0 for s in range(self.shards)})
            for s, raw in label_forwards(found, [ends[TopicPartition(t.docs, s)]
                                                 for s in range(self.shards)]):
                r.sends.append(await self.producer.send(t.deltas, value=raw, partition=s))
            log.info("labels stage: %d labels forwarded to the doc shards", len(found))
        for p, recs in parts.items():
            r.offsets[TopicPartition(t.labels, p)] = recs[-1].offset + 1

    async def _send_adds(self, msg: PageMsg, shard: int, placed: asyncio.Future) -> None:
        """Once the page's record is on its doc shard's partition, its grams go to the
        gram shards, as the version whose docno that offset makes (engine.shards): a
        page's own event is then three rounds from its fetch, not four. The round (and
        the crawler partition's offset) waits for these too: a page whose adds were lost
        in a crash is processed again, as a new version that replaces the first."""
        docno = docno_for((await placed).offset, shard, self.shards)
        sent = [await self.producer.send(self.topics.grams, value=raw, partition=g)
                for g, raw in page_adds(msg, docno, self.shards)]
        await asyncio.gather(*sent)

    def _gram_shard(self, g: int, recs: list, r: _Round) -> _Step | None:
        """State, offset and the deltas to send committed together, then sent."""
        shard = self.gram_shards.get(g)
        if shard is None:
            return None
        recs = self._unapplied(shard, "grams", recs)
        if not recs:
            return None
        role = GramShard(self.params, g, self.shards)
        end = recs[-1].offset + 1

        def work() -> Outbox | None:  # on the engine thread (Worker._steps)
            msgs = [m for _, m in self._decoded(GramsMsg.decode, recs)]
            return process_grams(shard, role, msgs, end).commit()

        async def done(outbox: Outbox | None) -> None:
            self.sensor.on_rescored(role.fanout, role.went_common)
            await self._queue_outbox(shard, outbox, r)
            r.offsets[TopicPartition(self.topics.grams, g)] = end

        return _Step("gram_shard", work, done)

    def _doc_shard(self, s: int, docs: list, deltas: list, r: _Round) -> _Step | None:
        """State, offsets and outbox committed first, then the outbox is sent: a document
        exists for good before any of its grams leave."""
        shard = self.doc_shards.get(s)
        if shard is None:
            return None
        docs = self._unapplied(shard, "docs", docs)
        deltas = self._unapplied(shard, "deltas", deltas)
        if not docs and not deltas:
            return None
        sizer = self.sizers.setdefault(s, BatchSizer(self.max_records, self.batch_slots))
        docs, deltas = self._cut(s, sizer.records, docs, deltas)
        d_end = docs[-1].offset + 1 if docs else shard.offset("docs")
        e_end = deltas[-1].offset + 1 if deltas else shard.offset("deltas")
        role = DocShard(self.params, s, self.shards)
        catching_up = shard.catching_up() is not None

        def work() -> tuple[Outbox | None, list[dict], int]:  # on the engine thread
            pages = [(x.offset, m) for x, m in self._decoded(PageMsg.decode, docs)]
            msgs = [m for _, m in self._decoded(decode_doc_input, deltas)]
            step = process_docs(shard, role, pages, msgs, {"docs": d_end, "deltas": e_end})
            held = step.txn.held_slots()
            outbox = step.commit(utc_now())
            if catching_up:  # tests: die amid a takeover's catch-up, the next shards' not run
                failpoints.hit("catching-up")
            return outbox, step.events, held

        async def done(result: tuple[Outbox | None, list[dict], int]) -> None:
            outbox, events, held = result
            sizer.observe(len(docs) + len(deltas), held)
            if role.held:
                log.info("doc shard %d: %d deltas about pages not applied yet wait for them",
                         s, role.held)
            r.event_causes.extend(role.cause_times[ev["cause"]] for ev in events
                                  if ev["cause"] in role.cause_times)
            await self._queue_outbox(shard, outbox, r)
            r.offsets[TopicPartition(self.topics.docs, s)] = d_end
            r.offsets[TopicPartition(self.topics.deltas, s)] = e_end

        return _Step("doc_shard", work, done)

    async def _steps(self, steps: list[_Step]) -> None:
        """The round's shard steps: their work in one hand-off to the engine thread, in
        order and up to the first that fails; then, on the loop, each finished step's
        outbox queued. Each hand-off has the loop and the engine thread trade the GIL, a
        fixed cost that a round holding a page or two pays per page: one a round, not one
        a shard."""
        if not steps:
            return
        outcomes = await self._cpu(_work_of, steps)
        spent: dict[str, float] = {}
        for step, (seconds, result) in zip(steps, outcomes, strict=False):
            spent[step.stage] = spent.get(step.stage, 0.0) + seconds
            if isinstance(result, BaseException):
                raise result
            await step.done(result)
        for stage, seconds in spent.items():
            self.sensor.on_stage(stage, seconds)

    def _unapplied(self, shard: Shard, name: str, recs: list) -> list:
        """The fetched records of the shard's input `name` that follow on from its
        state's offset (adapters.contiguity). Past a missing offset the consumer goes
        back to it, and the next fetch brings it once the broker serves it."""
        tp = TopicPartition(getattr(self.topics, name), shard.index)
        run, missing = following_on(recs, shard.offset(name))
        if missing is None:
            self.gaps.filled(tp)
            return run
        self.sensor.on_fetch_gap()
        what = f"{shard.kind} shard {shard.index}: {name}"
        log.info("%s: offset %d missing from a fetch; reading again from it", what, missing)
        self.gaps.missing(tp, missing, time.monotonic(), what)
        self.consumer.seek(tp, missing)
        return run

    def _cut(self, s: int, limit: int, docs: list, deltas: list) -> tuple[list, list]:
        """At most `limit` of doc shard s's fetched records, each input cut in proportion
        to its share (a page at least, when there are pages): the consumer is sent back to
        the first record left, which the next fetch brings again (adapters.batch_sizer)."""
        n = len(docs) + len(deltas)
        if n <= limit:
            return docs, deltas
        keep_docs = min(len(docs), max(1 if docs else 0, limit * len(docs) // n))
        keep_deltas = min(len(deltas), limit - keep_docs)
        t = self.topics
        for topic, recs, keep in ((t.docs, docs, keep_docs), (t.deltas, deltas, keep_deltas)):
            if keep < len(recs):
                self.consumer.seek(TopicPartition(topic, s), recs[keep].offset)
        self.sensor.on_deferred(n - keep_docs - keep_deltas)
        return docs[:keep_docs], deltas[:keep_deltas]

    async def _queue_outbox(self, shard: Shard, outbox: Outbox | None, r: _Round) -> None:
        """Queue a committed outbox's records on the producer; the round clears the
        outbox once they are all acknowledged. The events leave once the record of what
        they show is acknowledged (Outbox.events), after the shard's earlier events."""
        if outbox is None:
            return
        failpoints.hit("outbox-committed")  # tests: die with the outbox committed, unsent
        t = self.topics
        shown = []
        for code, part, value in outbox.first():
            topic = t.grams if code == GRAMS_OUT else t.deltas
            fut = await self.producer.send(topic, value=value, partition=part)
            r.sends.append(fut)
            if code == SHOWN_OUT:
                shown.append(fut)
        if events := [value for _, _, value in outbox.events()]:
            previous = shard.events_queued
            shard.events_queued = asyncio.get_running_loop().create_future()
            r.sends.append(asyncio.ensure_future(
                self._send_events(events, shown, previous, shard.events_queued)))
        r.after.append(functools.partial(shard.clear, outbox))

    async def _send_events(self, events: list[bytes], shown: list, previous: asyncio.Future
                           | None, queued: asyncio.Future) -> None:
        """Send events once `shown` (their ShownMsg) is acknowledged and the shard's
        earlier events are queued (`previous`); `queued` resolves once these are."""
        try:
            await asyncio.gather(*shown)
            failpoints.hit("events-held")  # tests: die with the record out, not the events
            if previous is not None:
                await previous
            sent = []
            for value in events:
                ev = json.loads(value)
                self.sensor.on_events((ev,))
                sent.append(await self.producer.send(self.topics.events, value=value,
                                                     key=_key(ev)))
        finally:
            if not queued.done():
                queued.set_result(None)
        await asyncio.gather(*sent)

    def _site_gauges(self, store) -> None:
        """The monster candidates and bad neighbourhoods the site shard's state holds
        (SPEC §8), or 0 when this worker does not hold it (store None)."""
        counts = monster_counts(store) if store is not None else {"host": 0, "domain": 0}
        self.sensor.on_sites(counts, bad_count(store.begin()) if store else 0)

    async def _send_now(self, shard: Shard, outboxes: list[Outbox]) -> None:
        """Send outboxes, wait for every acknowledgement and clear them."""
        r = _Round()
        for outbox in outboxes:
            await self._queue_outbox(shard, outbox, r)
        await asyncio.gather(*r.sends)
        for fn in r.after:
            await self._cpu(fn)

    @staticmethod
    def _decoded(decode: Callable, recs: list) -> list[tuple]:
        """(record, message) for the records `decode` reads; the others are logged and
        skipped (not ours: another producer wrote here)."""
        out = []
        for rec in recs:
            try:
                out.append((rec, decode(rec.value)))
            except Exception as exc:  # noqa: BLE001 - whatever the bytes make it raise
                log.error("skipping record %s[%d]@%d: %s", rec.topic, rec.partition,
                          rec.offset, exc)
        return out

    async def _commit_acknowledged(self, force: bool = False) -> None:
        """Commit the group offsets of the rounds acknowledged so far, when the last
        commit is COMMIT_INTERVAL_S old (or `force`)."""
        if not self.uncommitted or (
                not force and time.monotonic() - self._committed_at < COMMIT_INTERVAL_S):
            return
        offsets, self.uncommitted = self.uncommitted, {}
        self._committed_at = time.monotonic()
        failpoints.hit("group-commit")  # tests: die with rounds done and sent, uncommitted
        await self._commit(offsets)

    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        try:
            await self.consumer.commit(offsets)
        except (CommitFailedError, IllegalStateError, KafkaError) as exc:
            # Rebalanced meanwhile: the state holds the offsets; the next owner at worst
            # processes these records again, which is idempotent.
            log.warning("offset commit failed (%s); continuing", exc)

    # -- rebalancing ------------------------------------------------------------------
    async def revoked(self, revoked: set[TopicPartition]) -> None:
        """Finish the rounds in flight (they touch these shards), commit what they
        acknowledged while the partitions are still ours, then close the shards - even
        when a round failed: aiokafka only logs a listener's exception, so the failure
        is kept for the member's loop, and shards left open here would be skipped by
        the next assignment (no claim, no replay, their outboxes never sent). A shard
        being opened stops at its next replay chunk (`revoking`): the rebalance waits
        for this listener, and a member must rejoin within the rebalance timeout."""
        self.revoking = True
        async with self.lock:
            try:
                failpoints.hit("revoking")  # tests: a round in flight failed
                self._keep(await self._drain())
                await self._commit_acknowledged(force=True)
            except Exception as exc:  # noqa: BLE001 - kept, raised by the member's loop
                self._keep(exc)
            finally:
                await self._drop(revoked)

    async def _drop(self, tps: set[TopicPartition]) -> None:
        """Forget partitions: their offsets and lag (the next owner's to report), and
        close the shards they hold."""
        self.assigned -= tps
        self.opening = [shard for shard in self.opening
                        if not tps & set(self._shard_partitions(*shard))]
        t = self.topics
        for tp in tps:
            self.applied.pop(tp, None)
            self.sensor.on_partition_gone(tp.topic, tp.partition)
            table = {t.docs: self.doc_shards, t.grams: self.gram_shards}.get(tp.topic)
            if table is not None and tp.partition in table:
                await self._cpu(table.pop(tp.partition).close)
            if tp.topic == t.docs and tp.partition == SITE_SHARD:
                self._site_gauges(None)  # the next owner reports them

    async def assigned_now(self, assigned: set[TopicPartition]) -> None:
        """Note the shards of the new assignment and pause their partitions; the member's
        loop opens them (`_open_assigned`). aiokafka sends no heartbeat until this
        listener returns, so a replay in here that outlasted the session would get the
        member evicted: another rebalance, its shards moved to the other worker and
        rebuilt there from their partitions, and again at that one's next eviction."""
        self.sensor.on_rebalance()
        self.revoking = False
        async with self.lock:
            t = self.topics
            for tp in sorted(assigned):
                if tp.topic == t.grams and tp.partition not in self.gram_shards:
                    shard = (GRAM_ROLE, tp.partition)
                elif tp.topic == t.docs and tp.partition not in self.doc_shards:
                    shard = (DOC_ROLE, tp.partition)
                else:
                    continue
                if shard not in self.opening:
                    self.opening.append(shard)
            self.assigned = set(assigned)
            self.consumer.pause(*(tp for shard in self.opening
                                  for tp in self._shard_partitions(*shard) if tp in assigned))

    def _shard_partitions(self, kind: str, index: int) -> list[TopicPartition]:
        t = self.topics
        if kind == GRAM_ROLE:
            return [TopicPartition(t.grams, index)]
        return [TopicPartition(t.docs, index), TopicPartition(t.deltas, index)]

    async def _open_assigned(self) -> None:
        """Open the shards assigned since the last round, one at a time (claim, send left
        outboxes, replay, seek), each partition resumed once its shard is open. Under the
        lock, in the member's loop: heartbeats go on meanwhile. A rebalance cuts an
        opening short between two replay chunks: the state keeps what was replayed (and
        whether it takes over), and the shard opens again from there if the next
        assignment gives it back. Logs when the last one is open: from then on the
        worker processes every partition it holds."""
        opened = False
        while self.opening and not self.revoking:
            kind, index = self.opening[0]
            if not await self._open(kind, index):
                table = self.gram_shards if kind == GRAM_ROLE else self.doc_shards
                await self._cpu(table.pop(index).close)
                log.info("%s shard %d: opening cut short by a rebalance", kind, index)
                return
            self.opening.pop(0)
            held = self.consumer.assignment()
            self.consumer.resume(*(tp for tp in self._shard_partitions(kind, index)
                                   if tp in held))
            opened = True
        if opened and not self.opening:
            log.info("assigned shards open: gram %s, doc %s", sorted(self.gram_shards),
                     sorted(self.doc_shards))

    async def _open(self, kind: str, index: int) -> bool:
        """Open a shard (engine.shard_opening: claim, send left outboxes, replay, take
        over or catch up) and read on from its state; False when a rebalance cut its
        replay short."""
        opened = await open_shard(self._shard_log(), kind, index, self.params, self.shards)
        if opened is None:
            return False
        if kind == DOC_ROLE and index == SITE_SHARD:
            self._site_gauges(opened.state.store)
        for name, committed in opened.committed.items():
            self._seek(TopicPartition(getattr(self.topics, name), index),
                       opened.state.offset(name), committed)
        return True

    def _shard_log(self) -> KafkaShardLog:
        return KafkaShardLog(self.broker, self.topics, self.producer, self.consumer,
                             self.sensor, open_state=self._open_state, run=self._cpu,
                             send=self._send_now, cut=lambda: self.revoking)

    async def _open_state(self, kind: str, index: int) -> Shard:
        """A shard's state under the state directory, kept in its table from then on
        (a failure closes the shards there)."""
        path = os.path.join(self.state_dir, f"{kind}-{index}")
        shard = await self._cpu(Shard, kind, index, path, self.params, self.shards,
                                self._shard_budgets[kind], self._rocks_memory)
        (self.gram_shards if kind == GRAM_ROLE else self.doc_shards)[index] = shard
        return shard

    def _seek(self, tp: TopicPartition, offset: int, committed: int) -> None:
        """Read on from the shard state's `offset`. A state ahead of the group's commit
        (rounds done, their outboxes sent again on open) is committed with the next
        commit: with no new input, the group's offset would otherwise stay behind."""
        self.consumer.seek(tp, offset)
        self.applied[tp] = offset
        if offset > committed:
            self.uncommitted[tp] = offset


@dataclass
class _Round:
    """What one fetched batch has to finish: records sent (futures), work that must wait
    for their acknowledgement (outboxes to delete), and the group offsets to commit last."""

    sends: list = field(default_factory=list)
    after: list = field(default_factory=list)
    offsets: dict = field(default_factory=dict)
    event_causes: list = field(default_factory=list)  # fetched_at of each event's cause


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    async def on_partitions_revoked(self, revoked) -> None:
        await self.worker.revoked(set(revoked))

    async def on_partitions_assigned(self, assigned) -> None:
        await self.worker.assigned_now(set(assigned))


@dataclass
class _Step:
    """One shard's step of a round: `work` on the engine thread, beside the round's other
    steps (Worker._steps); `done` on the loop with what it returned."""

    stage: str  # streamdet_batch_seconds' stage label
    work: Callable[[], object]
    done: Callable[[object], Awaitable[None]]


def _written(*groups: Iterable[Shard]) -> dict[str, tuple[int, int]]:
    """What the shards wrote since last asked, summed by table (state.write_counts)."""
    total = WriteCounts()
    for shards in groups:
        for shard in shards:
            total.merge(shard.store.kv.take_written())
    return total.take()


def _work_of(steps: list[_Step]) -> list[tuple[float, object]]:
    """Each step's work and its seconds, in order; the first failure ends the list (as
    its result), so no later shard commits past a step that failed."""
    outcomes: list[tuple[float, object]] = []
    for step in steps:
        began = time.perf_counter()
        try:
            result = step.work()
        except Exception as exc:  # noqa: BLE001 - raised on the loop, after the others
            outcomes.append((time.perf_counter() - began, exc))
            break
        outcomes.append((time.perf_counter() - began, result))
    return outcomes


def _each(fns: list[Callable[[], object]]) -> None:
    for fn in fns:
        fn()


def _dead_headers(reason: str, detail: str, topic: str, partition: int, offset: int,
                  value: bytes) -> list:
    """A dead letter's headers: why, where the record is, its size and SHA-256 (the
    value holds its first 64 KiB at most: SPEC §9)."""
    return [("streamdet-reason", reason.encode()), ("streamdet-detail", detail.encode()),
            ("streamdet-source", f"{topic}/{partition}/{offset}".encode()),
            ("streamdet-size", str(len(value)).encode()),
            ("streamdet-sha256", hashlib.sha256(value).hexdigest().encode()),
            ("streamdet-at", utc_now().encode())]



def _key(ev: dict) -> bytes:
    """An event's Kafka key: its URL, or its site or neighbourhood (SPEC §8's `site`), so
    that one compacted key holds each subject's newest event."""
    return (ev.get("url") or ev.get("site") or ev.get("neighbourhood") or "").encode("utf-8")
