"""Failed logins, throttled per client and logged.

Guessing a token or a password takes many tries; a reviewer mistyping takes a few. Each
client (its address) has a bucket of failures (adapters.rate_limiter): BURST at once, then
one every 60 / PER_MINUTE seconds. A client whose bucket is empty is answered 429 with
Retry-After, and its credentials are not even checked, the right ones included: a guesser
cannot tell a hit from a miss until it waits. Successes take nothing. Every failure is
logged with the client and the name tried, never the secret.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from ..adapters.rate_limiter import RateLimiter

log = logging.getLogger("streamdet.review")

BURST = 10  # failures a client may make at once
PER_MINUTE = 5  # then this many a minute
CLIENTS = 10_000  # buckets kept: the least recently failed go first beyond it


class Throttle:
    """Failures per client; `wait(client)` says how long it must wait (0: go on)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, burst: int = BURST,
                 per_minute: float = PER_MINUTE) -> None:
        self.clock, self.burst, self.rate = clock, burst, per_minute / 60
        self._buckets: OrderedDict[str, RateLimiter] = OrderedDict()
        self._lock = threading.Lock()

    def wait(self, client: str) -> int:
        """Whole seconds `client` must wait before its next try (0: it may try now)."""
        with self._lock:
            bucket = self._buckets.get(client)
            return 0 if bucket is None else math.ceil(bucket.peek())

    def failed(self, client: str, kind: str, name: str = "") -> None:
        """A failed try (`kind`: login, bearer token, basic): take one from the bucket,
        and log it."""
        log.warning("review: failed %s from %s%s", kind, client,
                    f" as {name[:64]!r}" if name else "")
        with self._lock:
            bucket = self._buckets.pop(client, None)
            if bucket is None:
                bucket = RateLimiter(self.rate, self.clock, burst=self.burst, full=True)
            bucket.delay()
            self._buckets[client] = bucket  # the most recent last
            if len(self._buckets) > CLIENTS:
                self._buckets.popitem(last=False)
