"""streamdet/adapters/rate_limiter.py: the rate limiter behind `streamdet produce --rate` and the
load-test harness, driven by a fake clock (no timing is asserted against the real one)."""

from __future__ import annotations

import asyncio

import pytest

from streamdet.adapters.rate_limiter import RateLimiter


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_rate_limiter_holds_its_rate_on_a_fake_clock():
    clock = FakeClock()
    limiter = RateLimiter(50.0, clock)
    for _ in range(101):
        limiter.wait(clock.sleep)
    assert clock.now - 100.0 == pytest.approx(2.0, abs=1e-9)  # 100 intervals of 20 ms


def test_rate_limiter_makes_up_a_short_stall_but_never_floods():
    clock = FakeClock()
    limiter = RateLimiter(10.0, clock, burst=3)
    for _ in range(5):
        limiter.wait(clock.sleep)
    clock.now += 0.25  # a short stall: 2.5 intervals, made up at once
    assert [limiter.delay() for _ in range(3)][:2] == [0.0, 0.0]
    clock.now += 60.0  # a long one: at most `burst` events at once, then the rate again
    immediate = 0
    while limiter.delay() == 0.0:
        immediate += 1
    assert immediate <= 3


def test_rate_limiter_rejects_a_nonpositive_rate():
    with pytest.raises(ValueError):
        RateLimiter(0)


def test_rate_limiter_without_a_burst_limit_catches_up_in_full():
    """`streamdet produce`'s pacing: after a stall it sends everything it owes at once."""
    clock = FakeClock()
    limiter = RateLimiter(10.0, clock, burst=None)
    for _ in range(3):
        limiter.wait(clock.sleep)
    clock.now += 60.0  # 600 intervals behind
    immediate = 0
    while limiter.delay() == 0.0:
        immediate += 1
    assert immediate == 600  # every slot of the 60 s (the schedule is kept), none skipped


def test_rate_limiter_paces_an_async_sender():
    clock = FakeClock()
    limiter = RateLimiter(4.0, clock)

    async def sleep(s: float) -> None:
        clock.now += s

    async def send(n: int) -> None:
        for _ in range(n):
            await limiter.wait_async(sleep)

    asyncio.run(send(9))
    assert clock.now - 100.0 == pytest.approx(2.0)  # 8 intervals of 250 ms
