"""Run a pipeline on a list of records and return its final rows, for comparison with
`tests.reference.reference`.

A pipeline is any callable `run(records, params, batches) -> {url: row}`:
- records: list of record dicts (url, text or html, optional ip), in arrival order;
- params: a `streamdet.engine.params.Params`;
- batches: batch sizes summing to len(records) (how the stream is cut; a pipeline that
  has no notion of batches may ignore it);
- rows: shaped like `streamdet.reading.views.dump_rows` (or `streamdet dump` lines),
  keyed by URL.

`run_embedded` is the in-process engine on a memory or RocksDB state; a Kafka pipeline
(several gram/doc shards) can be plugged into the same tests later as another such
callable (e.g. one that produces the records, waits for idle and reads `streamdet dump`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from loadtest.sharded import analysed, subject
from streamdet.engine.core import Engine
from streamdet.engine.params import Params
from streamdet.reading.phrases import phrase_rows
from streamdet.reading.views import (
    dump_rows,
    live_docnos,
    neighbourhoods_of,
    partial_rows,
    sites_of,
)
from streamdet.state import recent
from streamdet.state.budget import MemoryBudget
from streamdet.state.kv import MemoryKV
from streamdet.state.rocks import RocksKV
from streamdet.state.segments import Admitted, SegmentIndex
from streamdet.state.txn import Store

TIGHT_MEMORY = 4096  # bytes: MemoryBudget(TIGHT_MEMORY) keeps 6 slots, 3 postings and 1 name

Rows = dict[str, dict]
Pipeline = Callable[[list[dict], Params, Sequence[int]], Rows]


def first_holders(index: SegmentIndex, grams: np.ndarray, admitted: Admitted | None = None
                  ) -> dict[int, int]:
    """gram -> its first holder, for the grams given that some segment holds
    (SegmentIndex.find_pairs as a dict)."""
    found, holders = index.find_pairs(grams, admitted)
    return dict(zip(found.tolist(), holders.tolist(), strict=True))


@contextmanager
def recent_capacity(capacity: int | None) -> Iterator[None]:
    """Stores opened inside keep at most `capacity` first-holder pairs among their recent
    pairs before writing a segment (None: the default)."""
    saved = recent.CAPACITY
    recent.CAPACITY = capacity or saved
    try:
        yield
    finally:
        recent.CAPACITY = saved


def cut(records: Sequence[Any], batches: Sequence[int]) -> list[list[Any]]:
    """Split records into consecutive batches of the given sizes (which must add up)."""
    if sum(batches) != len(records) or any(b < 0 for b in batches):
        raise ValueError(f"batch sizes {list(batches)} do not add up to {len(records)} records")
    out, i = [], 0
    for b in batches:
        out.append(list(records[i : i + b]))
        i += b
    return out


def _run_on_store(open_store: Callable[[], Store], records: list[dict], params: Params,
                  batches: Sequence[int], reopen: bool, compact: bool,
                  events: list[dict] | None, phrases: list[dict] | None = None,
                  top: int = 1 << 30, sites: list[dict] | None = None,
                 hoods: list[dict] | None = None, partials: list[dict] | None = None) -> Rows:
    engine = Engine(params)
    store = open_store()
    try:
        for batch in cut(records, batches):
            pages = analysed(batch, params)  # bad records skipped, as the reference does
            txn = store.begin()
            evs, _stats = engine.process(txn, pages)
            txn.commit({})
            if compact and hasattr(store, "compact"):
                store.compact()  # between batches, as the embedded runner does
            if events is not None:
                events.extend(evs)
            if reopen:  # nothing may live only in the Store object between batches
                store.close()
                store = open_store()
                engine = Engine(params)
        if phrases is not None:  # SPEC §8: every gram on two documents or more
            txn = store.begin()
            phrases.extend(phrase_rows([store], txn.text, lambda: live_docnos([store]),
                                       top, params))
        if sites is not None:  # SPEC §8
            sites.extend(sites_of(store, params))
        if hoods is not None:  # SPEC §8
            hoods.extend(neighbourhoods_of(store))
        if partials is not None:  # SPEC §7
            partials.extend(partial_rows(store, params))
        return {row["url"]: row for row in dump_rows(store, params)}
    finally:
        store.close()


def run_embedded(records: list[dict], params: Params, batches: Sequence[int], *,
                 backend: str = "memory", reopen: bool = False, compact: bool = True,
                 events: list[dict] | None = None, phrases: list[dict] | None = None,
                 top: int = 1 << 30, sites: list[dict] | None = None,
                 hoods: list[dict] | None = None, budget: MemoryBudget | None = None,
                 partials: list[dict] | None = None) -> Rows:
    """The engine in-process: each batch is one transaction `begin / process / commit`,
    then `store.compact()` (segment merges) as the embedded runner does.

    backend: "memory" (MemoryKV) or "rocks" (RocksDB in a temporary directory).
    reopen: close and reopen the store (and make a new Engine) after every batch.
    compact: merge crowded segment tiers after every batch (the runner's behaviour).
    events: when a list is given, every event the engine emits is appended to it.
    phrases: when a list is given, `phrases --top top` rows (SPEC §8; default: all).
    sites: when a list is given, `sites` rows (SPEC §8).
    hoods: when a list is given, the neighbourhood rows of `sites --min-pages 1`.
    partials: when a list is given, the partial-duplicate pairs (SPEC §7, `dump --partials`).
    budget: the store's memory budget (a tiny one keeps nearly nothing decoded or cached:
    documents are folded as soon as handed out, postings and names read again)."""
    if backend == "memory":
        kv = MemoryKV()
        return _run_on_store(lambda: Store(kv, budget), records, params, batches, reopen,
                              compact, events, phrases, top, sites, hoods, partials)
    if backend == "rocks":
        with tempfile.TemporaryDirectory(prefix="streamdet-test-") as tmp:
            return _run_on_store(lambda: Store(RocksKV(tmp), budget), records, params, batches,
                                 reopen, compact, events, phrases, top, sites, hoods, partials)
    raise ValueError(f"unknown backend {backend!r}")


def memory_pipeline(records: list[dict], params: Params, batches: Sequence[int]) -> Rows:
    return run_embedded(records, params, batches, backend="memory")


def memory_tight_pipeline(records: list[dict], params: Params, batches: Sequence[int]) -> Rows:
    """The embedded engine under a budget of a few kB: its caches hold about one entry, and
    a transaction folds every document but the last one it handed out."""
    return run_embedded(records, params, batches, backend="memory",
                        budget=MemoryBudget(TIGHT_MEMORY))


def memory_reopen_pipeline(records: list[dict], params: Params, batches: Sequence[int]) -> Rows:
    return run_embedded(records, params, batches, backend="memory", reopen=True)


def rocks_pipeline(records: list[dict], params: Params, batches: Sequence[int]) -> Rows:
    return run_embedded(records, params, batches, backend="rocks")


def rocks_reopen_pipeline(records: list[dict], params: Params, batches: Sequence[int]) -> Rows:
    return run_embedded(records, params, batches, backend="rocks", reopen=True)


# ----------------------------------------------------------------------------- comparing


def normalize_row(row: Mapping[str, Any]) -> dict:
    """A row in one canonical shape: sources as a list of (url, grams) tuples, and where
    the row carries SPEC §5's evidence, `evidence`: (share, spans) per source."""
    sources, evidence = [], []
    for s in row["sources"]:
        if isinstance(s, Mapping):
            sources.append((s["url"], int(s["grams"])))
            if "spans" in s:
                evidence.append((float(s["share"]), s["spans"]))
        else:
            u, n = s
            sources.append((u, int(n)))
    out = {
        "n_grams": int(row["n_grams"]),
        "n_patch_grams": int(row["n_patch_grams"]),
        "patch_fraction": float(row["patch_fraction"]),
        "sources": sources,
        "quilted": bool(row["quilted"]),
    }
    if evidence:
        out["evidence"] = evidence
    if "pop" in row:  # SPEC §8
        out["pop"] = row["pop"]
    if "contains" in row:  # SPEC §8
        out["contains"] = row["contains"]
    if "cluster" in row:  # SPEC §6
        out["cluster"] = (row["cluster"], row["cluster_size"], row["exact_dups"])
    return out


