"""A record's payload to a page or a dead letter: what every analysis process runs.

`validate` and `analyze_payloads` are total: any payload - a tombstone, empty bytes,
JSON that is not an object, a page the parser chokes on - gives a page or a dead letter
with its reason, never an exception (SPEC §9). The watchdog's processes (adapters.
watchdog) and the Kafka worker's pages stage call them; adapters.analyzers pipelines
batches of them beside the engine.
"""

from __future__ import annotations

import time

from ..engine.params import Params
from ..engine.records import BadRecord, Page, decode, page_from_object
from .inputs import record_limit


def validate(payload: bytes | dict | None, max_body: int) -> Page:
    """A record's payload (SPEC §2) as a Page, or BadRecord with its reason. Total: any
    value a Kafka message or a file line can carry gives one of the two (SPEC §9)."""
    if payload is None:
        raise BadRecord("not_json", "a message with no value (a tombstone)")
    obj = payload
    if not isinstance(obj, dict):
        if len(obj) > record_limit(max_body):
            raise BadRecord("too_large", f"record is larger than the limit for a body of "
                            f"{max_body:,} bytes")
        if not obj:
            raise BadRecord("not_json", "an empty record")
        obj = decode(obj)
    try:
        return page_from_object(obj, max_body, now=time.time())
    except BadRecord:
        raise
    except (ValueError, OverflowError, TypeError) as exc:
        raise BadRecord("unparsable", f"{type(exc).__name__}: {str(exc)[:200]}") from None


def analyze_payloads(payloads: list[bytes | dict | None], params: Params, max_body: int
                     ) -> list:
    """Each payload as Analyzed, or as (reason, detail) when it is a bad record (plain
    tuples cross process boundaries without custom pickling). One payload never stops
    the others: whatever a page raises makes it a dead letter."""
    from ..engine.analysis import analyze

    out: list = []
    for payload in payloads:
        try:
            out.append(analyze(validate(payload, max_body), params))
        except BadRecord as err:
            out.append((err.reason, err.detail))
        except Exception as exc:  # noqa: BLE001 - the engine could not read this page
            out.append(("unparsable", f"page cannot be analysed: {type(exc).__name__}: "
                        f"{str(exc)[:200]}"))
    return out


def warm_up(params: Params, max_body: int) -> None:
    """Analyse one small page: imports, compiled patterns and the compiled kernels (the
    markup guard, the min-hashes) are loaded before any page's clock runs (the watchdog
    times each page from its start)."""
    from ..engine import markup_guard, minhash  # noqa: F401 - loaded now, not under a page's clock

    analyze_payloads([b'{"url": "http://warm.example/", "html": "<p>warm up the engine</p>"}'],
                     params, max_body)
