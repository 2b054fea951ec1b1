"""Informed discovery on a `streamdet run` state (SPEC §8): the paragraph chunks a user
labels join the labelled set L for good, and the `site` events of the neighbourhoods
this makes (or unmakes) bad are written where the run's events go. The engine decides
(Engine.label); this adapter opens the state, names the chunks of a page it holds,
stamps and writes the events and commits. On a Kafka pipeline the labels travel to the
gram shards instead (adapters.publish.send_labels)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.core import Engine
from ..engine.labelled import doc_chunks
from ..engine.params import Params
from ..state.txn import Store
from .outputs import JsonlSink, utc_now


@dataclass(frozen=True)
class Labelled:
    """What a labelling did: chunks new to L, chunks given, events written."""

    fresh: int
    keys: int
    events: int


def label_chunks(store: Store, keys: np.ndarray | None, what: str, events: str | None
                 ) -> Labelled:
    """Label `keys` (None: the chunks of the page whose URL is `what`) in the state and
    write the resulting events to `events` (a path, or None for stdout). Raises
    LookupError when the state does not hold that page, and SinkError when the events
    cannot be written; nothing is committed then."""
    params = Params.from_fingerprint(store.meta("params"))
    txn = store.begin()
    if keys is None:
        entry = txn.url_entry(what)
        if entry is None:
            raise LookupError(f"{what} is not in this state")
        keys = doc_chunks(txn, entry[0]).keys
    made, fresh = Engine(params).label(txn, keys, what)
    sink = JsonlSink(events, "events")
    try:
        at = utc_now()
        for ev in made:
            ev["at"] = at
            sink.write(ev)
        sink.flush()
    finally:
        sink.close()
    txn.commit()
    return Labelled(fresh, len(keys), len(made))
