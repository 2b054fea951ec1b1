"""The two roles as separate shards, for a pipeline of P doc shards and P gram shards.

The embedded engine (core.Engine) runs both roles on one state in one step. Here each
shard has a state of its own and they talk through messages (engine.messages):

    page -> DocShard: URL table, docno, document, its grams ----GramsMsg---> GramShard
    GramShard: postings (postings.add_document / withdraw_document) --DeltasMsg--> DocShard
    DocShard: apply deltas (docs.DocRole), re-score once per batch -> events

Both are pure: a caller (the Kafka worker, or a test) feeds them batches in each input
partition's order, writes their messages, and commits the transaction with its offsets.
What makes the result exact whatever the interleaving of partitions:

- Per gram, all postings changes happen in one gram shard, in the order of its input, and
  a document's state changes per gram in that order too (deltas of one gram shard reach a
  doc shard in order); a document's patch set and masks depend only on the last change
  per gram, so deltas of different grams commute.
- A document exists before any delta about it: its doc shard creates it before sending
  its grams, and deltas come only after.
- A replaced version is withdrawn with *all* of its grams (kept by its doc shard), not
  just the patch grams its doc shard knows of: deltas still in flight may have made more
  of them patch grams, and the gram shard's postings are the truth.
- Doc shards apply a batch's pages before its deltas; replaying a doc shard's two
  partitions that way rebuilds the same state (a delta for a document that a later page
  replaced is dropped either way).
- A delta about a page the doc shard has not applied yet is *held* in the state and
  applied when the page arrives, before any later delta. In one owner's history that
  cannot happen (the deltas come from the page's grams, sent after the page was applied),
  but a new owner resumes from the group's committed offsets, which trail what the last
  owner applied: the deltas about a page it had applied after that commit are already on
  the deltas partition, and the new owner may read them before the page. Dropping them
  would lose them for good (the page's grams, sent again, are known to the gram shards,
  which do not answer twice). Docnos grow with the docs offset, so "not applied yet" is
  simply a docno above the newest version applied.
- A new owner that redoes what the last one did after the group's last commit announces
  every document it touches until it has caught up (`announce`): the last owner's events
  of those rounds may show states it never passes through.
- Event `seq` is at least the `seq` the caller passes for the batch (the worker passes its
  ownership epoch << 40 plus the consumed-offset sum) and above the URL's last: it only
  grows, also across a rebuild and a change of owner, so events never regress.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..state.schema import Cover, DocState
from .deltas import ADD, DROP, GAIN, GAIN_FROM, Delta, arrival_stats
from .docs import Dirty, DocRole, Touch
from .messages import DeltasMsg, GramsMsg, PageMsg
from .params import Params
from .postings import add_document, plan_batch, withdraw_document
from .rescoring import rescore
from .routing import docno_for, docno_shard, split_grams


class DocShard:
    """URLs, documents and covers of the pages whose URL hashes to this shard."""

    def __init__(self, params: Params, shard: int, shards: int) -> None:
        self.params = params
        self.shard = shard
        self.shards = shards
        self.docs = DocRole(params)
        self.cause_times: dict[str, float] = {}  # of the last batch: cause URL -> fetched_at
        self.documents_added = 0  # of the last batch: URLs seen for the first time
        self.held = 0  # of the last batch: deltas held for pages not applied yet

    def process(self, txn, pages: Iterable[tuple[int, PageMsg]], deltas: Iterable[DeltasMsg],
                seq: int, announce: bool = False) -> tuple[list[tuple[int, bytes]], list[dict]]:
        """Apply pages (with their input offsets), then deltas; re-score what changed
        (with `announce`, everything touched gets an event: see rescoring.rescore).

        Returns (gram shard, GramsMsg bytes) to send, and the events."""
        dirty: Dirty = {}
        before: dict[int, Cover] = {}
        out: list[tuple[int, bytes]] = []
        self.cause_times = {}
        self.documents_added = self.held = 0
        for offset, page in pages:
            out.extend(self._arrive(txn, offset, page, dirty, before))
            if page.fetched_at is not None:
                self.cause_times[page.url] = page.fetched_at
        newest = txn.newest_version()
        self.docs.apply(txn, self._release(txn, newest), dirty)
        for msg in deltas:
            self.cause_times.update(msg.times)
            for docno, (server, url) in msg.names.items():
                if txn.name(docno) is None:
                    txn.put_name(docno, server, url)
            ready = msg.deltas
            if any(d.target > newest for d in ready):
                ready = [d for d in ready if d.target <= newest]
                early = [d for d in msg.deltas if d.target > newest]
                self._hold(txn, early)
                self.held += len(early)
            self.docs.apply(txn, ready, dirty)
        # seq: the offsets consumed so far only grow, on this worker or the next owner
        return out, rescore(self.docs, txn, dirty, before, lambda last: max(last + 1, seq),
                            announce)

    @staticmethod
    def _hold(txn, deltas: list[Delta]) -> None:
        """Keep deltas about pages not applied yet, after any held before them."""
        per: dict[int, list[Delta]] = {}
        for d in deltas:
            per.setdefault(d.target, []).append(d)
        for target, ds in per.items():
            raw = txn.early_deltas(target)
            held = DeltasMsg.decode(raw).deltas if raw else []
            txn.put_early_deltas(target, DeltasMsg(held + ds).encode())

    @staticmethod
    def _release(txn, newest: int) -> list[Delta]:
        """The held deltas of the pages applied now, oldest first (each target's own
        order is all that matters: deltas of different documents commute)."""
        out: list[Delta] = []
        for target, raw in txn.early_up_to(newest):
            out.extend(DeltasMsg.decode(raw).deltas)
            txn.put_early_deltas(target, None)
        return out

    def _arrive(self, txn, offset: int, page: PageMsg, dirty: Dirty,
                before: dict[int, Cover]) -> list[tuple[int, bytes]]:
        docno = docno_for(offset, self.shard, self.shards)
        entry = txn.url_entry(page.url)
        out = []
        seq, prev = 0, Cover()
        if entry is not None:
            old, seq = entry
            if old == docno:  # this very record, applied before a crash: nothing to do
                return []
            prev = before.pop(old, None) or txn.doc(old).result
            old_grams = txn.doc_grams(old)
            for g, part in enumerate(split_grams(old_grams, self.shards)):
                out.append((g, GramsMsg("withdraw", old, part, "", page.url,
                                        page.fetched_at).encode()))
            txn.put_doc(old, None)
            txn.put_doc_grams(old, None)
            dirty.pop(old, None)
        else:
            self.documents_added += 1
        before[docno] = prev
        txn.put_name(docno, page.server, page.url)
        txn.put_doc(docno, DocState(n_grams=len(page.grams)))
        txn.put_doc_grams(docno, page.grams)
        txn.put_url(page.url, docno, seq)
        dirty[docno] = Touch(page.url, None)
        for g, part in enumerate(split_grams(page.grams, self.shards)):
            out.append((g, GramsMsg("add", docno, part, page.server, page.url,
                                    page.fetched_at).encode()))
        return out



class GramShard:
    """Postings of the grams that hash to this shard."""

    def __init__(self, params: Params, shard: int, shards: int) -> None:
        self.params = params
        self.shard = shard
        self.shards = shards
        self.fanout: list[int] = []  # of the last batch, per add: earlier documents changed
        self.went_common = 0  # of the last batch: grams that became common

    def process(self, txn, msgs: list[GramsMsg]) -> list[tuple[int, bytes]]:
        """Apply grams messages in order; returns (doc shard, DeltasMsg bytes) to send."""
        adds, seen = [], set()
        for m in msgs:
            if m.kind == "add" and m.docno not in seen and self._new(txn, m):
                seen.add(m.docno)
                adds.append(m)
        plans = iter(plan_batch(txn, [m.grams for m in adds]))
        deltas: list[Delta] = []
        todo = {id(m) for m in adds}
        times: dict[str, float] = {}
        self.fanout, self.went_common = [], 0
        for m in msgs:
            if m.fetched_at is not None:
                times[m.url] = m.fetched_at
            if m.kind == "add":
                if id(m) not in todo:
                    continue  # sent again (after a crash upstream): already applied
                txn.put_name(m.docno, m.server, m.url)
                added = add_document(txn, m.docno, m.grams, next(plans), self.params.m, m.url)
                self._count(m.docno, added)
                deltas.extend(added)
            elif txn.name(m.docno) is not None and not txn.is_dead(m.docno):  # withdraw, once
                cause = txn.url_of(m.docno)
                deltas.extend(withdraw_document(txn, m.docno, m.grams.tolist(), cause))
                txn.kill(m.docno)
        return self._route(txn, deltas, times)

    def _count(self, docno: int, deltas: list[Delta]) -> None:
        fanout, common = arrival_stats(docno, deltas)
        self.fanout.append(fanout)
        self.went_common += common

    @staticmethod
    def _new(txn, m: GramsMsg) -> bool:
        """An add this shard has not applied yet (its docno has no name here, and was
        not withdrawn: names of withdrawn versions are deleted, but they are dead)."""
        return txn.name(m.docno) is None and not txn.is_dead(m.docno)

    def _route(self, txn, deltas: list[Delta], times: dict[str, float]
               ) -> list[tuple[int, bytes]]:
        """Deltas grouped per doc shard, each message naming every docno it mentions as a
        holder (not the targets: they are the doc shard's own documents)."""
        per: dict[int, list[Delta]] = {}
        for d in deltas:
            per.setdefault(docno_shard(d.target, self.shards), []).append(d)
        out = []
        for shard, ds in sorted(per.items()):
            mentioned: set[int] = set()
            for _t, op, _grams, arg, _cause in ds:
                if op == GAIN:
                    for holders in arg:
                        mentioned.update(holders)
                elif op in (GAIN_FROM, ADD, DROP):
                    mentioned.add(arg)
            names = {d: txn.name(d) for d in sorted(mentioned)}
            causes = {d.cause for d in ds}
            out.append((shard, DeltasMsg(ds, {d: n for d, n in names.items() if n},
                                         {c: t for c, t in times.items() if c in causes}
                                         ).encode()))
        return out
