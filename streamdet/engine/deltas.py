"""Messages from the gram role to the doc role: how documents' patch sets changed.

A gram role sees postings change and tells every holder what that means for it. Deltas are
grouped per target document and arrival (one delta carries all the grams concerned), so the
doc role checks the source's server once per delta, not once per gram, and a Kafka message
can carry them per document and shard.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple


class DeltaOp(IntEnum):
    """What a delta says of its grams (an int on the wire: messages.DeltasMsg)."""

    GAIN = 0  # the arriving document gains these patch grams; arg: their other holders
    GAIN_FROM = 1  # the target gains these patch grams (they were unique), held also by arg
    ADD = 2  # these patch grams of the target gained another holder: arg
    LOSE = 3  # these grams stopped being patch grams of the target (went common, or alone)
    DROP = 4  # these patch grams of the target lost a holder: arg (a withdrawn version)


GAIN, GAIN_FROM, ADD, LOSE, DROP = DeltaOp  # the names the roles use


class Delta(NamedTuple):
    target: int  # docno whose patch set changes
    op: int  # a DeltaOp (a plain int once decoded: they compare equal)
    grams: list[int]
    arg: int | list[tuple[int, ...]] | None
    cause: str  # URL of the record whose arrival produced it


def arrival_stats(docno: int, deltas: list[Delta]) -> tuple[int, int]:
    """(earlier documents an arrival changed, grams it made common) from the deltas of
    one add: its LOSE deltas are exactly the grams that went common (every holder loses
    them), for metrics."""
    common: set[int] = set()
    for d in deltas:
        if d.op == LOSE:
            common.update(d.grams)
    return len({d.target for d in deltas} - {docno}), len(common)
