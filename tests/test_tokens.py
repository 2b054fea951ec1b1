"""The engine tokenizer against the per-character reference of SPEC §1, plus hand cases."""

from __future__ import annotations

import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdet.engine.tokens import token_spans, tokenize

from .reference import ref_token_spans, ref_tokenize

# Characters worth combining: marks of several kinds, letters of segmented and
# non-segmented scripts, numbers, separators, casefold specials, astral letters and marks.
INTERESTING = (
    "aZß\u1e9eİıſﬁΣσς\u0345"  # casefold specials (ß, ẞ, dotted İ, long s, ligature, sigmas,
    # U+0345: a mark whose casefold is a letter)
    "\u0301\u0308\u093f\u0902\u094d\u0e34\u0e48\u17d2\u102c\u20dd\u0488"  # Mn, Mc, Me
    "कखि" "中文字" "ひらがなー" "カタカナ" "한국어" "\u1100\u1161"  # jamo: not syllables
    "ภาษาไทย" "ລາວ" "ខ្មែរ" "မြန်မာ" "Ａｂ１"  # Thai, Lao, Khmer, Myanmar, fullwidth
    "0123456789٤٢²½Ⅻ"  # Nd, No, Nl
    " \t\n\u00a0\u3000-_'.,!\u200b\u200c\u200d\u2060"  # separators, ZW(N)J, word joiner
    "\U00020000\U0002a6d6\U0001d400\U0001d167\U0001f600\U00010400\U00016fe0"  # astral
)

char_st = st.one_of(
    st.sampled_from(INTERESTING),
    st.characters(exclude_categories=("Cs",)),
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=char_st, max_size=40))
def test_tokenize_matches_reference(text):
    assert tokenize(text) == ref_tokenize(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=200))
def test_tokenize_matches_reference_any_unicode(text):
    assert tokenize(text) == ref_tokenize(text)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=char_st, max_size=40))
def test_token_offsets_match_reference(text):
    """SPEC §5: offsets in code points of the text; each token is its range, casefolded."""
    tokens, starts, ends = token_spans(text)
    assert list(zip(tokens, starts, ends, strict=True)) == ref_token_spans(text)
    assert tokens == tokenize(text)  # the fast path's tokens, one for one
    for tok, a, b in zip(tokens, starts, ends, strict=True):
        assert 0 <= a < b <= len(text)
        # a mark dropped at the start of a run is outside the range; the rest is the token
        assert text[a:b].casefold() == tok


@pytest.mark.parametrize(("text", "expected"), [
    ("Straße ﬁne", [("strasse", 0, 6), ("fine", 7, 10)]),  # folded tokens lengthen; offsets do not
    ("中文 ภาษา", [("中", 0, 1), ("文", 1, 2), ("ภ", 3, 4), ("า", 4, 5), ("ษ", 5, 6),
                 ("า", 6, 7)]),
    ("e\u0301t\u00e9 \U0001f600 \u05e9\u05dc\u05d5\u05dd", [
        ("e\u0301t\u00e9", 0, 4), ("\u05e9\u05dc\u05d5\u05dd", 7, 11)]),  # emoji; RTL
    ("\u0301abc", [("abc", 1, 4)]),  # a leading mark is dropped, not counted in the token
    ("\U0001d400\U0001d401 x", [("\U0001d400\U0001d401".casefold(), 0, 2), ("x", 3, 4)]),
])
def test_token_offsets_hand_cases(text, expected):
    assert list(zip(*token_spans(text), strict=True)) == expected


def _chars(limit: int) -> list[str]:
    return [chr(cp) for cp in range(limit) if not 0xD800 <= cp <= 0xDFFF]


@pytest.mark.parametrize("context", ["{}", "a{}b", "中{}", "{}\u0301", "1{}"])
def test_every_bmp_code_point(context):
    """Every BMP code point alone, between letters, after a
    segmented letter, before a mark, after a number; in BMP-only texts, which go through
    the engine's faster BMP patterns."""
    chars = _chars(0x10000)
    for i in range(0, len(chars), 4096):
        text = " ".join(context.format(ch) for ch in chars[i:i + 4096])
        assert tokenize(text) == ref_tokenize(text), f"chunk from U+{ord(chars[i]):04X}"


