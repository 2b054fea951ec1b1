"""The doc role of partial duplicates (SPEC §7): partners kept current by links, pairs
found by diagonals, and the `partial` / `partial_gone` events.

A pair belongs to the document with the smaller URL: it alone keeps the other's rows (the
partner's sentences holding shared, non-common keys, from the sentence-key role's links),
finds the pair's diagonals, and reports it. Each document's partners are one record; a
batch decodes the records it touches once and writes them back once (`Partners`).

Events compare a pair's diagonals with what the URL's last events showed of it (a digest
per other URL, kept per URL so that a re-fetch compares with what consumers hold):
`partial` when a pair appears or its diagonals change, `partial_gone` when it goes.
Records (table `partials`, told apart by a prefix byte):
    k<key>    sentence-key posting (engine.sentence_postings)
    f<docno>  a shard's rows of a document's keys (Kafka gram shards)
    s<docno>  a document's sentences (engine.sentences.Sentences)
    p<docno>  its partners' rows
    u<url>    what its pair events last showed (other URL -> digest of the diagonals)
    r<url>    its partners from both sides (engine.pair_index)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping

import numpy as np

from .diagonals import Diagonal, diagonals, paired
from .keyed import prefix_end, u64key
from .pair_index import PairIndex
from .params import Params
from .sentence_postings import COMMON, LINK, Link, decode_rows, encode_rows, holding
from .sentences import Sentences


class PairTouch:
    """What happened to a document's partners in a batch: the URL that last changed
    them, and which partners changed (None: all of them, as for an arrival). Only the
    pairs with those partners can have changed: the others keep what was last shown."""

    __slots__ = ("cause", "changed")

    def __init__(self, cause: str, changed: set[int] | None) -> None:
        self.cause = cause
        self.changed = changed


PairDirty = dict[int, PairTouch]


def sentences_key(docno: int) -> bytes:
    return b"s" + u64key(docno)


def partners_key(docno: int) -> bytes:
    return b"p" + u64key(docno)


def shown_key(url: str) -> bytes:
    return b"u" + url.encode("utf-8")


def encode_partners(partners: dict[int, np.ndarray]) -> bytes | None:
    """docnos, row counts, then all rows: three u64 arrays after a count."""
    if not partners:
        return None
    ids = sorted(partners)
    head = np.asarray([len(ids), *ids, *(len(partners[p]) for p in ids)], dtype="<u8")
    return head.tobytes() + b"".join(encode_rows(partners[p]) for p in ids)


def decode_partners(raw: bytes | None) -> dict[int, np.ndarray]:
    if not raw:
        return {}
    n = int(np.frombuffer(raw, dtype="<u8", count=1)[0])
    head = np.frombuffer(raw, dtype="<u8", count=1 + 2 * n).tolist()
    ids, counts = head[1 : 1 + n], head[1 + n :]
    rows = decode_rows(raw[8 * (1 + 2 * n) :])
    out, at = {}, 0
    for p, c in zip(ids, counts, strict=True):
        out[p] = rows[at : at + c]
        at += c
    return out


class Partners:
    """The partner records a batch touches, decoded once and written back by `flush`
    (only those that exist or are not empty: most pages never have a partner)."""

    def __init__(self, txn) -> None:
        self.txn = txn
        self.cache: dict[int, dict[int, np.ndarray]] = {}
        self.stored: set[int] = set()  # documents whose record exists in the state

    def of(self, docno: int) -> dict[int, np.ndarray]:
        p = self.cache.get(docno)
        if p is None:
            self.load((docno,))
            p = self.cache[docno]
        return p

    def load(self, docnos: Iterable[int]) -> None:
        """Decode the records of these documents not cached yet, in one batched read."""
        missing = sorted({d for d in docnos if d not in self.cache})
        raws = self.txn.partials.get_many([partners_key(d) for d in missing])
        for d, raw in zip(missing, raws, strict=True):
            self.cache[d] = decode_partners(raw)
            if raw:
                self.stored.add(d)

    def new(self, docno: int) -> None:
        """A version that just arrived: it has no record yet."""
        self.cache[docno] = {}

    def drop(self, docno: int) -> None:
        """A replaced version: its record goes."""
        self.cache[docno] = {}
        self.stored.add(docno)

    def flush(self) -> None:
        for docno, partners in self.cache.items():
            if partners or docno in self.stored:
                self.txn.partials.put(partners_key(docno), encode_partners(partners))
        self.cache, self.stored = {}, set()


def _without(rows: np.ndarray, keys: np.ndarray) -> np.ndarray:
    return rows[~holding(rows, np.sort(keys))]


def digest(diags: list[Diagonal]) -> str:
    body = json.dumps(diags, separators=(",", ":")).encode()
    return hashlib.blake2b(body, digest_size=8).hexdigest()


PAIR_EVENTS = ("partial", "partial_gone")


def pair_slot(url: str, other: str) -> str:
    """A pair's key among the URLs of a doc shard's record of what consumers were shown
    (engine.shards.shown_record): a URL holds no space."""
    return f"{url} {other}"


def shown_by_pair(event: dict) -> str:
    """What a consumer holds of a pair after a pair event: the digest of its diagonals
    ("" once it is gone)."""
    return digest(event["diagonals"]) if event["event"] == "partial" else ""


def pair_owner(txn, params: Params) -> Callable[[int, int], bool]:
    """owns(doc, partner): whether `doc` keeps the pair with `partner`: another server
    (or foreign=none), and a smaller URL. The sentence-key role sends a LINK only to the
    owner; the doc role keeps only owned pairs."""
    anywhere = params.foreign == "none"

    def owns(doc: int, partner: int) -> bool:
        mine, theirs = txn.name(doc), txn.name(partner)
        if mine is None or theirs is None:
            return False
        return (anywhere or mine[0] != theirs[0]) and mine[1] < theirs[1]

    return owns


def shown_pairs(shown: Mapping[str, str]) -> Iterator[tuple[str, str, str]]:
    """(URL, other URL, what consumers hold: a digest, "" once gone) of each pair in a doc
    shard's map of what consumers were shown (pair_slot: the slots with a space)."""
    for slot, mark in shown.items():
        if " " in slot:
            url, other = slot.split(" ", 1)
            yield url, other, mark


