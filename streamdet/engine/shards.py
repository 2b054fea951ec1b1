"""The two roles as separate shards, for a pipeline of P doc shards and P gram shards.

The embedded engine (core.Engine) runs both roles on one state in one step. Here each
shard has a state of its own and they talk through messages (engine.messages):

    page -> pages stage: PageMsg to its doc shard; once that record has its offset (the
            version's docno), the page's grams (`page_adds`) --GramsMsg add--> GramShard
    PageMsg -> DocShard: URL table, document; a replaced version's grams --withdraw--> GramShard
    GramShard: postings (postings.add_document / withdraw_document) --DeltasMsg--> DocShard
    DocShard: apply deltas (docs.DocRole), re-score once per batch -> events, and the
              record of what they show (ShownMsg, `shown_record`) for a new owner

Partial duplicates (SPEC §7) ride on the same messages: a page's sentences go with it to
its doc shard, each sentence key's rows with the grams to the gram shard that owns the
key (`page_adds`), whose sentence postings (engine.sentence_postings) answer with links
in the deltas messages; the doc shard keeps its documents' partners (engine.partials).

Near-duplicate clusters (SPEC §6) are global, so one shard keeps them all: gram shard 0,
the *cluster shard*, which sees every version's add and withdrawal already. A page's
sketch goes with its add to it (`page_adds`); its cluster role (engine.clusters) settles
each batch and sends the cluster rows of the documents whose cluster may have changed,
stamped with its input offset, to their doc shards in the deltas messages; a doc shard
turns a row into a `cluster` event where it differs from what the URL's last one showed.

Both are pure: engine.shard_step feeds them batches in each input partition's order and
commits each transaction with its offsets and the messages to send (its outbox), for the
Kafka worker and the tests' simulation alike.
Why the result is exact whatever the interleaving of partitions, crashes and changes of
owner (one writer per gram, held early deltas, withdrawals of all of a version's grams,
one live version per URL in a gram shard, what a new owner compares its events with,
seq) is written once, in docs/kafka-protocol.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import replace
from enum import StrEnum

import numpy as np

from .clusters import ClusterRole, ClusterRow, cluster_events, cluster_slot, shown_by_cluster
from .deltas import ADD, DROP, GAIN, GAIN_FROM, Delta, arrival_stats
from .doc_role import Dirty, DocRole, Touch
from .documents import DocResult, DocState
from .events import shown_by
from .grams import text_grams
from .labelled import LabelledSet, shares
from .messages import DeltasMsg, GramsMsg, MessageError, PageMsg, ShownMsg, header, unpack
from .pair_records import PairRecords
from .params import Params
from .partials import (
    PAIR_EVENTS,
    PairDirty,
    PartialRole,
    Partners,
    pair_owner,
    pair_slot,
    shown_by_pair,
)
from .postings import add_document, plan_batch, withdraw_document
from .rescoring import rescore
from .routing import docno_for, docno_shard, split_chunks, split_grams, split_rows, url_shard
from .score_replica import ReplicaInputs, keep_clusters, keep_pairs, keep_parts
from .sentence_postings import (
    LINK,
    Link,
    add_keys,
    decode_rows,
    encode_rows,
    prefetch,
    rows_key,
    rows_of,
    withdraw_keys,
)
from .site_shard import SITE_SHARD, SitePart, SiteShard, keep_shares, share_rows
from .sites import site_slot
from .spam_labels import (
    Examples,
    ForwardedLabel,
    apply_labels,
    due,
    keep_examples,
    own_examples,
)
from .spam_score import score_events
from .transaction import Transaction


def shown_record(events: list[dict], sent: list[bytes]) -> bytes | None:
    """The ShownMsg for a round's events (None without events): what each URL's newest
    event shows, and the events as sent (`sent`, their bytes). The doc shard sends it to
    its own deltas partition first, and the events once it is acknowledged."""
    if not events:
        return None
    shown = {}
    for ev in events:
        if ev.get("event") == "cluster":
            shown[cluster_slot(ev["url"])] = [ev["seq"], shown_by_cluster(ev)]
        elif ev.get("event") in PAIR_EVENTS:
            shown[pair_slot(ev["url"], ev["other"])] = [ev["seq"], shown_by_pair(ev)]
        elif ev.get("event") == "site":
            shown[event_key(ev)] = [ev["seq"], "1" if ev.get("monster", ev.get("bad")) else "0"]
        else:
            shown[ev["url"]] = [ev["seq"], shown_by(ev)]
    return ShownMsg(shown, [raw.decode("utf-8") for raw in sent]).encode()


def event_key(ev: dict) -> str:
    """What an event is about, as a doc shard's map of what consumers were shown keys it:
    its URL, or for a `site` event its site's slot (engine.sites.site_slot)."""
    if ev.get("event") == "site":
        return site_slot(ev["level"], ev.get("site") or ev.get("neighbourhood"))
    return ev["url"]