def test_every_code_point_in_sequence():
    """All code points in order as one text: each next to its neighbours, through the
    engine's all-Unicode pattern (the text holds astral letters)."""
    text = "".join(_chars(sys.maxunicode + 1))
    assert tokenize(text) == ref_tokenize(text)


@pytest.mark.parametrize("text, expected", [
    # Indic words keep their vowel signs, virama and anusvara
    ("किताब हिंदी", ["किताब", "हिंदी"]),
    ("क्षत्रिय", ["क्षत्रिय"]),
    ("தமிழ் மொழி", ["தமிழ்", "மொழி"]),
    # segmented scripts: one token per letter, with the marks that follow it
    ("中文字", ["中", "文", "字"]),
    ("ひらがな", ["ひ", "ら", "が", "な"]),
    ("カタカナ", ["カ", "タ", "カ", "ナ"]),
    ("한국어", ["한", "국", "어"]),
    ("ที่นี่", ["ที่", "นี่"]),
    ("ภาษา", ["ภ", "า", "ษ", "า"]),
    ("ខ្មែរ", ["ខ្", "មែ", "រ"]),
    ("中\u0301文", ["中\u0301", "文"]),
    # a segmented letter ends a run and starts none: neighbours are tokens of their own
    ("abc中def", ["abc", "中", "def"]),
    ("x1中2", ["x1", "中", "2"]),
    # a mark with no letter before it is dropped; inside a word it stays
    ("\u0301abc", ["abc"]),
    (" \u0301 \u0308", []),
    ("e\u0301te\u0301", ["e\u0301te\u0301"]),
    ("-\u0301x", ["x"]),
    # a mark after a number stays with it (SPEC "no letter before it" read as "nothing
    # before it in its run", as the engine docstring says)
    ("1\u0301 \u0663\u0301", ["1\u0301", "\u0663\u0301"]),
    # casefold
    ("Straße STRASSE strasse", ["strasse", "strasse", "strasse"]),
    ("ΣΊΣΥΦΟΣ σίσυφος", ["σίσυφοσ", "σίσυφοσ"]),
    ("ﬁne", ["fine"]),
    # separators: everything that is not L, N or M
    ("don't e-mail a_b a.b", ["don", "t", "e", "mail", "a", "b", "a", "b"]),
    ("a\u200db a\u00a0b", ["a", "b", "a", "b"]),
    ("x²½ Ⅻ ٤٢", ["x²½", "ⅻ", "٤٢"]),
    ("😀hello😀", ["hello"]),
    ("", []),
    ("  \n\t ", []),
])
def test_hand_cases(text, expected):
    assert ref_tokenize(text) == expected
    assert tokenize(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("\u0345", []),  # a mark with no letter before it: dropped
    ("a \u0345b", ["a", "b"]),  # same, at the start of a run
    ("中\u0345", ["中\u03b9"]),  # a mark following a segmented letter stays with it
    ("a\u0345", ["a\u03b9"]),  # inside a word: kept, casefolded to ι (both agree here)
])
def test_casefold_after_cutting_ypogegrammeni(text, expected):
    """SPEC: tokens are runs of L/N/M characters *of the text*, casefolded. U+0345 is a
    mark (Mn) whose casefold is the letter ι, so casefolding the text before cutting it
    (as the engine does) turns a dropped leading mark into a token, and splits it off a
    segmented letter. Found by test_tokenize_matches_reference (failed on the engine at
    commit 8aca3c4; fixed in 389162c)."""
    assert ref_tokenize(text) == expected
    assert tokenize(text) == expected


def test_fold_shift_list_matches_the_unicode_data():
    """The literal list of characters whose casefold changes token class is complete."""
    from streamdet.engine.tokens import FOLD_SHIFTS, fold_shifts

    assert fold_shifts() == FOLD_SHIFTS