def reconcile_pairs(txn, shown: Mapping[str, str]) -> dict[str, list[str]]:
    """A doc shard's new owner, its state replayed up to the group's commit: make each
    URL's record of what its pair events showed say what consumers hold (`shown`), and
    move this shard's copies of the partners from both sides with it. Consumers and the
    other doc shards' copies (engine.score_replica) hold what the last owner showed and
    sent, past the commit too; this shard's copy follows changes of the record, so a
    redo that never forms a pair its last owner reported would withdraw it from
    consumers (`report` compares with `shown`) and leave it in this copy. Returns the
    owned partners of each URL whose record moved, for the other doc shards' copies
    (engine.pair_records), which may hold less than its last owner showed."""
    held = {key[1:].decode("utf-8"): json.loads(raw)
            for key, raw in txn.partials.scan(b"u", prefix_end(b"u"))}
    want = {url: dict(record) for url, record in held.items()}
    for url, other, mark in shown_pairs(shown):
        record = want.setdefault(url, {})
        if mark:
            record[other] = mark
        else:
            record.pop(other, None)
    both_sides, owned = PairIndex(), {}
    for url, record in sorted(want.items()):
        if record != held.get(url, {}):
            txn.partials.put(shown_key(url),
                             json.dumps(dict(sorted(record.items()))).encode() if record else None)
            both_sides.follow(url, held.get(url, {}), record)
            owned[url] = sorted(record)
    both_sides.flush(txn.partials)
    return owned


