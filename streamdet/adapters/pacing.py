"""Pacing a sender to a rate: `streamdet produce --rate` and the load-test harness.

Events go out on a schedule (t0 + i/rate) rather than one interval after the previous
send, so the time a send itself takes, or a short stall, does not lower the rate.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class RateLimiter:
    """Paces events to `rate` per second on a schedule, making up for short stalls, but
    by at most `burst` events at once: a sender that fell further behind restarts its
    schedule instead of flooding the broker (`burst=None`: it always catches up in full).

    The clock and sleep are injected so that a test can drive it with fake time."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic,
                 burst: int | None = 1) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        self.interval, self.clock = 1.0 / rate, clock
        self.burst = None if burst is None else max(1, burst)
        self._next: float | None = None

    def delay(self) -> float:
        """Seconds to wait before the next event (and take its slot)."""
        now = self.clock()
        if self._next is None or (
                self.burst is not None and self._next < now - self.burst * self.interval):
            self._next = now  # first event, or too far behind: start again from now
        wait = max(0.0, self._next - now)
        self._next += self.interval
        return wait

    def wait(self, sleep: Callable[[float], None] = time.sleep) -> None:
        if (d := self.delay()) > 0:
            sleep(d)

    async def wait_async(self, sleep: Callable[[float], Awaitable] = asyncio.sleep) -> None:
        if (d := self.delay()) > 0:
            await sleep(d)
