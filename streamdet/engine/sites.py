"""Site statistics (SPEC §8, Fetterly 2005 §3.4): per host and per registered domain, the
pages, mean and population σ of pop(d), mean patch fraction and quilted pages, and the
"monster" candidates: sites of many pages that all repeat about as many popular phrases.

Each live document *contributes* (pop(d), patch fraction, quilted) to its host's and its
domain's totals: pages, Σpop, Σpop², Σ patch fraction and quilted pages. Totals are sums,
so they are kept current by taking a document's old contribution out and putting its new
one in, whatever the order of arrivals, re-fetches and re-scores. Everything is an
integer (a patch fraction in units of 2^-32), so the totals, and the monster rule
evaluated on them exactly, do not depend on that order either (the streaming rule).

Records (table `sites`): `c<docno>` a live document's last contribution with its host
and domain; `h<host>` / `d<domain>` a site's totals, with the seq of its `site` events
and whether the last one showed a monster, under `H` / `D` while it has two pages or
more. Most sites of a crawl have one page (1.6 sites a page on the load stream), and
site statistics mean something only over several: `sites` reads the upper-case records
alone unless asked for one-page sites too.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Collection, Iterable, MutableMapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np

from .keyed import KeyedRecords, prefix_end
from .params import Params
from .servers import host_of, registered_domain

FIXED_ONE = 1 << 32  # a patch fraction f is kept as floor(f * 2^32)
LEVELS = {b"h": "host", b"d": "domain", b"H": "host", b"D": "domain"}
SHARED = {b"h": b"H", b"d": b"D"}  # the prefix of a site of two pages or more
# pop and Σpop are signed: a state upgraded from before format 10 counts pop(d) from 0 and
# may take it below (its figures are marked short, views.pop_counts)
_CONTRIBUTION = struct.Struct("<qQB")  # pop, patch fraction (fixed), quilted
_TOTALS = struct.Struct("<QqQQQB")  # pages, Σpop, Σfraction, quilted, seq, monster shown


@dataclass(frozen=True)
class Contribution:
    """What one live document adds to its sites' totals."""

    pop: int
    fraction: int  # patch fraction in units of 2^-32
    quilted: bool
    host: str
    domain: str

    @classmethod
    def of(cls, url: str, pop: int, n_patch: int, n_grams: int, quilted: bool) -> Contribution:
        return cls.at(host_of(url), pop, n_patch, n_grams, quilted)

    @classmethod
    def at(cls, host: str, pop: int, n_patch: int, n_grams: int, quilted: bool
           ) -> Contribution:
        """`of` for a URL whose host is known (engine.site_shard keeps it parsed)."""
        fraction = (n_patch * FIXED_ONE) // n_grams if n_grams else 0
        return cls(pop, fraction, quilted, host, registered_domain(host))

    def sites(self) -> list[bytes]:
        return [b"h" + self.host.encode("utf-8"), b"d" + self.domain.encode("utf-8")]

    def encode(self) -> bytes:
        return (_CONTRIBUTION.pack(self.pop, self.fraction, self.quilted)
                + f"{self.host}\x00{self.domain}".encode())

    @classmethod
    def decode(cls, raw: bytes) -> Contribution:
        pop, fraction, quilted = _CONTRIBUTION.unpack_from(raw)
        host, domain = raw[_CONTRIBUTION.size :].decode("utf-8").split("\x00")
        return cls(pop, fraction, bool(quilted), host, domain)


