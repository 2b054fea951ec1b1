"""`streamdet alerts`: new quilts, grouped per registered domain, POSTed to a webhook.

    streamdet alerts --webhook URL (--events FILE [--follow] | --broker HOST:PORT) [options]

Input. The events of SPEC §3, from the events topic (`PREFIX-events`, a consumer group of
our own, `--group`, default PREFIX-alerts) or from an events JSONL file (`streamdet run
--events FILE`). Without `--follow` a file is read to its end, every alert is delivered and
the command exits; with `--follow` it keeps tailing the file (waiting for it to appear; a
rotated file is not followed). `--idle S` stops a followed file or Kafka mode once nothing
new arrived for S seconds, after every window is closed and its alert delivered.

What is alerted. `quilt` events (and `rescore` with `--include-rescore`), at most once per
(URL, seq): the highest seq alerted per URL is kept in the state file, so an event repeated
by at-least-once delivery (a worker re-sending its outbox, a replay after our own restart)
is not alerted twice, while a page that unquilts and quilts again (a higher seq) is.
Malformed lines and other events are skipped (logged, counted), never fatal.

Grouping. Per registered domain of the page (Public Suffix List with its private section,
as `--foreign domain`; an IP, `localhost` or a host under no public suffix - `.example`,
`.local` - is its own group). A domain's window opens with
its first page and closes `--window` seconds later (processing time: when the alerter read
the event, so a backlog read at once groups as a whole); one alert then lists every page of
that window. A window also closes early at `--max-pages` pages. A closed group that still
waits for the rate limit takes in the domain's next window (up to `--max-pages`): under a
flood a spam farm still makes few alerts. A newer seq of a page still waiting replaces it.

Evidence. Every page carries url, event, seq, patch_fraction, n_grams, n_patch_grams,
sources [{url, grams, share}] with share = grams / n_patch_grams (the part of the page's
patch grams that source newly covered; the shares of a cover add up to at most 1), cause
and at. Default body:

    {"type": "streamdet.quilt_alert", "id": "...", "domain": "spam.example", "count": 2,
     "window": {"start": "...", "end": "...", "seconds": 30.0}, "pages": [...]}

`id` is a hash of the domain and the (url, seq) pairs, also sent as `Idempotency-Key`, so a
receiver can drop the rare duplicate (see "Guarantees"). `--slack` sends a Slack-compatible
`{"text": ..., "blocks": [...]}` instead (header, one section per page up to 20, then a
"... and N more" line; Slack's block and text limits respected).

Rate limit. A token bucket: `--max-per-minute` alerts a minute with bursts of `--burst`
(0: no limit). Over the limit, groups wait in order (and absorb their domain's next
windows); nothing is dropped. Retries do not take tokens (they have their own backoff).

Delivery. POST with `--timeout`; a 2xx is delivered. Connection errors, timeouts, 408, 425,
429 and 5xx are retried after exponential backoff with jitter (`--backoff` doubling up to
`--max-backoff`), or after the server's Retry-After (capped at 10 min). Any other status
(a 400, 401, 404, a redirect: retrying cannot help) or `--attempts` failed attempts (default
8, one to two minutes; 0: retry forever) sends the alert to the `--dead-letter` JSONL file
(default FILE.alerts-dead-letter.jsonl, or GROUP.alerts-dead-letter.jsonl): the whole
body, the last error, the attempts, fsynced before the position moves past it. The
stream then goes on: one bad alert never holds up the others for long. Alerts are sent one
at a time, in order. The webhook URL is never logged or dead-lettered in full (Slack's
carries its secret in the path); `STREAMDET_ALERTS_WEBHOOK` keeps it off the command line.

Position and state. The reader never waits for deliveries: it keeps reading while alerts
are queued, retried or rate-limited, up to `--max-pending` events read but not yet
committable (then it pauses: Kafka partitions are paused, the group membership kept). The
position committed is the end of the longest prefix of events that are all done - alerted
(delivered or dead-lettered), or needing no alert - per partition, so nothing behind an
undelivered alert is ever committed. Kafka mode commits the group's offsets (the offset
metadata field is too small for the seqs); both modes keep the alerted seqs in a small
SQLite file, `--state-file` (file mode default: FILE.alerts-position, which also holds the
byte offset reached; Kafka mode default: GROUP.alerts-position in the working directory).
SQLite gives one atomic, durable transaction for seqs and position, without rewriting a
growing file after each alert; it is locked by one running alerter at a time and is bound
to its source (a state of another file or topic is refused). A file that shrank below the
stored offset, or whose offset is not at a line start, is refused too (rotated or
replaced: use a new state file). The seqs are written before the position that covers
them, right after each delivery.

Guarantees. Every quilt event read is alerted or dead-lettered before the position passes
it: a stop at any moment loses nothing. Nothing is sent twice across restarts, with one
window: the process dying between the webhook's 2xx and the state write (milliseconds)
repeats that one alert on restart - the Idempotency-Key lets the receiver drop it. On
SIGTERM/SIGINT the open windows close at once and queued alerts get `--drain` seconds
(default 10) to go out; a request in flight always completes; whatever remains is read and
alerted again on the next start. Several alerters in one Kafka group share the partitions;
each keeps its own state file, so an event delivered but not yet committed when its
partition moves may be alerted again by the new owner: run one alerter per group unless
that is acceptable.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import http.client
import json
import logging
import os
import random
import signal
import sqlite3
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from ..engine.servers import host_of, registered_domain
from .outputs import utc_now

log = logging.getLogger("streamdet.alerts")

STATE_FORMAT = "alerts-1"
READ_CHUNK = 1 << 20  # bytes read from an events file at a time
POLL_S = 0.2  # how often a followed file or an idle Kafka consumer is looked at
TICK_S = 0.05  # window deadlines are checked this often
COMMIT_EVERY_S = 1.0  # position moved by events needing no alert: committed this often
RETRY_AFTER_CAP_S = 600.0
SLACK_PAGES = 20  # pages listed in a Slack message (Slack allows 50 blocks)
SLACK_SECTION = 2900  # characters of a section's text (Slack allows 3000)
KAFKA_BATCH = 1000
TOPIC_WAIT_LOG_S = 30.0


class AlertsError(RuntimeError):
    """A problem the user can fix (bad option, unusable state or events file)."""


# --------------------------------------------------------------------------- configuration


@dataclass
class AlertsConfig:
    webhook: str
    events: str | None = None  # events JSONL file, or None for Kafka
    broker: str | None = None
    prefix: str = "streamdet"
    group: str | None = None  # default PREFIX-alerts
    start: str = "earliest"  # where a group with no committed offsets starts
    state_file: str | None = None
    follow: bool = False
    idle: float | None = None
    include_rescore: bool = False
    window: float = 30.0
    max_pages: int = 100
    max_per_minute: float = 20.0
    burst: int = 5
    slack: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float = 10.0
    attempts: int = 8
    backoff: float = 1.0
    max_backoff: float = 60.0
    dead_letter: str | None = None
    max_pending: int = 50000
    drain: float = 10.0

    def check(self) -> None:
        self.check_delivery()
        if (self.events is None) == (self.broker is None):
            raise AlertsError("give either --events FILE or --broker HOST:PORT")
        if self.events == "-":
            raise AlertsError("--events must be a file (its position is kept), not stdin")
        if self.follow and self.events is None:
            raise AlertsError("--follow is for --events FILE (Kafka mode always follows)")
        for name in ("window", "drain", "max_per_minute"):
            if getattr(self, name) < 0:
                raise AlertsError(f"--{name.replace('_', '-')} must not be negative")
        if self.idle is not None and self.idle < 0:
            raise AlertsError("--idle must not be negative")
        for name in ("max_pages", "burst", "max_pending"):
            if getattr(self, name) < 1:
                raise AlertsError(f"--{name.replace('_', '-')} must be at least 1")
        if self.start not in ("earliest", "latest"):
            raise AlertsError("--start must be earliest or latest")

    def check_delivery(self) -> None:
        """The webhook and the retry options (all that --replay needs)."""
        if not self.webhook:
            raise AlertsError("--webhook URL (or STREAMDET_ALERTS_WEBHOOK) is required")
        try:
            parts = urlsplit(self.webhook)
            parts.port  # noqa: B018 - raises ValueError for a port past 65535
        except ValueError:
            raise AlertsError(f"--webhook is not a valid URL: {redact(self.webhook)}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise AlertsError(f"--webhook must be an http(s) URL, got {redact(self.webhook)}")
        if parts.username is not None or parts.password is not None:
            self._credentials_to_header(parts)
        for name in ("timeout", "backoff", "max_backoff"):
            if getattr(self, name) < 0:
                raise AlertsError(f"--{name.replace('_', '-')} must not be negative")
        if self.timeout <= 0:
            raise AlertsError("--timeout must be positive")
        if self.attempts < 0:
            raise AlertsError("--attempts must be 0 (retry forever) or more")

    def _credentials_to_header(self, parts) -> None:
        """`https://user:pass@host/...`: the credentials go in a Basic Authorization header
        (as curl would send them), the URL keeps only the host; refused beside an
        Authorization header of the user's own."""
        if any(k.lower() == "authorization" for k in self.headers):
            raise AlertsError("--webhook holds credentials and an Authorization header is "
                              "given too: keep one of them")
        user, password = unquote(parts.username or ""), unquote(parts.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self.headers = {**self.headers, "Authorization": f"Basic {token}"}
        host = parts.netloc.rpartition("@")[2]
        self.webhook = urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))

    @property
    def group_id(self) -> str:
        return self.group or f"{self.prefix}-alerts"

    @property
    def events_topic(self) -> str:
        from .kafka import Topics

        return Topics.named(self.prefix).events

    def state_path(self) -> str:
        if self.state_file:
            return self.state_file
        if self.events is not None:
            return self.events + ".alerts-position"
        return f"{self.group_id}.alerts-position"

    def dead_letter_path(self) -> str:
        if self.dead_letter:
            return self.dead_letter
        state = self.state_path()
        return state.removesuffix(".alerts-position") + ".alerts-dead-letter.jsonl"

    def source_id(self) -> str:
        if self.events is not None:
            return "file:" + os.path.realpath(self.events)
        return f"kafka:{self.events_topic}:{self.group_id}"


