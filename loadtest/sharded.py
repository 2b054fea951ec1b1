"""The sharded engine (engine.shards) on in-memory topics, under a random schedule.

P doc shards and P gram shards exchange real message bytes through lists that stand for
Kafka partitions. The pages stage puts each page on its doc shard's partition and queues
its grams adds (engine.shards.page_adds, docno from that offset) per gram partition; a
seeded scheduler picks which shard runs next, or which queued adds go out, and how much of
each partition it takes, so partitions interleave arbitrarily and a page's adds may reach
a gram shard before or after the page reaches its doc shard.

Each shard takes the Kafka worker's own step (engine.shard_step: process, commit state,
offsets and outbox in one write, send, clear the outbox) and opens as the worker's do,
by the worker's own opening (engine.shard_opening, on this module's `_ShardLog`): at its
first step, and at its next step after a crash or a lost disk; only the sending, the
epochs and the partitions' records are done here. The schedule can also:
- crash a shard before its commit (the batch is processed again), between its commit and
  its sends (the outbox goes on restart), or amid its sends (the records sent so far are
  sent twice: at-least-once); it restarts as the worker does: its committed state
  reopened under a new epoch, its outboxes sent again, oldest first, and if it was
  catching up, what consumers were shown read again from its deltas partition;
- crash the pages stage (`dup_rate`): a random part of the queued adds is lost (each gram
  partition keeps what was sent in order before the crash) and the pages whose adds were
  lost are sent again, with the last few pages before them, as a new owner of a crawler
  partition sends again what its last owner sent after the last commit;
- commit the group's offsets late (`lag_rate`: a round's offsets are left for a later
  commit, as the worker coalesces them), so that the group's offsets trail the state;
- wipe a shard's state, outboxes included, after any step or crash; its opening
  rebuilds it by replaying its partitions up to the group's committed offsets without
  sending anything (a worker that lost its disk, or a new owner), then it goes on from
  there, as the Kafka worker does: a gram shard then processes (and sends) again what it
  did after the commit, and a doc shard takes over: it sends again the events recorded
  after the commit, compares with what consumers were shown up to where its partitions
  end, and meets the deltas after its commit possibly before the pages they are about.

The tests' exactness checks run it (tests/sharded.py: `sharded_pipeline`, in the
harness's `records, params, batches -> rows` shape) and so does loadtest/profile_shards.py,
on RocksDB states.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import AsyncGenerator, Coroutine, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from streamdet.engine.analysis import analyze
from streamdet.engine.messages import GramsMsg, PageMsg, decode_doc_input
from streamdet.engine.pair_index import decode_index
from streamdet.engine.params import Params
from streamdet.engine.records import BadRecord, page_from_object
from streamdet.engine.routing import docno_for, url_shard
from streamdet.engine.shard_opening import open_shard
from streamdet.engine.shard_step import (
    DELTAS_OUT,
    EVENTS_OUT,
    GRAMS_OUT,
    SHOWN_OUT,
    Outbox,
    Record,
    ShardState,
    Step,
    process_docs,
    process_grams,
    resume_catch_up,
    take_over,
)
from streamdet.engine.shards import DocShard, GramShard, label_forwards, page_adds
from streamdet.reading.phrases import phrase_rows
from streamdet.reading.views import (
    contains_counts,
    dump_rows,
    live_docnos,
    partial_rows,
    pop_counts,
    text_reader,
)
from streamdet.state.kv import MemoryKV
from streamdet.state.txn import Store

Rows = dict[str, dict]
REPLAY_CHUNK = {"doc": 3, "gram": 4}  # records per transaction while rebuilding


def subject(ev: Mapping) -> str:
    """What an event is about: its URL, or a `site` event's level and site (SPEC §8)."""
    if ev["event"] == "site":
        return f"{ev['level']} {ev.get('site') or ev.get('neighbourhood')}"
    return ev["url"]


@dataclass
class _Shard:
    kind: str  # "doc" or "gram"
    index: int
    state: ShardState
    group: dict[str, int]  # the group's committed offsets of its input partitions
    claimed: int = 0  # the newest ownership epoch recorded for it (the meta topic)
    down: bool = True  # crashed, or its disk lost: opened again at its next step


class _Crashed(Exception):
    """The shard crashed amid its opening's sends: the opening ends there."""