@dataclass
class Totals:
    """A site's sums over its live documents, and what its `site` events last showed."""

    pages: int = 0
    pop: int = 0
    pop2: int = 0
    fraction: int = 0
    quilted: int = 0
    seq: int = 0
    shown: bool = False  # the last `site` event said it is a monster candidate

    def add(self, c: Contribution, sign: int) -> None:
        self.pages += sign
        self.pop += sign * c.pop
        self.pop2 += sign * c.pop * c.pop
        self.fraction += sign * c.fraction
        self.quilted += sign * c.quilted

    def monster(self, params: Params) -> bool:
        """SPEC §8: at least monster_pages pages, mean pop >= monster_pop and σ <
        monster_sd, decided on the integer sums (n Σpop² - (Σpop)² < sd² n²)."""
        n = self.pages
        if n < params.monster_pages:  # monster_pages >= 1 (Params): n is not 0 past here
            return False
        (a, b), (c, d) = _ratios(params.monster_pop, params.monster_sd)
        # pop / n >= a / b and (n pop2 - pop^2) / n^2 < (c / d)^2, in integers
        spread = n * self.pop2 - self.pop * self.pop
        return self.pop * b >= a * n and spread * d * d < c * c * n * n

    def figures(self, params: Params) -> dict:
        n = self.pages
        return {
            "pages": n,
            "pop_mean": self.pop / n if n else 0.0,
            "pop_sd": math.sqrt(max(n * self.pop2 - self.pop * self.pop, 0)) / n if n else 0.0,
            "patch_mean": self.fraction / FIXED_ONE / n if n else 0.0,
            "quilted": self.quilted,
            "monster": self.monster(params),
        }

    def encode(self) -> bytes:
        return (_TOTALS.pack(self.pages, self.pop, self.fraction, self.quilted, self.seq,
                             self.shown) + self.pop2.to_bytes(16, "little"))

    @classmethod
    def decode(cls, raw: bytes | None) -> Totals:
        if raw is None:
            return cls()
        pages, pop, fraction, quilted, seq, shown = _TOTALS.unpack_from(raw)
        pop2 = int.from_bytes(raw[_TOTALS.size :], "little")
        return cls(pages, pop, pop2, fraction, quilted, seq, bool(shown))


@lru_cache(maxsize=8)
def _ratios(pop: float, sd: float) -> tuple[tuple[int, int], tuple[int, int]]:
    """The monster thresholds as exact integer ratios (a float is one)."""
    return pop.as_integer_ratio(), sd.as_integer_ratio()


def site_name(key: bytes) -> tuple[str, str]:
    """(name, level) of a totals record's key."""
    return key[1:].decode("utf-8"), LEVELS[key[:1]]


class SiteView(Protocol):
    """What the site role needs from the state (implemented by state.txn.Txn)."""

    sites: KeyedRecords


def contribution_key(docno: int) -> bytes:
    return b"c" + docno.to_bytes(8, "big")


def site_slot(level: str, name: str) -> str:
    """A site's (or neighbourhood's) key in a doc shard's map of what consumers were
    shown (URLs key quilts; no URL starts with \x01)."""
    return f"\x01{level}\x00{name}"


def slot_subject(slot: str) -> tuple[str, str] | None:
    """(level, name) of a site_slot; None for a slot of a URL."""
    if not slot.startswith("\x01"):
        return None
    level, _, name = slot[1:].partition("\x00")
    return level, name


def show(flag: bool, was: bool, slot: str, shown: MutableMapping[str, str] | None) -> bool:
    """Whether a `site` event must tell `flag`: it differs from what consumers were last
    shown (`shown`, while a Kafka doc shard's new owner catches up), else from what the
    site's record says its last event showed (`was`); `shown` learns it."""
    last = was if shown is None or slot not in shown else shown[slot] == "1"
    if shown is not None and flag != last:
        shown[slot] = "1" if flag else "0"
    return flag != last

