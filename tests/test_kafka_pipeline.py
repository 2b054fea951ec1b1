"""The Kafka pipeline (`streamdet worker` x2, `produce`, `events`) on a real broker (tansu)
against `streamdet run` on the same records: same documents, patch counts and covers;
the same when a worker is SIGKILLed mid-stream and comes back without its state; bad
records on the dead-letter topic; workers refuse other parameters.

Each test runs its own pipeline (a topic prefix of its own) on the session's broker.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from prometheus_client import REGISTRY

from streamdet.adapters.batch_sizer import BatchSizer
from streamdet.adapters.inputs import PREFIX_KEPT, open_source
from streamdet.adapters.kafka import Timing, Topics
from streamdet.adapters.publish import event_line, produce
from streamdet.adapters.worker import Worker
from streamdet.engine.params import Params
from streamdet.engine.routing import url_shard
from streamdet.engine.shard_step import ShardState
from streamdet.engine.spam_model import Model, blind, stored_model
from streamdet.reading.states import worker_shards
from streamdet.state.rocks import RocksKV
from streamdet.state.txn import Store

from .built_once import built_once
from .cli_helpers import (
    bad_lines,
    build_crawl,
    dump,
    parallel,
    popen,
    read_jsonl,
    streamdet,
    with_bad,
)
from .harness import (
    check_cluster_events,
    check_events,
    check_pair_events,
    check_site_events,
    normalize_row,
    without_repeats,
)
from .kafka_broker import (  # noqa: F401 - fixtures
    KafkaBroker,
    kafka_broker_fixture,
    run_sync,
    topic_ends,
    unique_name,
)
from .spam_crawl import SPAM_PARAMS, last_scores, spam_crawl

SHARDS = 4
TRAPS = ("http://trap.example/cal/2024/cal/2024/cal/index.html",  # "cal" 3 times
         "http://trap.example/x/%78/./x/y/../p?x=x")  # "x" 3 times once normalised
TIMING = {"STREAMDET_SESSION_MS": "3000", "STREAMDET_HEARTBEAT_MS": "300"}
POLL_S = 0.1  # between two looks at a condition a test waits for


def _write_lines(path: Path, records: list) -> Path:
    with open(path, "wb") as f:
        for r in records:
            f.write(r if isinstance(r, bytes) else
                    json.dumps(r, ensure_ascii=False).encode("utf-8") + b"\n")
    return path


class Pipeline:
    """Workers of one pipeline, started as real processes."""

    def __init__(self, broker: KafkaBroker, tmp: Path) -> None:
        self.broker, self.tmp = broker, tmp
        self.prefix = unique_name("sd")
        self.workers: dict[str, subprocess.Popen] = {}
        self.since: dict[str, int] = {}  # each worker's log size when it last started

    def args(self) -> list[str]:
        return ["--broker", self.broker.bootstrap, "--prefix", self.prefix]

    def start(self, name: str, *extra, extra_env: dict | None = None) -> subprocess.Popen:
        path = self.tmp / f"{name}.log"
        self.since[name] = path.stat().st_size if path.exists() else 0
        log = open(path, "ab")  # noqa: SIM115 - closed with the process
        proc = popen("worker", *self.args(), "--state", self.tmp / name, "--port", "0",
                     "--shards", SHARDS, *extra, stdout=log, stderr=log, extra_env=extra_env)
        self.workers[name] = proc
        return proc

    def produce(self, path: Path, rate: float | None = None) -> None:
        streamdet("produce", *self.args(), "--shards", SHARDS, *(
            ["--rate", rate] if rate else []), path)

    def send(self, path: Path) -> None:
        """What `produce` does, from this process (no interpreter to start): for a test
        that sends records one at a time."""
        run_sync(produce(self.broker.bootstrap, [open_source(str(path))],
                         Topics.named(self.prefix), shards=SHARDS))

    def events(self) -> list[dict]:
        """The events topic as `streamdet events` prints it (what is no event skipped),
        read to its ends: once the pipeline is idle (wait_idle) every event of its inputs
        is there, as a worker commits a round's inputs once its events are acknowledged."""
        lines = (event_line(r.value) for r in self.broker.read_topic(f"{self.prefix}-events"))
        return [json.loads(line) for line in lines if line is not None]

    def wait_idle(self, timeout: float = 180) -> None:
        """Until every input of the pipeline is consumed and committed (committed offsets
        equal the high watermarks on pages, docs, grams and deltas), twice in a row."""
        deadline = time.monotonic() + timeout
        calm = 0
        while time.monotonic() < deadline:
            for name, proc in self.workers.items():
                if proc.poll() is not None:
                    raise AssertionError(f"worker {name} exited {proc.returncode}:\n"
                                         + (self.tmp / f"{name}.log").read_text()[-3000:])
            calm = calm + 1 if run_sync(self._idle()) else 0
            if calm >= 2:
                return
            time.sleep(POLL_S)
        raise AssertionError("pipeline not idle in time:\n" + "\n".join(
            (self.tmp / f"{n}.log").read_text()[-2000:] for n in self.workers))

    def wait_ready(self, *names: str, timeout: float = 120) -> None:
        """Until each worker named has opened the shards the group assigned it since it
        last started: every one of them is then a member, so pages sent from here on
        find the group as the test set it up (a failpoint or a kill lands mid-stream,
        with no join still to come)."""
        for name in names:
            self.wait_log(name, "assigned shards open", self.since[name], timeout)

    def wait_for(self, check: Callable[[], object], what: str, timeout: float = 120) -> None:
        """Until `check()` holds; `what` says what did not happen in time."""
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, what
            time.sleep(POLL_S)

    def wait_log(self, name: str, text: str, since: int = 0, timeout: float = 120) -> None:
        """Until worker `name`'s log holds `text` past byte `since` (the log's size before
        a restart: the file is appended to), the worker still running."""
        log = self.tmp / f"{name}.log"
        deadline = time.monotonic() + timeout
        while text.encode() not in log.read_bytes()[since:]:
            proc = self.workers[name]
            assert proc.poll() is None and time.monotonic() < deadline, (
                f"{text!r} not in {name}'s log:\n" + log.read_text()[-3000:])
            time.sleep(POLL_S)

    def committed(self, topic: str) -> dict[int, int]:
        """The group's committed offsets on one of the pipeline's topics."""
        name = f"{self.prefix}-{topic}"
        parts = range(SHARDS) if topic != "pages" else self.broker.high_watermarks(name)
        return run_sync(self._committed({name: parts}))[name]

    async def _committed(self, parts: dict[str, Iterable[int]]) -> dict[str, dict[int, int]]:
        """The group's committed offsets on the partitions given, from one consumer."""
        c = AIOKafkaConsumer(bootstrap_servers=self.broker.bootstrap, group_id=self.prefix,
                             enable_auto_commit=False)
        await c.start()
        try:
            return {topic: {p: (await c.committed(TopicPartition(topic, p)) or 0) for p in ps}
                    for topic, ps in parts.items()}
        finally:
            await c.stop()

    async def _idle(self) -> bool:
        """Every input topic committed up to its end, and no end moved while they were
        read: a message in hand on a topic read later may produce to one read before."""
        topics = [f"{self.prefix}-{t}" for t in ("pages", "docs", "grams", "deltas",
                                                 "review-labels")]
        ends = await topic_ends(self.broker.bootstrap, topics)
        return await self._committed(ends) == ends == await topic_ends(self.broker.bootstrap,
                                                                        topics)

    def dead_letters(self) -> list:
        return self.broker.read_topic(f"{self.prefix}-dead-letter")

    def dump(self, *extra) -> bytes:
        args = list(extra)
        for name in self.workers:
            args += ["--state", self.tmp / name]
        return dump_states(args)

    def phrases(self) -> bytes:
        """`streamdet phrases` over every worker's state (SPEC §8)."""
        args = ["--top", PHRASES_TOP, "--json"]
        for name in self.workers:
            args += ["--state", self.tmp / name]
        return streamdet("phrases", *args).stdout

    def sites(self) -> bytes:
        """`streamdet sites` of every size over every worker's state (SPEC §8)."""
        args = ["--json", "--min-pages", 1]
        for name in self.workers:
            args += ["--state", self.tmp / name]
        return streamdet("sites", *args).stdout

    def stop(self) -> None:
        for proc in self.workers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.workers.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def dump_states(args) -> bytes:
    return streamdet("dump", *args).stdout


