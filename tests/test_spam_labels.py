"""The spam team's labels on a Kafka pipeline's doc shards (SPEC §10, engine.spam_labels),
without a broker: the labels topic's records as the workers forward them, verdicts applied
once each, examples owed until the pages they wait for are in, and the model of the newest
label every doc shard sent examples for, the same whatever order and repeats they came in.
The whole flow on the sharded simulation is tests/test_shards.py's; on real workers,
tests/test_kafka_pipeline.py's."""

from __future__ import annotations

import itertools
import json

from streamdet.engine.messages import DeltasMsg
from streamdet.engine.params import Params
from streamdet.engine.routing import url_shard
from streamdet.engine.shards import DocShard, label_forwards, sent_examples
from streamdet.engine.spam_labels import (
    Examples,
    apply_labels,
    due,
    keep_examples,
    label_of_record,
    trained_model,
)
from streamdet.engine.spam_model import blind, judged, stored_model
from streamdet.engine.spam_training import model_from
from streamdet.review.kafka_labels import draw_record, label_record
from streamdet.review.labels import Label
from streamdet.state.kv import MemoryKV
from streamdet.state.txn import Store

A, B, C = "http://a.example/1", "http://b.example/2", "http://c.example/3"


def _chunks():
    return Store(MemoryKV()).begin().chunks


def _examples(label: int, shard: int, stamp: int, *pages) -> Examples:
    return Examples(label, shard, stamp, tuple(
        (url, spam, (0.1 * i, 0.3, 0.0, 0.5, 1.0, 0.9, 0.25, 0.0, 1 / 3))
        for i, (url, spam) in enumerate(pages, 1)))


def test_the_labels_topic_records_as_the_workers_take_them():
    """A judgement the desk writes is a label numbered by its offset, as the desk numbers
    it; draws, foreign bytes and labels of no verdict are passed over."""
    label = Label(A, "not_spam", "ana", "2026-01-01T00:00:00Z", "a plan", {"k": 5}, "article")
    assert label_of_record(label_record(label), 41) == (42, A, "not_spam")
    for raw in (draw_record([A], 1, {}, "x"), b"", None, b"[1]", b"\xff",
                json.dumps({"record": "label", "label": {"url": A, "verdict": "maybe"}}).encode(),
                json.dumps({"record": "label", "label": {"url": "", "verdict": "spam"}}).encode()):
        assert label_of_record(raw, 0) is None


def test_labels_apply_once_each_and_owe_examples_until_their_pages_are_in():
    """Each label once, in order (one forwarded again is passed over): a shard keeps its
    own URLs' newest verdicts, `unsure` none; the examples of the newest label are due
    once the docs partition is applied up to where it ended when that label was sent."""
    chunks = _chunks()
    mine = {A, C}.__contains__
    apply_labels(chunks, [([(1, A, "spam"), (2, B, "spam")], 7)], mine)
    assert judged(chunks) == {A: "spam"} and due(chunks, 6) == 0
    apply_labels(chunks, [([(1, A, "not_spam"), (2, B, "not_spam")], 9),
                          ([(3, C, "not_spam"), (4, A, "unsure")], 8)], mine)
    assert judged(chunks) == {C: "not_spam"}
    assert due(chunks, 7) == 0 and due(chunks, 8) == 4 and due(chunks, 9) == 0  # owed once
    apply_labels(chunks, [([(2, A, "spam"), (4, C, "spam")], 12)], mine)  # sent again
    assert judged(chunks) == {C: "not_spam"} and due(chunks, 99) == 0


def test_the_model_is_that_of_the_newest_label_every_doc_shard_sent_examples_for():
    """Examples of a label train the model once all doc shards sent theirs; one shard's
    examples alone, or a label some shard passed over, train nothing; a newer stamp of
    the trained label retrains it; examples of an older label are passed over. Whatever
    the order, the stored model is the one the newest complete label's examples train."""
    sent = [_examples(1, 0, 10, (A, True)), _examples(1, 1, 11, (B, False)),
            _examples(3, 1, 30, (B, False), (C, True)), _examples(3, 0, 31),
            _examples(3, 1, 40, (B, False), (C, False)), _examples(2, 0, 20, (A, True))]
    want = model_from([(B, sent[4].pages[0][2], False), (C, sent[4].pages[1][2], False)])
    for order in itertools.permutations(sent):
        chunks = _chunks()
        for ex in order:
            keep_examples(chunks, [ex], 2)
        assert stored_model(chunks) == want, order
    chunks = _chunks()
    keep_examples(chunks, sent[:1], 2)
    assert stored_model(chunks) == blind()
    keep_examples(chunks, sent[1:2], 2)
    assert stored_model(chunks) == trained_model(chunks, 1) != blind()
    keep_examples(chunks, sent[2:], 2)
    assert stored_model(chunks) == want and [k[:9] for k, _ in chunks.scan(b"X", b"Y")] == [
        b"X" + (3).to_bytes(8, "big")] * 2  # older labels' examples are dropped


def test_labels_and_examples_travel_in_deltas_messages_to_the_bit():
    ex = _examples(5, 2, 1 << 41, (A, True), (B, False))
    m = DeltasMsg.decode(DeltasMsg([], labels=[(5, A, "spam"), (6, "http://ä/", "unsure")],
                                   labels_docs=17, examples=ex).encode())
    assert m.labels == [(5, A, "spam"), (6, "http://ä/", "unsure")] and m.labels_docs == 17
    assert m.examples == ex
    assert DeltasMsg.decode(DeltasMsg([]).encode()).examples is None


def test_a_new_owner_sends_its_last_owners_examples_again_rather_than_its_own():
    """A new owner that redoes the round in which its last owner applied a label sends
    the examples that owner sent (found in its deltas partition: the newest stamp of each
    label and shard), so every doc shard keeps the same; without them it sends its own."""
    url = next(u for i in range(100) if url_shard(u := f"http://x.example/{i}", 2) == 1)
    old = _examples(4, 1, 5, (url, True))
    records = [(0, DeltasMsg([], examples=_examples(4, 1, 3)).encode()),
               (1, DeltasMsg([], examples=old).encode()), (2, b"foreign bytes"),
               (3, DeltasMsg([], examples=_examples(4, 0, 9, (A, False))).encode())]
    sent = sent_examples(records)
    assert sent[(4, 1)] == old and sent[(4, 0)].stamp == 9
    for again, want in ((sent, old), (None, Examples(4, 1, 77, ()))):
        shard, txn = DocShard(Params(), 1, 2), Store(MemoryKV()).begin()
        forwarded = label_forwards([(4, url, "spam")], [0, 0])[1][1]
        shard.process(txn, [], [DeltasMsg.decode(forwarded)], 77, {}, 0, again)
        assert [DeltasMsg.decode(raw).examples for _, raw in shard.site_parts] == [want] * 2