class SiteRole:
    """Keeps the sites' totals current and tells when a site becomes, or stops being, a
    monster candidate."""

    def __init__(self, params: Params) -> None:
        self.params = params

    def settle(self, txn: SiteView, now: dict[int, tuple[Contribution | None, str]],
               next_seq: Callable[[int], int],
               shown: MutableMapping[str, str] | None = None) -> list[dict]:
        """Apply documents' contributions as they stand after a batch (None: withdrawn),
        each with the URL that caused its change; return the `site` events (without
        `at`, stamped by the adapter), compared with `shown` where given (show)."""
        docnos = list(now)
        old = dict(zip(docnos, txn.sites.get_many([contribution_key(d) for d in docnos]),
                       strict=True))
        moves: list[tuple[Contribution, int, str]] = []
        for d, (c, cause) in now.items():
            before = None if old[d] is None else Contribution.decode(old[d])
            if before == c:
                continue
            if before is not None:
                moves.append((before, -1, cause))
            if c is not None:
                moves.append((c, 1, cause))
            txn.sites.put(contribution_key(d), None if c is None else c.encode())
        return self._apply(txn, moves, next_seq, shown)

    def _apply(self, txn: SiteView, moves: list[tuple[Contribution, int, str]],
               next_seq: Callable[[int], int],
               shown: MutableMapping[str, str] | None) -> list[dict]:
        keys = sorted({k for c, _, _ in moves for k in c.sites()})
        totals = read_totals(txn, keys)
        was_shared = {k for k, t in totals.items() if t.pages >= 2}
        causes: dict[bytes, str] = {}
        for c, sign, cause in moves:
            for k in c.sites():
                totals[k].add(c, sign)
                causes[k] = cause
        events = []
        for k in keys:
            t = totals[k]
            monster = t.monster(self.params)
            told = show(monster, t.shown, site_slot(*reversed(site_name(k))), shown)
            t.shown = monster
            if told:
                t.seq = next_seq(t.seq)
                events.append(site_event(k, t, causes[k], self.params))
            raw = t.encode() if t.pages or t.seq else None
            shared = t.pages >= 2
            txn.sites.put(_shared_key(k) if shared else k, raw)
            if shared != (k in was_shared):  # it moved: the other record goes
                txn.sites.put(k if shared else _shared_key(k), None)
        return events

    def reconcile(self, txn: SiteView, shown: MutableMapping[str, str],
                  next_seq: Callable[[int], int], cause: str) -> list[dict]:
        """The events that end a Kafka doc shard's catch-up (engine.shard_step): every
        site whose status differs from what consumers hold (`shown`; a site without a
        slot was never a candidate for them). Only a site the catch-up touched was
        compared; one whose status the last owner flipped past the group's commit, and
        that this owner's batching never touched, would otherwise stay wrong for them."""
        totals = {k[:1].lower() + k[1:]: Totals.decode(raw)  # by one-page key
                  for prefix in (b"h", b"d", b"H", b"D")
                  for k, raw in txn.sites.scan(prefix, prefix_end(prefix))}
        held = {_ONE_PAGE[level] + name.encode("utf-8") for level, name in
                filter(None, map(slot_subject, shown)) if level in _ONE_PAGE}
        events = []
        for k in sorted({k for k, t in totals.items() if t.shown} | held):
            t = totals.get(k) or Totals()
            if show(t.shown, False, site_slot(*reversed(site_name(k))), shown):
                t.seq = next_seq(t.seq)
                events.append(site_event(k, t, cause, self.params))
                txn.sites.put(_shared_key(k) if t.pages >= 2 else k, t.encode())
        return events


_ONE_PAGE = {"host": b"h", "domain": b"d"}  # a level's prefix of one-page totals keys


def _shared_key(key: bytes) -> bytes:
    """The key of a site's totals while it has two pages or more."""
    return SHARED[key[:1]] + key[1:]


def read_totals(txn: SiteView, keys: list[bytes]) -> dict[bytes, Totals]:
    """Sites' totals by their one-page keys, wherever they are kept."""
    raws = txn.sites.get_many([*keys, *map(_shared_key, keys)])
    n = len(keys)
    return {k: Totals.decode(raws[i] if raws[i] is not None else raws[n + i])
            for i, k in enumerate(keys)}


def site_event(key: bytes, t: Totals, cause: str, params: Params) -> dict:
    """A `site` event: the site became (monster true) or stopped being a monster
    candidate (SPEC §8), with its figures."""
    name, level = site_name(key)
    return {"event": "site", "site": name, "level": level, "seq": t.seq,
            **t.figures(params), "cause": cause, "params": params.to_dict()}


