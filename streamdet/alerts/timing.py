"""The alerter's clock: what time it is, and a sleep that a stop interrupts.

Windows, the rate limit and retry delays all read this one clock, so a test can run them
on a fake one instead of sleeping for real."""

from __future__ import annotations

import asyncio
from typing import Protocol


async def sleep_unless(event: asyncio.Event, timeout: float) -> bool:
    """Sleep up to timeout; True if the event was set (at once or meanwhile)."""
    if event.is_set():
        return True
    try:
        await asyncio.wait_for(event.wait(), timeout)
        return True
    except TimeoutError:
        return False


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep(self, seconds: float, interrupt: asyncio.Event) -> bool:
        """Sleep; True if `interrupt` was set (at once or meanwhile)."""


class LoopClock:
    """The event loop's monotonic clock."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep(self, seconds: float, interrupt: asyncio.Event) -> bool:
        return await sleep_unless(interrupt, seconds)