def _shown_msgs(records: Iterable[tuple[int, bytes]]) -> Iterator[tuple[int, ShownMsg]]:
    """The ShownMsg records among a deltas partition's (offset, value) pairs; the others
    (deltas, foreign bytes) are passed over."""
    for offset, raw in records:
        try:
            header, arrays = unpack(raw)
            if header.get("k") == "shown":
                yield offset, ShownMsg.from_parts(header, arrays)
        except (MessageError, TypeError, ValueError):
            continue


def last_shown(records: Iterable[tuple[int, bytes]]) -> dict[str, str]:
    """What consumers were last shown per URL, from a doc shard's deltas partition read
    from its start to its end, as (offset, value) pairs (a new owner replays it from the
    start anyway). The whole partition, not just what follows the group's commit: an
    owner that is replaced while it catches up may have committed past records whose
    URLs it had not reached yet."""
    newest: dict[str, tuple[int, str]] = {}
    for _, msg in _shown_msgs(records):
        for url, (seq, digest) in msg.shown.items():
            if url not in newest or seq > newest[url][0]:
                newest[url] = (seq, digest)
    return {url: digest for url, (_, digest) in newest.items()}


def unsent_events(records: Iterable[tuple[int, bytes]], committed: int) -> list[bytes]:
    """The events of the ShownMsg records at or past `committed` (the group's committed
    offset of the deltas partition), each once, in seq order: their owner may have died
    after the record and before the events, which a new owner then sends again. Where
    the events did leave, these are exact repeats (SPEC §9). Records before `committed`
    were read by a round whose offsets were committed, which follows the acknowledgement
    of every earlier round's events."""
    out: dict[tuple[str, int], tuple[int, bytes]] = {}
    for offset, msg in _shown_msgs(records):
        if offset < committed:
            continue
        for text in msg.events:
            ev = json.loads(text)
            out.setdefault((event_key(ev), ev["seq"]), (ev["seq"], text.encode("utf-8")))
    return [raw for _, raw in sorted(out.values(), key=lambda x: x[0])]


def sent_examples(records: Iterable[tuple[int, bytes]]) -> dict[tuple[int, int], Examples]:
    """The examples among a doc shard's deltas partition's (offset, value) pairs, the
    newest stamp of each (label, doc shard): a new owner that redoes a round in which its
    last owner applied labels sends that owner's examples again rather than its own
    (engine.spam_labels), so that every doc shard keeps the same ones whatever it met."""
    out: dict[tuple[int, int], Examples] = {}
    for _, raw in records:
        try:
            found = header(raw).get("x")
            ex = Examples.from_json(found) if found is not None else None
        except (MessageError, TypeError, ValueError):
            continue
        if ex is not None and ex.stamp >= getattr(out.get((ex.label, ex.shard)), "stamp", -1):
            out[(ex.label, ex.shard)] = ex
    return out


def seq_after(seq: int) -> Callable[[int], int]:
    """A doc shard's next seq for a URL or site last at `last`: at least the batch's
    `seq`, the offsets consumed so far, which only grow on this worker or the next
    owner."""
    return lambda last: max(last + 1, seq)


