"""A real Prometheus (from apt) scrapes a real `streamdet worker` on loopback, with the
shipped rules of deploy/prometheus/rules/streamdet.yml loaded.

One worker on the session's Kafka broker (tansu), a few pages (one of them a quilt) and one
bad record; then Prometheus' HTTP API must show the worker up, every page counted, the dead
letter with its reason, the quilt event and its fetch-to-event latency, the lag back to 0,
the recording rules evaluated and no alert firing; every query of the Grafana dashboard
runs without error. Stopping the worker turns its target's `up` to 0 (what
StreamdetWorkerDown watches).

A missing `prometheus` binary is a failure, never a skip
(`apt-get install -y --no-install-recommends prometheus`).
"""

from __future__ import annotations

import json
import random
import re
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from .cli_helpers import popen, streamdet, write_jsonl
from .kafka_broker import (  # noqa: F401 - fixtures
    KafkaBroker,
    free_port,
    kafka_broker_fixture,
    unique_name,
)
from .test_dashboard import all_queries

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "rules" / "streamdet.yml"
JOB = "streamdet-worker"  # as in deploy/prometheus/prometheus.yml
SHARDS = 2
TIMING = {"STREAMDET_SESSION_MS": "3000", "STREAMDET_HEARTBEAT_MS": "300"}
PORT_LINE = re.compile(rb"streamdet: worker metrics on http://127\.0\.0\.1:(\d+)/metrics")
BAD = b"this is not json\n"
SNAPSHOT = ("streamdet_(pages_total|events_total|fetch_to_event_seconds_count|worker_up"
            "|consumer_lag_records)|up")


def _records() -> list[dict]:
    """Six pages on six servers and a quilt of 40-word passages of five of them: seven
    valid pages, one quilt event (fetched_at now, so its latency is real)."""
    rng = random.Random(4)
    now = time.time()
    sources = [{"url": f"https://www.site{i}.example{i}.org/page",
                "text": " ".join(f"w{rng.randrange(10**7):07d}" for _ in range(300)),
                "fetched_at": now} for i in range(6)]
    quilt = {"url": "https://www.quiltfarm.example.com/story",
             "text": " ".join(" ".join(s["text"].split()[50:90]) for s in sources[:5]),
             "fetched_at": now}
    return [*sources, quilt]


