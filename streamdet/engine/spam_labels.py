"""The spam team's labels on a Kafka pipeline's doc shards (SPEC §10): each page's own
verdict, and the model the labels train, in every doc shard's state, as `streamdet label`
stores them in a `streamdet run` state (engine.spam_model's `W` and `V<url>`), so that
the events are scored alike in both modes.

The labels travel on the labels topic (the review desk's judgements and `streamdet label
--broker` alike); the worker that holds it forwards each label, numbered by its offset,
to every doc shard's deltas partition (`DeltasMsg.labels`). A doc shard applies them in
that order, each once (`apply_labels`): the newest verdict of each of its own URLs.

Training needs the signals of every labelled live page, and each doc shard holds only
its own pages. So a doc shard that applied labels up to label n sends every doc shard,
itself included, its *examples* for n: the signals of its own live pages judged spam or
not spam, on the state its round leaves (`own_examples`), once it has applied its docs
partition up to where it ended when label n was forwarded (`due`): the examples are of
the pages that were there then, whichever owner and batching apply the label. Every
doc shard keeps what it
receives and, once it holds all P doc shards' examples for a label, trains the model from
them all (engine.spam_training, in URL order: the same examples give the same weights in
every doc shard) and stores it (`keep_examples`). A doc shard that applies several labels
in one round sends examples for the newest only; a label some shard skipped is never
complete, and the newest label every shard sent examples for is the one that counts.

Why through the deltas partitions, the shard's own included: a doc shard's model is then
a function of its deltas partition alone, which a rebuild replays (it sends nothing and
its examples go nowhere), so a rebuilt shard stores the model it had. A new owner that
redoes a round after the group's commit sends again the examples its last owner sent,
found in its partition (engine.shards.sent_examples), so every doc shard keeps the same
ones. Where its last owner's never reached it, it sends its own, stamped with its seq,
which ranks them above the last owner's: the newer replaces the older wherever both
arrive, and the model of that label is trained again, so every doc shard ends with the
model of the same examples.

Records (table `chunks`, beside `W` and `V<url>`): `N` the newest label applied, `O` the
label whose examples the shard owes and the docs offset they wait for, `T` the label
whose examples trained the stored model, `X<label><doc shard>` the examples a doc shard
sent for a label not yet passed by `T` (stamp, then the examples as JSON)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .keyed import KeyedRecords, key_u64, prefix_end, u64key
from .spam_model import VERDICTS, Model, judged, store_model, verdict_code, verdict_key
from .spam_score import Inputs, page_signals
from .spam_training import model_from
from .transaction import Transaction

APPLIED = b"N"  # the newest label applied (its id: offset on the labels topic + 1)
TRAINED = b"T"  # the label whose examples trained the stored model
EXAMPLES = b"X"  # + label + doc shard -> stamp, examples
OWED = b"O"  # the label whose examples this shard owes, and the docs offset they wait for
_STAMP = struct.Struct("<Q")
_OWED = struct.Struct("<QQ")

ForwardedLabel = tuple[int, str, str]  # (id, URL, verdict) of a label forwarded to doc shards


@dataclass(frozen=True)
class Examples:
    """What a doc shard's own labelled live pages teach once it applied labels up to
    `label`: (URL, is spam, signal values) each. `stamp` ranks a new owner's above its
    last owner's (the round's seq)."""

    label: int
    shard: int
    stamp: int
    pages: tuple[tuple[str, bool, tuple[float, ...]], ...]

    def to_json(self) -> list:
        """A message header's field (floats as JSON keeps them: exactly)."""
        return [self.label, self.shard, self.stamp,
                [[url, int(spam), list(values)] for url, spam, values in self.pages]]

    @classmethod
    def from_json(cls, raw: list) -> Examples:
        label, shard, stamp, pages = raw
        return cls(int(label), int(shard), int(stamp), tuple(
            (str(url), bool(spam), tuple(float(v) for v in values))
            for url, spam, values in pages))


def label_of_record(raw: bytes | None, offset: int) -> ForwardedLabel | None:
    """The label a labels topic record at `offset` holds, as doc shards take it (id, URL,
    verdict), or None: a draw, or bytes of no label (the topic may hold anything, SPEC
    §9). The records are the review desk's (review.kafka_labels.label_record)."""
    try:
        obj = json.loads(raw or b"")
        fields = obj["label"] if obj.get("record") == "label" else None
        url, verdict = fields["url"], fields["verdict"]
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None
    if not (isinstance(url, str) and url and verdict in VERDICTS):
        return None
    return offset + 1, url, verdict