def diff_rows(expected: Mapping[str, Mapping], got: Mapping[str, Mapping]) -> list[str]:
    """Human-readable differences between two {url: row} maps (empty when equal)."""
    out = []
    for url in sorted(set(expected) | set(got)):
        if url not in got:
            out.append(f"{url}: missing from the pipeline's rows")
            continue
        if url not in expected:
            out.append(f"{url}: not a live document in the reference, but the pipeline has it")
            continue
        e, g = normalize_row(expected[url]), normalize_row(got[url])
        for key in e:
            if e[key] != g.get(key):
                out.append(f"{url}: {key}: expected {e[key]!r}, got {g.get(key)!r}")
    return out


def assert_same_rows(expected: Mapping[str, Mapping], got: Mapping[str, Mapping],
                     context: str = "") -> None:
    problems = diff_rows(expected, got)
    assert not problems, (context + "\n" if context else "") + "\n".join(problems)


def without_repeats(events: Iterable[dict]) -> list[dict]:
    """At-least-once: a batch processed again after a crash may send its events again, as
    exact repeats (same seq, same content; SPEC §9 allows no other); anything else with a
    seen seq is an error."""
    seen: dict[tuple[str, int], dict] = {}
    out = []
    for ev in events:
        key = (subject(ev), ev["seq"])
        if key in seen:
            assert seen[key] == ev, f"two different events with seq {key}"
            continue
        seen[key] = ev
        out.append(ev)
    return out


