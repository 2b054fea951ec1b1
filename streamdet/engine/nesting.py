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

The scan is compiled (numba): it runs over every page, and in Python it cost more than
the parse itself. The compiled code is cached on disk beside this module.
"""

from __future__ import annotations

import numpy as np
from numba import njit

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
C = _CODE  # short names for the compiled code's constants below
C_A, C_NOBR, C_BUTTON, C_P, C_LI, C_DD, C_DT = C["a"], C["nobr"], C["button"], C["p"], \
    C["li"], C["dd"], C["dt"]
C_TD, C_TH, C_TR, C_TABLE, C_TBODY, C_CAPTION, C_COLGROUP = C["td"], C["th"], C["tr"], \
    C["table"], C["tbody"], C["caption"], C["colgroup"]
C_THEAD, C_TFOOT, C_OPTION, C_OPTGROUP, C_SELECT = C["thead"], C["tfoot"], C["option"], \
    C["optgroup"], C["select"]
C_FORM, C_BR, C_IMAGE, C_IMG, C_FONT, C_PLAINTEXT = C["form"], C["br"], C["image"], \
    C["img"], C["font"], C["plaintext"]
C_ANNOTATION, C_SVG, C_MATH, C_HTML, C_BODY = C["annotation-xml"], C["svg"], C["math"], \
    C["html"], C["body"]


def prepare() -> None:
    """Compile the scan now (~30 s the first time on a machine, then read from the cache
    beside this module in ~1 s): CI, the worker image and the analysis's warm-up call it
    (through engine.analysis.prepare), so a first page does not wait for the compiler."""
    bounded_html(b"<div>" * (MAX_DEPTH + 1))


def bounded_html(html: bytes) -> bytes:
    """UTF-8 markup itself when the parser reads it in linear time, else its bounded form
    (bytes in and out: lexbor reads UTF-8, so the page is encoded once)."""
    if not ENABLED or len(html) < _SMALL:
        return html
    n = len(html)
    data = np.frombuffer(html + b"\0" * (16 + (-n) % 8), dtype=np.uint8)
    words = data.view("<u8")
    if _scan(data, words, n, MEASURE, np.empty(0, dtype=np.uint8))[0] == 0:
        return html
    out = np.empty(2 * n + 4096, dtype=np.uint8)
    size = _scan(data, words, n, REWRITE, out)[1]
    if size > out.size:  # escaped raw text can grow it further: once more, to size
        out = np.empty(size, dtype=np.uint8)
        size = _scan(data, words, n, REWRITE, out)[1]
    return out[:size].tobytes()


# -- the compiled scan --------------------------------------------------------------------
# All state lives in one int64 array W (numba counts references to every array a
# function touches; with one array, the scan runs ~6x faster than with twenty): the
# scalars, the stack (code and id of each element), per code and per kind the chain of
# stack positions (last/prev, klast/kprev), where runs of foreign or HTML elements
# begin, the list of active formatting elements, the elements past the cap, and the
# names of unknown elements.
(S_DEPTH, S_CTX, S_AF, S_ID, S_PHANTOMS, S_NPC, S_DANGLING, S_SIZE, S_WORK, S_ROOTS,
 S_POPPED, S_UNKNOWN) = range(12)
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

_LT, _GT = np.array([60], dtype=np.uint8), np.array([62], dtype=np.uint8)
_LT_SLASH, _SLASH_GT = np.array([60, 47], dtype=np.uint8), np.array([47, 62], dtype=np.uint8)
_ESC_LT = np.frombuffer(b"&lt;", dtype=np.uint8).copy()
_ESC_AMP = np.frombuffer(b"&amp;", dtype=np.uint8).copy()
_FONT_ATTRS = np.frombuffer(b" color face size", dtype=np.uint8).copy()  # at 1, 7, 12
_HTML_ENCODING = np.frombuffer(b' encoding="text/html"', dtype=np.uint8).copy()
_FNV_OFFSET, _FNV_PRIME = np.uint64(0xCBF29CE484222325), np.uint64(0x100000001B3)
_LOW_BITS, _HIGH_BITS = np.uint64(0x0101010101010101), np.uint64(0x8080808080808080)


@njit(cache=True, inline="always")
def _ws(b):
    return b == 32 or b == 10 or b == 9 or b == 13 or b == 12


@njit(cache=True, inline="always")
def _find(a, w, i, n, byte):
    """The first position at or after i holding `byte`, or n. Eight bytes a step (w is a
    read as little-endian uint64 words, zero-padded): a word holds the byte when
    (v - 0x01..) & ~v & 0x80.. is not zero for v = word ^ byte * 0x01..; text, quoted
    values, scripts and comments are most of a page's bytes."""
    while i & 7:
        if i >= n or a[i] == byte:
            return min(i, n)
        i += 1
    pat = np.uint64(byte) * _LOW_BITS
    k = i >> 3
    while (k << 3) < n:
        v = w[k] ^ pat
        if (v - _LOW_BITS) & ~v & _HIGH_BITS:
            break
        k += 1
    i = k << 3
    while i < n and a[i] != byte:
        i += 1
    return min(i, n)