class Prometheus:
    """A Prometheus server on a loopback port with its own config and storage."""

    def __init__(self, tmp: Path, target: str) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("prometheus not found on PATH: install it "
                        "(`apt-get install -y --no-install-recommends prometheus`)")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                       "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [{"job_name": JOB,
                                "static_configs": [{"targets": [target]}]}],
        }
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log_path = tmp / "prometheus.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [binary, f"--config.file={tmp / 'prometheus.yml'}",
                 f"--storage.tsdb.path={tmp / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=log, stderr=subprocess.STDOUT)

    def get(self, path: str, **params: str) -> dict:
        url = f"{self.url}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as resp:
            return json.loads(resp.read())

    def query(self, expr: str) -> list[dict]:
        """An instant query's result (vector elements; [] when empty)."""
        body = self.get("/api/v1/query", query=expr)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def value(self, expr: str) -> float | None:
        """The single value of a query, or None while it has no (or several) results."""
        result = self.query(expr)
        return float(result[0]["value"][1]) if len(result) == 1 else None

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"prometheus not ready in {timeout} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Worker:
    """`streamdet worker` as a real process, /metrics on a port of its own choosing."""

    def __init__(self, broker: KafkaBroker, tmp: Path, prefix: str) -> None:
        self.log_path = tmp / "worker.log"
        with open(self.log_path, "wb") as log:
            self.proc = popen("worker", "--broker", broker.bootstrap, "--state", tmp / "state",
                              "--port", "0", "--prefix", prefix, "--shards", SHARDS,
                              stdout=log, stderr=log)

    def metrics_port(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = PORT_LINE.search(self.log_path.read_bytes())
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"no metrics port line from the worker:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def worker_and_prometheus(kafka_broker: KafkaBroker, tmp_path: Path, monkeypatch):
    for k, v in TIMING.items():  # short group timeouts: the worker joins within seconds
        monkeypatch.setenv(k, v)
    prefix = unique_name("prom")
    worker = Worker(kafka_broker, tmp_path, prefix)
    prom = None
    try:
        port = worker.metrics_port()
        prom = Prometheus(tmp_path, f"127.0.0.1:{port}")
        prom.wait_ready()
        yield worker, prom, prefix
    finally:
        worker.stop()
        if prom is not None:
            prom.stop()


def _wait(what: str, check: Callable[[], bool], worker: Worker, prom: Prometheus,
          timeout: float = 90, running: bool = True) -> None:
    """Until check() holds; fails after timeout, or at once if the worker that should be
    running exited, with what Prometheus and the worker saw."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if running and worker.proc.poll() is not None:
            break
        time.sleep(0.5)
    targets = prom.get("/api/v1/targets")["data"]["activeTargets"]
    counters = prom.query(f'{{job="{JOB}", __name__=~"{SNAPSHOT}"}}')
    raise AssertionError(
        f"not seen through Prometheus' API: {what}\n"
        f"targets: {[(t['scrapeUrl'], t['health'], t['lastError']) for t in targets]}\n"
        f"counters: {[(c['metric'], c['value'][1]) for c in counters]}\n"
        f"worker (exit {worker.proc.poll()}):\n{worker.log()}\nprometheus:\n{prom.log()}")


def test_prometheus_scrapes_a_running_worker(worker_and_prometheus, kafka_broker, tmp_path):
    worker, prom, prefix = worker_and_prometheus
    sel = f'{{job="{JOB}"}}'

    # the worker is scraped and consuming before any record is produced (so the counters'
    # first samples are 0 and rate() sees every page)
    _wait("up == 1 and streamdet_worker_up == 1",
          lambda: prom.value(f"up{sel}") == 1 and prom.value(f"streamdet_worker_up{sel}") == 1,
          worker, prom)
    assert prom.value(f"streamdet_pages_total{sel}") == 0
    # every reason's dead-letter series exists from the start, at 0
    reasons = {r["metric"]["reason"] for r in prom.query(f"streamdet_dead_letters_total{sel}")}
    assert {"not_json", "not_utf8", "no_url", "bad_url", "no_body"} <= reasons

    records = _records()
    path = write_jsonl(tmp_path / "pages.jsonl", [*records, BAD])
    streamdet("produce", "--broker", kafka_broker.bootstrap, "--prefix", prefix,
              "--shards", SHARDS, path)

    n = len(records)
    _wait(f"streamdet_pages_total == {n}",
          lambda: (prom.value(f"streamdet_pages_total{sel}") or 0) >= n, worker, prom)
    assert prom.value(f"streamdet_pages_total{sel}") == n
    _wait("the bad record as a not_json dead letter",
          lambda: prom.value(f'streamdet_dead_letters_total{{job="{JOB}", reason="not_json"}}')
          == 1, worker, prom)
    assert prom.value(f"sum(streamdet_dead_letters_total{sel})") == 1
    lines = len(records) + 1  # every record is its line without the newline
    assert prom.value(f"streamdet_input_bytes_total{sel}") == path.stat().st_size - lines
    # the quilt (whatever the order its sources reach the shards in: a quilt event, maybe
    # rescores after it) and the fetch-to-event latency of every event
    _wait("the quilt event and a fetch-to-event latency for each event",
          lambda: (prom.value(f'streamdet_events_total{{job="{JOB}", event="quilt"}}') or 0) >= 1
          and prom.value(f"streamdet_fetch_to_event_seconds_count{sel}")
          == prom.value(f"sum(streamdet_events_total{sel})"), worker, prom)
    assert prom.value(f'streamdet_events_total{{job="{JOB}", event="quilt"}}') == 1
    assert prom.value(f'streamdet_events_total{{job="{JOB}", event="unquilt"}}') == 0
    events = prom.value(f"sum(streamdet_events_total{sel})")
    assert prom.value(f'streamdet_fetch_to_event_seconds_bucket{{job="{JOB}", le="+Inf"}}') \
        == events
    assert prom.value(f"streamdet_rescore_fanout_count{sel}") >= n
    stages = {r["metric"]["stage"] for r in prom.query(f"streamdet_batch_seconds_count{sel} > 0")}
    assert {"ingest", "gram_shard", "doc_shard", "deliver"} <= stages
    _wait("consumer lag series per topic and partition, all back to 0",
          lambda: len(prom.query(f"streamdet_consumer_lag_records{sel}")) >= 2
          and prom.value(f"sum(streamdet_consumer_lag_records{sel})") == 0, worker, prom)
    topics = {r["metric"]["topic"] for r in prom.query(f"streamdet_consumer_lag_records{sel}")}
    assert f"{prefix}-pages" in topics
    owned = {r["metric"]["role"]: float(r["value"][1])
             for r in prom.query(f"streamdet_shards_owned{sel}")}
    assert owned == {"doc": SHARDS, "gram": SHARDS}  # the only worker owns every shard
    assert prom.value(f"streamdet_rebalances_total{sel}") >= 1
    _wait("state gauges (refreshed every ~10 s)",
          lambda: (prom.value(f"streamdet_state_documents{sel}") or 0) >= n
          and (prom.value(f"streamdet_state_disk_bytes{sel}") or 0) > 0, worker, prom,
          timeout=60)
    assert prom.value(f"streamdet_state_postings{sel}") > 0
    written = {r["metric"]["table"] for r in
               prom.query(f"streamdet_state_write_bytes_total{sel} > 0")}
    assert {"grams", "docs", "urls", "meta"} <= written  # gram and doc shards, offsets

    # the shipped rules are loaded and evaluate against the real series
    groups = prom.get("/api/v1/rules")["data"]["groups"]
    assert [g["name"] for g in groups] == ["streamdet"]
    bad = [(r["name"], r.get("lastError")) for g in groups for r in g["rules"]
           if r["health"] != "ok"]
    assert not bad, bad
    _wait("recording rules with values",
          lambda: (prom.value(f"streamdet:pages:rate5m{sel}") or 0) > 0
          and (prom.value(f"streamdet:dead_letter_ratio:rate5m{sel}") or 0) > 0
          and prom.value(f"streamdet:consumer_lag_records:sum{sel}") == 0
          and prom.value(f"streamdet:fetch_to_event_slo_errors:ratio_rate5m{sel}") is not None,
          worker, prom)
    ratio = prom.value(f"streamdet:dead_letter_ratio:rate5m{sel}")
    assert 0 < ratio < 1
    firing = prom.query('ALERTS{alertstate="firing"}')
    assert not any(a["metric"]["alertname"] == "StreamdetWorkerDown" for a in firing), firing

    # every query of the Grafana dashboard is valid PromQL on this Prometheus
    errors, with_data = [], 0
    for where, expr in all_queries():
        if expr.lstrip().startswith("label_values("):  # a Grafana function, not PromQL
            continue
        q = (expr.replace("$__rate_interval", "1m").replace("$job", ".*")
             .replace("$instance", ".*"))
        try:
            with_data += bool(prom.query(q))
        except Exception as exc:  # noqa: BLE001 - collected, reported below
            errors.append(f"{where}: {q}: {exc}")
    assert not errors, "dashboard queries Prometheus refuses:\n" + "\n".join(errors)
    assert with_data >= 20, f"only {with_data} dashboard queries returned data"

    # a stopped worker: its target goes down (the input of StreamdetWorkerDown)
    worker.stop()
    assert worker.proc.returncode == 0, worker.log()
    _wait("up == 0 after the worker stopped", lambda: prom.value(f"up{sel}") == 0,
          worker, prom, timeout=30, running=False)
