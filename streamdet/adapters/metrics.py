"""Prometheus metrics of a worker or of `streamdet run --metrics-port`, and their endpoint.

`Metrics` is the Prometheus sensor (adapters.sensor): the loops call its hooks, and each
hook moves the series it concerns.

Names follow Prometheus conventions (`streamdet_` prefix, `_total` counters, base units),
and every label has a small fixed set of values (a reason code, an event kind, a stage,
a topic and partition of the pipeline) - never a URL or a domain.
The Grafana dashboard and the alert rules in deploy/ are tested against METRICS below.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)

from .sensor import Sensor

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
_PAGE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_FANOUT_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)


class Metrics(Sensor):
    """One set of streamdet metrics on a registry (the process-wide one by default)."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        r = registry
        self.pages = Counter("streamdet_pages_total", "Pages analysed (valid records).",
                             registry=r)
        self.input_bytes = Counter("streamdet_input_bytes_total",
                                   "Bytes of input records read.", registry=r)
        self.dead_letters = Counter("streamdet_dead_letters_total",
                                    "Records sent to the dead-letter destination, by reason.",
                                    ["reason"], registry=r)
        self.events = Counter("streamdet_events_total", "Events emitted, by kind.", ["event"],
                              registry=r)
        self.page_seconds = Histogram(
            "streamdet_page_processing_seconds",
            "Processing time per page: parse, tokenize and hash (stage=analyse), or its share "
            "of a batch of the embedded engine (stage=engine).", ["stage"],
            buckets=_PAGE_BUCKETS, registry=r)
        self.batch_seconds = Histogram(
            "streamdet_batch_seconds", "Time to handle one fetched batch, by pipeline stage.",
            ["stage"], buckets=_LATENCY_BUCKETS, registry=r)
        self.latency = Histogram(
            "streamdet_fetch_to_event_seconds",
            "From the fetched_at of the record that caused an event to the event's emission.",
            buckets=_LATENCY_BUCKETS, registry=r)
        self.fanout = Histogram(
            "streamdet_rescore_fanout",
            "Earlier documents one arrival changed (on a worker: per arrival and gram shard).",
            buckets=_FANOUT_BUCKETS, registry=r)
        self.common = Counter("streamdet_common_grams_total",
                              "Grams that became common (held by more than m documents).",
                              registry=r)
        self.postings = Gauge("streamdet_state_postings",
                              "Gram postings held (first-holder pairs and overlay entries).",
                              registry=r)
        self.documents = Gauge("streamdet_state_documents", "Live documents held.", registry=r)
        self.write_ops = Counter("streamdet_state_write_ops_total",
                                 "Operations written to the state, by table.", ["table"],
                                 registry=r)
        self.write_bytes = Counter("streamdet_state_write_bytes_total",
                                   "Bytes (keys and values) written to the state, by table.",
                                   ["table"], registry=r)
        self.state_bytes = Gauge("streamdet_state_disk_bytes",
                                 "Bytes of the RocksDB state on disk.", registry=r)
        self.lag = Gauge("streamdet_consumer_lag_records",
                         "Records behind the partition's high watermark (from fetch responses).",
                         ["topic", "partition"], registry=r)
        self.up = Gauge("streamdet_worker_up", "1 while the worker is running.", registry=r)
        self.round_gather = Gauge(
            "streamdet_round_gather_seconds",
            "How long the worker lets records gather between the starts of two rounds: 0 "
            "while its rounds keep up, up to STREAMDET_ROUND_MS as they keep it busy.",
            registry=r)
        self.round_busy = Gauge(
            "streamdet_round_busy_ratio",
            "Share of the last seconds the worker spent in rounds (from records fetched to "
            "the round handed to its acknowledgements): its load, which sets the gather wait.",
            registry=r)
        self.rebalances = Counter("streamdet_rebalances_total",
                                  "Partition assignments this worker went through.", registry=r)
        self.shards = Gauge("streamdet_shards_owned", "Shards this worker owns, by role.",
                            ["role"], registry=r)
        self.rejoins = Counter(
            "streamdet_worker_rejoins_total",
            "Times the worker left its group after a failed round (a send never "
            "acknowledged, records missing for good, a shard that would not open) and joined it "
            "again from its shards' states.", registry=r)
        self.fetch_gaps = Counter(
            "streamdet_fetch_gaps_total",
            "Fetches of an internal partition that skipped offsets (a batch the broker "
            "counted but did not serve yet): the worker read again from the gap "
            "(adapters.contiguity).", registry=r)
        self.replayed = Counter("streamdet_replayed_records_total",
                                "Records replayed to rebuild shard state.", registry=r)
        self.deferred = Counter(
            "streamdet_deferred_records_total",
            "Records a doc shard fetched and left to its next round, which fetches them "
            "again: its rounds held more documents than the memory budget gives one.",
            registry=r)
        self.implausible_times = Counter(
            "streamdet_implausible_times_total",
            "Records whose fetched_at was not finite, before 1990 or more than a day ahead "
            "of the clock, and read as absent.", registry=r)
        self.analysis_restarts = Counter(
            "streamdet_analysis_restarts_total",
            "Analysis processes replaced: a page past --page-timeout, or a crash.", registry=r)
        for reason in ("not_utf8", "not_json", "not_object", "no_url", "bad_url", "no_body",
                       "too_large", "too_slow", "unreadable", "unparsable"):
            self.dead_letters.labels(reason)  # every series exists from the start (rate())
        self.monsters = Gauge("streamdet_monster_sites",
                              "Hosts and domains that are monster candidates now (SPEC §8), "
                              "by level.", ["level"], registry=r)
        self.bad_neighbourhoods = Gauge("streamdet_bad_neighbourhoods",
                                        "URL-prefix neighbourhoods that are bad now: badness "
                                        "above mu + sigma (SPEC §8).", registry=r)
        for kind in ("quilt", "rescore", "unquilt", "partial", "partial_gone", "cluster",
                     "trap", "site"):
            self.events.labels(kind)

    # -- the sensor's hooks (adapters.sensor) ---------------------------------------------
    def on_worker_start(self) -> None:
        self.up.set(1)

    def on_worker_stop(self) -> None:
        self.up.set(0)

    def on_rejoin(self) -> None:
        self.rejoins.inc()

    def on_rebalance(self) -> None:
        self.rebalances.inc()

    def on_partition_gone(self, topic: str, partition: int) -> None:
        try:
            self.lag.remove(topic, str(partition))
        except KeyError:
            pass  # never reported

    def on_round(self, busy: float, gather: float) -> None:
        self.round_busy.set(busy)
        self.round_gather.set(gather)

    def on_input(self, nbytes: int) -> None:
        self.input_bytes.inc(nbytes)

    def on_dead_letter(self, reason: str) -> None:
        self.dead_letters.labels(reason).inc()

    def on_pages(self, pages: int, implausible_times: int) -> None:
        self.pages.inc(pages)
        self.implausible_times.inc(implausible_times)

    def on_page_seconds(self, stage: str, seconds_each: float, pages: int = 1) -> None:
        series = self.page_seconds.labels(stage)
        for _ in range(pages):
            series.observe(seconds_each)

    def on_analysis_restarts(self, n: int) -> None:
        self.analysis_restarts.inc(n)

    def on_stage(self, stage: str, seconds: float) -> None:
        self.batch_seconds.labels(stage).observe(seconds)

    def on_rescored(self, fanout: Iterable[int], went_common: int) -> None:
        for n in fanout:
            self.fanout.observe(n)
        self.common.inc(went_common)

    def on_documents(self, n: int) -> None:
        self.documents.set(n)

    def on_events(self, events: Iterable[Mapping]) -> None:
        for ev in events:
            kind = ev["event"]
            self.events.labels(kind).inc()
            if kind == "site" and ev["level"] == "neighbourhood":
                self.bad_neighbourhoods.inc(1 if ev["bad"] else -1)
            elif kind == "site":
                self.monsters.labels(ev["level"]).inc(1 if ev["monster"] else -1)

    def on_event_latency(self, seconds: float) -> None:
        self.latency.observe(max(0.0, seconds))

    def on_sites(self, monsters: Mapping[str, int], bad_neighbourhoods: int) -> None:
        for level, n in monsters.items():
            self.monsters.labels(level).set(n)
        self.bad_neighbourhoods.set(bad_neighbourhoods)

    def on_lag(self, topic: str, partition: int, records: int) -> None:
        self.lag.labels(topic, str(partition)).set(max(0, records))

    def on_shards(self, doc: int, gram: int) -> None:
        self.shards.labels("doc").set(doc)
        self.shards.labels("gram").set(gram)

    def on_state(self, disk_bytes: int, postings: int) -> None:
        self.state_bytes.set(disk_bytes)
        self.postings.set(postings)

    def on_writes(self, written: Mapping[str, tuple[int, int]]) -> None:
        for table, (ops, nbytes) in written.items():
            self.write_ops.labels(table).inc(ops)
            self.write_bytes.labels(table).inc(nbytes)

    def on_fetch_gap(self) -> None:
        self.fetch_gaps.inc()

    def on_deferred(self, records: int) -> None:
        self.deferred.inc(records)

    def on_replayed(self, records: int) -> None:
        self.replayed.inc(records)


