"""`streamdet alerts` (the streamdet.alerts package) against a real local HTTP server: grouping
per registered domain, windows, the rate limit, retries after failures and connection
errors, dead letters, the Slack body, and exactly-once alerting across restarts (stopped
in-process, SIGKILLed as a process, and on the Kafka events topic of the test broker)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from streamdet.alerts import AlertsConfig, AlertsError, Stats, run_alerts
from streamdet.alerts.alerter import Alerter
from streamdet.alerts.bodies import slack_body
from streamdet.alerts.grouping import Group, page_of
from streamdet.cli import main as streamdet_main

from .kafka_broker import KafkaBroker, kafka_broker_fixture, run_sync, unique_name  # noqa: F401

REPO = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- the webhook


class Webhook:
    """A real HTTP server on 127.0.0.1 recording every POST. `script` gives the status of
    each request in turn (then 200); `hook(n)` runs after the n-th 2xx is recorded, before
    the response is sent."""

    def __init__(self, port: int = 0) -> None:
        self.posts: list[dict] = []  # every request: {"status", "body", "headers", "t"}
        self.script: list[int | tuple[int, dict]] = []
        self.delay = 0.0
        self.hook: Callable[[int], None] | None = None
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with owner.lock:
                    step = owner.script.pop(0) if owner.script else 200
                    status, headers = step if isinstance(step, tuple) else (step, {})
                    owner.posts.append({"status": status, "body": json.loads(data),
                                        "headers": dict(self.headers), "t": time.monotonic()})
                    n = len(owner.delivered())
                if owner.delay:
                    time.sleep(owner.delay)
                if 200 <= status < 300 and owner.hook:
                    owner.hook(n)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/T000/SECRET"

    def delivered(self) -> list[dict]:
        return [p["body"] for p in self.posts if 200 <= p["status"] < 300]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook():
    w = Webhook()
    yield w
    w.close()


# --------------------------------------------------------------------------- events


def event(url: str, seq: int = 1, kind: str = "quilt", n_patch: int = 60,
          sources: list[tuple[str, int]] | None = None) -> dict:
    sources = sources or [("http://src-a.example/1", 30), ("http://src-b.example/2", 15),
                          ("http://src-c.example/3", 9), ("http://src-d.example/4", 6)]
    return {"event": kind, "url": url, "seq": seq, "quilted": kind != "unquilt",
            "patch_fraction": round(n_patch / 100, 4), "n_grams": 100, "n_patch_grams": n_patch,
            "sources": [{"url": u, "grams": g, "share": g / n_patch,
                         "spans": [[10 * i, 10 * i + 5]]} for i, (u, g) in enumerate(sources)],
            "cause": url,
            "params": {"k": 5, "m": 50, "c": 4, "theta": 0.5, "foreign": "domain"},
            "at": "2026-11-22T10:00:00Z"}


def write_events(path: Path, events: list, mode: str = "w") -> Path:
    with open(path, mode + "b") as f:
        for e in events:
            f.write(e if isinstance(e, bytes) else json.dumps(e).encode() + b"\n")
    return path


def config(webhook: Webhook, events: Path, **kw) -> AlertsConfig:
    base = dict(webhook=webhook.url, events=str(events), max_per_minute=0, backoff=0.05,
                max_backoff=0.2, timeout=5.0, drain=0.0)
    base.update(kw)
    return AlertsConfig(**base)


class FakeClock:
    """The alerter's clock (windows, rate limit, retry delays) in fake time. `auto`: a
    sleep passes its time at once; otherwise it lasts until the test advances the clock."""

    def __init__(self, auto: bool = False) -> None:
        self.t, self.auto = 1000.0, auto
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds

    async def sleep(self, seconds: float, interrupt: asyncio.Event) -> bool:
        self.sleeps.append(seconds)
        if self.auto:
            self.t += seconds
            await asyncio.sleep(0)
            return interrupt.is_set()
        deadline = self.t + seconds
        while self.t < deadline and not interrupt.is_set():
            await asyncio.sleep(0.005)
        return interrupt.is_set()


def run(cfg: AlertsConfig, webhook: Webhook | None = None, stop_after: int | None = None,
        timeout: float = 60.0, clock: FakeClock | None = None) -> Stats:
    """run_alerts to its end; with stop_after, stopped (as by SIGTERM) once the webhook
    has accepted that many alerts."""

    async def main() -> Stats:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        if stop_after is not None:
            def hook(n: int) -> None:
                if n >= stop_after:
                    loop.call_soon_threadsafe(stop.set)
            webhook.hook = hook
        try:
            return await asyncio.wait_for(run_alerts(cfg, stop, clock=clock), timeout)
        finally:
            if webhook is not None:
                webhook.hook = None

    return asyncio.run(main())


def alerted(bodies: list[dict]) -> Counter:
    """(url, seq) -> how many times it was in a delivered alert."""
    return Counter((p["url"], p["seq"]) for b in bodies for p in b["pages"])


def position_of(state: Path) -> int:
    db = sqlite3.connect(state)
    try:
        return int(db.execute("SELECT value FROM meta WHERE key = 'position'").fetchone()[0])
    finally:
        db.close()


# --------------------------------------------------------------------------- grouping


def test_grouping_per_registered_domain(tmp_path: Path, webhook: Webhook) -> None:
    events = write_events(tmp_path / "events.jsonl", [
        event("http://spam-farm.com/a"),
        event("http://www.spam-farm.com/b", n_patch=80),
        event("http://other.org/x"),
        event("http://spam-farm.com/a", seq=2, kind="rescore"),  # not alerted by default
        b"not json\n",
        b"\n",
        event("http://blog-one.blogspot.com/p"),  # private suffix: a server of its own
        event("http://shop.spam-farm.com:8080/c"),
        event("http://other.org/y", kind="unquilt"),
        event("http://blog-two.blogspot.com/p"),
        event("http://other.org/y", seq=2),
    ])
    stats = run(config(webhook, events))
    bodies = webhook.delivered()
    assert len(webhook.posts) == len(bodies) == 4
    by_domain = {b["domain"]: b for b in bodies}
    assert set(by_domain) == {"spam-farm.com", "other.org", "blog-one.blogspot.com",
                              "blog-two.blogspot.com"}
    spam = by_domain["spam-farm.com"]
    assert spam["type"] == "streamdet.quilt_alert" and spam["count"] == 3
    assert [p["url"] for p in spam["pages"]] == [
        "http://spam-farm.com/a", "http://www.spam-farm.com/b", "http://shop.spam-farm.com:8080/c"]
    assert [(p["url"], p["seq"]) for p in by_domain["other.org"]["pages"]] == [
        ("http://other.org/x", 1), ("http://other.org/y", 2)]
    # The evidence: page, patch fraction, sources with their share of the patch grams.
    b = spam["pages"][1]
    assert b["patch_fraction"] == 0.8 and b["n_patch_grams"] == 80 and b["n_grams"] == 100
    assert b["event"] == "quilt" and b["at"] == "2026-11-22T10:00:00Z"
    assert b["sources"] == [
        {"url": "http://src-a.example/1", "grams": 30, "share": 0.375, "spans": [[0, 5]]},
        {"url": "http://src-b.example/2", "grams": 15, "share": 0.1875, "spans": [[10, 15]]},
        {"url": "http://src-c.example/3", "grams": 9, "share": 0.1125, "spans": [[20, 25]]},
        {"url": "http://src-d.example/4", "grams": 6, "share": 0.075, "spans": [[30, 35]]}]
    assert spam["window"]["seconds"] == 30.0 and spam["window"]["start"] <= spam["window"]["end"]
    # A stable id, also the Idempotency-Key header.
    for p in webhook.posts:
        assert p["headers"]["Idempotency-Key"] == p["body"]["id"]
        assert p["headers"]["Content-Type"] == "application/json"
    assert (stats.events, stats.candidates, stats.malformed, stats.alerts, stats.pages) == (
        10, 7, 1, 4, 7)
    assert position_of(tmp_path / "events.jsonl.alerts-position") == events.stat().st_size


def test_windows_close_on_time_when_following(tmp_path: Path, webhook: Webhook) -> None:
    """--follow: pages of a domain within the window make one alert; a page after the
    window has closed makes the next one. A partial last line waits for its end."""
    events = write_events(tmp_path / "events.jsonl", [event("http://a.spam-farm.com/1"),
                                                      event("http://b.spam-farm.com/2")])
    cfg = config(webhook, events, follow=True, window=0.5)

    async def main() -> Stats:
        stop = asyncio.Event()
        task = asyncio.create_task(run_alerts(cfg, stop))
        await _until(lambda: len(webhook.delivered()) == 1)
        line = json.dumps(event("http://c.spam-farm.com/3")).encode()
        write_events(events, [line[:20]], mode="a")  # a writer in the middle of a line
        await asyncio.sleep(1.0)
        assert len(webhook.delivered()) == 1
        write_events(events, [line[20:] + b"\n"], mode="a")
        await _until(lambda: len(webhook.delivered()) == 2)
        stop.set()
        return await asyncio.wait_for(task, 30)

    stats = asyncio.run(main())
    first, second = webhook.delivered()
    assert [p["url"] for p in first["pages"]] == ["http://a.spam-farm.com/1",
                                                  "http://b.spam-farm.com/2"]
    assert [p["url"] for p in second["pages"]] == ["http://c.spam-farm.com/3"]
    assert stats.alerts == 2 and stats.position == events.stat().st_size


async def _until(cond: Callable[[], bool], timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("timed out")
        await asyncio.sleep(0.02)


def test_max_pages_splits_a_group(tmp_path: Path, webhook: Webhook) -> None:
    events = write_events(tmp_path / "events.jsonl",
                          [event(f"http://farm.net/{i}") for i in range(7)])
    run(config(webhook, events, max_pages=3))
    assert [b["count"] for b in webhook.delivered()] == [3, 3, 1]
    assert sum(alerted(webhook.delivered()).values()) == 7


# --------------------------------------------------------------------------- rate, retries


def test_rate_limit_spaces_alerts_and_drops_none(tmp_path: Path, webhook: Webhook) -> None:
    domains = [f"farm{i}.example" for i in range(5)]
    events = write_events(tmp_path / "events.jsonl",
                          [event(f"http://{d}/{j}") for j in range(2) for d in domains])
    clock = FakeClock(auto=True)
    stats = run(config(webhook, events, max_per_minute=120, burst=1), clock=clock)
    bodies = webhook.delivered()
    assert [b["domain"] for b in bodies] == domains  # all of them, in order
    assert all(b["count"] == 2 for b in bodies) and stats.alerts == 5
    assert clock.sleeps == pytest.approx([0.5] * 4)  # the first at once, then one per 0.5 s


def test_burst_goes_at_once_then_the_rate_applies(tmp_path: Path, webhook: Webhook) -> None:
    events = write_events(tmp_path / "events.jsonl",
                          [event(f"http://farm{i}.example/0") for i in range(6)])
    clock = FakeClock(auto=True)
    run(config(webhook, events, max_per_minute=60, burst=3), clock=clock)
    assert len(webhook.delivered()) == 6
    assert clock.sleeps == pytest.approx([1.0] * 3)  # 3 at once, then one a second


def test_alerts_waiting_for_the_rate_limit_take_in_later_windows(tmp_path: Path,
                                                                 webhook: Webhook) -> None:
    """Over the limit, a domain's next windows join its alert that still waits: a flood
    from one farm stays one alert."""
    events = write_events(tmp_path / "events.jsonl", [event("http://first.example/0")])
    cfg = config(webhook, events, follow=True, window=0.1, max_per_minute=20, burst=1)
    clock = FakeClock()

    async def main() -> Stats:
        stop, box = asyncio.Event(), []
        task = asyncio.create_task(run_alerts(cfg, stop, on_start=box.append, clock=clock))
        await _until(lambda: box and box[0].windows)
        clock.advance(0.1)  # the window closes; the token is then spent for 3 s
        await _until(lambda: len(webhook.delivered()) == 1)
        for i in range(4):
            write_events(events, [event(f"http://farm.net/{i}")], mode="a")
            await _until(lambda i=i: box[0].stats.events == i + 2)
            clock.advance(0.25)  # each page in a window of its own
            await _until(lambda: not box[0].windows)
        assert len(webhook.delivered()) == 1  # the farm's alert waits for the next token
        clock.advance(2.0)
        await _until(lambda: len(webhook.delivered()) == 2)
        stop.set()
        return await asyncio.wait_for(task, 30)

    stats = asyncio.run(main())
    assert [b["count"] for b in webhook.delivered()] == [1, 4]
    assert stats.position == events.stat().st_size


def test_retry_after_server_errors_arrives_once(tmp_path: Path, webhook: Webhook) -> None:
    events = write_events(tmp_path / "events.jsonl", [event("http://spam-farm.com/a"),
                                                      event("http://other.org/b")])
    webhook.script = [500, (503, {"Retry-After": "0"}), (429, {"Retry-After": "1"}), 200]
    clock = FakeClock(auto=True)
    stats = run(config(webhook, events), clock=clock)
    assert [p["status"] for p in webhook.posts] == [500, 503, 429, 200, 200]
    assert len({p["body"]["id"] for p in webhook.posts[:4]}) == 1  # the same alert again
    assert [b["domain"] for b in webhook.delivered()] == ["spam-farm.com", "other.org"]
    assert alerted(webhook.delivered()) == {("http://spam-farm.com/a", 1): 1,
                                             ("http://other.org/b", 1): 1}
    assert stats.retries == 3 and stats.dead == 0
    backoff, *after = clock.sleeps  # backoff 0.05: the first delay is 0.025 to 0.05 s
    assert 0.025 <= backoff <= 0.05 and after == [0.0, 1.0]  # then the Retry-After values
    assert not (tmp_path / "events.jsonl.alerts-dead-letter.jsonl").exists()


def test_retry_while_the_webhook_is_unreachable(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    events = write_events(tmp_path / "events.jsonl", [event("http://spam-farm.com/a")])
    cfg = AlertsConfig(webhook=f"http://127.0.0.1:{port}/hook", events=str(events),
                       attempts=0, backoff=0.05, max_backoff=0.2, max_per_minute=0)
    box: dict = {}
    late = threading.Timer(1.0, lambda: box.setdefault("w", Webhook(port)))
    late.start()
    try:
        stats = run(cfg)
    finally:
        late.join()
        box["w"].close()
    assert len(box["w"].posts) == 1 and stats.alerts == 1 and stats.retries >= 2


def test_dead_letter_after_attempts_and_on_client_errors(tmp_path: Path,
                                                         webhook: Webhook) -> None:
    events = write_events(tmp_path / "events.jsonl", [event("http://a.example/1"),
                                                      event("http://b.example/1"),
                                                      event("http://c.example/1")])
    webhook.script = [400, 500, 500, 500, 200]  # a: rejected; b: fails 3 times; c: fine
    stats = run(config(webhook, events, attempts=3))
    assert [p["status"] for p in webhook.posts] == [400, 500, 500, 500, 200]
    dead = [json.loads(line) for line in
            (tmp_path / "events.jsonl.alerts-dead-letter.jsonl").read_text().splitlines()]
    assert [(d["alert"]["domain"], d["attempts"], d["error"][:8]) for d in dead] == [
        ("a.example", 1, "HTTP 400"), ("b.example", 3, "HTTP 500")]
    assert "SECRET" not in json.dumps(dead)  # the webhook's secret path stays out
    assert dead[0]["alert"]["pages"][0]["sources"][0]["share"] == 0.5
    assert (stats.alerts, stats.dead, stats.dead_pages) == (1, 2, 2)
    # Dead-lettered alerts are done: the position passed them, a rerun sends nothing.
    assert position_of(tmp_path / "events.jsonl.alerts-position") == events.stat().st_size
    run(config(webhook, events, attempts=3))
    assert len(webhook.posts) == 5


def test_slack_body(tmp_path: Path, webhook: Webhook) -> None:
    events = write_events(tmp_path / "events.jsonl", [
        event(f"http://farm.net/p{i}?a=1&b=<2>|x") for i in range(25)])
    run(config(webhook, events, slack=True))
    (body,) = webhook.delivered()
    assert set(body) == {"text", "blocks"}
    assert body["text"].startswith("streamdet: 25 quilted pages on farm.net")
    blocks = body["blocks"]
    assert blocks[0]["type"] == "header" and blocks[0]["text"]["type"] == "plain_text"
    sections = [b for b in blocks if b["type"] == "section"]
    assert len(sections) == 20 and len(blocks) <= 50
    assert all(len(s["text"]["text"]) <= 3000 for s in sections)
    first = sections[0]["text"]["text"]
    assert first.startswith("*<http://farm.net/p0?a=1&b=%3C2%3E%7Cx|")  # a clean link
    assert "&amp;b=&lt;2&gt;" in first  # label escaped for mrkdwn
    assert "patch fraction 60%" in first and "src-a.example/1|http://src-a.example/1> 50%" in first
    assert "5 more pages" in blocks[-1]["elements"][0]["text"]
    # the top-level text is mrkdwn too: a crawled URL cannot add a link or a mention
    assert "<" not in body["text"] and ">" not in body["text"]
    assert "?a=1&amp;b=&lt;2&gt;|x" in body["text"]


def test_credentials_in_the_webhook_url_are_sent_as_basic_auth(tmp_path: Path,
                                                                webhook: Webhook) -> None:
    events = write_events(tmp_path / "events.jsonl", [event("http://a.example/1")])
    cfg = config(webhook, events)
    cfg.webhook = webhook.url.replace("http://", "http://alerts:p%40ss@")
    stats = run(cfg)
    assert stats.alerts == 1
    (post,) = webhook.posts
    assert post["headers"]["Authorization"] == "Basic YWxlcnRzOnBAc3M="  # alerts:p@ss
    cfg = config(webhook, events, headers={"Authorization": "Bearer x"})
    cfg.webhook = webhook.url.replace("http://", "http://alerts:p%40ss@")
    with pytest.raises(AlertsError, match="keep one of them"):
        run(cfg)


def test_replay_sends_dead_letters_again_and_keeps_what_fails(tmp_path: Path,
                                                             webhook: Webhook) -> None:
    events = write_events(tmp_path / "events.jsonl", [event(f"http://d{i}.example/1")
                                                      for i in range(3)])
    webhook.script = [503, 503, 503]  # every alert dead-lettered (one attempt each)
    run(config(webhook, events, attempts=1))
    dead = tmp_path / "events.jsonl.alerts-dead-letter.jsonl"
    assert len(dead.read_text().splitlines()) == 3
    webhook.script = [200, 400, 200]  # replay: the 2nd fails for good
    proc = subprocess.run([sys.executable, "-m", "streamdet", "alerts", "--replay", str(dead),
                           "--webhook", webhook.url, "--attempts", "1"],
                          capture_output=True, timeout=60, cwd=REPO)
    assert proc.returncode == 1, proc.stderr
    assert b"2 dead-lettered alerts delivered, 1 left" in proc.stderr
    left = [json.loads(line) for line in dead.read_text().splitlines()]
    assert [d["alert"]["domain"] for d in left] == ["d1.example"]
    assert left[0]["error"].startswith("HTTP 400") and left[0]["attempts"] == 2
    delivered = [b["domain"] for b in webhook.delivered()]
    assert delivered == ["d0.example", "d2.example"]
    assert all(p["headers"]["Idempotency-Key"] == p["body"]["id"] for p in webhook.posts[3:])
    webhook.script = [200]
    proc = subprocess.run([sys.executable, "-m", "streamdet", "alerts", "--replay", str(dead),
                           "--webhook", webhook.url], capture_output=True, timeout=60, cwd=REPO)
    assert proc.returncode == 0 and dead.read_text() == ""


def test_slack_body_of_one_page_is_well_formed() -> None:
    g = Group("spam-farm.com", 0.0)
    g.pages["http://spam-farm.com/a"] = page_of(event("http://spam-farm.com/a"))
    g.end = g.start
    body = slack_body(g, 30.0)
    json.dumps(body)
    assert body["blocks"][0]["text"]["text"] == "streamdet: 1 quilted page on spam-farm.com"
    assert len(body["blocks"]) == 3


# --------------------------------------------------------------------------- spam score


@pytest.fixture(scope="module")
def run_events(tmp_path_factory) -> Path:
    """The events of a real `streamdet run`: quilt and rescore events with spam_score."""
    from .cli_helpers import build_crawl, streamdet, write_jsonl

    d = tmp_path_factory.mktemp("alert-run")
    crawl = write_jsonl(d / "crawl.jsonl", build_crawl(seed=5, n_pages=40, n_quilts=12))
    streamdet("run", "--input", crawl, "--state", d / "state", "--events", d / "ev.jsonl")
    return d / "ev.jsonl"


def _newest(path: Path, kinds: set[str]) -> dict[str, dict]:
    """url -> its newest event of these kinds in an events file."""
    out: dict[str, dict] = {}
    for e in map(json.loads, path.read_text().splitlines()):
        if e["event"] in kinds and e["seq"] > out.get(e["url"], {"seq": -1})["seq"]:
            out[e["url"]] = e
    return out


def test_alerted_pages_carry_their_spam_score(tmp_path: Path, webhook: Webhook,
                                              run_events: Path) -> None:
    events = write_events(tmp_path / "events.jsonl", [run_events.read_bytes()])
    run(config(webhook, events, include_rescore=True))
    pages = {p["url"]: p for b in webhook.delivered() for p in b["pages"]}
    want = _newest(run_events, {"quilt", "rescore"})
    assert pages and set(pages) == set(want)
    assert {u: p["spam_score"] for u, p in pages.items()} == {
        u: e["spam_score"] for u, e in want.items()}
    webhook.posts.clear()
    run(config(webhook, write_events(tmp_path / "slack.jsonl", [want[min(want)]]), slack=True))
    (body,) = webhook.delivered()
    assert f"spam score {want[min(want)]['spam_score']:.2f}" in body["blocks"][1]["text"]["text"]


def test_min_score_alerts_only_the_events_that_reach_it(tmp_path: Path, webhook: Webhook,
                                                       run_events: Path, capsys) -> None:
    newest = _newest(run_events, {"quilt"})
    scores = sorted({e["spam_score"] for e in newest.values()})
    assert len(scores) >= 3
    floor = scores[len(scores) // 2]  # about half the quilts reach it, one exactly
    lines = [run_events.read_bytes(), json.dumps({**event("http://unscored.example/1"),
                                                  "spam_score": None}).encode() + b"\n",
             event("http://old-producer.example/1")]
    events = write_events(tmp_path / "events.jsonl", lines)
    assert streamdet_main(["alerts", "--events", str(events), "--webhook", webhook.url,
                           "--max-per-minute", "0", "--window", "0",
                           "--min-score", str(floor)]) == 0
    pages = {p["url"]: p for b in webhook.delivered() for p in b["pages"]}
    assert set(pages) == {u for u, e in newest.items() if e["spam_score"] >= floor}
    assert 0 < len(pages) < len(newest)
    below = sum(1 for e in map(json.loads, run_events.read_text().splitlines())
                if e["event"] == "quilt" and e["spam_score"] < floor) + 2
    assert f"{below} below --min-score" in capsys.readouterr().err
    for bad in ("1.5", "-0.1", "x"):
        try:
            code = streamdet_main(["alerts", "--events", str(events), "--webhook",
                                   webhook.url, "--min-score", bad])
        except SystemExit as exc:  # argparse's own refusal
            code = exc.code
        assert code == 2 and "--min-score" in capsys.readouterr().err


# --------------------------------------------------------------------------- restarts


def _farm_events(domains: int, pages: int, start: int = 0) -> list[dict]:
    return [event(f"http://farm{d}.example/{p}") for p in range(pages)
            for d in range(start, start + domains)]


def test_restart_alerts_every_quilt_exactly_once(tmp_path: Path, webhook: Webhook) -> None:
    evs = _farm_events(8, 3)
    noise = [event("http://farm0.example/0", seq=2, kind="rescore"),
             event("http://farm1.example/0", seq=2, kind="unquilt")]
    repeats = [evs[3], evs[10]]  # at-least-once: the same events again
    # Quilted again before its alert went out: alerted once, in its newest state.
    requilt = [event("http://farm1.example/0", seq=3)]
    events = write_events(tmp_path / "events.jsonl", evs + noise + repeats + requilt)
    expected = {(e["url"], e["seq"]) for e in evs + requilt} - {("http://farm1.example/0", 1)}

    # Run 1, stopped after 3 deliveries (one every 0.2 s at most).
    s1 = run(config(webhook, events, max_per_minute=300, burst=1), webhook, stop_after=3)
    first = webhook.delivered()
    assert 3 <= len(first) < 8 and s1.alerts == len(first)
    state = tmp_path / "events.jsonl.alerts-position"
    assert 0 < position_of(state) < events.stat().st_size

    # Run 2 delivers the rest.
    s2 = run(config(webhook, events))
    assert s2.alerts >= 1
    assert alerted(webhook.delivered()) == dict.fromkeys(expected, 1)
    assert position_of(state) == events.stat().st_size

    # Run 3 on a grown file: only what is new, not the repeats of old events.
    more = _farm_events(2, 2, start=20)
    write_events(events, [evs[0], evs[5]] + more + [evs[7]], mode="a")
    n = len(webhook.posts)
    run(config(webhook, events))
    assert alerted(webhook.posts[i]["body"] for i in range(n, len(webhook.posts))) == {
        (e["url"], e["seq"]): 1 for e in more}

    # A replay from the start (as when a commit of the position was lost) alerts nothing.
    db = sqlite3.connect(state)
    db.execute("UPDATE meta SET value = '0' WHERE key = 'position'")
    db.commit()
    db.close()
    n = len(webhook.posts)
    s4 = run(config(webhook, events))
    assert len(webhook.posts) == n and s4.repeats == s4.candidates > 0


def test_reader_goes_on_while_delivery_fails_and_commits_nothing_past_it(
        tmp_path: Path, webhook: Webhook) -> None:
    """The webhook is down (retried forever): the events keep being read, the position
    stays before the undelivered alert; after a restart with the webhook back, all is
    alerted once."""
    evs = [event("http://stuck.example/1")] + [
        event(f"http://x{i}.example/p", kind="rescore") for i in range(50)]
    events = write_events(tmp_path / "events.jsonl", evs)
    webhook.script = [500] * 1000
    cfg = config(webhook, events, attempts=0, follow=True, window=0.1)

    async def main() -> Stats:
        stop = asyncio.Event()
        task = asyncio.create_task(run_alerts(cfg, stop))
        await _until(lambda: len(webhook.posts) >= 3)
        stop.set()
        return await asyncio.wait_for(task, 30)

    stats = asyncio.run(main())
    assert stats.events == 51 and stats.alerts == 0 and stats.retries >= 2
    assert position_of(tmp_path / "events.jsonl.alerts-position") == 0
    webhook.script = []
    n = len(webhook.posts)
    run(config(webhook, events))
    assert [b["domain"] for b in (p["body"] for p in webhook.posts[n:])] == ["stuck.example"]
    assert position_of(tmp_path / "events.jsonl.alerts-position") == events.stat().st_size


def test_reading_pauses_at_max_pending_and_resumes(tmp_path: Path, webhook: Webhook) -> None:
    evs = [event("http://stuck.example/1")] + [
        event(f"http://x{i}.example/p", kind="rescore") for i in range(50)]
    events = write_events(tmp_path / "events.jsonl", evs)
    webhook.script = [500] * 1000
    cfg = config(webhook, events, attempts=0, follow=True, window=0.1, max_pending=5)

    async def main() -> Stats:
        stop, box = asyncio.Event(), []
        task = asyncio.create_task(run_alerts(cfg, stop, on_start=box.append))
        await _until(lambda: len(webhook.posts) >= 3)
        assert box[0].stats.events == 5  # held back: 5 events not yet committable
        webhook.script = []  # the webhook is back
        await _until(lambda: box[0].stats.position == events.stat().st_size)
        stop.set()
        return await asyncio.wait_for(task, 30)

    stats = asyncio.run(main())
    assert stats.events == 51 and stats.alerts == 1


def test_revoked_partitions_are_forgotten_unless_in_flight(webhook: Webhook) -> None:
    """Kafka rebalancing: pages read from a partition taken away leave the pending alerts
    (the new owner reads them again); the other partitions' pages and commits go on."""
    from aiokafka import TopicPartition

    p0, p1 = TopicPartition("ev", 0), TopicPartition("ev", 1)
    commits: list[tuple[dict, list]] = []

    async def main() -> Alerter:
        async def commit(ready: dict, alerted: list) -> None:
            commits.append((dict(ready), list(alerted)))

        cfg = AlertsConfig(webhook=webhook.url, broker="unused:9092", max_per_minute=0)
        a = Alerter(cfg, {}, commit)
        for i, (tp, url) in enumerate([(p0, "http://farm.net/a"), (p1, "http://farm.net/b"),
                                       (p0, "http://other.org/c"), (p1, "http://farm.net/d")]):
            a.offer(json.dumps(event(url)).encode(), tp, i + 1)
        a.drop_keys({p0})
        assert set(a.windows) == {"farm.net"} and a.tracker.held == 2
        assert set(a.pending) == {"http://farm.net/b", "http://farm.net/d"}
        a.flush()
        a.closing = True
        await a.deliver()
        return a

    a = asyncio.run(main())
    (body,) = webhook.delivered()
    assert [p["url"] for p in body["pages"]] == ["http://farm.net/b", "http://farm.net/d"]
    assert commits[-1][0] == {p1: 4} and a.idle()


