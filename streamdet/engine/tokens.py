"""Tokens exactly as SPEC §1 defines them.

A token is a maximal run of letters, numbers and combining marks (Unicode L*, N*, M*),
casefolded, so Devanagari or Tamil words keep their vowel signs. Letters of scripts written
without spaces (Han, Hiragana, Katakana, Hangul syllables, Thai, Lao, Khmer, Myanmar) are
tokens of their own, each with the marks that follow it. A mark with no letter or number
before it in its run is dropped.

Categories come from `unicodedata` and scripts from the Unicode Script property (via the
`regex` module), read once at import into plain character classes for the stdlib `re`
engine: matching a large class there is as fast as `\\w`, while `regex` with property
classes and set operations is 2-10x slower on the hot path.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from collections.abc import Iterable

import regex

SEGMENTED_SCRIPTS = ("Han", "Hiragana", "Katakana", "Thai", "Lao", "Khmer", "Myanmar")

_SEGMENTED = regex.compile(
    "[" + "".join(rf"\p{{Script={s}}}" for s in SEGMENTED_SCRIPTS) + r"\p{Block=Hangul_Syllables}]"
)


def is_segmented_letter(ch: str) -> bool:
    """True for a letter of a script whose letters are tokens of their own."""
    return unicodedata.category(ch)[0] == "L" and _SEGMENTED.match(ch) is not None


def _char_class(code_points: Iterable[int]) -> str:
    """A regex character-class body (ranges) for sorted code points."""
    parts: list[str] = []
    start = prev = None
    for cp in code_points:
        if start is None:
            start = prev = cp
        elif cp == prev + 1:
            prev = cp
        else:
            parts.append(_span(start, prev))
            start = prev = cp
    if start is not None:
        parts.append(_span(start, prev))
    return "".join(parts)


def _span(lo: int, hi: int) -> str:
    return re.escape(chr(lo)) if lo == hi else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}"


def _classes(limit: int) -> tuple[str, str, str, str]:
    """Character classes (segmented letters, run starts, run continuations, marks) for
    code points below `limit`."""
    seg, start, cont, marks = [], [], [], []
    for cp in range(limit):
        major = unicodedata.category(chr(cp))[0]
        if major == "L":
            if _SEGMENTED.match(chr(cp)):
                seg.append(cp)
                continue
            start.append(cp)
            cont.append(cp)
        elif major == "N":
            start.append(cp)
            cont.append(cp)
        elif major == "M":
            cont.append(cp)
            marks.append(cp)
    return _char_class(seg), _char_class(start), _char_class(cont), _char_class(marks)


_SEG_BMP, _START_BMP, _CONT_BMP, _MARKS_BMP = _classes(0x10000)
_SEG, _START, _CONT, _MARKS = _classes(sys.maxunicode + 1)

# sre matches a BMP-only class through a constant-time block bitmap but a class holding
# astral ranges through a linear scan of ranges, and an alternation costs a second test at
# every position. So there are three patterns giving the same tokens, and each text takes
# the cheapest one that is exact for it: most web text has no segmented letters, and its
# astral characters are emoji (symbols, not tokens).
TOKEN_SIMPLE = re.compile(f"[{_START_BMP}][{_CONT_BMP}]*")
TOKEN_BMP = re.compile(f"[{_START_BMP}][{_CONT_BMP}]*|[{_SEG_BMP}][{_MARKS_BMP}]*")
TOKEN_ALL = re.compile(f"[{_START}][{_CONT}]*|[{_SEG}][{_MARKS}]*")
_SEG_LETTER = re.compile(f"[{_SEG_BMP}]")
_ASTRAL = re.compile("[\\U00010000-\\U0010FFFF]")


def _pattern_for(text: str) -> re.Pattern[str]:
    astral = _ASTRAL.findall(text)
    if astral and any(unicodedata.category(ch)[0] in "LNM" for ch in set(astral)):
        return TOKEN_ALL
    return TOKEN_BMP if _SEG_LETTER.search(text) else TOKEN_SIMPLE


def tokenize(text: str) -> list[str]:
    """Casefolded tokens of text, in order."""
    folded = text.casefold()
    return _pattern_for(folded).findall(folded)
