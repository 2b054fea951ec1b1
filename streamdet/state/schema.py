"""What the state holds, and its byte encodings.

- grams:  gram (8 bytes, big-endian)  -> posting: the docnos holding it (uint64 LE each),
          or COMMON once more than m documents held it (sticky, SPEC §1 exception).
          Postings may still list docnos of withdrawn document versions; readers drop them
          with the withdrawn set, writers prune them.
- docs:   docno -> DocState snapshot: size, foreign sources with the slots each holds,
          result.
- docdelta: docno -> what changed since the snapshot: the sources whose slots changed
          (an empty list: the source is gone), the slot count and the last result. Most
          re-scores of an earlier document add one foreign source (a new page sharing some
          of its text), and a stream of small batches re-scores each document again and
          again: rewriting all of its ~100 sources each time was the doc shard's largest
          cost. A delta is rewritten while it stays small; then the snapshot is.
- docadds: docno, source, first gram -> a stale document's pending source addition
          (DocState.defer_add): the source's grams, applied to its pairs when it is next
          read whole. A record an addition, written once: a stale document takes source
          after source, mostly without being read (engine.doc_role). A state of an older
          format holds them as one record under the docno alone, read the same.
- stale:  docno -> the patch grams and grams of a document whose result is stale, for
          every such document: what tells the engine it may leave an addition pending
          without reading the document, and the figures its site totals need.
- slots:  docno -> the DocState's patch-gram slots, a key of its own because most
          re-scores change sources but not the patch set: only changed slots are rewritten.
- names:  docno -> server and URL of a live document version (sources need both).
- urls:   URL   -> current docno and the URL's event sequence number.
- dead:   docno -> b"" for every withdrawn (re-fetched) version (the code calls this set
          `withdrawn`; "dead" in the table name is kept so existing states open).
- meta:   parameters, input positions, the docno counter.
"""

from __future__ import annotations

import struct
import sys
from array import array

import numpy as np

from ..engine.documents import COMMON, DocResult, DocState, Posting
from ..engine.paircodec import decode_pairs, encode_pairs, lists_end
from ..engine.source_pairs import SourcePairs
from .maskcodec import decode_mask_pairs

_COMMON_BYTES = b"\x00"
_DOC_HEADER = struct.Struct("<QIIIIB")  # ..., result flag: 0, 1 (quilted) or _STALE
_STALE = 2  # the result's cover was not computed (DocResult.stale)
_PAIRS = 4  # flag bit: sources are slot lists (paircodec), not bitmasks (maskcodec)
_URL_ENTRY = struct.Struct("<QQ")
_STALE_MARK = struct.Struct("<QQ")
_BIG_ENDIAN = sys.byteorder == "big"


def _posting_struct(n: int) -> struct.Struct:
    """The codec of an n-holder posting (compiled once per length, not once per call)."""
    codec = _POSTING_STRUCTS.get(n)
    if codec is None:
        codec = _POSTING_STRUCTS[n] = struct.Struct(f"<{n}Q")
    return codec


_POSTING_STRUCTS: dict[int, struct.Struct] = {}


def encode_posting(p: Posting) -> bytes:
    if p == COMMON:
        return _COMMON_BYTES
    return _posting_struct(len(p)).pack(*p)


