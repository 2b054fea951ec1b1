"""Markup bounded before the HTML parser (SPEC §9, "bounded analysis").

lexbor builds a tree in time that grows with the square of some shapes of markup: every
start tag scans the stack of open elements (160,000 nested `<div>`s: a minute), formatting
elements with distinct attributes that are closed implicitly are re-created before every
later token (`<li><b id=1>x<li><b id=2>x...`: 30 KB of it makes 750 MB of elements),
attributes of one element are checked against each other. Anyone who can get a page
crawled can send these.

`bounded_html` reads the markup once, in time linear in its size, with a model of the
HTML tree builder: its tokenizer (tags, attributes, comments, raw text), the stack of open
elements (void elements; the end tags that `p`, `li`, `dd`, `dt`, headings, table parts,
options, `a`, `nobr` and `button` imply; the scopes that make an end tag count or be
ignored; SVG and MathML with their breakouts), and the list of active formatting elements
with its reconstruction. A page the model finds within bounds - at most MAX_DEPTH levels,
few formatting elements to re-create, no attribute flood - is returned unchanged, and
every real page we measured is. Any other page is written out again as the model reads it:

- elements nested deeper than MAX_DEPTH levels (the root `html` is level 1, `body` 2)
  are read as text of their ancestor at MAX_DEPTH: their tags are dropped and their text
  kept (the content of a dropped raw-text element, such as a script, is escaped so it
  stays text), as Blink caps its tree at 512 levels;
- so are the elements after the first MAX_ELEMENTS of the page, read as text of their
  parent: a flat page of ten megabytes of tags is linear in the parser but still holds
  a million elements, seconds of tree building and text extraction (the most of any
  real page we measured is 15,793);
- every element the model closes without its own end tag gets one, so the parser's stack
  follows the model's and no formatting element is left to be re-created;
- attributes are dropped (no visible text lies in them), but for the two that change how
  the parser reads foreign content (`font` color/face/size, `annotation-xml` encoding).

The model approximates a few corners of the standard (the escapes of script data, the
adoption agency's re-parenting, `form` pointers), always towards counting more depth, not
less; whatever it still misses is bounded by the analysis watchdog (adapters.watchdog).

The scan is compiled (engine/markup_scan.pyx, Cython, built by `pip install`): it runs
over every page, and in Python it cost more than the parse itself. This module holds its
rules and tables and hands them to it once.
"""

from __future__ import annotations

import numpy as np

from . import markup_scan

MAX_DEPTH = 512
MAX_ELEMENTS = 1 << 16  # elements built before the rest of a page is read as text
ENABLED = True  # benchmarks turn the guard off to measure what it costs
_BASE = 2  # html and body (or head) lie below every element of the page on the stack
_LIMIT = MAX_DEPTH - _BASE  # stack positions at or past it are too deep
_SMALL = 256  # markup shorter than this (at most 85 tags) cannot nest beyond MAX_DEPTH
_MAX_ACTIVE = 64  # active formatting elements after the last marker
_MAX_RECONSTRUCT = 32  # formatting elements re-created before one token
_ATTRIBUTE_WORK = 1 << 26  # sum over tags of attributes squared (~0.2 s of pairwise checks)
_MAX_ROOT_TAGS = 16  # html/body start tags with attributes (merged pairwise)
_STACK = 1024  # the model's stack: the cap, implied and re-created elements (not past it)
_UNKNOWN = 2048  # distinct names of unknown elements told apart on one page
_ACTIVE = 1024  # entries of the list of active formatting elements

# -- element kinds --------------------------------------------------------------------------
VOID = frozenset("area base basefont bgsound br col embed frame hr image img input keygen link "
                 "meta param source track wbr".split())
RAW_TEXT = frozenset("script style xmp iframe noembed noframes noscript textarea title "
                     "plaintext".split())
FORMATTING = frozenset("a b big code em font i nobr s small strike strong tt u".split())
_SPECIAL = frozenset(
    "address applet area article aside base basefont bgsound blockquote body br button "
    "caption center col colgroup dd details dir div dl dt embed fieldset figcaption figure "
    "footer form frame frameset h1 h2 h3 h4 h5 h6 head header hgroup hr html iframe img input "
    "keygen li link listing main marquee menu meta nav noembed noframes object ol p param "
    "plaintext pre script search section select source style summary table tbody td template "
    "textarea tfoot th thead title tr track ul wbr xmp".split())
_SCOPE = frozenset("applet caption html table td th marquee object template".split())
_CLOSES_P = frozenset(
    "address article aside blockquote center details dialog dir div dl fieldset figcaption "
    "figure footer form h1 h2 h3 h4 h5 h6 header hgroup hr main menu nav ol p pre search "
    "section summary table ul li dd dt plaintext xmp listing".split())