@dataclass
class Stats:
    events: int = 0  # lines / records read
    candidates: int = 0  # quilt (and rescore) events
    repeats: int = 0  # candidates not alerted: an equal or higher seq was alerted or pending
    malformed: int = 0
    alerts: int = 0  # delivered
    pages: int = 0  # pages in delivered alerts
    dead: int = 0  # alerts dead-lettered
    dead_pages: int = 0
    retries: int = 0
    position: Any = None  # last committed position (file: byte offset; Kafka: {partition: offset})


def redact(url: str) -> str:
    """scheme://host/... : enough to tell which webhook, without the secret in its path."""
    p = urlsplit(url)
    return f"{p.scheme}://{p.netloc.rpartition('@')[2]}/…" if p.netloc else "(webhook)"


def domain_of(url: str) -> str:
    host = host_of(url)
    return registered_domain(host) if host else "(no host)"


# --------------------------------------------------------------------------- state file


class State:
    """The alerter's SQLite file: its source, the file position, the highest seq alerted
    per URL. Opened with an exclusive lock held until close (one alerter per state)."""

    def __init__(self, path: str, source: str) -> None:
        self.path = path
        if os.path.isdir(path):
            raise AlertsError(f"state file {path} is a directory")
        parent = os.path.dirname(os.path.abspath(path))
        try:
            os.makedirs(parent, exist_ok=True)
            self.db = sqlite3.connect(path, timeout=0, isolation_level=None,
                                      check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise AlertsError(f"cannot open state file {path}: {exc}") from None
        try:
            self.db.execute("PRAGMA locking_mode=EXCLUSIVE")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.execute("BEGIN IMMEDIATE")  # takes the lock now, keeps it (EXCLUSIVE)
            self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            self.db.execute("CREATE TABLE IF NOT EXISTS alerted (url TEXT PRIMARY KEY, "
                            "seq INTEGER NOT NULL, at TEXT NOT NULL)")
            meta = dict(self.db.execute("SELECT key, value FROM meta"))
            if not meta:
                self.db.executemany("INSERT INTO meta VALUES (?, ?)",
                                    [("format", STATE_FORMAT), ("source", source),
                                     ("position", "0")])
                meta = {"format": STATE_FORMAT, "source": source, "position": "0"}
            # A write, so that the exclusive lock is taken now and kept until close.
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('opened', ?)", (utc_now(),))
            self.db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            self.db.close()
            if "locked" in str(exc):
                raise AlertsError(f"state file {path} is in use by another streamdet alerts"
                                  ) from None
            raise AlertsError(f"state file {path}: {exc}") from None
        except sqlite3.DatabaseError as exc:
            self.db.close()
            raise AlertsError(f"{path} is not a streamdet alerts state file ({exc})") from None
        if meta.get("format") != STATE_FORMAT:
            self.db.close()
            raise AlertsError(f"{path} is not a streamdet alerts state file "
                              f"(format {meta.get('format')!r})")
        if meta["source"] != source:
            self.db.close()
            raise AlertsError(f"state file {path} belongs to {meta['source']}, not {source}; "
                              "use --state-file to give this source a state of its own")
        self.position = int(meta["position"])
        self.alerted: dict[str, int] = dict(self.db.execute("SELECT url, seq FROM alerted"))

    def save(self, position: int | None, alerted: Iterable[tuple[str, int]]) -> None:
        """One durable transaction: the seqs alerted, then (file mode) the position."""
        now = utc_now()
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT INTO alerted (url, seq, at) VALUES (?, ?, ?) "
                           "ON CONFLICT(url) DO UPDATE SET seq = max(seq, excluded.seq), "
                           "at = excluded.at", [(u, s, now) for u, s in alerted])
            if position is not None:
                db.execute("UPDATE meta SET value = ? WHERE key = 'position'", (str(position),))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        if position is not None:
            self.position = position

    def close(self) -> None:
        self.db.close()


