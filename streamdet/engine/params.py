"""The detector's parameters (SPEC §1) and their fingerprint.

A state directory or a Kafka pipeline is built for one set of parameters; the
fingerprint is stored with the state so that a run with other parameters is refused
instead of silently mixing two definitions.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from functools import cached_property

import numpy as np

FOREIGN_MODES = ("domain", "host", "ip", "none")


class ParamsError(ValueError):
    """Parameters that cannot define a detector, or that differ from a state's."""


@dataclass(frozen=True)
class Params:
    """k: gram length; m: postings cap; c: minimum cover; theta: minimum patch fraction;
    phi: the share of the patch grams a source must newly cover to count toward c
    (SPEC §5; 0: every source counts, exactly SPEC §1); gamma: the fewest consecutive
    equal sentences that make two pages partial duplicates (SPEC §7); popular: the fewest
    live documents that make a gram a popular phrase (SPEC §8's P); monster_pages,
    monster_pop, monster_sd: a site of at least that many pages whose pop(d) has at least
    that mean and less than that population σ is a monster candidate (SPEC §8);
    chunk_threshold: the fewest live documents that put a paragraph chunk in the labelled
    set L (SPEC §8's T, blind discovery; 0: only chunks a user labels); stop_chunks: the
    keys of the user's stop chunks (engine.chunks), named in the fingerprint and events by
    `stop_list`, their number and digest (a state records the list's name, not its keys)."""

    k: int = 5
    m: int = 50
    c: int = 4
    theta: float = 0.5
    foreign: str = "domain"
    phi: float = 0.0
    gamma: int = 3
    popular: int = 5
    monster_pages: int = 10
    monster_pop: float = 30.0
    monster_sd: float = 15.0
    chunk_threshold: int = 10
    stop_chunks: tuple[int, ...] = field(default=(), compare=False, repr=False)
    stop_list: str = ""

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ParamsError(f"k must be >= 1, got {self.k}")
        if self.m < 2:
            raise ParamsError(f"m must be >= 2 (a patch gram needs two documents), got {self.m}")
        if self.c < 0:
            raise ParamsError(f"c must be >= 0, got {self.c}")
        if not 0.0 <= self.theta <= 1.0:
            raise ParamsError(f"theta must be within [0, 1], got {self.theta}")
        if not 0.0 <= self.phi <= 1.0:
            raise ParamsError(f"phi must be within [0, 1], got {self.phi}")
        if self.gamma < 1:
            raise ParamsError(f"gamma must be >= 1, got {self.gamma}")
        if self.popular < 2:
            raise ParamsError(f"popular must be >= 2 (a phrase on one page is not replicated), "
                              f"got {self.popular}")
        if self.monster_pages < 1 or self.monster_pop < 0 or self.monster_sd < 0:
            raise ParamsError("monster_pages must be >= 1, monster_pop and monster_sd >= 0")
        if self.chunk_threshold < 0 or self.chunk_threshold == 1:
            raise ParamsError(f"chunk_threshold must be 0 (no blind discovery) or >= 2, "
                              f"got {self.chunk_threshold}")
        if self.stop_chunks:
            object.__setattr__(self, "stop_chunks", tuple(sorted(set(self.stop_chunks))))
            named = stop_list_name(self.stop_chunks)
            if self.stop_list and self.stop_list != named:
                raise ParamsError(f"stop_list {self.stop_list!r} does not name the stop "
                                  f"chunks given ({named!r})")
            object.__setattr__(self, "stop_list", named)
        if self.foreign not in FOREIGN_MODES:
            modes = ", ".join(FOREIGN_MODES)
            raise ParamsError(f"foreign must be one of {modes}, got {self.foreign!r}")

    def counts(self, gain: int, n_patch: int) -> bool:
        """Whether a cover source that newly covered `gain` of a page's `n_patch` patch
        grams counts toward c: at least phi of them (always when phi is 0)."""
        return gain >= self.phi * n_patch

    def counted(self, gains: Iterable[int], n_patch: int) -> int:
        """How many cover sources count toward c."""
        return sum(1 for g in gains if self.counts(g, n_patch))

    def is_quilted(self, patch_fraction: float, n_patch: int, gains: Iterable[int]) -> bool:
        """SPEC §1 and §5: patch fraction >= theta, and at least c sources count."""
        return patch_fraction >= self.theta and self.counted(gains, n_patch) >= self.c

    @cached_property
    def stop_keys(self) -> np.ndarray:
        """The stop chunks' keys as an array, for engine.chunks.page_chunks."""
        return np.asarray(self.stop_chunks, dtype=np.uint64)

    def to_dict(self) -> dict:
        """The parameters as the fingerprint and events name them (the stop list by
        `stop_list`)."""
        out = asdict(self)
        del out["stop_chunks"]
        return out

    def fingerprint(self) -> str:
        """Canonical JSON of the parameters, stored beside the state."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_fingerprint(cls, text: str) -> Params:
        return cls(**json.loads(text))

    def check_same(self, stored: Params, where: str) -> None:
        """Refuse to continue a state built with other parameters."""
        if stored != self:
            diff = ", ".join(
                f"{name}={getattr(stored, name)!r} (asked {getattr(self, name)!r})"
                for name in self.to_dict()
                if getattr(stored, name) != getattr(self, name)
            )
            raise ParamsError(
                f"{where} was built with other parameters: {diff}; "
                "use the same parameters or a new state directory"
            )


def stop_list_name(keys: Iterable[int]) -> str:
    """How a stop list is named: its number of distinct chunks and a digest of their keys."""
    distinct = sorted(set(keys))
    digest = hashlib.sha256(np.asarray(distinct, dtype="<u8").tobytes()).hexdigest()[:16]
    return f"{len(distinct)} chunks, sha256 {digest}"
