"""The desk's lists, read from its view (projection.View) and the labels: quilts by spam
score (SPEC §10: the farms' pages first; or newest first) with their filters, sites and
neighbourhoods by badness, clusters by size.

Pure: a list is a function of the view's tables and each URL's newest label, so the
embedded desk (dicts fed by the events file) and the Kafka desk (faust Tables fed by the
events topic) list the same rows for the same events."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..engine.servers import host_of, registered_domain
from ..engine.spam_model import THRESHOLD
from .labels import VERDICTS, Label

LABEL_STATES = ("any", "unlabelled", "labelled", *VERDICTS)
QUILT_STATES = ("quilted", "unquilted", "all")
SPAM_STATES = ("all", "spam", "not_spam")  # by the newest event's spam_score
ORDERS = ("score", "newest")
PAGE_SIZE = 50


@dataclass(frozen=True)
class QuiltFilter:
    """What a reviewer narrows the quilt list to (every field optional; "" is none)."""

    domain: str = ""
    site: str = ""  # a host
    cluster: str = ""
    label: str = "any"  # LABEL_STATES
    state: str = "quilted"  # QUILT_STATES: the newest verdict
    spam: str = "all"  # SPAM_STATES: spam_score at or past the ranking's threshold, or below
    order: str = "score"  # ORDERS: highest spam_score first, or newest first

    def __post_init__(self) -> None:
        if self.spam not in SPAM_STATES:
            raise ValueError(f"spam must be one of {', '.join(SPAM_STATES)}")
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}")
        if self.label not in LABEL_STATES:
            raise ValueError(f"label must be one of {', '.join(LABEL_STATES)}")
        if self.state not in QUILT_STATES:
            raise ValueError(f"state must be one of {', '.join(QUILT_STATES)}")

    def keeps(self, ev: dict, label: Label | None, cluster: Mapping | None) -> bool:
        url = ev["url"]
        quilted = ev.get("event") != "unquilt"
        if self.state != "all" and quilted != (self.state == "quilted"):
            return False
        if self.label != "any":
            if label is None:
                if self.label != "unlabelled":
                    return False
            elif self.label == "unlabelled" or self.label not in ("labelled", label.verdict):
                return False
        if self.site and host_of(url) != self.site.lower():
            return False
        if self.domain and registered_domain(host_of(url)) != self.domain.lower():
            return False
        if self.cluster and str((cluster or {}).get("cluster", "")) != self.cluster:
            return False
        if self.spam != "all":
            score = spam_score(ev)
            return score is not None and (score >= THRESHOLD) == (self.spam == "spam")
        return True


def spam_score(ev: dict) -> float | None:
    """An event's spam_score (None: it has none: an unquilt, or a producer that gives
    none)."""
    score = ev.get("spam_score")
    return score if isinstance(score, int | float) and not isinstance(score, bool) else None


def quilt_rows(quilts: Mapping[str, dict], labels: Mapping[str, Label],
               clusters: Mapping[str, dict], keep: QuiltFilter, offset: int = 0,
               limit: int = PAGE_SIZE) -> tuple[list[dict], int]:
    """The quilts `keep` lets through in its order: highest spam score first (those
    without one last), equal scores newest first; or newest first (the newest event's
    time, then the arrival a desk without events knows, then seq, then URL). `limit` of
    them from `offset`; and how many there are in all."""
    kept = []
    for url, ev in quilts.items():
        cluster = clusters.get(url)
        if keep.keeps(ev, labels.get(url), cluster):
            kept.append(ev)
    kept.sort(key=lambda e: (e.get("at") or "", e.get("arrival") or 0, e["seq"], e["url"]),
              reverse=True)
    if keep.order == "score":  # stable: equal scores stay newest first
        kept.sort(key=lambda e: -(s if (s := spam_score(e)) is not None else -1.0))
    return [_quilt_row(ev, labels.get(ev["url"]), clusters.get(ev["url"]))
            for ev in kept[offset : offset + limit]], len(kept)


def _quilt_row(ev: dict, label: Label | None, cluster: Mapping | None) -> dict:
    return {"url": ev["url"], "event": ev.get("event"), "seq": ev["seq"], "at": ev.get("at"),
            "quilted": ev.get("event") != "unquilt",
            "patch_fraction": ev.get("patch_fraction"), "spam_score": spam_score(ev),
            "sources": [{"url": s.get("url"), "share": s.get("share"), "grams": s.get("grams")}
                        for s in ev.get("sources") or ()],
            "params": ev.get("params") or {},
            "cluster": (cluster or {}).get("cluster"),
            "label": None if label is None else {"verdict": label.verdict, "who": label.who,
                                                 "at": label.at}}


def site_rows(sites: Mapping[str, dict]) -> dict[str, list[dict]]:
    """The sites and neighbourhoods `site` events told of, flagged ones first: hosts and
    domains (monster candidates by mean pop) and neighbourhoods (bad ones by badness)."""
    hosts, hoods = [], []
    for ev in sites.values():
        if ev.get("level") == "neighbourhood":
            hoods.append({k: ev.get(k) for k in ("neighbourhood", "docs", "badness", "bad",
                                                 "seq", "at", "cause")})
        else:
            hosts.append({k: ev.get(k) for k in ("site", "level", "pages", "pop_mean",
                                                 "pop_sd", "patch_mean", "quilted",
                                                 "monster", "seq", "at", "cause")})
    hosts.sort(key=lambda r: (not r["monster"], -(r["pop_mean"] or 0), r["site"] or "",
                              r["level"] or ""))
    hoods.sort(key=lambda r: (not r["bad"], -(r["badness"] or 0), r["neighbourhood"] or ""))
    return {"sites": hosts, "neighbourhoods": hoods}


def cluster_rows(clusters: Mapping[str, dict], limit: int = PAGE_SIZE) -> list[dict]:
    """Near-duplicate clusters (SPEC §6) by size, largest first, with their member URLs
    as the view holds them (each member's newest `cluster` event)."""
    members: dict[str, list[str]] = {}
    for url, c in clusters.items():
        if c.get("cluster") is not None and (c.get("cluster_size") or 0) > 1:
            members.setdefault(str(c["cluster"]), []).append(url)
    rows = [{"cluster": cid, "size": len(urls), "urls": sorted(urls)}
            for cid, urls in members.items()]
    rows.sort(key=lambda r: (-r["size"], r["cluster"]))
    return rows[:limit]