def page_sites(txn: SiteView, url: str, params: Params) -> list[dict]:
    """The figures of a page's host and domain (SPEC §8), for `explain`."""
    keys = Contribution.of(url, 0, 0, 0, False).sites()
    return [{"site": site_name(k)[0], "level": site_name(k)[1], **t.figures(params)}
            for k, t in read_totals(txn, keys).items()]


def site_rows(items: Iterable[tuple[bytes, bytes]], params: Params, min_pages: int = 1,
              levels: Collection[str] | None = None, monsters: bool = False,
              top: int | None = None) -> list[dict]:
    """`streamdet sites` rows of the sites with at least `min_pages` live pages, from
    their totals records: monster candidates first, then by mean pop (most first), then
    by name, then level. Only those of `levels`, only monster candidates if `monsters`,
    only the first `top`. A state of 500,000 documents holds 85,000 sites of two pages
    or more; decoding each record in Python cost more than reading them, so the records
    are ranked as one numpy array and only the rows kept are decoded."""
    keys, raws = [], []
    for key, raw in items:
        keys.append(key)
        raws.append(raw)
    if not keys or top is not None and top <= 0:
        return []
    table = np.frombuffer(b"".join(raws), dtype=_TOTALS_ROW)
    level = np.frombuffer(b"".join(k[:1] for k in keys), dtype=np.uint8)
    kept = table["pages"] >= max(min_pages, 1)
    if levels is not None:
        kept &= np.isin(level, _prefixes_of(levels))
    rows = np.flatnonzero(kept)
    monster = _monsters(table, rows, raws, params)
    if monsters:
        rows, monster = rows[monster], monster[monster]
    # -Σpop / pages as Python divides them (both are exact in a double below 2^53)
    mean = -table["pop"][rows].astype(np.float64) / table["pages"][rows].astype(np.float64)
    is_host = np.isin(level[rows], _prefixes_of({"host"}))  # "domain" < "host"
    order = np.lexsort((is_host, _name_ranks(keys, rows), mean + 0.0, ~monster))  # -0.0: 0.0
    chosen = rows[order[:top]]
    return [{"site": keys[i][1:].decode("utf-8"), "level": LEVELS[keys[i][:1]],
             **Totals.decode(raws[i]).figures(params)} for i in chosen.tolist()]


_TOTALS_ROW = np.dtype([("pages", "<u8"), ("pop", "<i8"), ("fraction", "<u8"),
                        ("quilted", "<u8"), ("seq", "<u8"), ("shown", "u1"),
                        ("pop2", "V16")])  # a totals record, as Totals.encode writes it
assert _TOTALS_ROW.itemsize == _TOTALS.size + 16


def _prefixes_of(levels: Collection[str]) -> list[int]:
    """The key prefixes (as bytes' values) of the totals records of these levels."""
    return [p[0] for p, name in LEVELS.items() if name in levels]


def _monsters(table: np.ndarray, rows: np.ndarray, raws: list[bytes], params: Params
              ) -> np.ndarray:
    """Whether each of `rows` is a monster candidate: decided exactly (Totals.monster)
    for the sites of monster_pages pages or more, the only ones that can be."""
    out = np.zeros(len(rows), dtype=bool)
    for at in np.flatnonzero(table["pages"][rows] >= params.monster_pages).tolist():
        out[at] = Totals.decode(raws[rows[at]]).monster(params)
    return out


def _name_ranks(keys: list[bytes], rows: np.ndarray) -> np.ndarray:
    """Each row's site name's rank in byte order, equal names (a host that is also a
    domain) ranked equal. The keys come sorted within each prefix read, so the sort
    merges a few runs."""
    names = [keys[i][1:] for i in rows.tolist()]
    ranks = np.empty(len(names), dtype=np.int64)
    rank, last = -1, None
    for at in sorted(range(len(names)), key=names.__getitem__):
        if names[at] != last:
            rank, last = rank + 1, names[at]
        ranks[at] = rank
    return ranks