METRICS = ("streamdet_pages_total", "streamdet_input_bytes_total",
           "streamdet_dead_letters_total", "streamdet_events_total",
           "streamdet_page_processing_seconds", "streamdet_batch_seconds",
           "streamdet_fetch_to_event_seconds", "streamdet_rescore_fanout",
           "streamdet_common_grams_total", "streamdet_state_postings",
           "streamdet_state_documents", "streamdet_state_disk_bytes",
           "streamdet_state_write_ops_total", "streamdet_state_write_bytes_total",
           "streamdet_consumer_lag_records", "streamdet_worker_up",
           "streamdet_round_gather_seconds", "streamdet_round_busy_ratio",
           "streamdet_rebalances_total",
           "streamdet_shards_owned", "streamdet_replayed_records_total",
           "streamdet_deferred_records_total",
           "streamdet_worker_rejoins_total", "streamdet_fetch_gaps_total",
           "streamdet_implausible_times_total", "streamdet_analysis_restarts_total",
           "streamdet_monster_sites", "streamdet_bad_neighbourhoods")

_default: Metrics | None = None


def metrics() -> Metrics:
    """The process's metrics (created once, on the default registry)."""
    global _default
    if _default is None:
        _default = Metrics()
    return _default


def serve(port: int, host: str = "127.0.0.1") -> int:
    """Serve /metrics on host:port (0: any free port) in a daemon thread; the real port."""
    metrics()
    server, _thread = start_http_server(port, addr=host)
    return server.server_port
