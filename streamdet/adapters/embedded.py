"""The single-process pipeline behind `streamdet run`: one gram shard and one doc shard.

Records are read in batches; each batch is validated, analysed, applied to the engine in a
state transaction, its events and dead letters are flushed, and then the transaction
commits together with the new input positions. Killed at any moment, the state is that of
the last commit, and the next run skips exactly the records that commit covered.

A position is the number of records of a source applied and a digest of those records.
On a new run the first `count` records are read again and their digest compared: only
when it matches are they skipped, so a file rewritten in place, or stdin carrying another
stream, is read from its start instead of losing its first records. (A file that only
grew continues where it stopped.)
"""

from __future__ import annotations

import dataclasses
import pickle
import queue
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..engine.badness import bad_count
from ..engine.params import Params
from ..engine.records import DEFAULT_MAX_BODY, BadRecord
from ..reading.views import monster_counts
from ..state.budget import MemoryBudget
from ..state.txn import Store
from .allocator import release_free_memory
from .analyzers import Analyzers
from .batch_sizer import BatchSizer
from .dead_runs import DeadLetters
from .inputs import (
    BATCH_WAIT_S,
    DEFAULT_BATCH,
    RawRecord,
    ReadOptions,
    Source,
    payload_bytes,
)
from .outputs import JsonlSink, utc_now
from .sensor import Sensor
from .state_format import EMBEDDED, check_state
from .watchdog import DEFAULT_PAGE_TIMEOUT

if TYPE_CHECKING:
    from ..engine.analysis import Analyzed

CHAIN = "\x00chain"  # positions[key + CHAIN]: digest of the records applied
HEAD = "\x00head"  # positions[key + HEAD]: digest of the first record alone


@dataclass
class RunSummary:
    pages: int = 0
    skipped: int = 0  # records already applied by an earlier run
    dead: Counter = field(default_factory=Counter)
    events: Counter = field(default_factory=Counter)
    ignored: Counter = field(default_factory=Counter)  # WARC responses that are not pages
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    fanout: list[int] = field(default_factory=list)
    bytes_read: int = 0
    bytes_total: int | None = None  # None when some input has no known size (stdin)
    replaced: int = 0  # analysis processes replaced (a page too slow, or a crash)
    implausible_times: int = 0  # fetched_at values read as absent (SPEC §9)
    rescored: int = 0  # documents re-scored, summed over batches (engine.core.BatchStats)
    deltas: int = 0  # deltas applied to documents
    deferred: int = 0  # additions stale documents left pending

    @property
    def dead_total(self) -> int:
        return sum(self.dead.values())


