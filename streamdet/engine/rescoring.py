"""Re-scoring the documents a batch changed, and the events that result (SPEC §3).

Shared by the embedded engine and the doc shards: each document marked dirty is scored
once against the state after the whole batch, compared with its last result, and a
change a consumer cares about becomes an event with the URL's next sequence number.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping

from .doc_role import Dirty, DocRole
from .documents import DocResult
from .events import change_kind, make_event, shown_change, shown_state
from .evidence import evidence


def rescore(role: DocRole, txn, dirty: Dirty, before: dict[int, DocResult],
            next_seq: Callable[[int], int],
            shown: MutableMapping[str, str] | None = None) -> list[dict]:
    """Score every dirty document; return the events. `before` holds the last result of
    re-fetched URLs (by their new docno); `next_seq(seq)` gives an event's seq from the
    URL's last one (the embedded engine counts, doc shards use their input offsets).

    Events compare a result with the document's last one, unless `shown` is given: then
    they compare it with what consumers were last shown of the URL (events.shown_state
    digests by URL; a URL not in it was last shown its last result here), and `shown` is
    updated. A doc shard's new owner needs this while it redoes what the last owner did
    after the group's last commit: that owner's events of those rounds are out, and may
    show states this owner, batching differently, never passes through (a page quilted
    and unquilted again within one of its batches). Then every dirty document is scored;
    else those that only took pending additions are not: their stale result stands
    (DocRole.score would return it), and they are left unread."""
    events = []
    if shown is None:  # a document that only took pending additions keeps its result
        dirty = {d: touch for d, touch in dirty.items() if not touch.pending}
    txn.load_docs(dirty)
    if shown is not None:
        txn.load_names(dirty)
    for docno, touch in dirty.items():
        doc = txn.doc(docno)
        if doc is None:
            continue
        prev = before.get(docno, doc.result)
        url = txn.url_of(docno) if shown is not None else None
        last = ""
        if url is not None:  # the digest of prev only where no record says what was shown
            last = shown[url] if url in shown else shown_state(prev)
        # exact: an event shows the cover if the last one shown was quilted
        result = role.score(txn, doc, touch, exact=prev.quilted or bool(last))
        doc.result = result  # the same object when unchanged: not rewritten (DocState)
        txn.touch_doc(docno)
        if url is None:
            kind = change_kind(prev, result)
        else:
            now = shown_state(result)
            kind = shown_change(last, now)
            shown[url] = now
        if kind is None:
            continue
        url = url or txn.url_of(docno)
        _, seq = txn.url_entry(url)
        seq = next_seq(seq)
        txn.put_url(url, docno, seq)
        sources = evidence(result, doc, txn.text(docno), role.params.k)
        events.append(make_event(kind, url, seq, result, touch.cause, role.params, sources))
    return events