# --------------------------------------------------------------------------- bookkeeping


class Mark:
    """One event read: where it ends (its partition's next position) and whether it is
    done (needs no alert, or its alert was delivered or dead-lettered)."""

    __slots__ = ("key", "pos", "done")

    def __init__(self, key: Any, pos: int, done: bool = False) -> None:
        self.key, self.pos, self.done = key, pos, done


class Tracker:
    """Per partition (file mode: one, key None) the marks in read order; the committable
    position is the end of the longest prefix of done marks."""

    def __init__(self) -> None:
        self.lanes: dict[Any, deque[Mark]] = {}
        self.ready: dict[Any, int] = {}  # committable position per key
        self.held = 0  # marks kept (not yet committable)

    def add(self, key: Any, pos: int, done: bool = False) -> Mark:
        mark = Mark(key, pos, done)
        lane = self.lanes.get(key)
        if done and not lane:
            self.ready[key] = pos
            return mark
        if lane is None:
            lane = self.lanes[key] = deque()
        lane.append(mark)
        self.held += 1
        return mark

    def advance(self) -> dict[Any, int]:
        for key, lane in self.lanes.items():
            while lane and lane[0].done:
                self.ready[key] = lane.popleft().pos
                self.held -= 1
        return self.ready

    def drop(self, key: Any) -> None:
        lane = self.lanes.pop(key, None)
        if lane:
            self.held -= len(lane)
        self.ready.pop(key, None)


class Group:
    """The pages of one domain for one alert: an open window, then queued, then in flight."""

    def __init__(self, domain: str, opened: float) -> None:
        self.domain = domain
        self.opened = opened  # loop time the window opened
        self.start = utc_now()
        self.end: str | None = None
        self.pages: dict[str, dict] = {}  # url -> page evidence (insertion = arrival order)
        self.origin: dict[str, Any] = {}  # url -> partition key of the page's event
        self.marks: list[Mark] = []
        self.in_flight = False

    def seqs(self) -> list[tuple[str, int]]:
        return [(u, p["seq"]) for u, p in self.pages.items()]

    def alert_id(self) -> str:
        h = hashlib.sha256(self.domain.encode("utf-8", "surrogatepass"))
        for u, s in sorted(self.seqs()):
            h.update(f"\n{u}\t{s}".encode("utf-8", "surrogatepass"))
        return h.hexdigest()[:32]


def page_of(ev: dict) -> dict:
    """The evidence of one event: the page, its patch fraction, its sources with shares."""
    n_patch = ev.get("n_patch_grams")
    sources = []
    for s in ev.get("sources") or []:
        if not isinstance(s, dict):
            continue
        grams = s.get("grams")
        share = (round(grams / n_patch, 4) if isinstance(grams, int | float)
                 and isinstance(n_patch, int | float) and n_patch > 0 else None)
        sources.append({"url": s.get("url"), "grams": grams, "share": share})
    return {"url": ev["url"], "event": ev.get("event"), "seq": ev["seq"],
            "patch_fraction": ev.get("patch_fraction"), "n_grams": ev.get("n_grams"),
            "n_patch_grams": n_patch, "sources": sources, "cause": ev.get("cause"),
            "at": ev.get("at")}


# --------------------------------------------------------------------------- bodies


def json_body(group: Group, window: float) -> dict:
    return {"type": "streamdet.quilt_alert", "id": group.alert_id(), "domain": group.domain,
            "count": len(group.pages),
            "window": {"start": group.start, "end": group.end, "seconds": window},
            "pages": list(group.pages.values())}


def _mrkdwn(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _link(url: Any) -> str:
    if not isinstance(url, str):
        return _mrkdwn(str(url))
    target = quote(url, safe=":/?#[]@!$&'()*+,;=%~")  # | and > cannot be in a Slack link
    return f"<{target}|{_mrkdwn(url)}>"


def _pct(x: Any) -> str:
    return f"{100 * x:.0f}%" if isinstance(x, int | float) else "?"


def slack_body(group: Group, window: float) -> dict:
    pages = list(group.pages.values())
    n = len(pages)
    title = f"streamdet: {n} quilted page{'s' if n != 1 else ''} on {group.domain}"
    blocks: list[dict] = [{"type": "header",
                           "text": {"type": "plain_text", "text": title[:150]}}]
    for p in pages[:SLACK_PAGES]:
        srcs = ", ".join(f"{_link(s['url'])} {_pct(s['share'])}" for s in p["sources"])
        text = (f"*{_link(p['url'])}*\npatch fraction {_pct(p['patch_fraction'])} "
                f"({p['n_patch_grams']} of {p['n_grams']} grams), {p['event']} #{p['seq']}\n"
                f"sources: {srcs or '-'}")
        if len(text) > SLACK_SECTION:
            text = text[:SLACK_SECTION - 1] + "…"
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": text}})
    more = f"…and {n - SLACK_PAGES} more pages. " if n > SLACK_PAGES else ""
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _mrkdwn(
        f"{more}window {group.start} – {group.end} ({window:g} s); alert {group.alert_id()}")}]})
    # the top-level text is mrkdwn too: a crawled URL must not add links or mentions
    text = _mrkdwn(title + ": " + ", ".join(str(p["url"]) for p in pages[:SLACK_PAGES]))
    return {"text": text[:3000], "blocks": blocks}


