"""Alerts that could not be delivered: a JSONL file of whole bodies with their last error,
and `streamdet alerts --replay FILE`, which sends them again.

An alert is written and fsynced before the position moves past its events, so a dead
letter is never lost; the webhook appears redacted (its path may hold a secret)."""

from __future__ import annotations

import asyncio
import json
import os

from ..adapters.outputs import utc_now
from .config import AlertsConfig, AlertsError, redact
from .delivery import Webhook, encode_json, request_headers
from .stats import Stats


class DeadLetterFile:
    """Appends dead-lettered alerts, each one durable before append() returns."""

    def __init__(self, cfg: AlertsConfig) -> None:
        self.cfg = cfg
        self.path = cfg.dead_letter_path()
        self._file = None

    def append(self, body: dict, error: str, attempts: int) -> None:
        line = encode_json({"alert": body, "webhook": redact(self.cfg.webhook), "error": error,
                        "attempts": attempts, "at": utc_now()}) + b"\n"
        if self._file is None:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            self._file = open(self.path, "ab")  # noqa: SIM115 - closed in close()
        self._file.write(line)
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _read(path: str) -> list[bytes]:
    try:
        with open(path, "rb") as f:
            return [line for line in f.read().splitlines() if line.strip()]
    except FileNotFoundError:
        raise AlertsError(f"no alert dead letters at {path}") from None


def _rewrite(path: str, lines: list[bytes]) -> None:
    """Replace the file atomically with `lines`."""
    tmp = path + ".replaying"
    with open(tmp, "wb") as f:
        f.write(b"".join(line + b"\n" for line in lines))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


async def replay(cfg: AlertsConfig, path: str, stop: asyncio.Event) -> tuple[int, int]:
    """Send the alerts of a dead-letter file again: those delivered leave the file, those
    that fail again stay in it (with their new error). Returns (delivered, left)."""
    left: list[bytes] = []
    delivered = 0
    webhook = Webhook(cfg)
    try:
        for i, line in enumerate(_read(path)):
            try:
                entry = json.loads(line)
                body = entry["alert"]
            except (ValueError, KeyError, TypeError):
                left.append(line)  # not ours to judge: kept as it is
                continue
            if stop.is_set():
                left.append(line)
                continue
            alert_id = str(body["id"]) if isinstance(body, dict) and body.get("id") else None
            out = await webhook.deliver(encode_json(body), request_headers(cfg, alert_id), stop,
                                        f"dead-lettered alert {i + 1}", Stats())
            if out.delivered:
                delivered += 1
            else:
                entry.update(error=out.detail, attempts=entry.get("attempts", 0) + out.attempts,
                             at=utc_now())
                left.append(encode_json(entry))
    finally:
        await webhook.aclose()
    _rewrite(path, left)
    return delivered, len(left)