def decode_posting(b: bytes) -> Posting:
    if b == _COMMON_BYTES:
        return COMMON
    return _posting_struct(len(b) // 8).unpack(b)


def _le_bytes(a: array) -> bytes:
    """The little-endian bytes of a uint64 array."""
    if _BIG_ENDIAN:
        a = array("Q", a)
        a.byteswap()
    return a.tobytes()


def encode_doc(d: DocState) -> bytes:
    """Canonical bytes (the same document state gives the same bytes, whatever the order
    its sources arrived in) of everything but the slots: the snapshot. Layout: header,
    sources (u64, ascending), their slot lists (paircodec), cover docnos (u64), cover URL
    and count text."""
    return _encode(d, d.sources().tolist())


def encode_doc_packing(d: DocState) -> bytes:
    """`encode_doc`, the document's pairs then kept packed as these bytes hold them
    (engine.source_pairs): a stored snapshot's pairs wait for their next reader packed,
    encoded once."""
    order = d.sources().tolist()
    lists = encode_pairs(*d.pairs.settled(), order, len(d.slots))
    raw = _encode(d, order, lists)
    d.pairs.pack(len(d.slots), lists)
    return raw


def encode_doc_delta(d: DocState, keys: np.ndarray, src: np.ndarray, slot: np.ndarray
                     ) -> bytes:
    """The delta beside a snapshot: the snapshot's layout over the sources changed since
    it was written, `keys` (an empty list for a source that is gone), their pairs `src`,
    `slot` (DocState.delta_pairs). The document then keeps them as its pairs' overlay."""
    order = keys.tolist()
    raw = _encode(d, order, encode_pairs(src, slot, order, len(d.slots)))
    d.pairs.rebase(keys, src, slot)
    return raw


def _encode(d: DocState, order: list[int], lists: bytes | None = None) -> bytes:
    """The layout over the sources in `order` (`lists`: their slot lists, if encoded)."""
    cover = d.result.sources_bytes()
    if lists is None:
        lists = encode_pairs(*d.pairs.settled(), order, len(d.slots))
    flag = (_STALE if d.result.stale else d.result.quilted) | _PAIRS
    return b"".join((
        _DOC_HEADER.pack(d.n_grams, len(d.slots), len(order), len(d.result.docnos),
                         len(cover), flag),
        np.asarray(order, dtype="<u8").tobytes(),
        lists,
        np.asarray(d.result.docnos, dtype="<u8").tobytes(),
        cover,
    ))


def encode_slots(d: DocState) -> bytes:
    """The slots: grams (u64), then the occupied-slot bitmap."""
    n_slots = len(d.slots)
    occupied = np.ones(n_slots, dtype=bool)
    occupied[d.free] = False
    return _le_bytes(d.slots) + np.packbits(occupied, bitorder="little").tobytes()


def decode_doc(b: bytes, slot_bytes: bytes | None, delta: bytes | None = None,
               adds: bytes | None = None) -> DocState:
    """A document from its `docs`, `slots`, `docdelta` and `docadds` values (None: it has
    none)."""
    n_grams, n_slots, pairs, changed, quilted, docnos, cover, blob = _decode(b, packed=True)
    if delta is not None:  # newer slot count, changed sources' lists and result
        _, n_slots, dpairs, changed, quilted, docnos, cover, blob = _decode(delta)
        # the changed sources' lists replace theirs: an overlay while the snapshot is packed
        pairs = pairs.overlaid(np.asarray(changed, dtype=np.uint64), *dpairs.settled())
    slots, free = _decode_slots(slot_bytes or b"", n_slots)
    d = DocState(n_grams, slots, pairs, None, free)
    d.result = DocResult(cover, quilted == 1, d.n_patch, n_grams, docnos, blob, quilted == _STALE)
    if delta is not None:
        d.unsaved = set(changed)
        d.has_delta = True
    if adds is not None:
        d.adds = bytearray(adds)
    d.modified = False  # as stored
    return d


def _decode(b: bytes, packed: bool = False
            ) -> tuple[int, int, SourcePairs, list[int], int, tuple[int, ...],
                       tuple[tuple[str, int], ...], bytes]:
    """n_grams, n_slots, the pairs, the sources listed, result flag (0, 1 quilted,
    _STALE), cover docnos, cover and its bytes, of a snapshot or a delta. `packed`: a
    snapshot's pairs are kept as stored (engine.source_pairs), not decoded."""
    n_grams, n_slots, n_src, n_docnos, n_cover, flag = _DOC_HEADER.unpack_from(b)
    off = _DOC_HEADER.size
    source_array = np.frombuffer(b, dtype="<u8", count=n_src, offset=off).astype(np.uint64)
    sources = source_array.tolist()
    off += 8 * n_src
    if flag & _PAIRS and packed and n_src:
        end = lists_end(b, off, n_src, n_slots)
        pairs = SourcePairs.packed(b[off:end], source_array, n_slots)
        off = end
    elif flag & _PAIRS:
        src, slot, off = decode_pairs(b, off, sources, n_slots)
        pairs = SourcePairs(src, slot)
    else:  # a document written as bitmasks (formats up to 13 / shards-12)
        src, slot, off = decode_mask_pairs(b, off, sources, n_slots)
        pairs = SourcePairs(src, slot)
    docnos = tuple(np.frombuffer(b, dtype="<u8", count=n_docnos, offset=off).tolist())
    off += 8 * n_docnos
    blob = b[off : off + n_cover]
    cover_text = blob.decode("utf-8")
    cover = tuple(
        (u, int(n)) for u, n in (item.split("\x01") for item in cover_text.split("\x00"))
    ) if cover_text else ()
    return n_grams, n_slots, pairs, sources, flag & ~_PAIRS, docnos, cover, blob


def _decode_slots(b: bytes, n_slots: int) -> tuple[array, list[int]]:
    if len(b) != 8 * n_slots + (n_slots + 7) // 8:
        raise ValueError("a document's slots do not match it")
    slots = array("Q")
    slots.frombytes(b[: 8 * n_slots])
    if _BIG_ENDIAN:
        slots.byteswap()
    occupied = np.unpackbits(np.frombuffer(b, dtype=np.uint8, offset=8 * n_slots),
                             count=n_slots, bitorder="little")
    return slots, np.flatnonzero(occupied == 0).tolist()


def encode_stale(n_patch: int, n_grams: int) -> bytes:
    return _STALE_MARK.pack(n_patch, n_grams)


def decode_stale(b: bytes) -> tuple[int, int]:
    return _STALE_MARK.unpack(b)


def encode_name(server: str, url: str) -> bytes:
    return f"{server}\x00{url}".encode()


def decode_name(b: bytes) -> tuple[str, str]:
    server, url = b.decode("utf-8").split("\x00", 1)
    return server, url


def encode_url_entry(docno: int, seq: int) -> bytes:
    return _URL_ENTRY.pack(docno, seq)


def decode_url_entry(b: bytes) -> tuple[int, int]:
    return _URL_ENTRY.unpack(b)
