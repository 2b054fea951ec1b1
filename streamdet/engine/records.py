"""Input records (SPEC §2): validation and the dead-letter reasons.

A record is one JSON object (a Kafka message value or a JSONL line). Anything that cannot
become a page is rejected with a short, stable reason code (used as a metrics label and
in the dead-letter file) and a human sentence.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

DEFAULT_MAX_BODY = 10 * 1024 * 1024

REASONS = {
    "not_utf8": "bytes are not valid UTF-8",
    "not_json": "not a JSON document",
    "not_object": "JSON value is not an object",
    "no_url": "no url field",
    "bad_url": "url is not an absolute http(s) URL",
    "no_body": "neither html nor text is a non-empty string",
    "too_large": "body is larger than the limit",
}


class BadRecord(ValueError):
    """A record that cannot become a page; reason is one of REASONS."""

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail or REASONS[reason]
        super().__init__(f"{reason}: {self.detail}")


@dataclass(frozen=True)
class Page:
    """A fetched page: exactly one of html/text is set."""

    url: str
    html: str | None = None
    text: str | None = None
    ip: str | None = None
    fetched_at: float | None = None


def decode(raw: bytes | str) -> dict:
    """Bytes or text of one record -> the JSON object, or BadRecord."""
    if isinstance(raw, bytes | bytearray | memoryview):
        try:
            raw = bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            detail = f"bytes are not valid UTF-8 (at byte {exc.start})"
            raise BadRecord("not_utf8", detail) from None
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise BadRecord("not_json", f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadRecord("not_object")
    return obj


def page_from_object(obj: dict, max_body: int = DEFAULT_MAX_BODY) -> Page:
    """Validate one decoded record; unknown fields are ignored."""
    url = obj.get("url")
    if not isinstance(url, str) or not url.strip():
        raise BadRecord("no_url")
    url = url.strip()
    parts = urlsplit(url)
    if (parts.scheme.lower() not in ("http", "https") or not parts.hostname
            or any(ord(ch) < 0x21 or ord(ch) == 0x7F for ch in url)):
        raise BadRecord("bad_url", f"url is not an absolute http(s) URL: {url[:200]!r}")
    html, text = obj.get("html"), obj.get("text")
    if isinstance(html, str) and html:
        body_field = "html"
    elif isinstance(text, str) and text:
        body_field = "text"
    else:
        raise BadRecord("no_body")
    body = html if body_field == "html" else text
    if len(body) > max_body // 4 and len(body.encode("utf-8")) > max_body:
        raise BadRecord("too_large", f"{body_field} is larger than the limit of {max_body} bytes")
    ip = obj.get("ip")
    return Page(
        url=url,
        html=body if body_field == "html" else None,
        text=body if body_field == "text" else None,
        ip=ip if isinstance(ip, str) and ip else None,
        fetched_at=parse_time(obj.get("fetched_at")),
    )


def parse_record(raw: bytes | str, max_body: int = DEFAULT_MAX_BODY) -> Page:
    """One raw record -> Page, or BadRecord with its reason."""
    if len(raw) > 2 * max_body + 65536:
        raise BadRecord("too_large", f"record is larger than the limit of {max_body} bytes")
    return page_from_object(decode(raw), max_body)


def parse_time(value: object) -> float | None:
    """fetched_at as epoch seconds: RFC 3339 text or a number; None when absent or unreadable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value:
        try:
            iso = value.replace("Z", "+00:00").replace("z", "+00:00")
            return datetime.fromisoformat(iso).timestamp()
        except ValueError:
            try:
                return float(value)
            except ValueError:
                return None
    return None
