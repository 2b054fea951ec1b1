"""The messages shards exchange (Kafka values of the internal topics), as bytes.

A message is a small JSON header and some arrays of uint64 (grams, docnos) appended raw,
then optionally a blob of bytes (a page's packed text):
    4-byte header length | header JSON | array 0 | array 1 | ... | blob
with the arrays' lengths (and the blob's, "b") in the header. JSON keeps the format
readable and versioned; raw arrays keep thousands of grams per message cheap to build and
read (no per-gram objects). Nothing here is ever unpickled: internal topics are data, not code.

- PageMsg   (pages of one doc shard): a validated, analysed page (with its sentences, its
  sketch and its paragraph chunks).
- GramsMsg  (one per document and gram shard): a version's grams to add, or to withdraw;
  an add carries the rows of the version's sentence keys that the shard owns (SPEC §7),
  the chunks it owns (SPEC §8), and to the cluster shard (gram shard 0) the version's
  sketch (SPEC §6).
- DeltasMsg (one per gram-shard batch and doc shard): the deltas and the sentence links
  for that doc shard's documents, with the server and URL of every docno they mention;
  from the cluster shard, the cluster rows of its documents. To the site shard (doc
  shard 0, engine.site_shard), also the gram shards' shares of documents' pop(d) and
  contains, and the doc shards' parts of their documents (SPEC §8). To every doc shard,
  also the parts, the cluster rows and the pair records a page's spam score reads (SPEC
  §10, engine.score_replica), the labels of the labels topic, forwarded, and a doc
  shard's examples for the model they train (engine.spam_labels).
- ShownMsg  (a doc shard to its own deltas partition, before a round's events leave):
  what those events show, and the events themselves, for a new owner of the shard
  (engine.shards).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain, repeat

import numpy as np

from .chunks import NO_CHUNKS, Chunks
from .clusters import ClusterRow
from .deltas import GAIN, LOSE, Delta
from .pair_records import PairRecords
from .sentence_postings import Link
from .sentences import NONE, Sentences
from .site_shard import SHARE_COLUMNS, SitePart
from .sketches import Sketch
from .spam_labels import Examples, ForwardedLabel

_NO_U64 = np.zeros(0, dtype=np.uint64)


def _sketch_array(sketch: Sketch | None) -> np.ndarray:
    return _NO_U64 if sketch is None else sketch.to_array()


def _sketch_of(arrays: list[np.ndarray], at: int) -> Sketch | None:
    """The sketch in array `at`, if the message has one (not in older records)."""
    return Sketch.from_array(arrays[at]) if len(arrays) > at and len(arrays[at]) else None


def _chunk_arrays(chunks: Chunks) -> list[np.ndarray]:
    return [chunks.keys, chunks.counts.astype(np.uint64)]


def _chunks_of(arrays: list[np.ndarray], at: int) -> Chunks:
    """The chunks in arrays `at`, `at` + 1 (none in older records)."""
    if len(arrays) <= at + 1 or not len(arrays[at]):
        return NO_CHUNKS
    if len(arrays[at]) != len(arrays[at + 1]):
        raise MessageError("chunk keys and counts differ in length")
    return Chunks(arrays[at], arrays[at + 1].astype(np.uint32))

VERSION = 3  # 3: a deltas message's gram lists once each (2: per delta; 1: rows as JSON)
READABLE = (1, 2, 3)
_LEN = struct.Struct("<I")


class MessageError(ValueError):
    """Bytes that are not a message of this version."""


def pack(header: dict, arrays: list[np.ndarray], blob: bytes = b"") -> bytes:
    header = {**header, "v": VERSION, "a": [len(a) for a in arrays]}
    if blob:
        header["b"] = len(blob)
    head = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return b"".join([_LEN.pack(len(head)), head,
                     *(np.asarray(a, dtype="<u8").tobytes() for a in arrays), blob])


def header(raw: bytes) -> dict:
    """A message's header alone (its arrays not read): for a reader of a whole partition
    that wants a few headers' fields."""
    try:
        (n,) = _LEN.unpack_from(raw)
        found = json.loads(raw[4 : 4 + n])
    except (struct.error, ValueError, TypeError) as exc:
        raise MessageError(f"not a streamdet message: {exc}") from None
    if not isinstance(found, dict) or found.get("v") not in READABLE:
        raise MessageError("not a streamdet message of a version this one reads")
    return found


