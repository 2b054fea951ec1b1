"""The review desk on Kafka: a faust-streaming app whose agents fold the pipeline's topics
into tables, with the desk's web app served on its event loop (faust.contrib.asgi).

Agents (one consumer group, `--group`, default `streamdet-review`: instances share it):
- `fold_events`: PREFIX-events into the view (projection.apply): quilts, history,
  clusters, sites;
- `index_docs`: PREFIX-docs, each page's newest record's place (partition, offset), where
  the page view reads its text and grams (doc_reader.py, page_view.page_of_records);
- `fold_labels`: PREFIX-review-labels (one partition, made here), the judgements and draws
  (kafka_labels.py).

Every table is a GlobalTable: every instance holds all of it (its lists show every quilt,
whichever instance folded it), in memory, recovered from its changelog at start. As faust
advises for global tables shared by instances: one changelog partition and a recovery
buffer of one. One record per produce batch: the test broker's ListOffsets is wrong for
a batch of several records, and faust's recovery stops at it (docs/review.md).

The desk's threads never touch a faust table: each table change, this instance's or
another's, comes back on the changelog (`on_changelog_event`) and is copied under the
desk's lock into plain dicts (the view's, the labels'), which the desk reads."""

from __future__ import annotations

import asyncio
import functools
import socket
import struct
import sys
import threading
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import faust
from faust.contrib.asgi import AsgiService

from ..adapters.kafka import Topics, ensure_topic, pipeline_params, topic_names
from ..engine.messages import PageMsg
from ..engine.sorting import sorted_unique
from .doc_reader import KEEP, DocReader
from .faust_app import ReviewApp, credentials
from .kafka_labels import KafkaLabels, parse_record
from .page_view import page_of_records
from .projection import View, apply, event_of

VIEW_TABLES = ("quilts", "history", "clusters", "sites")
SEND_TIMEOUT_S = 30.0  # a label's write, acknowledged
PAGE_TIMEOUT_S = 30.0  # a page's records


class DeskUnavailable(RuntimeError):
    """The desk cannot start on this broker (no pipeline there)."""


@dataclass(frozen=True)
class KafkaSettings:
    broker: str
    prefix: str = "streamdet"
    group: str = "streamdet-review"
    datadir: str = "streamdet-review"

    @property
    def topics(self) -> Topics:
        return Topics.named(self.prefix)

    @property
    def labels_topic(self) -> str:
        return Topics.named(self.prefix).labels


