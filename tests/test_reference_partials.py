"""Hand-computed cases for the SPEC §7 reference (tests/reference.py: ref_sentences,
ref_partials): every expected value below is worked out by hand, not by running code."""

from __future__ import annotations

import pytest

from .reference import LINE_BREAKS, TERMINATORS, ref_page_sentences, ref_partials, ref_sentences

FIVE = ("one", "two", "three", "four", "five")
SIX_TEN = ("six", "seven", "eight", "nine", "ten")


def params(m: int = 50, foreign: str = "domain", gamma: int | None = None) -> dict:
    p: dict = {"m": m, "foreign": foreign}
    if gamma is not None:
        p["gamma"] = gamma
    return p


def rec(url: str, text: str, **extra) -> dict:
    return {"url": url, "text": text, **extra}


def diag(spans, other_spans, n) -> dict:
    return {"spans": list(spans), "other_spans": list(other_spans), "sentences": n}


# ----------------------------------------------------------------------------- sentences


def test_constants():
    assert TERMINATORS == ".!?…。！？؟।"
    # exactly the characters str.splitlines splits at
    assert LINE_BREAKS == "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
    for ch in LINE_BREAKS:
        assert ("a" + ch + "b").splitlines() == ["a", "b"]


@pytest.mark.parametrize("sep", list(TERMINATORS + LINE_BREAKS) + ["\r\n", ". ", "?\n\n"])
def test_split_at_every_terminator_and_line_break(sep):
    # "one two three four five" is 23 code points; the second sentence begins after sep
    text = "one two three four five" + sep + "six seven eight nine ten"
    b = 23 + len(sep)
    assert ref_sentences(text) == [(FIVE, 0, 23), (SIX_TEN, b, b + 24)]


@pytest.mark.parametrize("sep", [",", ";", ":", " ", "\t", "-", "\u00a0", "\u3000", "、"])
def test_no_split_elsewhere(sep):
    text = "one two three four five" + sep + "six seven eight nine ten"
    assert ref_sentences(text) == [(FIVE + SIX_TEN, 0, 48)]


def test_every_dot_cuts_even_inside_a_number():
    # no abbreviation or decimal handling: "3.14" ends a piece
    text = "pi is about 3.14 said the old man"
    # pieces: "pi is about 3" (4 tokens: skipped), "14 said the old man" (5 tokens)
    assert ref_sentences(text) == [(("14", "said", "the", "old", "man"), 14, 33)]


def test_short_sentences_skipped_and_not_counted():
    text = "a b c d e. w x y z. f g h i j! . ? k l m n o"
    #       0123456789...
    # "a b c d e" [0, 9); "w x y z" 4 tokens, skipped; "f g h i j" starts at 20;
    # empty pieces between ". ? "; "k l m n o" starts at 35
    assert ref_sentences(text) == [
        (("a", "b", "c", "d", "e"), 0, 9),
        (("f", "g", "h", "i", "j"), 20, 29),
        (("k", "l", "m", "n", "o"), 35, 44),
    ]


def test_empty_and_tokenless():
    assert ref_sentences("") == []
    assert ref_sentences("...\n\n!?") == []
    assert ref_sentences("😀 😀 😀 😀 😀 😀") == []


def test_offsets_in_code_points_cjk_marks_emoji():
    text = "😀 cafe\u0301 b c d e。我们喜欢吃苹果！\u0301f g h i j"
    # 0 😀 (one code point, two UTF-16 units), 1 space, 2..6 "cafe" + U+0301 (one token),
    # 8 b, 10 c, 12 d, 14 e, 15 "。", 16..22 seven Han letters (a token each), 23 "！",
    # 24 U+0301 with no letter before it (dropped), 25 f ... 33 j, len 34
    assert ref_sentences(text) == [
        (("cafe\u0301", "b", "c", "d", "e"), 2, 15),
        (("我", "们", "喜", "欢", "吃", "苹", "果"), 16, 23),
        (("f", "g", "h", "i", "j"), 25, 34),
    ]


def test_casefolded_keys_and_devanagari_danda():
    text = "Straße ONE two Three four। नमस्ते दुनिया यह एक वाक्य"
    # "Straße ONE two Three four" [0, 25), "।" at 25, Devanagari from 27 (marks kept in
    # words): नमस्ते 27..33, दुनिया 34..40, यह 41..43, एक 44..46, वाक्य 47..52
    assert ref_sentences(text) == [
        (("strasse", "one", "two", "three", "four"), 0, 25),
        (("नमस्ते", "दुनिया", "यह", "एक", "वाक्य"), 27, 52),
    ]