def unpack(raw: bytes) -> tuple[dict, list[np.ndarray]]:
    """Header and arrays (a blob, if any, is passed over: unpack_blob)."""
    header, arrays, _ = unpack_blob(raw)
    return header, arrays


def unpack_blob(raw: bytes) -> tuple[dict, list[np.ndarray], bytes]:
    try:
        (n,) = _LEN.unpack_from(raw)
        header = json.loads(raw[4 : 4 + n])
        if header.get("v") not in READABLE:
            raise MessageError(f"message version {header.get('v')!r}, expected one of "
                               f"{READABLE}")
        off = 4 + n
        arrays = []
        for count in header["a"]:
            arrays.append(np.frombuffer(raw, dtype="<u8", count=count, offset=off)
                          .astype(np.uint64))
            off += 8 * count
    except (struct.error, ValueError, KeyError, TypeError) as exc:
        if isinstance(exc, MessageError):
            raise
        raise MessageError(f"not a streamdet message: {exc}") from None
    blob_len = header.get("b", 0)
    if not isinstance(blob_len, int) or off + blob_len != len(raw):
        raise MessageError("message has trailing bytes")
    return header, arrays, bytes(raw[off:])


@dataclass
class PageMsg:
    """A page as the pages stage sends it to its doc shard. Its grams go to the gram
    shards (shards.page_adds), not with the page: the doc shard needs only their number,
    and hashes a version's kept text again when a newer one replaces it (grams.text_grams)
    - the grams were more than half of the docs topic's bytes. A record written before
    (version 2) carries them; decoded, `grams` is what the record holds."""

    url: str
    server: str
    grams: np.ndarray
    fetched_at: float | None = None
    text: bytes = b""  # the visible text, packed (engine.text): the doc shard keeps it
    sentences: Sentences = NONE  # SPEC §7 (none in a record written before they were)
    sketch: Sketch | None = None  # SPEC §6 (none in a record written before they were)
    chunks: Chunks = NO_CHUNKS  # SPEC §8 (none in a record written before they were)
    n_grams: int = -1  # |grams(d)|; -1: len(grams)

    def __post_init__(self) -> None:
        if self.n_grams < 0:
            self.n_grams = len(self.grams)

    def encode(self) -> bytes:
        s = self.sentences
        return pack({"k": "page", "u": self.url, "s": self.server, "t": self.fetched_at,
                     "g": self.n_grams},
                    [_NO_U64, s.keys, s.starts, s.ends, _sketch_array(self.sketch),
                     *_chunk_arrays(self.chunks)], self.text)

    @classmethod
    def decode(cls, raw: bytes) -> PageMsg:
        h, arrays, text = unpack_blob(raw)
        sentences = NONE
        if len(arrays) >= 4 and len(arrays[1]):
            sentences = Sentences(arrays[1], arrays[2].astype(np.int64),
                                  arrays[3].astype(np.int64))
        n = h.get("g", len(arrays[0]))
        if not isinstance(n, int) or n < 0:
            raise MessageError(f"a page's gram count is {n!r}")
        return cls(h["u"], h["s"], arrays[0], h.get("t"), text, sentences,
                   _sketch_of(arrays, 4), _chunks_of(arrays, 5), n)