@njit(cache=True, inline="always")
def _letter(b):
    return (65 <= b <= 90) or (97 <= b <= 122)


@njit(cache=True, inline="always")
def _lower(b):
    return b | 32 if 65 <= b <= 90 else b


@njit(cache=True)
def _new_state():
    W = np.zeros(O_END, dtype=np.int64)
    W[O_KLAST:O_KLAST + 16] = -1
    W[O_LAST:O_PHANTOM] = -1
    W[O_UCODES:O_UNAMES] = -1
    return W


# -- output (rewriting) -------------------------------------------------------------------


@njit(cache=True)
def _put(out, W, data):
    """Append data to the output buffer; past its end, only count (the caller retries
    with a buffer of the size counted)."""
    size = W[S_SIZE]
    need = size + data.size
    if need <= out.size:
        out[size:need] = data
    W[S_SIZE] = need


@njit(cache=True)
def _copy(out, W, a, start, end):
    _put(out, W, a[start:end])


@njit(cache=True)
def _tag(out, W, cc, a, closing, selfclose):
    """`<name>`, `</name>` or `<name/>` of element code cc (a known name, or an unknown
    one as first spelled on the page)."""
    _put(out, W, _LT_SLASH if closing else _LT)
    c = cc - _CODES if cc >= _CODES else cc
    if c < _KNOWN:
        _put(out, W, _NAME_BLOB[_NAME_AT[c]:_NAME_AT[c + 1]])
    else:
        u = O_UNAMES + 2 * (c - _KNOWN)
        _put(out, W, a[W[u]:W[u + 1]])
    _put(out, W, _SLASH_GT if selfclose else _GT)


@njit(cache=True)
def _escaped(out, W, a, j, end):
    """Raw text read as text: '<' and '&' escaped."""
    start = j
    while j < end:
        b = a[j]
        if b == 60 or b == 38:
            _put(out, W, a[start:j])
            _put(out, W, _ESC_LT if b == 60 else _ESC_AMP)
            start = j + 1
        j += 1
    _put(out, W, a[start:end])


@njit(cache=True)
def _end_tags(out, W, a):
    """After a close: the end tags of the elements closed (but those past the cap), and
    the elements past the cap are gone with their ancestor."""
    if W[S_POPPED] == 0:
        return
    for q in range(W[S_NPC]):
        W[O_PHANTOM + W[O_PHANTOM_CODES + q]] = 0
    W[S_NPC] = 0
    W[S_PHANTOMS] = 0
    depth = W[S_DEPTH] + W[S_POPPED]
    for q in range(W[S_POPPED]):
        depth -= 1
        if depth < _LIMIT:
            _tag(out, W, W[O_POPPED + q], a, True, False)


