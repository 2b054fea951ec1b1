"""Where the embedded desk reads: its view from a run's events file (event_feed), or, with
no events file, from the state's verdicts once; a page from the state, opened read-only
beside a run that may still be writing it (reopened, at most every REOPEN seconds, once
new events say the run went on: a read-only RocksDB sees the state as it was when
opened)."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable

from ..reading.explain import holds
from ..reading.views import sites_of
from ..state.txn import Store
from .event_feed import EventFeed
from .page_view import page_view
from .projection import STATE_EVENT, View, apply

log = logging.getLogger(__name__)

REOPEN = 2.0  # seconds between reopenings of the state at most
POLL = 0.5  # seconds between polls of the events file at most
SITES_SHOWN = 50  # the state's sites the Sites page lists


class EmbeddedSource:
    """The view and the pages of a `streamdet run` state (and its events file)."""

    def __init__(self, open_state: Callable[[], Store], events: str | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._open_state = open_state
        self._clock = clock
        self._lock = threading.Lock()  # requests run in threads: one poll, one reopen
        self._store: Store | None = None
        self._opened_at = -REOPEN
        self._opened_events = -1
        self._polled_at = -POLL
        self.feed = EventFeed(events) if events else None
        self._static: View | None = None

    @property
    def view(self) -> View:
        if self.feed is not None:
            return self.feed.view
        if self._static is None:
            self._static = view_of_state(self._state())
        return self._static

    def refresh(self) -> None:
        """Fold the events appended since the last poll (at most every POLL seconds)."""
        if self.feed is None:
            return
        with self._lock:
            now = self._clock()
            if now - self._polled_at >= POLL:
                self._polled_at = now
                self.feed.poll()

    def page(self, url: str) -> dict | None:
        with self._lock:  # a reopening closes the state: never under a page being read
            return page_view(self._state(), url)

    def holds(self, url: str) -> bool:
        with self._lock:
            return holds(self._state(), url)

    def sites_now(self) -> list[dict]:
        """The state's hosts and domains of two pages or more, the first SITES_SHOWN as
        `streamdet sites` ranks them (monster candidates, then by mean pop): only those
        are decoded, however many sites the state holds."""
        with self._lock:
            return sites_of(self._state(), min_pages=2, top=SITES_SHOWN)

    @functools.cached_property
    def params(self) -> dict:
        """The parameters the state was built with (fixed for its life)."""
        with self._lock:
            return store_params(self._state())

    def status(self) -> dict:
        if self.feed is None:
            return {"mode": "embedded", "events": None}
        return {"mode": "embedded", "events": self.feed.events, "skipped": self.feed.skipped}

    def open(self) -> None:
        """Open the state now, so that a missing or foreign one is a clear error at start
        rather than at the first request."""
        with self._lock:
            self._state()

    def _state(self) -> Store:
        """The read-only state, reopened when it may be stale (called under the lock)."""
        events = self.feed.events if self.feed is not None else 0
        now = self._clock()
        stale = events != self._opened_events and now - self._opened_at >= REOPEN
        if self._store is None or stale:
            if self._store is not None:
                self._store.close()
            self._store = self._open_state()
            self._opened_at, self._opened_events = now, events
        return self._store

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None


def view_of_state(store: Store) -> View:
    """A view of a state's current verdicts, for a desk given no events file: one
    event per quilted page, named STATE_EVENT (no time, no cause, no history before it),
    with its version's seq and its arrival (the version's docno: docnos are given in
    arrival order), which the list sorts by, newest first."""
    from ..reading.views import cluster_rows, dump_rows

    view = View()
    params = store_params(store)
    txn = store.begin()
    for c in cluster_rows(store):
        for url in c["members"]:
            view.clusters[url] = {"seq": 0, "cluster": c["cluster"], "cluster_size": c["size"]}
    for row in dump_rows(store, clustered=False, pops=None, contains=None):
        if row.get("quilted"):
            docno, seq = txn.url_entry(row["url"])  # type: ignore[misc] - a live URL
            apply(view, {"event": STATE_EVENT, "url": row["url"], "seq": seq,
                         "arrival": docno, "quilted": True,
                         "patch_fraction": row.get("patch_fraction"),
                         "n_grams": row.get("n_grams"),
                         "n_patch_grams": row.get("n_patch_grams"),
                         "sources": row.get("sources") or [],
                         "params": params})
    log.info("review: %d quilted pages read from the state", len(view.quilts))
    return view


def store_params(store: Store) -> dict:
    from ..engine.params import Params

    return Params.from_fingerprint(store.meta("params")).to_dict()