def alerts_process(*args, **kw) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "streamdet", "alerts", *map(str, args)],
                            cwd=REPO, env=env, stderr=subprocess.PIPE, **kw)


def test_sigkill_mid_way_loses_nothing(tmp_path: Path, webhook: Webhook) -> None:
    """A process killed at any moment: a restart alerts the rest. At most the alert whose
    2xx came back as it died repeats, with the same Idempotency-Key."""
    evs = _farm_events(8, 3)
    events = write_events(tmp_path / "events.jsonl", evs)
    proc = alerts_process("--events", events, "--webhook", webhook.url,
                          "--max-per-minute", 600, "--burst", 1)
    webhook.delay = 0.05
    webhook.hook = lambda n: proc.send_signal(signal.SIGKILL) if n >= 3 else None
    assert proc.wait(60) == -signal.SIGKILL
    webhook.hook = None
    first = len(webhook.delivered())
    assert 3 <= first < 8
    proc = alerts_process("--events", events, "--webhook", webhook.url)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    assert b"streamdet: alerts: " in err and b"SECRET" not in err
    counts = alerted(webhook.delivered())
    assert set(counts) == {(e["url"], e["seq"]) for e in evs}
    ids = Counter(b["id"] for b in webhook.delivered())
    assert sum(n - 1 for n in ids.values()) <= 1  # at most one alert twice, same id


