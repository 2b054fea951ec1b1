"""What the state holds, and its byte encodings.

- grams:  gram (8 bytes, big-endian)  -> posting: the docnos holding it (uint64 LE each),
          or COMMON once more than m documents held it (sticky, SPEC §1 exception).
          Postings may still list docnos of withdrawn document versions; readers drop them
          with the dead set, writers prune them.
- docs:   docno -> DocState: size, patch grams with their foreign sources, last result.
- names:  docno -> server and URL of a live document version (sources need both).
- urls:   URL   -> current docno and the URL's event sequence number.
- dead:   docno -> b"" for every withdrawn (re-fetched) version.
- meta:   parameters, input positions, the docno counter.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

COMMON = "common"  # posting marker: the gram had more than m documents
Posting = tuple[int, ...] | str

_COMMON_BYTES = b"\x00"
_DOC_HEADER = struct.Struct("<QIIIB")
_URL_ENTRY = struct.Struct("<QQ")


def u64key(n: int) -> bytes:
    return n.to_bytes(8, "big")


def key_u64(b: bytes) -> int:
    return int.from_bytes(b, "big")


def encode_posting(p: Posting) -> bytes:
    if p == COMMON:
        return _COMMON_BYTES
    return np.asarray(p, dtype="<u8").tobytes()


def decode_posting(b: bytes) -> Posting:
    if b == _COMMON_BYTES:
        return COMMON
    return tuple(np.frombuffer(b, dtype="<u8").tolist())


@dataclass
class Cover:
    """A document's last computed result: its greedy cover and quilted flag."""

    sources: tuple[tuple[str, int], ...] = ()
    quilted: bool = False
    n_patch: int = 0
    n_grams: int = 0

    @property
    def patch_fraction(self) -> float:
        return self.n_patch / self.n_grams if self.n_grams else 0.0


@dataclass
class DocState:
    """One live document version as the doc shard keeps it.

    pg maps each patch gram (2 <= |docs(g)| <= m) to the docnos of the *foreign* documents
    that also hold it: everything a cover needs, kept current by deltas from gram shards,
    so re-scoring never reads the gram index.
    """

    n_grams: int
    pg: dict[int, list[int]] = field(default_factory=dict)
    result: Cover = field(default_factory=Cover)


def encode_doc(d: DocState) -> bytes:
    grams = np.fromiter(d.pg.keys(), dtype="<u8", count=len(d.pg))
    lengths = np.fromiter((len(v) for v in d.pg.values()), dtype="<u4", count=len(d.pg))
    srcs = [s for v in d.pg.values() for s in v]
    cover = "\x00".join(f"{u}\x01{n}" for u, n in d.result.sources).encode("utf-8")
    return b"".join((
        _DOC_HEADER.pack(d.n_grams, len(d.pg), len(srcs), len(cover), d.result.quilted),
        grams.tobytes(),
        lengths.tobytes(),
        np.asarray(srcs, dtype="<u8").tobytes(),
        cover,
    ))


def decode_doc(b: bytes) -> DocState:
    n_grams, n_pg, n_src, n_cover, quilted = _DOC_HEADER.unpack_from(b)
    off = _DOC_HEADER.size
    grams = np.frombuffer(b, dtype="<u8", count=n_pg, offset=off).tolist()
    off += 8 * n_pg
    lengths = np.frombuffer(b, dtype="<u4", count=n_pg, offset=off).tolist()
    off += 4 * n_pg
    srcs = np.frombuffer(b, dtype="<u8", count=n_src, offset=off).tolist()
    off += 8 * n_src
    cover_text = b[off : off + n_cover].decode("utf-8")
    pg: dict[int, list[int]] = {}
    pos = 0
    for g, n in zip(grams, lengths, strict=True):
        pg[g] = srcs[pos : pos + n]
        pos += n
    sources = tuple(
        (u, int(n)) for u, n in (item.split("\x01") for item in cover_text.split("\x00"))
    ) if cover_text else ()
    return DocState(n_grams, pg, Cover(sources, bool(quilted), len(pg), n_grams))


def encode_name(server: str, url: str) -> bytes:
    return f"{server}\x00{url}".encode()


def decode_name(b: bytes) -> tuple[str, str]:
    server, url = b.decode("utf-8").split("\x00", 1)
    return server, url


def encode_url_entry(docno: int, seq: int) -> bytes:
    return _URL_ENTRY.pack(docno, seq)


def decode_url_entry(b: bytes) -> tuple[int, int]:
    return _URL_ENTRY.unpack(b)