@pytest.fixture
def pipeline(kafka_broker: KafkaBroker, tmp_path: Path, monkeypatch):
    for k, v in TIMING.items():  # short group timeouts: rebalances within seconds
        monkeypatch.setenv(k, v)
    p = Pipeline(kafka_broker, tmp_path)
    yield p
    p.stop()


@pytest.fixture(scope="module")
def crawl(tmp_path_factory) -> tuple[Path, bytes, bytes]:
    """Real pages, planted quilts, re-fetches and bad records in a random order, and the
    dump and the partial-duplicate pairs (`dump --partials`) `streamdet run` gives for them
    (built once a test run: `streamdet run`'s state beside the crawl is only read)."""
    tmp = built_once(tmp_path_factory, "pipeline-crawl", _reference_run)
    pairs = (tmp / "pairs.jsonl").read_bytes()
    assert len(pairs.splitlines()) >= 5  # pairs to get right: quilts hold donors' passages
    REFERENCE["phrases"] = (tmp / "phrases.jsonl").read_bytes()
    assert len(REFERENCE["phrases"].splitlines()) == PHRASES_TOP
    REFERENCE["sites"] = (tmp / "sites.jsonl").read_bytes()
    return tmp / "crawl.jsonl", (tmp / "dump.jsonl").read_bytes(), pairs


def _reference_run(tmp: Path) -> None:
    """The crawl, `streamdet run` on it, and what its state gives: dump, pairs, popular
    phrases, sites."""
    rng = random.Random(11)
    records = build_crawl(seed=11, n_pages=120, n_quilts=14)
    # crawler traps (SPEC §8): copies of a quilt under looping paths, turned away unseen
    records += [dict(records[0], url=u) for u in TRAPS]
    rng.shuffle(records)
    path = _write_lines(tmp / "crawl.jsonl", with_bad(records, rng))
    ref = tmp / "ref"
    streamdet("run", "--input", path, "--state", ref, "--events", tmp / "ref-events.jsonl")
    (tmp / "dump.jsonl").write_bytes(dump(ref))
    (tmp / "pairs.jsonl").write_bytes(streamdet("dump", "--partials", "--state", ref).stdout)
    (tmp / "phrases.jsonl").write_bytes(streamdet("phrases", "--state", ref, "--top",
                                                  PHRASES_TOP, "--json").stdout)
    (tmp / "sites.jsonl").write_bytes(streamdet("sites", "--state", ref, "--json",
                                                "--min-pages", 1).stdout)


# What `streamdet run` gives for the crawl beside its dump and pairs (set by `crawl`): the
# popular phrases and the sites and neighbourhoods (SPEC §8), whatever parameters of SPEC
# §1 and §5 a test changes (the sites' patch means and quilted counts: when it changes none)
REFERENCE: dict[str, bytes] = {}
PHRASES_TOP = 40


def _rows(raw: bytes) -> dict[str, dict]:
    return {r["url"]: r for r in map(json.loads, raw.splitlines())}


def _check_events_match(events: list[dict], expected: dict[str, dict]) -> None:
    """Exact repeats are allowed (at-least-once); any other event must change what a
    consumer holds of its URL (SPEC §9: restarts are invisible downstream), and the
    newest ones tell the final state."""
    problems = check_events(without_repeats(events), expected)
    assert not problems, "\n".join(problems)


def _finish_and_check(pipeline: Pipeline, reference_dump: bytes, reference_pairs: bytes,
                      log_of: str = "w1", same_sites: bool = True) -> str:
    """Once the pipeline is idle: the events and the shard states equal `streamdet run`'s
    (normalized rows; the partial-duplicate pairs and, unless the test changed what they
    count (`same_sites`), the sites and neighbourhoods byte for byte; the pair, cluster and
    site events tell them), the workers stopped; returns the log of worker `log_of`."""
    pipeline.wait_idle()
    want = _rows(reference_dump)
    events = pipeline.events()
    _check_events_match(events, want)
    pipeline.stop()  # (dump opens the shard states)
    assert not loose_ends(pipeline.tmp)
    # the four commands at once: each opens the states read-only
    dumped, partials, phrases, listed = parallel(
        pipeline.dump, lambda: pipeline.dump("--partials"), pipeline.phrases, pipeline.sites)
    got = _rows(dumped)
    assert {u: normalize_row(r) for u, r in got.items()} == {
        u: normalize_row(r) for u, r in want.items()}
    assert partials == reference_pairs
    assert phrases == REFERENCE["phrases"]  # counted by the gram shards
    sites = [json.loads(x) for x in listed.splitlines()]  # kept by the site shard
    if same_sites:
        assert listed == REFERENCE["sites"]
    pairs = [json.loads(line) for line in reference_pairs.splitlines()]
    problems = check_pair_events(without_repeats(events), pairs)
    problems += check_cluster_events(without_repeats(events), got)
    problems += check_site_events(without_repeats(events), [r for r in sites if "site" in r],
                                  [r for r in sites if "neighbourhood" in r])
    assert not problems, "\n".join(problems)
    return (pipeline.tmp / f"{log_of}.log").read_text()