def check_site_events(events: Iterable[dict], sites: Iterable[Mapping],
                      hoods: Iterable[Mapping]) -> list[str]:
    """SPEC §8 from a consumer's side: per site and per neighbourhood, seq increases, each
    `site` event changes what the consumer holds (monster candidate, bad), and the newest
    tells the final figures (`sites`, `hoods`: their rows, of every size)."""
    problems = []
    held: dict[str, tuple[int, bool]] = {}
    for ev in events:
        if ev["event"] != "site":
            continue
        key, flag = subject(ev), bool(ev.get("monster", ev.get("bad")))
        seq, was = held.get(key, (-1, False))
        if ev["seq"] <= seq:
            problems.append(f"{key}: seq {ev['seq']} after {seq}")
        if flag == was:
            problems.append(f"{key}: seq {ev['seq']} shows what it held: {flag}")
        held[key] = (ev["seq"], flag)
    want = {f"{r['level']} {r['site']}": r["monster"] for r in sites}
    want |= {f"neighbourhood {r['neighbourhood']}": r["bad"] for r in hoods}
    for key in sorted(set(want) | set(held)):
        if held.get(key, (0, False))[1] != want.get(key, False):
            problems.append(f"{key}: newest event shows {held.get(key)}, "
                            f"final {want.get(key, False)}")
    return problems


PAIR_EVENTS = ("partial", "partial_gone")
QUILT_EVENTS = ("quilt", "rescore", "unquilt")


def check_cluster_events(events: Iterable[dict], rows: Mapping[str, Mapping]) -> list[str]:
    """SPEC §6 from a consumer's side: per URL, seq increases over all its events; each
    `cluster` event changes the (cluster id, size class) the consumer holds (alone under
    its own URL before any); the newest one tells the final clusters (`rows`: dump rows)."""
    problems = []
    last_seq: dict[str, int] = {}
    held: dict[str, tuple[str, bool]] = {}
    for ev in events:
        if ev["event"] == "site":
            continue  # check_site_events
        url = ev["url"]
        if url in last_seq and ev["seq"] <= last_seq[url]:
            problems.append(f"{url}: seq {ev['seq']} after {last_seq[url]}")
        last_seq[url] = ev["seq"]
        if ev["event"] != "cluster":
            continue
        now = (ev["cluster"], ev["cluster_size"] > 1)
        if held.get(url, (url, False)) == now:
            problems.append(f"{url}: cluster seq {ev['seq']} shows what it held: {now}")
        held[url] = now
    for url, row in rows.items():
        want = (row["cluster"], row["cluster_size"] > 1)
        if held.get(url, (url, False)) != want:
            problems.append(f"{url}: newest cluster event shows {held.get(url)}, dump {want}")
    return problems


