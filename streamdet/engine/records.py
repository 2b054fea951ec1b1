"""Input records (SPEC §2): validation and the dead-letter reasons.

A record is one JSON object (a Kafka message value or a JSONL line). Anything that cannot
become a page is rejected with a short, stable reason code (used as a metrics label and
in the dead-letter file) and a human sentence.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

DEFAULT_MAX_BODY = 10 * 1024 * 1024
EARLIEST_TIME = 631152000.0  # 1990-01-01T00:00:00Z: no crawl is older
LATEST_AHEAD = 86400.0  # a fetch time more than a day ahead of the clock is wrong

REASONS = {
    "not_utf8": "bytes are not valid UTF-8",
    "not_json": "not a JSON document",
    "not_object": "JSON value is not an object",
    "no_url": "no url field",
    "bad_url": "url is not an absolute http(s) URL",
    "no_body": "neither html nor text is a non-empty string",
    "too_large": "body is larger than the limit",
    "unreadable": "the input is damaged here (truncated or corrupt file)",
    "unparsable": "the page cannot be analysed",
    "too_slow": "the page's analysis took longer than the page timeout",
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
    implausible_time: bool = False  # a fetched_at was given but read as absent (SPEC §9)


_SURROGATE = re.compile("[\ud800-\udfff]")
# categories of characters no host may hold: separators, controls, format, private use,
# surrogates, unassigned
_NOT_IN_HOSTS = frozenset({"Zs", "Zl", "Zp", "Cc", "Cf", "Co", "Cs", "Cn"})


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
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, or a 5,000-digit number
        raise BadRecord("not_json", f"not JSON: {str(exc)[:200]}") from None
    if not isinstance(obj, dict):
        raise BadRecord("not_object")
    return obj


def page_from_object(obj: dict, max_body: int = DEFAULT_MAX_BODY,
                     now: float | None = None) -> Page:
    """Validate one decoded record; unknown fields are ignored. With `now` (the
    caller's clock), a fetched_at that is not plausible is read as absent."""
    url = obj.get("url")
    if not isinstance(url, str) or not url.strip():
        raise BadRecord("no_url")
    url = as_browser_reads(url.strip())
    if not valid_url(url):
        raise BadRecord("bad_url", f"url is not an absolute http(s) URL with a host and a "
                        f"port in 1-65535: {_quotable(url)!r}")
    url = without_credentials(url)
    html, text = obj.get("html"), obj.get("text")
    if isinstance(html, str) and html:
        body_field = "html"
    elif isinstance(text, str) and text:
        body_field = "text"
    else:
        raise BadRecord("no_body")
    body = _utf8_text(html if body_field == "html" else text)
    if len(body) > max_body // 4 and len(body.encode("utf-8")) > max_body:
        raise BadRecord("too_large", f"{body_field} is larger than the limit of {max_body} bytes")
    ip = clean_ip(obj.get("ip"))
    fetched_at = parse_time(obj.get("fetched_at"))
    implausible = (fetched_at is not None and now is not None
                   and not plausible_time(fetched_at, now))
    return Page(
        url=url,
        html=body if body_field == "html" else None,
        text=body if body_field == "text" else None,
        ip=ip,
        fetched_at=None if implausible else fetched_at,
        implausible_time=implausible,
    )


def plausible_time(t: float, now: float) -> bool:
    """A fetch time a crawler could have written: finite, after 1990, at most a day
    ahead of `now` (clocks drift; a latency metric must not take the rest)."""
    return math.isfinite(t) and EARLIEST_TIME <= t <= now + LATEST_AHEAD


def without_credentials(url: str) -> str:
    """The URL without a `user:pass@` (not part of a document's identity, and never to
    be shown in events, alerts, logs or pages)."""
    start = url.find("//")
    if start < 0:
        return url
    start += 2
    end = len(url)
    for sep in "/?#":
        i = url.find(sep, start)
        if 0 <= i < end:
            end = i
    at = url.rfind("@", start, end)
    return url if at < 0 else url[:start] + url[at + 1:]


def as_browser_reads(url: str) -> str:
    """An http(s) URL with each backslash before its query or fragment read as `/`, as the
    WHATWG URL Standard reads special URLs (SPEC §9): `http://a.example\\@b.example/` is
    on host a.example, path `/@b.example/`, not on b.example with credentials."""
    if "\\" not in url or not url[:6].lower().startswith(("http:", "https:")):
        return url
    end = min((i for i in (url.find("?"), url.find("#")) if i >= 0), default=len(url))
    return url[:end].replace("\\", "/") + url[end:]


def valid_url(url: str) -> bool:
    """Absolute http(s), a host, no whitespace or control characters, encodable as UTF-8;
    the host holds no whitespace, format or unassigned characters (NBSP, U+2028, U+202E:
    a browser refuses such a host)."""
    if any(ord(ch) < 0x21 or ord(ch) == 0x7F for ch in url) or not _is_utf8(url):
        return False
    try:
        parts = urlsplit(url)
        host = parts.hostname  # raises ValueError on a malformed [IPv6] literal
        if parts.port == 0:  # .port raises ValueError past 65535
            return False
    except ValueError:
        return False
    if host and not host.isascii() and any(
            unicodedata.category(ch) in _NOT_IN_HOSTS for ch in host):
        return False
    return parts.scheme.lower() in ("http", "https") and bool(host)


def _quotable(url: str) -> str:
    """A URL for an error sentence: whatever lies between `//` and its last `@` (which may
    be credentials, a password holding `/` or `#` included) shown as `...@`."""
    start, at = url.find("//"), url.rfind("@")
    if start >= 0 and at > start:
        url = url[:start + 2] + "...@" + url[at + 1:]
    return url[:200]


def clean_ip(value: object) -> str | None:
    """The optional ip field, or None when absent or unusable (it is only a server key)."""
    if not isinstance(value, str):
        return None
    ip = value.strip()
    if not ip or not _is_utf8(ip) or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in ip):
        return None
    return ip


def _utf8_text(s: str) -> str:
    """The text with each lone surrogate (JSON can escape one, UTF-8 cannot hold it) read
    as U+FFFD, as a browser's decoder reads bytes it cannot decode: one rule for every
    input and both modes, and nothing downstream meets a surrogate."""
    return s if _is_utf8(s) else _SURROGATE.sub("\ufffd", s)


def _is_utf8(s: str) -> bool:
    """False for text holding unpaired surrogates (JSON can escape them, UTF-8 cannot).
    ASCII text (most pages) is answered without encoding it."""
    if s.isascii():
        return True
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_record(raw: bytes | str, max_body: int = DEFAULT_MAX_BODY) -> Page:
    """One raw record -> Page, or BadRecord with its reason."""
    if len(raw) > 2 * max_body + 65536:
        raise BadRecord("too_large", f"record is larger than the limit of {max_body} bytes")
    return page_from_object(decode(raw), max_body)


def parse_time(value: object) -> float | None:
    """fetched_at as epoch seconds: RFC 3339 text (UTC when it names no offset) or a
    number; None when absent or unreadable."""
    if isinstance(value, bool):
        return None
    try:
        if isinstance(value, int | float):
            try:
                return float(value)
            except OverflowError:  # an integer past any float: as far off as infinity
                return math.inf if value > 0 else -math.inf
        if isinstance(value, str) and value:
            try:
                when = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
            except ValueError:
                return float(value)
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            return when.timestamp()
    except (ValueError, OverflowError):
        return None
    return None