class _ShardLog:
    """engine.shard_opening's ShardLog on the simulation's lists, for one shard: the
    opening the worker runs, run here on a restart after a crash and on a lost disk."""

    def __init__(self, sim: Simulation, sh: _Shard) -> None:
        self.sim, self.sh = sim, sh
        self.sent = False  # whether the opening sent anything (it then takes the step)

    async def open(self, kind: str, index: int) -> ShardState:
        return self.sh.state  # reopened by the crash (or empty: a lost disk)

    async def wipe(self, state: ShardState) -> ShardState:
        # another owner's history: not here, where each shard has one owner at a time
        self.sh.state = ShardState(Store(MemoryKV()))
        return self.sh.state

    async def claim(self, kind: str, index: int) -> tuple[int, int]:
        newest = self.sh.claimed
        self.sh.claimed += 1
        return newest, self.sh.claimed

    async def committed(self, name: str, index: int) -> int:
        return self.sh.group[name]

    async def chunks(self, name: str, index: int, start: int, end: int
                     ) -> AsyncGenerator[list[tuple[int, bytes]], None]:
        size, records = REPLAY_CHUNK[self.sh.kind], self.sim.topic(name)[index]
        for a in range(start, end, size):
            yield [(o, records[o]) for o in range(a, min(a + size, end))]

    async def ends(self, index: int, reached: dict[str, int]) -> dict[str, int]:
        return {name: len(self.sim.topic(name)[index]) for name in reached}

    async def send(self, state: ShardState, outboxes: list[Outbox]) -> None:
        """The simulation's sending, crashes included: a crash ends the opening."""
        self.sent = True
        self.sim.resent[self.sh.kind] += len(outboxes)
        self.sim._send(self.sh, outboxes)
        if self.sh.down:
            raise _Crashed

    async def run(self, fn, *args):
        """A direct call; a take-over's events and a catch-up read again are counted."""
        result = fn(*args)
        if fn is take_over and result is not None:
            delivered = {(subject(ev), ev["seq"]) for ev in self.sim.events}
            again = [json.loads(raw) for _c, _p, raw in result.events()]
            self.sim.recovered += sum((subject(ev), ev["seq"]) not in delivered for ev in again)
        elif fn is resume_catch_up:
            self.sim.resumed += 1
        return result

    def cut(self) -> bool:
        return False  # no rebalances here

    def topic(self, name: str) -> str:
        return name

    def replayed(self, name: str, index: int, records: int) -> None:
        pass


