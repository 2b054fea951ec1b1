"""A page's text cut into pieces for the page view: each piece with the sources whose
spans (SPEC §5) cover it and which of their spans, so that every source's passages can
be marked in its own colour even where two sources' spans overlap, and a browser can
count a source's spans (`data-spans` names them). The template escapes every piece."""

from __future__ import annotations

from dataclasses import dataclass

COLOURS = 12  # a source's colour is class src<i % COLOURS>, defined in static/desk.css;
# past 12 sources colours repeat, and the legend tells them apart


@dataclass(frozen=True)
class Piece:
    text: str
    marks: tuple[tuple[int, int], ...] = ()  # (source, span index) covering the piece

    @property
    def first(self) -> int | None:
        """The source whose colour the piece takes (the first in the cover's order)."""
        return min(s for s, _ in self.marks) if self.marks else None

    @property
    def names(self) -> str:
        """`data-spans`: "source:span" of each span covering the piece."""
        return " ".join(f"{s}:{i}" for s, i in self.marks)


def pieces(text: str, spans: list[list[list[int]]]) -> list[Piece]:
    """`text` cut at every span boundary; `spans[s]`: source s's [start, end) ranges in
    code points (as events carry them). Ranges are cut to the text; one sweep over the
    boundaries, so a page of many spans costs their number, not its square."""
    n = len(text)
    opens: dict[int, list[tuple[int, int]]] = {}
    shuts: dict[int, list[tuple[int, int]]] = {}
    for s, ranges in enumerate(spans):
        for i, (a, b) in enumerate(ranges):
            a, b = min(max(a, 0), n), min(max(b, 0), n)
            if a < b:
                opens.setdefault(a, []).append((s, i))
                shuts.setdefault(b, []).append((s, i))
    bounds = sorted({0, n, *opens, *shuts})
    active: set[tuple[int, int]] = set()
    out = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        active.difference_update(shuts.get(a, ()))
        active.update(opens.get(a, ()))
        out.append(Piece(text[a:b], tuple(sorted(active))))
    return out