@njit(cache=True)
def _start_tag(out, W, code, a, e, end, foreign, encoding):
    """A start tag as the rewrite keeps it: the name, and the attributes that change how
    the parser reads foreign content (font color/face/size, an HTML encoding)."""
    _put(out, W, _LT)
    c = code
    if c < _KNOWN:
        _put(out, W, _NAME_BLOB[_NAME_AT[c]:_NAME_AT[c + 1]])
    else:
        u = O_UNAMES + 2 * (c - _KNOWN)
        _put(out, W, a[W[u]:W[u + 1]])
    if code == C_FONT:
        for at, ln in ((1, 5), (7, 4), (12, 4)):
            if _has_attr(a, e, end, _FONT_ATTRS, at, ln):
                _put(out, W, _FONT_ATTRS[at - 1:at + ln])
    if encoding:
        _put(out, W, _HTML_ENCODING)
    _put(out, W, _GT)


# -- reading the markup ---------------------------------------------------------------------


@njit(cache=True)
def _tag_end(a, w, n, j):
    """From the end of a tag's name: (the end after its '>', its attributes, whether it is
    self-closing); end -1 when the input ends inside the tag. The HTML tokenizer's
    attribute states."""
    nattr = 0
    while True:
        while j < n:  # before an attribute name: spaces, and '/' (self-closing if '/>')
            b = a[j]
            if b == 47:
                if a[j + 1] == 62:
                    return j + 2, nattr, True
                j += 1
            elif _ws(b):
                j += 1
            else:
                break
        if j >= n:
            return -1, nattr, False
        if a[j] == 62:
            return j + 1, nattr, False
        nattr += 1
        j += 1  # a name's first character may be '='
        while j < n:
            b = a[j]
            if b == 61 or b == 62 or b == 47 or _ws(b):
                break
            j += 1
        while j < n and _ws(a[j]):
            j += 1
        if j < n and a[j] == 61:
            j += 1
            while j < n and _ws(a[j]):
                j += 1
            if j >= n:
                return -1, nattr, False
            q = a[j]
            if q == 34 or q == 39:
                j = _find(a, w, j + 1, n, q)
                if j >= n:
                    return -1, nattr, False
                j += 1
            elif q == 62:
                return j + 1, nattr, False
            else:
                while j < n and not (a[j] == 62 or _ws(a[j])):
                    j += 1


@njit(cache=True)
def _markup_declaration_end(a, w, n, i, foreign):
    """The end of a comment (`<!-- -->`, `<!-->`, `--!>`), a CDATA section (in foreign
    content), or a doctype or bogus comment (to the next '>')."""
    if a[i + 1] == 33 and a[i + 2] == 45 and a[i + 3] == 45:
        j = i + 4
        if a[j] == 62:
            return j + 1
        if a[j] == 45 and a[j + 1] == 62:
            return j + 2
        while True:
            j = _find(a, w, j, n, 45)
            if j >= n:
                break
            if a[j + 1] == 45:
                if a[j + 2] == 62:
                    return j + 3
                if a[j + 2] == 33 and a[j + 3] == 62:
                    return j + 4
            j += 1
        return n
    if (foreign and a[i + 1] == 33 and a[i + 2] == 91 and a[i + 3] == 67 and a[i + 4] == 68
            and a[i + 8] == 91):  # <![CDATA[
        j = i + 9
        while True:
            j = _find(a, w, j, n, 93)
            if j >= n:
                return n
            if a[j + 1] == 93 and a[j + 2] == 62:
                return j + 3
            j += 1
    return min(_find(a, w, i + 1, n, 62) + 1, n)


@njit(cache=True)
def _raw_end(a, w, n, j, code, s, e):
    """Where a raw-text element's content ends: at its end tag `</name` and a space, '/'
    or '>' (any case), or at the end of the input (always, for plaintext)."""
    if code == C_PLAINTEXT:
        return n
    ln = e - s
    while True:
        j = _find(a, w, j, n, 60)
        if j >= n:
            return n
        if a[j + 1] == 47:
            m = 0
            while m < ln and _lower(a[j + 2 + m]) == _lower(a[s + m]):
                m += 1
            if m == ln:
                b = a[j + 2 + ln]
                if _ws(b) or b == 47 or b == 62:
                    return j
        j += 1