# ----------------------------------------------------------------------------- pairs

# Five distinct sentences; each "Sx. " piece is 32 code points long, the sentence itself 30.
S = {
    1: "alpha beta gamma delta epsilon",
    2: "zeta etaa theta iota kappaaa",  # 28 code points
    3: "lambda mu nu xi omicron",
    4: "pi rho sigma tau upsilon",
    5: "phi chi psi omega final",
}
A = S[1]  # 30 code points: "A. " is 32


def join(*parts: str) -> str:
    return "".join(p + ". " for p in parts)


def test_repeated_sentence_aaa_vs_aaa_is_one_sentence_each():
    recs = [rec("http://a.example/1", join(A, A, A)), rec("http://b.example/1", join(A, A, A))]
    # SPEC §9: the run A A A ([0, 30), [32, 62), [64, 94)) is one sentence [0, 94) in each
    # page, so M is 1x1 (copy against copy it was 3x3, with five diagonals)
    assert ref_page_sentences(join(A, A, A), 50) == [(tuple(A.split()), 0, 94)]
    assert ref_partials(recs, params()) == []
    assert ref_partials(recs, params(gamma=2)) == []
    assert ref_partials(recs, params(gamma=1)) == [
        {"url": "http://a.example/1", "other": "http://b.example/1",
         "diagonals": [diag((0, 94), (0, 94), 1)]}
    ]


def test_repeated_sentence_aaaa_vs_aa_and_orientation():
    recs = [rec("http://a.example/1", join(A, A, A, A)), rec("http://b.example/1", join(A, A))]
    # one sentence each: AAAA [0, 126), AA [0, 62)
    assert ref_partials(recs, params(gamma=2)) == []
    assert ref_partials(recs, params(gamma=1)) == [
        {"url": "http://a.example/1", "other": "http://b.example/1",
         "diagonals": [diag((0, 126), (0, 62), 1)]}
    ]
    # the smaller URL holds AA now: its span comes first
    recs = [rec("http://a.example/1", join(A, A)), rec("http://b.example/1", join(A, A, A, A))]
    assert ref_partials(recs, params(gamma=1)) == [
        {"url": "http://a.example/1", "other": "http://b.example/1",
         "diagonals": [diag((0, 62), (0, 126), 1)]}
    ]


def test_a_run_of_repeats_inside_a_copied_passage():
    # u: S2 [0, 28) [30, 58) [60, 88) -> one sentence [0, 88); S3 [90, 113); S4 [115, 139)
    # v: S2 [0, 28), S3 [30, 53), S4 [55, 79). Copy against copy the diagonal would start at
    # u's third S2 (60); the run is one sentence, so it starts at 0
    recs = [rec("http://a.example/1", join(S[2], S[2], S[2], S[3], S[4])),
            rec("http://b.example/1", join(S[2], S[3], S[4]))]
    assert ref_partials(recs, params()) == [
        {"url": "http://a.example/1", "other": "http://b.example/1",
         "diagonals": [diag((0, 139), (0, 79), 3)]}
    ]


def test_a_key_on_more_than_m_positions_of_a_page_matches_nothing_there():
    u = join(S[1], S[2], S[1], S[2], S[1], S[3], S[4])
    # u: S1 [0, 30), S2 [32, 60), S1 [62, 92), S2 [94, 122), S1 [124, 154), S3 [156, 179),
    # S4 [181, 205): S1 on 3 positions (no run), S2 on 2
    v = join(S[2], S[1], S[3], S[4])  # S2 [0, 28), S1 [30, 60), S3 [62, 85), S4 [87, 111)
    recs = [rec("http://a.example/1", u), rec("http://b.example/1", v)]
    # m = 2: S1 is common in u (3 > 2) and matches nothing; S2 cells (1,0), (3,0) stop at
    # u's S1 (n = 1); S3 S4 remain: (5,2) n = 2
    assert ref_partials(recs, params(m=2, gamma=2)) == [
        {"url": "http://a.example/1", "other": "http://b.example/1",
         "diagonals": [diag((156, 205), (62, 111), 2)]}
    ]
    # m = 3: S1 matches; (1,0) runs to (2,1), n = 2; (3,0) runs to (6,3), n = 4
    assert ref_partials(recs, params(m=3, gamma=2)) == [
        {"url": "http://a.example/1", "other": "http://b.example/1",
         "diagonals": [diag((32, 92), (0, 60), 2), diag((94, 205), (0, 111), 4)]}
    ]