class EmbeddedRunner:
    def __init__(self, store: Store, params: Params, events: JsonlSink, dead: JsonlSink,
                 batch_size: int = DEFAULT_BATCH, max_body: int = DEFAULT_MAX_BODY,
                 on_batch: Callable[[RunSummary], None] | None = None,
                 analyzers: int = 0,
                 sensor: Sensor | None = None,
                 page_timeout: float = DEFAULT_PAGE_TIMEOUT,
                 budget: MemoryBudget | None = None) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        check_state(store, EMBEDDED, params, "this state directory")
        from ..engine.core import Engine  # the engine takes ~1 s to import: only now

        self.analyzers = analyzers
        self.page_timeout = page_timeout
        self.sensor = sensor or Sensor()
        self._watched = sensor is not None  # what only an observer needs is computed
        self._disk_checked = 0.0
        self._documents = sum(1 for _ in store.kv.items("urls")) if self._watched else 0
        if self._watched:  # SPEC §8: what the state holds, then the events that change it
            self.sensor.on_sites(monster_counts(store), bad_count(store.begin()))
        self.store = store
        self.params = params
        self.engine = Engine(params)
        self.events = events
        self.dead = DeadLetters(dead)
        self.budget = budget or store.budget
        self.sizer = BatchSizer(batch_size, self.budget.batch_slots)  # --batch at most
        # batches in flight: the one applied, the one queued and those in the analysers
        self.batch_bytes = self.budget.batch_bytes(analyzers + 2)
        self.max_body = max_body
        self.on_batch = on_batch
        self.read_opts = ReadOptions(max_body=max_body)

    def run(self, sources: Iterable[Source]) -> RunSummary:
        sources = list(sources)
        summary = RunSummary()
        sizes = [s.size for s in sources]
        summary.bytes_total = None if None in sizes else sum(sizes)
        start = time.perf_counter()
        positions = self.store.positions()
        analyzers = Analyzers(self.params, self.max_body, self.analyzers, self.page_timeout)
        try:
            for batch, results in analyzers.run(self._batches(sources, positions, summary)):
                self._apply(batch, results, positions, summary)
                del batch, results
                release_free_memory(self.budget.total)  # over budget: freed memory goes back
                if analyzers.replaced > summary.replaced:
                    self.sensor.on_analysis_restarts(analyzers.replaced - summary.replaced)
                    summary.replaced = analyzers.replaced
                summary.seconds = time.perf_counter() - start
                summary.bytes_read = sum(s.bytes_read for s in sources)
                if self.on_batch:
                    self.on_batch(summary)
        except BaseException:
            analyzers.abort()  # stopped (SIGTERM, Ctrl-C, a full disk): no page waited for
            raise
        finally:
            summary.replaced = analyzers.replaced
            analyzers.close()
        summary.seconds = time.perf_counter() - start
        summary.bytes_read = sum(s.bytes_read for s in sources)
        for s in sources:
            summary.ignored.update(s.ignored)
        return summary

    # -- reading --------------------------------------------------------------------------
    def _batches(self, sources: list[Source], positions: dict, summary: RunSummary
                 ) -> Iterator[list[RawRecord]]:
        """Batches of records, closed at the sizer's records or batch_bytes; on a stream
        (stdin, a pipe) also BATCH_WAIT_S after their first record, and an empty batch
        when the stream is quiet (the analysers then hand back what they hold), so a
        record that trickles in is processed within a second (SPEC §9)."""
        batch: list[RawRecord] = []
        size, opened = 0, 0.0
        for source in sources:
            records: Iterable[RawRecord | None] = self._unapplied(source, positions, summary)
            if not source.rereadable:
                records = _with_ticks(records, BATCH_WAIT_S)
            for rec in records:
                if rec is not None:
                    if not batch:
                        opened = time.monotonic()
                    batch.append(rec)
                    size += payload_bytes(rec.payload)
                if batch and (len(batch) >= self.sizer.records or size >= self.batch_bytes or (
                        not source.rereadable and time.monotonic() - opened >= BATCH_WAIT_S)):
                    yield batch
                    batch, size = [], 0
                elif rec is None and not batch:
                    yield []  # quiet: nothing to add
        if batch:
            yield batch

    def _unapplied(self, source: Source, positions: dict, summary: RunSummary
                   ) -> Iterator[RawRecord]:
        """The records of a source that the state has not applied yet."""
        done = positions.get(source.key, 0)
        it = source.records(self.read_opts)
        if not done:
            yield from it
            return
        want, head = positions.get(source.key + CHAIN), positions.get(source.key + HEAD)
        spool = None if source.rereadable else _Spool()
        last, n = None, 0
        for rec in it:
            if spool is not None:
                spool.add(rec)
            last, n = rec, n + 1
            if rec.index == 0 and head is not None and rec.chain != head:
                break  # another input: no need to read further to know
            if rec.index >= done - 1:
                break
        same = (last is not None and last.index == done - 1
                and (want is None or last.chain == want))
        if same:
            summary.skipped += n
            if spool is not None:
                spool.close()
            yield from it
            return
        if source.rereadable:
            summary.notes.append(f"{source.label} is not the input this state applied "
                                 f"{done} records of (changed since?): read from its start")
            it.close()
            yield from source.records(self.read_opts)
        else:
            yield from spool.replay()
            yield from it

    # -- applying -------------------------------------------------------------------------
    def _apply(self, batch: list[RawRecord], results: list, positions: dict,
               summary: RunSummary) -> None:
        pages: list[Analyzed] = []
        for rec, result in zip(batch, results, strict=True):
            if isinstance(result, BadRecord):
                self.dead.write(rec, result)
                summary.dead[result.reason] += 1
            else:
                pages.append(result)
                summary.implausible_times += result.implausible_time
            positions[rec.source] = rec.index + 1
            positions[rec.source + CHAIN] = rec.chain
            if rec.index == 0:
                positions[rec.source + HEAD] = rec.chain
        input_bytes = sum(payload_bytes(r.payload) for r in batch) if self._watched else 0
        records = len(batch)
        # The records are done with (their dead letters written, their positions taken):
        # emptying the list lets them go before the engine works, not after (every holder
        # shares this list), so the batch's raw bytes are not held beside the state.
        batch.clear()
        began = time.perf_counter()
        txn = self.store.begin()
        events, stats = self.engine.process(txn, pages)
        self.sizer.observe(records, stats.held_slots)  # the batches not closed yet
        at = utc_now()
        for ev in events:
            ev["at"] = at
            self.events.write(ev)
            summary.events[ev["event"]] += 1
        self.events.flush()
        self.dead.flush()
        txn.commit(positions)
        del txn  # what it read and wrote goes before the merges, not after them
        self.store.compact()
        summary.pages += stats.pages
        summary.fanout.extend(stats.fanout or ())
        summary.rescored += stats.rescored
        summary.deltas += stats.deltas
        summary.deferred += stats.deferred
        if self._watched:
            self._observe(input_bytes, results, pages, events, stats,
                          time.perf_counter() - began)

    def _observe(self, input_bytes: int, results, pages, events, stats, seconds: float
                 ) -> None:
        """The batch told to the sensor (`streamdet run --metrics-port`)."""
        sensor = self.sensor
        sensor.on_input(input_bytes)
        for res in results:
            if isinstance(res, BadRecord):
                sensor.on_dead_letter(res.reason)
        sensor.on_pages(len(pages), sum(p.implausible_time for p in pages))
        sensor.on_rescored(stats.fanout or (), stats.went_common)
        self._documents += stats.new_documents
        sensor.on_documents(self._documents)
        if pages:
            sensor.on_page_seconds("engine", seconds / len(pages), len(pages))
        sensor.on_stage("embedded", seconds)
        sensor.on_writes(self.store.kv.take_written())
        sensor.on_events(events)
        fetched = {p.url: p.fetched_at for p in pages if p.fetched_at is not None}
        now = time.time()
        for ev in events:
            if ev["cause"] in fetched:
                sensor.on_event_latency(now - fetched[ev["cause"]])
        if time.monotonic() - self._disk_checked > 10:
            self._disk_checked = time.monotonic()
            sensor.on_state(self.store.kv.disk_bytes(), self.store.first_holder_pairs)


