"""JSONL sinks for events and dead letters (a path, or `-` for stdout)."""

from __future__ import annotations

import base64
import json
import os
import sys
from datetime import UTC, datetime

from ..engine.records import BadRecord
from .inputs import RawRecord


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class JsonlSink:
    """Appends one JSON object per line; flushed once per batch, before the state commits,
    so that a crash can repeat lines but never lose them."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.count = 0
        if path is None:
            self._f = None
        elif path == "-":
            self._f = sys.stdout
        else:
            parent = os.path.dirname(os.path.abspath(path))
            os.makedirs(parent, exist_ok=True)
            self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def write(self, obj: dict) -> None:
        self.count += 1
        if self._f is not None:
            self._f.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")

    def flush(self) -> None:
        if self._f is not None:
            self._f.flush()

    def close(self) -> None:
        if self._f is not None and self._f is not sys.stdout:
            self._f.close()
        elif self._f is sys.stdout:
            self._f.flush()


def dead_letter(rec: RawRecord, err: BadRecord) -> dict:
    """The dead-letter entry: reason, message, where it came from, and the original record
    (as text when it is UTF-8, else base64), so nothing is lost."""
    out = {"reason": err.reason, "error": err.detail, "source": rec.source, "index": rec.index,
           "at": utc_now()}
    payload = rec.payload
    if isinstance(payload, dict):
        payload = {k: (base64.b64encode(v).decode() if isinstance(v, bytes) else v)
                   for k, v in payload.items()}
        out["record"] = payload
    else:
        try:
            out["record"] = payload.decode("utf-8")
        except UnicodeDecodeError:
            out["record_base64"] = base64.b64encode(payload).decode()
    return out
