"""Detection quality on planted quilts and scrapes: recall, source precision, a sweep of k,
m, c, θ, and SPEC §7 partial duplicates at the defaults.

    python -m loadtest.bench_quality              # all real pages + 200 quilts, 60 scrapes
    python -m loadtest.bench_quality --smoke      # ~130 records, for CI

Why: throughput says nothing about whether the alerts are right. A stream with planted
quilts (real WCXB pages, quilts stitched from passages of 4-12 donor pages on other
domains, donors reused across quilts, and near-duplicate mirrors of some real pages) has a
known answer, so we can say how many planted quilts streamdet flags and whether the
sources it names are the pages the text was taken from — at the defaults and as each
parameter moves, like Table 1 of Najork (SIGIR 2012).

What is measured, per parameter point (SPEC §1 for what k, m, c, θ mean):

- recall: share of planted quilts whose quilted flag is set;
- source precision: over the flagged planted quilts, the share of the sources streamdet
  names that are true donors (micro-averaged); "mirror-aware" also accepts a planted
  mirror of a donor (it holds the same passage, so naming it is not wrong);
- donor recall: over the same quilts, the share of their donors that are named;
- false positives: pages that are not planted quilts but are flagged, split into planted
  mirrors, real pages that have a planted mirror, donors, and other real pages; a few are
  listed. Real pages can legitimately be quilted (syndicated articles, mirrors, shared
  press releases), so these are "flagged, not planted", not necessarily errors.

Partial duplicates (SPEC §7), at the default parameters only (γ, m), from the pairs
`dump --partials` would print (views.partial_rows):

- recall: share of planted (scrape, original) pairs found, as unordered pairs;
- precision: share of all pairs that a planted relation explains: scrape-original,
  mirror-original, quilt-donor, or two planted copies of one crawled page (scrapes,
  mirrors, quilts sharing a donor). The rest are counted by kind with a few examples;
  "echoes" are planted copies inheriting text their original already shares with the
  other page (the two are a found pair, or pages of one site: its template). Replayed
  real pages can share text for real (cookie notices, forum boilerplate, syndication);
- span accuracy: for each found scrape, |reported ∩ planted| / |reported ∪ planted| in
  code points, the reported spans being the union of the pair's diagonals on the
  scrape's side and the planted ones where its copied sentences are in its visible text
  (each cut to its first token's start and last token's end, as §7 spans a sentence);
  the mean (target ≥ 0.95) and the share of pairs ≥ 0.95;
- pairs per kind (real, mirror, quilt, scrape), diagonals and sentences per pair.

How: the stream is made once (`planted_stream`: loadtest/generator.py, whose quilts come
from spam farms that reuse their donors) and parsed once; each page's gram sets for every k of
the sweep are kept; at the default k each page is exactly analysis.analyze's (kept text
and sentences, so the engine finds partial duplicates), at the other k its gram set
only. The engine runs in-process on an in-memory KV (the same Store and
Engine as `streamdet run`, batches of its default size), once per distinct (k, m). c and θ
do not change patch sets or covers (the greedy cover stops when nothing more can be
covered, whatever c and θ), so their points re-apply the quilted rule to the same final
rows; each run first checks that this rule reproduces the engine's own flag on every page.
Prints a table and writes loadtest/out/bench_quality-<N>p-<UTC>.json and a .png beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from loadtest.generator import Generator, GeneratorConfig
from loadtest.host import machine
from streamdet.engine.analysis import Analyzed, analyze, page_text
from streamdet.engine.params import Params
from streamdet.engine.records import page_from_object
from streamdet.engine.servers import server_of
from streamdet.engine.tokens import token_spans, tokenize

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "loadtest" / "out"
FARM_QUILTS = 25  # planted quilts per spam farm
MIRROR_VARY = 0.2  # mirrors: share of content text nodes reworded (~17% new grams)
DEFAULT_SIZE = {"pages": 1866, "quilts": 200, "mirrors": 100, "scrapes": 60}
SMOKE_SIZE = {"pages": 100, "quilts": 15, "mirrors": 10, "scrapes": 8}
SWEEP: dict[str, tuple] = {
    "k": (3, 5, 8),
    "m": (2, 3, 5, 10, 20, 50, 100),
    "c": (1, 2, 3, 4, 6, 8),
    "theta": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
}
EXAMPLES = 5  # flagged pages that were not planted, listed in the report
SPAN_GOOD = 0.95  # a scrape's reported spans are "right" at this overlap with the passage


def log(msg: str) -> None:
    print(f"[bench-quality {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- the stream ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Truth:
    """What was planted: quilt url -> its donor urls; mirror url -> the page it copies;
    scrape url -> {"original": the page it copies, "passage": the copied sentences as
    inserted, one a line}."""

    quilts: dict[str, list[str]]
    mirrors: dict[str, str]
    scrapes: dict[str, dict] = field(default_factory=dict)


def planted_stream(seed: int, pages: int, quilts: int, mirrors: int,
                   mirror_vary: float = MIRROR_VARY, scrapes: int = 0
                   ) -> tuple[list[dict], Truth]:
    """The benchmark stream and its truth, from loadtest/generator.py; deterministic for a
    seed. `pages` crawled pages (replays of the real ones, varied as the generator does)
    with about `quilts` planted quilts (from one farm per FARM_QUILTS of them, donors
    reused across a farm's quilts), about `mirrors` near-duplicate mirrors (content
    nodes reworded with probability mirror_vary) and about `scrapes` single-source
    scrapes (a run of sentences of one crawled page on a scraper site: SPEC §7 partial
    duplicates) among them, at seeded positions. Scrapes are drawn on random streams of
    their own, so the other records are the stream that scrapes=0 gives."""
    total = pages + quilts + mirrors + scrapes
    rest = total - scrapes  # quilt_rate and mirror_rate are shares of the non-scrapes
    gen = Generator(GeneratorConfig(
        seed=seed, pages=total, quilt_rate=quilts / rest, mirror_rate=mirrors / rest,
        scrape_rate=scrapes / total, mirror_vary=mirror_vary,
        farms=max(1, round(quilts / FARM_QUILTS))))
    records = list(gen)
    return records, Truth({u: q["donors"] for u, q in gen.truth.quilts.items()},
                          dict(gen.truth.mirrors), dict(gen.truth.scrapes))


def analyse(records: list[dict], ks: Iterable[int], foreign: str = "domain",
            full_k: int | None = None) -> dict[int, list[Analyzed]]:
    """Each record's analysis for every k, parsing each page's html once: at `full_k`
    (the default k) exactly analysis.analyze (gram set, kept text, SPEC §7 sentences, so
    the engine finds partial duplicates and spans), at the other k its gram set only
    (analyze with keep_text=False)."""
    ks = sorted(set(ks))
    out: dict[int, list[Analyzed]] = {k: [] for k in ks}
    for rec in records:
        page = page_from_object(rec)
        # the visible text once; analyze reads page.text when it is set
        page = replace(page, html=None, text=page_text(page))
        for k in ks:
            out[k].append(analyze(page, Params(k=k, foreign=foreign), keep_text=k == full_k))
    return out


# -- the engine ----------------------------------------------------------------------------


def apply_stream(store, params: Params, pages: list[Analyzed], batch: int,
                 on_events=None) -> Counter:
    """Feed pages to the engine as `streamdet run` does per batch: one transaction,
    Engine.process, events out, commit, segment compaction. Returns event counts.

    Records only: the runner also closes a batch at 256 MB of input, which pages of
    ~260 KB of html never reach within a 512-record batch."""
    from streamdet.adapters.state_format import EMBEDDED, check_state
    from streamdet.engine.core import Engine

    check_state(store, EMBEDDED, params, "this state directory")
    engine = Engine(params)
    counts: Counter = Counter()
    for i in range(0, len(pages), batch):
        txn = store.begin()
        events, _stats = engine.process(txn, pages[i:i + batch])
        counts.update(ev["event"] for ev in events)
        if on_events is not None:
            on_events(events)
        txn.commit({})
        store.compact()
    return counts


def final_rows(store, params: Params) -> dict[str, dict]:
    """The final state per document, as `streamdet dump` prints it, by URL."""
    from streamdet.reading.views import dump_rows

    return {row["url"]: row for row in dump_rows(store, params)}


def run_memory(pages: list[Analyzed], params: Params, batch: int
               ) -> tuple[dict, dict, list[dict]]:
    """Rows, counters and SPEC §7 partial-duplicate pairs (`dump --partials`: none unless
    the pages carry their sentences) of one in-process run on an in-memory KV."""
    from streamdet.reading.views import partial_rows
    from streamdet.state.kv import MemoryKV
    from streamdet.state.txn import Store

    store = Store(MemoryKV())
    t = time.perf_counter()
    events = apply_stream(store, params, pages, batch)
    seconds = time.perf_counter() - t
    rows = final_rows(store, params)
    check_rule(rows, params)
    pairs = partial_rows(store, params)
    return rows, {"seconds": seconds, "events": dict(events),
                  "partial_pairs": len(pairs)}, pairs


# -- scoring (pure) ------------------------------------------------------------------------


def is_quilted(row: dict, params: Params) -> bool:
    """The engine's rule (Params.is_quilted: SPEC §1 and §5) applied to a dump row."""
    return params.is_quilted(row["patch_fraction"], row["n_patch_grams"],
                             (s["grams"] for s in row["sources"]))