class DocShard:
    """URLs, documents and covers of the pages whose URL hashes to this shard."""

    def __init__(self, params: Params, shard: int, shards: int) -> None:
        self.params = params
        self.shard = shard
        self.shards = shards
        self.docs = DocRole(params)
        self.partials = PartialRole(params)
        self.site = SiteShard(params, shards) if shard == SITE_SHARD else None
        # of the last batch: (doc shard, DeltasMsg bytes) of its parts, pair records and
        # examples, for the site shard and every doc shard's copies (engine.score_replica,
        # engine.spam_labels)
        self.site_parts: list[tuple[int, bytes]] = []
        self._replaced: dict[int, str] = {}  # of the batch: replaced versions -> new URLs
        self.cause_times: dict[str, float] = {}  # of the last batch: cause URL -> fetched_at
        self.documents_added = 0  # of the last batch: URLs seen for the first time
        self.held = 0  # of the last batch: deltas held for pages not applied yet

    def process(self, txn, pages: Iterable[tuple[int, PageMsg]],
                deltas: Iterable[DeltasMsg | ShownMsg], seq: int,
                shown: MutableMapping[str, str] | None = None, docs_applied: int = 0,
                sent: Mapping[tuple[int, int], Examples] | None = None
                ) -> tuple[list[tuple[int, bytes]], list[dict]]:
        """Apply pages (with their input offsets), then deltas (the shard's own ShownMsg
        records among them are skipped); re-score what changed, comparing with what
        consumers were shown when `shown` is given (rescoring.rescore). `docs_applied`:
        the docs partition's offset after the batch (what labels' examples wait for);
        `sent`: while a new owner catches up, the examples its partition holds
        (sent_examples), which it sends again rather than its own.

        Returns (gram shard, GramsMsg bytes) to send - the withdrawals of replaced
        versions - and the events, the quilt and rescore ones with their spam_score;
        `site_parts` holds the messages to the site shard and the other doc shards."""
        dirty: Dirty = {}
        before: dict[int, DocResult] = {}
        out: list[tuple[int, bytes]] = []
        partners, paired = Partners(txn), {}
        self.cause_times = {}
        self.documents_added = self.held = 0
        self._replaced = {}
        shares, parts, rows, moves, pairs = [], [], [], [], []
        labels: list[tuple[list[ForwardedLabel], int]] = []
        examples: list[Examples] = []
        for offset, page in pages:
            out.extend(self._arrive(txn, offset, page, dirty, before, partners, paired))
            if page.fetched_at is not None:
                self.cause_times[page.url] = page.fetched_at
        newest = txn.newest_version()
        held = self._release(txn, newest)
        self.docs.apply(txn, held.deltas, dirty)
        self.partials.apply(txn, partners, held.links, paired)
        clusters = held.clusters
        for msg in deltas:
            if isinstance(msg, ShownMsg):
                continue
            self.cause_times.update(msg.times)
            shares.append((msg.shares, msg.shares_cause))
            parts += msg.parts
            moves += msg.moves
            pairs += [msg.pairs] if msg.pairs is not None else []
            rows += msg.clusters
            labels += [(msg.labels, msg.labels_docs)] if msg.labels else []
            examples += [msg.examples] if msg.examples is not None else []
            msg = self._own_rows(msg)
            for docno, (server, url) in msg.names.items():
                if txn.name(docno) is None:
                    txn.put_name(docno, server, url)
            early = msg.where(lambda target: target > newest)
            if early:
                msg = msg.where(lambda target: target <= newest)
                self._hold(txn, early)
                self.held += len(early)
            self.docs.apply(txn, msg.deltas, dirty)
            self.partials.apply(txn, partners, msg.links, paired)
            clusters += msg.clusters
        next_seq = seq_after(seq)
        events = rescore(self.docs, txn, dirty, before, next_seq, shown)
        events += self.partials.report(txn, partners, paired, next_seq, shown)
        events += cluster_events(txn, clusters, next_seq, self.params.to_dict(), shown)
        if self.site is not None:
            events += self.site.process(txn, shares, parts, next_seq, shown)
        else:
            keep_shares(txn, shares, {})
        mine = self._parts(txn, dirty, seq)
        keep_parts(txn, [*parts, *mine])
        keep_clusters(txn, rows)
        keep_pairs(txn, moves, pairs)
        inputs = ReplicaInputs(txn, self.shards)
        taught = self._labels(txn, labels, examples, seq, docs_applied, inputs, sent or {})
        score_events(txn, events, inputs)
        self.site_parts = self._broadcast(mine, PairRecords(seq, self.partials.owned), taught)
        partners.flush()
        return out, events

    def _own_rows(self, msg: DeltasMsg) -> DeltasMsg:
        """The message with the cluster rows of this shard's documents only: the others'
        are for its copies (engine.score_replica), not its events."""
        own = [r for r in msg.clusters if docno_shard(r.target, self.shards) == self.shard]
        return msg if len(own) == len(msg.clusters) else replace(msg, clusters=own)

    def _labels(self, txn, labels: list[tuple[list[ForwardedLabel], int]],
                examples: list[Examples], seq: int, docs_applied: int,
                inputs: ReplicaInputs, sent: Mapping[tuple[int, int], Examples]
                ) -> Examples | None:
        """Apply the batch's labels and keep the examples doc shards sent
        (engine.spam_labels); this shard's examples for the newest label it applied, to
        send every doc shard, once they are due (None: none are): those an earlier owner
        sent, if its partition holds them (`sent`), else its own."""
        apply_labels(txn.chunks, labels, lambda url: url_shard(url, self.shards) == self.shard)
        keep_examples(txn.chunks, examples, self.shards)
        label = due(txn.chunks, docs_applied)
        if not label:
            return None
        return sent.get((label, self.shard)) or own_examples(txn, inputs, label, self.shard, seq)

    def _broadcast(self, parts: list[SitePart], pairs: PairRecords, taught: Examples | None
                   ) -> list[tuple[int, bytes]]:
        """The batch's parts, pair records and examples to every other doc shard; the
        site shard's own parts to itself, as the others' reach it, and the examples to
        this shard too (engine.spam_labels: a model made of its deltas partition alone)."""
        out = []
        told = pairs if pairs.owned else None
        shared = (DeltasMsg([], parts=parts, pairs=told, examples=taught).encode()
                  if parts or told or taught is not None else None)
        for shard in range(self.shards):
            if shard != self.shard:
                if shared is not None:
                    out.append((shard, shared))  # one message, encoded once for them all
                continue
            own = DeltasMsg([], parts=parts if shard == SITE_SHARD else [], examples=taught)
            if own.parts or taught is not None:
                out.append((shard, own.encode()))
        return out

    def end_catch_up(self, txn, seq: int, shown: MutableMapping[str, str]) -> list[dict]:
        """The events of the batch that ends a new owner's catch-up, besides its own: the
        site shard's corrections of what consumers hold (SiteShard.reconcile)."""
        if self.site is None:
            return []
        return self.site.reconcile(txn, seq_after(seq), shown)

    def _parts(self, txn, dirty: Dirty, seq: int) -> list[SitePart]:
        """The parts of the batch's re-scored and replaced versions, for the site shard
        (engine.site_shard) and the doc shards' copies, stamped with the offsets consumed
        (`seq`)."""
        parts = [SitePart(old, seq, "", cause=url) for old, url in self._replaced.items()]
        docnos = list(dirty)
        for d, (n_patch, n_grams, quilted) in zip(docnos, txn.figures(docnos), strict=True):
            parts.append(SitePart(d, seq, txn.url_of(d), n_patch, n_grams, quilted,
                                  dirty[d].cause))
        return parts

    @staticmethod
    def _hold(txn, early: DeltasMsg) -> None:
        """Keep deltas, links and cluster rows about pages not applied yet, after any held
        before them: one record a message and target (Txn.hold_early), never the held
        ones decoded and written again."""
        for target, msg in early.by_target().items():
            txn.hold_early(target, msg.encode())

    @staticmethod
    def _release(txn, newest: int) -> DeltasMsg:
        """The held deltas and links of the pages applied now, oldest first (each
        target's own order is all that matters: those of different documents commute)."""
        out = DeltasMsg([])
        found = txn.early_up_to(newest)
        for _, _, raw in found:
            out.extend(DeltasMsg.decode(raw))
        txn.release_early(key for key, _, _ in found)
        return out

    def _arrive(self, txn, offset: int, page: PageMsg, dirty: Dirty,
                before: dict[int, DocResult], partners: Partners,
                paired: PairDirty) -> list[tuple[int, bytes]]:
        docno = docno_for(offset, self.shard, self.shards)
        entry = txn.url_entry(page.url)
        out = []
        seq, prev = 0, DocResult()
        if entry is not None:
            old, seq = entry
            if old == docno:  # this very record, applied before a crash: nothing to do
                return []
            prev = before.pop(old, None) or txn.doc(old).result
            old_grams = version_grams(txn, old, self.params.k)
            for g, part in enumerate(split_grams(old_grams, self.shards)):
                out.append((g, GramsMsg("withdraw", old, part, "", page.url,
                                        page.fetched_at).encode()))
            txn.put_doc(old, None)
            txn.put_doc_grams(old, None)
            txn.put_text(old, None)
            self._replaced[old] = page.url
            self.partials.replaced(txn, partners, paired, old)
            dirty.pop(old, None)
        else:
            self.documents_added += 1
        before[docno] = prev
        txn.put_name(docno, page.server, page.url)
        txn.put_doc(docno, DocState(n_grams=page.n_grams))
        txn.put_text(docno, page.text)
        txn.put_url(page.url, docno, seq)
        dirty[docno] = Touch(page.url, None)
        self.partials.arrived(txn, partners, paired, docno, page.url, page.sentences)
        return out


