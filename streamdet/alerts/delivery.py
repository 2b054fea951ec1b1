"""POSTing one alert body to the webhook: httpx for the request, tenacity for the retries.

A 2xx is delivered. No response (connection error, timeout), 408, 425, 429 and 5xx are
retried after the server's Retry-After (capped at RETRY_AFTER_CAP_S) or else an
exponential backoff with jitter (`--backoff` doubling up to `--max-backoff`). Any other
status - a 400, 401, 404, a redirect (never followed) - is final: retrying cannot help. A
stop interrupts the wait between attempts, never a request in flight."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

import httpx
import tenacity

from .config import AlertsConfig, redact
from .stats import Stats
from .timing import Clock, LoopClock

log = logging.getLogger("streamdet.alerts")

RETRY_AFTER_CAP_S = 600.0
RESPONSE_BYTES = 1 << 16  # read of a response body at most (a webhook answers briefly)
ERROR_TEXT = 300  # characters of an error response kept in the log and dead letter


@dataclass(frozen=True)
class Response:
    status: int | None  # None: no response (connection error, timeout)
    retry_after: str | None
    detail: str

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def retryable(self) -> bool:
        return self.status is None or self.status in (408, 425, 429) or self.status >= 500


@dataclass(frozen=True)
class Outcome:
    delivered: bool | None  # None: stopped between attempts (sent again on the next start)
    detail: str  # the last response
    attempts: int


class _Stopped(Exception):
    """Raised by the wait between attempts when the alerter stops."""


def encode_json(obj: dict) -> bytes:
    """A body as sent and dead-lettered: UTF-8, lone surrogates of crawled text kept."""
    return json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass")


def request_headers(cfg: AlertsConfig, alert_id: str | None) -> dict[str, str]:
    """The headers of an alert's POST: the user's, and the alert id as Idempotency-Key."""
    headers = {"Content-Type": "application/json", "User-Agent": "streamdet-alerts",
               **cfg.headers}
    if alert_id:
        headers["Idempotency-Key"] = alert_id
    return headers


def retry_after_s(value: str | None) -> float | None:
    """Retry-After as seconds (a number or an HTTP date), capped; None if absent or bad."""
    if not value:
        return None
    try:
        return min(RETRY_AFTER_CAP_S, max(0.0, float(value)))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return min(RETRY_AFTER_CAP_S, max(0.0, when - time.time()))


class Webhook:
    """The webhook: one HTTP client (its connections reused between alerts) and the retry
    policy of the configuration."""

    def __init__(self, cfg: AlertsConfig, clock: Clock | None = None) -> None:
        self.cfg = cfg
        self.clock = clock or LoopClock()
        self.client = httpx.AsyncClient(timeout=cfg.timeout, follow_redirects=False)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def post(self, data: bytes, headers: dict[str, str]) -> Response:
        """One attempt."""
        try:
            async with self.client.stream("POST", self.cfg.webhook, content=data,
                                          headers=headers) as resp:
                body = bytearray()
                async for chunk in resp.aiter_bytes():
                    body += chunk
                    if len(body) >= RESPONSE_BYTES:
                        break
        except (httpx.HTTPError, httpx.InvalidURL, OSError, ValueError) as exc:
            return Response(None, None, f"{type(exc).__name__}: {exc}")
        code = resp.status_code
        text = "" if 200 <= code < 300 else bytes(body[:ERROR_TEXT]).decode(
            "utf-8", "replace").strip()
        return Response(code, resp.headers.get("Retry-After"), f"HTTP {code} {text}".strip())

    def _delay(self, state: tenacity.RetryCallState) -> float:
        after = retry_after_s(state.outcome.result().retry_after)
        if after is not None:
            return after
        step = min(self.cfg.max_backoff, self.cfg.backoff * 2 ** (state.attempt_number - 1))
        return step / 2 + random.uniform(0, step / 2)

    async def deliver(self, data: bytes, headers: dict[str, str], stop: asyncio.Event,
                      what: str, stats: Stats) -> Outcome:
        """POST one alert body, retrying up to cfg.attempts (0: forever)."""
        cfg = self.cfg

        async def wait(seconds: float) -> None:
            if await self.clock.sleep(seconds, stop):
                raise _Stopped

        def before_sleep(state: tenacity.RetryCallState) -> None:
            stats.retries += 1
            log.warning("%s to %s failed (%s); attempt %d, retrying in %.1f s", what,
                        redact(cfg.webhook), state.outcome.result().detail,
                        state.attempt_number, state.next_action.sleep)

        retrying = tenacity.AsyncRetrying(
            retry=tenacity.retry_if_result(lambda r: not r.ok and r.retryable),
            stop=tenacity.stop_after_attempt(cfg.attempts) if cfg.attempts
            else tenacity.stop_never,
            wait=self._delay, sleep=wait, before_sleep=before_sleep,
            retry_error_callback=lambda state: state.outcome.result())
        attempts = 0

        async def attempt() -> Response:
            nonlocal attempts
            attempts += 1
            return await self.post(data, headers)

        try:
            resp = await retrying(attempt)
        except _Stopped:
            return Outcome(None, "stopped", attempts)
        if resp.ok:
            log.info("%s delivered (%s)", what, resp.detail)
            return Outcome(True, resp.detail, attempts)
        why = "not retried" if not resp.retryable else f"after {attempts} attempts"
        log.error("%s to %s failed %s: %s", what, redact(cfg.webhook), why, resp.detail)
        return Outcome(False, resp.detail, attempts)