def check_rule(rows: dict[str, dict], params: Params) -> None:
    """The c/θ points re-apply is_quilted to a run's rows; that is only sound if it gives
    the engine's own flag at the run's parameters. Raise if it ever does not."""
    bad = [u for u, r in rows.items() if is_quilted(r, params) != r["quilted"]]
    if bad:
        raise RuntimeError(f"quilted rule disagrees with the engine on {len(bad)} pages, "
                           f"e.g. {bad[0]}")


def ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def score(rows: dict[str, dict], truth: Truth, c: int, theta: float) -> dict:
    """Recall of planted quilts, precision and recall of their named sources, and the
    flagged pages that were not planted, for one (c, θ) applied to a run's rows."""
    at = Params(c=c, theta=theta)  # only c, θ and φ (0 here) take part in the rule
    flagged = {u for u, r in rows.items() if is_quilted(r, at)}
    found = sorted(q for q in truth.quilts if q in flagged)
    src = source_counts(rows, truth, found)
    fp = false_positives(rows, truth, flagged)
    return {
        "planted": len(truth.quilts),
        "flagged_planted": len(found),
        "recall": ratio(len(found), len(truth.quilts)),
        "source_precision": ratio(src["donor"], src["named"]),
        "source_precision_mirror_aware": ratio(src["donor"] + src["donor_mirror"],
                                               src["named"]),
        # a sibling quilt that took a passage from one of this quilt's donors holds that
        # text too: naming it is not wrong, only not the first copy
        "source_precision_text_aware": ratio(
            src["donor"] + src["donor_mirror"] + src["sibling_quilt"], src["named"]),
        "donor_recall": ratio(src["donors_named"], src["donors"]),
        "named_sources": src,
        "flagged": len(flagged),
        "false_positives": fp,
    }


