"""Replication across sites (SPEC §8): what it costs the engine, and what `phrases` costs.

    python -m loadtest.bench_replication                 # 2,000 records of the load stream
    python -m loadtest.bench_replication --pages 20000
    python -m loadtest.bench_replication --smoke         # for CI

In one process, on the load generator's records (replayed real pages, mirrors, farm
quilts, scrapers, re-fetches), analysed beforehand as the analysis processes do:

1. Engine: each batch of 512 pages applied to two RocksDB states alternately (a paired
   measurement: both see the same machine load), one by the engine as it is, one by the
   engine with §8's per-page work taken out: the trap check, the popular-phrase counting
   of the gram role (engine.popular: crossings of P, common grams' tallies), the
   withdrawal of all of a re-fetched version's grams (patch grams only, as SPEC §1 alone
   would need), the site totals (engine.sites: each changed document's contribution
   to its host and domain), the paragraph chunks' counts and holders (engine.labelled)
   and the neighbourhoods' badness (engine.badness). §8's share of the engine's time is
   the difference.
2. Analysis: cutting a page's visible text into paragraph chunks (engine.chunks), in the
   analysis processes, paired against the same analysis without it.
3. State: bytes of tables `popular` (tallies and pop(d) counts), `sites` (site and
   neighbourhood records) and `chunks` (counts, holders, documents' chunks) a page.
4. `streamdet phrases --top 20` and `streamdet sites`: seconds on the state.
5. Quality: monster candidates among the hosts of the generator's spam farms (3 each),
   and among the other hosts; bad neighbourhoods on the farms' hosts and elsewhere. Three
   ways to fill L: blind discovery alone (T = 10, the state above); informed discovery
   alone (T = 0, a state of its own) from a spam team's review; and both. The review
   draws `--review` pages uniformly from the quilted ones (streamdet.review.sampling, as
   Najork drew the pages he judged), and labels the pages the generator's truth says a
   farm made (the reviewer's "spam"), each with `label-chunks --url`'s effect
   (Engine.label of its chunks).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from loadtest.bench_embedded import git_revision
from loadtest.bench_partials import analysed
from loadtest.host import machine, write_result

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "loadtest" / "out"
BATCH = 512


def log(msg: str) -> None:
    print(f"[bench-replication {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def without_section_8():
    """The engine with §8's per-page work replaced by nothing (for the paired baseline)."""
    from streamdet.engine import core, labelled, popular, postings

    class Uncounted(popular.PopChanges):
        def added(self, *args) -> None: ...
        def withdrawn(self, *args) -> None: ...
        def apply(self, txn) -> None: ...

    saved = (postings.PopChanges, postings._join_common, core.turn_away_traps,
             core.Engine._version_grams, core.Engine._contributions, core.Engine._places,
             labelled.LabelledSet.add, labelled.LabelledSet.withdraw)
    postings.PopChanges = Uncounted
    postings._join_common = lambda *args: None
    core.turn_away_traps = lambda pages, params: (list(pages), [])
    core.Engine._version_grams = lambda self, txn, docno: txn.doc(docno).patch_grams()
    core.Engine._contributions = lambda self, txn, causes, scored, withdrawn, newest: {}
    core.Engine._places = lambda self, txn, arrived, withdrawn: {}
    labelled.LabelledSet.add = lambda *args: None
    labelled.LabelledSet.withdraw = lambda *args: None
    try:
        yield
    finally:
        (postings.PopChanges, postings._join_common, core.turn_away_traps,
         core.Engine._version_grams, core.Engine._contributions, core.Engine._places,
         labelled.LabelledSet.add, labelled.LabelledSet.withdraw) = saved


def chunking_seconds(records: list[dict], params, limit: int = 2000) -> dict:
    """Analysis of up to `limit` records with and without cutting chunks, alternately
    record by record (the same machine load for both)."""
    from streamdet.engine import analysis, chunks
    from streamdet.engine.records import BadRecord, page_from_object

    pages = []
    for rec in records[:limit]:
        with contextlib.suppress(BadRecord):
            pages.append(page_from_object(rec))
    seconds = {"with": 0.0, "without": 0.0}
    for i, page in enumerate(pages):
        for kind in (("with", "without") if i % 2 else ("without", "with")):
            saved = analysis.page_chunks
            if kind == "without":
                analysis.page_chunks = lambda *args: chunks.NO_CHUNKS
            try:
                t = time.perf_counter()
                analysis.analyze(page, params)
                seconds[kind] += time.perf_counter() - t
            finally:
                analysis.page_chunks = saved
    return {"pages": len(pages), "seconds": seconds,
            "ms_per_page": 1000 * (seconds["with"] - seconds["without"]) / max(len(pages), 1),
            "share_of_analysis": (seconds["with"] - seconds["without"]) / seconds["with"]}


