"""The review desk's view of the detector: its events folded into tables.

- `quilts`: URL -> the newest `quilt` / `rescore` / `unquilt` event (its verdict, cover
  and spans, SPEC §3 and §5);
- `history`: URL -> the page's events, oldest first, summarised (the newest HISTORY);
- `clusters`: URL -> the newest `cluster` event's cluster, size and exact duplicates;
- `sites`: "level name" -> the newest `site` event's figures (sites and neighbourhoods).

Pure: the tables are MutableMappings (dicts in embedded mode, faust Tables on Kafka),
and a value is replaced, never changed in place, so that a faust Table sees the write.
Events come at least once and, per URL (or site), in seq order on their partition; a
repeat, or an older event met after a newer one, changes nothing (seq decides)."""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from dataclasses import dataclass, field

# a desk without events reads the state's verdicts as STATE_EVENT (review.embedded)
STATE_EVENT = "state"
QUILT_EVENTS = ("quilt", "rescore", "unquilt", STATE_EVENT)
HISTORY = 100  # events kept per page for its page view
NUMBERS = ("patch_fraction", "cluster_size", "docs", "badness", "pop_mean", "pop_sd",
           "patch_mean", "pages", "spam_score")  # what the lists sort or format, when present


@dataclass
class View:
    quilts: MutableMapping[str, dict] = field(default_factory=dict)
    history: MutableMapping[str, list] = field(default_factory=dict)
    clusters: MutableMapping[str, dict] = field(default_factory=dict)
    sites: MutableMapping[str, dict] = field(default_factory=dict)


def event_of(raw: bytes | str | None) -> dict | None:
    """The event a line or a record holds (None: it holds none: a tombstone, not JSON, JSON
    nested too deep to read, not an object, or an object not of an event's shape)."""
    if raw is None:
        return None
    try:
        ev = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return ev if isinstance(ev, dict) and _well_formed(ev) else None


def site_key(ev: dict) -> str:
    """A `site` event's subject: "host a.example", "neighbourhood a.example/x/"."""
    return f"{ev['level']} {ev.get('site') or ev.get('neighbourhood')}"


def apply(view: View, ev: dict) -> bool:
    """Fold one event into the view; whether it changed anything. An event not of the
    shapes SPEC §3 gives (a topic or file may hold anything, SPEC §9) changes nothing:
    the lists sort and read what is folded."""
    if not _well_formed(ev):
        return False
    kind = ev.get("event")
    if kind == "site":
        return _newest(view.sites, site_key(ev), ev)
    url = ev["url"]
    changed = _remember(view.history, url, ev)
    if kind in QUILT_EVENTS:
        changed |= _newest(view.quilts, url, ev)
    elif kind == "cluster":
        changed |= _newest(view.clusters, url, {k: ev[k] for k in (
            "seq", "cluster", "cluster_size", "exact_dups") if k in ev})
    return changed


def _well_formed(ev: dict) -> bool:
    """The fields the desk reads have their types: seq an int; event and at strings (at
    may be absent);
    a site event names its subject; others a URL, their sources a list of objects and
    their figures numbers."""
    if not isinstance(ev.get("seq"), int) or isinstance(ev["seq"], bool):
        return False
    if not isinstance(ev.get("event"), str):
        return False
    if not isinstance(ev.get("at", ""), str) or not all(
            isinstance(ev.get(k, 0), int | float) for k in NUMBERS):
        return False
    if ev.get("event") == "site":
        return (isinstance(ev.get("level"), str)
                and isinstance(ev.get("site") or ev.get("neighbourhood"), str))
    sources = ev.get("sources", [])
    return (isinstance(ev.get("url"), str) and isinstance(sources, list)
            and all(isinstance(x, dict) for x in sources))


def _newest(table: MutableMapping[str, dict], key: str, ev: dict) -> bool:
    old = table.get(key)
    if old is not None and old["seq"] >= ev["seq"]:
        return False
    table[key] = ev
    return True


def summary(ev: dict) -> dict:
    """What the page view lists of an event: its kind, seq, time, cause and the figures
    that say what changed (the full verdict is in `quilts`)."""
    out = {k: ev[k] for k in ("event", "seq", "at", "cause") if k in ev}
    if ev.get("event") in QUILT_EVENTS:
        out |= {"patch_fraction": ev.get("patch_fraction"),
                "sources": len(ev.get("sources") or ())}
    for k in ("cluster", "cluster_size", "other", "segment"):
        if k in ev:
            out[k] = ev[k]
    return out


def _remember(history: MutableMapping[str, list], url: str, ev: dict) -> bool:
    kept = history.get(url) or []
    entry = summary(ev)
    mark = (entry["event"], entry["seq"])
    if any((e["event"], e["seq"]) == mark for e in kept):
        return False  # an event sent again (SPEC §9)
    kept = sorted([*kept, entry], key=lambda e: (e["seq"], e["event"]))[-HISTORY:]
    history[url] = kept
    return True