def loose_ends(tmp: Path) -> list[str]:
    """What the owners' shard states (the newest epoch of each shard among the workers'
    directories) still hold once the pipeline is idle: outboxes not cleared, inputs held
    for later (ShardState.held). Each is a record lost between shards: an add that
    waits forever for a withdrawal never sent, a delta about a page never applied."""
    owners: dict[str, tuple[int, ShardState]] = {}
    opened = []
    try:
        for path in sorted(tmp.glob("w*/*-*")):
            if not path.is_dir() or path.name.split("-")[0] not in ("doc", "gram"):
                continue
            state = ShardState(Store(RocksKV(str(path))))
            opened.append(state)
            if state.epoch >= owners.get(path.name, (-1, None))[0]:
                owners[path.name] = (state.epoch, state)
        return [f"{name}: {len(st.outboxes())} outboxes, {st.held()} held inputs"
                for name, (_, st) in sorted(owners.items()) if st.outboxes() or st.held()]
    finally:
        for state in opened:
            state.store.close()


def _copies(pipeline: Pipeline, urls: set[str]) -> str:
    """Where each URL's doc shard lies in the worker states, with each copy's positions
    and the URL's entry in it: what a failure message needs to tell which copy `dump`
    read and why it lacks the URL."""
    lines = [f"rows missing from the workers' dump: {len(urls)}"]
    for url in sorted(urls):
        s = url_shard(url, SHARDS)
        for name in pipeline.workers:
            path = pipeline.tmp / name / f"doc-{s}"
            if not path.is_dir():
                continue
            store = Store(RocksKV(str(path), read_only=True))
            try:
                lines.append(f"{url}: doc-{s} of {name}: positions {store.positions()}, "
                             f"entry {store.begin().url_entry(url)}")
            finally:
                store.close()
    return "\n".join(lines)


def _canonical(event: dict) -> str:
    return json.dumps(event, sort_keys=True)


def _traps(events: list[dict]) -> set[tuple[str, str, int]]:
    return {(e["url"], e["segment"], e["repeats"]) for e in events if e["event"] == "trap"}


def test_two_workers_equal_streamdet_run(pipeline, crawl):
    path, reference_dump, reference_pairs = crawl
    pipeline.start("w1")
    pipeline.start("w2")
    pipeline.produce(path)
    pipeline.wait_idle()
    # every bad record on the dead-letter topic, with its reason and original bytes
    dead = pipeline.dead_letters()
    reasons = {dict(r.headers)["streamdet-reason"].decode() for r in dead}
    assert sorted(r.value for r in dead) == sorted(b.rstrip(b"\n") for b in bad_lines())
    assert reasons == {"not_json", "not_object", "no_url", "bad_url", "not_utf8", "no_body"}
    assert all(p.poll() is None for p in pipeline.workers.values())  # still running
    want = _rows(reference_dump)
    events = pipeline.events()
    _check_events_match(events, want)
    # the traps: an event each, as `streamdet run` gives, and no state holds them
    ran = [json.loads(x) for x in (path.parent / "ref-events.jsonl").read_text().splitlines()]
    assert _traps(events) == _traps(ran) == {
        (u, s, 3) for u, s in zip(TRAPS, ("cal", "x"), strict=True)}
    assert not set(TRAPS) & set(want)
    pipeline.stop()  # (dump opens the shard states)
    states = ("--state", pipeline.tmp / "w1", "--state", pipeline.tmp / "w2")
    ref = ("--state", path.parent / "ref")
    pairs = [json.loads(line) for line in reference_pairs.splitlines()]
    url = pairs[0]["other"]
    selects = {"top": ("--top", 5), "hoods": ("--top", 3, "--level", "neighbourhood"),
               "monsters": ("--monsters",)}
    out = _at_once(
        events=("events", *pipeline.args(), "--idle", 2), dump=("dump", *states),
        partials=("dump", "--partials", *states), clusters=("dump", "--clusters", *states),
        explain_pair=("explain", url, *states, "--json"),
        sites=("sites", *states, "--json", "--min-pages", 1),
        top=("sites", *states, "--json", "--top", 5, "--min-pages", 1),
        **{f"{name} {where}": ("sites", *places, "--json", *select)
           for name, select in selects.items()
           for where, places in (("states", states), ("ref", ref))})
    # `streamdet events` prints them all (it stops once the topic is quiet for --idle s)
    printed = [json.loads(x) for x in out["events"].splitlines()]
    assert sorted(printed, key=_canonical) == sorted(events, key=_canonical)
    got = out["dump"]
    assert sum(r["quilted"] for r in want.values()) >= 4  # the corpus has quilts to find
    got_rows = {u: normalize_row(r) for u, r in _rows(got).items()}
    missing = set(want) - set(got_rows)
    assert not missing, _copies(pipeline, missing)
    assert got_rows == {u: normalize_row(r) for u, r in want.items()}
    # SPEC §7 in both modes: the same pairs, told by the pair events
    assert out["partials"] == reference_pairs
    assert not check_pair_events(without_repeats(events), pairs)
    # SPEC §6 in both modes: the same clusters (compared with the rows), told by the events
    assert sum(r["cluster_size"] > 1 for r in want.values()) >= 4  # clusters to get right
    assert not check_cluster_events(without_repeats(events), _rows(got))
    # explain names a page's pairs from every doc shard, kept by either page of a pair
    want = sorted([{"other": p["url"], "diagonals": [
        {"spans": d["other_spans"], "other_spans": d["spans"], "sentences": d["sentences"]}
        for d in p["diagonals"]]} for p in pairs if p["other"] == url]
        + [{"other": p["other"], "diagonals": p["diagonals"]} for p in pairs if p["url"] == url],
        key=lambda p: p["other"].encode("utf-8"))
    assert json.loads(out["explain_pair"])["partials"] == want
    # and its cluster from the cluster shard, whichever worker holds it
    rows = _rows(got)
    member = next(u for u, r in sorted(rows.items()) if r["cluster_size"] > 1)
    of_member = _at_once(explain=("explain", member, *states, "--json"),
                         explain_ref=("explain", member, *ref, "--json"),
                         similar=("similar", member, *states, "--json"),
                         similar_ref=("similar", member, *ref, "--json"))
    explained = json.loads(of_member["explain"])
    assert (explained["cluster"], explained["cluster_size"], explained["exact_dups"]) == (
        rows[member]["cluster"], rows[member]["cluster_size"], rows[member]["exact_dups"])
    assert explained["near"] and all(n["url"] in rows for n in explained["near"])
    members: dict[str, list[str]] = {}
    for u, r in sorted(_rows(reference_dump).items(), key=lambda x: x[0].encode("utf-8")):
        members.setdefault(r["cluster"], []).append(u)
    # similar on worker states answers as on the `streamdet run` state of the same records
    assert of_member["similar"] == of_member["similar_ref"]
    listed = [json.loads(x) for x in out["clusters"].splitlines()]
    assert listed == sorted(
        ({"cluster": c, "size": len(m), "members": m} for c, m in members.items() if len(m) > 1),
        key=lambda r: (-r["size"], r["cluster"].encode("utf-8")))
    # explain's pop(d) (SPEC §8) is summed over the gram shards, as dump's is
    assert explained["pop"] == rows[member]["pop"] == _rows(reference_dump)[member]["pop"]
    # the sites and neighbourhoods (SPEC §8) from the site shard, as `streamdet run` gives
    ran = json.loads(of_member["explain_ref"])
    assert (explained["sites"], explained["neighbourhoods"], explained["contains"]) == (
        ran["sites"], ran["neighbourhoods"], ran["contains"])
    assert explained["sites"] and explained["neighbourhoods"]
    assert out["sites"] == REFERENCE["sites"]
    for name in selects:
        assert out[f"{name} states"] == out[f"{name} ref"]
    whole = [json.loads(x) for x in REFERENCE["sites"].splitlines()]
    top = [json.loads(x) for x in out["top"].splitlines()]
    assert top == ([r for r in whole if "site" in r][:5]
                   + [r for r in whole if "neighbourhood" in r][:5])
    assert len(top) == 10
    listed = [json.loads(x) for x in REFERENCE["sites"].splitlines()]
    assert sum("neighbourhood" in r for r in listed) >= 100
    assert not check_site_events(without_repeats(events), [r for r in listed if "site" in r],
                                 [r for r in listed if "neighbourhood" in r])