@dataclass
class GramsMsg:
    """kind "add": docno (with its server and URL) holds these grams, and the sentence keys
    of `rows` (key, position, start, end; those the shard owns); kind "withdraw": version
    docno was replaced and leaves these grams (all of its grams in the shard), and the
    keys the shard kept rows of; an add also carries the version's chunks that the shard
    owns (its withdrawal finds them in the shard's state). Kind "label": `grams` are the
    keys of chunks a user labels that the shard owns (SPEC §8), `url` says what was
    labelled (`streamdet label-chunks`)."""

    kind: str
    docno: int
    grams: np.ndarray
    server: str = ""
    url: str = ""
    fetched_at: float | None = None  # of the record that caused it (for latency metrics)
    rows: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), dtype=np.uint64))
    sketch: Sketch | None = None  # an add to the cluster shard: the version's sketch
    chunks: Chunks = NO_CHUNKS  # an add: the version's chunks this shard owns

    def encode(self) -> bytes:
        return pack({"k": self.kind, "d": self.docno, "s": self.server, "u": self.url,
                     "t": self.fetched_at},
                    [self.grams, self.rows.reshape(-1), _sketch_array(self.sketch),
                     *_chunk_arrays(self.chunks)])

    @classmethod
    def decode(cls, raw: bytes) -> GramsMsg:
        h, arrays = unpack(raw)
        if h["k"] not in ("add", "withdraw", "label"):
            raise MessageError(f"unknown grams message kind {h['k']!r}")
        rows = arrays[1].reshape(-1, 4) if len(arrays) > 1 else np.zeros((0, 4), np.uint64)
        return cls(h["k"], h["d"], arrays[0], h["s"], h["u"], h.get("t"), rows,
                   _sketch_of(arrays, 2), _chunks_of(arrays, 3))