class KafkaDesk:
    """The faust app, its tables' copies, and the desk's Source on Kafka (desk.Source: the
    view, pages, status) and Labels (`labels`), read from the web app's threads."""

    def __init__(self, settings: KafkaSettings, lock: threading.RLock) -> None:
        self.settings = settings
        self.lock = lock
        self.view = View()
        self.docs: dict[str, list] = {}
        self.folded = self.skipped = 0
        self.params: dict = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.labels = KafkaLabels(self._send_label, lock)
        self.reader = DocReader(settings.broker, settings.topics.docs)
        self.app = self._app()

    # -- the faust app ----------------------------------------------------------------------

    def _app(self) -> ReviewApp:
        s = self.settings
        app = ReviewApp(
            s.group, broker=f"kafka://{s.broker}", store="memory://", datadir=s.datadir,
            producer_max_batch_size=1, producer_acks=-1,
            broker_session_timeout=4.0, broker_heartbeat_interval=1.0,
            consumer_auto_offset_reset="earliest", topic_replication_factor=1,
            stream_wait_empty=False, web_enabled=True,
            broker_credentials=credentials(s.broker))
        tables = {name: self._table(app, name, self._copy_into(getattr(self.view, name)))
                  for name in VIEW_TABLES}
        tables["docs"] = self._table(app, "docs", self._copy_into(self.docs))
        tables["labels"] = self._table(app, "labels", self._labels_change)
        tables["draws"] = self._table(app, "draws", self._draws_change)
        raw = {"key_serializer": "raw", "value_serializer": "raw"}
        events = app.topic(s.topics.events, **raw)
        docs = app.topic(s.topics.docs, **raw)
        labels = app.topic(s.labels_topic, **raw)
        view = View(*(tables[name] for name in VIEW_TABLES))

        async def fold_events(stream) -> None:
            async for value in stream:
                ev = event_of(value)
                if ev is None:
                    self.skipped += 1
                else:  # a repeat or an older seq is read, and changes nothing
                    apply(view, ev)
                    self.folded += 1

        async def index_docs(stream) -> None:
            async for event in stream.events():
                msg = event.message
                url = (msg.key or b"").decode("utf-8", "replace")
                kept = tables["docs"].get(url)
                if url and (kept is None or kept[1] < msg.offset):
                    tables["docs"][url] = [msg.partition, msg.offset]

        async def fold_labels(stream) -> None:
            async for event in stream.events():
                found = parse_record(event.value, event.message.offset)
                if found is None:
                    self.skipped += 1
                elif found[0] == "label":
                    lab = found[1]
                    kept = [x for x in tables["labels"].get(lab.url) or [] if x["id"] != lab.id]
                    tables["labels"][lab.url] = sorted(
                        [*kept, asdict(lab)], key=lambda x: x["id"])
                else:
                    tables["draws"][found[1]["name"]] = found[1]

        app.agent(events, name="fold_events")(fold_events)
        app.agent(docs, name="index_docs")(index_docs)
        app.agent(labels, name="fold_labels")(fold_labels)
        return app

    @staticmethod
    def _table(app: faust.App, name: str, on_change: Callable[[object, object], None]):
        async def changed(event) -> None:
            on_change(event.key, event.value)
        return app.GlobalTable(name, partitions=1, recovery_buffer_size=1,
                               use_partitioner=True, on_changelog_event=changed)

    def _copy_into(self, copy: dict) -> Callable[[object, object], None]:
        def change(key, value) -> None:
            with self.lock:
                if value is None:
                    copy.pop(key, None)
                else:
                    copy[key] = value
        return change

    def _labels_change(self, key, value) -> None:
        with self.lock:
            self.labels.fold_table(key, value)

    def _draws_change(self, key, value) -> None:
        with self.lock:
            self.labels.fold_draw(key, value)

    async def open(self) -> None:
        """Ready the desk's reads (on the worker's loop, once the tables are recovered)."""
        await self.reader.start()
        self.loop = asyncio.get_running_loop()

    async def shut(self) -> None:
        self.loop = None
        await self.reader.stop()

    # -- before faust starts ----------------------------------------------------------------

    async def prepare(self) -> None:
        """Check the pipeline is there (its events and docs topics: a broker that makes
        topics on first use would make them with its own partition count), make the
        labels topic (one partition), and read the pipeline's parameters."""
        s = self.settings
        missing = {s.topics.events, s.topics.docs} - await topic_names(s.broker)
        if missing:
            raise DeskUnavailable(f"no streamdet pipeline with prefix {s.prefix!r} on "
                                  f"{s.broker}: topics {', '.join(sorted(missing))} missing "
                                  "(start a `streamdet worker` first)")
        await ensure_topic(s.broker, s.labels_topic, 1)
        params = await pipeline_params(s.broker, s.topics)
        self.params = params.to_dict() if params is not None else {}

    # -- the desk's reads and writes (from its threads) -------------------------------------

    def _on_loop(self, coro, timeout: float):
        if self.loop is None:
            coro.close()
            raise DeskUnavailable("the desk's agents have not started yet")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def _send_label(self, value: bytes) -> int:
        return self._on_loop(self._produce(value), SEND_TIMEOUT_S)

    async def _produce(self, value: bytes) -> int:
        meta = await self.app.producer.send_and_wait(
            self.settings.labels_topic, None, value, partition=0, timestamp=None,
            headers=None)
        return meta.offset

    def sites_now(self) -> None:
        """Not known here: the site totals are in the workers' site shard."""
        return None

    def holds(self, url: str) -> bool:
        """Whether the docs topic has a record of `url` (its newest version's place)."""
        with self.lock:
            return url in self.docs

    def page(self, url: str) -> dict | None:
        """The page view of `url` from its record and its sources' (None: the docs topic
        has no record of it)."""
        with self.lock:
            place = self.docs.get(url)
            event = self.view.quilts.get(url)
            cluster = self.view.clusters.get(url)
            sources = [s.get("url") for s in (event or {}).get("sources") or ()]
            places = [self.docs.get(u) for u in sources]
        if place is None:
            return None
        page, *found = self._on_loop(self._records([place, *places]), PAGE_TIMEOUT_S)
        if page is None:
            return None
        record = _decoded(page)
        if record is None:
            return None
        return page_of_records(event or self._no_event(), record, [_decoded(raw) for raw in found],
                               cluster)

    def _no_event(self) -> dict:
        """What stands for the verdict of a page no quilt event names: not quilted."""
        return {"quilted": False, "params": self.params, "sources": [],
                "patch_fraction": None, "n_grams": None, "n_patch_grams": None}

    async def _records(self, places: list[list | None]) -> list[bytes | None]:
        known = [(int(p[0]), int(p[1])) for p in places if p is not None]
        found = await self.reader.read(known)
        return [None if p is None else found[(int(p[0]), int(p[1]))] for p in places]

    def refresh(self) -> None:
        """Nothing to do: the agents keep the view."""

    def close(self) -> None:
        """Nothing to do: the faust worker stops the agents and the reader."""

    def status(self) -> dict:
        return {"mode": "kafka", "broker": self.settings.broker, "prefix": self.settings.prefix,
                "events": self.folded, "skipped": self.skipped, "pages": len(self.docs)}