def _done(coro: Coroutine):
    """Run a coroutine that never waits (the simulation's ShardLog answers at once)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("an opening waited on the simulation")


class Simulation:
    def __init__(self, params: Params, shards: int, seed: int, crash_rate: float = 0.0,
                 wipe_rate: float = 0.0, lag_rate: float = 0.0) -> None:
        self.params, self.p = params, shards
        self.rng = random.Random(seed)
        self.crash_rate, self.wipe_rate, self.lag_rate = crash_rate, wipe_rate, lag_rate
        self.docs_topic: list[list[bytes]] = [[] for _ in range(shards)]
        self.grams_topic: list[list[bytes]] = [[] for _ in range(shards)]
        self.deltas_topic: list[list[bytes]] = [[] for _ in range(shards)]
        self.doc = [_Shard("doc", s, ShardState(Store(MemoryKV())), {"docs": 0, "deltas": 0})
                    for s in range(shards)]
        self.gram = [_Shard("gram", g, ShardState(Store(MemoryKV())), {"grams": 0})
                     for g in range(shards)]
        self.events: list[dict] = []
        self.published: list = []  # pages, in the order the pages stage sent them
        self.spam_labels: list[tuple[int, str, str]] = []  # the labels topic (SPEC §10)
        # adds queued per gram partition (index in `published`, bytes), not sent yet
        self.queued: list[list[tuple[int, bytes]]] = [[] for _ in range(shards)]
        self.crashes = self.wipes = 0
        # events a new owner sent again that consumers did not have: their owner died
        # between the record of what they show and the events
        self.recovered = 0
        self.resumed = 0  # restarts while catching up that read what was shown again
        self.resent: Counter[str] = Counter()  # outboxes sent again after a crash, per kind
        self.commits = 0  # the events' `at`: a commit's number, so only resends repeat one

    def topic(self, name: str) -> list[list[bytes]]:
        return {"docs": self.docs_topic, "deltas": self.deltas_topic,
                "grams": self.grams_topic}[name]

    def publish(self, page) -> None:
        self.published.append(page)
        self._send_page(len(self.published) - 1)

    def label(self, keys, cause: str) -> None:
        """`streamdet label-chunks --broker`: chunk keys to the gram shards owning them."""
        owner = keys % np.uint64(self.p)
        for g in range(self.p):
            self.grams_topic[g].append(GramsMsg("label", 0, keys[owner == g], url=cause).encode())

    def spam_label(self, url: str, verdict: str) -> None:
        """A label on the labels topic (its id: its offset + 1), forwarded by the labels
        stage to every doc shard with where its docs partition ends now
        (engine.shards.label_forwards)."""
        self.spam_labels.append((len(self.spam_labels) + 1, url, verdict))
        self.forward_labels(self.spam_labels[-1:])

    def forward_labels(self, labels: list[tuple[int, str, str]]) -> None:
        """The labels stage sends labels to every doc shard (again, after a crash of the
        stage before its commit: at-least-once)."""
        for s, raw in label_forwards(labels, [len(t) for t in self.docs_topic]):
            self.deltas_topic[s].append(raw)

    def redeliver(self) -> None:
        """The pages stage crashes: each gram partition's queue keeps a random prefix
        (sent before the crash), the rest is lost; the pages that lost adds are sent
        again, with the last few pages (at-least-once), in their order."""
        lost: set[int] = set()
        for q in self.queued:
            cut = self.rng.randint(0, len(q))
            lost.update(i for i, _ in q[cut:])
            del q[cut:]
        n = len(self.published)
        again = lost | set(range(max(0, n - self.rng.randint(1, 3)), n))
        for i in sorted(again):
            self._send_page(i)

    def _send_page(self, i: int) -> None:
        page = self.published[i]
        msg = PageMsg(page.url, page.server, page.grams, page.fetched_at, page.text,
                      page.sentences, page.sketch, page.chunks)
        s = url_shard(page.url, self.p)
        docno = docno_for(len(self.docs_topic[s]), s, self.p)
        self.docs_topic[s].append(msg.encode())
        for g, raw in page_adds(msg, docno, self.p):
            self.queued[g].append((i, raw))

    def step_pages(self, g: int) -> bool:
        """Some of the adds queued for gram partition g go out, in order."""
        q = self.queued[g]
        n = self.rng.randint(1, len(q)) if q else 0
        self.grams_topic[g].extend(raw for _, raw in q[:n])
        del q[:n]
        return n > 0

    # -- one step of one shard ----------------------------------------------------------
    def _take(self, topic: list[bytes], start: int) -> int:
        left = len(topic) - start
        return start + (self.rng.randint(0, left) if left else 0)

    def step_doc(self, s: int) -> bool:
        """One batch of a doc shard: its pages, then its deltas (engine.shard_step)."""
        sh = self.doc[s]
        if sh.down and self._open(sh):
            return True
        d0, e0 = sh.state.offset("docs"), sh.state.offset("deltas")
        d1, e1 = self._take(self.docs_topic[s], d0), self._take(self.deltas_topic[s], e0)
        if (d1, e1) == (d0, e0):
            return False
        pages = [(o, PageMsg.decode(self.docs_topic[s][o])) for o in range(d0, d1)]
        deltas = [decode_doc_input(b) for b in self.deltas_topic[s][e0:e1]]
        role = DocShard(self.params, s, self.p)
        self._finish(sh, process_docs(sh.state, role, pages, deltas, {"docs": d1, "deltas": e1}))
        return True

    def step_gram(self, g: int) -> bool:
        """One batch of a gram shard: its grams messages (engine.shard_step)."""
        sh = self.gram[g]
        if sh.down and self._open(sh):
            return True
        a = sh.state.offset("grams")
        b = self._take(self.grams_topic[g], a)
        if a == b:
            return False
        msgs = [GramsMsg.decode(raw) for raw in self.grams_topic[g][a:b]]
        self._finish(sh, process_grams(sh.state, GramShard(self.params, g, self.p), msgs, b))
        return True

    def _open(self, sh: _Shard) -> bool:
        """Open the shard as the worker does (engine.shard_opening): a new epoch, its left
        outboxes sent, its partitions replayed up to the group's committed offsets, then
        a doc shard takes over or reads again what was shown. Whether it sent anything:
        the opening then takes the shard's step."""
        sh.down = False
        shard_log = _ShardLog(self, sh)
        try:
            _done(open_shard(shard_log, sh.kind, sh.index, self.params, self.p))
        except _Crashed:  # down again: it opens at its next step
            pass
        return shard_log.sent

    def _crash(self, sh: _Shard) -> bool:
        """Whether the shard crashes here; it then restarts at its next step, as the
        worker does, on its committed state, with nothing of its memory."""
        if self.rng.random() >= self.crash_rate:
            return False
        self.crashes += 1
        sh.state = ShardState(Store(sh.state.store.kv))
        sh.down = True
        return True

    def _finish(self, sh: _Shard, step: Step) -> None:
        """Commit a processed batch with its outbox, then send it, as the worker does; a
        crash before the commit drops the batch (it runs again), one after it leaves the
        outbox for the restart. Then the shard's disk may be lost, outbox and all."""
        if not self._crash(sh):
            self.commits += 1
            outbox = step.commit(at=str(self.commits))
            if not self._crash(sh):  # between the commit and the sends
                self._send(sh, [outbox] if outbox is not None else [])
        if self.rng.random() < self.wipe_rate:
            self.wipe(sh)

    def _send(self, sh: _Shard, outboxes: list[Outbox]) -> None:
        """Send each outbox (the events once the rest is out) and clear it; a crash amid
        the records leaves it, and those after it, to be sent again. Once all are out,
        the group's offsets are committed, or left for later."""
        for outbox in outboxes:
            records = outbox.first() + outbox.events()
            if self._crash(sh):
                for record in records[: self.rng.randint(0, len(records))]:
                    self._deliver(record)
                return
            for record in records:
                self._deliver(record)
            sh.state.clear(outbox)
        if self.rng.random() >= self.lag_rate:
            sh.group = {name: sh.state.offset(name) for name in sh.group}

    def _deliver(self, record: Record) -> None:
        code, part, value = record
        if code == EVENTS_OUT:
            self.events.append(json.loads(value))
            return
        topic = {GRAMS_OUT: self.grams_topic, DELTAS_OUT: self.deltas_topic,
                 SHOWN_OUT: self.deltas_topic}[code]
        topic[part].append(value)

    # -- losing a shard's disk ----------------------------------------------------------
    def wipe(self, sh: _Shard) -> None:
        """The shard's state is lost, outboxes included: its next step opens an empty one
        (a worker that lost its disk, or a new owner), which replays the partitions up to
        the group's committed offsets, sending nothing (whoever committed them sent it);
        a doc shard then takes over (engine.shard_opening)."""
        self.wipes += 1
        sh.state = ShardState(Store(MemoryKV()))
        sh.down = True

    def step(self, kind: str, i: int) -> bool:
        return {"doc": self.step_doc, "gram": self.step_gram, "pages": self.step_pages}[kind](i)

    def run_until_idle(self) -> None:
        steps = [(kind, i) for kind in ("doc", "gram", "pages") for i in range(self.p)]
        while True:
            self.rng.shuffle(steps)
            progressed = False
            for kind, i in steps:
                progressed |= self.step(kind, i)
            if not progressed and self.idle():
                return

    def idle(self) -> bool:
        pairs = [(sh.state.offset(name), topics[sh.index])
                 for shards, name, topics in ((self.doc, "docs", self.docs_topic),
                                              (self.doc, "deltas", self.deltas_topic),
                                              (self.gram, "grams", self.grams_topic))
                 for sh in shards]
        shards = [*self.doc, *self.gram]
        outboxes = any(sh.state.outboxes() for sh in shards)
        return (all(pos == len(topic) for pos, topic in pairs) and not any(self.queued)
                and not outboxes and not any(sh.down for sh in shards))

    def rows(self) -> Rows:
        out: Rows = {}
        pops = pop_counts(sh.state.store for sh in self.gram)
        contains = contains_counts([sh.state.store for sh in self.gram])
        for sh in self.doc:
            for row in dump_rows(sh.state.store, self.params, self.gram[0].state.store,
                                 pops=pops, contains=contains):
                out[row["url"]] = row
        return out

    def phrase_rows(self, top: int = 1 << 30) -> list[dict]:
        """`phrases --top` over the gram shards, texts from the doc shards (SPEC §8)."""
        docs = [sh.state.store for sh in self.doc]
        return phrase_rows([sh.state.store for sh in self.gram], text_reader(docs),
                           lambda: live_docnos(docs), top, self.params)

    def pair_copies(self) -> list[dict[str, list[str]]]:
        """Each doc shard's copy of every page's partners from both sides
        (engine.pair_index): what its spam scores read of pairs (engine.score_replica)."""
        return [{key[1:].decode("utf-8"): decode_index(raw)
                 for key, raw in sh.state.store.kv.items_between("partials", b"r", b"s")}
                for sh in self.doc]

    def partial_rows(self) -> list[dict]:
        """dump --partials over every doc shard (SPEC §7)."""
        rows = [r for sh in self.doc for r in partial_rows(sh.state.store, self.params)]
        return sorted(rows, key=lambda r: (r["url"].encode("utf-8"), r["other"].encode("utf-8")))


def analysed(records: Sequence[dict], params: Params) -> list:
    pages = []
    for rec in records:
        try:
            pages.append(analyze(page_from_object(rec), params))
        except BadRecord:
            pass
    return pages
