"""A quilt as the review desk shows it (Najork's Figure 4: the quilt beside its sources):
`explain`'s page (its verdict, its text, each source's share and spans in it, its
cluster, its sites and neighbourhoods) and, per source, the passages of the source's own
text that the page copied.

A source's passages are the occurrences in the source's kept text of the patch grams it
newly covered in the page (the greedy's step, engine.evidence.newly_covered), located
as the page's spans are (engine.evidence.packed_spans: a donor's windows are cached, as
a farm's donors are the sources of many of its quilts), each with its text."""

from __future__ import annotations

from ..adapters.explain import Missing, explain_json, look_up
from ..engine.evidence import newly_covered, packed_spans
from ..engine.text import unpack_text
from ..state.txn import Store

PASSAGE_CHARS = 2000  # of a passage's text shown; its span says where the rest is


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
        packed = txn.text(docno)
        found = packed_spans(packed, page.params.k, [grams])
        if found is None:
            src["passages"] = None
            continue
        text = unpack_text(packed) or ""
        src["passages"] = [{"spans": [a, b], "text": text[a : min(b, a + PASSAGE_CHARS)]}
                           for a, b in found[0]]
    return view
