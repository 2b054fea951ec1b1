"""The alerter: everything between reading an event and committing past it.

Dedupe per (URL, seq), a window per domain, the delivery queue, the rate limit, retries,
dead letters and the commit order. Sources call offer() for each event (with its lane key
and its end position), tick() regularly, and commit through the `commit` function they
hand in; the delivery task sends one alert at a time, in queue order."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from ..adapters.outputs import utc_now
from ..adapters.rate_limiter import RateLimiter
from .bodies import json_body, slack_body
from .commit_order import Tracker
from .config import AlertsConfig
from .dead_letters import DeadLetterFile
from .delivery import Webhook, encode_json, request_headers
from .grouping import Group, domain_of, page_of
from .stats import Stats
from .timing import Clock, LoopClock

log = logging.getLogger("streamdet.alerts")

COMMIT_EVERY_S = 1.0  # position moved by events needing no alert: committed this often
MALFORMED_LOGGED = 10  # malformed events logged one by one; the rest are only counted

Commit = Callable[[dict[Any, int], list[tuple[str, int]]], Awaitable[None]]


def rate_limiter(cfg: AlertsConfig, clock: Clock) -> RateLimiter | None:
    """`--max-per-minute` with bursts of `--burst` (never more than a minute's worth),
    starting full; None for no limit."""
    if not cfg.max_per_minute:
        return None
    burst = min(cfg.burst, max(1, int(cfg.max_per_minute)))
    return RateLimiter(cfg.max_per_minute / 60.0, clock.now, burst=burst, full=True)


class Alerter:
    def __init__(self, cfg: AlertsConfig, alerted: dict[str, int], commit: Commit,
                 clock: Clock | None = None) -> None:
        self.cfg = cfg
        self.alerted = alerted  # url -> highest seq alerted (delivered or dead-lettered)
        self._commit_fn = commit
        self.clock = clock or LoopClock()
        self.stats = Stats()
        self.tracker = Tracker()
        self.kinds = {"quilt", "rescore"} if cfg.include_rescore else {"quilt"}
        self.windows: dict[str, Group] = {}
        self.queue: deque[Group] = deque()
        self.queued: dict[str, Group] = {}  # domain -> its last queued group (not in flight)
        self.pending: dict[str, tuple[int, Group]] = {}  # url -> (seq, group), not yet done
        self.to_record: list[tuple[str, int]] = []
        self.limiter = rate_limiter(cfg, self.clock)
        self.webhook = Webhook(cfg, self.clock)
        self.dead_letters = DeadLetterFile(cfg)
        self.work = asyncio.Event()  # the queue got something, or closing
        self.abort = asyncio.Event()  # stop delivering (a request in flight completes)
        self.closing = False
        self.commit_lock = asyncio.Lock()
        self.last_commit = self.clock.now()
        self.dirty = False
        self._malformed_logged = 0

    # -- reading ---------------------------------------------------------------------
    def offer(self, raw: bytes, key: Any, pos: int) -> None:
        """One event line / record value, ending its lane at `pos`."""
        self.stats.events += 1
        self.dirty = True
        ev = self._candidate(raw, key, pos)
        if ev is None:
            return
        url, seq = ev["url"], ev["seq"]
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
                self._put(g, ev, key, mark)
                return
        domain = domain_of(url)
        g = self.windows.get(domain)
        if g is None:
            g = self.windows[domain] = Group(domain, self.clock.now())
        self._put(g, ev, key, mark)
        if len(g.pages) >= self.cfg.max_pages:
            self._close(domain)

    def _candidate(self, raw: bytes, key: Any, pos: int) -> dict | None:
        """The event if it may need an alert; otherwise its position is done now."""
        try:
            ev = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            self._malformed(key, pos, "not JSON")
            return None
        if not isinstance(ev, dict):
            self._malformed(key, pos, "not a JSON object")
            return None
        if ev.get("event") not in self.kinds:
            self.tracker.add(key, pos, done=True)
            return None
        if not isinstance(ev.get("url"), str) or not ev["url"] or type(ev.get("seq")) is not int:
            self._malformed(key, pos, f"{ev.get('event')} event without url or integer seq")
            return None
        if not self._reaches(ev.get("spam_score")):
            self.stats.below += 1
            self.tracker.add(key, pos, done=True)
            return None
        return ev

    def _reaches(self, score: object) -> bool:
        """Whether an event's spam_score reaches --min-score (every event without it;
        with it, a missing or non-numeric score reaches nothing)."""
        floor = self.cfg.min_score
        return floor is None or (isinstance(score, int | float) and not isinstance(score, bool)
                                 and score >= floor)

    def _put(self, g: Group, ev: dict, key: Any, mark) -> None:
        url = ev["url"]
        g.pages[url] = page_of(ev)
        g.origin[url] = key
        g.marks.append(mark)
        self.pending[url] = (ev["seq"], g)

    def skip(self, key: Any, pos: int) -> None:
        """A position to pass with no event (a blank line)."""
        self.tracker.add(key, pos, done=True)
        self.dirty = True

    def _malformed(self, key: Any, pos: int, why: str) -> None:
        self.stats.malformed += 1
        self.tracker.add(key, pos, done=True)
        self._malformed_logged += 1
        if self._malformed_logged <= MALFORMED_LOGGED:
            where = f"byte {pos}" if key is None else f"{key.topic}[{key.partition}]@{pos - 1}"
            log.warning("skipping an event at %s: %s", where, why)

    def has_room(self) -> bool:
        return self.tracker.held < self.cfg.max_pending

    # -- windows ---------------------------------------------------------------------
    def tick(self) -> None:
        now = self.clock.now()
        for domain in [d for d, g in self.windows.items() if now - g.opened >= self.cfg.window]:
            self._close(domain)

    def flush(self) -> None:
        """Close every open window now (end of input, or stopping)."""
        for domain in list(self.windows):
            self._close(domain)

    def _close(self, domain: str) -> None:
        """A closed window is queued; if the domain's previous alert still waits (for the
        rate limit), the window joins it instead, up to --max-pages: under a flood a spam
        farm still makes few alerts."""
        g = self.windows.pop(domain)
        g.end = utc_now()
        q = self.queued.get(domain)
        if q is not None and not q.in_flight and len(q.pages) + len(g.pages) <= self.cfg.max_pages:
            q.absorb(g)
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
        for g in list(self.windows.values()) + [g for g in self.queue if not g.in_flight]:
            self._forget(g, keys)
        for domain in [d for d, g in self.windows.items() if not g.pages]:
            del self.windows[domain]
        for g in [g for g in self.queue if not g.in_flight and not g.pages]:
            self.queue.remove(g)
            if self.queued.get(g.domain) is g:
                del self.queued[g.domain]
        for key in keys:
            self.tracker.drop(key)

    def _forget(self, g: Group, keys: set) -> None:
        g.marks = [m for m in g.marks if m.key not in keys]
        for url in [u for u, k in g.origin.items() if k in keys]:
            del g.pages[url], g.origin[url]
            if self.pending.get(url, (0, None))[1] is g:
                del self.pending[url]

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
            # The first group keeps taking in its domain's windows while it waits here.
            wait = self.limiter.delay() if self.limiter else 0.0
            if wait > 0 and await self.clock.sleep(wait, self.abort):
                return
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
        """"sent", "dead" (dead-lettered), or None when stopped between attempts."""
        cfg = self.cfg
        body = (slack_body if cfg.slack else json_body)(g, cfg.window)
        data = encode_json(body)
        what = f"alert {g.domain} ({len(g.pages)} pages)"
        out = await self.webhook.deliver(data, request_headers(cfg, g.alert_id()), self.abort,
                                         what, self.stats)
        if out.delivered is None:
            return None
        if out.delivered:
            return "sent"
        log.error("%s dead-lettered to %s", what, self.dead_letters.path)
        await asyncio.to_thread(self.dead_letters.append, body, out.detail, out.attempts)
        return "dead"

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
        now = self.clock.now()
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

    async def close(self) -> None:
        self.dead_letters.close()
        await self.webhook.aclose()