def _with_ticks(records: Iterator[RawRecord], every: float
                ) -> Iterator[RawRecord | None]:
    """The records of a stream, read by a thread of their own, with None whenever none
    came for `every` seconds (a blocked read cannot be timed out otherwise)."""
    q: queue.Queue = queue.Queue(maxsize=256)
    done = object()

    def read() -> None:
        try:
            for rec in records:
                q.put(rec)
            q.put(done)
        except BaseException as exc:  # noqa: BLE001 - handed to the reading side
            q.put(exc)

    threading.Thread(target=read, name="streamdet-stream-reader", daemon=True).start()
    while True:
        try:
            item = q.get(timeout=every)
        except queue.Empty:
            yield None
            continue
        if item is done:
            return
        if isinstance(item, BaseException):
            raise item
        yield item


class _Spool:
    """Records of a stream that cannot be read twice (stdin), kept on disk in case they
    turn out not to be the ones the state applied."""

    def __init__(self) -> None:
        self._f = tempfile.TemporaryFile()  # noqa: SIM115 - closed in replay/close
        self.n = 0

    def add(self, rec: RawRecord) -> None:
        err = None if rec.error is None else (rec.error.reason, rec.error.detail)
        pickle.dump((dataclasses.replace(rec, error=None), err), self._f)
        self.n += 1

    def replay(self) -> Iterator[RawRecord]:
        self._f.seek(0)
        for _ in range(self.n):
            rec, err = pickle.load(self._f)
            if err is not None:
                rec.error = BadRecord(*err)
            yield rec
        self.close()

    def close(self) -> None:
        self._f.close()
