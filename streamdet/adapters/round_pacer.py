"""How long a worker lets records gather before its next round.

A round has costs that do not grow with its records: each shard step's state commit and
lookups, the site shard's figures, the producer's requests, the broker's fetch
responses. While the worker keeps up, a round holds the one or two records that came
since the last one, and those costs are paid per record: a paced page costs a worker
more than twice the CPU of a page of a backlog, and on a machine that is short of cores
that is what makes events late. Rounds that gather records pay them once for many, but
make each hop wait: a fixed wait cuts the workers' CPU and the broker's, and holds every
event back even when the machine is idle.

So the wait follows the load: the share of the last `window_s` seconds the worker spent
in rounds (from its records fetched to the round handed to its acknowledgements). Below
`low` the next round starts as soon as records come; from `low` to `high` the wait grows
in proportion, up to `most_s`. Gathering lowers the share (fewer rounds for the same
records), so the wait settles where the two meet rather than running to the ceiling; a
machine slowed by other work stretches the rounds, raises the share and gathers more.
`low` is a compromise: waiting from a lower share saves no CPU at a light load and adds
to the latency, while waiting only from a higher one lets the workers fall behind when
the load rises; a worker gathering early keeps the slack it needs.
A worker with a backlog never waits (adapters.worker): its records are already there.
"""

from __future__ import annotations

from collections import deque

LOW, HIGH = 0.5, 0.9  # busy shares between which the wait grows from none to the most
WINDOW_S = 2.0


class RoundPacer:
    """The wait before a worker's next round, from the rounds of the last `window_s`.

    The worker passes its monotonic clock's readings in; nothing here reads a clock."""

    def __init__(self, most_s: float, window_s: float = WINDOW_S, low: float = LOW,
                 high: float = HIGH) -> None:
        if not 0 <= low < high <= 1:
            raise ValueError(f"need 0 <= low < high <= 1, got {low}, {high}")
        self.most_s, self.window_s, self.low, self.high = most_s, window_s, low, high
        self.spans: deque[tuple[float, float]] = deque()  # (began, ended) of recent rounds

    def ran(self, began: float, ended: float) -> None:
        """A round took the worker from `began` to `ended`."""
        self.spans.append((began, ended))

    def busy_share(self, now: float) -> float:
        """The share of [now - window_s, now] the worker spent in rounds."""
        start = now - self.window_s
        while self.spans and self.spans[0][1] <= start:
            self.spans.popleft()
        busy = sum(min(ended, now) - max(began, start) for began, ended in self.spans)
        return min(1.0, max(0.0, busy / self.window_s))

    def gather_for(self, share: float) -> float:
        """How long after a round's start the next one should start, at a busy share of
        `share` (`busy_share`: the worker reports the share beside the wait)."""
        over = (share - self.low) / (self.high - self.low)
        return max(0.0, self.most_s) * min(1.0, max(0.0, over))