@njit(cache=True)
def _has_attr(a, j, end, word, at, ln):
    """Whether the tag bytes a[j:end] name an attribute word[at:at+ln] (lower case)."""
    k = j + 1
    while k + ln < end:
        if (_ws(a[k - 1]) or a[k - 1] == 47) and _lower(a[k]) == word[at]:
            m = 1
            while m < ln and _lower(a[k + m]) == word[at + m]:
                m += 1
            b = a[k + ln]
            if m == ln and (_ws(b) or b == 61 or b == 62 or b == 47):
                return True
        k += 1
    return False


@njit(cache=True)
def _html_encoding(a, j, end):
    """Whether an annotation-xml start tag's encoding is text/html or
    application/xhtml+xml (it then holds HTML)."""
    k = j
    while k + 9 < end:
        if (_lower(a[k]) == 101 and _lower(a[k + 1]) == 110 and _lower(a[k + 2]) == 99
                and _lower(a[k + 3]) == 111 and _lower(a[k + 7]) == 103):  # enco...g
            m = k + 8
            while m < end and (_ws(a[m]) or a[m] == 61 or a[m] == 34 or a[m] == 39):
                m += 1
            return m + 11 < end and (_lower(a[m]) == 116 and _lower(a[m + 4]) == 47 or (
                _lower(a[m]) == 97 and _lower(a[m + 11]) == 47))  # text/..., application/
        k += 1
    return False


@njit(cache=True)
def _name_code(W, a, s, e):
    """An element name's code: a known name's, else one given per page to each unknown
    name (past _UNKNOWN of them, they share the last)."""
    h = _FNV_OFFSET
    for i in range(s, e):
        h = (h ^ np.uint64(_lower(a[i]))) * _FNV_PRIME
    key = np.int64(h)
    slot = np.int64(h & np.uint64(1023))
    while _HASH_CODES[slot] >= 0:
        if _HASH_KEYS[slot] == key:
            return _HASH_CODES[slot]
        slot = (slot + 1) & 1023
    slot = np.int64(h & np.uint64(_USLOTS - 1))
    while W[O_UCODES + slot] >= 0:
        if W[O_UKEYS + slot] == key:
            return W[O_UCODES + slot]
        slot = (slot + 1) & (_USLOTS - 1)
    if W[S_UNKNOWN] >= _UNKNOWN:
        return _CODES - 1
    u = W[S_UNKNOWN]
    W[O_UNAMES + 2 * u], W[O_UNAMES + 2 * u + 1] = s, e
    W[S_UNKNOWN] = u + 1
    W[O_UKEYS + slot], W[O_UCODES + slot] = key, _KNOWN + u
    return _KNOWN + u


# -- the stack and the list of active formatting elements -----------------------------------


@njit(cache=True, inline="always")
def _push(W, cc):
    d = W[S_DEPTH]
    W[S_ID] += 1
    W[O_CODE + d], W[O_ID + d] = cc, W[S_ID]
    W[O_PREV + d] = W[O_LAST + cc]
    W[O_LAST + cc] = d
    bits = _KIND_BITS[cc]
    if bits:
        for k in range(_KINDS):
            if bits >> k & 1:
                W[O_KPREV + k * _STACK + d] = W[O_KLAST + k]
                W[O_KLAST + k] = d
    W[S_DEPTH] = d + 1


@njit(cache=True)
def _forget(W, ident):
    """Take an element out of the list of active formatting elements."""
    for q in range(W[S_AF] - 1, -1, -1):
        if W[O_AF_ID + q] < 0:
            return
        if W[O_AF_ID + q] == ident:
            last = W[S_AF] - 1
            for r in range(q, last):
                W[O_AF_POS + r] = W[O_AF_POS + r + 1]
                W[O_AF_ID + r] = W[O_AF_ID + r + 1]
                W[O_AF_KEY + r] = W[O_AF_KEY + r + 1]
            W[S_AF] = last
            return


