# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The markup guard's scan (engine.markup_guard), compiled: a model of the HTML tokenizer and
tree builder that reads a page once and says whether the parser would read it in linear
time (MEASURE), or writes it out bounded (REWRITE).

engine.markup_guard holds the rules (element kinds, name tables, the state's layout) and calls
`configure` once with them; every function here reads them from module variables. All
state lives in one int64 array W: the scalars, the stack (code and id of each element),
per code and per kind the chain of stack positions (last/prev, klast/kprev), where runs of
foreign or HTML elements begin, the list of active formatting elements, the elements past
the cap, and the names of unknown elements. The input is padded with at least 16 zero
bytes past `n`, so reads a few bytes ahead never leave it.
"""

import numpy as np

from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.string cimport memcpy

# -- the rules, set by configure() ------------------------------------------------------------
cdef int64_t MEASURE = 1, REWRITE = 2
cdef int64_t S_DEPTH, S_CTX, S_AF, S_ID, S_PHANTOMS, S_NPC, S_DANGLING, S_SIZE, S_WORK
cdef int64_t S_ROOTS, S_POPPED, S_UNKNOWN
cdef int64_t O_CODE, O_ID, O_PREV, O_CTX, O_INTEGRATION, O_POPPED, O_PHANTOM_CODES, O_KPREV
cdef int64_t O_KLAST, O_LAST, O_PHANTOM, O_AF_POS, O_AF_ID, O_AF_KEY, O_UKEYS, O_UCODES
cdef int64_t O_UNAMES, O_END
cdef int64_t MAX_ELEMENTS, LIMIT, MAX_ACTIVE, MAX_RECONSTRUCT, ATTRIBUTE_WORK, MAX_ROOT_TAGS
cdef int64_t STACK, UNKNOWN, USLOTS, ACTIVE, KNOWN, CODES, KINDS
cdef int64_t F_VOID, F_RAW, F_FORMATTING, F_SPECIAL, F_SCOPE, F_CLOSES_P, F_BREAKOUT
cdef int64_t F_MARKER, F_HEADING, F_ROOT, F_FOREIGN_ROOT, F_INTEGRATION
cdef int64_t K_SCOPE, K_BUTTON, K_LIST, K_TABLE, K_SPECIAL, K_SPECIAL_LI, K_HEADING, K_CELL
cdef int64_t K_SECTION, K_ITEM, K_FOREIGN
cdef int64_t C_A, C_NOBR, C_BUTTON, C_P, C_LI, C_DD, C_DT, C_TD, C_TH, C_TR, C_TABLE
cdef int64_t C_TBODY, C_CAPTION, C_COLGROUP, C_THEAD, C_TFOOT, C_OPTION, C_OPTGROUP
cdef int64_t C_SELECT, C_FORM, C_BR, C_IMAGE, C_IMG, C_FONT, C_PLAINTEXT, C_ANNOTATION
cdef const int64_t[::1] HASH_KEYS
cdef const int64_t[::1] HASH_CODES
cdef const int64_t[::1] FLAGS
cdef const int64_t[::1] KIND_BITS
cdef const int64_t[::1] NAME_AT
cdef const uint8_t[::1] NAME_BLOB
cdef bint configured = False

cdef uint64_t FNV_OFFSET = 0xCBF29CE484222325ULL, FNV_PRIME = 0x100000001B3ULL
cdef uint64_t LOW_BITS = 0x0101010101010101ULL, HIGH_BITS = 0x8080808080808080ULL
cdef const char* FONT_ATTRS = b" color face size"  # names at 1, 7 and 12
cdef const char* HTML_ENCODING = b' encoding="text/html"'


def configure(dict c, hash_keys, hash_codes, flags, kind_bits, name_at, name_blob) -> None:
    """The rules and tables (engine.markup_guard), once, before the first scan."""
    global S_DEPTH, S_CTX, S_AF, S_ID, S_PHANTOMS, S_NPC, S_DANGLING, S_SIZE, S_WORK
    global S_ROOTS, S_POPPED, S_UNKNOWN
    global O_CODE, O_ID, O_PREV, O_CTX, O_INTEGRATION, O_POPPED, O_PHANTOM_CODES, O_KPREV
    global O_KLAST, O_LAST, O_PHANTOM, O_AF_POS, O_AF_ID, O_AF_KEY, O_UKEYS, O_UCODES
    global O_UNAMES, O_END
    global MAX_ELEMENTS, LIMIT, MAX_ACTIVE, MAX_RECONSTRUCT, ATTRIBUTE_WORK, MAX_ROOT_TAGS
    global STACK, UNKNOWN, USLOTS, ACTIVE, KNOWN, CODES, KINDS
    global F_VOID, F_RAW, F_FORMATTING, F_SPECIAL, F_SCOPE, F_CLOSES_P, F_BREAKOUT
    global F_MARKER, F_HEADING, F_ROOT, F_FOREIGN_ROOT, F_INTEGRATION
    global K_SCOPE, K_BUTTON, K_LIST, K_TABLE, K_SPECIAL, K_SPECIAL_LI, K_HEADING, K_CELL
    global K_SECTION, K_ITEM, K_FOREIGN
    global C_A, C_NOBR, C_BUTTON, C_P, C_LI, C_DD, C_DT, C_TD, C_TH, C_TR, C_TABLE
    global C_TBODY, C_CAPTION, C_COLGROUP, C_THEAD, C_TFOOT, C_OPTION, C_OPTGROUP
    global C_SELECT, C_FORM, C_BR, C_IMAGE, C_IMG, C_FONT, C_PLAINTEXT, C_ANNOTATION
    global HASH_KEYS, HASH_CODES, FLAGS, KIND_BITS, NAME_AT, NAME_BLOB, configured
    (S_DEPTH, S_CTX, S_AF, S_ID, S_PHANTOMS, S_NPC, S_DANGLING, S_SIZE, S_WORK, S_ROOTS,
     S_POPPED, S_UNKNOWN) = range(12)
    O_CODE, O_ID, O_PREV, O_CTX = c["O_CODE"], c["O_ID"], c["O_PREV"], c["O_CTX"]
    O_INTEGRATION, O_POPPED = c["O_INTEGRATION"], c["O_POPPED"]
    O_PHANTOM_CODES, O_KPREV, O_KLAST = c["O_PHANTOM_CODES"], c["O_KPREV"], c["O_KLAST"]
    O_LAST, O_PHANTOM, O_AF_POS = c["O_LAST"], c["O_PHANTOM"], c["O_AF_POS"]
    O_AF_ID, O_AF_KEY, O_UKEYS = c["O_AF_ID"], c["O_AF_KEY"], c["O_UKEYS"]
    O_UCODES, O_UNAMES, O_END = c["O_UCODES"], c["O_UNAMES"], c["O_END"]
    MAX_ELEMENTS, LIMIT, MAX_ACTIVE = c["MAX_ELEMENTS"], c["LIMIT"], c["MAX_ACTIVE"]
    MAX_RECONSTRUCT, ATTRIBUTE_WORK = c["MAX_RECONSTRUCT"], c["ATTRIBUTE_WORK"]
    MAX_ROOT_TAGS, STACK, UNKNOWN = c["MAX_ROOT_TAGS"], c["STACK"], c["UNKNOWN"]
    USLOTS, ACTIVE, KNOWN, CODES, KINDS = (c["USLOTS"], c["ACTIVE"], c["KNOWN"], c["CODES"],
                                           c["KINDS"])
    F_VOID, F_RAW, F_FORMATTING, F_SPECIAL = c["F_VOID"], c["F_RAW"], c["F_FORMATTING"], \
        c["F_SPECIAL"]
    F_SCOPE, F_CLOSES_P, F_BREAKOUT, F_MARKER = c["F_SCOPE"], c["F_CLOSES_P"], \
        c["F_BREAKOUT"], c["F_MARKER"]
    F_HEADING, F_ROOT, F_FOREIGN_ROOT, F_INTEGRATION = c["F_HEADING"], c["F_ROOT"], \
        c["F_FOREIGN_ROOT"], c["F_INTEGRATION"]
    K_SCOPE, K_BUTTON, K_LIST, K_TABLE = c["K_SCOPE"], c["K_BUTTON"], c["K_LIST"], \
        c["K_TABLE"]
    K_SPECIAL, K_SPECIAL_LI, K_HEADING, K_CELL = c["K_SPECIAL"], c["K_SPECIAL_LI"], \
        c["K_HEADING"], c["K_CELL"]
    K_SECTION, K_ITEM, K_FOREIGN = c["K_SECTION"], c["K_ITEM"], c["K_FOREIGN"]
    C_A, C_NOBR, C_BUTTON, C_P = c["a"], c["nobr"], c["button"], c["p"]
    C_LI, C_DD, C_DT, C_TD, C_TH = c["li"], c["dd"], c["dt"], c["td"], c["th"]
    C_TR, C_TABLE, C_TBODY, C_CAPTION = c["tr"], c["table"], c["tbody"], c["caption"]
    C_COLGROUP, C_THEAD, C_TFOOT = c["colgroup"], c["thead"], c["tfoot"]
    C_OPTION, C_OPTGROUP, C_SELECT = c["option"], c["optgroup"], c["select"]
    C_FORM, C_BR, C_IMAGE, C_IMG = c["form"], c["br"], c["image"], c["img"]
    C_FONT, C_PLAINTEXT, C_ANNOTATION = c["font"], c["plaintext"], c["annotation-xml"]
    HASH_KEYS, HASH_CODES, FLAGS = hash_keys, hash_codes, flags
    KIND_BITS, NAME_AT, NAME_BLOB = kind_bits, name_at, name_blob
    configured = True


# -- bytes ------------------------------------------------------------------------------------

cdef inline bint _ws(uint8_t b) noexcept nogil:
    return b == 32 or b == 10 or b == 9 or b == 13 or b == 12


cdef inline bint _letter(uint8_t b) noexcept nogil:
    return (65 <= b <= 90) or (97 <= b <= 122)


cdef inline uint8_t _lower(uint8_t b) noexcept nogil:
    return b | 32 if 65 <= b <= 90 else b


cdef inline int64_t _find(const uint8_t* a, int64_t i, int64_t n, uint8_t byte) noexcept nogil:
    """The first position at or after i holding `byte`, or n. Eight bytes a step: a word
    holds the byte when (v - 0x01..) & ~v & 0x80.. is not zero for v = word ^ byte * 0x01..
    (text, quoted values, scripts and comments are most of a page's bytes)."""
    cdef uint64_t pat, v
    while i & 7:
        if i >= n or a[i] == byte:
            return i if i < n else n
        i += 1
    pat = (<uint64_t>byte) * LOW_BITS
    while i < n:
        memcpy(&v, a + i, 8)
        v ^= pat
        if (v - LOW_BITS) & ~v & HIGH_BITS:
            break
        i += 8
    while i < n and a[i] != byte:
        i += 1
    return i if i < n else n


# -- output (rewriting) -------------------------------------------------------------------


cdef inline void _put(uint8_t* out, int64_t out_size, int64_t* W, const uint8_t* data,
                      int64_t length) noexcept nogil:
    """Append data to the output buffer; past its end, only count (the caller retries
    with a buffer of the size counted)."""
    cdef int64_t size = W[S_SIZE]
    cdef int64_t need = size + length
    if need <= out_size and length > 0:
        memcpy(out + size, data, length)
    W[S_SIZE] = need


cdef void _name(uint8_t* out, int64_t out_size, int64_t* W, int64_t c,
                const uint8_t* a) noexcept nogil:
    """An element's name: a known one's, or an unknown one as first spelled on the page."""
    cdef int64_t u
    if c < KNOWN:
        _put(out, out_size, W, &NAME_BLOB[0] + NAME_AT[c], NAME_AT[c + 1] - NAME_AT[c])
    else:
        u = O_UNAMES + 2 * (c - KNOWN)
        _put(out, out_size, W, a + W[u], W[u + 1] - W[u])


cdef void _tag(uint8_t* out, int64_t out_size, int64_t* W, int64_t cc, const uint8_t* a,
               bint closing, bint selfclose) noexcept nogil:
    """`<name>`, `</name>` or `<name/>` of element code cc."""
    _put(out, out_size, W, <const uint8_t*>b"</" if closing else <const uint8_t*>b"<",
         2 if closing else 1)
    _name(out, out_size, W, cc - CODES if cc >= CODES else cc, a)
    _put(out, out_size, W, <const uint8_t*>b"/>" if selfclose else <const uint8_t*>b">",
         2 if selfclose else 1)


cdef void _escaped(uint8_t* out, int64_t out_size, int64_t* W, const uint8_t* a, int64_t j,
                   int64_t end) noexcept nogil:
    """Raw text read as text: '<' and '&' escaped."""
    cdef int64_t start = j
    cdef uint8_t b
    while j < end:
        b = a[j]
        if b == 60 or b == 38:
            _put(out, out_size, W, a + start, j - start)
            if b == 60:
                _put(out, out_size, W, <const uint8_t*>b"&lt;", 4)
            else:
                _put(out, out_size, W, <const uint8_t*>b"&amp;", 5)
            start = j + 1
        j += 1
    _put(out, out_size, W, a + start, end - start)


cdef void _end_tags(uint8_t* out, int64_t out_size, int64_t* W, const uint8_t* a) noexcept nogil:
    """After a close: the end tags of the elements closed (but those past the cap), and
    the elements past the cap are gone with their ancestor."""
    cdef int64_t q, depth
    if W[S_POPPED] == 0:
        return
    for q in range(W[S_NPC]):
        W[O_PHANTOM + W[O_PHANTOM_CODES + q]] = 0
    W[S_NPC] = 0
    W[S_PHANTOMS] = 0
    depth = W[S_DEPTH] + W[S_POPPED]
    for q in range(W[S_POPPED]):
        depth -= 1
        if depth < LIMIT:
            _tag(out, out_size, W, W[O_POPPED + q], a, True, False)


cdef void _start_tag(uint8_t* out, int64_t out_size, int64_t* W, int64_t code,
                     const uint8_t* a, int64_t e, int64_t end, bint encoding) noexcept nogil:
    """A start tag as the rewrite keeps it: the name, and the attributes that change how
    the parser reads foreign content (font color/face/size, an HTML encoding)."""
    _put(out, out_size, W, <const uint8_t*>b"<", 1)
    _name(out, out_size, W, code, a)
    if code == C_FONT:
        if _has_attr(a, e, end, 1, 5):
            _put(out, out_size, W, <const uint8_t*>FONT_ATTRS, 6)
        if _has_attr(a, e, end, 7, 4):
            _put(out, out_size, W, <const uint8_t*>FONT_ATTRS + 6, 5)
        if _has_attr(a, e, end, 12, 4):
            _put(out, out_size, W, <const uint8_t*>FONT_ATTRS + 11, 5)
    if encoding:
        _put(out, out_size, W, <const uint8_t*>HTML_ENCODING, 21)
    _put(out, out_size, W, <const uint8_t*>b">", 1)


# -- reading the markup ---------------------------------------------------------------------


cdef int64_t _tag_end(const uint8_t* a, int64_t n, int64_t j, int64_t* nattr,
                      bint* selfclose) noexcept nogil:
    """From the end of a tag's name: the end after its '>' (-1 when the input ends inside
    the tag), its attributes and whether it is self-closing. The HTML tokenizer's
    attribute states."""
    cdef uint8_t b, q
    nattr[0] = 0
    selfclose[0] = False
    while True:
        while j < n:  # before an attribute name: spaces, and '/' (self-closing if '/>')
            b = a[j]
            if b == 47:
                if a[j + 1] == 62:
                    selfclose[0] = True
                    return j + 2
                j += 1
            elif _ws(b):
                j += 1
            else:
                break
        if j >= n:
            return -1
        if a[j] == 62:
            return j + 1
        nattr[0] += 1
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
                return -1
            q = a[j]
            if q == 34 or q == 39:
                j = _find(a, j + 1, n, q)
                if j >= n:
                    return -1
                j += 1
            elif q == 62:
                return j + 1
            else:
                while j < n and not (a[j] == 62 or _ws(a[j])):
                    j += 1


cdef int64_t _markup_declaration_end(const uint8_t* a, int64_t n, int64_t i,
                                     bint foreign) noexcept nogil:
    """The end of a comment (`<!-- -->`, `<!-->`, `--!>`), a CDATA section (in foreign
    content), or a doctype or bogus comment (to the next '>')."""
    cdef int64_t j
    if a[i + 1] == 33 and a[i + 2] == 45 and a[i + 3] == 45:
        j = i + 4
        if a[j] == 62:
            return j + 1
        if a[j] == 45 and a[j + 1] == 62:
            return j + 2
        while True:
            j = _find(a, j, n, 45)
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
            j = _find(a, j, n, 93)
            if j >= n:
                return n
            if a[j + 1] == 93 and a[j + 2] == 62:
                return j + 3
            j += 1
    j = _find(a, i + 1, n, 62) + 1
    return j if j < n else n


cdef int64_t _raw_end(const uint8_t* a, int64_t n, int64_t j, int64_t code, int64_t s,
                      int64_t e) noexcept nogil:
    """Where a raw-text element's content ends: at its end tag `</name` and a space, '/'
    or '>' (any case), or at the end of the input (always, for plaintext)."""
    cdef int64_t ln, m
    cdef uint8_t b
    if code == C_PLAINTEXT:
        return n
    ln = e - s
    while True:
        j = _find(a, j, n, 60)
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


cdef bint _has_attr(const uint8_t* a, int64_t j, int64_t end, int64_t at,
                    int64_t ln) noexcept nogil:
    """Whether the tag bytes a[j:end] name the attribute FONT_ATTRS[at:at+ln]."""
    cdef int64_t k = j + 1, m
    cdef uint8_t b
    cdef const uint8_t* word = <const uint8_t*>FONT_ATTRS
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


cdef bint _font_breaks_out(const uint8_t* a, int64_t e, int64_t end) noexcept nogil:
    """A font start tag with color, face or size leaves foreign content."""
    return _has_attr(a, e, end, 1, 5) or _has_attr(a, e, end, 7, 4) or _has_attr(a, e, end,
                                                                                   12, 4)


cdef bint _html_encoding(const uint8_t* a, int64_t j, int64_t end) noexcept nogil:
    """Whether an annotation-xml start tag's encoding is text/html or
    application/xhtml+xml (it then holds HTML)."""
    cdef int64_t k = j, m
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


cdef int64_t _name_code(int64_t* W, const uint8_t* a, int64_t s, int64_t e) noexcept nogil:
    """An element name's code: a known name's, else one given per page to each unknown
    name (past UNKNOWN of them, they share the last)."""
    cdef uint64_t h = FNV_OFFSET
    cdef int64_t i, key, slot, u
    for i in range(s, e):
        h = (h ^ <uint64_t>_lower(a[i])) * FNV_PRIME
    key = <int64_t>h
    slot = <int64_t>(h & 1023)
    while HASH_CODES[slot] >= 0:
        if HASH_KEYS[slot] == key:
            return HASH_CODES[slot]
        slot = (slot + 1) & 1023
    slot = <int64_t>(h & <uint64_t>(USLOTS - 1))
    while W[O_UCODES + slot] >= 0:
        if W[O_UKEYS + slot] == key:
            return W[O_UCODES + slot]
        slot = (slot + 1) & (USLOTS - 1)
    if W[S_UNKNOWN] >= UNKNOWN:
        return CODES - 1
    u = W[S_UNKNOWN]
    W[O_UNAMES + 2 * u] = s
    W[O_UNAMES + 2 * u + 1] = e
    W[S_UNKNOWN] = u + 1
    W[O_UKEYS + slot] = key
    W[O_UCODES + slot] = KNOWN + u
    return KNOWN + u


# -- the stack and the list of active formatting elements -----------------------------------


cdef inline void _push(int64_t* W, int64_t cc) noexcept nogil:
    cdef int64_t d = W[S_DEPTH], bits, k
    W[S_ID] += 1
    W[O_CODE + d] = cc
    W[O_ID + d] = W[S_ID]
    W[O_PREV + d] = W[O_LAST + cc]
    W[O_LAST + cc] = d
    bits = KIND_BITS[cc]
    if bits:
        for k in range(KINDS):
            if bits >> k & 1:
                W[O_KPREV + k * STACK + d] = W[O_KLAST + k]
                W[O_KLAST + k] = d
    W[S_DEPTH] = d + 1


cdef void _forget(int64_t* W, int64_t ident) noexcept nogil:
    """Take an element out of the list of active formatting elements."""
    cdef int64_t q = W[S_AF] - 1, last, r
    while q >= 0:
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
        q -= 1


cdef void _pop_to(int64_t* W, int64_t target, bint own, bint measuring) noexcept nogil:
    """Close the element at position `target` and every one above it, their codes kept
    in W[O_POPPED:] for the rewriting caller's end tags. `own`: the one at `target` is
    closed by its own end tag (a formatting element then leaves the list; closed by
    anything else, it stays there, to be re-created)."""
    cdef int64_t d, cc, bits, k, fl
    W[S_POPPED] = 0
    while W[S_DEPTH] > target:
        d = W[S_DEPTH] - 1
        W[S_DEPTH] = d
        cc = W[O_CODE + d]
        W[O_LAST + cc] = W[O_PREV + d]
        bits = KIND_BITS[cc]
        if bits:
            for k in range(KINDS):
                if bits >> k & 1:
                    W[O_KLAST + k] = W[O_KPREV + k * STACK + d]
        if W[S_CTX] > 0 and W[O_CTX + W[S_CTX] - 1] == d:
            W[S_CTX] -= 1
        W[O_INTEGRATION + d] = 0
        W[O_POPPED + W[S_POPPED]] = cc
        W[S_POPPED] += 1
        if measuring:
            fl = FLAGS[cc]
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


cdef bint _reconstruct(int64_t* W) noexcept nogil:
    """Re-create the formatting elements closed by something else, as the parser does
    before a text or an element (measuring). True when there are too many."""
    cdef int64_t top, k, ident, at, q
    W[S_DANGLING] = 0
    top = W[S_AF]
    k = top
    while k > 0:
        ident = W[O_AF_ID + k - 1]
        at = W[O_AF_POS + k - 1]
        if ident < 0 or (at < W[S_DEPTH] and W[O_ID + at] == ident):
            break
        k -= 1
    if top - k > MAX_RECONSTRUCT or W[S_DEPTH] + top - k >= LIMIT:
        return True
    for q in range(k, top):
        _push(W, W[O_AF_KEY + q] & 0xFFFF)
        W[O_AF_POS + q] = W[S_DEPTH] - 1
        W[O_AF_ID + q] = W[S_ID]
    return False


cdef bint _add_active(int64_t* W, int64_t code, const uint8_t* a, int64_t e,
                      int64_t end) noexcept nogil:
    """The element just pushed, a formatting one, joins the list, with the parser's
    "Noah's Ark" clause (at most three of the same name and attributes after the last
    marker). True when the list grows too long."""
    cdef uint64_t h = FNV_OFFSET
    cdef int64_t q, key, since, same = 0, first = -1
    for q in range(e, end):
        h = (h ^ <uint64_t>a[q]) * FNV_PRIME
    key = <int64_t>((h & ~(<uint64_t>0xFFFF)) | <uint64_t>code)
    since = W[S_AF]
    while since > 0 and W[O_AF_ID + since - 1] >= 0:
        since -= 1
    for q in range(since, W[S_AF]):
        if W[O_AF_KEY + q] == key:
            same += 1
            if first < 0:
                first = q
    if same >= 3:
        _forget(W, W[O_AF_ID + first])
    if W[S_AF] - since >= MAX_ACTIVE or W[S_AF] >= ACTIVE:
        return True
    q = W[S_AF]
    W[O_AF_POS + q] = W[S_DEPTH] - 1
    W[O_AF_ID + q] = W[S_ID]
    W[O_AF_KEY + q] = key
    W[S_AF] = q + 1
    return False


cdef void _phantom(int64_t* W, int64_t cc) noexcept nogil:
    """An element past the cap (rewriting): dropped, counted so its end tag is too."""
    if W[O_PHANTOM + cc] == 0 and W[S_NPC] < STACK:
        W[O_PHANTOM_CODES + W[S_NPC]] = cc
        W[S_NPC] += 1
    W[O_PHANTOM + cc] += 1
    W[S_PHANTOMS] += 1


cdef inline int64_t _min(int64_t x, int64_t y) noexcept nogil:
    return x if x < y else y


cdef inline int64_t _max(int64_t x, int64_t y) noexcept nogil:
    return x if x > y else y


cdef int64_t _implied_target(int64_t* W, int64_t code, int64_t fl) noexcept nogil:
    """Where the end tags a start tag implies leave the stack (HTML "in body" and table
    rules): the lowest position closed, or the depth when none is."""
    cdef int64_t d = W[S_DEPTH], top, target, p, li, item, t, at
    top = W[O_CODE + d - 1] if d > 0 else -1
    target = d
    p = W[O_LAST + C_P]
    if fl & F_CLOSES_P and p >= 0 and p > _max(W[O_KLAST + K_SCOPE], W[O_KLAST + K_BUTTON]):
        target = p
    if fl & F_HEADING:
        if 0 <= top < CODES and FLAGS[top] & F_HEADING:
            target = _min(target, d - 1)
    elif code == C_LI:
        li = W[O_LAST + C_LI]
        if li >= 0 and W[O_KLAST + K_SPECIAL_LI] == li:
            target = _min(target, li)
    elif code == C_DD or code == C_DT:
        item = W[O_KLAST + K_ITEM]
        if item >= 0 and W[O_KLAST + K_SPECIAL_LI] == item:
            target = _min(target, item)
    elif code == C_TD or code == C_TH:
        if W[O_KLAST + K_CELL] > W[O_KLAST + K_TABLE]:
            target = _min(target, W[O_KLAST + K_CELL])
    elif code == C_TR:
        if W[O_LAST + C_TR] > W[O_KLAST + K_TABLE]:
            target = _min(target, W[O_LAST + C_TR])
    elif (code == C_TBODY or code == C_THEAD or code == C_TFOOT or code == C_CAPTION
          or code == C_COLGROUP):
        t = W[O_KLAST + K_TABLE]
        if t >= 0 and W[O_CODE + t] == C_TABLE:
            target = _min(target, t + 1)
    elif code == C_TABLE:
        if top == C_TABLE or top == C_TBODY or top == C_THEAD or top == C_TFOOT or top == C_TR:
            target = _min(target, W[O_KLAST + K_TABLE])
    elif code == C_OPTION or code == C_OPTGROUP:
        if top == C_OPTION or (code == C_OPTGROUP and top == C_OPTGROUP):
            target = _min(target, d - 1)
    elif code == C_SELECT:
        if W[O_LAST + C_SELECT] >= 0:
            target = _min(target, W[O_LAST + C_SELECT])
    elif code == C_A or code == C_NOBR or code == C_BUTTON:
        at = W[O_LAST + code]
        if at >= 0 and W[O_KLAST + K_SCOPE] < at and (
                code == C_BUTTON or W[O_KLAST + K_SPECIAL] < at):
            target = _min(target, at)
    return target


cdef int64_t _end_target(int64_t* W, int64_t code, bint foreign) noexcept nogil:
    """The position an end tag closes, or -1 when the parser ignores it."""
    cdef int64_t fl, d, scope, at, bound
    if foreign:  # foreign rules: the nearest element of that name in the foreign run
        at = W[O_LAST + code + CODES]
        if at >= 0 and at >= W[O_CTX + W[S_CTX] - 1]:
            return at
    fl = FLAGS[code]
    if code == C_FORM:
        d = W[S_DEPTH]
        return d - 1 if d > 0 and W[O_CODE + d - 1] == C_FORM else -1
    scope = W[O_KLAST + K_SCOPE]
    if fl & F_HEADING:
        at = W[O_KLAST + K_HEADING]
        bound = scope
    else:
        at = W[O_LAST + code]
        if fl & F_FORMATTING:
            # with a special element above it the adoption agency re-parents instead
            # of closing: the depth stays (counted as if the end tag were ignored)
            bound = _max(scope, W[O_KLAST + K_SPECIAL])
        elif code == C_P:
            bound = _max(scope, W[O_KLAST + K_BUTTON])
        elif code == C_LI:
            bound = _max(scope, W[O_KLAST + K_LIST])
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


def new_state():
    """The scan's state array, every chain empty."""
    W = np.zeros(O_END, dtype=np.int64)
    W[O_KLAST:O_KLAST + 16] = -1
    W[O_LAST:O_PHANTOM] = -1
    W[O_UCODES:O_UNAMES] = -1
    return W


def scan(const uint8_t[::1] data, int64_t n, int64_t mode, uint8_t[::1] out):
    """MEASURE: (0, -) when the markup is within bounds, (1, -) when not. REWRITE: (1,
    the size of the bounded markup), written to `out` when it fits there. `data` holds the
    markup's n bytes and at least 16 zero bytes after them."""
    if not configured:
        raise RuntimeError("markup_scan.configure was not called")
    if data.shape[0] < n + 16:
        raise ValueError("the markup must be padded with 16 zero bytes")
    W_a = new_state()
    cdef int64_t[::1] W_view = W_a
    cdef int64_t result
    with nogil:
        result = _scan(&data[0], n, mode == REWRITE, &out[0] if out.shape[0] else NULL,
                       out.shape[0], &W_view[0])
    return (1 if mode == REWRITE else result), int(W_a[S_SIZE])


cdef int64_t _scan(const uint8_t* a, int64_t n, bint rewrite, uint8_t* out,  # noqa: C901
                   int64_t out_size, int64_t* W) noexcept nogil:
    """The tokenizer and tree builder over the page: a branch per token kind. Returns 1
    when measuring finds the page out of bounds, else 0."""
    cdef int64_t pos = 0, i, depth, end, s, e, nattr, code, fl, cc, target, top, close
    cdef uint8_t c1
    cdef bint foreign, closing, selfclose, point
    while True:
        i = _find(a, pos, n, 60)
        if i > pos:  # text
            if rewrite:
                _put(out, out_size, W, a + pos, i - pos)
            elif W[S_DANGLING] and _reconstruct(W):
                return 1
        if i >= n:
            break
        c1 = a[i + 1]
        depth = W[S_DEPTH]
        foreign = depth > 0 and W[O_CODE + depth - 1] >= CODES
        # -- comments, doctypes, bogus comments, CDATA: copied as they are --
        if c1 == 33 or c1 == 63 or (c1 == 47 and not _letter(a[i + 2])):
            end = _markup_declaration_end(a, n, i, foreign)
            if rewrite:
                _put(out, out_size, W, a + i, end - i)
            pos = end
            continue
        closing = c1 == 47
        s = i + 2 if closing else i + 1
        if not _letter(a[s]):  # a '<' of text
            if rewrite:
                _put(out, out_size, W, <const uint8_t*>b"<", 1)
            pos = i + 1
            continue
        e = s
        while e < n and not (_ws(a[e]) or a[e] == 47 or a[e] == 62):
            e += 1
        end = _tag_end(a, n, e, &nattr, &selfclose)
        if end < 0:  # the input ends inside the tag, which the parser drops
            if rewrite:
                _put(out, out_size, W, a + i, n - i)
            break
        pos = end
        if nattr > 16 and not rewrite:
            W[S_WORK] += nattr * nattr
            if W[S_WORK] > ATTRIBUTE_WORK:
                return 1
        code = _name_code(W, a, s, e)
        if code == C_IMAGE:
            code = C_IMG
        fl = FLAGS[code]
        if closing:
            if foreign and (code == C_BR or code == C_P) and (
                    W[O_LAST + code + CODES] < W[O_CTX + W[S_CTX] - 1]):
                # back to the HTML around the foreign run
                _pop_to(W, W[O_CTX + W[S_CTX] - 1], False, not rewrite)
                if rewrite:
                    _end_tags(out, out_size, W, a)
                foreign = False
            if W[S_PHANTOMS] > 0:
                cc = code + CODES if foreign else code
                if W[O_PHANTOM + cc] > 0:  # the end of an element past the cap: dropped
                    W[O_PHANTOM + cc] -= 1
                    W[S_PHANTOMS] -= 1
                    continue
            if fl & F_ROOT or (fl & F_VOID and code != C_BR):
                if rewrite and fl & F_ROOT:
                    _put(out, out_size, W, a + i, end - i)
                continue
            if code == C_BR:  # </br> is read as <br>
                if not rewrite and W[S_ID] >= MAX_ELEMENTS:
                    return 1
                if rewrite and W[S_DEPTH] < LIMIT and W[S_PHANTOMS] == 0 and (
                        W[S_ID] < MAX_ELEMENTS):
                    _tag(out, out_size, W, C_BR, a, False, False)
                W[S_ID] += 1
                continue
            target = _end_target(W, code, foreign)
            if target < 0:
                if rewrite and W[S_PHANTOMS] == 0:
                    _put(out, out_size, W, a + i, end - i)  # the parser reads it (and ignores it)
                continue
            _pop_to(W, target, True, not rewrite)
            if rewrite:
                _end_tags(out, out_size, W, a)
            continue
        # -- start tags --
        if W[S_ID] >= MAX_ELEMENTS and not rewrite:
            return 1
        if rewrite and (W[S_PHANTOMS] > 0 or W[S_DEPTH] >= LIMIT or W[S_ID] >= MAX_ELEMENTS):
            if not (fl & F_VOID) and not (foreign and selfclose):
                _phantom(W, code + CODES if foreign else code)
            if fl & F_RAW and not foreign:
                close = _raw_end(a, n, end, code, s, e)
                _escaped(out, out_size, W, a, end, close)
                pos = close
            continue
        if foreign and not W[O_INTEGRATION + W[S_DEPTH] - 1]:
            if not (fl & F_BREAKOUT or (code == C_FONT and _font_breaks_out(a, e, end))):
                if selfclose:
                    W[S_ID] += 1
                    if rewrite:
                        _tag(out, out_size, W, code, a, False, True)
                    continue
                if W[S_DEPTH] >= LIMIT:
                    return 1
                point = (FLAGS[code + CODES] & F_INTEGRATION) != 0 and (
                    code != C_ANNOTATION or _html_encoding(a, e, end))
                _push(W, code + CODES)
                W[O_INTEGRATION + W[S_DEPTH] - 1] = point
                if rewrite:
                    _start_tag(out, out_size, W, code, a, e, end, point and code == C_ANNOTATION)
                continue
            _pop_to(W, W[O_CTX + W[S_CTX] - 1], False, not rewrite)  # a breakout
            if rewrite:
                _end_tags(out, out_size, W, a)
            foreign = False
        if fl & F_ROOT:
            if nattr > 0 and not rewrite:
                W[S_ROOTS] += 1
                if W[S_ROOTS] > MAX_ROOT_TAGS:
                    return 1
            if rewrite:
                _tag(out, out_size, W, code, a, False, False)
            continue
        target = _implied_target(W, code, fl)
        if target < W[S_DEPTH]:
            _pop_to(W, target, code == C_A or code == C_NOBR or code == C_BUTTON, not rewrite)
            if rewrite:
                _end_tags(out, out_size, W, a)
        if rewrite and W[S_DEPTH] >= LIMIT:
            if not (fl & F_VOID):
                _phantom(W, code)
            continue
        if W[S_DANGLING] and not rewrite and (not (fl & F_SPECIAL) or fl & F_VOID):
            if _reconstruct(W):
                return 1
        if fl & F_VOID or (fl & F_FOREIGN_ROOT and selfclose):
            W[S_ID] += 1  # an element too, for MAX_ELEMENTS
            if rewrite:
                _tag(out, out_size, W, code, a, False, (fl & F_FOREIGN_ROOT) != 0)
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
        if W[S_DEPTH] >= LIMIT:
            if not rewrite:
                return 1
            _phantom(W, code)
            continue
        if fl & F_FOREIGN_ROOT:  # a run of foreign elements begins
            W[O_CTX + W[S_CTX]] = W[S_DEPTH]
            W[S_CTX] += 1
            _push(W, code + CODES)
        else:
            if foreign:  # HTML inside an integration point: a run of HTML begins
                W[O_CTX + W[S_CTX]] = W[S_DEPTH]
                W[S_CTX] += 1
            _push(W, code)
        if rewrite:
            _start_tag(out, out_size, W, code, a, e, end, False)
        else:
            if fl & F_MARKER:
                if W[S_AF] >= ACTIVE:
                    return 1
                W[O_AF_ID + W[S_AF]] = -1
                W[S_AF] += 1
            if fl & F_FORMATTING and _add_active(W, code, a, e, end):
                return 1
        if fl & F_RAW:  # its content up to its end tag (read as the next token)
            close = _raw_end(a, n, end, code, s, e)
            if rewrite:
                _put(out, out_size, W, a + end, close - end)
            pos = close
    return 0