@dataclass
class DeltasMsg:
    deltas: list[Delta]
    names: dict[int, tuple[str, str]] = field(default_factory=dict)
    times: dict[str, float] = field(default_factory=dict)  # cause URL -> its fetched_at
    links: list[Link] = field(default_factory=list)  # SPEC §7 (engine.sentence_postings)
    clusters: list[ClusterRow] = field(default_factory=list)  # SPEC §6 (engine.clusters)
    # SPEC §8, to the site shard only (never held for pages not applied: engine.site_parts)
    shares: np.ndarray = field(default_factory=lambda: np.zeros((0, SHARE_COLUMNS), np.uint64))
    parts: list[SitePart] = field(default_factory=list)
    shares_cause: str = ""  # the newest page of the gram shard's batch that made the shares
    # SPEC §10, pair moves (url, other, paired) to every doc shard: read from messages of
    # pipeline format shards-9, which sent them instead of pair records (engine.score_replica)
    moves: list[tuple[str, str, bool]] = field(default_factory=list)
    # SPEC §10, to every doc shard: owned partners of URLs whose pairs moved
    # (engine.pair_records)
    pairs: PairRecords | None = None
    # SPEC §10, to every doc shard: the labels topic's labels (id, URL, verdict), and a doc
    # shard's examples for the model they train (engine.spam_labels)
    labels: list[ForwardedLabel] = field(default_factory=list)
    labels_docs: int = 0  # where the doc shard's docs partition ended when they were sent
    examples: Examples | None = None

    def __len__(self) -> int:
        """Its items: deltas, links and cluster rows (not the site shard's rows)."""
        return len(self.deltas) + len(self.links) + len(self.clusters)

    def where(self, keep: Callable[[int], bool]) -> DeltasMsg:
        """Its deltas, links and cluster rows whose target `keep` accepts (no names or
        times: what a doc shard holds for pages not applied yet, or applies now)."""
        return DeltasMsg([d for d in self.deltas if keep(d.target)],
                         links=[ln for ln in self.links if keep(ln.target)],
                         clusters=[r for r in self.clusters if keep(r.target)])

    def by_target(self) -> dict[int, DeltasMsg]:
        """Its items grouped by target, each group in its order."""
        per: dict[int, DeltasMsg] = {}
        for d in self.deltas:
            per.setdefault(d.target, DeltasMsg([])).deltas.append(d)
        for ln in self.links:
            per.setdefault(ln.target, DeltasMsg([])).links.append(ln)
        for r in self.clusters:
            per.setdefault(r.target, DeltasMsg([])).clusters.append(r)
        return per

    def extend(self, other: DeltasMsg) -> None:
        """Its items followed by `other`'s."""
        self.deltas.extend(other.deltas)
        self.links.extend(other.links)
        self.clusters.extend(other.clusters)

    def encode(self) -> bytes:
        """Rows (target, op, list, arg, cause) as one u64 array, five per delta: thousands
        of deltas a message in a stream of small rounds, too many for JSON. A passage's
        holders share one list of its grams (engine.postings), so each distinct list is
        written once and rows name it; a GAIN's holders (a tuple a gram) are written as
        runs of one tuple, the passage's grams sharing theirs, and its arg is the count of
        its runs."""
        causes: dict[str, int] = {}
        rows, holders, runs = [], [], []
        lists: dict[int, int] = {}  # id of a gram list -> its number (deltas keep them alive)
        grams: list[list[int]] = []
        for t, op, gs, arg, cause in self.deltas:
            c = causes.setdefault(cause, len(causes))
            at = lists.get(id(gs))
            if at is None:
                at = lists[id(gs)] = len(grams)
                grams.append(gs)
            if op == GAIN:
                rows.extend((t, op, at, _holder_runs(arg, runs, holders), c))
            else:
                rows.extend((t, op, at, arg or 0, c))
        heads, link_rows = [], []
        for t, op, partner, lrows, cause in self.links:
            heads.extend((t, op, partner, len(lrows), causes.setdefault(cause, len(causes))))
            link_rows.append(lrows.reshape(-1))
        ids: dict[str, int] = {}
        crows = []
        for r in self.clusters:
            crows.extend((r.target, r.size, r.exact_dups, r.stamp,
                          causes.setdefault(r.cause, len(causes)),
                          ids.setdefault(r.cluster, len(ids))))
        urls: dict[str, int] = {}
        prows = []
        for p in self.parts:
            prows.extend((p.docno, p.stamp, p.n_patch, p.n_grams, p.quilted,
                          causes.setdefault(p.cause, len(causes)),
                          urls.setdefault(p.url, len(urls))))
        names = [[d, s, u] for d, (s, u) in self.names.items()]
        head = {"k": "deltas", "n": names, "i": list(ids), "u": list(urls)}
        if self.shares_cause:
            head["s"] = causes.setdefault(self.shares_cause, len(causes))
        if self.moves:
            head["m"] = [[u, o, int(paired)] for u, o, paired in self.moves]
        if self.pairs is not None:
            head["p"] = self.pairs.to_json()
        if self.labels:
            head["l"] = [list(label) for label in self.labels]
            head["ld"] = self.labels_docs
        if self.examples is not None:
            head["x"] = self.examples.to_json()
        head |= {"c": list(causes), "t": [self.times.get(c) for c in causes]}
        return pack(head,
                    [np.fromiter(chain.from_iterable(grams), dtype=np.uint64,
                                 count=sum(map(len, grams))),
                     np.fromiter(map(len, grams), dtype=np.uint64, count=len(grams)),
                     np.asarray(holders, dtype=np.uint64), np.asarray(rows, dtype=np.uint64),
                     np.asarray(heads, dtype=np.uint64),
                     np.concatenate(link_rows) if link_rows else np.zeros(0, np.uint64),
                     np.asarray(crows, dtype=np.uint64),
                     self.shares.astype(np.uint64).reshape(-1),
                     np.asarray(prows, dtype=np.uint64), np.asarray(runs, dtype=np.uint64)])

    @classmethod
    def decode(cls, raw: bytes) -> DeltasMsg:
        return cls.from_parts(*unpack(raw))

    @classmethod
    def from_parts(cls, h: dict, arrays: list[np.ndarray]) -> DeltasMsg:
        if h.get("k") != "deltas":
            raise MessageError(f"not a deltas message (kind {h.get('k')!r})")
        causes = h["c"]
        deltas = (_deltas_v3(arrays, causes) if h.get("v", 1) >= 3
                  else _deltas_v2(h, arrays, causes))
        times = {c: t for c, t in zip(causes, h.get("t") or [None] * len(causes), strict=True)
                 if t is not None}
        return cls(deltas, {d: (s, u) for d, s, u in h["n"]}, times,
                   _links(arrays[4:6], causes) if len(arrays) >= 6 else [],
                   _cluster_rows(arrays[6], causes, h["i"]) if len(arrays) >= 7 else [],
                   *_site_rows(arrays, causes, h.get("u", [])),
                   causes[h["s"]] if "s" in h else "",
                   [(u, o, bool(paired)) for u, o, paired in h.get("m", [])],
                   PairRecords.from_json(h["p"]) if "p" in h else None,
                   [(int(i), str(u), str(v)) for i, u, v in h.get("l", [])],
                   int(h.get("ld", 0)),
                   Examples.from_json(h["x"]) if "x" in h else None)