def source_counts(rows: dict[str, dict], truth: Truth, quilts: list[str]) -> Counter:
    """Sources named for these planted quilts, by what they are: a true donor, a mirror of
    one, another planted quilt (farms reuse passages, so a sibling holds the same text),
    a mirror of a non-donor, or some other real page; and donors named / planted."""
    out: Counter = Counter({k: 0 for k in ("named", "donor", "donor_mirror", "sibling_quilt",
                                           "other_quilt", "other_mirror", "other_real",
                                           "donors", "donors_named")})
    for q in quilts:
        donors = set(truth.quilts[q])
        named = [s["url"] for s in rows[q]["sources"]] if q in rows else []
        out["named"] += len(named)
        out["donors"] += len(donors)
        out["donors_named"] += len(donors.intersection(named))
        for s in named:
            out[source_kind(s, donors, truth)] += 1
    return out


def source_kind(url: str, donors: set[str], truth: Truth) -> str:
    if url in donors:
        return "donor"
    if url in truth.mirrors:
        return "donor_mirror" if truth.mirrors[url] in donors else "other_mirror"
    if url in truth.quilts:
        return "sibling_quilt" if donors.intersection(truth.quilts[url]) else "other_quilt"
    return "other_real"


def false_positives(rows: dict[str, dict], truth: Truth, flagged: set[str]) -> dict:
    """Flagged pages that are not planted quilts, by kind, with a few examples."""
    mirrored = set(truth.mirrors.values())
    donors = {d for ds in truth.quilts.values() for d in ds}
    kinds: Counter = Counter({k: 0 for k in ("mirror", "mirrored_original", "donor", "other")})
    fps = sorted(u for u in flagged if u not in truth.quilts)
    for u in fps:
        kinds["mirror" if u in truth.mirrors else "mirrored_original" if u in mirrored
              else "donor" if u in donors else "other"] += 1
    pages = len(rows) - sum(1 for q in truth.quilts if q in rows)
    return {"count": len(fps), "pages_not_planted": pages, "rate": ratio(len(fps), pages),
            "by_kind": dict(kinds), "examples": [example(rows[u]) for u in fps[:EXAMPLES]]}