def _at_once(**commands: tuple) -> dict[str, bytes]:
    """What each `streamdet ARGS` prints, the commands run at the same time (they only
    read: the states they open read-only, the topics)."""
    names = list(commands)
    printed = parallel(*(lambda args=commands[n]: streamdet(*args).stdout for n in names))
    return dict(zip(names, printed, strict=True))


def test_two_workers_with_phi_equal_streamdet_run(pipeline, crawl, tmp_path):
    """SPEC §5 in both modes: with φ set, two workers give `streamdet run`'s verdicts,
    shares and spans (each doc shard keeps the texts of its pages), and φ changes some
    verdicts of this crawl (sources below φ of a page's patch grams stop counting)."""
    path, plain_dump, reference_pairs = crawl
    plain = _rows(plain_dump)
    # the median share of the quilts' 4th source (c = 4): about half the quilts keep 4
    # sources at or above it
    fourth = sorted(r["sources"][3]["share"] for r in plain.values() if r["quilted"])
    phi = f"{fourth[len(fourth) // 2]:.6f}"
    pipeline.start("w1", "--phi", phi)
    pipeline.start("w2", "--phi", phi)
    pipeline.produce(path)
    streamdet("run", "--input", path, "--state", tmp_path / "ref", "--phi", phi,
              "--events", tmp_path / "ref-events.jsonl")  # while the workers take the crawl
    reference_dump = dump(tmp_path / "ref")
    with_phi = _rows(reference_dump)
    assert {u for u, r in with_phi.items() if r["quilted"]} < {
        u for u, r in plain.items() if r["quilted"]}
    log = _finish_and_check(pipeline, reference_dump, reference_pairs, same_sites=False)
    assert "worker stopped" in log
    quilted = [r for r in _rows(pipeline.dump()).values() if r["quilted"]]
    assert quilted and all(s["spans"] for r in quilted for s in r["sources"])
    # a reviewer reads a page from the workers' states as from `streamdet run`'s
    states = ["--state", pipeline.tmp / "w1", "--state", pipeline.tmp / "w2"]
    url = quilted[0]["url"]
    out = _at_once(text=("text", url, *states), text_ref=("text", url, "--state", tmp_path / "ref"),
                   explain=("explain", url, *states, "--json"))
    assert out["text"] and out["text"] == out["text_ref"]
    explained = json.loads(out["explain"])
    assert explained["sources"] == with_phi[url]["sources"] and explained["quilted"]