@njit(cache=True)
def _pop_to(W, target, own, measuring):
    """Close the element at position `target` and every one above it, their codes kept
    in W[O_POPPED:] for the rewriting caller's end tags. `own`: the one at `target` is
    closed by its own end tag (a formatting element then leaves the list; closed by
    anything else, it stays there, to be re-created)."""
    W[S_POPPED] = 0
    while W[S_DEPTH] > target:
        d = W[S_DEPTH] - 1
        W[S_DEPTH] = d
        cc = W[O_CODE + d]
        W[O_LAST + cc] = W[O_PREV + d]
        bits = _KIND_BITS[cc]
        if bits:
            for k in range(_KINDS):
                if bits >> k & 1:
                    W[O_KLAST + k] = W[O_KPREV + k * _STACK + d]
        if W[S_CTX] > 0 and W[O_CTX + W[S_CTX] - 1] == d:
            W[S_CTX] -= 1
        W[O_INTEGRATION + d] = 0
        W[O_POPPED + W[S_POPPED]] = cc
        W[S_POPPED] += 1
        if measuring:
            fl = _FLAGS[cc]
            if fl & F_FORMATTING:
                if d == target and own:
                    _forget(W, W[O_ID + d])
                else:
                    W[S_DANGLING] = 1
            elif fl & F_MARKER:
                while W[S_AF] > 0:
                    W[S_AF] -= 1
                    if W[O_AF_ID + W[S_AF]] < 0:
                        break


@njit(cache=True)
def _reconstruct(W):
    """Re-create the formatting elements closed by something else, as the parser does
    before a text or an element (measuring). 1 when there are too many."""
    W[S_DANGLING] = 0
    top = W[S_AF]
    k = top
    while k > 0:
        ident = W[O_AF_ID + k - 1]
        at = W[O_AF_POS + k - 1]
        if ident < 0 or (at < W[S_DEPTH] and W[O_ID + at] == ident):
            break
        k -= 1
    if top - k > _MAX_RECONSTRUCT or W[S_DEPTH] + top - k >= _LIMIT:
        return 1
    for q in range(k, top):
        _push(W, W[O_AF_KEY + q] & 0xFFFF)
        W[O_AF_POS + q], W[O_AF_ID + q] = W[S_DEPTH] - 1, W[S_ID]
    return 0


@njit(cache=True)
def _add_active(W, code, a, e, end):
    """The element just pushed, a formatting one, joins the list, with the parser's
    "Noah's Ark" clause (at most three of the same name and attributes after the last
    marker). 1 when the list grows too long."""
    h = _FNV_OFFSET
    for q in range(e, end):
        h = (h ^ np.uint64(a[q])) * _FNV_PRIME
    key = np.int64((h & ~np.uint64(0xFFFF)) | np.uint64(code))
    since = W[S_AF]
    while since > 0 and W[O_AF_ID + since - 1] >= 0:
        since -= 1
    same, first = 0, -1
    for q in range(since, W[S_AF]):
        if W[O_AF_KEY + q] == key:
            same += 1
            if first < 0:
                first = q
    if same >= 3:
        _forget(W, W[O_AF_ID + first])
    if W[S_AF] - since >= _MAX_ACTIVE or W[S_AF] >= _ACTIVE:
        return 1
    q = W[S_AF]
    W[O_AF_POS + q], W[O_AF_ID + q], W[O_AF_KEY + q] = W[S_DEPTH] - 1, W[S_ID], key
    W[S_AF] = q + 1
    return 0


@njit(cache=True)
def _phantom(W, cc):
    """An element past the cap (rewriting): dropped, counted so its end tag is too."""
    if W[O_PHANTOM + cc] == 0 and W[S_NPC] < _STACK:
        W[O_PHANTOM_CODES + W[S_NPC]] = cc
        W[S_NPC] += 1
    W[O_PHANTOM + cc] += 1
    W[S_PHANTOMS] += 1