def example(row: dict) -> dict:
    return {"url": row["url"], "patch_fraction": round(row["patch_fraction"], 3),
            "n_grams": row["n_grams"], "sources": len(row["sources"]),
            "top_sources": [s["url"] for s in row["sources"][:3]]}


# -- partial duplicates (SPEC §7; pure) -----------------------------------------------------


def page_kind(url: str, truth: Truth) -> str:
    """scrape, mirror, quilt or real (a crawled page: a replay of a real one)."""
    return ("scrape" if url in truth.scrapes else "mirror" if url in truth.mirrors
            else "quilt" if url in truth.quilts else "real")


def origins(url: str, truth: Truth) -> set[str]:
    """The crawled pages whose text a page holds by construction: a scrape's or a
    mirror's original, a quilt's donors, a crawled page itself."""
    if url in truth.scrapes:
        return {truth.scrapes[url]["original"]}
    if url in truth.mirrors:
        return {truth.mirrors[url]}
    if url in truth.quilts:
        return set(truth.quilts[url])
    return {url}


def relation(a: str, b: str, truth: Truth) -> str | None:
    """The planted relation that explains a pair of pages sharing sentences, or None: a
    copy and what it copies (scrape-original, mirror-original, quilt-donor), or two
    planted copies of one crawled page ("same original (scrape/scrape)", and so on:
    scrapes, mirrors and quilts sharing a donor)."""
    for x, y in ((a, b), (b, a)):
        if x in truth.scrapes and truth.scrapes[x]["original"] == y:
            return "scrape-original"
        if truth.mirrors.get(x) == y:
            return "mirror-original"
        if y in truth.quilts.get(x, ()):
            return "quilt-donor"
    if origins(a, truth) & origins(b, truth):
        kinds = sorted((page_kind(a, truth), page_kind(b, truth)))
        return f"same original ({'/'.join(kinds)})"
    return None


def merge_spans(spans: Iterable[Iterable[int]]) -> list[list[int]]:
    """Half-open ranges, sorted and merged where they overlap or touch."""
    out: list[list[int]] = []
    for start, end in sorted((int(a), int(b)) for a, b in spans):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        elif end > start:
            out.append([start, end])
    return out


def span_length(spans: list[list[int]]) -> int:
    return sum(e - s for s, e in spans)


