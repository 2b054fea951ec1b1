"""Pages grouped per registered domain into one alert, and the evidence of each page.

The domain is the page's registered domain (Public Suffix List with its private section,
as `--foreign domain`); an IP, `localhost` or a host under no public suffix is its own
group."""

from __future__ import annotations

import hashlib
from typing import Any

from ..adapters.outputs import utc_now
from ..engine.servers import host_of, registered_domain
from .commit_order import Mark


def domain_of(url: str) -> str:
    host = host_of(url)
    return registered_domain(host) if host else "(no host)"


class Group:
    """The pages of one domain for one alert: an open window, then queued, then in flight."""

    def __init__(self, domain: str, opened: float) -> None:
        self.domain = domain
        self.opened = opened  # clock time the window opened
        self.start = utc_now()
        self.end: str | None = None
        self.pages: dict[str, dict] = {}  # url -> page evidence (insertion = arrival order)
        self.origin: dict[str, Any] = {}  # url -> partition key of the page's event
        self.marks: list[Mark] = []
        self.in_flight = False

    def seqs(self) -> list[tuple[str, int]]:
        return [(u, p["seq"]) for u, p in self.pages.items()]

    def alert_id(self) -> str:
        """A hash of the domain and the (url, seq) pairs: the same alert sent again has the
        same id (the Idempotency-Key a receiver drops repeats by)."""
        h = hashlib.sha256(self.domain.encode("utf-8", "surrogatepass"))
        for u, s in sorted(self.seqs()):
            h.update(f"\n{u}\t{s}".encode("utf-8", "surrogatepass"))
        return h.hexdigest()[:32]

    def absorb(self, later: Group) -> None:
        """The domain's next window joins this group, which still waits to be sent."""
        self.pages.update(later.pages)
        self.origin.update(later.origin)
        self.marks.extend(later.marks)
        self.end = later.end


def page_of(ev: dict) -> dict:
    """The evidence of one event: the page, its patch fraction, its sources with shares
    and the spans of the page's text each covered (SPEC §5; None from an older producer,
    whose events had no spans), and its spam score (SPEC §10; None from a producer that
    gives none)."""
    n_patch = ev.get("n_patch_grams")
    sources = []
    for s in ev.get("sources") or []:
        if not isinstance(s, dict):
            continue
        grams = s.get("grams")
        share = (round(grams / n_patch, 4) if isinstance(grams, int | float)
                 and isinstance(n_patch, int | float) and n_patch > 0 else None)
        sources.append({"url": s.get("url"), "grams": grams, "share": share,
                        "spans": s.get("spans")})
    return {"url": ev["url"], "event": ev.get("event"), "seq": ev["seq"],
            "patch_fraction": ev.get("patch_fraction"), "n_grams": ev.get("n_grams"),
            "n_patch_grams": n_patch, "sources": sources, "cause": ev.get("cause"),
            "spam_score": ev.get("spam_score"), "at": ev.get("at")}