def paired_engine(pages: list, params, with_dir: str, without_dir: str):
    """The batches through two states, with and without §8, alternately."""
    from streamdet.engine.core import Engine
    from streamdet.state.rocks import RocksKV
    from streamdet.state.txn import Store

    stores = {"with": Store(RocksKV(with_dir)), "without": Store(RocksKV(without_dir))}
    engines = {k: Engine(params) for k in stores}
    seconds = {"with": 0.0, "without": 0.0}
    for i in range(0, len(pages), BATCH):
        order = ("with", "without") if (i // BATCH) % 2 == 0 else ("without", "with")
        for kind in order:
            batch = pages[i : i + BATCH]
            with contextlib.nullcontext() if kind == "with" else without_section_8():
                t = time.perf_counter()
                txn = stores[kind].begin()
                engines[kind].process(txn, batch)
                txn.commit({})
                stores[kind].compact()
                seconds[kind] += time.perf_counter() - t
    stores["without"].close()
    return stores["with"], seconds


NEIGHBOURHOOD_RECORDS = b"vnBg"  # engine.badness' records in table sites
CHUNK_RECORDS = {b"n": "chunk_counts", b"p": "chunk_holders", b"d": "doc_chunks",
                 b"l": "doc_in_l"}


def popular_bytes(store) -> dict:
    out = {"tallies": 0, "tally_bytes": 0, "pop_records": 0, "pop_bytes": 0, "sites": 0,
           "site_bytes": 0, "neighbourhoods": 0, "neighbourhood_bytes": 0}
    for key, value in store.kv.items("popular"):
        kind = "tally" if key.startswith(b"t") else "pop"
        out["tallies" if kind == "tally" else "pop_records"] += 1
        out[f"{kind}_bytes"] += len(key) + len(value)
    for key, value in store.kv.items("sites"):
        if key[:1] in NEIGHBOURHOOD_RECORDS:
            out["neighbourhoods"] += key.startswith(b"n")
            out["neighbourhood_bytes"] += len(key) + len(value)
        else:
            out["sites"] += not key.startswith(b"c")
            out["site_bytes"] += len(key) + len(value)
    for name in CHUNK_RECORDS.values():
        out[name] = out[f"{name}_bytes"] = 0
    for key, value in store.kv.items("chunks"):
        name = CHUNK_RECORDS[key[:1]]
        out[name] += 1
        out[f"{name}_bytes"] += len(key) + len(value)
    out["chunk_bytes"] = sum(out[f"{n}_bytes"] for n in CHUNK_RECORDS.values())
    return out


def sites_seconds(store, params) -> tuple[float, list[dict], list[dict]]:
    """`streamdet sites`' rows (sites and neighbourhoods of 2 pages or more) and seconds."""
    from streamdet.reading.views import neighbourhoods_of, sites_of

    t = time.perf_counter()
    rows = sites_of(store, params, min_pages=2)
    hoods = neighbourhoods_of(store, 2)
    return time.perf_counter() - t, rows, hoods


def phrases_seconds(store, params) -> tuple[float, list[dict]]:
    from streamdet.reading.phrases import phrase_rows
    from streamdet.reading.views import live_docnos, text_reader

    t = time.perf_counter()
    rows = phrase_rows([store], text_reader([store]), lambda: live_docnos([store]), 20,
                       params)
    return time.perf_counter() - t, rows


def stream(pages: int, seed: int) -> tuple[list[dict], dict[str, dict]]:
    """The load generator's records, and its truth about quilts (URL -> farm, donors)."""
    from loadtest.generator import Generator, GeneratorConfig

    gen = Generator(GeneratorConfig(seed=seed, pages=pages))
    records = list(gen)
    return records, gen.truth.quilts


def review(store, params, farm_quilts: dict[str, dict], n: int, seed: int
           ) -> tuple[int, list[str]]:
    """A spam team's review: n pages drawn uniformly from the quilted ones (fewer when
    there are fewer), and among them those a farm made (judged spam), to label."""
    from streamdet.reading.views import dump_rows
    from streamdet.review.sampling import draw

    drawn = draw([r["url"] for r in dump_rows(store, params) if r["quilted"]], n, seed)
    return len(drawn), [u for u in drawn if u in farm_quilts]


def label_pages(store, params, pages_by_url: dict, urls: list[str]) -> None:
    """Each page's chunks labelled, as `label-chunks --url` does (one transaction each)."""
    from streamdet.engine.core import Engine

    engine = Engine(params)
    for url in urls:
        txn = store.begin()
        engine.label(txn, pages_by_url[url].chunks.keys, url)
        txn.commit({})


def informed_state(pages: list, params, path: str):
    """A state of the same pages with blind discovery off (T = 0)."""
    from streamdet.engine.core import Engine
    from streamdet.state.rocks import RocksKV
    from streamdet.state.txn import Store

    store, engine = Store(RocksKV(path)), Engine(params)
    for i in range(0, len(pages), BATCH):
        txn = store.begin()
        engine.process(txn, pages[i : i + BATCH])
        txn.commit({})
    return store


def judged(store, params, farm_hosts: set[str]) -> dict:
    """The quality figures of a state (every host; neighbourhoods of 2 pages or more)."""
    from streamdet.reading.views import neighbourhoods_of, sites_of

    return quality(sites_of(store, params), neighbourhoods_of(store, 2), farm_hosts)


def quality(sites: list[dict], hoods: list[dict], farm_hosts: set[str]) -> dict:
    """Monster candidates and bad neighbourhoods on the farms' hosts and elsewhere (SPEC
    §8; the issue's target: farms are, at most 1% of the real sites are)."""
    hosts = [r for r in sites if r["level"] == "host"]
    farm = [r for r in hosts if r["site"] in farm_hosts]
    real = [r for r in hosts if r["site"] not in farm_hosts]
    on_farm = [h for h in hoods if h["neighbourhood"].split("/", 1)[0] in farm_hosts]
    elsewhere = [h for h in hoods if h["neighbourhood"].split("/", 1)[0] not in farm_hosts]
    flagged = {h["neighbourhood"].split("/", 1)[0] for h in on_farm if h["bad"]}
    flagged |= {r["site"] for r in farm if r["monster"]}
    real_flagged = {h["neighbourhood"].split("/", 1)[0] for h in elsewhere if h["bad"]}
    real_flagged |= {r["site"] for r in real if r["monster"]}
    return {
        "farm_hosts_flagged": len(flagged),
        "farm_neighbourhoods": len(on_farm),
        "farm_neighbourhoods_bad": sum(h["bad"] for h in on_farm),
        "farm_badness": [h["badness"] for h in on_farm if h["neighbourhood"].count("/") == 1],
        "real_neighbourhoods": len(elsewhere),
        "real_neighbourhoods_bad": sum(h["bad"] for h in elsewhere),
        "real_hosts_flagged": len(real_flagged),
        "real_flagged_share": len(real_flagged) / max(len(real), 1),
        "farm_hosts": len(farm),
        "farm_hosts_monster": sum(r["monster"] for r in farm),
        "farm_pop_mean": [round(r["pop_mean"], 1) for r in farm],
        "farm_pop_sd": [round(r["pop_sd"], 1) for r in farm],
        "farm_pages": [r["pages"] for r in farm],
        "real_hosts": len(real),
        "real_hosts_monster": sum(r["monster"] for r in real),
        "real_monster_share": sum(r["monster"] for r in real) / max(len(real), 1),
    }


def print_quality(why: str, q: dict) -> None:
    print(f"quality, {why}:")
    print(f"  monster candidates  {q['farm_hosts_monster']} of the farms' {q['farm_hosts']} "
          f"hosts (pages {q['farm_pages']}, mean pop {q['farm_pop_mean']}, sd "
          f"{q['farm_pop_sd']}); {q['real_hosts_monster']} of {q['real_hosts']:,} other hosts "
          f"({100 * q['real_monster_share']:.2f}%)")
    print(f"  bad neighbourhoods  {q['farm_neighbourhoods_bad']} of the farms' "
          f"{q['farm_neighbourhoods']} (host badness {q['farm_badness']}), "
          f"{q['real_neighbourhoods_bad']} of {q['real_neighbourhoods']:,} others")
    print(f"  flagged hosts       farms' {q['farm_hosts_flagged']} of {q['farm_hosts']}, "
          f"others {q['real_hosts_flagged']} ({100 * q['real_flagged_share']:.2f}%)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=2000, help="records of the load stream")
    ap.add_argument("--smoke", action="store_true", help="300 records (CI)")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--review", type=int, default=128,
                    help="quilted pages the simulated spam team reviews (informed discovery)")
    ap.add_argument("--out")
    args = ap.parse_args(argv)

    from streamdet.engine.params import Params
    from streamdet.engine.servers import host_of

    n = 300 if args.smoke else args.pages
    params = Params()
    records, farm_quilts = stream(n, args.seed)
    farm_hosts = {host_of(u) for u in farm_quilts}
    log(f"stream: {len(records)} records; analysing")
    pages, _ = analysed(records, params)
    log("chunking in analysis, with and without")
    chunking = chunking_seconds(records, params)
    log(f"{len(pages)} pages; the engine with and without §8")
    with tempfile.TemporaryDirectory(prefix="streamdet-replication-") as tmp:
        store, seconds = paired_engine(pages, params, f"{tmp}/with", f"{tmp}/without")
        try:
            kept = popular_bytes(store)
            phrases_s, top = phrases_seconds(store, params)
            sites_s, listed, hoods = sites_seconds(store, params)
            log("quality: blind discovery, then a review's labels")
            qualities = {"blind": judged(store, params, farm_hosts)}
            drawn, labels = review(store, params, farm_quilts, args.review, args.seed)
            by_url = {p.url: p for p in pages}
            label_pages(store, params, by_url, labels)
            qualities["both"] = judged(store, params, farm_hosts)
        finally:
            store.close()
        log("quality: informed discovery alone (T = 0)")
        alone = dataclasses.replace(params, chunk_threshold=0)
        store = informed_state(pages, alone, f"{tmp}/informed")
        try:
            label_pages(store, alone, by_url, labels)
            qualities["informed"] = judged(store, alone, farm_hosts)
        finally:
            store.close()
    qualities["review"] = {"drawn": drawn, "labelled": len(labels),
                           "farms": len({farm_quilts[u]["farm"] for u in labels})}
    share = (seconds["with"] - seconds["without"]) / seconds["with"]
    result = {
        "benchmark": "bench_replication",
        "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": machine(),
        "git": git_revision(),
        "config": {"records": n, "seed": args.seed, "batch": BATCH, "params": params.to_dict()},
        "engine": {"seconds": seconds},
        "chunking": chunking,
        "state": kept,
        "top_phrases": top[:5],
        "top_sites": listed[:5],
        "top_neighbourhoods": hoods[:5],
        "quality": qualities,
        "figures": {
            "pages": len(pages),
            "engine_ms_per_page_with": 1000 * seconds["with"] / len(pages),
            "engine_ms_per_page_without": 1000 * seconds["without"] / len(pages),
            "section8_share_of_engine": share,
            "popular_bytes_per_page": (kept["tally_bytes"] + kept["pop_bytes"]) / len(pages),
            "sites_bytes_per_page": kept["site_bytes"] / len(pages),
            "neighbourhood_bytes_per_page": kept["neighbourhood_bytes"] / len(pages),
            "chunk_bytes_per_page": kept["chunk_bytes"] / len(pages),
            "chunking_ms_per_page": chunking["ms_per_page"],
            "chunking_share_of_analysis": chunking["share_of_analysis"],
            "tallies": kept["tallies"],
            "phrases_seconds": phrases_s,
            "sites": len(listed),
            "monster_sites": sum(r["monster"] for r in listed),
            "neighbourhoods": len(hoods),
            "bad_neighbourhoods": sum(h["bad"] for h in hoods),
            "sites_seconds": sites_s,
        },
    }
    out = write_result(result, OUT_DIR, f"{n}p", args.out)
    f = result["figures"]
    print(f"pages                 {f['pages']:,}")
    print(f"engine                {f['engine_ms_per_page_with']:.2f} ms a page with §8, "
          f"{f['engine_ms_per_page_without']:.2f} without: §8 is {100 * share:.1f}% of the "
          "engine's time")
    print(f"state                 {f['popular_bytes_per_page']:.0f} B a page in table popular "
          f"({kept['tallies']:,} common grams' tallies, {kept['pop_records']:,} pop(d) counts)")
    print(f"                      {f['sites_bytes_per_page']:.0f} B a page of site records, "
          f"{f['neighbourhood_bytes_per_page']:.0f} B of neighbourhood records (table sites)")
    print(f"                      {f['chunk_bytes_per_page']:.0f} B a page in table chunks "
          f"({kept['chunk_counts']:,} chunk counts, {kept['chunk_holders']:,} holders: "
          f"{kept['chunk_holders_bytes'] / len(pages):.0f} B a page)")
    print(f"analysis              cutting chunks: {f['chunking_ms_per_page']:.3f} ms a page, "
          f"{100 * f['chunking_share_of_analysis']:.1f}% of analysis ({chunking['pages']:,} "
          "pages)")
    print(f"phrases --top 20      {phrases_s:.3f} s; first: "
          + ", ".join(f"{r['docs']}x '{r['phrase']}'" for r in top[:3]))
    print(f"sites                 {sites_s:.3f} s for {len(listed):,} hosts and domains and "
          f"{len(hoods):,} neighbourhoods of 2 pages or more, {f['bad_neighbourhoods']} bad; "
          f"{f['monster_sites']} monster candidates: "
          + ", ".join(f"{r['site']} ({r['level']}, {r['pages']} pages, mean pop "
                      f"{r['pop_mean']:.0f})" for r in listed[:3] if r["monster"]))
    for kind, why in (("blind", "blind discovery (T = 10)"),
                      ("informed", "informed discovery (T = 0, the review's labels)"),
                      ("both", "both")):
        print_quality(why, qualities[kind])
    r = qualities["review"]
    print(f"review                {r['drawn']} quilted pages drawn, {r['labelled']} of them "
          f"farm-made and labelled (of {r['farms']} farms)")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
