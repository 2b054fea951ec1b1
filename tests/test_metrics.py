"""Prometheus metrics of the embedded runner (`streamdet run --metrics-port`): the counters
tell what the run did, and no label carries a URL or a domain."""

from __future__ import annotations

import json
import random
import subprocess
import time
import urllib.request

from prometheus_client import CollectorRegistry

from streamdet.adapters.embedded import EmbeddedRunner
from streamdet.adapters.inputs import open_source
from streamdet.adapters.metrics import METRICS, Metrics
from streamdet.adapters.outputs import JsonlSink
from streamdet.adapters.sensor import Sensor
from streamdet.engine.params import Params
from streamdet.state.kv import MemoryKV
from streamdet.state.txn import Store

from .cli_helpers import bad_lines, build_crawl, popen, read_jsonl, with_bad, write_jsonl

ALLOWED_LABELS = {"reason", "event", "stage", "topic", "partition", "role", "le", "table",
                  "level"}  # level: host or domain (SPEC §8 sites)


def _run(tmp_path, records, params: Params | None = None):
    path = write_jsonl(tmp_path / "in.jsonl", records)
    reg = CollectorRegistry()
    m = Metrics(reg)
    events, dead = JsonlSink(str(tmp_path / "ev.jsonl")), JsonlSink(str(tmp_path / "dl.jsonl"))
    try:
        summary = EmbeddedRunner(Store(MemoryKV()), params or Params(), events, dead, batch_size=16,
                                 sensor=m).run([open_source(str(path))])
    finally:
        events.close()
        dead.close()
    return reg, summary, read_jsonl(tmp_path / "ev.jsonl")


def test_counters_tell_what_the_run_did(tmp_path):
    rng = random.Random(3)
    crawl = build_crawl(seed=3, n_pages=80, n_quilts=10)
    for r in crawl:
        r["fetched_at"] = time.time() - 5.0  # fetched 5 s ago
    records = with_bad(crawl, rng)
    reg, summary, events = _run(tmp_path, records)
    get = reg.get_sample_value
    assert get("streamdet_pages_total") == summary.pages == len(crawl)
    assert get("streamdet_input_bytes_total") > 0
    for reason, n in summary.dead.items():
        assert get("streamdet_dead_letters_total", {"reason": reason}) == n
    assert sum(summary.dead.values()) == len(bad_lines())
    for kind in ("quilt", "rescore", "unquilt"):
        assert get("streamdet_events_total", {"event": kind}) == sum(
            1 for e in events if e["event"] == kind)
    assert get("streamdet_events_total", {"event": "quilt"}) >= 3
    assert get("streamdet_rescore_fanout_count") == len(crawl)  # one per arrival
    # fetch->event latency: one per event (every record has fetched_at), all >= 5 s
    assert get("streamdet_fetch_to_event_seconds_count") == len(events) > 0
    assert get("streamdet_fetch_to_event_seconds_bucket", {"le": "2.5"}) == 0
    assert get("streamdet_page_processing_seconds_count", {"stage": "engine"}) == len(crawl)
    assert get("streamdet_state_postings") > 0
    assert get("streamdet_state_documents") == len({r["url"] for r in crawl})
    assert get("streamdet_common_grams_total") == 0  # m=50: nothing on more than 50 pages


def test_monster_candidates_gauge_follows_site_events(tmp_path):
    """A farm of 12 pages repeating one passage makes its host and its domain monster
    candidates; re-fetched as pages of their own, it stops being one (SPEC §8)."""
    phrase = " ".join(f"w{i}" for i in range(40))
    farm = [{"url": f"http://farm.example.com/p{i}", "text": f"{phrase} page {i}"}
            for i in range(12)]
    reg, _, events = _run(tmp_path, farm)
    assert reg.get_sample_value("streamdet_monster_sites", {"level": "host"}) == 1
    assert reg.get_sample_value("streamdet_monster_sites", {"level": "domain"}) == 1
    assert reg.get_sample_value("streamdet_events_total", {"event": "site"}) == 2 == sum(
        e["event"] == "site" for e in events)
    own = [{"url": r["url"], "text": f"words of page {i} only"} for i, r in enumerate(farm)]
    reg, _, _ = _run(tmp_path, farm + own[:6])
    assert reg.get_sample_value("streamdet_monster_sites", {"level": "host"}) == 0