_BREAKOUT = frozenset(
    "b big blockquote body br center code dd div dl dt em embed h1 h2 h3 h4 h5 h6 head hr i "
    "img li listing menu meta nobr ol p pre ruby s small span strong strike sub sup table tt u "
    "ul var".split())
_INTEGRATION = frozenset("mi mo mn ms mtext annotation-xml foreignobject desc title".split())
_MARKERS = frozenset("applet object marquee template td th caption".split())
_HEADINGS = frozenset("h1 h2 h3 h4 h5 h6".split())
_OTHER = frozenset("html head body svg math select option optgroup image a nobr button li dd dt "
                   "p tr tbody thead tfoot form colgroup span".split())

# bits of an element's kind
F_VOID, F_RAW, F_FORMATTING, F_SPECIAL, F_SCOPE, F_CLOSES_P, F_BREAKOUT = 1, 2, 4, 8, 16, 32, 64
F_MARKER, F_HEADING, F_ROOT, F_FOREIGN_ROOT, F_INTEGRATION = 128, 256, 512, 1024, 2048
# kinds whose positions on the stack are kept (scope checks in constant time)
K_SCOPE, K_BUTTON, K_LIST, K_TABLE, K_SPECIAL, K_SPECIAL_LI = 0, 1, 2, 3, 4, 5
K_HEADING, K_CELL, K_SECTION, K_ITEM, K_FOREIGN = 6, 7, 8, 9, 10
_KINDS = 11
MEASURE, REWRITE = 1, 2  # the two readings of the scan

_NAMES = sorted(VOID | RAW_TEXT | FORMATTING | _SPECIAL | _SCOPE | _CLOSES_P | _BREAKOUT
                | _INTEGRATION | _MARKERS | _OTHER)
_NAME_BYTES = b"".join(n.encode() for n in _NAMES)
_NAME_AT = np.cumsum([0] + [len(n) for n in _NAMES]).astype(np.int64)
_CODE = {n: i for i, n in enumerate(_NAMES)}
_KNOWN = len(_NAMES)
_CODES = _KNOWN + _UNKNOWN  # HTML codes; foreign elements are code + _CODES