# --------------------------------------------------------------------------- HTTP


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # a redirect is an error, not followed
        return None


_OPENER = urllib.request.build_opener(_NoRedirect())


def post(url: str, body: bytes, headers: dict[str, str], timeout: float
         ) -> tuple[int | None, str | None, str]:
    """(status or None on a connection error, Retry-After, detail). Runs in a thread."""
    req = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            resp.read(1 << 16)
            return resp.status, None, f"HTTP {resp.status}"
    except urllib.error.HTTPError as exc:
        try:
            text = exc.read(300).decode("utf-8", "replace").strip()
        except (OSError, http.client.HTTPException):
            text = ""
        return exc.code, exc.headers.get("Retry-After"), f"HTTP {exc.code} {text}".strip()
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return None, None, f"{type(exc).__name__}: {reason}"


def retry_after_s(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return min(RETRY_AFTER_CAP_S, max(0.0, float(value)))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return min(RETRY_AFTER_CAP_S, max(0.0, when - time.time()))


def retryable(status: int | None) -> bool:
    return status is None or status in (408, 425, 429) or status >= 500


class TokenBucket:
    def __init__(self, per_minute: float, burst: int, clock: Callable[[], float]) -> None:
        self.rate = per_minute / 60.0
        self.capacity = float(burst)
        self.tokens = float(burst)
        self.clock = clock
        self.last = clock()

    def wait(self) -> float:
        """Seconds until a token is there (0: take one now)."""
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.last) * self.rate)
        self.last = now
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.rate

    def take(self) -> None:
        if self.rate > 0:
            self.tokens -= 1


async def deliver(cfg: AlertsConfig, data: bytes, headers: dict[str, str],
                  abort: asyncio.Event, what: str, stats: Stats) -> tuple[bool | None, str, int]:
    """POST one alert body, retrying with backoff (and Retry-After) up to cfg.attempts:
    (delivered, or None when aborted between attempts; the last response; attempts)."""
    attempt = 0
    while True:
        attempt += 1
        status, after, detail = await asyncio.to_thread(post, cfg.webhook, data, headers,
                                                        cfg.timeout)
        if status is not None and 200 <= status < 300:
            log.info("%s delivered (%s)", what, detail)
            return True, detail, attempt
        if not retryable(status) or (cfg.attempts and attempt >= cfg.attempts):
            why = "not retried" if not retryable(status) else f"after {attempt} attempts"
            log.error("%s to %s failed %s: %s", what, redact(cfg.webhook), why, detail)
            return False, detail, attempt
        delay = retry_after_s(after)
        if delay is None:
            step = min(cfg.max_backoff, cfg.backoff * 2 ** (attempt - 1))
            delay = step / 2 + random.uniform(0, step / 2)
        stats.retries += 1
        log.warning("%s to %s failed (%s); attempt %d, retrying in %.1f s", what,
                    redact(cfg.webhook), detail, attempt, delay)
        if await _wait(abort, delay):
            return None, detail, attempt


async def replay(cfg: AlertsConfig, path: str, stop: asyncio.Event) -> tuple[int, int]:
    """Send the alerts of a dead-letter file again (`streamdet alerts --replay`): those
    delivered leave the file, those that fail again stay in it (rewritten in place,
    atomically). Returns (delivered, left)."""
    try:
        with open(path, "rb") as f:
            lines = [line for line in f.read().splitlines() if line.strip()]
    except FileNotFoundError:
        raise AlertsError(f"no alert dead letters at {path}") from None
    left: list[bytes] = []
    delivered = 0
    stats = Stats()
    for i, line in enumerate(lines):
        try:
            entry = json.loads(line)
            body = entry["alert"]
        except (ValueError, KeyError, TypeError):
            left.append(line)  # not ours to judge: kept as it is
            continue
        if stop.is_set():
            left.append(line)
            continue
        data = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
        headers = dict(cfg.headers, **{"Content-Type": "application/json"})
        if isinstance(body, dict) and body.get("id"):
            headers["Idempotency-Key"] = str(body["id"])
        ok, detail, attempts = await deliver(cfg, data, headers, stop,
                                             f"dead-lettered alert {i + 1}", stats)
        if ok:
            delivered += 1
        else:
            entry.update(error=detail, attempts=entry.get("attempts", 0) + attempts,
                         at=utc_now())
            left.append(json.dumps(entry, ensure_ascii=False).encode("utf-8",
                                                                     "surrogatepass"))
    tmp = path + ".replaying"
    with open(tmp, "wb") as f:
        f.write(b"".join(line + b"\n" for line in left))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return delivered, len(left)


async def _wait(event: asyncio.Event, timeout: float) -> bool:
    """Sleep up to timeout; True if the event was set (at once or meanwhile)."""
    if event.is_set():
        return True
    try:
        await asyncio.wait_for(event.wait(), timeout)
        return True
    except TimeoutError:
        return False


# --------------------------------------------------------------------------- the alerter


