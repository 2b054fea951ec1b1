"""WARC records framed by their Content-Length and checked (SPEC §9, "WARC").

warcio reads a record's headers and decodes its HTTP payload (chunked transfer,
content encodings) well, but it reads records back to back taking every Content-Length
on trust, and its HTTP parsing assumes a target URI: one wrong length, or one response
without `WARC-Target-URI`, costs the rest of the file. So records are framed here first,
and warcio parses each framed record on its own:

- a record is a header block (up to CRLF CRLF), Content-Length bytes of content and
  CRLF CRLF, and the next record's `WARC/` line (or the end of the input) must follow;
- a record that is not so followed has a wrong length: it is reported (`bad_length`),
  and reading goes on at the next line that starts with `WARC/` after its header block,
  so a record that a too long length swallowed is read, not lost;
- a record with no WARC-Target-URI is reported (`no_url`) and reading goes on;
- a Content-Length past MAX_CONTENT, or one that runs past the end of the input while a
  later `WARC/` line exists, is a wrong length too: the records it would swallow are read.

Looking for the next `WARC/` line reads the input once, holding at most a read's worth of
it: a gigabyte of damage costs a gigabyte of reading, not more, and no memory.

Records longer than `hold` are not held: their content is streamed to `sink(headers,
parts)` (the caller keeps the original of a response, as for an oversized JSONL line),
and a wrong length on one of them resumes after what was streamed.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from warcio.recordloader import ArcWarcRecord, ArcWarcRecordLoader
from warcio.statusandheaders import StatusAndHeaders, StatusAndHeadersParser

MAX_HEADER = 1 << 16  # a WARC header block longer than this is damage, not a header
# a Content-Length above this is damage, not a record (web archives cut files at ~1 GB)
MAX_CONTENT = 1 << 32
_READ = 1 << 20
_WARC_VERSIONS = ["WARC/1.0", "WARC/1.1", "WARC/0.17", "WARC/0.18"]


@dataclass
class Framed:
    """One record as framed: where it begins in the (decompressed) input, its WARC
    headers, and either its full bytes (headers and content) or why it is not usable."""

    offset: int
    headers: StatusAndHeaders | None
    raw: bytes | None = None  # header block + content, when held
    size: int = 0  # header block + content, in bytes
    problem: str | None = None  # "bad_length", "no_url", "too_large", "truncated"
    detail: str = ""

    def header(self, name: str) -> str | None:
        return self.headers.get_header(name) if self.headers is not None else None

    def parsed(self) -> ArcWarcRecord:
        """warcio's record, HTTP headers parsed, for a held record with a target URI."""
        return ArcWarcRecordLoader().parse_record_stream(io.BytesIO(self.raw))


class _Window:
    """A read buffer over a byte stream, with absolute offsets."""

    def __init__(self, read: Callable[[int], bytes]) -> None:
        self._read = read
        self.buf = bytearray()
        self.at = 0  # offset of buf[0] in the stream
        self.eof = False

    def fill(self, n: int) -> bool:
        """At least n bytes buffered (False when the input ends first)."""
        while len(self.buf) < n and not self.eof:
            chunk = self._read(max(_READ, n - len(self.buf)))
            if not chunk:
                self.eof = True
            self.buf += chunk
        return len(self.buf) >= n

    def drop(self, n: int) -> None:
        del self.buf[:n]
        self.at += n

    def find(self, needle: bytes, start: int, most: int) -> int:
        """Position of needle in buf at or after start, reading up to `most` bytes
        ahead; -1 when it is not there. Each byte is searched once: after a read, the
        search goes on where the last one stopped."""
        at = start
        while True:
            i = self.buf.find(needle, at)
            if i >= 0 or self.eof or len(self.buf) - start > most:
                return i
            at = max(start, len(self.buf) - len(needle) + 1)
            self.fill(len(self.buf) + _READ)


def frames(read: Callable[[int], bytes], hold: int,
           sink: Callable[[StatusAndHeaders, Iterable[bytes]], None]) -> Iterator[Framed]:
    """The records of a WARC stream read with `read(n)` (decompressed), in order."""
    w = _Window(read)
    parser = StatusAndHeadersParser(_WARC_VERSIONS, verify=False)
    while w.fill(5) or w.buf:
        if not w.buf.startswith(b"WARC/"):
            yield from _junk(w)
            continue
        end = w.find(b"\r\n\r\n", 0, MAX_HEADER)
        cut = w.buf.find(b"\nWARC/", 0, end if end >= 0 else len(w.buf))
        if cut >= 0:  # the next record's header begins before this one's ends
            yield Framed(w.at, None, size=cut + 1, problem="bad_length",
                         detail="a WARC header block without its end")
            w.drop(cut + 1)
            continue
        if end < 0:
            yield Framed(w.at, None, size=len(w.buf), problem="truncated" if w.eof else
                         "bad_length", detail="a WARC header block without its end")
            if not _resync(w, 1):
                return
            continue
        head = bytes(w.buf[:end + 4])
        headers = parser.parse(io.BytesIO(head))
        try:
            length = int(headers.get_header("Content-Length") or "")
            if not 0 <= length <= MAX_CONTENT:
                raise ValueError
        except ValueError:
            yield Framed(w.at, headers, size=len(head), problem="bad_length",
                         detail=f"Content-Length {headers.get_header('Content-Length')!r} "
                                "is not a length")
            _resync(w, len(head))
            continue
        yield from _content(w, headers, head, length, hold, sink)


