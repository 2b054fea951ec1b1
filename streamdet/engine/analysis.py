"""A page reduced to what the detector needs: its server and its gram set.

This is the unavoidable per-page work (parse, tokenize, hash) and the part that scales
across processes; everything after it touches shared state.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .chunks import NO_CHUNKS, Chunks, page_chunks
from .grams import gram_set, token_hashes, window_hashes
from .params import Params
from .records import Page
from .sentences import NONE, Sentences, split_sentences
from .servers import server_of
from .sketches import Sketch, sketch
from .sorting import sorted_unique
from .text import pack_text, visible_text
from .tokens import token_spans, tokenize


@dataclass(frozen=True)
class Analyzed:
    url: str
    server: str
    grams: np.ndarray  # sorted distinct uint64 gram hashes
    fetched_at: float | None = None
    implausible_time: bool = False  # a fetched_at was given but read as absent
    text: bytes = b""  # the visible text, packed (engine.text.pack_text): SPEC §5 evidence
    sentences: Sentences = NONE  # SPEC §7: keys and spans of its sentences
    sketch: Sketch | None = None  # SPEC §6: min-hashes, band keys, exact key
    chunks: Chunks = NO_CHUNKS  # SPEC §8: its paragraph chunks that are not stop chunks


def page_text(page: Page) -> str:
    return page.text if page.text is not None else visible_text(page.html or "")


def analyze(page: Page, params: Params, keep_text: bool = True) -> Analyzed:
    """Parse, tokenize, hash; pack the visible text to keep (SPEC §5), cut it into
    sentences (SPEC §7) and paragraph chunks (SPEC §8), and sketch it (SPEC §6, band
    keys included: they cost a hash per band and are made here, off the engine's
    process), unless `keep_text` is false (the benchmarks' floor: the work no detector
    can avoid)."""
    text = page_text(page)
    server = server_of(page.url, page.ip, params.foreign)
    if not keep_text:
        return Analyzed(page.url, server, gram_set(tokenize(text), params.k),
                        page.fetched_at, page.implausible_time)
    tokens, starts, ends = token_spans(text)
    hashes = token_hashes(tokens)
    grams = sorted_unique(window_hashes(hashes, params.k))
    sk = sketch(grams, hashes)
    sk.bands  # noqa: B018  (derived here, kept by pickling with the sketch)
    return Analyzed(page.url, server, grams, page.fetched_at, page.implausible_time,
                    pack_text(text), split_sentences(text, hashes, starts, ends, params.m), sk,
                    page_chunks(text, hashes, starts, params.stop_keys))
