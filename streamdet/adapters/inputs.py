"""Where records come from: JSONL, JSONL.gz, WARC(.gz), stdin, or the bundled sample.

The format is recognised by content (gzip magic, then "WARC/"), not by file name, so a
`.gz` of either works and `-` (stdin) needs no flag. Every record carries its source key,
its index and a chained digest of the source's records up to and including it: the
embedded runner stores, atomically with the state, how many records of each source it has
applied and that digest, and when run again skips exactly those records - after checking
that the input really is the one it applied (stdin may carry another stream each time).

Robustness rules (nothing crashes the run, nothing is dropped without a count):
- JSONL: CRLF line endings and a UTF-8 byte-order mark at the start of a line are
  accepted; blank lines are not records. A line longer than the record limit is never held
  in memory: it is read through once for its length and SHA-256 and becomes a `too_large`
  dead letter that keeps its first 64 KiB (SPEC §9: dead letters are bounded, whatever a
  compressed input inflates to).
- WARC: only `response` records with an HTTP 2xx status and an HTML (or text/plain, read
  as text) content type are pages; other responses are counted as ignored. The body is
  decoded with the charset of the Content-Type header, else of a `<meta charset>` in the
  first bytes, else UTF-8; a body that does not decode is a `not_utf8` dead letter with its
  bytes, a body above the limit a `too_large` one (its first 64 KiB, like a long line).
- A file that cannot be read to its end (truncated or corrupt gzip or WARC, I/O error)
  yields the records before the damage and then one `unreadable` dead letter.
"""

from __future__ import annotations

import codecs
import gzip
import hashlib
import io
import os
import re
import sys
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from importlib import resources

import mmh3

from ..engine.records import DEFAULT_MAX_BODY, BadRecord

SAMPLE = "sample"
STDIN = "stdin"
BOM = b"\xef\xbb\xbf"
PREFIX_KEPT = 64 * 1024  # bytes of an oversized record kept inline in its dead letter
CHUNK = 1 << 20


class InputError(RuntimeError):
    """An input that cannot be opened at all (missing file, unreadable, a directory)."""


DEFAULT_BATCH = 512  # records per atomic batch; earlier documents are re-scored once per batch
# A batch also closes once its records hold a share of the memory budget (state.budget:
# MemoryBudget.batch_bytes): fewer records per batch mean more re-scoring of the earlier
# documents the batch touches, so the share is as large as the batches in flight allow.
BATCH_WAIT_S = 0.25  # a batch of a stream closes this long after its first record


def record_limit(max_body: int) -> int:
    """Longest JSONL line read into memory: beyond it the body cannot be under max_body
    (engine.records.parse_record rejects at 2 * max_body + 64 KiB as well)."""
    return 2 * max_body + 65536


def payload_bytes(payload: bytes | dict | None) -> int:
    """About what a record's payload weighs: its bytes, or a decoded record's (WARC)
    text values, which its page body dominates; a tombstone weighs nothing."""
    if isinstance(payload, dict):
        return sum(len(v) for v in payload.values() if isinstance(v, str))
    return len(payload) if payload else 0


@dataclass
class ReadOptions:
    max_body: int = DEFAULT_MAX_BODY


@dataclass
class RawRecord:
    """One record as read: JSON bytes (JSONL) or an already-built object (WARC)."""

    source: str
    index: int
    payload: bytes | dict
    error: BadRecord | None = None  # a record the reader itself could not decode
    offset: int | None = None  # byte offset of the record (decompressed JSONL; WARC file)
    chain: str = ""  # digest of this source's records 0..index
    size: int | None = None  # size of the original in bytes, when only a prefix is kept
    sha256: str | None = None  # SHA-256 of the original (hex), when only a prefix is kept


def _chain_hasher(previous: bytes):
    """A hasher for the next link of a chain: 128-bit MurmurHash3 seeded with the previous
    link (it identifies an input, it does not need to resist an adversary, and at ~5 GB/s
    it is a small part of reading; a cryptographic hash would be ~10x slower)."""
    return mmh3.mmh3_x64_128(previous)


class _Chain:
    """Digest of a sequence of records, extended record by record."""

    def __init__(self) -> None:
        self.value = b""

    def add(self, *parts: bytes) -> str:
        h = _chain_hasher(self.value)
        for p in parts:
            h.update(len(p).to_bytes(8, "little"))
            h.update(p)
        self.value = h.digest()
        return self.value.hex()