def _holder_runs(holders: list[tuple[int, ...]], runs: list[int], flat: list[int]) -> int:
    """Append a GAIN's holders as runs (length, tuple size) to `runs`, each run's tuple
    once to `flat`; return the number of runs. Consecutive grams of a passage share one
    tuple object, so identity finds the runs without comparing tuples."""
    n, last = 0, None
    for h in holders:
        if last is not None and (h is last or h == last):
            runs[-2] += 1
            continue
        runs.extend((1, len(h)))
        flat.extend(h)
        last = h
        n += 1
    return n


def _deltas_v3(arrays: list[np.ndarray], causes: list[str]) -> list[Delta]:
    """Deltas of a version-3 message: each distinct gram list decoded once and shared by
    the rows that name it (as the gram role made them: engine.postings), a GAIN's holder
    tuples expanded from their runs, one tuple object a run."""
    glist, lens, flat = arrays[0].tolist(), arrays[1].tolist(), arrays[2].tolist()
    lists, off = [], 0
    for n in lens:
        lists.append(glist[off : off + n])
        off += n
    rows = arrays[3].tolist()
    runs = arrays[9].tolist() if len(arrays) > 9 else []
    if len(rows) % 5 or len(runs) % 2 or off != len(glist):
        raise MessageError("deltas of a deltas message are cut short")
    deltas, ri, hi = [], 0, 0
    for i in range(0, len(rows), 5):
        t, op, at, arg, c = rows[i : i + 5]
        gs = lists[at]
        if op == GAIN:
            tuples: list[tuple[int, ...]] = []
            for _ in range(arg):
                r, k = runs[ri], runs[ri + 1]
                ri += 2
                tuples += repeat(tuple(flat[hi : hi + k]), r)
                hi += k
            if len(tuples) != len(gs):
                raise MessageError("a GAIN's holders and grams differ in number")
            arg = tuples
        elif op == LOSE:
            arg = None
        deltas.append(Delta(t, op, gs, arg, causes[c]))
    return deltas


def _deltas_v2(h: dict, arrays: list[np.ndarray], causes: list[str]) -> list[Delta]:
    """Deltas of a version 1 or 2 message (grams written per delta, a GAIN's holders per
    gram): still read, from topics and outboxes written before version 3."""
    grams, counts, holders = arrays[:3]
    glist, clist, hlist = grams.tolist(), counts.tolist(), holders.tolist()
    if "r" in h:  # version 1
        rows = h["r"]
    else:
        flat = arrays[3].tolist()
        rows = [flat[i : i + 5] for i in range(0, len(flat), 5)]
    deltas, gi, ci, hi = [], 0, 0, 0
    for t, op, n, arg, c in rows:
        gs = glist[gi : gi + n]
        gi += n
        if op == GAIN:
            arg = []
            for k in clist[ci : ci + n]:
                arg.append(tuple(hlist[hi : hi + k]))
                hi += k
            ci += n
        elif op == LOSE:
            arg = None
        deltas.append(Delta(t, op, gs, arg, causes[c]))
    return deltas