class DeskServer(AsgiService):
    """The desk's web app on the faust worker's loop (started once the tables are
    recovered), on a socket made beforehand (its protocol named, so asyncio sets
    TCP_NODELAY; cli._listening), announced once serving."""

    def __init__(self, asgi_app, sock: socket.socket, desk: KafkaDesk,
                 announce: Callable[[], None]) -> None:
        host, port = sock.getsockname()[:2]
        super().__init__(asgi_app, host=host, port=port,
                         uvicorn_options={"log_level": "warning", "server_header": False})
        self.sock, self.desk, self.announce = sock, desk, announce

    async def on_start(self) -> None:
        await self.desk.open()
        self._server = self._create_server()
        self._serve_fut = self.add_future(self._server.serve(sockets=[self.sock]))
        while not self._server.started:
            if self._serve_fut.done():
                self._serve_fut.result()
                return
            await asyncio.sleep(0.05)
        self.announce()

    async def on_stop(self) -> None:
        await super().on_stop()
        await self.desk.shut()


def run(desk: KafkaDesk, asgi_app, sock: socket.socket, announce: Callable[[], None]) -> None:
    """Run the faust worker (agents, tables, the web app) until a signal stops it."""
    desk.app.web_server(DeskServer(asgi_app, sock, desk, announce))
    worker = faust.Worker(desk.app, loglevel="warning", quiet=True, redirect_stdouts=False,
                          stdout=sys.stderr)
    worker.execute_from_commandline()


@functools.lru_cache(maxsize=KEEP)
def _decoded(raw: bytes | None) -> PageMsg | None:
    """A docs record as a page, its grams sorted and unique as page_of_records wants them
    (None: none, or not one: a topic may hold anything). Kept for the records the reader
    keeps: a quilt's sources are decoded once for all its views and their other quilts'."""
    if not raw:
        return None
    try:
        msg = PageMsg.decode(raw)
    except (ValueError, KeyError, TypeError, IndexError, struct.error, zlib.error):
        return None
    return replace(msg, grams=sorted_unique(msg.grams))