class Alerter:
    """Everything between reading an event and committing past it: dedupe, windows, the
    delivery queue, the rate limit, retries, dead letters and the commit order. Sources
    call offer() for each event (with its partition key and its end position), tick()
    regularly and commit() through the `commit` function they hand in."""

    def __init__(self, cfg: AlertsConfig, alerted: dict[str, int],
                 commit: Callable[[dict[Any, int], list[tuple[str, int]]], Any]) -> None:
        self.cfg = cfg
        self.alerted = alerted
        self._commit_fn = commit
        self.stats = Stats()
        self.tracker = Tracker()
        self.kinds = {"quilt", "rescore"} if cfg.include_rescore else {"quilt"}
        self.loop = asyncio.get_running_loop()
        self.windows: dict[str, Group] = {}
        self.queue: deque[Group] = deque()
        self.queued: dict[str, Group] = {}  # domain -> its last queued group (not in flight)
        self.pending: dict[str, tuple[int, Group]] = {}  # url -> (seq, group), not yet done
        self.to_record: list[tuple[str, int]] = []
        self.bucket = TokenBucket(cfg.max_per_minute, min(cfg.burst, max(1, int(
            cfg.max_per_minute))) if cfg.max_per_minute else cfg.burst, self.loop.time)
        self.work = asyncio.Event()  # the queue got something, or closing
        self.abort = asyncio.Event()  # stop delivering (a request in flight completes)
        self.closing = False
        self.commit_lock = asyncio.Lock()
        self.last_commit = self.loop.time()
        self.dirty = False
        self.headers = {"Content-Type": "application/json",
                        "User-Agent": "streamdet-alerts", **cfg.headers}
        self._dead_file = None
        self._malformed_logged = 0

    # -- reading ---------------------------------------------------------------------
    def offer(self, raw: bytes, key: Any, pos: int) -> None:
        """One event line / record value, ending its partition at `pos`."""
        self.stats.events += 1
        self.dirty = True
        try:
            ev = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            self._malformed(key, pos, "not JSON")
            return
        if not isinstance(ev, dict) or ev.get("event") not in self.kinds:
            if not isinstance(ev, dict):
                self._malformed(key, pos, "not a JSON object")
            else:
                self.tracker.add(key, pos, done=True)
            return
        url, seq = ev.get("url"), ev.get("seq")
        if not isinstance(url, str) or not url or type(seq) is not int:
            self._malformed(key, pos, f"{ev.get('event')} event without url or integer seq")
            return
        self.stats.candidates += 1
        if seq <= self.alerted.get(url, -1):
            self.stats.repeats += 1
            self.tracker.add(key, pos, done=True)
            return
        mark = self.tracker.add(key, pos)
        pend = self.pending.get(url)
        if pend is not None:
            pseq, g = pend
            if seq <= pseq:  # a repeat of what is pending: done when that alert is
                self.stats.repeats += 1
                g.marks.append(mark)
                return
            if not g.in_flight:  # a newer state of a page still waiting: replace it
                self.stats.repeats += 1
                g.pages[url] = page_of(ev)
                g.origin[url] = key
                g.marks.append(mark)
                self.pending[url] = (seq, g)
                return
        domain = domain_of(url)
        g = self.windows.get(domain)
        if g is None:
            g = self.windows[domain] = Group(domain, self.loop.time())
        g.pages[url] = page_of(ev)
        g.origin[url] = key
        g.marks.append(mark)
        self.pending[url] = (seq, g)
        if len(g.pages) >= self.cfg.max_pages:
            self._close(domain)

    def skip(self, key: Any, pos: int) -> None:
        """A position to pass with no event (a blank line)."""
        self.tracker.add(key, pos, done=True)
        self.dirty = True

    def _malformed(self, key: Any, pos: int, why: str) -> None:
        self.stats.malformed += 1
        self.tracker.add(key, pos, done=True)
        self._malformed_logged += 1
        if self._malformed_logged <= 10:
            log.warning("skipping an event at %s: %s", self._where(key, pos), why)

    @staticmethod
    def _where(key: Any, pos: int) -> str:
        return f"byte {pos}" if key is None else f"{key.topic}[{key.partition}]@{pos - 1}"

    def has_room(self) -> bool:
        return self.tracker.held < self.cfg.max_pending

    # -- windows ---------------------------------------------------------------------
    def tick(self) -> None:
        now = self.loop.time()
        for domain in [d for d, g in self.windows.items() if now - g.opened >= self.cfg.window]:
            self._close(domain)

    def flush(self) -> None:
        """Close every open window now (end of input, or stopping)."""
        for domain in list(self.windows):
            self._close(domain)

    def _close(self, domain: str) -> None:
        g = self.windows.pop(domain)
        g.end = utc_now()
        q = self.queued.get(domain)
        if q is not None and not q.in_flight and len(q.pages) + len(g.pages) <= self.cfg.max_pages:
            q.pages.update(g.pages)  # still waiting: the domain's next window joins it
            q.origin.update(g.origin)
            q.marks.extend(g.marks)
            q.end = g.end
            for url, page in g.pages.items():
                self.pending[url] = (page["seq"], q)
        else:
            self.queue.append(g)
            self.queued[domain] = g
        self.work.set()

    def idle(self) -> bool:
        """Nothing open, queued or in flight."""
        return not self.windows and not self.queue and not self.pending

    # -- rebalancing (Kafka) ---------------------------------------------------------
    def drop_keys(self, keys: set) -> None:
        """Partitions taken away: forget their events that are not in flight (the new
        owner reads them again from the committed offset)."""
        groups = list(self.windows.values()) + [g for g in self.queue if not g.in_flight]
        for g in groups:
            g.marks = [m for m in g.marks if m.key not in keys]
            for url in [u for u, k in g.origin.items() if k in keys]:
                del g.pages[url], g.origin[url]
                if self.pending.get(url, (0, None))[1] is g:
                    del self.pending[url]
        for domain in [d for d, g in self.windows.items() if not g.pages]:
            del self.windows[domain]
        for g in [g for g in self.queue if not g.in_flight and not g.pages]:
            self.queue.remove(g)
            if self.queued.get(g.domain) is g:
                del self.queued[g.domain]
        for key in keys:
            self.tracker.drop(key)

    # -- delivery --------------------------------------------------------------------
    async def deliver(self) -> None:
        """The delivery task: one alert at a time, in queue order, until closing and done
        (or aborted)."""
        while True:
            while not self.queue:
                if self.closing and not self.windows or self.abort.is_set():
                    return
                self.work.clear()
                await self.work.wait()
            if self.abort.is_set():
                return
            wait = self.bucket.wait()
            if wait > 0:
                if await _wait(self.abort, wait):
                    return
                continue
            self.bucket.take()
            g = self.queue.popleft()
            if self.queued.get(g.domain) is g:
                del self.queued[g.domain]
            g.in_flight = True
            outcome = await self._send(g)
            if outcome is None:  # aborted between attempts: read again on the next start
                return
            self._done(g, outcome)
            await self.commit(force=True)

    async def _send(self, g: Group) -> str | None:
        cfg = self.cfg
        body = (slack_body if cfg.slack else json_body)(g, cfg.window)
        data = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
        headers = dict(self.headers, **{"Idempotency-Key": g.alert_id()})
        what = f"alert {g.domain} ({len(g.pages)} pages)"
        delivered, detail, attempts = await deliver(cfg, data, headers, self.abort, what,
                                                    self.stats)
        if delivered is None:  # aborted between attempts: read again on the next start
            return None
        if delivered:
            return "sent"
        log.error("%s dead-lettered to %s", what, cfg.dead_letter_path())
        await self._dead_letter(body, detail, attempts)
        return "dead"

    async def _dead_letter(self, body: dict, error: str, attempts: int) -> None:
        line = json.dumps({"alert": body, "webhook": redact(self.cfg.webhook), "error": error,
                           "attempts": attempts, "at": utc_now()}, ensure_ascii=False)
        await asyncio.to_thread(self._append_dead, (line + "\n").encode("utf-8",
                                                                         "surrogatepass"))

    def _append_dead(self, data: bytes) -> None:
        path = self.cfg.dead_letter_path()
        if self._dead_file is None:
            parent = os.path.dirname(os.path.abspath(path))
            os.makedirs(parent, exist_ok=True)
            self._dead_file = open(path, "ab")  # noqa: SIM115 - closed in close()
        self._dead_file.write(data)
        self._dead_file.flush()
        os.fsync(self._dead_file.fileno())  # durable before the position passes the alert

    def _done(self, g: Group, outcome: str) -> None:
        n = len(g.pages)
        if outcome == "sent":
            self.stats.alerts += 1
            self.stats.pages += n
        else:
            self.stats.dead += 1
            self.stats.dead_pages += n
        for url, seq in g.seqs():
            if seq > self.alerted.get(url, -1):
                self.alerted[url] = seq
            self.to_record.append((url, seq))
            if self.pending.get(url, (0, None))[1] is g:
                del self.pending[url]
        for m in g.marks:
            m.done = True
        g.marks = []

    # -- commits ---------------------------------------------------------------------
    async def commit(self, force: bool = False) -> None:
        """Record the seqs alerted, then commit the position (both only when they moved;
        without force, at most every COMMIT_EVERY_S)."""
        now = self.loop.time()
        if not force and (not self.dirty or now - self.last_commit < COMMIT_EVERY_S):
            return
        async with self.commit_lock:
            self.last_commit = now
            self.dirty = False
            ready = dict(self.tracker.advance())
            alerted, self.to_record = self.to_record, []
            try:
                await self._commit_fn(ready, alerted)
            except BaseException:
                self.to_record = alerted + self.to_record
                self.dirty = True
                raise

    def close(self) -> None:
        if self._dead_file is not None:
            self._dead_file.close()
            self._dead_file = None