def test_sigterm_drains_and_exits_cleanly(tmp_path: Path, webhook: Webhook) -> None:
    events = write_events(tmp_path / "events.jsonl", _farm_events(3, 2))
    proc = alerts_process("--events", events, "--webhook", webhook.url, "--follow",
                          "--window", 60)
    state = tmp_path / "events.jsonl.alerts-position"
    end = time.monotonic() + 30
    while not state.exists():  # opened after the signal handlers are in place
        assert time.monotonic() < end and proc.poll() is None
        time.sleep(0.05)
    time.sleep(0.5)
    assert webhook.posts == []  # the windows are still open
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    assert len(webhook.delivered()) == 3  # windows closed at once, queued alerts sent
    assert position_of(state) == events.stat().st_size


# --------------------------------------------------------------------------- state guards


def test_state_is_bound_to_its_source_and_locked(tmp_path: Path, webhook: Webhook) -> None:
    a = write_events(tmp_path / "a.jsonl", [event("http://a.example/1")])
    b = write_events(tmp_path / "b.jsonl", [event("http://b.example/1")])
    run(config(webhook, a))
    with pytest.raises(AlertsError, match="belongs to file:"):
        run(config(webhook, b, state_file=str(tmp_path / "a.jsonl.alerts-position")))
    write_events(a, [])  # truncated
    with pytest.raises(AlertsError, match="shorter than the position"):
        run(config(webhook, a))
    state = tmp_path / "b.jsonl.alerts-position"
    cfg = config(webhook, b, follow=True)

    async def two() -> None:
        stop, started = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(run_alerts(cfg, stop, on_start=lambda _: started.set()))
        await asyncio.wait_for(started.wait(), 30)  # the state is open (and locked)
        assert state.exists()
        with pytest.raises(AlertsError, match="in use by another"):
            await run_alerts(config(webhook, b), asyncio.Event())
        stop.set()
        await task

    asyncio.run(two())