def test_short_sentence_not_counted_so_diagonal_runs_across_it():
    u = join(S[1], S[2], S[3])
    # u: S1 [0, 30), S2 [32, 60), S3 [62, 85)
    v = join(S[1], "only four short tokens", S[2], "x y", S[3])
    # v: S1 [0, 30), "only four short tokens" (4 tokens) at 32..54, S2 [56, 84),
    # "x y" at 86..89, S3 [91, 114)
    recs = [rec("http://a.example/1", u), rec("http://b.example/2", v)]
    assert ref_partials(recs, params()) == [
        {"url": "http://a.example/1", "other": "http://b.example/2",
         "diagonals": [diag((0, 85), (0, 114), 3)]}
    ]
    # a 5-token sentence in its place breaks the run
    w = join(S[1], "now five short tokens here", S[2], S[3])
    recs = [rec("http://a.example/1", u), rec("http://b.example/2", w)]
    assert ref_partials(recs, params()) == []
    # ... leaving (0,0) n=1 and (1,2) n=2: w's S2 starts at 32 + 26 + 2 = 60, S3 ends at 113
    assert ref_partials(recs, params(gamma=2)) == [
        {"url": "http://a.example/1", "other": "http://b.example/2",
         "diagonals": [diag((32, 85), (60, 113), 2)]}
    ]


def test_offsets_with_emoji_cjk_and_marks_in_spans():
    han = "我们喜欢吃苹果"  # 7 tokens
    u = join(han, S[4], S[5])  # han [0, 7), ". ", S4 [9, 33), ". ", S5 [35, 58)
    v = "😀😀 intro cafe\u0301 x y z!\u0301 " + han + "。" + S[4] + "\n" + S[5]
    # v: 0 😀, 1 😀, 2 space, "intro cafe\u0301 x y z" [3, 20) (5 tokens: sentence 0 of v),
    # "!" 20, U+0301 21 (dropped), space 22, han [23, 30), "。" 30, S4 [31, 55), "\n" 55,
    # S5 [56, 79); u's sentences 0..2 match v's 1..3
    recs = [rec("http://a.example/1", u), rec("http://b.example/1", v)]
    assert ref_partials(recs, params()) == [
        {"url": "http://a.example/1", "other": "http://b.example/1",
         "diagonals": [diag((0, 58), (23, 79), 3)]}
    ]


def test_same_domain_no_pair_but_foreign_none_pairs():
    text = join(S[1], S[2], S[3])  # S3 ends at 85
    recs = [rec("http://x.a.com/1", text), rec("http://y.a.com/2", text)]
    row = {"url": "http://x.a.com/1", "other": "http://y.a.com/2",
           "diagonals": [diag((0, 85), (0, 85), 3)]}
    assert ref_partials(recs, params(foreign="domain")) == []
    assert ref_partials(recs, params(foreign="host")) == [row]
    assert ref_partials(recs, params(foreign="none")) == [row]
    # same host, foreign=none: still a pair (two distinct documents)
    recs = [rec("http://a.example/1", text), rec("http://a.example/2", text)]
    assert ref_partials(recs, params(foreign="host")) == []
    assert ref_partials(recs, params(foreign="none"))[0]["diagonals"] == row["diagonals"]


def test_foreign_ip():
    text = join(S[1], S[2], S[3])
    same = [rec("http://a.example/1", text, ip="10.0.0.1"),
            rec("http://b.example/1", text, ip="10.0.0.1")]
    other = [rec("http://a.example/1", text, ip="10.0.0.1"),
             rec("http://a.example/2", text, ip="10.0.0.2")]
    assert ref_partials(same, params(foreign="ip")) == []
    assert len(ref_partials(other, params(foreign="ip"))) == 1


def test_gamma_three_vs_two_and_default():
    u = join(S[1], S[2], "uuu only in the first", S[3], S[4], S[5])
    v = join(S[1], S[2], "vvv only in the second", S[3], S[4], S[5])
    # u: S1 [0,30) S2 [32,60) U [62,83) S3 [85,108) S4 [110,134) S5 [136,159)
    # v: S1 [0,30) S2 [32,60) V [62,84) S3 [86,109) S4 [111,135) S5 [137,160)
    recs = [rec("http://a.example/1", u), rec("http://b.example/1", v)]
    three = {"url": "http://a.example/1", "other": "http://b.example/1",
             "diagonals": [diag((85, 159), (86, 160), 3)]}
    assert ref_partials(recs, params()) == [three]  # gamma absent: 3
    assert ref_partials(recs, params(gamma=3)) == [three]
    assert ref_partials(recs, params(gamma=2)) == [
        {"url": "http://a.example/1", "other": "http://b.example/1",
         "diagonals": [diag((0, 60), (0, 60), 2), diag((85, 159), (86, 160), 3)]}
    ]
    assert ref_partials(recs, params(gamma=4)) == []