@njit(cache=True)
def _implied_target(W, code, fl):
    """Where the end tags a start tag implies leave the stack (HTML "in body" and table
    rules): the lowest position closed, or the depth when none is."""
    d = W[S_DEPTH]
    top = W[O_CODE + d - 1] if d > 0 else -1
    target = d
    p = W[O_LAST + C_P]
    if fl & F_CLOSES_P and p >= 0 and p > max(W[O_KLAST + K_SCOPE], W[O_KLAST + K_BUTTON]):
        target = p
    if fl & F_HEADING:
        if 0 <= top < _CODES and _FLAGS[top] & F_HEADING:
            target = min(target, d - 1)
    elif code == C_LI:
        li = W[O_LAST + C_LI]
        if li >= 0 and W[O_KLAST + K_SPECIAL_LI] == li:
            target = min(target, li)
    elif code == C_DD or code == C_DT:
        item = W[O_KLAST + K_ITEM]
        if item >= 0 and W[O_KLAST + K_SPECIAL_LI] == item:
            target = min(target, item)
    elif code == C_TD or code == C_TH:
        if W[O_KLAST + K_CELL] > W[O_KLAST + K_TABLE]:
            target = min(target, W[O_KLAST + K_CELL])
    elif code == C_TR:
        if W[O_LAST + C_TR] > W[O_KLAST + K_TABLE]:
            target = min(target, W[O_LAST + C_TR])
    elif (code == C_TBODY or code == C_THEAD or code == C_TFOOT or code == C_CAPTION
          or code == C_COLGROUP):
        t = W[O_KLAST + K_TABLE]
        if t >= 0 and W[O_CODE + t] == C_TABLE:
            target = min(target, t + 1)
    elif code == C_TABLE:
        if top == C_TABLE or top == C_TBODY or top == C_THEAD or top == C_TFOOT or top == C_TR:
            target = min(target, W[O_KLAST + K_TABLE])
    elif code == C_OPTION or code == C_OPTGROUP:
        if top == C_OPTION or (code == C_OPTGROUP and top == C_OPTGROUP):
            target = min(target, d - 1)
    elif code == C_SELECT:
        if W[O_LAST + C_SELECT] >= 0:
            target = min(target, W[O_LAST + C_SELECT])
    elif code == C_A or code == C_NOBR or code == C_BUTTON:
        at = W[O_LAST + code]
        if at >= 0 and W[O_KLAST + K_SCOPE] < at and (
                code == C_BUTTON or W[O_KLAST + K_SPECIAL] < at):
            target = min(target, at)
    return target


@njit(cache=True)
def _end_target(W, code, foreign):
    """The position an end tag closes, or -1 when the parser ignores it."""
    if foreign:  # foreign rules: the nearest element of that name in the foreign run
        at = W[O_LAST + code + _CODES]
        if at >= 0 and at >= W[O_CTX + W[S_CTX] - 1]:
            return at
    fl = _FLAGS[code]
    if code == C_FORM:
        d = W[S_DEPTH]
        return d - 1 if d > 0 and W[O_CODE + d - 1] == C_FORM else -1
    scope = W[O_KLAST + K_SCOPE]
    if fl & F_HEADING:
        at, bound = W[O_KLAST + K_HEADING], scope
    else:
        at = W[O_LAST + code]
        if fl & F_FORMATTING:
            # with a special element above it the adoption agency re-parents instead
            # of closing: the depth stays (counted as if the end tag were ignored)
            bound = max(scope, W[O_KLAST + K_SPECIAL])
        elif code == C_P:
            bound = max(scope, W[O_KLAST + K_BUTTON])
        elif code == C_LI:
            bound = max(scope, W[O_KLAST + K_LIST])
        elif (code == C_TD or code == C_TH or code == C_TR or code == C_TABLE or code == C_TBODY
              or code == C_THEAD or code == C_TFOOT or code == C_CAPTION or code == C_COLGROUP):
            bound = W[O_KLAST + K_TABLE]
        elif fl & F_SPECIAL:
            bound = scope
        else:
            bound = W[O_KLAST + K_SPECIAL]
    if at < 0 or bound > at:
        return -1
    return at


# -- the scan ---------------------------------------------------------------------------------