def test_command_line_options(tmp_path: Path, webhook: Webhook, capsys) -> None:
    events = write_events(tmp_path / "events.jsonl", [event("http://a.example/1"),
                                                      event("http://a.example/2", kind="rescore")])
    assert streamdet_main(["alerts", "--events", str(events), "--webhook", webhook.url,
                           "--include-rescore", "--header", "Authorization: Bearer t0k",
                           "--dead-letter", str(tmp_path / "dead.jsonl"),
                           "--window", "5", "--max-per-minute", "0"]) == 0
    (post,) = webhook.posts
    assert post["headers"]["Authorization"] == "Bearer t0k"
    assert [p["event"] for p in post["body"]["pages"]] == ["quilt", "rescore"]
    err = capsys.readouterr().err
    assert "1 alerts delivered for 2 pages" in err and "SECRET" not in err
    assert streamdet_main(["alerts", "--webhook", webhook.url, "--events", str(events),
                           "--broker", "127.0.0.1:1"]) == 2
    assert "either --events FILE or --broker" in capsys.readouterr().err
    assert streamdet_main(["alerts", "--events", str(events), "--webhook", "ftp://x/"]) == 2
    assert "must be an http(s) URL" in capsys.readouterr().err


def test_settings_from_the_environment(tmp_path: Path, webhook: Webhook, monkeypatch,
                                       capsys) -> None:
    """STREAMDET_ALERTS_WEBHOOK keeps the secret off the command line; a malformed numeric
    setting is one line naming the variable, not a traceback."""
    events = write_events(tmp_path / "events.jsonl", [event("http://a.example/1")])
    monkeypatch.setenv("STREAMDET_ALERTS_WEBHOOK", webhook.url)
    assert streamdet_main(["alerts", "--events", str(events), "--max-per-minute", "0"]) == 0
    assert len(webhook.delivered()) == 1
    monkeypatch.setenv("STREAMDET_SHARDS", "four")
    assert streamdet_main(["alerts", "--events", str(events)]) == 2
    assert "STREAMDET_SHARDS must be a number (int), got 'four'" in capsys.readouterr().err


