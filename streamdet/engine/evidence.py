"""Evidence of a quilt (SPEC §5): per cover source, its share of the page's patch grams
and the spans of the page's visible text that it newly covered.

A source's spans are the ranges of every occurrence (window) in the page of a patch gram
it newly covered, from its first token's start to its last token's end, merged where they
overlap or touch. The newly covered grams are the greedy's own steps replayed on the
document's slot masks (one AND per source); the occurrences come from the kept text,
tokenized and hashed again as analysis did it, so the same text gives the same grams,
with the offsets of the tokens read from the unfolded text. Computed only where shown
(events, dump, explain), never while scoring.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from .cover import replay
from .documents import DocResult, DocState
from .grams import token_hashes, window_hashes
from .text import unpack_text
from .tokens import token_spans

Spans = list[list[int]]
# Spans are located in a page's first EVIDENCE_MAX_CHARS code points: the scan runs on the
# engine thread for every event and dump row of the page, in time and memory linear in
# the text. Real pages average 27 k characters of visible text; a page past this (a 10 MB
# body) gets the spans of its first part, and its shares stay exact (docs/evidence.md).
EVIDENCE_MAX_CHARS = 1_000_000
WINDOWS_CACHE_BYTES = 32 << 20  # windows of recently shown texts (WindowsCache)


def newly_covered(doc: DocState, docnos: Sequence[int]) -> list[np.ndarray]:
    """The patch grams each cover source newly covered, in cover order (SPEC §5's Cᵢ),
    in slot order: the greedy's steps replayed on the document's pairs (cover.replay)."""
    step_of = replay(doc.cover_pairs(), len(doc.slots), docnos)[1]
    slots = np.frombuffer(doc.slots, dtype=np.uint64)
    order = np.argsort(step_of, kind="stable")
    bounds = np.searchsorted(step_of[order], np.arange(len(docnos) + 1))
    return [slots[order[a:b]] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def merged(starts: np.ndarray, ends: np.ndarray) -> Spans:
    """Ranges sorted by start with non-decreasing ends (windows in text order), merged
    where they overlap or touch."""
    if len(starts) == 0:
        return []
    cut = np.flatnonzero(starts[1:] > ends[:-1]) + 1
    first = np.concatenate(([0], cut))
    last = np.concatenate((cut - 1, [len(ends) - 1]))
    return [[int(a), int(b)] for a, b in zip(starts[first], ends[last], strict=True)]


def _owners(windows: np.ndarray, covered: Sequence[np.ndarray]) -> np.ndarray:
    """Per window, the index of the gram set that holds its hash (-1: none). The sets are
    disjoint (a gram is newly covered once), so one sorted lookup serves them all."""
    if not covered or len(windows) == 0:
        return np.full(len(windows), -1)
    grams = np.concatenate([np.asarray(g, dtype=np.uint64) for g in covered])
    labels = np.repeat(np.arange(len(covered)), [len(g) for g in covered])
    if len(grams) == 0:
        return np.full(len(windows), -1)
    order = np.argsort(grams, kind="stable")
    grams, labels = grams[order], labels[order]
    at = np.minimum(np.searchsorted(grams, windows), len(grams) - 1)
    return np.where(grams[at] == windows, labels[at], -1)


Windows = tuple[np.ndarray, np.ndarray, np.ndarray]  # window hashes, token starts, ends


def text_windows(text: str, k: int) -> Windows:
    """The k-token windows of `text` (its first EVIDENCE_MAX_CHARS code points), hashed
    as analysis hashed them, with the offsets of the tokens. A text cut at
    EVIDENCE_MAX_CHARS loses its last token, which the cut may have shortened into
    another word."""
    tokens, starts, ends = token_spans(text[:EVIDENCE_MAX_CHARS])
    if len(text) > EVIDENCE_MAX_CHARS and tokens:
        tokens = tokens[:-1]
    return window_hashes(token_hashes(tokens), k), starts, ends


class WindowsCache:
    """The windows of recently shown texts, by their packed bytes, within a byte budget:
    a quilted page is shown again each time its cover changes (on the replayed real
    pages, 1,421 quilt and rescore events went to 519 pages), and tokenizing and hashing
    its text is most of what its evidence costs."""

    def __init__(self, budget: int = WINDOWS_CACHE_BYTES) -> None:
        self.budget = budget
        self.bytes = 0
        self._items: OrderedDict[tuple, tuple[Windows, int]] = OrderedDict()

    def get(self, packed: bytes, k: int) -> Windows | None:
        """The windows of a packed text (None: it keeps no text)."""
        key = (packed, k, EVIDENCE_MAX_CHARS)
        hit = self._items.get(key)
        if hit is not None:
            self._items.move_to_end(key)
            return hit[0]
        text = unpack_text(packed)
        if text is None:
            return None
        windows = text_windows(text, k)
        size = len(packed) + sum(a.nbytes for a in windows)
        if size <= self.budget // 4:  # a giant page is not worth the room it takes
            self._items[key] = (windows, size)
            self.bytes += size
            while self.bytes > self.budget:
                _, (_, freed) = self._items.popitem(last=False)
                self.bytes -= freed
        return windows


_CACHE = WindowsCache()


def source_spans(text: str, k: int, covered: Sequence[np.ndarray]) -> list[Spans]:
    """For each set of grams, the merged ranges of its occurrences in `text` (in its
    first EVIDENCE_MAX_CHARS code points; see text_windows)."""
    return _spans(text_windows(text, k), k, covered)


def packed_spans(packed: bytes | None, k: int, covered: Sequence[np.ndarray]
                 ) -> list[Spans] | None:
    """`source_spans` of a packed text, its windows taken from the cache (None: no text
    kept): a farm's donors are the sources of many of its quilts, and a reviewer going
    through them tokenizes each donor once."""
    found = _CACHE.get(packed, k) if packed else None
    return None if found is None else _spans(found, k, covered)


def _spans(found: Windows, k: int, covered: Sequence[np.ndarray]) -> list[Spans]:
    """Each gram set's merged ranges: the windows grouped by owner with one stable sort
    (text order kept within a group), so the cost is the windows' and not their number
    times the sets' (a page with thousands of sources)."""
    windows, starts, ends = found
    owner = _owners(windows, covered)
    hit = np.flatnonzero(owner >= 0)
    hit = hit[np.argsort(owner[hit], kind="stable")]
    bounds = np.searchsorted(owner[hit], np.arange(len(covered) + 1))
    return [merged(starts[hit[a:b]], ends[hit[a:b] + k - 1])
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def evidence(result: DocResult, doc: DocState, packed_text: bytes | None,
             k: int) -> list[dict]:
    """The sources of `result` as events, `dump` and `explain` show them: url, grams,
    share of the patch grams, and spans (None where the page's text was not kept: a
    document from a state written before texts were)."""
    found = _CACHE.get(packed_text, k) if packed_text else None
    n_patch = doc.n_patch
    spans: list[Spans | None]
    if found is None or len(result.docnos) != len(result.sources):  # (or a legacy result)
        spans = [None] * len(result.sources)
    else:
        spans = _spans(found, k, newly_covered(doc, result.docnos))
    return [{"url": u, "grams": n, "share": n / n_patch if n_patch else 0.0, "spans": sp}
            for (u, n), sp in zip(result.sources, spans, strict=True)]