def version_grams(txn: Transaction, docno: int, k: int) -> np.ndarray:
    """All grams of a version a doc shard holds, to withdraw: as a state written before
    kept them, else its kept text hashed again (grams.text_grams), else - a version with
    no text - its patch grams, all that SPEC §1 needs withdrawn."""
    kept = txn.doc_grams(docno)
    if len(kept):
        return kept
    grams = text_grams(txn.text(docno), k)
    if grams is None:
        return np.asarray(txn.doc(docno).patch_grams(), dtype=np.uint64)
    return grams


def label_forwards(labels: list[ForwardedLabel], docs_ends: Sequence[int]
                   ) -> list[tuple[int, bytes]]:
    """(doc shard, DeltasMsg bytes) forwarding labels of the labels topic to every doc
    shard, each with where that shard's docs partition ends now (`docs_ends`): the pages
    its examples for them wait for (engine.spam_labels)."""
    return [(s, DeltasMsg([], labels=labels, labels_docs=end).encode())
            for s, end in enumerate(docs_ends)]


def page_adds(page: PageMsg, docno: int, shards: int) -> list[tuple[int, bytes]]:
    """(gram shard, GramsMsg bytes) adding version `docno` of a page: the pages stage
    sends them once the page's record is on its doc shard's partition at the offset
    `docno` is made of (routing.docno_for). One per gram shard, empty parts too, as its
    withdrawal will be; the cluster shard's carries the page's sketch."""
    rows = split_rows(rows_of(page.sentences), shards)
    chunks = split_chunks(page.chunks, shards)
    return [(g, GramsMsg("add", docno, part, page.server, page.url, page.fetched_at,
                         rows[g], page.sketch if g == CLUSTER_SHARD else None,
                         chunks[g]).encode())
            for g, part in enumerate(split_grams(page.grams, shards))]


