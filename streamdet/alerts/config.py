"""The alerter's options, checked once before anything opens (`AlertsConfig.check`)."""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit, urlunsplit

from ..console import UsageError


class AlertsError(UsageError):
    """A problem the user can fix (bad option, unusable state or events file)."""


def redact(url: str) -> str:
    """scheme://host/... : enough to tell which webhook, without the secret in its path
    (Slack's webhooks carry theirs there), for logs and dead letters."""
    p = urlsplit(url)
    return f"{p.scheme}://{p.netloc.rpartition('@')[2]}/…" if p.netloc else "(webhook)"


@dataclass
class AlertsConfig:
    webhook: str
    events: str | None = None  # events JSONL file, or None for Kafka
    broker: str | None = None
    prefix: str = "streamdet"
    group: str | None = None  # default PREFIX-alerts
    start: str = "earliest"  # where a group with no committed offsets starts
    state_file: str | None = None
    follow: bool = False
    idle: float | None = None
    include_rescore: bool = False
    min_score: float | None = None  # only events whose spam_score reaches it (SPEC §10)
    window: float = 30.0
    max_pages: int = 100
    max_per_minute: float = 20.0
    burst: int = 5
    slack: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float = 10.0
    attempts: int = 8
    backoff: float = 1.0
    max_backoff: float = 60.0
    dead_letter: str | None = None
    max_pending: int = 50000
    drain: float = 10.0

    def check(self) -> None:
        self.check_delivery()
        if (self.events is None) == (self.broker is None):
            raise AlertsError("give either --events FILE or --broker HOST:PORT")
        if self.events == "-":
            raise AlertsError("--events must be a file (its position is kept), not stdin")
        if self.follow and self.events is None:
            raise AlertsError("--follow is for --events FILE (Kafka mode always follows)")
        for name in ("window", "drain", "max_per_minute"):
            if getattr(self, name) < 0:
                raise AlertsError(f"--{name.replace('_', '-')} must not be negative")
        if self.idle is not None and self.idle < 0:
            raise AlertsError("--idle must not be negative")
        for name in ("max_pages", "burst", "max_pending"):
            if getattr(self, name) < 1:
                raise AlertsError(f"--{name.replace('_', '-')} must be at least 1")
        if self.min_score is not None and not 0.0 <= self.min_score <= 1.0:
            raise AlertsError(f"--min-score must be within [0, 1], got {self.min_score}")
        if self.start not in ("earliest", "latest"):
            raise AlertsError("--start must be earliest or latest")

    def check_delivery(self) -> None:
        """The webhook and the retry options (all that --replay needs)."""
        if not self.webhook:
            raise AlertsError("--webhook URL (or STREAMDET_ALERTS_WEBHOOK) is required")
        try:
            parts = urlsplit(self.webhook)
            parts.port  # noqa: B018 - raises ValueError for a port past 65535
        except ValueError:
            raise AlertsError(f"--webhook is not a valid URL: {redact(self.webhook)}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise AlertsError(f"--webhook must be an http(s) URL, got {redact(self.webhook)}")
        if parts.username is not None or parts.password is not None:
            self._credentials_to_header(parts)
        for name in ("timeout", "backoff", "max_backoff"):
            if getattr(self, name) < 0:
                raise AlertsError(f"--{name.replace('_', '-')} must not be negative")
        if self.timeout <= 0:
            raise AlertsError("--timeout must be positive")
        if self.attempts < 0:
            raise AlertsError("--attempts must be 0 (retry forever) or more")

    def _credentials_to_header(self, parts) -> None:
        """`https://user:pass@host/...`: the credentials go in a Basic Authorization header
        (as curl would send them), the URL keeps only the host; refused beside an
        Authorization header of the user's own."""
        if any(k.lower() == "authorization" for k in self.headers):
            raise AlertsError("--webhook holds credentials and an Authorization header is "
                              "given too: keep one of them")
        user, password = unquote(parts.username or ""), unquote(parts.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self.headers = {**self.headers, "Authorization": f"Basic {token}"}
        host = parts.netloc.rpartition("@")[2]
        self.webhook = urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))

    @property
    def group_id(self) -> str:
        return self.group or f"{self.prefix}-alerts"

    @property
    def events_topic(self) -> str:
        from ..adapters.kafka import Topics

        return Topics.named(self.prefix).events

    def state_path(self) -> str:
        if self.state_file:
            return self.state_file
        if self.events is not None:
            return self.events + ".alerts-position"
        return f"{self.group_id}.alerts-position"

    def dead_letter_path(self) -> str:
        if self.dead_letter:
            return self.dead_letter
        state = self.state_path()
        return state.removesuffix(".alerts-position") + ".alerts-dead-letter.jsonl"

    def source_id(self) -> str:
        if self.events is not None:
            return "file:" + os.path.realpath(self.events)
        return f"kafka:{self.events_topic}:{self.group_id}"
