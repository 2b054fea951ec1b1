"""Which position may be committed: the end of the longest prefix of events that are done.

An event is done when it needs no alert, or when its alert was delivered or dead-lettered;
nothing behind an undelivered alert is ever committed, so a stop at any moment loses
nothing. Kafka keeps one lane per partition; an events file has one lane (key None)."""

from __future__ import annotations

from collections import deque
from typing import Any


class Mark:
    """One event read: where it ends (its lane's next position) and whether it is done."""

    __slots__ = ("key", "pos", "done")

    def __init__(self, key: Any, pos: int, done: bool = False) -> None:
        self.key, self.pos, self.done = key, pos, done


class Tracker:
    """Per lane the marks in read order; `advance()` gives the committable positions."""

    def __init__(self) -> None:
        self.lanes: dict[Any, deque[Mark]] = {}
        self.ready: dict[Any, int] = {}  # committable position per key
        self.held = 0  # marks kept (not yet committable)

    def add(self, key: Any, pos: int, done: bool = False) -> Mark:
        mark = Mark(key, pos, done)
        lane = self.lanes.get(key)
        if done and not lane:
            self.ready[key] = pos
            return mark
        if lane is None:
            lane = self.lanes[key] = deque()
        lane.append(mark)
        self.held += 1
        return mark

    def advance(self) -> dict[Any, int]:
        for key, lane in self.lanes.items():
            while lane and lane[0].done:
                self.ready[key] = lane.popleft().pos
                self.held -= 1
        return self.ready

    def drop(self, key: Any) -> None:
        """A lane taken away (a revoked partition): its marks are forgotten."""
        lane = self.lanes.pop(key, None)
        if lane:
            self.held -= len(lane)
        self.ready.pop(key, None)