def apply_labels(chunks: KeyedRecords, forwarded: Iterable[tuple[list[ForwardedLabel], int]],
                 owns: Callable[[str], bool]) -> None:
    """Apply the labels not applied yet, each forwarded with where the shard's docs
    partition ended then (a label's id grows with its place on the labels topic; one
    forwarded again is passed over): each of this shard's URLs keeps its newest verdict
    (`unsure` keeps none). The shard then owes its examples for the newest label, due
    once it has applied its docs partition up to where it ended when that label was
    forwarded (`due`): the pages that were there then, whichever owner and batching
    applies the label."""
    forwarded = list(forwarded)
    if not forwarded:
        return
    raw = chunks.get(APPLIED)
    done = newest = key_u64(raw) if raw else 0
    docs = 0
    for labels, docs_end in forwarded:
        for label, url, verdict in labels:
            if label <= newest:
                continue
            newest, docs = label, docs_end
            if owns(url):
                chunks.put(verdict_key(url), verdict_code(verdict))
    if newest > done:
        chunks.put(APPLIED, u64key(newest))
        chunks.put(OWED, _OWED.pack(newest, docs))


def due(chunks: KeyedRecords, docs_applied: int) -> int:
    """The label whose examples the shard owes and can send now, its docs partition
    applied up to `docs_applied` (0: none); owed no more once returned."""
    raw = chunks.get(OWED)
    if raw is None:
        return 0
    label, docs = _OWED.unpack(raw)
    if docs_applied < docs:
        return 0
    chunks.put(OWED, None)
    return label


def own_examples(txn: Transaction, inputs: Inputs, label: int, shard: int, stamp: int
                 ) -> Examples:
    """A doc shard's examples for `label`: its live pages with a stored verdict of spam
    or not spam, and their signals on the state as it is (read through `inputs`, the
    shard's copies of what other shards hold)."""
    pages = {url: v for url, v in judged(txn.chunks).items() if txn.url_entry(url) is not None}
    found = page_signals(txn, inputs, list(pages))
    return Examples(label, shard, stamp, tuple(
        (url, verdict == "spam", found[url].values) for url, verdict in pages.items()))


def keep_examples(chunks: KeyedRecords, received: Iterable[Examples], shards: int) -> None:
    """Keep the examples doc shards sent (a newer stamp replaces an older one of the same
    label and shard; a label older than the trained one is passed over), and store the
    model of the newest label whose examples every doc shard has sent."""
    received = list(received)
    if not received:
        return
    raw = chunks.get(TRAINED)
    trained = start = key_u64(raw) if raw else 0
    retrain = False
    for ex in received:
        if ex.label < trained or not _newer(chunks, ex):
            continue
        chunks.put(_examples_key(ex.label, ex.shard),
                   _STAMP.pack(ex.stamp) + json.dumps(ex.to_json()).encode())
        if ex.label > trained and len(_examples(chunks, ex.label)) == shards:
            trained = ex.label
        retrain |= ex.label == trained
    if not retrain:
        return
    if trained > start:
        for key, _ in chunks.scan(EXAMPLES, _examples_key(trained, 0)):
            chunks.put(key, None)
        chunks.put(TRAINED, u64key(trained))
    store_model(chunks, trained_model(chunks, trained))


def trained_model(chunks: KeyedRecords, label: int) -> Model:
    """The model every doc shard's examples for `label` train."""
    return model_from((url, values, spam) for ex in _examples(chunks, label)
                      for url, spam, values in ex.pages)


def _newer(chunks: KeyedRecords, ex: Examples) -> bool:
    raw = chunks.get(_examples_key(ex.label, ex.shard))
    return raw is None or _STAMP.unpack_from(raw)[0] < ex.stamp


def _examples(chunks: KeyedRecords, label: int) -> list[Examples]:
    prefix = EXAMPLES + u64key(label)
    return [Examples.from_json(json.loads(raw[_STAMP.size :]))
            for _, raw in chunks.scan(prefix, prefix_end(prefix))]


def _examples_key(label: int, shard: int) -> bytes:
    return EXAMPLES + u64key(label) + u64key(shard)