def _links(arrays: list[np.ndarray], causes: list[str]) -> list[Link]:
    """Links from their heads (target, op, partner, rows, cause) and their rows."""
    heads = arrays[0].tolist()
    rows = arrays[1].reshape(-1, 4)
    out, at = [], 0
    for i in range(0, len(heads), 5):
        t, op, partner, n, c = heads[i : i + 5]
        out.append(Link(t, op, partner, rows[at : at + n], causes[c]))
        at += n
    return out


def _site_rows(arrays: list[np.ndarray], causes: list[str], urls: list[str]
               ) -> tuple[np.ndarray, list[SitePart]]:
    """The site shard's shares (array 7) and parts (array 8); none in older messages."""
    if len(arrays) < 9:
        return np.zeros((0, SHARE_COLUMNS), np.uint64), []
    if len(arrays[7]) % SHARE_COLUMNS or len(arrays[8]) % 7:
        raise MessageError("site rows of a deltas message are cut short")
    v = arrays[8].tolist()
    parts = [SitePart(v[i], v[i + 1], urls[v[i + 6]], v[i + 2], v[i + 3], bool(v[i + 4]),
                      causes[v[i + 5]]) for i in range(0, len(v), 7)]
    return arrays[7].reshape(-1, SHARE_COLUMNS), parts


def _cluster_rows(flat: np.ndarray, causes: list[str], ids: list[str]) -> list[ClusterRow]:
    """Cluster rows from their (target, size, exact_dups, stamp, cause, id) sextuples."""
    v = flat.tolist()
    return [ClusterRow(v[i], ids[v[i + 5]], v[i + 1], v[i + 2], v[i + 3], causes[v[i + 4]])
            for i in range(0, len(v), 6)]


@dataclass
class ShownMsg:
    """URL -> [seq, digest] of its newest event of one doc-shard round (the event's seq
    and what it shows: events.shown_state), and the round's events as sent (JSON text,
    `at` included). The record leaves before the events: a new owner that reads it may
    send them again, exact repeats, where their owner died before sending them. Rounds
    of different owners may reach the partition out of order; the seq tells which is
    newer. Records of an older format carry no events ("e" absent)."""

    shown: dict[str, list]
    events: list[str] = field(default_factory=list)

    def encode(self) -> bytes:
        return pack({"k": "shown", "s": self.shown, "e": self.events}, [])

    @classmethod
    def from_parts(cls, h: dict, arrays: list[np.ndarray]) -> ShownMsg:
        if h.get("k") != "shown" or not isinstance(h.get("s"), dict):
            raise MessageError(f"not a shown message (kind {h.get('k')!r})")
        events = h.get("e", [])
        if not isinstance(events, list) or not all(isinstance(e, str) for e in events):
            raise MessageError("a shown message's events are not a list of JSON texts")
        return cls(h["s"], events)


def decode_doc_input(raw: bytes) -> DeltasMsg | ShownMsg:
    """A record of a doc shard's deltas partition: gram shards' deltas, or the shard's own
    record of what it showed."""
    h, arrays = unpack(raw)
    return (ShownMsg if h.get("k") == "shown" else DeltasMsg).from_parts(h, arrays)


_OUT = struct.Struct("<BII")


def pack_outbox(messages: list[tuple[int, int, bytes]]) -> bytes:
    """A batch's outgoing messages, (topic code, partition, value) each, as one value: a
    shard commits them with its state and sends them after (engine.shard_step), so
    nothing it committed can be lost, and a crash between the two only sends them again."""
    return b"".join(_OUT.pack(t, p, len(v)) + v for t, p, v in messages)


def unpack_outbox(raw: bytes | None) -> list[tuple[int, int, bytes]]:
    out, off = [], 0
    while raw and off < len(raw):
        t, p, n = _OUT.unpack_from(raw, off)
        off += _OUT.size
        out.append((t, p, raw[off : off + n]))
        off += n
    return out