def _fnv(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def _tables():
    """Name hash -> code (open addressing), and every code's kind bits and kind lists."""
    size = 1024
    keys = np.zeros(size, dtype=np.uint64)
    codes = np.full(size, -1, dtype=np.int64)
    for name, code in _CODE.items():
        h = _fnv(name.encode())
        slot = h & (size - 1)
        while codes[slot] >= 0:
            slot = (slot + 1) & (size - 1)
        keys[slot], codes[slot] = h, code
    flags = np.zeros(2 * _CODES, dtype=np.int64)
    kinds = np.zeros(2 * _CODES, dtype=np.int64)  # bit k: counted in kind list k
    sets = ((VOID, F_VOID), (RAW_TEXT, F_RAW), (FORMATTING, F_FORMATTING),
            (_SPECIAL, F_SPECIAL), (_SCOPE, F_SCOPE), (_CLOSES_P, F_CLOSES_P),
            (_BREAKOUT, F_BREAKOUT), (_MARKERS, F_MARKER), (_HEADINGS, F_HEADING),
            ({"html", "head", "body"}, F_ROOT), ({"svg", "math"}, F_FOREIGN_ROOT))
    for names, bit in sets:
        for n in names:
            flags[_CODE[n]] |= bit
    lists = ((_SCOPE, K_SCOPE), ({"button"}, K_BUTTON), ({"ol", "ul"}, K_LIST),
             ({"table", "template"}, K_TABLE), (_SPECIAL, K_SPECIAL),
             (_SPECIAL - {"address", "div", "p"}, K_SPECIAL_LI), (_HEADINGS, K_HEADING),
             ({"td", "th"}, K_CELL), ({"tbody", "thead", "tfoot"}, K_SECTION),
             ({"dd", "dt"}, K_ITEM))
    for names, k in lists:
        for n in names:
            kinds[_CODE[n]] |= 1 << k
    for n in _INTEGRATION:  # foreign integration points bound scopes and are special
        f = _CODE[n] + _CODES
        flags[f] |= F_INTEGRATION | F_SPECIAL | F_SCOPE
        kinds[f] |= (1 << K_SCOPE) | (1 << K_SPECIAL) | (1 << K_SPECIAL_LI)
    for c in range(_CODES, 2 * _CODES):
        kinds[c] |= 1 << K_FOREIGN
    for n in ("svg", "math"):
        flags[_CODE[n] + _CODES] |= F_FOREIGN_ROOT
    return keys, codes, flags, kinds


_HASH_KEYS, _HASH_CODES, _FLAGS, _KIND_BITS = _tables()
_HASH_KEYS = _HASH_KEYS.view(np.int64)  # the scan keeps hashes as int64 bit patterns
_NAME_BLOB = np.frombuffer(_NAME_BYTES, dtype=np.uint8).copy()


def bounded_html(html: bytes) -> bytes:
    """UTF-8 markup itself when the parser reads it in linear time, else its bounded form
    (bytes in and out: lexbor reads UTF-8, so the page is encoded once)."""
    if not ENABLED or len(html) < _SMALL:
        return html
    n = len(html)
    data = np.frombuffer(html + b"\0" * (16 + (-n) % 8), dtype=np.uint8)
    if markup_scan.scan(data, n, MEASURE, np.empty(0, dtype=np.uint8))[0] == 0:
        return html
    out = np.empty(2 * n + 4096, dtype=np.uint8)
    size = markup_scan.scan(data, n, REWRITE, out)[1]
    if size > out.size:  # escaped raw text can grow it further: once more, to size
        out = np.empty(size, dtype=np.uint8)
        size = markup_scan.scan(data, n, REWRITE, out)[1]
    return out[:size].tobytes()


# -- the state's layout, and the rules handed to the compiled scan -------------------------
# One int64 array W (markup_scan) holds the scalars S_*, then at the offsets O_*: the
# stack (code and id of each element), per code and per kind the chain of stack positions
# (last/prev, klast/kprev), where runs of foreign or HTML elements begin, the list of
# active formatting elements, the elements past the cap, and the names of unknown elements.
_USLOTS = 2 * _UNKNOWN
O_CODE = 16
O_ID = O_CODE + _STACK
O_PREV = O_ID + _STACK
O_CTX = O_PREV + _STACK
O_INTEGRATION = O_CTX + _STACK
O_POPPED = O_INTEGRATION + _STACK
O_PHANTOM_CODES = O_POPPED + _STACK
O_KPREV = O_PHANTOM_CODES + _STACK
O_KLAST = O_KPREV + _KINDS * _STACK
O_LAST = O_KLAST + 16
O_PHANTOM = O_LAST + 2 * _CODES
O_AF_POS = O_PHANTOM + 2 * _CODES
O_AF_ID = O_AF_POS + _ACTIVE
O_AF_KEY = O_AF_ID + _ACTIVE
O_UKEYS = O_AF_KEY + _ACTIVE
O_UCODES = O_UKEYS + _USLOTS
O_UNAMES = O_UCODES + _USLOTS
O_END = O_UNAMES + 2 * _UNKNOWN

markup_scan.configure(
    {**_CODE, "O_CODE": O_CODE, "O_ID": O_ID, "O_PREV": O_PREV, "O_CTX": O_CTX,
     "O_INTEGRATION": O_INTEGRATION, "O_POPPED": O_POPPED, "O_PHANTOM_CODES": O_PHANTOM_CODES,
     "O_KPREV": O_KPREV, "O_KLAST": O_KLAST, "O_LAST": O_LAST, "O_PHANTOM": O_PHANTOM,
     "O_AF_POS": O_AF_POS, "O_AF_ID": O_AF_ID, "O_AF_KEY": O_AF_KEY, "O_UKEYS": O_UKEYS,
     "O_UCODES": O_UCODES, "O_UNAMES": O_UNAMES, "O_END": O_END,
     "MAX_ELEMENTS": MAX_ELEMENTS, "LIMIT": _LIMIT, "MAX_ACTIVE": _MAX_ACTIVE,
     "MAX_RECONSTRUCT": _MAX_RECONSTRUCT, "ATTRIBUTE_WORK": _ATTRIBUTE_WORK,
     "MAX_ROOT_TAGS": _MAX_ROOT_TAGS, "STACK": _STACK, "UNKNOWN": _UNKNOWN,
     "USLOTS": _USLOTS, "ACTIVE": _ACTIVE, "KNOWN": _KNOWN, "CODES": _CODES, "KINDS": _KINDS,
     "F_VOID": F_VOID, "F_RAW": F_RAW, "F_FORMATTING": F_FORMATTING, "F_SPECIAL": F_SPECIAL,
     "F_SCOPE": F_SCOPE, "F_CLOSES_P": F_CLOSES_P, "F_BREAKOUT": F_BREAKOUT,
     "F_MARKER": F_MARKER, "F_HEADING": F_HEADING, "F_ROOT": F_ROOT,
     "F_FOREIGN_ROOT": F_FOREIGN_ROOT, "F_INTEGRATION": F_INTEGRATION,
     "K_SCOPE": K_SCOPE, "K_BUTTON": K_BUTTON, "K_LIST": K_LIST, "K_TABLE": K_TABLE,
     "K_SPECIAL": K_SPECIAL, "K_SPECIAL_LI": K_SPECIAL_LI, "K_HEADING": K_HEADING,
     "K_CELL": K_CELL, "K_SECTION": K_SECTION, "K_ITEM": K_ITEM, "K_FOREIGN": K_FOREIGN},
    _HASH_KEYS, _HASH_CODES, _FLAGS, _KIND_BITS, _NAME_AT, _NAME_BLOB)


