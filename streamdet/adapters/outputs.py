"""JSONL sinks for events and dead letters (a path, or `-` for stdout)."""

from __future__ import annotations

import base64
import json
import os
import sys
from datetime import UTC, datetime

from ..engine.records import BadRecord
from .inputs import RawRecord


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
    """The dead-letter entry: reason, message, where it came from, and the original record
    (as text when it is UTF-8, else base64), so nothing is lost. An original too large to
    keep inline is in the file named by `record_file` (and at `offset` of the source)."""
    out = {"reason": err.reason, "error": err.detail, "source": rec.source, "index": rec.index,
           "at": utc_now()}
    if rec.offset is not None:
        out["offset"] = rec.offset
    payload = rec.payload
    if isinstance(payload, dict):
        payload = {k: (base64.b64encode(v).decode() if isinstance(v, bytes) else v)
                   for k, v in payload.items()}
        out["record"] = payload
    elif payload:
        try:
            out["record"] = payload.decode("utf-8")
        except UnicodeDecodeError:
            out["record_base64"] = base64.b64encode(payload).decode()
    if rec.size is not None:
        out["record_size"] = rec.size
        out["record_truncated"] = True  # "record"/"record_base64" holds only a prefix
        if rec.spilled:
            out["record_file"] = rec.spilled
    return out