def overlap_length(a: list[list[int]], b: list[list[int]]) -> int:
    """Code points in both of two merged span lists."""
    i = j = total = 0
    while i < len(a) and j < len(b):
        total += max(0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def passage_location(text: str, passage: list[str]) -> tuple[list[list[int]], int]:
    """Where a scrape's copied sentences are in its visible text: each found in order
    (exactly, else with any run of white space for a space), cut to its first token's
    start and its last token's end (as SPEC §7 spans a sentence), neighbours joined when
    no token lies between them (a passage is one run of sentences). Returns the merged
    spans and the number of sentences not found."""
    import re

    pos, spans, missing = 0, [], 0
    for sent in passage:
        at = text.find(sent, pos)
        end = at + len(sent)
        if at < 0:
            m = re.compile(r"\s+".join(map(re.escape, sent.split()))).search(text, pos)
            if m is None:
                missing += 1
                continue
            at, end = m.span()
        _tokens, starts, ends = token_spans(text[at:end])
        if len(starts):
            spans.append([at + int(starts[0]), at + int(ends[-1])])
        pos = end
    joined: list[list[int]] = []
    for start, end in spans:
        if joined and not tokenize(text[joined[-1][1]:start]):
            joined[-1][1] = max(joined[-1][1], end)
        else:
            joined.append([start, end])
    return merge_spans(joined), missing


def span_accuracy(row: dict, scrape: str, passage: str, text: str) -> dict:
    """A found (scrape, original) pair's spans on the scrape's side against where the
    planted passage is: |reported ∩ planted| / |reported ∪ planted| in code points, and
    the share of each that the other covers."""
    side = "spans" if row["url"] == scrape else "other_spans"
    reported = merge_spans(d[side] for d in row["diagonals"])
    planted, missing = passage_location(text, passage.split("\n"))
    both = overlap_length(reported, planted)
    union = span_length(reported) + span_length(planted) - both
    return {"url": scrape, "accuracy": ratio(both, union) or 0.0,
            "precision": ratio(both, span_length(reported)),
            "recall": ratio(both, span_length(planted)),
            "reported": reported, "planted": planted, "sentences_not_found": missing}


def shorten(text: str, width: int = 100) -> str:
    """White space collapsed, the middle cut out past `width` characters."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    half = (width - 5) // 2
    return f"{text[:half]} ... {text[-half:]}"


def score_partials(pairs: list[dict], truth: Truth, text_of) -> dict:
    """SPEC §7 pairs against the planted truth: recall of (scrape, original) pairs,
    precision (pairs a planted relation explains), the unexplained pairs with examples,
    pairs per kind, diagonals per pair, and span accuracy on the scrapes found.
    `text_of(url)` gives a page's visible text."""
    from loadtest.corpus import replay_original

    found = {frozenset((r["url"], r["other"])): r for r in pairs}
    planted = {u: t["original"] for u, t in truth.scrapes.items()}
    hit = [u for u, o in planted.items() if frozenset((u, o)) in found]

    def kind(r: dict) -> str:
        return "/".join(sorted((page_kind(r["url"], truth), page_kind(r["other"], truth))))

    def sentences(r: dict) -> int:
        return sum(d["sentences"] for d in r["diagonals"])

    def echo(r: dict) -> bool:
        """A planted copy paired with a page (or a copy of one) that its original shares
        text with already: the two originals are a found pair themselves, or pages of one
        site (its template; never a pair, being on one server)."""
        if "real" == page_kind(r["url"], truth) == page_kind(r["other"], truth):
            return False
        return any(x != y and (frozenset((x, y)) in found
                               or server_of(x, None, "domain") == server_of(y, None, "domain"))
                   for x in origins(r["url"], truth) for y in origins(r["other"], truth))

    kinds: Counter = Counter()
    diagonals_by_kind: Counter = Counter()
    relations: Counter = Counter()
    unexplained = []
    for r in pairs:
        kinds[kind(r)] += 1
        diagonals_by_kind[kind(r)] += len(r["diagonals"])
        rel = relation(r["url"], r["other"], truth)
        relations[rel or "unexplained"] += 1
        if rel is None:
            unexplained.append(r)
    examples, shown = [], set()
    # the largest first, one per distinct copied text
    for r in sorted(unexplained, key=lambda r: (-sentences(r), r["url"], r["other"])):
        d = r["diagonals"][0]
        text = shorten(text_of(r["url"])[slice(*d["spans"])])
        if text in shown or len(examples) >= EXAMPLES:
            continue
        shown.add(text)
        examples.append({
            "url": r["url"], "other": r["other"],
            "kinds": [page_kind(r["url"], truth), page_kind(r["other"], truth)],
            "real_pages": [replay_original(r["url"]), replay_original(r["other"])],
            "diagonals": len(r["diagonals"]), "sentences": sentences(r),
            "first_diagonal": {"sentences": d["sentences"], "spans": d["spans"],
                               "other_spans": d["other_spans"],
                               "text": text,
                               "other_text": shorten(
                                   text_of(r["other"])[slice(*d["other_spans"])])}})
    acc = [span_accuracy(found[frozenset((u, planted[u]))], u, truth.scrapes[u]["passage"],
                         text_of(u)) for u in hit]
    values = [a["accuracy"] for a in acc]
    n_diag = [len(r["diagonals"]) for r in pairs]
    return {
        "planted_scrapes": len(planted),
        "scrapes_found": len(hit),
        "recall": ratio(len(hit), len(planted)),
        "scrapes_missed": [{"url": u, "original": planted[u]}
                           for u in planted if u not in set(hit)][:EXAMPLES],
        "pairs": len(pairs),
        "explained": len(pairs) - len(unexplained),
        "precision": ratio(len(pairs) - len(unexplained), len(pairs)),
        "unexplained": len(unexplained),
        "by_relation": dict(sorted(relations.items())),
        "by_kind": dict(sorted(kinds.items())),
        "unexplained_by_kind": dict(sorted(Counter(map(kind, unexplained)).items())),
        # of the unexplained: planted copies that inherited text their original already
        # shares with the other page (a found real pair, or the original's own site)
        "unexplained_echoes": sum(map(echo, unexplained)),
        "unexplained_examples": examples,
        "diagonals_per_pair": ratio(sum(n_diag), len(n_diag)),
        "diagonals_per_pair_by_kind": {k: round(diagonals_by_kind[k] / n, 2)
                                       for k, n in sorted(kinds.items())},
        "max_diagonals": max(n_diag, default=0),
        "sentences_per_pair": ratio(sum(map(sentences, pairs)), len(pairs)),
        "span_accuracy": {
            "pairs": len(acc),
            "mean": ratio(sum(values), len(values)),
            "min": min(values, default=None),
            "share_at_least": SPAN_GOOD,
            "share_good": ratio(sum(v >= SPAN_GOOD for v in values), len(values)),
            "mean_precision": ratio(sum(a["precision"] or 0 for a in acc), len(acc)),
            "mean_recall": ratio(sum(a["recall"] or 0 for a in acc), len(acc)),
            "sentences_not_found": sum(a["sentences_not_found"] for a in acc),
            "worst": sorted(acc, key=lambda a: a["accuracy"])[:3],
        },
    }


# -- the sweep -----------------------------------------------------------------------------


def sweep_points(base: Params, sweep: dict[str, tuple]) -> list[tuple[str, Params]]:
    """The default point, then each parameter alone over its values (the default value
    appears in every group, so each curve passes through it)."""
    points = [("default", base)]
    for name, values in sweep.items():
        points += [(name, replace(base, **{name: v})) for v in values]
    return points


def run_sweep(analysed: dict[int, list[Analyzed]], truth: Truth,
              points: list[tuple[str, Params]], batch: int
              ) -> tuple[list[dict], list[dict], list[dict]]:
    """Score every point, running the engine once per distinct (k, m) at the base c, θ.
    Also returns the partial-duplicate pairs of the first point's run (the defaults)."""
    base = points[0][1]
    runs: dict[tuple[int, int], tuple[dict, dict, list[dict]]] = {}
    results = []
    for group, p in points:
        key = (p.k, p.m)
        if key not in runs:
            log(f"engine run k={p.k} m={p.m} on {len(analysed[p.k]):,} pages (memory KV)")
            runs[key] = run_memory(analysed[p.k], replace(base, k=p.k, m=p.m), batch)
            log(f"  {runs[key][1]['seconds']:.1f} s, events {runs[key][1]['events']}")
        results.append({"group": group, "params": p.to_dict(),
                        "engine_run": {"k": p.k, "m": p.m},
                        **score(runs[key][0], truth, p.c, p.theta)})
    run_info = [{"k": k, "m": m, **info} for (k, m), (_rows, info, _pairs) in runs.items()]
    return results, run_info, runs[(base.k, base.m)][2]


# -- report --------------------------------------------------------------------------------


def out_path(name: str, size: str, at: str, suffix: str) -> Path:
    return OUT_DIR / f"{name}-{size}-{at.replace(':', '').replace('-', '')}{suffix}"


def fmt(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def print_table(results: list[dict]) -> None:
    print(f"{'param':7s} {'k':>2s} {'m':>4s} {'c':>2s} {'θ':>4s} {'flagged':>9s} {'recall':>7s} "
          f"{'src prec':>8s} {'~mirror':>7s} {'~text':>6s} {'donor rec':>9s} {'FP pages':>9s}")
    for r in results:
        p = r["params"]
        fp = r["false_positives"]
        print(f"{r['group']:7s} {p['k']:2d} {p['m']:4d} {p['c']:2d} {p['theta']:4.2f} "
              f"{r['flagged_planted']:4d}/{r['planted']:<4d} {fmt(r['recall']):>7s} "
              f"{fmt(r['source_precision']):>8s} {fmt(r['source_precision_mirror_aware']):>7s} "
              f"{fmt(r['source_precision_text_aware']):>6s} {fmt(r['donor_recall']):>9s} "
              f"{fp['count']:5d} ({fmt(fp['rate'], '.1%')})")


def plot(results: list[dict], path: Path, title: str) -> None:
    """One panel per swept parameter: recall, source precision, donor recall and the
    false-positive rate against its value, the default marked."""
    from loadtest.host import pyplot

    plt = pyplot()

    base = results[0]["params"]
    groups = [g for g in SWEEP if any(r["group"] == g for r in results)]
    fig, axes = plt.subplots(1, len(groups), figsize=(4 * len(groups), 3.6), sharey=True)
    series = (("recall", "recall", "o-"), ("source_precision", "source precision", "s-"),
              ("donor_recall", "donor recall", "^-"), ("fp_rate", "flagged, not planted", "x--"))
    for ax, g in zip(list(axes) if len(groups) > 1 else [axes], groups, strict=True):
        pts = [r for r in results if r["group"] == g]
        xs = [r["params"][g] for r in pts]
        for key, label, style in series:
            ys = [(r["false_positives"]["rate"] if key == "fp_rate" else r[key]) for r in pts]
            ax.plot(xs, [float("nan") if y is None else y for y in ys], style, label=label)
        ax.axvline(base[g], color="grey", lw=0.8, ls=":")
        ax.set_xlabel("θ" if g == "theta" else g)
        if g == "m":
            ax.set_xscale("log")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    (axes[0] if len(groups) > 1 else axes).legend(fontsize=7, loc="center left")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_default_details(res: dict) -> None:
    """What the default point names as sources, and the flagged pages not planted."""
    src = res["named_sources"]
    print(f"sources named for flagged planted quilts (default): {src['named']}: "
          f"{src['donor']} donors, {src['donor_mirror']} mirrors of donors, "
          f"{src['sibling_quilt']} planted quilts sharing a donor (farms reuse passages), "
          f"{src['other_quilt']} other planted quilts, {src['other_mirror']} other mirrors, "
          f"{src['other_real']} other real pages; {src['donors_named']} of {src['donors']} "
          "donors named")
    fp = res["false_positives"]
    print(f"flagged, not planted (default): {fp['count']} of {fp['pages_not_planted']} pages "
          f"{fp['by_kind']} — real pages can be quilted for real (syndicated or mirrored text)")
    for ex in fp["examples"]:
        print(f"  {ex['url']}  pf {ex['patch_fraction']:.2f}, {ex['sources']} sources, "
              f"e.g. {', '.join(ex['top_sources'])}")


def print_partials(p: dict, params: Params) -> None:
    """The quality of SPEC §7 partial-duplicate pairs at the defaults."""
    acc = p["span_accuracy"]
    print(f"partial duplicates (SPEC §7, γ={params.gamma}, m={params.m}): {p['pairs']} pairs, "
          f"{fmt(p['diagonals_per_pair'], '.2f')} diagonals a pair (at most "
          f"{p['max_diagonals']}), {fmt(p['sentences_per_pair'], '.1f')} sentences a pair")
    print(f"  planted scrapes found: {p['scrapes_found']}/{p['planted_scrapes']}, recall "
          f"{fmt(p['recall'])}")
    for m in p["scrapes_missed"]:
        print(f"    missed {m['url']} (copies {m['original']})")
    print(f"  precision (pairs a planted relation explains): {p['explained']}/{p['pairs']} = "
          f"{fmt(p['precision'])}; by relation {p['by_relation']}")
    print(f"  pairs by kind {p['by_kind']}; diagonals a pair by kind "
          f"{p['diagonals_per_pair_by_kind']}")
    print(f"  spans on the scrape's side against the planted passage ({acc['pairs']} pairs): "
          f"mean overlap {fmt(acc['mean'])} (target >= {SPAN_GOOD}), "
          f"{fmt(acc['share_good'], '.1%')} of pairs >= {SPAN_GOOD}, min {fmt(acc['min'])}; "
          f"precision {fmt(acc['mean_precision'])}, recall {fmt(acc['mean_recall'])}"
          + (f"; {acc['sentences_not_found']} planted sentences not found in the scrapes"
             if acc["sentences_not_found"] else ""))
    print(f"  unexplained pairs: {p['unexplained']} {p['unexplained_by_kind']}, of which "
          f"{p['unexplained_echoes']} are planted copies inheriting text their original shares "
          "with the other page (a pair of real pages, or its own site's template) — the "
          "crawl replays real pages, which can share text for real (syndication, quotes, "
          "cookie and forum notices): copies the truth does not know of, not necessarily "
          "errors")
    for ex in p["unexplained_examples"]:
        d = ex["first_diagonal"]
        print(f"    {ex['url']} ~ {ex['other']} ({'/'.join(ex['kinds'])}): "
              f"{ex['diagonals']} diagonals, {ex['sentences']} sentences; first "
              f"{d['sentences']} at {d['spans']} / {d['other_spans']}")
        print(f"      {d['text']!r}")
        if d["other_text"] != d["text"]:
            print(f"      other: {d['other_text']!r}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=DEFAULT_SIZE["pages"],
                    help="crawled pages (replays of the real ones)")
    ap.add_argument("--quilts", type=int, default=DEFAULT_SIZE["quilts"])
    ap.add_argument("--mirrors", type=int, default=DEFAULT_SIZE["mirrors"])
    ap.add_argument("--scrapes", type=int, default=DEFAULT_SIZE["scrapes"],
                    help="single-source scrapes (SPEC §7 partial duplicates)")
    ap.add_argument("--mirror-vary", type=float, default=MIRROR_VARY)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batch", type=int, default=None, help="records per engine batch "
                    "(default: streamdet run's)")
    ap.add_argument("--smoke", action="store_true", help="CI size: "
                    + ", ".join(f"{v} {k}" for k, v in SMOKE_SIZE.items()))
    ap.add_argument("--out", help="result JSON (default loadtest/out/bench_quality-*.json)")
    args = ap.parse_args(argv)
    size = dict(SMOKE_SIZE) if args.smoke else {"pages": args.pages, "quilts": args.quilts,
                                                "mirrors": args.mirrors,
                                                "scrapes": args.scrapes}
    from streamdet.adapters.inputs import DEFAULT_BATCH

    batch = args.batch or DEFAULT_BATCH
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    log(f"stream: {size} (seed {args.seed})")
    records, truth = planted_stream(args.seed, size["pages"], size["quilts"], size["mirrors"],
                                    args.mirror_vary, size["scrapes"])
    t1 = time.perf_counter()
    base = Params()
    log(f"{len(records):,} records in {t1 - t0:.1f} s; parsing, grams for k in {SWEEP['k']}, "
        f"sentences at k={base.k}")
    analysed = analyse(records, set(SWEEP["k"]) | {base.k}, base.foreign, full_k=base.k)
    log(f"parsed in {time.perf_counter() - t1:.1f} s")
    results, runs, pairs = run_sweep(analysed, truth, sweep_points(base, SWEEP), batch)
    by_url = {r["url"]: r for r in records}
    texts: dict[str, str] = {}

    def text_of(url: str) -> str:
        if url not in texts:
            texts[url] = page_text(page_from_object(by_url[url]))
        return texts[url]

    partials = score_partials(pairs, truth, text_of)

    at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    json_path = Path(args.out) if args.out else out_path("bench_quality", f"{len(records)}p",
                                                         at, ".json")
    png_path = json_path.with_suffix(".png")
    json_path.parent.mkdir(parents=True, exist_ok=True)
    plot(results, png_path, f"planted: {len(truth.quilts)} quilts, {len(truth.mirrors)} "
         f"mirrors, {len(truth.scrapes)} scrapes among {len(records):,} records "
         f"(seed {args.seed})")
    from loadtest.bench_embedded import git_revision

    report = {
        "benchmark": "bench_quality", "at": at, "git": git_revision(),
        "host": {**machine(), "loadavg_start": load_start, "loadavg_end": os.getloadavg()},
        "config": {**size, "records": len(records), "seed": args.seed,
                   "mirror_vary": args.mirror_vary, "batch": batch, "sweep": SWEEP,
                   "kv": "memory", "stream": "loadtest/generator.py"},
        "truth": {"quilts": len(truth.quilts), "mirrors": len(truth.mirrors),
                  "scrapes": len(truth.scrapes),
                  "donors": len({d for ds in truth.quilts.values() for d in ds})},
        "engine_runs": runs, "results": results,
        "partials": {"params": {"k": base.k, "m": base.m, "gamma": base.gamma,
                                "foreign": base.foreign}, **partials},
        "plot": str(png_path),
        "seconds": time.perf_counter() - t0,
    }
    json_path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print_table(results)
    print_default_details(results[0])
    print_partials(partials, base)
    print(f"wrote {json_path}\nwrote {png_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