@njit(cache=True)
def _scan(a, w, n, mode, out):  # noqa: C901 - the tokenizer: a branch per token kind
    """MEASURE: (0, -) when the markup is within bounds, (1, -) when not. REWRITE: (1,
    the size of the bounded markup), written as UTF-8 to `out` when it fits there."""
    rewrite = mode == REWRITE
    W = _new_state()
    pos = 0
    while True:
        i = _find(a, w, pos, n, 60)
        if i > pos:  # text
            if rewrite:
                _copy(out, W, a, pos, i)
            elif W[S_DANGLING] and _reconstruct(W):
                return 1, 0
        if i >= n:
            break
        c1 = a[i + 1]
        depth = W[S_DEPTH]
        foreign = depth > 0 and W[O_CODE + depth - 1] >= _CODES
        # -- comments, doctypes, bogus comments, CDATA: copied as they are --
        if c1 == 33 or c1 == 63 or (c1 == 47 and not _letter(a[i + 2])):
            end = _markup_declaration_end(a, w, n, i, foreign)
            if rewrite:
                _copy(out, W, a, i, end)
            pos = end
            continue
        closing = c1 == 47
        s = i + 2 if closing else i + 1
        if not _letter(a[s]):  # a '<' of text
            if rewrite:
                _put(out, W, _LT)
            pos = i + 1
            continue
        e = s
        while e < n and not (_ws(a[e]) or a[e] == 47 or a[e] == 62):
            e += 1
        end, nattr, selfclose = _tag_end(a, w, n, e)
        if end < 0:  # the input ends inside the tag, which the parser drops
            if rewrite:
                _copy(out, W, a, i, n)
            break
        pos = end
        if nattr > 16 and not rewrite:
            W[S_WORK] += nattr * nattr
            if W[S_WORK] > _ATTRIBUTE_WORK:
                return 1, 0
        code = _name_code(W, a, s, e)
        if code == C_IMAGE:
            code = C_IMG
        fl = _FLAGS[code]
        if closing:
            if foreign and (code == C_BR or code == C_P) and (
                    W[O_LAST + code + _CODES] < W[O_CTX + W[S_CTX] - 1]):
                # back to the HTML around the foreign run
                _pop_to(W, W[O_CTX + W[S_CTX] - 1], False, not rewrite)
                if rewrite:
                    _end_tags(out, W, a)
                foreign = False
            if W[S_PHANTOMS] > 0:
                cc = code + _CODES if foreign else code
                if W[O_PHANTOM + cc] > 0:  # the end of an element past the cap: dropped
                    W[O_PHANTOM + cc] -= 1
                    W[S_PHANTOMS] -= 1
                    continue
            if fl & F_ROOT or (fl & F_VOID and code != C_BR):
                if rewrite and fl & F_ROOT:
                    _copy(out, W, a, i, end)
                continue
            if code == C_BR:  # </br> is read as <br>
                if not rewrite and W[S_ID] >= MAX_ELEMENTS:
                    return 1, 0
                if rewrite and W[S_DEPTH] < _LIMIT and W[S_PHANTOMS] == 0 and (
                        W[S_ID] < MAX_ELEMENTS):
                    _tag(out, W, C_BR, a, False, False)
                W[S_ID] += 1
                continue
            target = _end_target(W, code, foreign)
            if target < 0:
                if rewrite and W[S_PHANTOMS] == 0:
                    _copy(out, W, a, i, end)  # the parser reads it (and ignores it)
                continue
            _pop_to(W, target, True, not rewrite)
            if rewrite:
                _end_tags(out, W, a)
            continue
        # -- start tags --
        if W[S_ID] >= MAX_ELEMENTS and not rewrite:
            return 1, 0
        if rewrite and (W[S_PHANTOMS] > 0 or W[S_DEPTH] >= _LIMIT or W[S_ID] >= MAX_ELEMENTS):
            if not (fl & F_VOID) and not (foreign and selfclose):
                _phantom(W, code + _CODES if foreign else code)
            if fl & F_RAW and not foreign:
                close = _raw_end(a, w, n, end, code, s, e)
                _escaped(out, W, a, end, close)
                pos = close
            continue
        if foreign and not W[O_INTEGRATION + W[S_DEPTH] - 1]:
            if not (fl & F_BREAKOUT or (code == C_FONT and _font_breaks_out(a, e, end))):
                if selfclose:
                    W[S_ID] += 1
                    if rewrite:
                        _tag(out, W, code, a, False, True)
                    continue
                if W[S_DEPTH] >= _LIMIT:
                    return 1, 0
                point = (_FLAGS[code + _CODES] & F_INTEGRATION) != 0 and (
                    code != C_ANNOTATION or _html_encoding(a, e, end))
                _push(W, code + _CODES)
                W[O_INTEGRATION + W[S_DEPTH] - 1] = point
                if rewrite:
                    _start_tag(out, W, code, a, e, end, True, point and code == C_ANNOTATION)
                continue
            _pop_to(W, W[O_CTX + W[S_CTX] - 1], False, not rewrite)  # a breakout
            if rewrite:
                _end_tags(out, W, a)
            foreign = False
        if fl & F_ROOT:
            if nattr > 0 and not rewrite:
                W[S_ROOTS] += 1
                if W[S_ROOTS] > _MAX_ROOT_TAGS:
                    return 1, 0
            if rewrite:
                _tag(out, W, code, a, False, False)
            continue
        target = _implied_target(W, code, fl)
        if target < W[S_DEPTH]:
            _pop_to(W, target, code == C_A or code == C_NOBR or code == C_BUTTON, not rewrite)
            if rewrite:
                _end_tags(out, W, a)
        if rewrite and W[S_DEPTH] >= _LIMIT:
            if not (fl & F_VOID):
                _phantom(W, code)
            continue
        if W[S_DANGLING] and not rewrite and (not (fl & F_SPECIAL) or fl & F_VOID):
            if _reconstruct(W):
                return 1, 0
        if fl & F_VOID or (fl & F_FOREIGN_ROOT and selfclose):
            W[S_ID] += 1  # an element too, for MAX_ELEMENTS
            if rewrite:
                _tag(out, W, code, a, False, (fl & F_FOREIGN_ROOT) != 0)
            continue
        if code == C_FORM and W[O_LAST + C_FORM] >= 0:
            continue  # a form inside a form is ignored
        # the tbody and tr the parser creates for a row or a cell straight in a table
        top = W[O_CODE + W[S_DEPTH] - 1] if W[S_DEPTH] > 0 else -1
        if (code == C_TD or code == C_TH or code == C_TR) and top == C_TABLE:
            _push(W, C_TBODY)
            top = C_TBODY
        if (code == C_TD or code == C_TH) and (top == C_TBODY or top == C_THEAD or top == C_TFOOT):
            _push(W, C_TR)
        if W[S_DEPTH] >= _LIMIT:
            if not rewrite:
                return 1, 0
            _phantom(W, code)
            continue
        if fl & F_FOREIGN_ROOT:  # a run of foreign elements begins
            W[O_CTX + W[S_CTX]] = W[S_DEPTH]
            W[S_CTX] += 1
            _push(W, code + _CODES)
        else:
            if foreign:  # HTML inside an integration point: a run of HTML begins
                W[O_CTX + W[S_CTX]] = W[S_DEPTH]
                W[S_CTX] += 1
            _push(W, code)
        if rewrite:
            _start_tag(out, W, code, a, e, end, False, False)
        else:
            if fl & F_MARKER:
                if W[S_AF] >= _ACTIVE:
                    return 1, 0
                W[O_AF_ID + W[S_AF]] = -1
                W[S_AF] += 1
            if fl & F_FORMATTING and _add_active(W, code, a, e, end):
                return 1, 0
        if fl & F_RAW:  # its content up to its end tag (read as the next token)
            close = _raw_end(a, w, n, end, code, s, e)
            if rewrite:
                _copy(out, W, a, end, close)
            pos = close
    return 1 if rewrite else 0, W[S_SIZE]


@njit(cache=True)
def _font_breaks_out(a, e, end):
    """A font start tag with color, face or size leaves foreign content."""
    return (_has_attr(a, e, end, _FONT_ATTRS, 1, 5) or _has_attr(a, e, end, _FONT_ATTRS, 7, 4)
            or _has_attr(a, e, end, _FONT_ATTRS, 12, 4))