# --------------------------------------------------------------------------- Kafka


async def _produce(bootstrap: str, topic: str, events: list[dict]) -> None:
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await p.start()
    try:
        for e in events:
            await p.send_and_wait(topic, json.dumps(e).encode(), key=e["url"].encode())
    finally:
        await p.stop()


def test_kafka_restart_alerts_every_quilt_exactly_once(tmp_path: Path, webhook: Webhook,
                                                       kafka_broker: KafkaBroker) -> None:
    prefix = unique_name("alerts")
    topic = f"{prefix}-events"
    kafka_broker.create_topics({topic: 2})
    evs = _farm_events(6, 3)
    noise = [event("http://farm0.example/0", seq=2, kind="rescore"), evs[4], evs[9]]
    run_sync(_produce(kafka_broker.bootstrap, topic, evs + noise))
    state = tmp_path / "alerts.db"

    def cfg(**kw) -> AlertsConfig:
        base = dict(webhook=webhook.url, broker=kafka_broker.bootstrap, prefix=prefix,
                    state_file=str(state), idle=1.5, max_per_minute=0, backoff=0.05, drain=0.0)
        return AlertsConfig(**{**base, **kw})

    s1 = run(cfg(max_per_minute=300, burst=1), webhook, stop_after=2, timeout=90)
    assert 2 <= s1.alerts < 6
    s2 = run(cfg(), timeout=90)
    assert s2.alerts >= 1
    assert alerted(webhook.delivered()) == {(e["url"], e["seq"]): 1 for e in evs}

    more = _farm_events(2, 2, start=10)
    run_sync(_produce(kafka_broker.bootstrap, topic, more + [evs[0], evs[1]]))
    n = len(webhook.posts)
    s3 = run(cfg(), timeout=90)
    assert alerted(p["body"] for p in webhook.posts[n:]) == {(e["url"], e["seq"]): 1
                                                             for e in more}
    assert s3.events == len(more) + 2 and s3.repeats == 2  # it went on from its commits
    # The group's committed offsets reached the end of the topic.
    ends = kafka_broker.high_watermarks(topic)
    assert run_sync(_committed(kafka_broker.bootstrap, f"{prefix}-alerts", topic)) == ends


async def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int | None]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await c.start()
    try:
        return {p: await c.committed(TopicPartition(topic, p))
                for p in sorted(c.partitions_for_topic(topic) or ())}
    finally:
        await c.stop()
