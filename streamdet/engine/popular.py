"""Popular phrases (SPEC §8, Fetterly 2005 §3.3): grams on at least P live documents,
counted exactly also beyond m, and each document's pop(d), its number of popular grams.

The gram role knows every gram's count as it changes: a posting lists up to m holders,
and a common gram (more than m once) keeps a *tally* instead (table `popular`): its exact
count, the power sums of its holders' docnos (engine.power_sums, so that the holders left
when withdrawals bring it below P are known without a holder list) and a few live holders
as witnesses, whose kept text gives the phrase's words (`streamdet phrases`).

pop(d) moves only when one of d's grams crosses P, and every holder of it then moves
together: the gram role counts those crossings per document (`PopChanges`) into the same
table, in the same transaction as the postings, so each is counted exactly once however
often its messages are sent again. A gram shard of a Kafka pipeline counts the grams it
owns: pop(d) is the sum over the gram shards (reading.views). A gram crossing P while it
has a posting lists all its holders; a common gram's crossing (only after withdrawals
when P <= m; any time when P > m) is resolved from its tally's power sums.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .power_sums import add_to, recover, sums_of

WITNESSES = 4  # live holders a tally names, for the phrase's text


class Tally:
    """A common gram's exact count, its holders' power sums s_1 .. s_{P-1} and witnesses."""

    __slots__ = ("count", "sums", "witnesses")

    def __init__(self, count: int, sums: list[int], witnesses: list[int]) -> None:
        self.count = count
        self.sums = sums
        self.witnesses = witnesses

    @classmethod
    def of(cls, holders: tuple[int, ...] | list[int], width: int) -> Tally:
        """The tally of a gram held by exactly `holders`."""
        return cls(len(holders), sums_of(holders, width), list(holders[:WITNESSES]))

    def holders(self) -> list[int]:
        """Every holder, when there are fewer than the power sums can tell apart."""
        return list(_recovered(tuple(self.sums), self.count))

    def add(self, docno: int) -> None:
        self.count += 1
        add_to(self.sums, docno)
        if len(self.witnesses) < WITNESSES:
            self.witnesses.append(docno)

    def remove(self, docno: int) -> None:
        self.count -= 1
        add_to(self.sums, docno, -1)
        if docno in self.witnesses:
            self.witnesses.remove(docno)
        if not self.witnesses and 0 < self.count <= len(self.sums):
            self.witnesses = self.holders()[:WITNESSES]

    def encode(self) -> bytes:
        return np.asarray([self.count, len(self.witnesses), *self.sums, *self.witnesses],
                          dtype="<u8").tobytes()

    @classmethod
    def decode(cls, raw: bytes, width: int) -> Tally:
        v = np.frombuffer(raw, dtype="<u8").tolist()
        return cls(v[0], v[2 : 2 + width], v[2 + width : 2 + width + v[1]])


@lru_cache(maxsize=4096)
def _recovered(sums: tuple[int, ...], count: int) -> tuple[int, ...]:
    """`recover`, once per distinct tally: a copied passage's grams share one tally (the
    same holders), and a withdrawal that takes them below P asks for its holders once per
    gram, twice (SPEC §9: a version's withdrawal must cost linear time, and a root
    finding costs milliseconds)."""
    return tuple(recover(list(sums), count))


class PopChanges:
    """pop(d) changes of one add or withdrawal, per document, until `apply` counts them."""

    def __init__(self, popular: int) -> None:
        self.popular = popular
        self.change: dict[int, int] = {}

    def _move(self, docno: int, n: int) -> None:
        self.change[docno] = self.change.get(docno, 0) + n

    def added(self, docno: int, holders: tuple[int, ...], n_grams: int) -> None:
        """`docno` joined `n_grams` grams that `holders` (all of them) held before."""
        count = len(holders) + 1
        if count >= self.popular:
            self._move(docno, n_grams)
            if count == self.popular:
                for y in holders:
                    self._move(y, n_grams)

    def withdrawn(self, rest: tuple[int, ...]) -> None:
        """A holder left a gram that `rest` (all of them) still hold."""
        if len(rest) + 1 == self.popular:
            for y in rest:
                self._move(y, -1)

    def tally_add(self, tally: Tally, docno: int) -> None:
        """`docno` joins a common gram."""
        if tally.count + 1 == self.popular:
            for y in tally.holders():
                self._move(y, 1)
        tally.add(docno)
        if tally.count >= self.popular:
            self._move(docno, 1)

    def tally_remove(self, tally: Tally, docno: int) -> None:
        """`docno` leaves a common gram."""
        tally.remove(docno)
        if tally.count + 1 == self.popular:
            for y in tally.holders():
                self._move(y, -1)

    def apply(self, txn: PopView) -> None:
        """Count the changes into the documents' pop (the shard's share of it)."""
        targets = [d for d, n in self.change.items() if n]
        if not targets:
            return
        for d, now in zip(targets, txn.pop_many(targets), strict=True):
            txn.put_pop(d, now + self.change[d])


class PopView:
    """What counting pop(d) needs from the state (implemented by state.txn.Txn)."""

    def pop_many(self, docnos: list[int]) -> list[int]: ...
    def put_pop(self, docno: int, pop: int) -> None: ...