class PartialRole:
    def __init__(self, params: Params) -> None:
        self.params = params
        self._shown: MutableMapping[str, str] | None = None
        self._shown_index: dict[str, set[str]] = {}
        # of the last report: the owned partners of the URLs whose pairs moved, or of
        # every URL it looked at while a new owner catches up (a Kafka doc shard sends
        # them to the others' copies: engine.pair_records)
        self.owned: dict[str, list[str]] = {}

    @staticmethod
    def replaced(txn, partners: Partners, dirty: PairDirty, old: int) -> None:
        """A version replaced by a re-fetch: its sentences and partners go (its keys
        leave their postings in the sentence-key role)."""
        txn.partials.put(sentences_key(old), None)
        partners.drop(old)
        dirty.pop(old, None)

    @staticmethod
    def arrived(txn, partners: Partners, dirty: PairDirty, docno: int, url: str,
                sentences: Sentences) -> None:
        """A new version: its sentences are kept, and all its pairs are reported."""
        partners.new(docno)
        if len(sentences):
            txn.partials.put(sentences_key(docno), sentences.encode())
        dirty[docno] = PairTouch(url, None)

    def apply(self, txn, partners: Partners, links: Iterable[Link], dirty: PairDirty) -> None:
        """Apply links in order; record each document whose partners changed."""
        owns = pair_owner(txn, self.params)
        links = list(links)
        partners.load(ln.target for ln in links)
        for t, op, p, rows, cause in links:
            if txn.doc(t) is None:  # withdrawn meanwhile
                continue
            if op == LINK and not owns(t, p):
                continue
            mine = partners.of(t)
            touched = [p]
            if op == COMMON:
                touched = []
                for q in list(mine):
                    left = _without(mine[q], rows[:, 0])
                    if len(left) < len(mine[q]):
                        touched.append(q)
                    if len(left):
                        mine[q] = left
                    else:
                        del mine[q]
            elif p in mine or op == LINK:
                kept = _without(mine.get(p, rows[:0]), rows[:, 0])
                if op == LINK:
                    kept = np.concatenate((kept, rows))
                if len(kept):
                    mine[p] = kept
                else:
                    mine.pop(p, None)
            else:  # UNLINK of a partner this document does not keep
                continue
            touch = dirty.get(t)
            if touch is None:
                dirty[t] = PairTouch(cause, set(touched))
            else:
                touch.cause = cause
                if touch.changed is not None:
                    touch.changed.update(touched)

    def pairs(self, txn, docno: int, partners: dict[int, np.ndarray]) -> dict[str, list]:
        """The document's pairs as other URL -> diagonals (only pairs with any)."""
        if not partners:
            return {}
        own = Sentences.decode(txn.partials.get(sentences_key(docno)))
        out = {}
        for p, rows in partners.items():
            diags = diagonals(own, rows, self.params.gamma)
            if diags:
                out[txn.url_of(p)] = diags
        return out

    def paired(self, txn, docno: int, partners: dict[int, np.ndarray]) -> list[str]:
        """The URLs of the document's pairs: those `pairs` gives, without diagonals."""
        if not partners:
            return []
        own = Sentences.decode(txn.partials.get(sentences_key(docno)))
        return [txn.url_of(p) for p in paired(own, partners, self.params.gamma)]

    def report(self, txn, partners: Partners, dirty: PairDirty, next_seq: Callable[[int], int],
               shown: MutableMapping[str, str] | None = None) -> list[dict]:
        """The pair events of the dirty documents, against what each URL's events last
        showed: the URL's record, or `shown` (by pair_slot) where a doc shard's new
        owner knows what consumers were shown (engine.shards). Their seq is the URL's,
        shared with its quilt events (SPEC §3: seq increases per URL). `self.owned` gets the
        owned partners of each URL whose partners moved, and while a new owner catches up
        (`shown`) of each it looked at: its last owner may have sent records for them it
        never recorded (engine.pair_records)."""
        events, owned = [], {}
        both_sides = PairIndex()
        index = self._index(shown) if shown is not None else {}
        live = [d for d in dirty if txn.doc(d) is not None]
        partners.load(live)
        txn.partials.get_many([shown_key(txn.url_of(d)) for d in live]
                         + [sentences_key(d) for d in live if partners.of(d)])
        for docno in live:
            touch = dirty[docno]
            url, cause = txn.url_of(docno), touch.cause
            raw = txn.partials.get(shown_key(url))
            record: dict[str, str] = json.loads(raw) if raw else {}
            now = self._now(txn, docno, partners.of(docno), record,
                            None if shown is not None else touch.changed)
            last = dict(record)
            for other in index.get(url, ()):
                last[other] = shown[pair_slot(url, other)]
            for other in sorted(set(last) | set(now)):
                mark = now[other][1] if other in now else ""
                if last.get(other, "") == mark:
                    continue
                _, seq = txn.url_entry(url)
                seq = next_seq(seq)
                txn.put_url(url, docno, seq)
                events.append(self.event("partial" if mark else "partial_gone", url, other,
                                         seq, now[other][0] if mark else [], cause))
                if shown is not None:
                    shown[pair_slot(url, other)] = mark
                    index.setdefault(url, set()).add(other)
            fresh = {o: mark for o, (_, mark) in sorted(now.items())}
            if fresh != record:
                txn.partials.put(shown_key(url), json.dumps(fresh).encode() if fresh else None)
                both_sides.follow(url, record, fresh)
            if shown is not None or fresh.keys() != record.keys():
                owned[url] = list(fresh)
        self.owned = owned
        both_sides.flush(txn.partials)
        return events

    def _now(self, txn, docno: int, mine: dict[int, np.ndarray], record: dict[str, str],
             changed: set[int] | None) -> dict[str, tuple[list | None, str]]:
        """Other URL -> (diagonals, digest) of the document's pairs now. Only the pairs
        with a changed partner (or a partner of a changed one's URL: an old and a new
        version of a page may be partners for a while) are computed again; the others
        are as `record` says, with no diagonals (they need no event)."""
        urls = {p: txn.url_of(p) for p in mine}
        if changed is not None:
            gone = {n[1] for p in changed if p not in urls and (n := txn.name(p))}
            again = {u for p, u in urls.items() if p in changed} | gone
        now: dict[str, tuple[list | None, str]] = {}
        for u in urls.values():
            if changed is not None and u not in again and u in record:
                now[u] = (None, record[u])
        recompute = {p: rows for p, rows in mine.items()
                     if changed is None or urls[p] in again}
        for u, diags in self.pairs(txn, docno, recompute).items():
            now[u] = (diags, digest(diags))
        return now

    def _index(self, shown: MutableMapping[str, str]) -> dict[str, set[str]]:
        """URL -> the other URLs of its pairs in `shown`, built once per shown map (a
        doc shard's owner keeps one while it catches up) and kept current by `report`."""
        if self._shown is not shown:
            self._shown, self._shown_index = shown, {}
            for url, other, _ in shown_pairs(shown):
                self._shown_index.setdefault(url, set()).add(other)
        return self._shown_index

    def event(self, kind: str, url: str, other: str, seq: int, diags: list[Diagonal],
              cause: str) -> dict:
        """A pair event, without `at` (stamped by the adapter)."""
        return {"event": kind, "url": url, "other": other, "seq": seq, "diagonals": diags,
                "cause": cause, "params": self.params.to_dict()}

