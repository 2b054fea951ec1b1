"""Messages from a gram shard to a doc shard: how one document's patch set changed.

A gram shard sees a gram's postings change and tells every document holding the gram what
that means for it; the doc shard applies the deltas in order and re-scores whoever changed.
"""

from __future__ import annotations

from typing import NamedTuple

GAIN = 0  # gram became a patch gram of the target, with these other holders
LOSE = 1  # gram stopped being a patch gram of the target
ADD = 2  # gram gained another holder (source)
DROP = 3  # gram lost a holder (a withdrawn version)


class Delta(NamedTuple):
    target: int  # docno whose patch set changes
    op: int
    gram: int
    arg: tuple[int, ...] | int  # GAIN: other holders; ADD/DROP: the holder; LOSE: 0
    cause: str  # URL of the record whose arrival produced it
