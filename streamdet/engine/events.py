"""Output events (SPEC §3): what changed for a URL, compared with its last state."""

from __future__ import annotations

from ..state.schema import Cover
from .params import Params


def change_kind(before: Cover, after: Cover) -> str | None:
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


def make_event(kind: str, url: str, seq: int, result: Cover, cause: str, params: Params) -> dict:
    """The event object, without `at` (stamped by the adapter: the engine has no clock)."""
    return {
        "event": kind,
        "url": url,
        "seq": seq,
        "quilted": result.quilted,
        "patch_fraction": result.patch_fraction,
        "n_grams": result.n_grams,
        "n_patch_grams": result.n_patch,
        "sources": [{"url": u, "grams": n} for u, n in result.sources],
        "cause": cause,
        "params": params.to_dict(),
    }