def test_worker_killed_and_wiped_rejoins_without_double_counting(pipeline, crawl, tmp_path):
    path, reference_dump, reference_pairs = crawl
    lines = path.read_bytes().splitlines(keepends=True)
    cut = len(lines) * 3 // 5
    head = _write_lines(tmp_path / "head.jsonl", lines[:cut])
    tail = _write_lines(tmp_path / "tail.jsonl", lines[cut:])
    pipeline.start("w1")
    pipeline.start("w2")
    pipeline.wait_ready("w1", "w2")
    pipeline.produce(head)
    # mid-stream, however fast the machine: every doc shard has committed work (so w2's
    # are not empty), and the rest of the stream is still being sent
    pipeline.wait_for(lambda: all(pipeline.committed("docs").values()),
                      "no progress on every doc shard")
    producer = popen("produce", *pipeline.args(), "--shards", SHARDS, "--rate", "10", tail,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert any((pipeline.tmp / "w2").glob("doc-*"))  # it owned doc shards
    victim = pipeline.workers["w2"]
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    shutil.rmtree(pipeline.tmp / "w2")  # its disk is gone too
    time.sleep(1)
    pipeline.start("w2")
    assert producer.wait(120) == 0
    log = _finish_and_check(pipeline, reference_dump, reference_pairs, "w2")
    assert "replaying" in log  # rebuilt from the topics


def test_a_restart_is_invisible_downstream(pipeline, crawl):
    """The worker dies with rounds processed and their events out but the group's offsets
    not committed, and loses its disk: the new owner redoes those rounds, batching
    differently, and must emit nothing that repeats what consumers were already shown
    (SPEC §9) - not an `unquilt` for every page it touches that was never quilted."""
    path, reference_dump, reference_pairs = crawl
    victim = pipeline.start("w1", extra_env={"STREAMDET_FAILPOINT": "group-commit:3"})
    pipeline.wait_ready("w1")
    pipeline.produce(path)
    assert victim.wait(90) == 137  # died at its third group commit, mid-stream
    shutil.rmtree(pipeline.tmp / "w1")
    pipeline.start("w1")
    log = _finish_and_check(pipeline, reference_dump, reference_pairs)
    assert "comparing with what was shown up to" in log, log[-3000:]


def _sent_again(log: str) -> int:
    """Events a new owner sent again, as its takeover lines count them."""
    return sum(int(n) for n in re.findall(r"(\d+) events recorded after the group's commit "
                                          r"sent again", log))


def test_events_recorded_but_not_sent_go_out_from_the_new_owner(pipeline, crawl):
    """The worker dies with a round's record of what its events show acknowledged and
    the events not sent yet, and loses its disk: the new owner finds the record past the
    group's commit and sends those events, so consumers miss none (and see no change
    twice: without them, the new owner's own events would name their change from a
    state consumers never got)."""
    path, reference_dump, reference_pairs = crawl
    victim = pipeline.start("w1", extra_env={"STREAMDET_FAILPOINT": "events-held:4"})
    pipeline.wait_ready("w1")
    pipeline.produce(path)
    assert victim.wait(90) == 137  # died between a ShownMsg and its events
    shutil.rmtree(pipeline.tmp / "w1")
    pipeline.start("w1")
    log = _finish_and_check(pipeline, reference_dump, reference_pairs)
    assert _sent_again(log) > 0, log[-3000:]


def test_a_restart_while_catching_up_reads_what_was_shown_again(pipeline, crawl):
    """A new owner dies amid its catch-up (a round committed while it compares with what
    consumers were shown, not sent) and restarts on its own disk: it sends that round,
    reads what was shown again from the deltas partition and compares with it up to the
    same ends, so its events still change what consumers hold, each exactly once."""
    path, reference_dump, reference_pairs = crawl
    first = pipeline.start("w1", extra_env={"STREAMDET_FAILPOINT": "group-commit:3"})
    pipeline.wait_ready("w1")
    pipeline.produce(path)
    assert first.wait(90) == 137  # rounds processed and sent, not committed
    shutil.rmtree(pipeline.tmp / "w1")
    second = pipeline.start("w1", extra_env={"STREAMDET_FAILPOINT": "catching-up:1"})
    assert second.wait(90) == 137  # took over, died in its first catch-up round
    pipeline.start("w1")  # the same disk
    log = _finish_and_check(pipeline, reference_dump, reference_pairs)
    assert "restarted while catching up" in log, log[-3000:]


def test_a_take_over_cut_short_by_a_crash_is_taken_up_again_on_the_same_disk(
        pipeline, crawl, tmp_path):
    """A new owner dies amid the replay that precedes its take-over (doc shard 0's docs
    and a first chunk of its deltas replayed, nothing compared yet) and restarts on its
    own disk, under an epoch that is now the newest: its state says it is taking over
    still, so it replays on from there, reads the deltas it replayed before for what
    consumers were shown, and takes over; consumers see each change once."""
    path, reference_dump, reference_pairs = crawl
    lines = path.read_bytes().splitlines(keepends=True)
    cut = len(lines) * 3 // 5
    head = _write_lines(tmp_path / "head.jsonl", lines[:cut])
    tail = _write_lines(tmp_path / "tail.jsonl", lines[cut:])
    first = pipeline.start("w1")
    pipeline.wait_ready("w1")
    pipeline.produce(head)
    pipeline.wait_for(lambda: pipeline.committed("deltas").get(0),
                      "doc shard 0 committed no deltas")
    first.send_signal(signal.SIGKILL)
    first.wait()
    shutil.rmtree(pipeline.tmp / "w1")  # the next owner takes over, from the topics
    second = pipeline.start("w1", extra_env={"STREAMDET_FAILPOINT": "replayed-deltas-0:1"})
    assert second.wait(90) == 137  # doc shard 0 claimed, its docs and deltas replayed
    assert "doc shard 0: taken over;" not in (pipeline.tmp / "w1.log").read_text()
    pipeline.start("w1")  # the same disk
    pipeline.produce(tail)
    log = _finish_and_check(pipeline, reference_dump, reference_pairs)
    assert "doc shard 0: taken over;" in log, log[-3000:]


def test_worker_dies_between_commit_and_send_and_sends_its_outboxes_again(pipeline, crawl):
    """A worker dies right after committing a round's outbox, before sending it (and with
    earlier rounds perhaps still unacknowledged); restarted on the same state it sends
    every outbox left again, and the result still equals `streamdet run`'s.

    One worker, so that it owns every shard before and after the crash: with a second
    worker the group may hand the shard holding the outbox to the other one on restart
    (which then redoes the round from the group's offsets, and nothing is sent "again")."""
    path, reference_dump, reference_pairs = crawl
    victim = pipeline.start("w1", extra_env={"STREAMDET_FAILPOINT": "outbox-committed:6"})
    pipeline.wait_ready("w1")
    producer = popen("produce", *pipeline.args(), "--shards", SHARDS, "--rate", "30", path,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert victim.wait(90) == 137  # died at the failpoint, mid-stream
    assert producer.poll() is None
    pipeline.start("w1")  # same state directory, failpoint off
    assert producer.wait(120) == 0
    log = _finish_and_check(pipeline, reference_dump, reference_pairs)
    assert "again" in log  # outboxes re-sent on open


def test_a_round_never_acknowledged_makes_the_worker_rejoin_and_lose_nothing(pipeline, crawl):
    """A round whose sends the broker never acknowledges (the failpoint raises where its
    acknowledgements are awaited) ends the worker's membership: it leaves the group, its
    shards closed, and joins again from their states - the failed round's outboxes sent
    again, the inputs after them read again - and the result equals `streamdet run`'s,
    no record lost between shards (loose_ends)."""
    path, reference_dump, reference_pairs = crawl
    pipeline.start("w1", extra_env={"STREAMDET_FAILPOINT": "round-acknowledged:5:raise"})
    pipeline.wait_ready("w1")
    pipeline.produce(path)
    log = _finish_and_check(pipeline, reference_dump, reference_pairs)
    assert "failpoint round-acknowledged (pass 5); leaving the group" in log, log[-3000:]
    assert log.count("worker joining group") == 2, log[-3000:]


def test_a_round_that_fails_during_a_rebalance_is_not_lost(pipeline, crawl):
    """A round in flight fails while the group rebalances (aiokafka only logs what a
    rebalance listener raises): the worker still closes the revoked shards, so that the
    next assignment claims, replays and sends their outboxes again, and it rejoins;
    nothing is skipped (the contiguity guard would stop a worker that skipped records)
    and the result equals `streamdet run`'s. The failpoint fails the second revocation
    (the first is the join's, with nothing to revoke): w2 joining mid-stream."""
    path, reference_dump, reference_pairs = crawl
    pipeline.start("w1", extra_env={"STREAMDET_FAILPOINT": "revoking:2:raise"})
    pipeline.wait_ready("w1")
    producer = popen("produce", *pipeline.args(), "--shards", SHARDS, "--rate", "30", path,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # mid-stream: w1 has committed work on every shard
    pipeline.wait_for(lambda: all(pipeline.committed("grams").values()),
                      "no progress on every gram shard")
    pipeline.start("w2")
    assert producer.wait(120) == 0
    log = _finish_and_check(pipeline, reference_dump, reference_pairs)
    assert "failpoint revoking (pass 2); leaving the group" in log, log[-3000:]


class _InProcessWorker:
    """A `Worker` run in this process, on an event loop of its own in a thread, so that a
    test can set what no command-line option reaches; what Pipeline asks of a Popen."""

    def __init__(self, worker: Worker, log: Path) -> None:
        self.worker, self.returncode = worker, None
        self._log = logging.FileHandler(log)
        logging.getLogger("streamdet").addHandler(self._log)
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        try:
            self._loop.run_until_complete(self.worker.run(self._stop))
            self.returncode = 0
        except BaseException:  # noqa: BLE001 - reported as a process's exit status
            logging.getLogger("streamdet").exception("in-process worker failed")
            self.returncode = 1
        finally:
            logging.getLogger("streamdet").removeHandler(self._log)
            self._log.close()

    def poll(self) -> int | None:
        return None if self._thread.is_alive() else self.returncode

    def send_signal(self, _sig) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)

    def wait(self, timeout: float) -> int | None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise subprocess.TimeoutExpired("in-process worker", timeout)
        return self.returncode

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _deferred() -> float:
    return REGISTRY.get_sample_value("streamdet_deferred_records_total") or 0.0


def test_rounds_that_hold_too_many_documents_defer_records_and_lose_none(pipeline, crawl):
    """A worker whose doc shards' rounds may hold a few documents only (sizers set on
    the object: no budget is that small) applies the records of a doc shard that fit,
    leaves the rest to its next round (its consumer sent back to them) and ends with
    `streamdet run`'s result."""
    path, reference_dump, reference_pairs = crawl
    worker = Worker(pipeline.broker.bootstrap, str(pipeline.tmp / "w1"), Params(), SHARDS,
                    topics=Topics.named(pipeline.prefix), group=pipeline.prefix,
                    timing=Timing(session_ms=3000, heartbeat_ms=300))
    for s in range(SHARDS):  # rounds of 2 records from the start (a round held too much)
        worker.sizers[s] = BatchSizer(worker.max_records, slots=2_000, floor=2)
        worker.sizers[s].observe(1, 10**6)
    before = _deferred()
    pipeline.produce(path)  # first: a shard's first fetch brings dozens of records
    pipeline.workers["w1"] = _InProcessWorker(worker, pipeline.tmp / "w1.log")
    _finish_and_check(pipeline, reference_dump, reference_pairs)
    assert _deferred() > before
    assert max(s.records for s in worker.sizers.values()) < worker.max_records


def test_state_left_behind_by_a_takeover_is_rebuilt_not_trusted(pipeline, crawl):
    """w2 dies with an outbox committed and unsent; w1 takes its shards over and finishes
    the stream (sending its own outputs, numbered in a newer epoch). When w2 comes back
    alone on its old state, that state and its outboxes belong to a history w1 replaced:
    w2 must rebuild the shards rather than re-send the stale outbox (whose events would
    arrive after w1's newer ones, and whose deltas would undo later changes)."""
    path, reference_dump, reference_pairs = crawl
    pipeline.start("w1")
    victim = pipeline.start("w2", extra_env={"STREAMDET_FAILPOINT": "outbox-committed:4"})
    pipeline.wait_ready("w1", "w2")
    pipeline.produce(path, rate=40)
    assert victim.wait(90) == 137  # died mid-stream, outbox unsent
    del pipeline.workers["w2"]
    pipeline.wait_idle()  # w1 alone has done everything
    pipeline.stop()
    pipeline.workers.clear()
    since = (pipeline.tmp / "w2.log").stat().st_size
    pipeline.start("w2")  # alone, on the state it had when it died
    # nothing new arrives: the pipeline is idle before w2 has even joined, so wait until
    # it has opened (rebuilt) every shard
    pipeline.wait_log("w2", "assigned shards open: gram [0, 1, 2, 3], doc [0, 1, 2, 3]",
                      since)
    pipeline.wait_idle()
    pipeline.stop()
    log = (pipeline.tmp / "w2.log").read_text()
    assert "rebuilding" in log and "again" not in log, log[-3000:]
    want = _rows(reference_dump)
    _check_events_match(pipeline.events(), want)
    got = _rows(dump_states(["--state", pipeline.tmp / "w2"]))
    assert {u: normalize_row(r) for u, r in got.items()} == {
        u: normalize_row(r) for u, r in want.items()}


def test_worker_refuses_other_parameters(pipeline, tmp_path):
    pipeline.start("w1")
    pipeline.wait_log("w1", "worker started")  # logged once the parameters are recorded
    other = streamdet("worker", *pipeline.args(), "--state", tmp_path / "other", "-k", "4",
                      "--shards", SHARDS, check=False, timeout=60)
    assert other.returncode == 2
    msg = other.stderr.decode()
    assert "other parameters" in msg and "k=5" in msg and "Traceback" not in msg
    shards = streamdet("worker", *pipeline.args(), "--state", tmp_path / "other2",
                       "--shards", 3, check=False, timeout=60)
    assert shards.returncode == 2 and "shards" in shards.stderr.decode()


def test_worker_refuses_a_pipeline_built_by_another_format(pipeline, tmp_path):
    """A pipeline whose meta record names another shard protocol (here the four-hop
    shards-1, whose gram shards have no URL table) is refused, not joined."""
    from streamdet.adapters.kafka import Topics, ensure_topics, producer
    from streamdet.engine.params import Params

    from .kafka_broker import run_sync

    topics = Topics.named(pipeline.prefix)
    old = json.dumps({"params": Params().to_dict(), "shards": SHARDS, "format": "shards-1"},
                     sort_keys=True).encode()

    async def seed() -> None:
        await ensure_topics(pipeline.broker.bootstrap, topics, SHARDS, SHARDS)
        p = producer(pipeline.broker.bootstrap)
        await p.start()
        try:
            await p.send_and_wait(topics.meta, old, partition=0)
        finally:
            await p.stop()

    run_sync(seed())
    res = streamdet("worker", *pipeline.args(), "--state", tmp_path / "w", "--shards", SHARDS,
                    check=False, timeout=60)
    msg = res.stderr.decode()
    assert res.returncode == 2 and "format shards-1" in msg and "Traceback" not in msg, msg


def test_hostile_messages_go_to_the_dead_letter_topic_and_workers_stay_up(pipeline, tmp_path):
    """SPEC §9 through the broker: tombstones, empty values, JSON that is not an object,
    huge keys, and every bad record of the embedded bad-input test are dead letters with
    the reason `streamdet run` gives them; no worker stops, a restarted one neither, and
    the good page sent after them is processed."""
    from aiokafka import AIOKafkaProducer

    from .test_bad_input import BAD, MAX_BODY

    good = {"url": "http://after.example/page", "text": "the good page after the bad ones"}
    messages = [(b"gone", None), (b"k", b""), (b"\0" * 200_000, b"null"),
                *[(b"bad", raw) for _, raw in BAD], (b"k", json.dumps(good).encode())]
    want = ["not_json", "not_json", "not_object", *[reason for reason, _ in BAD]]

    pipeline.start("w1", "--max-body", MAX_BODY)
    pipeline.start("w2", "--max-body", MAX_BODY)
    pipeline.wait_log("w1", "worker started")  # the topics exist once a worker has started

    async def send():
        p = AIOKafkaProducer(bootstrap_servers=pipeline.broker.bootstrap,
                             max_request_size=8 << 20)
        await p.start()
        try:
            for key, value in messages:
                await p.send_and_wait(f"{pipeline.prefix}-pages", value=value, key=key,
                                      partition=0)
        finally:
            await p.stop()

    run_sync(send())
    pipeline.wait_idle()
    dead = pipeline.dead_letters()
    got = [(r.value, dict(r.headers)["streamdet-reason"].decode()) for r in dead]
    assert [reason for _, reason in got] == want
    # each keeps its record's first 64 KiB, with the record's size and SHA-256 (SPEC §9)
    sent = [v for _, v in messages[:-1]]
    assert [value for value, _ in got] == [v if v is None else v[:PREFIX_KEPT] for v in sent]
    assert any(v is not None and len(v) > PREFIX_KEPT for v in sent)
    assert [(int(dict(r.headers)["streamdet-size"]), dict(r.headers)["streamdet-sha256"].decode())
            for r in dead] == [(len(v or b""), hashlib.sha256(v or b"").hexdigest()) for v in sent]
    assert all(p.poll() is None for p in pipeline.workers.values())
    pipeline.workers["w1"].send_signal(signal.SIGKILL)
    pipeline.workers["w1"].wait()
    since = (pipeline.tmp / "w1.log").stat().st_size
    pipeline.start("w1", "--max-body", MAX_BODY)
    pipeline.wait_log("w1", "assigned shards open", since)  # rejoined, its shards read
    assert all(p.poll() is None for p in pipeline.workers.values())
    pipeline.stop()
    assert set(_rows(pipeline.dump())) == {good["url"]}


def test_a_poison_pair_does_not_stop_the_pipeline(pipeline, tmp_path):
    """SPEC §9 "Bounded engine work" through the broker: pages that repeat one sentence
    3,000 times, or alternate two, are matched once per run (copy against copy, a pair
    of such pages at 20,000 repeats took a worker to 23 GB, and it crash-looped on the
    same records). The workers stay up, every page is applied, and the pairs are the
    reference's: only the page that copies three distinct sentences."""
    from .reference import ref_partials
    from .test_partials import poison_records

    records = poison_records()
    pipeline.start("w1")
    pipeline.start("w2")
    pipeline.produce(_write_lines(tmp_path / "poison.jsonl", records))
    pipeline.wait_idle()
    assert all(p.poll() is None for p in pipeline.workers.values())
    pipeline.stop()
    assert set(_rows(pipeline.dump())) == {r["url"] for r in records}
    pairs = [json.loads(line) for line in pipeline.dump("--partials").splitlines()]
    assert pairs == ref_partials(records, Params())
    assert [(r["url"], r["other"]) for r in pairs] == [("http://e.example/z",
                                                       "http://f.example/z")]


def test_labels_reach_the_pipeline(pipeline, crawl, tmp_path):
    """SPEC §8's informed discovery in both modes: the crawl with a farm of copied quilts
    and two sites of several pages; the farm's paragraphs labelled with `label-chunks
    --broker` after the crawl give the pipeline the contains(L, f), sites and bad
    neighbourhoods that `label-chunks` gives `streamdet run`, told by `site` events."""
    path = tmp_path / "farmed.jsonl"
    records = [json.loads(x) for x in crawl[0].read_bytes().splitlines() if _is_page(x)]
    pages = [r for r in records if "html" in r][:8]
    farm = [dict(r, url=f"http://farm.example/blog/{i}.html") for i, r in enumerate(pages[:4])]
    clean = [dict(r, url=f"http://{('one', 'two')[i % 2]}.example/docs/{i}.html")
             for i, r in enumerate(pages[4:])]
    _write_lines(path, records + farm + clean)
    pipeline.start("w1")
    pipeline.start("w2")
    pipeline.produce(path)
    ref = tmp_path / "ref"  # while the workers join and take the crawl
    streamdet("run", "--input", path, "--state", ref, "--events", tmp_path / "ref-ev.jsonl")
    text = tmp_path / "labelled.txt"
    farm_texts = _at_once(**{r["url"]: ("text", r["url"], "--state", ref) for r in farm})
    text.write_bytes(b"\n".join(farm_texts[r["url"]] for r in farm))
    told = streamdet("label-chunks", "--text", text, "--state", ref).stdout
    # labelled, the farm is bad, and the last `site` event about it says so: label-chunks
    # tells it, unless the run already had (blind discovery labels the template chunks of
    # T pages or more, such as a "Skip to content" line, and the farm's copies carry some)
    said = [e["bad"] for e in [*read_jsonl(tmp_path / "ref-ev.jsonl"),
                               *map(json.loads, told.splitlines())]
            if e.get("neighbourhood") == "farm.example/blog/"]
    assert said and said[-1] is True
    pipeline.wait_idle()
    sent = streamdet("label-chunks", "--text", text, *pipeline.args())
    assert f"sent to the pipeline's {SHARDS} gram shards".encode() in sent.stderr
    pipeline.wait_idle()
    events = pipeline.events()
    pipeline.stop()
    assert not loose_ends(pipeline.tmp)
    want = _rows(dump(ref))
    got = _rows(pipeline.dump())
    assert {u: r["contains"] for u, r in got.items()} == {u: r["contains"] for u, r in
                                                         want.items()}
    assert all(got[r["url"]]["contains"] > 0.5 for r in farm)
    listed = pipeline.sites()
    assert listed == streamdet("sites", "--state", ref, "--json", "--min-pages", 1).stdout
    rows = [json.loads(x) for x in listed.splitlines()]
    assert {r["neighbourhood"] for r in rows if r.get("bad")} >= {"farm.example/blog/"}
    assert not check_site_events(without_repeats(events), [r for r in rows if "site" in r],
                                 [r for r in rows if "neighbourhood" in r])


def _is_page(line: bytes) -> bool:
    """A line of the crawl that is a record of a page (not one of its bad lines)."""
    try:
        rec = json.loads(line)
    except ValueError:
        return False
    return isinstance(rec, dict) and isinstance(rec.get("url"), str) and rec["url"].startswith(
        "http") and ("html" in rec or "text" in rec)


def test_events_carry_the_spam_score_streamdet_run_gives(pipeline, tmp_path):
    """SPEC §10 in both modes: every quilt and rescore event of the workers carries a
    spam_score; and once the spam crawl is applied (a farm host, sources with mirrors,
    quilts with their own, a template paragraph), each quilt re-fetched with a paragraph
    of its own, one at a time, gets an event whose score is the one `streamdet run`
    gives it on the same records, each re-fetch a batch of its own: what the score
    reads from other shards has reached the doc shard that makes the event. Blind for
    the first half of them; then pages labelled with `streamdet label --broker` (the
    labels topic) as with `streamdet label` on the run state: every doc shard stores the
    model the run state stores, and the second half's scores follow it, a labelled
    page's its own label. `rank` on the workers' states ranks as on the `streamdet run`
    state, labels included."""
    records, touched = spam_crawl()
    params = ["-c", SPAM_PARAMS.c, "--theta", SPAM_PARAMS.theta]
    half = len(touched) // 2
    crawl = _write_lines(tmp_path / "spam.jsonl", records)
    pipeline.start("w1", *params)
    pipeline.start("w2", *params)
    pipeline.produce(crawl)
    ref, desk = tmp_path / "ref", tmp_path / "desk"  # while the workers take the crawl
    streamdet("run", "--input", crawl, "--state", ref, *params, "--events", tmp_path / "a.jsonl")
    want = _refetch_run(tmp_path, ref, params, touched[:half], "b")
    labels = _labels_for(ref, [r["url"] for r in touched[half:]])
    for url, verdict in labels:
        streamdet("label", url, verdict, "--state", ref, "--desk", desk)
    want |= _refetch_run(tmp_path, ref, params, touched[half:], "c")
    urls = {r["url"] for r in touched}
    assert len(want) == len(urls) >= 10 and len(set(want.values())) >= 5
    assert want[labels[-1][0]] == 0.0
    pipeline.wait_idle()
    workers = ["--state", pipeline.tmp / "w1", "--state", pipeline.tmp / "w2"]
    for i, record in enumerate(touched):
        if i == half:
            for url, verdict in labels:
                told = streamdet("label", url, verdict, *pipeline.args(), *workers).stderr
                assert f"{pipeline.prefix}-review-labels".encode() in told
            missing = streamdet("label", "https://nowhere.example/", "--spam",
                                *pipeline.args(), *workers, check=False)
            assert missing.returncode == 2 and b"is not in this state" in missing.stderr
            pipeline.wait_idle()
        pipeline.send(_write_lines(tmp_path / f"again-{i}.jsonl", [record]))
        pipeline.wait_idle()
    events = pipeline.events()
    assert all("spam_score" in e for e in events if e["event"] in ("quilt", "rescore"))
    assert last_scores(events, urls) == want
    pipeline.stop()  # rank on the workers' shard states, as on the `streamdet run` state
    model = _stored_models([ref])[0]
    assert model != blind() and _stored_models(workers[1::2]) == [model] * SHARDS
    out = _at_once(ranked=("rank", "--json", *workers),
                   ref=("rank", "--json", "--state", ref, "--desk", desk))
    ranked = out["ranked"]
    assert ranked == out["ref"]
    scores = {r["url"]: r["score"] for r in map(json.loads, ranked.splitlines())}
    assert scores[labels[-1][0]] == 0.0 and scores[labels[0][0]] == 1.0


def _stored_models(states: list) -> list[Model]:
    """The spam model each doc shard of worker states (the newest copy of each), or a
    `streamdet run` state, stores."""
    found = worker_shards([str(p) for p in states])
    dirs = [str(states[0])] if found is None else [found[0][s] for s in sorted(found[0])]
    out = []
    for path in dirs:
        store = Store(RocksKV(path, read_only=True))
        try:
            out.append(stored_model(store.begin().chunks))
        finally:
            store.close()
    return out


def _refetch_run(tmp_path: Path, ref: Path, params: list, records: list[dict], name: str
                 ) -> dict[str, float]:
    """`streamdet run` on these records, each a batch of its own: the newest score of
    each of their URLs."""
    path = _write_lines(tmp_path / f"{name}.jsonl", records)
    streamdet("run", "--input", path, "--state", ref, *params, "--batch", 1,
              "--events", tmp_path / f"{name}-events.jsonl")
    return last_scores(read_jsonl(tmp_path / f"{name}-events.jsonl"),
                       {r["url"] for r in records})


def _labels_for(ref: Path, refetched: list[str]) -> list[tuple[str, str]]:
    """What a reviewer might label, from the blind ranking: the two lowest-scored pages
    spam and the highest not spam (labels that move the model), and a page re-fetched
    later not spam (its own label decides its events)."""
    ranked = [json.loads(x)["url"] for x in streamdet(
        "rank", "--json", "--state", ref, "--desk", ref.parent / "no-desk").stdout.splitlines()]
    others = [u for u in ranked if u not in refetched]
    return [(others[-1], "--spam"), (others[0], "--not-spam"), (others[-2], "--spam"),
            (refetched[0], "--not-spam")]
