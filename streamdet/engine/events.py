"""Output events (SPEC §3): what changed for a URL, compared with its last state."""

from __future__ import annotations

import hashlib
import json

from .documents import DocResult
from .neighbourhoods import trap_segment
from .params import Params


def change_kind(before: DocResult, after: DocResult) -> str | None:
    """quilt / unquilt / rescore, or None when nothing a consumer cares about changed."""
    if after.quilted and not before.quilted:
        return "quilt"
    if before.quilted and not after.quilted:
        return "unquilt"
    if after.quilted and (
        after.n_patch != before.n_patch
        or after.n_grams != before.n_grams
        or after.sources != before.sources
    ):
        return "rescore"
    return None


def _shown(quilted: bool, n_patch: int, n_grams: int, sources) -> str:
    if not quilted:
        return ""
    body = json.dumps([n_patch, n_grams, [[u, n] for u, n in sources]], ensure_ascii=False)
    return hashlib.blake2b(body.encode("utf-8"), digest_size=8).hexdigest()


def shown_state(result: DocResult) -> str:
    """What a consumer holds of a URL whose last event showed `result`, as a short digest:
    "" when not quilted (also before any event), else one of the cover a `rescore` shows
    (patch and gram counts, sources). Two results with the same digest need no event."""
    return _shown(result.quilted, result.n_patch, result.n_grams, result.sources)


def shown_by(event: dict) -> str:
    """shown_state of the result an event shows (from the event itself)."""
    return _shown(event["quilted"], event["n_patch_grams"], event["n_grams"],
                  [(s["url"], s["grams"]) for s in event["sources"]])


def shown_change(last: str, now: str) -> str | None:
    """The event that takes a consumer from shown state `last` to `now` (None: none)."""
    if last == now:
        return None
    if not last:
        return "quilt"
    return "unquilt" if not now else "rescore"


def make_event(kind: str, url: str, seq: int, result: DocResult, cause: str,
               params: Params, sources: list[dict]) -> dict:
    """The event object, without `at` (stamped by the adapter: the engine has no clock);
    `sources` are the result's sources with their evidence (engine.evidence)."""
    return {
        "event": kind,
        "url": url,
        "seq": seq,
        "quilted": result.quilted,
        "patch_fraction": result.patch_fraction,
        "n_grams": result.n_grams,
        "n_patch_grams": result.n_patch,
        "sources": sources,
        "cause": cause,
        "params": params.to_dict(),
    }


def trap_event(url: str, params: Params, seq: int = 0) -> dict | None:
    """The `trap` event of a URL whose path repeats one segment TRAP_REPEATS times or more
    (SPEC §8: a crawler's recursion error), or None for any other URL. Such a page is
    turned away before any state sees it, so the crawler can stop following the loop.
    No state keeps a record of the URL to count its events from: `streamdet run` gives
    seq 0, a Kafka worker the pages record's offset + 1 (a URL's records share a
    partition, so it grows with each fetch, and a record processed again after a crash
    repeats its event exactly). Without `at`, like make_event."""
    found = trap_segment(url)
    if found is None:
        return None
    segment, repeats = found
    return {"event": "trap", "url": url, "seq": seq, "segment": segment, "repeats": repeats,
            "cause": url, "params": params.to_dict()}
