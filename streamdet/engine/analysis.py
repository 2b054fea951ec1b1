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
from .text import visible_text
from .tokens import tokenize


@dataclass(frozen=True)
class Analyzed:
    url: str
    server: str
    grams: np.ndarray  # sorted distinct uint64 gram hashes
    fetched_at: float | None = None
    implausible_time: bool = False  # a fetched_at was given but read as absent


def page_text(page: Page) -> str:
    return page.text if page.text is not None else visible_text(page.html or "")


def analyze(page: Page, params: Params) -> Analyzed:
    grams = gram_set(tokenize(page_text(page)), params.k)
    return Analyzed(page.url, server_of(page.url, page.ip, params.foreign), grams,
                    page.fetched_at, page.implausible_time)