def _content(w: _Window, headers: StatusAndHeaders, head: bytes, length: int, hold: int,
             sink: Callable[[StatusAndHeaders, Iterable[bytes]], None]) -> Iterator[Framed]:
    offset, total = w.at, len(head) + length
    if total > hold:  # streamed to the sink, not held
        w.drop(len(head))
        got = _stream(w, length, lambda parts: sink(headers, parts))
        if got < length:
            yield Framed(offset, headers, size=len(head) + got, problem="truncated",
                         detail=f"the WARC file ends {length - got:,} bytes short of the end "
                                "of this record")
            return
        ok = _boundary_at(w, 0)
        yield Framed(offset, headers, size=total, problem="too_large" if ok else "bad_length",
                     detail="" if ok else _bad_length(length))
        if ok:
            w.drop(4)
        else:
            _resync(w, 0)
        return
    if not w.fill(total + 4 + 5) and len(w.buf) < total:
        if w.buf.find(b"\nWARC/", len(head)) >= 0:  # a later record: the length is wrong
            yield Framed(offset, headers, size=len(w.buf), problem="bad_length",
                         detail=_bad_length(length))
            _resync(w, len(head))
            return
        yield Framed(offset, headers, raw=bytes(w.buf), size=len(w.buf), problem="truncated",
                     detail=f"the WARC file ends {total - len(w.buf):,} bytes short of the "
                            "end of this record")
        w.drop(len(w.buf))
        return
    # CRLF CRLF where the length says is a record framed right, even when what follows is
    # no record: that is junk of its own (reported by `frames`), not this record's fault
    if not _boundary_at(w, total) and bytes(w.buf[total:total + 4]) != b"\r\n\r\n":
        yield Framed(offset, headers, size=total, problem="bad_length",
                     detail=_bad_length(length))
        _resync(w, len(head))
        return
    raw = bytes(w.buf[:total])
    w.drop(total + 4)
    yield from _record(offset, headers, raw, total)


def _junk(w: _Window) -> Iterator[Framed]:
    """Bytes where a record should begin that are none, up to the next `WARC/` line:
    reported and skipped. Blank lines are no damage: they are dropped, and what follows
    them is looked at afresh (with the window filled again, so a `WARC/` cut by the end
    of a read is not taken for junk)."""
    blanks = len(w.buf) - len(w.buf.lstrip(b"\r\n \t"))
    if blanks:
        w.drop(blanks)
        return
    at = w.at
    found = _resync(w, 0)
    yield Framed(at, None, size=w.at - at, problem="bad_length",
                 detail=f"{w.at - at:,} bytes between WARC records that are no record"
                        + ("" if found else " (to the end of the file)"))


def _record(offset: int, headers: StatusAndHeaders, raw: bytes, total: int
            ) -> Iterator[Framed]:
    if headers.get_header("WARC-Type") == "response" and not headers.get_header(
            "WARC-Target-URI"):
        yield Framed(offset, headers, raw=raw, size=total, problem="no_url",
                     detail="a response record without WARC-Target-URI")
        return
    yield Framed(offset, headers, raw=raw, size=total)


def _bad_length(length: int) -> str:
    return (f"Content-Length {length:,} does not end at a record boundary (wrong length); "
            "reading went on at the next WARC header")


def _boundary_at(w: _Window, i: int) -> bool:
    """CRLF CRLF at i, then the end of the input or the next record's `WARC/`."""
    w.fill(i + 4 + 5)
    if bytes(w.buf[i:i + 4]) != b"\r\n\r\n":
        return False
    rest = bytes(w.buf[i + 4:i + 9])
    return rest == b"WARC/" or (not rest and w.eof)


def _resync(w: _Window, start: int) -> bool:
    """Drop up to the next line that starts with `WARC/` after `start`; False when
    there is none (the input ends). What is searched is dropped as the search goes, so
    the window never holds more than a read."""
    needle = b"\nWARC/"
    while True:
        i = w.buf.find(needle, start)
        if i >= 0:
            w.drop(i + 1)
            return True
        if w.eof:
            w.drop(len(w.buf))
            return False
        w.drop(max(start, len(w.buf) - len(needle) + 1))
        start = 0
        w.fill(len(w.buf) + _READ)


def _stream(w: _Window, n: int, sink: Callable[[Iterable[bytes]], None]) -> int:
    """Pass the next n bytes to sink without holding them; how many there were."""
    got = 0

    def parts() -> Iterator[bytes]:
        nonlocal got
        while got < n:
            if not w.buf and not w.fill(1):
                return
            take = min(len(w.buf), n - got)
            piece = bytes(w.buf[:take])
            w.drop(take)
            got += take
            yield piece

    sink(parts())
    return got
