"""The single-process pipeline behind `streamdet run`: one gram shard and one doc shard.

Records are read in batches; each batch is validated, analysed, applied to the engine in a
state transaction, its events and dead letters are flushed, and then the transaction
commits together with the new input positions. Killed at any moment, the state is that of
the last commit, and the next run skips exactly the records that commit covered.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from ..engine.analysis import Analyzed, analyze
from ..engine.core import Engine
from ..engine.params import Params
from ..engine.records import DEFAULT_MAX_BODY, BadRecord, page_from_object, parse_record
from ..state.txn import StateError, Store
from .inputs import RawRecord, Source
from .outputs import JsonlSink, dead_letter, utc_now

STATE_FORMAT = "1"


@dataclass
class RunSummary:
    pages: int = 0
    skipped: int = 0  # records already applied by an earlier run
    dead: Counter = field(default_factory=Counter)
    events: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    fanout: list[int] = field(default_factory=list)

    @property
    def dead_total(self) -> int:
        return sum(self.dead.values())


def open_store_checked(store: Store, params: Params) -> None:
    """Refuse a state built with other parameters or by an incompatible format."""
    fmt = store.meta("format")
    if fmt is not None and fmt != STATE_FORMAT:
        raise StateError(f"state format {fmt} is not supported by this version (expects {STATE_FORMAT})")
    stored = store.meta("params")
    if stored is None:
        store.set_meta("format", STATE_FORMAT)
        store.set_meta("params", params.fingerprint())
    else:
        params.check_same(Params.from_fingerprint(stored), "this state directory")


class EmbeddedRunner:
    def __init__(self, store: Store, params: Params, events: JsonlSink, dead: JsonlSink,
                 batch_size: int = 128, max_body: int = DEFAULT_MAX_BODY,
                 on_batch: Callable[[RunSummary], None] | None = None) -> None:
        open_store_checked(store, params)
        self.store = store
        self.params = params
        self.engine = Engine(params)
        self.events = events
        self.dead = dead
        self.batch_size = batch_size
        self.max_body = max_body
        self.on_batch = on_batch

    def run(self, sources: Iterable[Source]) -> RunSummary:
        summary = RunSummary()
        start = time.perf_counter()
        positions = self.store.positions()
        for batch in self._batches(sources, positions, summary):
            self._apply(batch, positions, summary)
            summary.seconds = time.perf_counter() - start
            if self.on_batch:
                self.on_batch(summary)
        summary.seconds = time.perf_counter() - start
        return summary

    def _batches(self, sources: Iterable[Source], positions: dict[str, int],
                 summary: RunSummary) -> Iterator[list[RawRecord]]:
        batch: list[RawRecord] = []
        for source in sources:
            done = positions.get(source.key, 0)
            for rec in source.records():
                if rec.index < done:
                    summary.skipped += 1
                    continue
                batch.append(rec)
                if len(batch) >= self.batch_size:
                    yield batch
                    batch = []
        if batch:
            yield batch

    def _apply(self, batch: list[RawRecord], positions: dict[str, int],
               summary: RunSummary) -> None:
        pages: list[Analyzed] = []
        for rec in batch:
            try:
                pages.append(analyze(self._page(rec), self.params))
            except BadRecord as err:
                self.dead.write(dead_letter(rec, err))
                summary.dead[err.reason] += 1
            positions[rec.source] = rec.index + 1
        txn = self.store.begin()
        events, stats = self.engine.process(txn, pages)
        at = utc_now()
        for ev in events:
            ev["at"] = at
            self.events.write(ev)
            summary.events[ev["event"]] += 1
        self.events.flush()
        self.dead.flush()
        txn.commit(positions)
        summary.pages += stats.pages
        summary.fanout.extend(stats.fanout or ())

    def _page(self, rec: RawRecord):
        if rec.error is not None:
            raise rec.error
        if isinstance(rec.payload, dict):
            return page_from_object(rec.payload, self.max_body)
        return parse_record(rec.payload, self.max_body)
