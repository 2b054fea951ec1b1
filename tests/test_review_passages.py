"""A source's passages as the desk shows them (review.passages): near spans read as one
passage with each span marked, in its sentence, white space squeezed, offsets kept."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streamdet.review.passages import CONTEXT, MERGE_GAP, PASSAGE_CHARS, passages

TEXT = ("The first sentence is not copied. Our Partners and Press pages list\n\n\n\n"
        "        everyone we work with, and the Press kit is here. A last sentence ends it.")


def test_near_spans_are_one_passage_in_its_sentence_with_each_span_marked():
    a = TEXT.index("Partners")
    b = TEXT.index("Press")
    [one] = passages(TEXT, [(a, a + len("Partners")), (b, b + len("Press"))])
    assert one["spans"] == [a, b + len("Press")]
    assert one["covered"] == [[a, a + 8], [b, b + 5]]
    shown = "".join(p["text"] for p in one["pieces"])
    assert shown == ("Our Partners and Press pages list everyone we work with, and the Press "
                     "kit is here.")
    assert [p["text"] for p in one["pieces"] if p["mark"]] == ["Partners", "Press"]
    assert "  " not in shown and "\n" not in shown  # no blank gaps


def test_far_spans_are_passages_of_their_own():
    text = "word " * 200
    far = 4 + MERGE_GAP + CONTEXT + 11  # a word's start
    got = passages(text, [(0, 4), (5, 9), (far, far + 4)])
    assert [p["covered"] for p in got] == [[[0, 4], [5, 9]], [[far, far + 4]]]
    assert got[1]["pieces"][0]["text"].startswith("…")  # cut, no sentence start near
    assert got[1]["pieces"][-1]["text"].endswith("…")


@given(st.text(alphabet="ab .\n!", max_size=600),
       st.lists(st.tuples(st.integers(0, 600), st.integers(1, 40)), max_size=12))
def test_every_span_is_marked_once_in_order_and_a_passage_is_bounded(text, raw):
    spans, at = [], 0
    for start, length in sorted(raw):  # disjoint, sorted, within the text
        a = max(start, at)
        b = min(a + length, len(text))
        if a < b:
            spans.append((a, b))
            at = b
    got = passages(text, spans)
    assert [tuple(c) for p in got for c in p["covered"]] == spans
    for p in got:
        marked = [x["text"] for x in p["pieces"] if x["mark"]]
        want = [" ".join(text[a:b].split()) for a, b in p["covered"]]
        if sum(len(x["text"]) for x in p["pieces"]) < PASSAGE_CHARS:
            assert [m.strip() for m in marked] == [w for w in want]
        assert sum(len(x["text"]) for x in p["pieces"]) <= PASSAGE_CHARS + 1
        assert p["text"] == text[p["spans"][0]:p["spans"][1]][:PASSAGE_CHARS]
        context = p["pieces"][0]["text"] if not p["pieces"][0]["mark"] else ""
        assert len(context) <= CONTEXT + 1
