"""What a run or a worker tells its observers, as hooks named for what happened.

The processing loops (adapters.embedded, adapters.worker) call these and nothing else: they
never touch a metric. `Sensor` does nothing; adapters.metrics.Metrics implements every
hook with Prometheus series, and a test or another exporter implements the hooks it
needs (faust's sensors are the model). A hook must not raise and must be cheap: it runs
inside the loop, most of them once a page or a batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class Sensor:
    """The hooks, every one a no-op."""

    # -- a worker's life ---------------------------------------------------------------
    def on_worker_start(self) -> None:
        """The worker runs."""

    def on_worker_stop(self) -> None:
        """The worker stopped."""

    def on_rejoin(self) -> None:
        """A failed round: the worker leaves its group and joins again from its states."""

    def on_rebalance(self) -> None:
        """A new assignment of partitions."""

    def on_partition_gone(self, topic: str, partition: int) -> None:
        """A partition no longer assigned: its lag is the next owner's to report."""

    def on_round(self, busy: float, gather: float) -> None:
        """A round's load (busy share) and the wait it lets records gather for."""

    # -- records and pages ---------------------------------------------------------------
    def on_input(self, nbytes: int) -> None:
        """Input records of `nbytes` bytes were read."""

    def on_dead_letter(self, reason: str) -> None:
        """A record went to the dead letters with this reason code."""

    def on_pages(self, pages: int, implausible_times: int) -> None:
        """Valid pages taken in; `implausible_times` of them had a fetched_at read as
        absent."""

    def on_page_seconds(self, stage: str, seconds_each: float, pages: int = 1) -> None:
        """`pages` records each took `seconds_each` at `stage` (analyse: parsed; engine:
        their share of a batch applied by `run`)."""

    def on_analysis_restarts(self, n: int) -> None:
        """Analysis processes replaced (a page past its deadline, a crash)."""

    # -- the engine ----------------------------------------------------------------------
    def on_stage(self, stage: str, seconds: float) -> None:
        """A batch's (or a round's) stage took `seconds`."""

    def on_rescored(self, fanout: Iterable[int], went_common: int) -> None:
        """Earlier documents each arrival changed; grams that became common."""

    def on_documents(self, n: int) -> None:
        """Live documents held now."""

    def on_events(self, events: Iterable[Mapping]) -> None:
        """Events sent downstream."""

    def on_event_latency(self, seconds: float) -> None:
        """From the fetched_at of an event's cause to the event leaving."""

    def on_sites(self, monsters: Mapping[str, int], bad_neighbourhoods: int) -> None:
        """The monster candidates by level, and the bad neighbourhoods, a state holds now."""

    # -- a worker's partitions and state -------------------------------------------------
    def on_lag(self, topic: str, partition: int, records: int) -> None:
        """Records behind a partition's high watermark."""

    def on_shards(self, doc: int, gram: int) -> None:
        """Shards owned, by role."""

    def on_state(self, disk_bytes: int, postings: int) -> None:
        """The state's bytes on disk and its gram postings."""

    def on_writes(self, written: Mapping[str, tuple[int, int]]) -> None:
        """What a batch (or a round, over the shards) wrote to the state: table ->
        (operations, bytes of keys and values)."""

    def on_fetch_gap(self) -> None:
        """A fetch skipped offsets; the worker reads again from the gap."""

    def on_deferred(self, records: int) -> None:
        """Records a doc shard left to its next round (over its memory)."""

    def on_replayed(self, records: int) -> None:
        """Records replayed to rebuild a shard's state."""