def check_pair_events(events: Iterable[dict], expected: list[dict]) -> list[str]:
    """SPEC §7 from a consumer's side: per URL, seq increases over all its events; each
    pair event changes what the consumer holds of the pair; the newest event of every
    pair tells the final pairs (`expected`: dump --partials rows)."""
    problems = []
    last_seq: dict[str, int] = {}
    held: dict[tuple[str, str], list] = {}
    for ev in events:
        if ev["event"] == "site":
            continue  # check_site_events
        url = ev["url"]
        if url in last_seq and ev["seq"] <= last_seq[url]:
            problems.append(f"{url}: seq {ev['seq']} after {last_seq[url]}")
        last_seq[url] = ev["seq"]
        if ev["event"] not in PAIR_EVENTS:
            continue
        pair = (url, ev["other"])
        now = ev["diagonals"] if ev["event"] == "partial" else None
        if held.get(pair) == now:
            problems.append(f"{pair}: {ev['event']} seq {ev['seq']} shows what the last "
                            "event showed")
        held[pair] = now
    final = {(r["url"], r["other"]): r["diagonals"] for r in expected}
    for pair in sorted(set(final) | {p for p, d in held.items() if d is not None}):
        if held.get(pair) != final.get(pair):
            problems.append(f"{pair}: newest event shows {held.get(pair)!r}, "
                            f"dump {final.get(pair)!r}")
    return problems


def _shown(event: Mapping | None) -> tuple | None:
    """What a consumer holds of a URL after `event`: its cover when quilted, else None."""
    if event is None or not event["quilted"]:
        return None
    return (event["n_patch_grams"], event["n_grams"],
            tuple((s["url"], s["grams"]) for s in event["sources"]))


def check_events(events: Iterable[dict], expected: Mapping[str, Mapping]) -> list[str]:
    """SPEC §3 and §9 from a consumer's side: per URL, seq increases, every event changes
    what the consumer holds (its kind says how), and the newest event tells the final
    state (a URL quilted in the end has a newest event with quilted=true and the
    final cover; any other URL has no events or a newest one with quilted=false)."""
    problems = []
    newest: dict[str, dict] = {}
    for ev in events:
        if ev["event"] not in QUILT_EVENTS:
            continue  # check_pair_events, check_cluster_events
        url = ev["url"]
        if url in newest and ev["seq"] <= newest[url]["seq"]:
            problems.append(f"{url}: seq {ev['seq']} after {newest[url]['seq']}")
        shown = _shown(newest.get(url))
        want = ("quilt" if shown is None else "rescore") if ev["quilted"] else "unquilt"
        if _shown(ev) == shown:
            problems.append(f"{url}: {ev['event']} seq {ev['seq']} shows what the last "
                            "event showed (SPEC §9: events only for a change)")
        elif ev["event"] != want:
            problems.append(f"{url}: {ev['event']} seq {ev['seq']}, expected {want}")
        newest[url] = ev
    for url, row in expected.items():
        r = normalize_row(row)
        ev = newest.get(url)
        if r["quilted"]:
            if ev is None or not ev["quilted"]:
                problems.append(f"{url}: quilted, but the newest event is {ev and ev['event']}")
                continue
            got = normalize_row(ev)
            for key in ("sources", "n_grams", "n_patch_grams", "patch_fraction"):
                if got[key] != r[key]:
                    problems.append(f"{url}: newest event {key} {got[key]!r} != {r[key]!r}")
        elif ev is not None and ev["quilted"]:
            problems.append(f"{url}: not quilted, but the newest event is {ev['event']}")
    return problems