# --------------------------------------------------------------------------- running


async def run_alerts(cfg: AlertsConfig, stop: asyncio.Event | None = None,
                     on_start: Callable[[Alerter], None] | None = None) -> Stats:
    """Run until the input ends (a file without follow), `idle`, or `stop` is set.
    Stopping (stop set): windows close, queued alerts get cfg.drain seconds, then the
    rest waits for the next start."""
    cfg.check()
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(1, thread_name_prefix="streamdet-alerts-state")
    try:
        state = await loop.run_in_executor(pool, State, cfg.state_path(), cfg.source_id())
    except BaseException:
        pool.shutdown()
        raise
    try:
        if cfg.events is not None:
            return await _run_file(cfg, state, pool, stop, on_start)
        return await _run_kafka(cfg, state, pool, stop, on_start)
    finally:
        await loop.run_in_executor(pool, state.close)
        pool.shutdown()


async def _drive(alerter: Alerter, reader: Callable[[], Any], stop: asyncio.Event) -> None:
    """Run the reader, the delivery task and the window ticker; wind down in order."""
    cfg = alerter.cfg
    deliver = asyncio.create_task(alerter.deliver(), name="streamdet-alerts-deliver")
    read = asyncio.create_task(reader(), name="streamdet-alerts-read")

    async def ticker() -> None:
        while True:
            alerter.tick()
            await alerter.commit()
            await asyncio.sleep(TICK_S)

    tick = asyncio.create_task(ticker(), name="streamdet-alerts-tick")
    try:
        # The reader returns at the end of input, when idle, or when stop is set.
        done, _ = await asyncio.wait({read, deliver}, return_when=asyncio.FIRST_COMPLETED)
        if deliver in done:
            deliver.result()  # delivery task died: raise its error
        read.result()
        alerter.flush()  # end of input, idle or stopping: every window closes now
        alerter.closing = True
        alerter.work.set()
        stopping = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({deliver, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if deliver not in done:
            log.info("stopping: %d alerts queued get %g s to go out", len(alerter.queue),
                     cfg.drain)
            done, _ = await asyncio.wait({deliver}, timeout=cfg.drain)
            if not done:
                alerter.abort.set()  # a request in flight still completes
        await deliver
    finally:
        for t in (read, deliver, tick):
            if not t.done():
                alerter.abort.set()
                t.cancel()
        await asyncio.gather(read, deliver, tick, return_exceptions=True)
        try:
            await alerter.commit(force=True)
        finally:
            alerter.close()


async def _run_file(cfg: AlertsConfig, state: State, pool: ThreadPoolExecutor,
                    stop: asyncio.Event, on_start) -> Stats:
    loop = asyncio.get_running_loop()
    path = cfg.events
    waited = False
    while True:
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed below
            break
        except FileNotFoundError:
            if not cfg.follow:
                raise AlertsError(f"no events file {path}") from None
            if not waited:  # following: the writer may not have started yet
                log.info("waiting for events file %s to exist", path)
                waited = True
            if await _wait(stop, POLL_S):
                return Stats()
        except OSError as exc:
            raise AlertsError(f"cannot read events file {path}: {exc.strerror or exc}"
                              ) from None
    try:
        start = state.position
        size = os.fstat(f.fileno()).st_size
        if start > size:
            raise AlertsError(f"events file {path} ({size} bytes) is shorter than the position "
                              f"{start} kept in {state.path}: truncated or replaced? Use a new "
                              "--state-file")
        if start > 0 and os.pread(f.fileno(), 1, start - 1) != b"\n":
            raise AlertsError(f"the position {start} kept in {state.path} is not at a line "
                              f"start of {path}: replaced? Use a new --state-file")
        f.seek(start)

        async def commit(ready: dict, alerted: list) -> None:
            pos = ready.get(None)
            if pos is not None and pos == state.position:
                pos = None
            if pos is None and not alerted:
                return
            await loop.run_in_executor(pool, state.save, pos, alerted)
            alerter.stats.position = state.position

        alerter = Alerter(cfg, state.alerted, commit)
        alerter.stats.position = start
        if on_start:
            on_start(alerter)
        if start:
            log.info("events file %s: resuming at byte %d", path, start)

        async def reader() -> None:
            pos, buf, i, n = start, b"", 0, 0
            last = loop.time()
            while not stop.is_set():
                nl = buf.find(b"\n", i)
                if nl < 0:
                    buf, i = buf[i:], 0
                    chunk = f.read(READ_CHUNK)
                    if chunk:
                        buf += chunk
                        last = loop.time()
                        continue
                    # At the end: a partial last line is the writer's, not ours yet.
                    if not cfg.follow:
                        return
                    if cfg.idle is not None and loop.time() - last >= cfg.idle:
                        return
                    if os.stat(path).st_size < pos:
                        raise AlertsError(f"events file {path} shrank below byte {pos} "
                                          "while followed (truncated?)")
                    await _wait(stop, POLL_S)
                    continue
                if not alerter.has_room():  # deliveries are behind: wait, keep the rest
                    await _wait(stop, POLL_S)
                    continue
                line, i = buf[i:nl], nl + 1
                pos += len(line) + 1
                if line.strip():
                    alerter.offer(line, None, pos)
                else:
                    alerter.skip(None, pos)
                n += 1
                if n % 1000 == 0:
                    await asyncio.sleep(0)

        await _drive(alerter, reader, stop)
        return alerter.stats
    finally:
        f.close()


class _Rebalance:
    """Revoked partitions: commit what is done there, forget the rest (the next owner reads
    it again)."""

    def __init__(self) -> None:
        self.alerter: Alerter | None = None

    async def on_partitions_revoked(self, revoked) -> None:
        if self.alerter is not None and revoked:
            try:
                await self.alerter.commit(force=True)
            except Exception as exc:  # noqa: BLE001 - the next owner re-reads; no loss
                log.warning("commit on revocation failed: %s", exc)
            self.alerter.drop_keys(set(revoked))

    async def on_partitions_assigned(self, assigned) -> None:
        if assigned:
            log.info("assigned %s", ", ".join(f"{tp.topic}[{tp.partition}]"
                                              for tp in sorted(assigned)))


async def _wait_topic(broker: str, topic: str, stop: asyncio.Event) -> bool:
    """Until the events topic exists (listing topics, which never auto-creates one, unlike
    subscribing to it on a broker that auto-creates topics). False if stopped first."""
    from aiokafka.admin import AIOKafkaAdminClient

    from .kafka import connection

    admin = AIOKafkaAdminClient(**connection(broker))
    await admin.start()
    try:
        waited = 0.0
        while True:
            if topic in await admin.list_topics():
                return True
            if waited == 0 or waited >= TOPIC_WAIT_LOG_S:
                log.info("waiting for topic %s to exist", topic)
                waited = 0.0
            if await _wait(stop, 1.0):
                return False
            waited += 1.0
    finally:
        await admin.close()


async def _run_kafka(cfg: AlertsConfig, state: State, pool: ThreadPoolExecutor,
                     stop: asyncio.Event, on_start) -> Stats:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

    from .kafka import Timing, connection

    loop = asyncio.get_running_loop()
    topic = cfg.events_topic
    if not await _wait_topic(cfg.broker, topic, stop):
        return Stats()

    class Listener(_Rebalance, ConsumerRebalanceListener):
        pass

    listener = Listener()
    consumer = AIOKafkaConsumer(**connection(cfg.broker), group_id=cfg.group_id,
                                enable_auto_commit=False, auto_offset_reset=cfg.start,
                                fetch_max_wait_ms=100, **Timing().group_settings())
    consumer.subscribe([topic], listener=listener)
    await consumer.start()
    committed: dict[Any, int] = {}

    async def commit(ready: dict, alerted: list) -> None:
        if alerted:
            await loop.run_in_executor(pool, state.save, None, alerted)
        owned = consumer.assignment()
        offsets = {tp: pos for tp, pos in ready.items()
                   if tp in owned and committed.get(tp) != pos}
        if not offsets:
            return
        try:
            await consumer.commit(offsets)
        except (CommitFailedError, IllegalStateError, KafkaError) as exc:
            # Rebalanced meanwhile: the next owner reads these again; our seqs are saved.
            log.warning("offset commit failed (%s); continuing", exc)
            return
        committed.update(offsets)
        alerter.stats.position = {tp.partition: off for tp, off in sorted(committed.items())}

    try:
        alerter = Alerter(cfg, state.alerted, commit)
        listener.alerter = alerter
        if on_start:
            on_start(alerter)

        async def reader() -> None:
            last = None  # the idle clock starts once partitions are assigned
            paused = False
            while not stop.is_set():
                owned = consumer.assignment()
                if last is None and owned:
                    last = loop.time()
                if not alerter.has_room():
                    consumer.pause(*owned)  # keep polling: the group membership stays
                    paused = True
                elif paused:
                    consumer.resume(*owned)
                    paused = False
                batch = await consumer.getmany(timeout_ms=int(POLL_S * 1000),
                                               max_records=KAFKA_BATCH)
                for tp, recs in batch.items():
                    for r in recs:
                        if r.value is None:
                            alerter.skip(tp, r.offset + 1)
                        else:
                            alerter.offer(r.value, tp, r.offset + 1)
                    if recs:
                        last = loop.time()
                if cfg.idle is not None and last is not None and loop.time() - last >= cfg.idle:
                    return

        await _drive(alerter, reader, stop)
        return alerter.stats
    finally:
        listener.alerter = None
        await consumer.stop()


# --------------------------------------------------------------------------- command line


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected 'Name: value', got {text!r}")
    return name.strip(), value.strip()


def add_parser(sub) -> argparse.ArgumentParser:
    """Add `streamdet alerts` to the subparsers of the streamdet command line."""
    env = os.environ.get
    p = sub.add_parser(
        "alerts", help="POST new quilts, grouped per domain, to a webhook (spam-team alerts)",
        description="Consume quilt events (the events topic or an events file) and POST each "
        "new quilt to a webhook, grouped per registered domain within a window, rate-limited, "
        "retried with backoff; the position is committed only after delivery.")
    src = p.add_argument_group("input (one of --events or --broker)")
    src.add_argument("--events", metavar="FILE", help="events JSONL file (streamdet run --events)")
    src.add_argument("--follow", action="store_true",
                     help="keep reading the events file as it grows (default: stop at its end)")
    src.add_argument("--broker", metavar="HOST:PORT",
                     help="Kafka bootstrap server (default: STREAMDET_BROKER, unless --events)")
    src.add_argument("--prefix", default=env("STREAMDET_PREFIX", "streamdet"),
                     help="topic name prefix: reads PREFIX-events (default streamdet)")
    src.add_argument("--group", default=env("STREAMDET_ALERTS_GROUP"),
                     help="consumer group of the alerter (default PREFIX-alerts)")
    src.add_argument("--start", choices=("earliest", "latest"), default="earliest",
                     help="where a new group starts reading (default earliest: nothing missed)")
    src.add_argument("--state-file", metavar="PATH", default=env("STREAMDET_ALERTS_STATE"),
                     help="SQLite state: alerted seqs (and the file position); default "
                     "FILE.alerts-position, or GROUP.alerts-position in Kafka mode")
    src.add_argument("--idle", type=float, metavar="S",
                     help="stop once nothing new arrived for S seconds and all is delivered")
    src.add_argument("--include-rescore", action="store_true",
                     help="alert rescore events too (default: quilt events only)")
    src.add_argument("--max-pending", type=int, default=50000, metavar="N",
                     help="events read ahead of the committed position before reading pauses "
                     "(default 50000)")

    grp = p.add_argument_group("grouping and rate")
    grp.add_argument("--window", type=float, default=30.0, metavar="S",
                     help="seconds a domain's window stays open (default 30)")
    grp.add_argument("--max-pages", type=int, default=100, metavar="N",
                     help="pages per alert at most (default 100)")
    grp.add_argument("--max-per-minute", type=float, default=20.0, metavar="N",
                     help="alerts per minute at most (default 20; 0: no limit)")
    grp.add_argument("--burst", type=int, default=5, metavar="N",
                     help="alerts that may go at once before the rate applies (default 5)")

    out = p.add_argument_group("delivery")
    out.add_argument("--webhook", metavar="URL", default=env("STREAMDET_ALERTS_WEBHOOK"),
                     help="where alerts are POSTed (default: STREAMDET_ALERTS_WEBHOOK)")
    out.add_argument("--slack", action="store_true",
                     help="send a Slack-compatible body (text and blocks)")
    out.add_argument("--header", action="append", type=_header, default=[], metavar="'N: V'",
                     help="extra request header, e.g. 'Authorization: Bearer ...' (repeatable)")
    out.add_argument("--timeout", type=float, default=10.0, metavar="S",
                     help="seconds per request (default 10)")
    out.add_argument("--attempts", type=int, default=8, metavar="N",
                     help="attempts before an alert is dead-lettered (default 8; 0: forever)")
    out.add_argument("--backoff", type=float, default=1.0, metavar="S",
                     help="first retry delay, doubled each time, with jitter (default 1)")
    out.add_argument("--max-backoff", type=float, default=60.0, metavar="S",
                     help="longest retry delay (default 60)")
    out.add_argument("--dead-letter", metavar="PATH",
                     help="JSONL of alerts that could not be delivered "
                     "(default FILE.alerts-dead-letter.jsonl, or GROUP.alerts-dead-letter"
                     ".jsonl in Kafka mode)")
    out.add_argument("--drain", type=float, default=10.0, metavar="S",
                     help="on SIGTERM/SIGINT, seconds left to send queued alerts (default 10)")
    out.add_argument("--replay", metavar="PATH",
                     help="send the alerts of a dead-letter file again (with the delivery "
                     "options above), then stop: those delivered leave the file, the others "
                     "stay in it; no --events or --broker needed")
    p.set_defaults(func=cmd_alerts)
    return p


def config_of(args: argparse.Namespace) -> AlertsConfig:
    broker = args.broker
    if broker is None and args.events is None:
        broker = os.environ.get("STREAMDET_BROKER") or None
    return AlertsConfig(
        webhook=args.webhook or "", events=args.events, broker=broker, prefix=args.prefix,
        group=args.group, start=args.start, state_file=args.state_file, follow=args.follow,
        idle=args.idle, include_rescore=args.include_rescore, window=args.window,
        max_pages=args.max_pages, max_per_minute=args.max_per_minute, burst=args.burst,
        slack=args.slack, headers=dict(args.header), timeout=args.timeout,
        attempts=args.attempts, backoff=args.backoff, max_backoff=args.max_backoff,
        dead_letter=args.dead_letter, max_pending=args.max_pending, drain=args.drain)


def summary(cfg: AlertsConfig, s: Stats) -> str:
    parts = [f"{s.events} events read", f"{s.candidates} quilts"
             + (f" ({s.repeats} already alerted or pending)" if s.repeats else ""),
             f"{s.alerts} alerts delivered for {s.pages} pages"]
    if s.retries:
        parts.append(f"{s.retries} retries")
    if s.dead:
        parts.append(f"{s.dead} alerts ({s.dead_pages} pages) dead-lettered -> "
                     f"{cfg.dead_letter_path()}")
    if s.malformed:
        parts.append(f"{s.malformed} malformed events skipped")
    parts.append(f"position {s.position}")
    return "streamdet: alerts: " + "; ".join(parts)


def cmd_replay(cfg: AlertsConfig, path: str) -> int:
    async def main() -> tuple[int, int]:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        cfg.check_delivery()
        return await replay(cfg, path, stop)

    try:
        delivered, left = asyncio.run(main())
    except AlertsError as exc:
        print(f"streamdet: error: {exc}", file=sys.stderr)
        return 2
    print(f"streamdet: alerts: {delivered} dead-lettered alerts delivered, {left} left in "
          f"{path}", file=sys.stderr)
    return 0 if left == 0 else 1


def cmd_alerts(args: argparse.Namespace) -> int:
    cfg = config_of(args)
    logging.basicConfig(format="streamdet: %(levelname)s %(name)s: %(message)s",
                        level=logging.WARNING, stream=sys.stderr)
    logging.getLogger("streamdet").setLevel(logging.INFO)
    if args.replay:
        return cmd_replay(cfg, args.replay)

    async def main() -> Stats:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        alerter: list[Alerter] = []

        def on_signal() -> None:
            if stop.is_set() and alerter:  # a second signal: stop delivering now
                alerter[0].abort.set()
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, on_signal)
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
                pass
        return await run_alerts(cfg, stop, on_start=alerter.append)

    from .kafka import PipelineError

    try:
        stats = asyncio.run(main())
    except (AlertsError, PipelineError) as exc:
        print(f"streamdet: error: {exc}", file=sys.stderr)
        return 2
    except (OSError, sqlite3.Error) as exc:  # disk full, I/O error: one line
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        print(f"streamdet: error: {getattr(exc, 'strerror', None) or exc}{where}",
              file=sys.stderr)
        return 1
    except Exception as exc:
        if not type(exc).__module__.startswith("aiokafka"):
            raise
        print(f"streamdet: error: Kafka: {exc}", file=sys.stderr)
        return 1
    print(summary(cfg, stats), file=sys.stderr, flush=True)
    return 0