def _rows_of(txn, docnos: list[int]) -> dict[int, np.ndarray]:
    """A gram shard's rows of these documents' keys, in one batched read."""
    raws = txn.partials.get_many([rows_key(d) for d in docnos])
    return {d: decode_rows(raw) for d, raw in zip(docnos, raws, strict=True)}


CLUSTER_SHARD = 0  # the gram shard that keeps the near-duplicate clusters (SPEC §6)


class GramShard:
    """Postings of the grams that hash to this shard; for the cluster shard, the
    near-duplicate clusters too."""

    def __init__(self, params: Params, shard: int, shards: int) -> None:
        self.params = params
        self.shard = shard
        self.shards = shards
        self.clusters = ClusterRole() if shard == CLUSTER_SHARD else None
        self.labelled = LabelledSet(params.chunk_threshold)
        self.fanout: list[int] = []  # of the last batch, per add: earlier documents changed
        self.went_common = 0  # of the last batch: grams that became common

    def process(self, txn, msgs: list[GramsMsg], end: int = 0) -> list[tuple[int, bytes]]:
        """Apply grams messages in order, the shard's partition read up to offset `end`
        (the stamp of cluster rows); returns (doc shard, DeltasMsg bytes) to send."""
        ops = _Ordering(txn).run(msgs)
        adds = [m for op, m in ops if op == ADD_OP]
        plans = iter(plan_batch(txn, [m.grams for m in adds]))
        deltas: list[Delta] = []
        times = {m.url: m.fetched_at for m in [*msgs, *adds] if m.fetched_at is not None}
        links: list[Link] = []
        fresh = prefetch(txn, [m.rows for _, m in ops if len(m.rows)])
        near = self.clusters
        if near is not None:
            near.prefetch(txn, [m.sketch for op, m in ops if op == ADD_OP and m.sketch])
        self.labelled.prefetch(txn, [m.chunks for m in adds])
        self.fanout, self.went_common = [], 0
        for op, m in ops:
            if op == ADD_OP:
                txn.put_name(m.docno, m.server, m.url)
                added = add_document(txn, m.docno, m.grams, next(plans), self.params.m, m.url,
                                     self.params.popular)
                self._count(m.docno, added)
                deltas.extend(added)
                links.extend(self._add_keys(txn, m, fresh))
                self.labelled.add(txn, m.docno, m.chunks, m.url)
                if near is not None and m.sketch is not None:
                    near.add(txn, m.docno, m.url, m.sketch)
            elif op == LABEL_OP:
                self.labelled.label(txn, m.grams, m.url)
            else:
                if op == WITHDRAW_OP:
                    deltas.extend(withdraw_document(txn, m.docno, m.grams.tolist(), m.url,
                                                    self.params.popular))
                    links.extend(self._withdraw_keys(txn, m))
                    self.labelled.withdraw(txn, m.docno, m.url)
                    if near is not None:
                        near.withdraw(txn, m.docno, m.url, m.url)
                txn.kill(m.docno)
        shares = self._shares(txn, ops, end)
        rows = near.rows(txn, near.settle(txn), end) if near is not None else []
        # a share moves with the batch's pages, not with the document it is of: the
        # newest of them names it (a `site` event's cause, SPEC §3)
        newest = next((m.url for _, m in reversed(ops) if m.url), "")
        return self._route(txn, deltas, links, times, rows, shares, newest)

    def _shares(self, txn, ops: list, end: int) -> np.ndarray:
        """This shard's share of every document whose pop(d) or chunk counts moved here,
        or that arrived with some (SPEC §8), and a last one for each withdrawn: for the
        site shard, stamped with the input offset (engine.site_shard)."""
        gone = {m.docno for op, m in ops if op == WITHDRAW_OP}
        added = {m.docno for op, m in ops if op == ADD_OP}
        moved = {*self.labelled.take_moved(), *txn.pop_changed()}
        live = sorted((added | moved) - gone)
        rows = [(d, self.shard, end, False, 0, 0, 0) for d in sorted(gone)]
        for d, pop, counted in zip(live, txn.pop_many(live), shares(txn, live), strict=True):
            inside, total = counted or (0, 0)
            if d in moved or pop or inside or total:
                rows.append((d, self.shard, end, True, pop, inside, total))
        return share_rows(rows)

    def _add_keys(self, txn, m: GramsMsg, fresh: np.ndarray) -> list[Link]:
        """SPEC §7: the version's sentence keys of this shard join their postings; their
        rows are kept, for the links of later holders and the withdrawal."""
        if not len(m.rows):
            return []
        txn.partials.put(rows_key(m.docno), encode_rows(m.rows))
        return add_keys(txn, m.docno, m.rows, self.params.m, lambda ys: _rows_of(txn, ys),
                        pair_owner(txn, self.params), fresh, m.url)

    @staticmethod
    def _withdraw_keys(txn, m: GramsMsg) -> list[Link]:
        rows = decode_rows(txn.partials.get(rows_key(m.docno)))
        if not len(rows):
            return []
        txn.partials.put(rows_key(m.docno), None)
        return withdraw_keys(txn, m.docno, rows, m.url)

    def _count(self, docno: int, deltas: list[Delta]) -> None:
        fanout, common = arrival_stats(docno, deltas)
        self.fanout.append(fanout)
        self.went_common += common

    def _route(self, txn, deltas: list[Delta], links: list[Link], times: dict[str, float],
               rows: list[ClusterRow], shares: np.ndarray, shares_cause: str
               ) -> list[tuple[int, bytes]]:
        """Deltas, links and cluster rows grouped per doc shard, each message naming
        every docno it mentions as a holder or a linked partner (not the targets: they
        are the doc shard's own documents); the shares to the site shard, with their
        cause."""
        per: dict[int, DeltasMsg] = {}
        if len(shares):  # all to the site shard, each also to its document's doc shard
            per[SITE_SHARD] = DeltasMsg([], shares=shares, shares_cause=shares_cause)
            owners = (shares[:, 0] - 1) % self.shards
            for shard in sorted(set(owners.tolist()) - {SITE_SHARD}):
                per[shard] = DeltasMsg([], shares=shares[owners == shard],
                                       shares_cause=shares_cause)
        for d in deltas:
            per.setdefault(docno_shard(d.target, self.shards), DeltasMsg([])).deltas.append(d)
        for ln in links:
            per.setdefault(docno_shard(ln.target, self.shards), DeltasMsg([])).links.append(ln)
        for r in rows:  # to every doc shard: its own become events, all its copies
            for shard in range(self.shards):
                per.setdefault(shard, DeltasMsg([])).clusters.append(r)
        out = []
        for shard, msg in sorted(per.items()):
            mentioned: set[int] = {ln.partner for ln in msg.links if ln.op == LINK}
            for _t, op, _grams, arg, _cause in msg.deltas:
                if op == GAIN:
                    for holders in arg:
                        mentioned.update(holders)
                elif op in (GAIN_FROM, ADD, DROP):
                    mentioned.add(arg)
            names = {d: txn.name(d) for d in sorted(mentioned)}
            causes = ({d.cause for d in msg.deltas} | {ln.cause for ln in msg.links}
                      | {r.cause for r in msg.clusters} | {msg.shares_cause})
            out.append((shard, DeltasMsg(msg.deltas, {d: n for d, n in names.items() if n},
                                         {c: t for c, t in times.items() if c in causes},
                                         msg.links, msg.clusters, msg.shares,
                                         shares_cause=msg.shares_cause).encode()))
        return out


