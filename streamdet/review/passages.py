"""A source's passages as a reviewer reads them: each in its sentence, not as fragments.

The spans where a source's text holds the grams it gave the page are exact but raw: a
copied paragraph broken by markup comes out as several spans a few characters apart, a
short one is a word or two ("Partners"), and the text between keeps the page's blank
lines. So spans of one source less than MERGE_GAP characters apart are shown as one
passage with each span marked in it; each passage gets up to CONTEXT characters of its
own text on either side, cut where a sentence begins or ends; runs of white space are
shown as one space; and the offsets are kept for whoever asks, not printed in the text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

MERGE_GAP = 80  # characters between two spans of one source shown in one passage
CONTEXT = 160  # characters of context at most on each side of a passage
PASSAGE_CHARS = 2000  # characters of a passage shown at most; its span says the rest

_SPACE = re.compile(r"\s+")
_SENTENCE_END = re.compile(r"[.!?。！？](?=\s)")


def passages(text: str, spans: Sequence[tuple[int, int]]) -> list[dict]:
    """The passages of `text` at `spans` (sorted, disjoint): each {"spans": [start, end)
    of the passage, "text": its text (PASSAGE_CHARS at most), "covered": the spans in it,
    "pieces": [{"text", "mark"}] to show, context first and last}."""
    return [_passage(text, group) for group in _grouped(spans)]


def _grouped(spans: Sequence[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    groups: list[list[tuple[int, int]]] = []
    for a, b in spans:
        if groups and a - groups[-1][-1][1] <= MERGE_GAP:
            groups[-1].append((int(a), int(b)))
        else:
            groups.append([(int(a), int(b))])
    return groups


def _passage(text: str, group: list[tuple[int, int]]) -> dict:
    a, b = group[0][0], group[-1][1]
    pieces = [(_before(text, a), False)]
    at = a
    for x, y in group:
        if x > at:
            pieces.append((text[at:x], False))
        pieces.append((text[x:y], True))
        at = y
    pieces.append((_after(text, b), False))
    return {"spans": [a, b], "text": text[a : min(b, a + PASSAGE_CHARS)],
            "covered": [[x, y] for x, y in group], "pieces": _shown(pieces)}


def _before(text: str, a: int) -> str:
    """Up to CONTEXT characters before `a`, from the start of the sentence `a` is in."""
    start = max(0, a - CONTEXT)
    window = text[start:a]
    ends = list(_SENTENCE_END.finditer(window))
    if ends:
        return window[ends[-1].end():].lstrip()
    return ("…" if start > 0 else "") + window


def _after(text: str, b: int) -> str:
    """Up to CONTEXT characters after `b`, to the end of the sentence `b` is in."""
    window = text[b : b + CONTEXT]
    end = _SENTENCE_END.search(window)
    if end is not None:
        return window[: end.end()].rstrip()
    return window + ("…" if b + CONTEXT < len(text) else "")


def _shown(pieces: list[tuple[str, bool]]) -> list[dict]:
    """The pieces with white space squeezed, PASSAGE_CHARS in all at most."""
    out, room = [], PASSAGE_CHARS
    for raw, mark in pieces:
        shown = _SPACE.sub(" ", raw)
        if not shown or (not mark and shown == " " and not out):
            continue
        if len(shown) > room:
            shown = shown[:room] + "…"
        out.append({"text": shown, "mark": mark})
        room -= len(shown)
        if room <= 0:
            break
    return out
