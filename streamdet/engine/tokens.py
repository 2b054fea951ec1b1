"""Tokens exactly as SPEC §1 defines them.

A token is a maximal run of letters, numbers and combining marks (Unicode L*, N*, M*),
casefolded, so Devanagari or Tamil words keep their vowel signs. Letters of scripts written
without spaces (Han, Hiragana, Katakana, Hangul syllables, Thai, Lao, Khmer, Myanmar) are
tokens of their own, each with the marks that follow it. A mark with no letter or number
before it in its run is dropped.

Categories come from `unicodedata` and scripts from the Unicode Script property (via the
`regex` module), read once, at the first tokenization, into plain character classes for
the stdlib `re` engine: matching a large class there is as fast as `\\w`, while `regex`
with property classes and set operations is 2-10x slower on the hot path. The classes of
the Basic Multilingual Plane are read at the first tokenization, those of every code
point only at the first text holding an astral letter, number or mark.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from collections.abc import Iterable
from functools import cache
from typing import NamedTuple

import numpy as np
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


def _class_members(end: int) -> tuple[list[int], list[int], list[int], list[int]]:
    """Code points below `end` of the segmented letters, run starts, run continuations
    and marks."""
    seg, start, cont, marks = [], [], [], []
    for cp in range(end):
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
    return seg, start, cont, marks


class _Patterns(NamedTuple):
    simple: re.Pattern[str]
    bmp: re.Pattern[str]
    seg_letter: re.Pattern[str]


# sre matches a BMP-only class through a constant-time block bitmap but a class holding
# astral ranges through a linear scan of ranges, and an alternation costs a second test at
# every position. So there are three patterns giving the same tokens, and each text takes
# the cheapest one that is exact for it: most web text has no segmented letters, and its
# astral characters are emoji (symbols, not tokens).
@cache
def _patterns() -> _Patterns:
    """The patterns exact for text without astral letters, numbers or marks, built on
    first use (a command that never tokenizes, `sites`, never reads a class) from the
    code points of the Basic Multilingual Plane, a seventeenth of them all."""
    seg, start, cont, marks = (_char_class(m) for m in _class_members(0x10000))
    simple = re.compile(f"[{start}][{cont}]*")
    bmp = re.compile(f"[{start}][{cont}]*|[{seg}][{marks}]*")
    return _Patterns(simple, bmp, re.compile(f"[{seg}]"))


@cache
def _every() -> re.Pattern[str]:
    """The pattern exact for any text, built on first use from every code point: only
    a process that meets an astral letter, number or mark pays for reading them all
    (every process that analyses pages would, and most never meet one)."""
    seg, start, cont, marks = (_char_class(m) for m in _class_members(sys.maxunicode + 1))
    return re.compile(f"[{start}][{cont}]*|[{seg}][{marks}]*")


@cache
def _cutting(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """The pattern, capturing (token_spans)."""
    return re.compile(f"({pattern.pattern})")


_ASTRAL = re.compile("[\\U00010000-\\U0010FFFF]")


def _token_class(ch: str) -> str:
    major = unicodedata.category(ch)[0]
    if major == "L":
        return "seg" if _SEGMENTED.match(ch) else "word"
    return {"N": "word", "M": "mark"}.get(major, "other")


# Characters whose casefolding yields a character of another class (U+0345, a mark, folds
# to the letter iota; U+0130 to i + a mark): for text holding one, casefolding before
# cutting would cut differently, so such text is cut first and its tokens folded after.
# Listed literally (deriving it costs 0.3 s at import); tests/test_tokens.py re-derives it.
FOLD_SHIFTS = (
    "\u0130\u01f0\u0345\u0390\u03b0\u1e96\u1e97\u1e98\u1e99\u1f50\u1f52\u1f54\u1f56"
    "\u1fb6\u1fb7\u1fc6\u1fc7\u1fd2\u1fd3\u1fd6\u1fd7\u1fe2\u1fe3\u1fe4\u1fe6\u1fe7"
    "\u1ff6\u1ff7"
)


def fold_shifts() -> str:
    """Derive FOLD_SHIFTS from the Unicode data of this Python."""
    return "".join(
        chr(cp) for cp in range(sys.maxunicode + 1)
        if chr(cp).casefold() != chr(cp)
        and any(_token_class(x) != _token_class(chr(cp)) for x in chr(cp).casefold())
    )


_FOLD_SHIFT = re.compile(f"[{re.escape(FOLD_SHIFTS)}]")


def _pattern_for(text: str) -> re.Pattern[str]:
    p = _patterns()
    astral = _ASTRAL.findall(text)
    if astral and any(unicodedata.category(ch)[0] in "LNM" for ch in set(astral)):
        return _every()
    return p.bmp if p.seg_letter.search(text) else p.simple


def tokenize(text: str) -> list[str]:
    """Casefolded tokens of text, in order."""
    if _FOLD_SHIFT.search(text):
        return [t.casefold() for t in _pattern_for(text).findall(text)]
    folded = text.casefold()
    return _pattern_for(folded).findall(folded)


def token_spans(text: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The tokens of `text` (as tokenize gives them) with their [start, end) offsets in
    code points of `text` (SPEC §5), as two int64 arrays. One split of the unfolded text
    (separators and tokens alternate), each token folded after it is cut: folding the
    whole text first can change its length (ß -> ss), and cuts the same tokens only
    because no character but FOLD_SHIFTS folds into another class. The offsets are the
    parts' lengths summed, so no Python code runs per token but the folding."""
    parts = _cutting(_pattern_for(text)).split(text)
    ends = np.cumsum(np.fromiter(map(len, parts), dtype=np.int64, count=len(parts)))
    tokens = [t.casefold() for t in parts[1::2]]
    return tokens, ends[0::2][: len(tokens)], ends[1::2]