class GramOp(StrEnum):
    """What a gram shard does with one grams message (_Ordering)."""

    ADD = "add"  # apply a version's grams
    WITHDRAW = "withdraw"  # take a replaced version's grams out
    KILL = "kill"  # mark a version withdrawn, its grams never applied (its add is ignored)
    LABEL = "label"  # chunks a user labels join L (SPEC §8)


ADD_OP, WITHDRAW_OP, KILL_OP, LABEL_OP = GramOp


class _Ordering:
    """What a gram shard does with a batch of grams messages, in order: adds to apply,
    withdrawals to apply, versions to mark withdrawn - keeping one live version per URL (see
    the module's docstring). Reads the state, writes the URL table and the waiting adds;
    the postings are the caller's."""

    def __init__(self, txn) -> None:
        self.txn = txn
        self.ops: list[tuple[str, GramsMsg]] = []
        self.gone: set[int] = set()  # withdrawn or killed in this batch
        self.applied: set[int] = set()  # added in this batch

    def run(self, msgs: list[GramsMsg]) -> list[tuple[str, GramsMsg]]:
        for m in msgs:
            if m.kind == "label":
                self.ops.append((LABEL_OP, m))  # in order: labels and pages commute anyway
            elif m.kind == "add":
                self._add(m)
            else:
                self._withdraw(m)
        return self.ops

    def _withdrawn(self, docno: int) -> bool:
        return docno in self.gone or self.txn.is_withdrawn(docno)

    def _live(self, url: str) -> int | None:
        e = self.txn.url_entry(url)
        return e[0] if e is not None and not self._withdrawn(e[0]) else None

    def _kill(self, m: GramsMsg) -> None:
        self.gone.add(m.docno)
        self.ops.append((KILL_OP, m))

    def _add(self, m: GramsMsg) -> None:
        d = m.docno
        if self._withdrawn(d) or d in self.applied or self.txn.name(d) is not None:
            return  # withdrawn already, or a repeat (sent again after a crash upstream)
        live = self._live(m.url)
        if live is None:
            self.applied.add(d)
            self.txn.put_url(m.url, d, 0)
            self.ops.append((ADD_OP, m))
        elif live > d:
            self._kill(m)  # replaced already: its withdrawal is on its way
        elif live < d:  # wait for the live version's withdrawal; a newer waiter wins
            raw = self.txn.waiting_add(live)
            waiting = GramsMsg.decode(raw) if raw else None
            if waiting is not None and waiting.docno > d:
                self._kill(m)
            elif waiting is None or waiting.docno < d:
                if waiting is not None:
                    self._kill(waiting)
                self.txn.put_waiting_add(live, m.encode())

    def _withdraw(self, m: GramsMsg) -> None:
        d = m.docno
        if self._withdrawn(d):
            return
        held = d in self.applied or self.txn.name(d) is not None
        was_live = self._live(m.url) == d
        self.gone.add(d)
        self.ops.append((WITHDRAW_OP if held else KILL_OP, m))
        raw = self.txn.waiting_add(d) if was_live else None
        if raw:
            self.txn.put_waiting_add(d, None)
            self._add(GramsMsg.decode(raw))