@dataclass
class Source:
    key: str  # identity for positions: real path, "stdin" or "sample"
    label: str
    opener: Callable[[], io.IOBase]  # () -> binary file object
    size: int | None = None  # bytes on disk, when known (progress)
    rereadable: bool = True  # False for stdin: records() can run only once
    bytes_read: int = 0  # raw bytes read so far (progress)
    ignored: Counter = field(default_factory=Counter)  # WARC responses that are not pages

    def records(self, opts: ReadOptions | None = None) -> Iterator[RawRecord]:
        opts = opts or ReadOptions()
        self.bytes_read = 0
        try:
            raw = self.opener()
        except OSError as exc:
            raise InputError(f"cannot open {self.label}: {exc.strerror or exc}") from None
        with raw:
            reader = _Reader(self, raw, opts)
            yield from reader.records()


class _Counting(io.RawIOBase):
    """A raw stream that first serves `prefix`, then `f`, counting the bytes of `f`."""

    def __init__(self, f, source: Source, prefix: bytes = b"") -> None:
        self._f = f
        self._source = source
        self._prefix = prefix

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self._prefix:
            n = min(len(b), len(self._prefix))
            b[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
            return n
        read1 = getattr(self._f, "read1", None)
        data = read1(len(b)) if read1 else self._f.read(len(b))
        n = len(data)
        b[:n] = data
        self._source.bytes_read += n
        return n


class _Reader:
    def __init__(self, source: Source, raw, opts: ReadOptions) -> None:
        self.source = source
        self.key = source.key
        self.raw = raw
        self.opts = opts
        self.chain = _Chain()
        self.index = 0

    # -- format detection -----------------------------------------------------------------
    def _read_exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.raw.read(n - len(out))
            if not chunk:
                break
            out += chunk
        self.source.bytes_read += len(out)
        return out

    def _sniff(self) -> tuple[bytes, bool, bytes]:
        """(raw bytes read, gzip?, first decompressed bytes) without losing anything."""
        head = self._read_exact(2)
        if head != b"\x1f\x8b":
            return head + self._read_exact(6), False, b""
        dec = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            plain = dec.decompress(head)
            while len(plain) < 8:
                chunk = self._read_exact(512)
                if not chunk:
                    break
                head += chunk
                plain += dec.decompress(chunk)
        except zlib.error:
            plain = b""  # reported by the real reader below, with the records before it
        return head, True, plain

    def records(self) -> Iterator[RawRecord]:
        try:
            head, gz, plain = self._sniff()
        except OSError as exc:
            yield self._unreadable(exc)
            return
        first = plain if gz else head
        stream = io.BufferedReader(_Counting(self.raw, self.source, head), CHUNK)
        if first.startswith(b"WARC/"):
            try:
                yield from self._warc(gzip.GzipFile(fileobj=stream).read1 if gz else
                                      stream.read1)
            except MemoryError:
                raise
            except Exception as exc:  # noqa: BLE001 - any read failure ends this input only
                yield self._unreadable(exc)
        else:
            yield from self._jsonl(gzip.GzipFile(fileobj=stream).read1 if gz else stream.read1)

    def _unreadable(self, exc: Exception, rest: bytes = b"", offset: int | None = None,
                    record: dict | None = None) -> RawRecord:
        """The dead letter that ends an input which cannot be read to its end; `rest` is
        what was read of the record it stopped in."""
        what = str(exc) or type(exc).__name__
        if isinstance(exc, OSError) and exc.strerror:
            what = exc.strerror
        err = BadRecord("unreadable", f"input cannot be read past record {self.index}: {what}")
        cut = len(rest) > PREFIX_KEPT
        rec = RawRecord(self.key, self.index, rest[:PREFIX_KEPT] if record is None else record,
                        err, offset=offset, chain=self.chain.add(b"unreadable", rest),
                        size=len(rest) if cut else None,
                        sha256=hashlib.sha256(rest).hexdigest() if cut else None)
        self.index += 1
        return rec

    def _next(self, payload, error=None, **kw) -> RawRecord:
        rec = RawRecord(self.key, self.index, payload, error, **kw)
        self.index += 1
        return rec

    # -- JSONL ----------------------------------------------------------------------------
    def _jsonl(self, read1) -> Iterator[RawRecord]:
        """Records of a JSONL stream read with `read1(n)`. A line is held in memory only up
        to the record limit (plus one read); a longer one is streamed aside."""
        limit = record_limit(self.opts.max_body)
        buf = bytearray()
        offset = 0  # stream offset of buf[0]
        scan = 0  # buf[:scan] holds no newline
        while True:
            nl = buf.find(b"\n", scan)
            if nl < 0 or nl > limit:
                if len(buf) > limit:
                    try:
                        rec, rest, n = self._long_line(read1, bytes(buf), offset)
                    except MemoryError:
                        raise
                    except Exception as exc:  # noqa: BLE001
                        yield self._unreadable(exc, offset=offset)
                        return
                    offset += n
                    buf = bytearray(rest)
                    scan = 0
                    yield rec
                    continue
                scan = len(buf)
                try:
                    chunk = read1(CHUNK)
                except MemoryError:
                    raise
                except Exception as exc:  # noqa: BLE001 - truncated gzip, I/O error, ...
                    yield self._unreadable(exc, bytes(buf), offset)
                    return
                if chunk:
                    buf += chunk
                    continue
                if not buf:
                    return
                nl = len(buf)  # last line without a newline
                buf += b"\n"
            line = bytes(buf[:nl])
            del buf[: nl + 1]
            scan = 0
            start, offset = offset, offset + nl + 1
            rec = self._line(line, start)
            if rec is not None:
                yield rec

    def _line(self, line: bytes, start: int) -> RawRecord | None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if line.startswith(BOM):
            line = line[3:]
        if not line.strip():
            return None  # a blank line is not a record
        return self._next(line, offset=start, chain=self.chain.add(line))

    def _long_line(self, read1, first: bytes, start: int) -> tuple[RawRecord, bytes, int]:
        """Read an oversized line through without holding it. Returns its dead letter, the
        bytes read past its end, and its length with the newline."""
        h = _chain_hasher(self.chain.value)
        tail = {"rest": b"", "ended": False}

        def parts() -> Iterator[bytes]:
            data = first
            while data:
                nl = data.find(b"\n")
                if nl >= 0:
                    tail.update(rest=data[nl + 1:], ended=True)
                    yield data[:nl]
                    return
                yield data
                data = read1(CHUNK)

        read = _read_through(parts(), h)
        total = read.size
        rest, ended = tail["rest"], tail["ended"]
        self.chain.value = h.digest()
        err = BadRecord("too_large", f"record of {total:,} bytes is larger than the limit "
                        f"for a body of {self.opts.max_body:,} bytes")
        rec = self._next(bytes(read.kept), err, offset=start, chain=h.digest().hex(),
                         size=total, sha256=read.sha.hexdigest())
        return rec, rest, total + ended

    # -- WARC -----------------------------------------------------------------------------
    def _warc(self, read) -> Iterator[RawRecord]:
        """Pages of a WARC stream (decompressed, read with `read(n)`), framed and checked
        by adapters.warc: a record with a wrong length, or a response without a target
        URI, is a dead letter of its own and the file goes on."""
        from .warc import frames

        limit = self.opts.max_body
        oversized: list[tuple[int, str, str, bytes]] = []  # size, SHA-256, chain, prefix

        def sink(headers, parts) -> None:
            if headers.get_header("WARC-Type") != "response":
                for _ in parts:
                    pass
                return
            h = _chain_hasher(self.chain.value)
            oversized.append((_read_through(parts, h), h.digest().hex()))

        for fr in frames(read, 2 * limit + 65536, sink):
            rec_type = fr.header("WARC-Type")
            if rec_type not in ("response", None):
                continue
            url = fr.header("WARC-Target-URI")
            if url and url.startswith("<") and url.endswith(">"):  # as WARC 1.0 writers had it
                url = url[1:-1]
            obj = {"url": url, "ip": fr.header("WARC-IP-Address"),
                   "fetched_at": fr.header("WARC-Date")}
            if fr.problem is not None:
                yield self._damaged(fr, obj, oversized)
                if fr.problem == "truncated":
                    return
                continue
            yield from self._response(fr, obj, limit)

    def _damaged(self, fr, obj: dict, oversized: list) -> RawRecord:
        """The dead letter of a record the framing found unusable."""
        if fr.problem == "too_large":
            read, chain = oversized.pop()
            self.chain.value = bytes.fromhex(chain)
            err = BadRecord("too_large", f"record of {read.size:,} bytes is larger than the "
                            f"limit for a body of {self.opts.max_body:,} bytes")
            obj["record_bytes"] = bytes(read.kept)
            return self._next(obj, err, offset=fr.offset, chain=chain, size=read.size,
                              sha256=read.sha.hexdigest())
        reason = "no_url" if fr.problem == "no_url" else "unreadable"
        err = BadRecord(reason, fr.detail)
        kept = fr.raw or b""
        if kept:
            obj["record_bytes"] = kept[:PREFIX_KEPT]
        chain = self.chain.add(fr.problem.encode(), kept)
        whole = kept and len(kept) <= PREFIX_KEPT
        return self._next(obj, err, offset=fr.offset, chain=chain,
                          size=None if whole else fr.size,
                          sha256=None if whole or not kept else hashlib.sha256(kept).hexdigest())

    def _response(self, fr, obj: dict, limit: int) -> Iterator[RawRecord]:
        """A framed response record as a page (or as what it is not: counted as ignored).
        A payload warcio cannot read as HTTP (no status line, broken headers) is a dead
        letter of its own, `unreadable`."""
        try:
            rec = fr.parsed()
        except Exception as exc:  # noqa: BLE001 - warcio's parsers raise several kinds
            fr.problem, fr.detail = "unreadable", (
                f"the response is not HTTP warcio can read: {type(exc).__name__}: "
                f"{str(exc)[:200]}")
            yield self._damaged(fr, obj, [])
            return
        if rec.http_headers is None:
            self.source.ignored["not HTTP"] += 1
            return
        status = rec.http_headers.get_statuscode() or ""
        if not status.startswith("2"):
            self.source.ignored[f"HTTP {status or '?'}"] += 1
            return
        ctype = (rec.http_headers.get_header("Content-Type") or "").strip().lower()
        mime = ctype.split(";")[0].strip()
        if mime and "html" not in mime and mime != "text/plain":
            self.source.ignored[mime] += 1
            return
        meta = "\x00".join(str(v) for v in obj.values()).encode("utf-8", "surrogateescape")
        content = rec.content_stream()
        body = content.read(limit + 1)
        if len(body) > limit:  # a body that decodes (unchunks, inflates) past the limit
            h = _chain_hasher(self.chain.value)
            h.update(meta)
            read = _read_through(_chunks(body, content), h)
            self.chain.value = h.digest()
            err = BadRecord("too_large", f"body of {read.size:,} bytes is larger than the "
                            f"limit of {limit:,} bytes")
            obj["record_bytes"] = bytes(read.kept)
            yield self._next(obj, err, offset=fr.offset, chain=h.digest().hex(),
                             size=read.size, sha256=read.sha.hexdigest())
            return
        chain = self.chain.add(meta, body)
        field_name = "text" if mime == "text/plain" else "html"
        text, error = _decode_body(body, _charset(ctype))
        if error is None:
            obj[field_name] = text
        else:
            obj[field_name + "_bytes"] = body
        yield self._next(obj, error, offset=fr.offset, chain=chain)


_META_CHARSET = re.compile(rb"""<meta[^>]{0,512}?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)
_LATIN1 = {"iso-8859-1", "iso8859-1", "latin1", "latin-1", "l1", "us-ascii", "ascii",
           "windows-1252", "cp1252"}


# The encodings of the WHATWG Encoding Standard, by Python's codec names: a label naming
# any other codec (utf-7, idna, punycode, rot13, base64, unicode_escape, ...) is no web
# encoding - a browser ignores it - and several of those decode to lone surrogates or fail
# with errors of their own.
_WEB_CODECS = frozenset({
    "utf-8", "cp866", "koi8-r", "koi8-u", "mac-roman", "mac-cyrillic", "cp874", "tis-620",
    *(f"iso8859-{n}" for n in range(1, 17)), *(f"cp{n}" for n in range(1250, 1259)),
    "gbk", "gb2312", "gb18030", "big5", "big5hkscs", "euc_jp", "iso2022_jp", "shift_jis",
    "cp932", "euc_kr", "cp949", "utf-16", "utf-16-be", "utf-16-le"})


def _web_codec(label: str) -> str | None:
    """Python's codec for a charset label, if it names a web encoding."""
    try:
        name = codecs.lookup(label).name
    except (LookupError, ValueError):  # unknown, or a label holding a NUL
        return None
    return name if name in _WEB_CODECS else None


def _decode_body(body: bytes, charset: str | None) -> tuple[str | None, BadRecord | None]:
    """Decode an HTTP body like a browser would, within reason; BadRecord when it cannot be.
    A declared web encoding decodes with U+FFFD for what it cannot read, as a browser
    shows it; any other label is read as absent (UTF-8, strictly)."""
    if body.startswith(BOM):
        body, charset = body[3:], "utf-8"
    if charset is None:
        m = _META_CHARSET.search(body[:4096])
        charset = m.group(1).decode("ascii").lower() if m else None
    label = (charset or "utf-8").lower()
    if label in _LATIN1:  # as WHATWG does: these labels all mean windows-1252
        try:
            return body.decode("cp1252"), None
        except UnicodeDecodeError:
            return body.decode("latin-1"), None
    codec = _web_codec(label)
    if codec is not None and codec != "utf-8":
        return body.decode(codec, errors="replace"), None
    try:
        return body.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        what = "" if codec is not None else f"unknown charset {label[:40]!r} and "
        return None, BadRecord("not_utf8", f"{what}the body is not valid UTF-8 (at byte "
                               f"{exc.start})")


def _charset(ctype: str) -> str | None:
    for part in ctype.split(";"):
        name, _, value = part.strip().partition("=")
        if name.strip() == "charset" and value.strip("\"' "):
            return value.strip("\"' ").lower()
    return None


def open_source(path: str) -> Source:
    """A Source for a path, `-` for stdin; InputError when it cannot be read."""
    if path == "-":
        return Source(STDIN, "stdin", _stdin, rereadable=False)
    if not os.path.exists(path):
        raise InputError(f"input file not found: {path}")
    if os.path.isdir(path):
        raise InputError(f"input is a directory, not a file: {path}")
    if os.path.isfile(path):
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise InputError(f"input file is not readable: {path}: {exc.strerror or exc}") from None
    elif not os.access(path, os.R_OK):
        raise InputError(f"input file is not readable: {path}")
    full = os.path.realpath(path)
    if os.path.isfile(full):
        return Source(full, path, lambda: open(full, "rb"), size=os.path.getsize(full))
    # a pipe or device (`<(zcat ...)`, /dev/stdin): like stdin, it can be read only once
    # and has no lasting identity beyond the name it was given
    return Source(f"stream:{path}", path, lambda: open(path, "rb"), rereadable=False)


def sample_source() -> Source:
    """The bundled sample crawl (real pages plus a few planted quilts)."""
    ref = resources.files("streamdet") / "sample" / "sample-crawl.jsonl.gz"
    if not ref.is_file():
        raise InputError("the bundled sample crawl is missing from this installation "
                         "(streamdet/sample/sample-crawl.jsonl.gz); give --input PATH")
    size = None
    try:
        size = os.path.getsize(str(ref))
    except (OSError, TypeError):
        pass
    return Source(SAMPLE, "bundled sample crawl", lambda: ref.open("rb"), size=size)


def _stdin():
    """A reader of its own on file descriptor 0, left open when closed. Not sys.stdin's:
    the thread that reads a stream blocks in it, and at exit (a SIGTERM while the
    crawler's pipe is still open) the interpreter must lock sys.stdin's buffer to close
    it, which would abort the process instead of letting it exit 130."""
    try:
        return open(sys.stdin.fileno(), "rb", closefd=False)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return _NoClose(sys.stdin.buffer)  # a stdin without a descriptor (in-process use)


class _NoClose(io.RawIOBase):
    """stdin for a `with` block that must not close it."""

    def __init__(self, f) -> None:
        self._f = f

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        data = self._f.read1(len(b)) if hasattr(self._f, "read1") else self._f.read(len(b))
        b[: len(data)] = data
        return len(data)


class Prefixed:
    """What a dead letter keeps of a record read in pieces: its size, its SHA-256 and its
    first PREFIX_KEPT bytes (SPEC §9), whatever the record's size."""

    __slots__ = ("size", "sha", "kept")

    def __init__(self) -> None:
        self.size = 0
        self.sha = hashlib.sha256()
        self.kept = bytearray()

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        self.sha.update(chunk)
        if len(self.kept) < PREFIX_KEPT:
            self.kept += chunk[: PREFIX_KEPT - len(self.kept)]


def _read_through(chunks: Iterable[bytes], h) -> Prefixed:
    """Read an oversized record through once, into the chain hasher `h` and what its dead
    letter keeps of it. Nothing else is kept: a dead letter holds its record's first
    64 KiB whatever the record inflates to."""
    read = Prefixed()
    for chunk in chunks:
        h.update(chunk)
        read.add(chunk)
    return read


def _chunks(first: bytes, content) -> Iterator[bytes]:
    """`first`, then the rest of a stream in CHUNK pieces."""
    data = first
    while data:
        yield data
        data = content.read(CHUNK)
