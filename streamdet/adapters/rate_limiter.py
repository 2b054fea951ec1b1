"""The rate limiter: `streamdet produce --rate`, the load-test harness, the alerter's
`--max-per-minute` and the review desk's failed logins (review.throttle).

A token bucket kept as the time its next token is due (the generic cell rate algorithm):
events go out on a schedule (t0 + i/rate) rather than one interval after the previous
send, so the time a send itself takes, or a short stall, does not lower the rate; tokens
saved while idle or behind let at most `burst` events go at once.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable


class RateLimiter:
    """`rate` events a second, at most `burst` at once (`burst=None`: a sender that fell
    behind catches up in full - a fixed schedule). The bucket starts with one token, or
    with all `burst` of them when `full` (an alerter may send its first alerts at once).

    The clock and sleep are injected so that a test can drive it with fake time."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic,
                 burst: int | None = 1, full: bool = False) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        if full and burst is None:
            raise ValueError("a bucket without a burst limit cannot start full")
        self.interval, self.clock = 1.0 / rate, clock
        # how far behind `now` the schedule may lag: the tokens a full bucket holds, but one
        self.slack = math.inf if burst is None else (max(1, burst) - 1) * self.interval
        self.full = full
        self._next: float | None = None  # when the next token is due

    def delay(self) -> float:
        """Seconds to wait before the next event (and take its token)."""
        wait = self.peek()
        self._next += self.interval  # type: ignore[operator] - set by peek
        return wait

    def peek(self) -> float:
        """Seconds until the next token is due, without taking it (0: one is there)."""
        now = self.clock()
        if self._next is None:
            self._next = now - self.slack if self.full else now
        elif self._next < now - self.slack:
            self._next = now - self.slack  # idle or behind: the bucket is full, no more
        return max(0.0, self._next - now)

    def wait(self, sleep: Callable[[float], None] = time.sleep) -> None:
        if (d := self.delay()) > 0:
            sleep(d)

    async def wait_async(self, sleep: Callable[[float], Awaitable] = asyncio.sleep) -> None:
        if (d := self.delay()) > 0:
            await sleep(d)
