"""The review desk's service, whatever serves it (web.py) and wherever its data come from
(embedded.EmbeddedSource and label_store.LabelStore; kafka_desk.KafkaDesk and its
KafkaLabels): lists, a page with its evidence and history, judgements, draws, the export
and the precision report.

A judgement is recorded durably before the desk answers, and the newest label of every
URL is kept in memory (by the label store), so that a list filtered by label state reads
no file. The web app calls the desk from several threads: a call holds the desk's lock
while it reads the view and the labels (the view must not change under a list being
read; the Kafka desk's copies change on its event loop under the same lock), and every
such call is short (tens of ms). What waits on I/O (a page's records, a label's write)
is done outside the lock: on Kafka it waits for the event loop, which may be waiting for
the lock."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from typing import Protocol

from .labels import Label, LabelError, page_kind
from .lists import QuiltFilter, cluster_rows, quilt_rows, site_rows
from .precision import precision_report
from .projection import View
from .sampling import draw


class Source(Protocol):
    """What the desk reads: its view of the events, and pages with their evidence."""

    @property
    def view(self) -> View: ...
    def refresh(self) -> None: ...
    def page(self, url: str) -> dict | None: ...
    def holds(self, url: str) -> bool: ...
    def sites_now(self) -> list[dict] | None: ...
    def status(self) -> dict: ...
    @property
    def params(self) -> dict: ...


class Labels(Protocol):
    """Where judgements and draws are kept (label_store.LabelStore when embedded)."""

    def add(self, label: Label) -> Label: ...
    def newest(self) -> dict[str, Label]: ...
    def fold(self, label: Label) -> None: ...
    def current(self) -> Iterator[Label]: ...
    def all(self) -> Iterator[Label]: ...
    def history(self, url: str) -> list[Label]: ...
    def add_draw(self, urls: list[str], seed: int, params: dict, at: str) -> str: ...
    def draw(self, name: str) -> dict | None: ...
    def draws(self) -> list[str]: ...


class DeskError(ValueError):
    """A request the desk cannot carry out (an unknown draw, a URL not in it)."""


def _locked(method: Callable) -> Callable:
    @functools.wraps(method)
    def call(self: Desk, *args, **kwargs):
        with self.lock:
            return method(self, *args, **kwargs)
    return call


class Desk:
    def __init__(self, source: Source, labels: Labels, clock: Callable[[], str],
                 lock: threading.RLock | None = None) -> None:
        self.source = source
        self.labels = labels
        self.clock = clock
        self.lock = lock or threading.RLock()
        self.latest = labels.newest()  # URL -> its newest judgement, kept by the store

    @_locked
    def quilts(self, keep: QuiltFilter, offset: int = 0, limit: int = 50) -> dict:
        self.source.refresh()
        view = self.source.view
        rows, total = quilt_rows(view.quilts, self.latest, view.clusters, keep, offset, limit)
        return {"rows": rows, "total": total, "offset": offset, "limit": limit}

    @_locked
    def sites(self) -> dict:
        """The sites and neighbourhoods `site` events told of (monster candidates, bad
        neighbourhoods), and, where the desk reads a state, its sites of two pages or
        more as they stand (`state`; None on Kafka), so that a farm shows before it is a
        monster candidate."""
        self.source.refresh()
        return site_rows(self.source.view.sites) | {"state": self.source.sites_now()}

    @_locked
    def clusters(self, limit: int = 50) -> list[dict]:
        self.source.refresh()
        return cluster_rows(self.source.view.clusters, limit)

    def page(self, url: str) -> dict | None:
        """A page as the state holds it (page_view), with its newest event, its event
        history, its cluster as the events told it, and its judgements (None: neither
        the state nor the events know the URL)."""
        page = self.source.page(url)  # I/O: outside the lock
        with self.lock:
            self.source.refresh()
            view = self.source.view
            event = view.quilts.get(url)
            if page is None and event is None:
                return None
            return {"url": url, "page": page, "event": event,
                    "history": list(view.history.get(url) or ()),
                    "cluster": view.clusters.get(url),
                    "labels": [_label_json(lab) for lab in self.labels.history(url)]}

    def judge(self, url: str, verdict: str, who: str, note: str = "", sample: str = ""
              ) -> Label:
        """Record a judgement of `url` (from draw `sample`, if given: the URL must be in
        it), with the parameters of the verdict it judged and the kind of page. The
        write (durable before this returns) is made outside the lock. A URL the desk
        holds no page of is refused: its label would count in the precision of pages
        nobody reviewed."""
        if not self.source.holds(url):  # I/O: outside the lock
            with self.lock:
                named = url in self.source.view.quilts
            if not named:
                raise DeskError(f"no page {url!r} in this state or its events: only a page "
                                "the desk holds can be labelled")
        with self.lock:
            if sample:
                drawn = self.labels.draw(sample)
                if drawn is None:
                    raise DeskError(f"no draw {sample!r}")
                if url not in drawn["urls"]:
                    raise DeskError(f"{url} is not in draw {sample}")
            label = Label(url, verdict, who, self.clock(), note, self._params(url),
                          page_kind(url), sample)
        label = self.labels.add(label)
        with self.lock:
            self.labels.fold(label)
        return label

    def _params(self, url: str) -> dict:
        """The parameters of the verdict judged: its event's, else the state's."""
        event = self.source.view.quilts.get(url)
        return (event or {}).get("params") or self.source.params

    @_locked
    def export(self) -> list[str]:
        """Every judgement ever recorded, oldest first, one JSON line each."""
        return [lab.to_json() + "\n" for lab in self.labels.all()]

    @_locked
    def draws(self) -> list[dict]:
        """The kept draws, newest first."""
        return [d for d in map(self.labels.draw, self.labels.draws()) if d]

    @_locked
    def status(self) -> dict:
        return {**self.source.status(), "quilts": len(self.source.view.quilts),
                "labels": len(self.latest)}

    @_locked
    def precision(self, sampled: bool = True) -> dict:
        return precision_report(self.latest.values(), sampled)

    def sample(self, n: int, seed: int) -> dict:
        """Draw n of the pages quilted now, uniformly (sampling.draw), and keep the draw."""
        with self.lock:
            self.source.refresh()
            quilted = [url for url, ev in self.source.view.quilts.items()
                       if ev.get("event") != "unquilt"]
            if not quilted:
                raise DeskError("no quilted page to draw from yet")
            urls = draw(quilted, n, seed)
            params = self.source.params
        name = self.labels.add_draw(urls, seed, params, self.clock())
        with self.lock:
            return self.labels.draw(name) or {}

    @_locked
    def draw_rows(self, name: str) -> dict:
        """A draw's pages with their newest labels (judged or not yet)."""
        drawn = self.labels.draw(name)
        if drawn is None:
            raise DeskError(f"no draw {name!r}")
        drawn["rows"] = [{"url": u, "label": _label_json(self.latest[u])
                          if u in self.latest and self.latest[u].sample == name else None}
                         for u in drawn["urls"]]
        return drawn


def _label_json(lab: Label) -> dict:
    return {"verdict": lab.verdict, "who": lab.who, "at": lab.at, "note": lab.note,
            "sample": lab.sample, "id": lab.id}


__all__ = ["Desk", "DeskError", "LabelError", "QuiltFilter"]
