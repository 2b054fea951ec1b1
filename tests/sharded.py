"""The sharded engine (engine.shards) on in-memory topics, under a random schedule.

P doc shards and P gram shards exchange real message bytes through lists that stand for
Kafka partitions. The pages stage puts each page on its doc shard's partition and queues
its grams adds (engine.shards.page_adds, docno from that offset) per gram partition; a
seeded scheduler picks which shard runs next, or which queued adds go out, and how much of
each partition it takes, so partitions interleave arbitrarily and a page's adds may reach
a gram shard before or after the page reaches its doc shard. It can also:
- crash a shard after it sent its outputs but before it committed (at-least-once: the
  batch is processed again and its messages are sent twice);
- crash the pages stage (`dup_rate`): a random part of the queued adds is lost (each gram
  partition keeps what was sent in order before the crash) and the pages whose adds were
  lost are sent again, with the last few pages before them, as a new owner of a crawler
  partition sends again what its last owner sent after the last commit;
- commit the group's offsets late (`lag_rate`: a round's offsets are left for a later
  commit, as the worker coalesces them), so that the group's offsets trail the state;
- wipe a shard's state and rebuild it by replaying its partitions up to the group's
  committed offsets without sending anything (a worker that lost its disk, or a new
  owner), then go on from there, as the Kafka worker does: a gram shard then processes
  (and sends) again what it did after the commit, and a doc shard meets the deltas after
  its commit possibly before the pages they are about.

`sharded_pipeline(...)` has the harness's `records, params, batches -> rows` shape.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from streamdet.adapters.views import dump_rows
from streamdet.adapters.worker import EPOCH_SHIFT
from streamdet.engine.analysis import analyze
from streamdet.engine.messages import (
    GramsMsg,
    PageMsg,
    decode_doc_input,
    pack_outbox,
    unpack_outbox,
)
from streamdet.engine.params import Params
from streamdet.engine.records import BadRecord, page_from_object
from streamdet.engine.routing import docno_for, url_shard
from streamdet.engine.shards import DocShard, GramShard, last_shown, page_adds, shown_record
from streamdet.state.kv import MemoryKV
from streamdet.state.txn import Store

Rows = dict[str, dict]
GRAMS, EVENTS, SHOWN = 0, 1, 3  # outbox topic codes


@dataclass
class _Shard:
    store: Store
    pos: dict[str, int] = field(default_factory=dict)  # committed offsets per input
    epoch: int = 0  # of its owner: a rebuilt shard has a new one, as on the worker
    catch_up: tuple[int, int] = (0, 0)  # a new owner's catch-up: (docs, deltas) ends
    shown: dict[str, str] | None = None  # meanwhile, what consumers were last shown


class Simulation:
    def __init__(self, params: Params, shards: int, seed: int, crash_rate: float = 0.0,
                 wipe_rate: float = 0.0, lag_rate: float = 0.0) -> None:
        self.params, self.p = params, shards
        self.rng = random.Random(seed)
        self.crash_rate, self.wipe_rate, self.lag_rate = crash_rate, wipe_rate, lag_rate
        self.docs_topic: list[list[bytes]] = [[] for _ in range(shards)]
        self.grams_topic: list[list[bytes]] = [[] for _ in range(shards)]
        self.deltas_topic: list[list[bytes]] = [[] for _ in range(shards)]
        self.doc = [_Shard(Store(MemoryKV()), {"docs": 0, "deltas": 0}) for _ in range(shards)]
        self.gram = [_Shard(Store(MemoryKV()), {"grams": 0}) for _ in range(shards)]
        self.events: list[dict] = []
        self.published: list = []  # pages, in the order the pages stage sent them
        # adds queued per gram partition (index in `published`, bytes), not sent yet
        self.queued: list[list[tuple[int, bytes]]] = [[] for _ in range(shards)]
        self.sent = [{"docs": 0, "deltas": 0} for _ in range(shards)]  # the group's offsets
        self.gram_sent = [0] * shards  # the group's offsets on the grams partitions
        self.crashes = self.wipes = 0

    def publish(self, page) -> None:
        self.published.append(page)
        self._send_page(len(self.published) - 1)

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
        msg = PageMsg(page.url, page.server, page.grams, page.fetched_at)
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
        """One batch of a doc shard: process, commit state + offsets + outbox, then send
        the outbox (grams messages and events). A crash before the commit loses the batch
        (it runs again); a crash after it leaves the outbox to be sent on restart."""
        sh = self.doc[s]
        if self._send_outbox(s):
            return True
        d0, e0 = sh.pos["docs"], sh.pos["deltas"]
        d1, e1 = self._take(self.docs_topic[s], d0), self._take(self.deltas_topic[s], e0)
        if (d1, e1) == (d0, e0):
            return False
        pages = [(o, PageMsg.decode(self.docs_topic[s][o])) for o in range(d0, d1)]
        deltas = [decode_doc_input(b) for b in self.deltas_topic[s][e0:e1]]
        if d0 >= sh.catch_up[0] and e0 >= sh.catch_up[1]:
            sh.shown = None
        shown = dict(sh.shown) if sh.shown is not None else None  # a crash loses changes
        txn = sh.store.begin()
        out, events = DocShard(self.params, s, self.p).process(
            txn, pages, deltas, (sh.epoch << EPOCH_SHIFT) + d1 + e1, shown)
        if self.rng.random() < self.crash_rate:
            self.crashes += 1
            return True  # crashed before committing: the batch will run again
        outbox = [(GRAMS, g, raw) for g, raw in out]
        outbox += [(EVENTS, 0, json.dumps(ev).encode()) for ev in events]
        if (marker := shown_record(events)) is not None:
            outbox.append((SHOWN, s, marker))  # sent last: after the events, as the worker
        txn.put_meta("outbox", pack_outbox(outbox))
        txn.commit({"docs": d1, "deltas": e1})
        sh.pos = {"docs": d1, "deltas": e1}
        if shown is not None:
            sh.shown = shown
        if self.rng.random() < self.crash_rate:
            self.crashes += 1
            if self.rng.random() < self.wipe_rate:
                self.rebuild_doc(s)  # ... and the disk is lost with the outbox
            return True  # crashed before sending: the outbox goes on restart
        self._send_outbox(s)
        if self.rng.random() < self.wipe_rate:
            self.rebuild_doc(s)
        return True

    def _send_outbox(self, s: int) -> bool:
        """Send what the last commit left to send (again, after a crash); then it is
        cleared, as the worker does once the broker acknowledged it."""
        store = self.doc[s].store
        raw = store.kv.get("meta", b"outbox")
        for topic, part, value in unpack_outbox(raw):
            if topic == GRAMS:
                self.grams_topic[part].append(value)
            elif topic == SHOWN:
                self.deltas_topic[part].append(value)
            else:
                self.events.append(json.loads(value))
        if raw:
            store.kv.write([("meta", b"outbox", b"")])
        if self.rng.random() >= self.lag_rate:  # then the group's offsets are committed
            self.sent[s] = dict(self.doc[s].pos)
        return bool(raw)

    def step_gram(self, g: int) -> bool:
        sh = self.gram[g]
        a = sh.pos["grams"]
        b = self._take(self.grams_topic[g], a)
        if a == b:
            return False
        msgs = [GramsMsg.decode(raw) for raw in self.grams_topic[g][a:b]]
        txn = sh.store.begin()
        for s, raw in GramShard(self.params, g, self.p).process(txn, msgs):
            self.deltas_topic[s].append(raw)
        if self.rng.random() < self.crash_rate:
            self.crashes += 1
            return True
        txn.commit({"grams": b})
        sh.store.compact()
        sh.pos = {"grams": b}
        if self.rng.random() >= self.lag_rate:
            self.gram_sent[g] = b
        if self.rng.random() < self.wipe_rate:
            self.rebuild_gram(g)
        return True

    # -- losing a shard's disk ----------------------------------------------------------
    def rebuild_doc(self, s: int) -> None:
        """New empty state, then the shard's pages up to the group's committed offset
        (what was sent), then its deltas, in chunks, sending nothing (it all was sent)."""
        self.wipes += 1
        sh = self.doc[s]
        store = Store(MemoryKV())
        shard = DocShard(self.params, s, self.p)
        d1, e1 = self.sent[s]["docs"], self.sent[s]["deltas"]
        for a in range(0, d1, 3):
            txn = store.begin()
            pages = [(o, PageMsg.decode(self.docs_topic[s][o])) for o in range(a, min(a + 3, d1))]
            shard.process(txn, pages, [], 0)
            txn.commit({})
        for a in range(0, e1, 3):
            txn = store.begin()
            raws = self.deltas_topic[s][a : min(a + 3, e1)]
            shard.process(txn, [], [decode_doc_input(b) for b in raws], 0)
            txn.commit({})
        sh.store = store
        sh.pos = dict(self.sent[s])
        sh.epoch += 1
        # what the last owner may have done (and shown) is at most what is there now
        sh.catch_up = (len(self.docs_topic[s]), len(self.deltas_topic[s]))
        sh.shown = last_shown(self.deltas_topic[s])  # replayed from 0, read to the end

    def rebuild_gram(self, g: int) -> None:
        self.wipes += 1
        sh = self.gram[g]
        store = Store(MemoryKV())
        shard = GramShard(self.params, g, self.p)
        b = self.gram_sent[g]
        for a in range(0, b, 4):
            txn = store.begin()
            shard.process(txn, [GramsMsg.decode(r) for r in self.grams_topic[g][a:min(a + 4, b)]])
            txn.commit({})
            store.compact()
        sh.store = store
        sh.pos = {"grams": b}

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
        pairs = [(sh.pos["docs"], t) for sh, t in zip(self.doc, self.docs_topic, strict=True)]
        pairs += [(sh.pos["deltas"], t) for sh, t in zip(self.doc, self.deltas_topic,
                                                          strict=True)]
        pairs += [(sh.pos["grams"], t) for sh, t in zip(self.gram, self.grams_topic,
                                                         strict=True)]
        return all(pos == len(topic) for pos, topic in pairs) and not any(self.queued)

    def rows(self) -> Rows:
        out: Rows = {}
        for sh in self.doc:
            for row in dump_rows(sh.store):
                out[row["url"]] = row
        return out


def analysed(records: Sequence[dict], params: Params) -> list:
    pages = []
    for rec in records:
        try:
            pages.append(analyze(page_from_object(rec), params))
        except BadRecord:
            pass
    return pages


def sharded_pipeline(records: list[dict], params: Params, batches: Sequence[int], *,
                     shards: int = 3, seed: int = 0, crash_rate: float = 0.0,
                     wipe_rate: float = 0.0, lag_rate: float = 0.0, dup_rate: float = 0.0,
                     events: list[dict] | None = None, stats: dict | None = None) -> Rows:
    """Records published in `batches` (the stream cut as it arrives), shards running
    in between on a random schedule, then run until idle."""
    sim = Simulation(params, shards, seed, crash_rate, wipe_rate, lag_rate)
    pages = analysed(records, params)
    i = 0
    for b in batches:
        for page in pages[i : i + b]:
            sim.publish(page)
            if sim.rng.random() < dup_rate:
                sim.redeliver()
        i += b
        for _ in range(sim.rng.randint(0, 3 * shards)):
            k = sim.rng.randrange(3 * shards)
            sim.step(("doc", "gram", "pages")[k // shards], k % shards)
    for page in pages[i:]:
        sim.publish(page)
    sim.run_until_idle()
    if events is not None:
        events.extend(sim.events)
    if stats is not None:  # what the schedule did: tests check that it crashed and wiped
        stats.update(crashes=sim.crashes, wipes=sim.wipes)
    return sim.rows()