FIVE_S = join(S[1], S[2], S[3], S[4], S[5])  # S1 [0,30) S2 [32,60) S3 [62,85) S4 [87,111)
# S5 [113,136)


def test_key_common_by_m_breaks_a_diagonal():
    recs = [
        rec("http://a.example/1", FIVE_S),
        rec("http://b.example/1", FIVE_S),
        rec("http://c.example/1", join("something else on page c", S[3])),
    ]
    # S3 is on 3 live documents > m = 2: common, so M[2][2] is false
    assert ref_partials(recs, params(m=2, gamma=2)) == [
        {"url": "http://a.example/1", "other": "http://b.example/1",
         "diagonals": [diag((0, 60), (0, 60), 2), diag((87, 136), (87, 136), 2)]}
    ]
    assert ref_partials(recs, params(m=2)) == []
    # m = 3: S3 is not common; c shares only S3 with a and b (one sentence < gamma)
    assert ref_partials(recs, params(m=3)) == [
        {"url": "http://a.example/1", "other": "http://b.example/1",
         "diagonals": [diag((0, 136), (0, 136), 5)]}
    ]
    assert ref_partials(recs, params(m=3, gamma=1)) == [
        {"url": "http://a.example/1", "other": "http://b.example/1",
         "diagonals": [diag((0, 136), (0, 136), 5)]},
        {"url": "http://a.example/1", "other": "http://c.example/1",
         "diagonals": [diag((62, 85), (26, 49), 1)]},
        {"url": "http://b.example/1", "other": "http://c.example/1",
         "diagonals": [diag((62, 85), (26, 49), 1)]},
    ]


def test_sticky_common_key_after_refetch():
    before = [
        rec("http://a.example/1", FIVE_S),
        rec("http://b.example/1", FIVE_S),
        rec("http://c.example/1", join("something else on page c", S[3])),
    ]
    refetch = rec("http://c.example/1", join("page c changed its text"))
    # S3 went to 3 documents > m = 2, then c's re-fetch brought it back to 2: it stays common
    assert ref_partials([*before, refetch], params(m=2, gamma=2)) == [
        {"url": "http://a.example/1", "other": "http://b.example/1",
         "diagonals": [diag((0, 60), (0, 60), 2), diag((87, 136), (87, 136), 2)]}
    ]
    # never above m (c only ever had its new text): not common
    never = [*before[:2], refetch]
    assert ref_partials(never, params(m=2, gamma=2)) == [
        {"url": "http://a.example/1", "other": "http://b.example/1",
         "diagonals": [diag((0, 136), (0, 136), 5)]}
    ]
    # arrival order matters: c's old version counted before a or b existed never made 3
    order = [before[2], refetch, *before[:2]]
    assert ref_partials(order, params(m=2, gamma=2)) == ref_partials(never, params(m=2, gamma=2))


def test_latest_version_wins_and_invalid_records_ignored():
    text = join(S[1], S[2], S[3])
    recs = [
        rec("http://a.example/1", text),
        rec("http://b.example/1", text),
        rec("http://b.example/1", join(S[4], S[5], "all new text on b")),  # re-fetch
        {"url": "http://c.example/1"},  # no body: dead letter
        rec("ftp://d.example/1", text),  # not http(s): dead letter
    ]
    assert ref_partials(recs, params()) == []
    assert ref_partials([*recs, rec("http://e.example/1", "intro. " + text)], params()) == [
        {"url": "http://a.example/1", "other": "http://e.example/1",
         "diagonals": [diag((0, 85), (7, 92), 3)]}
    ]


def test_html_block_boundaries_split_sentences_in_shown_text():
    from streamdet.engine.text import visible_text

    html = ("<html><head><title>t</title></head><body><p>" + S[1] + "</p><div>" + S[2]
            + "<br>" + S[3] + "</div></body></html>")
    shown = visible_text(html)
    recs = [{"url": "http://a.example/1", "html": html},
            rec("http://b.example/1", join(S[1], S[2], S[3]))]
    rows = ref_partials(recs, params())
    assert len(rows) == 1 and len(rows[0]["diagonals"]) == 1
    d = rows[0]["diagonals"][0]
    assert d["sentences"] == 3 and d["other_spans"] == [0, 85]
    a, b = d["spans"]
    assert shown[a:b].startswith(S[1]) and shown[a:b].endswith(S[3])
    # without the block boundaries the three would be one sentence of 15 tokens
    assert S[1] + S[2] not in shown
