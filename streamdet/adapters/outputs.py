"""JSONL sinks for events and dead letters (a path, or `-` for stdout)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
from datetime import UTC, datetime

from ..engine.records import BadRecord
from .inputs import PREFIX_KEPT, RawRecord

# the body of a WARC record's dead letter, as the reader keeps it: the first field present
_BODY_FIELDS = ("html_bytes", "text_bytes", "record_bytes", "html", "text")


class SinkError(RuntimeError):
    """An output that cannot be opened or written (bad path, disk full)."""


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def utc_at(millis: int) -> str:
    """A Kafka timestamp (ms since the epoch) as utc_now writes a time."""
    return datetime.fromtimestamp(millis / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def json_line(obj: dict) -> bytes:
    """One JSONL line (UTF-8, compact, with its newline): every JSONL output's form."""
    # ensure_ascii=False keeps URLs readable; "surrogatepass" can never fail on the odd
    # lone surrogate that slips into an opaque field (valid JSON readers reject those, so
    # records holding them are dead-lettered as base64 before they get here).
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode(
        "utf-8", "surrogatepass")


class JsonlSink:
    """Appends one JSON object per line; flushed once per batch, before the state commits,
    so that a crash can repeat lines but never lose them.

    A run killed while flushing can leave a partial last line; it belonged to a batch
    that was not committed and will be written again, so it is cut off on reopening."""

    def __init__(self, path: str | None, what: str = "output") -> None:
        self.path = path
        self.what = what
        self.count = 0
        self._f = None
        if path is None:
            return
        if path == "-":
            if sys.stdout is None:
                raise SinkError(f"{what} go to stdout, which is closed")
            self._f = sys.stdout.buffer
            return
        try:
            if os.path.isdir(path):
                raise SinkError(f"{what} path is a directory: {path}")
            parent = os.path.dirname(os.path.abspath(path))
            os.makedirs(parent, exist_ok=True)
            self._f = open(path, "a+b")  # noqa: SIM115 - closed in close(); + to read the tail
            _cut_partial_line(self._f)
        except OSError as exc:
            raise SinkError(f"cannot write {what} file {path}: {exc.strerror or exc}") from None

    def write(self, obj: dict) -> None:
        self.count += 1
        if self._f is not None:
            try:
                self._f.write(json_line(obj))
            except OSError as exc:
                raise self._error(exc) from None

    def flush(self) -> None:
        if self._f is not None:
            try:
                self._f.flush()
            except OSError as exc:
                raise self._error(exc) from None

    def close(self) -> None:
        f, self._f = self._f, None
        if f is None:
            return
        try:
            f.flush()
        finally:
            if self.path != "-":
                f.close()

    def _error(self, exc: OSError) -> Exception:
        if isinstance(exc, BrokenPipeError) or self.path == "-":
            return exc
        return SinkError(f"cannot write {self.what} file {self.path}: {exc.strerror or exc}")


def _cut_partial_line(f) -> None:
    """Truncate an append-mode file after its last newline, if it does not end in one."""
    if not f.seekable():
        return
    end = f.seek(0, os.SEEK_END)
    if end == 0:
        return
    fd = f.fileno()
    if os.pread(fd, 1, end - 1) == b"\n":
        return
    pos = end
    while pos > 0:
        step = min(65536, pos)
        chunk = os.pread(fd, step, pos - step)
        i = chunk.rfind(b"\n")
        if i >= 0:
            f.truncate(pos - step + i + 1)
            return
        pos -= step
    f.truncate(0)


def dead_letter(rec: RawRecord, err: BadRecord) -> dict:
    """The dead-letter entry: reason, message, where it came from, and the record: its
    first 64 KiB (PREFIX_KEPT; as text when that is UTF-8, else base64), its size and
    SHA-256 (SPEC §9: a dead letter is bounded whatever its record's size; the whole
    record is at `offset` of its source). A WARC record's is its body as read."""
    out = {"reason": err.reason, "error": err.detail, "source": rec.source, "index": rec.index,
           "at": utc_now()}
    if rec.offset is not None:
        out["offset"] = rec.offset
    payload, size, sha, kept = rec.payload, rec.size, rec.sha256, 0
    if isinstance(payload, dict):
        payload, body = dict(payload), next((k for k in _BODY_FIELDS if k in payload), None)
        if body is not None:
            payload[body], whole, digest = _bounded(payload[body])
            kept = _nbytes(payload[body])
            if size is None:
                size, sha = whole, digest
        out["record"] = json_safe(payload)
    else:
        payload, whole, digest = _bounded(payload or b"")
        kept = len(payload)
        if size is None:
            size, sha = whole, digest
        if payload:
            out.update(as_text(payload, cut=size > kept))
    if size is not None:
        out["record_size"] = size
        out["record_sha256"] = sha
        if size > kept:
            out["record_truncated"] = True  # "record"/"record_base64" holds only a prefix
    return out


def json_safe(payload: dict) -> dict:
    """A record object (a WARC record's) with its bytes fields in base64, for JSON."""
    return {k: (base64.b64encode(v).decode() if isinstance(v, bytes) else v)
            for k, v in payload.items()}


def as_text(raw: bytes, cut: bool, field: str = "record") -> dict:
    """{field: text} when the bytes are UTF-8 (a prefix cut inside a character keeps the
    characters before it), else {field + "_base64": ...}."""
    try:
        return {field: raw.decode("utf-8")}
    except UnicodeDecodeError as exc:
        if cut and exc.start >= len(raw) - 3:
            try:
                return {field: raw[: exc.start].decode("utf-8")}
            except UnicodeDecodeError:
                pass
        return {field + "_base64": base64.b64encode(raw).decode()}


def _nbytes(data: bytes | str) -> int:
    return len(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)


def _bounded(data: bytes | str) -> tuple[bytes | str, int, str]:
    """A record's first PREFIX_KEPT bytes (text stays text, cut at a character), its
    size and SHA-256."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    size, sha = len(raw), hashlib.sha256(raw).hexdigest()
    if size <= PREFIX_KEPT:
        return data, size, sha
    cut = raw[:PREFIX_KEPT]
    return (cut.decode("utf-8", "ignore") if isinstance(data, str) else cut), size, sha
