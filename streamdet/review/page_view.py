"""A quilt as the review desk shows it (Najork's Figure 4: the quilt beside its sources):
`explain`'s page (its verdict, its text, each source's share and spans in it, its
cluster, its sites and neighbourhoods) and, per source, the passages of the source's own
text that the page copied.

A source's passages are the occurrences in the source's kept text of the patch grams it
newly covered in the page (the greedy's step, engine.evidence.newly_covered), located
as the page's spans are (engine.evidence.packed_spans: a donor's windows are cached, as
a farm's donors are the sources of many of its quilts), each shown in its sentence
(review.passages).

Two makers: `page_view` from a `streamdet run` state (embedded), `page_of_records` from
the pipeline's records (Kafka: the doc shards' states are the workers')."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..engine.evidence import newly_covered, packed_spans
from ..engine.grams import text_grams
from ..engine.messages import PageMsg
from ..engine.text import unpack_text
from ..reading.explain import Missing, explain_json, look_up, verdict_sentence
from ..state.txn import Store
from .passages import passages

NO_EVENT = "not quilted: no verdict event names this page (the pipeline sends them for quilts)"


def page_view(store: Store, url: str) -> dict | None:
    """The page of `url` with its sources' passages (None: the state has no such URL)."""
    page = look_up(store, url)
    if isinstance(page, Missing):
        return None
    view = explain_json(page)
    result = page.result
    if len(result.docnos) != len(result.sources):  # a result from before docnos were kept
        for src in view["sources"]:
            src["passages"] = None
        return view
    txn = store.begin()
    for src, docno, grams in zip(view["sources"], result.docnos,
                                 newly_covered(page.doc, result.docnos), strict=True):
        src["passages"] = _passages(txn.text(docno), page.params.k, grams)
    return view


def page_of_records(event: dict, page: PageMsg, sources: Sequence[PageMsg | None],
                    cluster: dict | None) -> dict:
    """A page view made of the pipeline's records alone: the newest verdict event (its
    figures, sources and spans, exact), the page's record (its text) and each source's
    record (its text), every record's grams sorted and unique; in `page_view`'s shape.

    A source's passages are the occurrences in its text of the grams it shares with the
    page and no earlier source does: the greedy's Cᵢ with "shared" for "patch" (a gram
    of more than m documents, a patch gram of none, may show here). The figures a state
    alone holds (foreign patch grams, the page's sites and neighbourhoods), and those of
    a page no verdict event names (its patch fraction and grams), are None."""
    params = event.get("params") or {}
    k = int(params.get("k") or 0)
    page_grams = _grams(page, k)
    taken = np.empty(0, dtype=page_grams.dtype)
    shown = []
    for src, rec in zip(event.get("sources") or [], sources, strict=True):
        entry = dict(src)
        entry["passages"] = None
        if rec is not None and k:
            shared = np.setdiff1d(np.intersect1d(page_grams, _grams(rec, k), assume_unique=True),
                                  taken, assume_unique=True)
            taken = np.union1d(taken, shared)
            entry["passages"] = _passages(rec.text, k, shared)
        shown.append(entry)
    n_patch = event.get("n_patch_grams") or 0
    counted = sum(1 for s in shown if (s.get("grams") or 0) >= params.get("phi", 0) * n_patch)
    fraction = event.get("patch_fraction")
    cluster = cluster or {}
    return {
        "url": page.url, "server": page.server, "n_grams": event.get("n_grams"),
        "n_patch_grams": n_patch, "patch_fraction": fraction, "foreign_patch_grams": None,
        "sources": shown, "counted": counted, "quilted": bool(event.get("quilted")),
        "verdict": NO_EVENT if fraction is None else verdict_sentence(
            bool(event.get("quilted")), fraction < params.get("theta", 0.0),
            counted < params.get("c", 0)),
        "seq": event.get("seq"), "pop": None, "sites": None, "contains": None,
        "chunks": None, "neighbourhoods": None, "params": params, "partials": None,
        "cluster": cluster.get("cluster"), "cluster_size": cluster.get("cluster_size"),
        "text": unpack_text(page.text),
    }


def _passages(packed: bytes | None, k: int, grams: np.ndarray) -> list[dict] | None:
    """Where `grams` occur in a packed text, as passages to read (review.passages; None:
    no text kept)."""
    found = packed_spans(packed, k, [grams])
    if found is None:
        return None
    return passages(unpack_text(packed) or "", found[0])


def _grams(record: PageMsg, k: int) -> np.ndarray:
    """A docs record's grams, sorted and unique: as written before the records stopped
    carrying them, else its kept text hashed again (grams.text_grams) - none without k."""
    if len(record.grams) or not record.n_grams or not k:
        return record.grams
    grams = text_grams(record.text, k)
    return record.grams if grams is None else grams
