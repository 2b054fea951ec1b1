"""A page reduced to what the detector needs: its server and its gram set.

This is the unavoidable per-page work (parse, tokenize, hash) and the part that scales
across processes; everything after it touches shared state.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .grams import gram_set
from .params import Params
from .records import Page
from .servers import server_of
from .text import pack_text, visible_text
from .tokens import tokenize


@dataclass(frozen=True)
class Analyzed:
    url: str
    server: str
    grams: np.ndarray  # sorted distinct uint64 gram hashes
    fetched_at: float | None = None
    implausible_time: bool = False  # a fetched_at was given but read as absent
    text: bytes = b""  # the visible text, packed (engine.text.pack_text): SPEC §5 evidence


def page_text(page: Page) -> str:
    return page.text if page.text is not None else visible_text(page.html or "")


def analyze(page: Page, params: Params, keep_text: bool = True) -> Analyzed:
    """Parse, tokenize, hash; and pack the visible text to keep (SPEC §5), unless
    `keep_text` is false (the benchmarks' floor: the work no detector can avoid)."""
    text = page_text(page)
    grams = gram_set(tokenize(text), params.k)
    return Analyzed(page.url, server_of(page.url, page.ip, params.foreign), grams,
                    page.fetched_at, page.implausible_time,
                    pack_text(text) if keep_text else b"")