def test_labels_are_bounded_and_names_exported(tmp_path):
    # m=8: the crawl's boilerplate shared by 12 pages becomes common
    reg, _, _ = _run(tmp_path, with_bad(build_crawl(seed=4, n_pages=40, n_quilts=4),
                                        random.Random(4)), Params(m=8))
    assert reg.get_sample_value("streamdet_common_grams_total") > 0
    names = set()
    for family in reg.collect():
        names.add(family.name)
        for sample in family.samples:
            assert set(sample.labels) <= ALLOWED_LABELS, sample
            assert not any("/" in v or "." in v and not v.replace(".", "").isdigit()
                           and v != "+Inf" for v in sample.labels.values()), sample
    # every exported family is declared (counters are listed without _total by the client)
    declared = {n.removesuffix("_total") for n in METRICS}
    assert names <= declared and declared <= names


def test_run_serves_metrics_while_it_runs(tmp_path):
    """`streamdet run --metrics-port 0` serves /metrics on the port it prints."""
    records = [json.dumps({"url": f"http://s{i}.example.com/", "text": "w " * 50}) for i in
               range(5)]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(records) + "\n")
    proc = popen("run", "--input", "-", "--state", tmp_path / "st", "--events", "/dev/null",
                 "--metrics-port", "0", "--batch", "1", "--analyzers", "0",
                 stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdin.write(path.read_bytes())
    proc.stdin.flush()
    line = proc.stderr.readline().decode()
    assert "metrics on http://127.0.0.1:" in line, line
    url = line.split("metrics on ", 1)[1].strip()
    deadline = time.monotonic() + 30
    body = ""
    while time.monotonic() < deadline:  # stdin stays open: the run is alive and serving
        body = urllib.request.urlopen(url, timeout=5).read().decode()
        if "streamdet_pages_total 5.0" in body:
            break
        time.sleep(0.2)
    proc.stdin.close()
    assert proc.wait(30) == 0
    assert "streamdet_pages_total 5.0" in body


def test_bad_neighbourhoods_gauge_follows_site_events(tmp_path):
    """Four farm pages under one directory share their paragraphs (on 3 pages or more:
    in L), the other sites' pages do not: the farm's host and directory are bad
    neighbourhoods; re-fetched with words of their own, they stop being bad (SPEC §8)."""
    spam = "<p>cheap pills for sale today</p><p>best casino bonus codes here</p>"
    farm = [{"url": f"http://farm.example.com/blog/{i}", "html": spam} for i in range(4)]
    other = [{"url": f"http://site{i % 3}.example.org/doc/{i}",
              "html": f"<p>an essay number {i} on rivers</p>"} for i in range(6)]
    params = Params(chunk_threshold=3)
    reg, _, events = _run(tmp_path, farm + other, params)
    bad = [e for e in events if e["event"] == "site" and e["level"] == "neighbourhood"]
    assert {e["neighbourhood"] for e in bad if e["bad"]} == {"farm.example.com/",
                                                              "farm.example.com/blog/"}
    assert reg.get_sample_value("streamdet_bad_neighbourhoods") == 2
    own = [{"url": r["url"], "html": f"<p>words of page {i} only here</p>"}
           for i, r in enumerate(farm)]
    reg, _, _ = _run(tmp_path, farm + other + own, params)
    assert reg.get_sample_value("streamdet_bad_neighbourhoods") == 0


class _Recorder(Sensor):
    """A sensor of its own: the hooks it cares about, counted."""

    def __init__(self) -> None:
        self.pages = self.dead = self.stages = 0
        self.kinds: list[str] = []

    def on_pages(self, pages: int, implausible_times: int) -> None:
        self.pages += pages

    def on_dead_letter(self, reason: str) -> None:
        self.dead += 1

    def on_stage(self, stage: str, seconds: float) -> None:
        assert stage == "embedded" and seconds >= 0
        self.stages += 1

    def on_events(self, events) -> None:
        self.kinds.extend(e["event"] for e in events)


def test_the_runner_tells_any_sensor_through_its_hooks(tmp_path):
    """The loop calls hooks, never a metric: a sensor that is not Prometheus sees the same
    run (and the hooks it leaves alone are the base class's no-ops)."""
    crawl = build_crawl(seed=5, n_pages=40, n_quilts=6)
    records = with_bad(crawl, random.Random(5))
    path = write_jsonl(tmp_path / "in.jsonl", records)
    rec = _Recorder()
    events, dead = JsonlSink(str(tmp_path / "ev.jsonl")), JsonlSink(str(tmp_path / "dl.jsonl"))
    try:
        summary = EmbeddedRunner(Store(MemoryKV()), Params(), events, dead, batch_size=16,
                                 sensor=rec).run([open_source(str(path))])
    finally:
        events.close()
        dead.close()
    assert rec.pages == summary.pages == len(crawl)
    assert rec.dead == summary.dead_total == len(bad_lines())
    assert rec.stages >= -(-len(records) // 16)  # a batch at least every 16 records
    assert sorted(rec.kinds) == sorted(e["event"] for e in read_jsonl(tmp_path / "ev.jsonl"))
    assert "quilt" in rec.kinds
