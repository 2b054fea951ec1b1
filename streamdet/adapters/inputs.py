"""Where records come from: JSONL, JSONL.gz, WARC(.gz), stdin, or the bundled sample.

The format is recognised by content (gzip magic, then "WARC/"), not by file name, so a
`.gz` of either works and `-` (stdin) needs no flag. Every record carries its source key
and index: the embedded runner stores how many records of each source it has applied,
atomically with the state, and skips them when run again.
"""

from __future__ import annotations

import gzip
import io
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources

from ..engine.records import BadRecord

SAMPLE = "sample"


class InputError(RuntimeError):
    """An input that cannot be opened at all (missing file, unreadable, unknown format)."""


@dataclass
class RawRecord:
    """One record as read: JSON bytes (JSONL) or an already-built object (WARC)."""

    source: str
    index: int
    payload: bytes | dict
    error: BadRecord | None = None  # a record the reader itself could not decode


@dataclass
class Source:
    key: str  # identity for positions: absolute path with size, "stdin" or "sample"
    label: str
    opener: object  # () -> binary file object

    def records(self) -> Iterator[RawRecord]:
        with self.opener() as raw:
            stream = _unwrap_gzip(raw)
            head = stream.peek(5)[:5] if hasattr(stream, "peek") else b""
            if head == b"WARC/":
                yield from _warc_records(self.key, stream)
            else:
                yield from _jsonl_records(self.key, stream)


def _unwrap_gzip(raw) -> io.BufferedReader:
    stream = raw if hasattr(raw, "peek") else io.BufferedReader(raw)
    if stream.peek(2)[:2] == b"\x1f\x8b":
        return io.BufferedReader(gzip.GzipFile(fileobj=stream))
    return stream


def _jsonl_records(key: str, stream) -> Iterator[RawRecord]:
    index = 0
    for line in stream:
        if not line.strip():
            continue
        yield RawRecord(key, index, line.rstrip(b"\r\n"))
        index += 1


def _warc_records(key: str, stream) -> Iterator[RawRecord]:
    from warcio.archiveiterator import ArchiveIterator

    index = 0
    for rec in ArchiveIterator(stream):
        if rec.rec_type != "response" or rec.http_headers is None:
            continue
        ctype = (rec.http_headers.get_header("Content-Type") or "").lower()
        if ctype and "html" not in ctype and not ctype.startswith("text/"):
            continue  # images, scripts, PDFs: not pages, not bad records either
        body = rec.content_stream().read()
        obj = {
            "url": rec.rec_headers.get_header("WARC-Target-URI"),
            "ip": rec.rec_headers.get_header("WARC-IP-Address"),
            "fetched_at": rec.rec_headers.get_header("WARC-Date"),
        }
        error = None
        try:
            obj["html"] = body.decode(_charset(ctype) or "utf-8")
        except (UnicodeDecodeError, LookupError):
            error = BadRecord("not_utf8", f"body is not valid {_charset(ctype) or 'UTF-8'}")
            obj["html_bytes"] = body
        yield RawRecord(key, index, obj, error)
        index += 1


def _charset(ctype: str) -> str | None:
    for part in ctype.split(";"):
        name, _, value = part.strip().partition("=")
        if name == "charset" and value:
            return value.strip("\"' ")
    return None


def open_source(path: str) -> Source:
    """A Source for a path, `-` for stdin; InputError when it cannot be read."""
    if path == "-":
        return Source("stdin", "stdin", lambda: _NoClose(sys.stdin.buffer))
    if not os.path.exists(path):
        raise InputError(f"input file not found: {path}")
    if os.path.isdir(path):
        raise InputError(f"input is a directory, not a file: {path}")
    if not os.access(path, os.R_OK):
        raise InputError(f"input file is not readable: {path}")
    full = os.path.abspath(path)
    return Source(f"{full}:{os.path.getsize(full)}", path, lambda: open(full, "rb"))


def sample_source() -> Source:
    """The bundled sample crawl (real pages plus a few planted quilts)."""
    ref = resources.files("streamdet") / "sample" / "sample-crawl.jsonl.gz"
    return Source(SAMPLE, "bundled sample crawl", lambda: ref.open("rb"))


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
