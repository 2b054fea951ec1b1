"""Connected components of items 0..n-1 joined pair by pair (a union-find), each named by
its smallest member: so components come out in the order of their first member, and a
caller that groups by name keeps its input's order. Near-duplicate clusters split by
their members' band keys (engine.clusters), a page's sources joined into texts
(ranking.features)."""

from __future__ import annotations


class Components:
    __slots__ = ("_parent",)

    def __init__(self, n: int) -> None:
        self._parent = list(range(n))

    def find(self, i: int) -> int:
        """The smallest member of i's component (paths halved on the way)."""
        parent = self._parent
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def join(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self._parent[max(ra, rb)] = min(ra, rb)
