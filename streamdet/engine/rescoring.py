"""Re-scoring the documents a batch changed, and the events that result (SPEC §3).

Shared by the embedded engine and the doc shards: each document marked dirty is scored
once against the state after the whole batch, compared with its last result, and a
change a consumer cares about becomes an event with the URL's next sequence number.
"""

from __future__ import annotations

from collections.abc import Callable

from ..state.schema import Cover
from .docs import Dirty, DocRole
from .events import change_kind, make_event


def rescore(role: DocRole, txn, dirty: Dirty, before: dict[int, Cover],
            next_seq: Callable[[int], int], announce: bool = False) -> list[dict]:
    """Score every dirty document; return the events. `before` holds the last result of
    re-fetched URLs (by their new docno); `next_seq(seq)` gives an event's seq from the
    URL's last one (the embedded engine counts, doc shards use their input offsets).

    With `announce`, a document that did not change gets an event too: its current state
    as `rescore` (quilted) or `unquilt` (not). A doc shard's new owner needs this while it
    redoes what the last owner did after the group's last commit: that owner's events of
    those rounds are out, and may show states this owner, batching differently, never
    passes through (a page quilted and unquilted again within one of its batches)."""
    events = []
    for docno, touch in dirty.items():
        doc = txn.doc(docno)
        if doc is None:
            continue
        prev = before.get(docno, doc.result)
        # exact: an event shows the cover if the last one shown was quilted or if announcing
        result = role.score(txn, doc, touch, exact=announce or prev.quilted)
        doc.result = result
        txn.touch_doc(docno)
        kind = change_kind(prev, result)
        if kind is None:
            if not announce:
                continue
            kind = "rescore" if result.quilted else "unquilt"
        url = txn.url_of(docno)
        _, seq = txn.url_entry(url)
        seq = next_seq(seq)
        txn.put_url(url, docno, seq)
        events.append(make_event(kind, url, seq, result, touch.cause, role.params))
    return events
