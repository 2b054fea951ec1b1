"""Absolute pair records: what a doc shard tells the others' copies of the pairs its URLs
own (SPEC §10, engine.score_replica).

A pair belongs to the page with the smaller URL (engine.partials.pair_owner): that page's
doc shard alone forms it, reports it and records it (`u<url>`, what the URL's pair events
showed). So a URL's *owned partners*, those of its partners from both sides that sort
after it (engine.pair_index), are one doc shard's to say, and they say every pair on both
sides: `url` is among `other`'s partners from before it exactly when `other` is among
`url`'s owned partners.

A doc shard sends, for each URL whose owned partners a round changed, the whole set,
stamped with the round's seq (which ranks a new owner's rounds above every earlier
owner's: its epoch). A set's add or remove cannot be undone by an owner that never knew
it was sent (one that died amid its sends and lost its disk): a whole set replaces what a
copy holds, stale pairs too, once the URL's new owner sends it. So a new owner sends the
set of every URL its catch-up touches, whether it changed or not, and of every URL whose
record its take-over reconciled (engine.shard_step.take_over)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


def owned_partners(url: str, partners: Iterable[str]) -> list[str]:
    """Those of a URL's partners from both sides whose pair the URL owns, sorted."""
    return sorted(other for other in partners if other > url)


@dataclass
class PairRecords:
    """One round's records: URL -> its owned partners (sorted), all under one stamp."""

    stamp: int
    owned: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> list:
        """[stamp, [url, partner, ...], ...]: a URL's partners share its list."""
        return [self.stamp, *([url, *others] for url, others in self.owned.items())]

    @classmethod
    def from_json(cls, raw: list) -> PairRecords:
        stamp, *rows = raw
        return cls(int(stamp), {str(url): [str(o) for o in others] for url, *others in rows})


def newest(records: Iterable[PairRecords]) -> dict[str, tuple[int, list[str]]]:
    """URL -> (stamp, owned partners) of its newest record (the later of equal stamps)."""
    out: dict[str, tuple[int, list[str]]] = {}
    for rec in records:
        for url, others in rec.owned.items():
            if url not in out or rec.stamp >= out[url][0]:
                out[url] = (rec.stamp, others)
    return out
