"""The benchmark report: the newest result of each benchmark, its figures and plots.

    python -m loadtest.report                    # loadtest/out/REPORT.md
    python -m loadtest.report --publish docs/benchmarks

Every benchmark in loadtest/ writes `loadtest/out/<bench>-<size>-<UTC>.json` (and most a
PNG beside it). This collects, per benchmark, the newest result of the largest size run
(a smoke run only when nothing bigger exists, so a CI smoke does not hide the real figures),
draws the plots the benchmark did not draw itself, and writes one Markdown page with the
headline figures against their targets, the command of each run and the machine. With
`--publish DIR` the page, its PNGs and JSONs are copied to DIR, which is committed and
linked from the README; loadtest/out/ itself is scratch (git-ignored).

Also the home of the plots of bench_embedded and bench_kafka (they import them). What
every benchmark shares about the machine is in loadtest/host.py.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from loadtest.host import machine, pyplot

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "loadtest" / "out"
BENCHES = ("bench_embedded", "bench_lsh", "bench_growth", "bench_kafka", "bench_quality",
           "bench_hostile", "bench_bounds", "bench_evidence", "bench_partials", "bench_near",
           "bench_replication", "bench_review", "bench_spam")
COMMANDS = {
    "bench_embedded": "python -m loadtest.bench_embedded --pages 20000 --floor-runs 2",
    "bench_lsh": "python -m loadtest.bench_lsh --pages 5000",
    "bench_growth": "python -m loadtest.bench_growth --docs 500000 --mirrors 5",
    "bench_kafka": "python -m loadtest.bench_kafka --pages 2000",
    "bench_quality": "python -m loadtest.bench_quality",
    "bench_hostile": "python -m loadtest.bench_hostile --pages 3000 --pairs 3 "
                     "--no-guard-timeout 30 --baseline CHECKOUT",
    "bench_bounds": "python -m loadtest.bench_bounds",
    "bench_evidence": "python -m loadtest.bench_evidence --pages 1800",
    "bench_partials": "python -m loadtest.bench_partials --pages 2000",
    "bench_near": "python -m loadtest.bench_near --pages 5000 --giant 10000",
    "bench_replication": "python -m loadtest.bench_replication --pages 20000",
    "bench_review": "python -m loadtest.bench_review --pages 100000",
    "bench_spam": "python -m loadtest.bench_spam",
}
KAFKA_RUNS = 3  # bench_kafka's default --throughput-runs and --latency-runs


def command(name: str, r: dict) -> str:
    """The command of a published result. bench_kafka's is read back from the result: its
    size, runs and analysis processes differ between the runs worth publishing (a quick
    2,000 pages; a worker's memory at 20,000)."""
    if name != "bench_kafka":
        return COMMANDS[name]
    c = r.get("config", {})
    cmd = (f"BENCH_ANALYZERS={c['analyzers']} " if c.get("analyzers") else "") + \
        f"python -m loadtest.bench_kafka --pages {c.get('pages', 2000)}"
    for option, key in (("--throughput-runs", "throughput_pairs"),
                        ("--latency-runs", "latency_runs")):
        if key in r and len(r[key]) != KAFKA_RUNS:  # one entry a run, [] for none
            cmd += f" {option} {len(r[key])}"
    return cmd


# -- plots of the benchmarks that do not draw their own -----------------------------------


def plot_embedded(result: dict, png: Path) -> None:
    """Pages/s of streamdet and of the parse+tokenize+hash floor, with the ratio."""
    plt = pyplot()
    f = result["figures"]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    bars = ax.bar(["streamdet\n(durable state)", "floor\n(parse+tok+hash)"],
                  [f["streamdet_pages_per_s"], f["floor_pages_per_s"]],
                  color=["tab:blue", "tab:gray"])
    ax.bar_label(bars, fmt="%.1f")
    ax.set_ylabel("pages/s")
    ax.set_title(f"embedded, {f['pages']:,} pages: ratio {f['ratio']:.2f} "
                 f"(target >= {result['targets']['ratio']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def plot_kafka(result: dict, png: Path) -> None:
    """Throughput of 1 and 2 workers, and the fetch->event latency distribution."""
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    one, two = result["one_worker"]["pages_per_s"], result["two_workers"]["pages_per_s"]
    bars = a.bar(["1 worker", "2 workers"], [one, two], color=["tab:gray", "tab:blue"])
    a.bar_label(bars, fmt="%.1f")
    a.set_ylabel("pages/s")
    a.set_title(f"scaling {result['scaling']:.2f}x (target >= "
                f"{result['targets']['scaling']})", fontsize=10)
    lat = result.get("latency", {})
    xs = sorted(lat.get("latencies_s") or [])
    if xs:
        b.plot([x * 1000 for x in xs], [(i + 1) / len(xs) for i in range(len(xs))])
        b.axvline(result["targets"]["p99_s"] * 1000, color="tab:red", ls="--",
                  label="p99 target")
        b.axhline(0.99, color="tab:gray", ls=":", lw=0.8)
        b.legend(loc="lower right")
    b.set_xlabel("fetch -> event latency (ms)")
    b.set_ylabel("share of events")
    b.set_title(f"at {lat.get('rate', 0):.1f} pages/s: p50 {lat.get('p50_s', 0) * 1000:.0f} ms,"
                f" p99 {lat.get('p99_s', 0) * 1000:.0f} ms", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


PLOTTERS: dict[str, Callable[[dict, Path], None]] = {
    "bench_embedded": plot_embedded, "bench_kafka": plot_kafka}


# -- choosing results ---------------------------------------------------------------------

_NAME = re.compile(r"^(bench_[a-z]+)-(\d+)[a-z]*-(\d{8}T\d{6}Z)\.json$")
SMOKE_MAX = 1000  # records (or documents): runs this small are CI smokes, not figures


def newest(out_dir: Path) -> dict[str, Path]:
    """Per benchmark, the newest result among the runs of the largest size."""
    best: dict[str, tuple[int, str, Path]] = {}
    for p in out_dir.glob("bench_*.json"):
        m = _NAME.match(p.name)
        if not m:
            continue
        name, size, at = m.group(1), int(m.group(2)), m.group(3)
        if name not in best or (size, at) > best[name][:2]:
            best[name] = (size, at, p)
    return {name: path for name, (_, _, path) in best.items()}


# -- headline figures ---------------------------------------------------------------------


def _pass(ok: bool | None) -> str:
    return "" if ok is None else (" ✅" if ok else " ❌ missed")


def headline(name: str, r: dict) -> list[str]:
    """A few lines of the figures that answer the benchmark's question."""
    if name == "bench_embedded":
        f = r["figures"]
        t, ok = r["targets"], r["pass"]
        lines = [f"{f['pages']:,} pages: streamdet {f['streamdet_pages_per_s']:.1f} pages/s, "
                 f"floor {f['floor_pages_per_s']:.1f} pages/s, ratio **{f['ratio']:.3f}** "
                 f"(target >= {t['ratio']}){_pass(ok['ratio'])}"
                 + (f"; by CPU seconds {f['ratio_cpu']:.3f} (target >= {t['ratio_cpu']})"
                    f"{_pass(ok['ratio_cpu'])}" if "ratio_cpu" in t else "")]
        if "ceiling_main_thread" in f:
            ms = f["cpu_ms_per_page"]
            lines.append(f"at this CPU the ratio could be at most "
                         f"**{f['ceiling_main_thread']:.3f}** (the engine's thread: "
                         f"{ms['main thread']:.1f} ms of CPU a page, against the floor's "
                         f"{f['floor_cpu_ms_per_page']:.1f}) and {f['ceiling_cores']:.3f} "
                         f"(all the CPU over {r['host']['cpus']} cores; analysis "
                         f"{ms['child processes']:.1f} ms a page, RocksDB's threads "
                         f"{ms['rocksdb threads']:.1f}, other threads {ms['other threads']:.1f})")
        if "peak_rss_all_mb" in f:
            lines.append(f"peak RSS of all processes **{f['peak_rss_all_mb']:,.0f} MiB** under "
                         f"--memory {f['memory_budget_mb']:,.0f} MiB (target <= "
                         f"{t['peak_rss_all_mb']:,.0f}){_pass(ok['peak_rss_all'])}")
        return lines + [
            f"peak RSS {f['peak_rss_mb']:,.0f} MiB (the main process); state "
            f"{f['state_mb']:,.1f} MB for {f['distinct_grams']:,} distinct grams = "
            f"**{f['bytes_per_distinct_gram']:.1f} B/gram** (target <= "
            f"{t['bytes_per_distinct_gram']}){_pass(ok['bytes_per_distinct_gram'])}"]
    if name == "bench_kafka":
        lat = r.get("latency", {})
        return [f"{r['config']['pages']:,} pages: 1 worker {r['one_worker']['pages_per_s']:.1f}"
                f" pages/s, 2 workers {r['two_workers']['pages_per_s']:.1f} pages/s, scaling "
                f"**{r['scaling']:.2f}x** (target >= {r['targets']['scaling']})"
                f"{_pass(r['pass']['scaling'])}",
                *([f"2 warm workers on the stream's second {r['segment']['pages']:,} pages "
                   f"(after its first {r['segment']['warm_pages']:,}): "
                   f"{r['segment']['peak']['pages_per_s']:.1f} pages/s; latency at half of it"]
                  if "segment" in r else []),
                *([f"latency at {lat.get('rate', 0):.1f} pages/s over {lat.get('events', 0)} "
                   f"events: p50 {lat.get('p50_s', 0) * 1000:.0f} ms, p99 **"
                   f"{lat.get('p99_s', 0) * 1000:.0f} ms** (target < "
                   f"{r['targets']['p99_s'] * 1000:.0f} ms){_pass(r['pass']['p99'])}"
                   f"{_kafka_drain(lat)}"]
                  if lat else []),
                *_kafka_minutes(lat.get("by_minute", [])),
                *_kafka_stages(lat.get("stages"), r),
                *_kafka_traffic(r["one_worker"].get("topics")),
                *(_kafka_memory(r) if "memory" in r else [])]
    if name == "bench_lsh":
        f, ls, q = r["figures"], r["lsh"], r["streamdet"]["quality"]
        at = next(x for x in ls["quality"] if x["threshold"] == ls["threshold"])
        return [f"{f['pages']:,} pages: streamdet {f['streamdet_pages_per_s']:.1f} pages/s, "
                f"MinHash LSH (num_perm 128, insert + query) {f['lsh_pages_per_s']:.1f} pages/s: "
                f"ratio **{f['ratio']:.2f}** (by CPU seconds {f['ratio_cpu']:.2f})"
                + (f"; at most {f['ceiling_main_thread']:.2f} at the engine thread's CPU "
                   f"({r['streamdet']['cpu_parts_seconds']['main thread']:.1f} s)"
                   if "ceiling_main_thread" in f else ""),
                f"planted quilts found: streamdet {q['quilts_flagged']:.0%}, LSH at threshold "
                f"{ls['threshold']} {at['quilts_with_a_donor']:.0%} (a donor returned); mirrors: "
                f"{q['mirrors_with_original']:.0%} vs {at['mirrors_with_original']:.0%}; "
                f"quilt-donor Jaccard {ls['quilt_donor_jaccard']:.3f}"]
    if name == "bench_quality":
        d = next(x for x in r["results"] if x["group"] == "default")
        p, fp = d["params"], d["false_positives"]
        return [f"{d['planted']} planted quilts at k={p['k']}, m={p['m']}, c={p['c']}, "
                f"θ={p['theta']}: recall **{d['recall']:.3f}**, precision of named sources "
                f"**{d['source_precision']:.3f}** (text-aware "
                f"{d.get('source_precision_text_aware', 0):.3f}), donors named "
                f"{d['donor_recall']:.3f}",
                f"flagged but not planted: {fp['count']} of {fp['pages_not_planted']:,} pages "
                f"({fp['rate']:.1%}) {fp['by_kind']}", *_partials_quality(r.get("partials"))]
    if name == "bench_hostile":
        return _hostile_headline(r)
    if name == "bench_bounds":
        return _bounds_headline(r)
    if name == "bench_evidence":
        return _evidence_headline(r)
    if name == "bench_partials":
        return _partials_headline(r)
    if name == "bench_near":
        return _near_headline(r)
    if name == "bench_replication":
        return _replication_headline(r)
    if name == "bench_review":
        return _review_headline(r)
    if name == "bench_spam":
        return _spam_headline(r)
    if name == "bench_growth" and r.get("figures", {}).get("stationary"):
        return _growth_headline(r)
    summary = r.get("summary") or r.get("figures")
    if isinstance(summary, dict):
        return ["; ".join(f"{k} {_fmt(v)}" for k, v in summary.items()
                          if not isinstance(v, dict | list))]
    return []


def _kafka_traffic(topics: dict | None) -> list[str]:
    """What the pipeline writes to the broker a page, per topic (1 worker's run)."""
    if not topics:
        return []
    own = {t: x for t, x in topics.items() if t != "pages" and x["records"]}
    per = ", ".join(f"{t} {x['records_a_page']:.1f} / {x['bytes_a_page'] / 1000:,.1f} KB / "
                    f"{x.get('stored_a_page', 0) / 1000:,.1f} KB" for t, x in sorted(own.items()))
    return [f"written to the broker a page (records / bytes / stored, as the broker keeps "
            f"the compressed batches): **{sum(x['records_a_page'] for x in own.values()):.1f} / "
            f"{sum(x['bytes_a_page'] for x in own.values()) / 1000:,.1f} KB / "
            f"{sum(x.get('stored_a_page', 0) for x in own.values()) / 1000:,.1f} KB**: {per}"]


def _kafka_drain(lat: dict) -> str:
    """How long the pipeline took to finish after the last page; a result from before
    bench_kafka waited for that counted only the events of the first 10 s after it, and
    says so: a shard behind then sent its slowest events unseen."""
    if lat.get("drain_s") is not None:
        return f"; the pipeline idle {lat['drain_s']:.0f} s after the last page"
    return ("; events counted only until 10 s after the last page: those a shard behind "
            "sent later are not in these figures")


def _kafka_minutes(rows: list[dict]) -> list[str]:
    """The latency run's first and last full minutes side by side, with the cores the
    broker and the workers used in each: whether the latency grew with the broker."""
    full = [r for r in rows if r.get("events") and "broker_cores" in r]
    if len(full) < 3:
        return []
    first, last = full[0], full[-2]  # the very last minute holds a part of one

    def minute(r: dict) -> str:
        own = f" (own p99 {r['own_p99_s'] * 1000:.0f} ms)" if "own_p99_s" in r else ""
        return (f"minute {r['minute']}: p50 {r['p50_s'] * 1000:.0f} / p99 "
                f"{r['p99_s'] * 1000:.0f} ms{own}, broker {r['broker_cores']:.2f} cores, "
                f"workers {r['workers_cores']:.2f}")

    return [f"latency by the minute its pages were sent: {minute(first)}; {minute(last)}"]


def _kafka_stages(cut: dict | None, r: dict) -> list[str]:
    """The latency's parts (bench_kafka.stages) and the verdict of its minutes; nothing
    for a result from before bench_kafka cut them."""
    if not cut or not cut.get("events"):
        return []
    parts = ", ".join(f"{name} p50 {cut[name]['p50_s'] * 1000:.0f} / p99 "
                      f"{cut[name]['p99_s'] * 1000:.0f} ms" for name in
                      ("intake", "own", "delivery") if name in cut)
    t = r["targets"]
    return [f"the latency's parts (the workers' record timestamps): {parts}; minutes: p99 < "
            f"{t['minute_p99_s']:.0f} s every minute, or own p99 < {t['own_minute_p99_s']:.0f}"
            f" s every minute and p99 < {t['minute_p99_s']:.0f} s in the first "
            f"{t['early_minutes']}{_pass(r['pass']['minutes'])}"]


def _kafka_memory(r: dict) -> list[str]:
    """A worker's peak RSS (all its processes) against its --memory."""
    m = r["memory"]
    peaks, mb = m["peak_worker_bytes"], 2**20
    return [f"peak RSS of a worker, all its processes: **{peaks['one_worker'] / mb:,.0f} MiB** "
            f"alone, {peaks['two_workers'] / mb:,.0f} MiB of two, under --memory "
            f"{m['budget_bytes'] / mb:,.0f} MiB (target <= "
            f"{(m['budget_bytes'] + m['slack_bytes']) / mb:,.0f}){_pass(r['pass']['memory'])}"]


def _spam_headline(r: dict) -> list[str]:
    """The spam ranking: precision and recall of `spam` blind and with 20 labels."""
    b, u = r["blind"], r["labels"]["uniform"]["20"]["unlabelled"]
    return [f"{r['config']['records']:,} records, {r['config']['farm_pages']} farm pages, "
            f"{r['ranked']} ranked: blind precision **{b['precision']:.3f}** recall "
            f"**{b['recall']:.3f}**{_pass(r['pass']['blind'])}, precision at 100 "
            f"{b['precision_at_100']:.3f}",
            f"with 20 labels (uniform, unlabelled pages) precision **{u['precision']:.3f}** "
            f"recall **{u['recall']:.3f}**{_pass(r['pass']['labels_20'])}; ranking "
            f"{r['seconds']['rank_share_of_engine']:.1%} of the engine's run"]


def _review_headline(r: dict) -> list[str]:
    """The review desk: its start, and the p95 of a page view and of a 50-row list."""
    f, q, t = r["figures"], r["requests"], r["target"]
    judged = f["documents"] >= t["documents"]
    built = ("" if r["config"].get("pages") else " (a state given with --state and --events, "
             "not one the command built)")
    return [f"{f['documents']:,} documents, {f['quilts']:,} quilts{built}; the desk answers "
            f"{f['desk_start_seconds']:.1f} s after its start",
            f"page view p95 **{f['page_view_p95_ms']:.0f} ms** (median "
            f"{q['page_html_first']['median_ms']:.0f} ms as HTML), 50-row list p95 "
            f"**{f['list_p95_ms']:.0f} ms** (target < {t['ms']:.0f} ms at "
            f"{t['documents']:,} documents{'' if judged else ': a smaller state, not judged'})"
            f"{_pass(r['pass'] if judged else None)}; a label written in "
            f"{q['label_write']['median_ms']:.1f} ms (median)"]


def _bounds_headline(r: dict) -> list[str]:
    """The largest growth per doubling, then each shape's at the largest size."""
    sizes = r["sizes"]
    growths = [row.get("growth", 0) for rows in r["shapes"].values() for row in rows]
    lines = [f"{len(r['shapes'])} hostile shapes from n = {sizes[0]:,} to {sizes[-1]:,}: engine "
             f"seconds a byte grow at most **{max(growths, default=0):.2f}x** per doubling "
             f"(1 linear, 2 quadratic; target <= 1.5){_pass(max(growths, default=0) <= 1.5)}"]
    for shape, rows in r["shapes"].items():
        last = rows[-1]
        if "engine_s" not in last:
            lines.append(f"{shape}: {last.get('timeout') or last.get('error')}")
            continue
        lines.append(f"{shape}: at n = {last['n']:,} ({last['input_bytes'] / 1e6:.2f} MB) "
                     f"engine {last['engine_s']:.3f} s, slowest step {last['worst_step_s']:.3f}"
                     f" s, peak {last['peak_rss_mb']:.0f} MB; growth "
                     + ", ".join(f"{row['growth']:.2f}" for row in rows if "growth" in row))
    return lines


def _evidence_headline(r: dict) -> list[str]:
    """What shares, spans and kept texts cost, and how well spans find copied passages."""
    f, a, p = r["figures"], r["accuracy"], r["packing"]
    worst = max(r["worst_case"], key=lambda w: w["seconds"])
    return [f"{f['pages']:,} pages: packing the visible text {f['pack_ms_per_page']:.2f} ms a "
            f"page; kept {f['kept_text_bytes_per_page']:,.0f} B a page (of "
            f"{p['text_bytes_per_page']:,.0f} B of text), "
            f"{100 * f['kept_text_share_of_state']:.1f}% of the state",
            f"evidence {f['evidence_ms_per_event']:.2f} ms an event, "
            f"{100 * f['evidence_share_of_engine']:.1f}% of the engine's time; dump "
            f"{f['dump_ms_per_row']:.2f} ms a row",
            f"spans on {a['quilts_flagged']} flagged planted quilts: overlap with the planted "
            f"passages **{a['overlap']:.3f}** (precision {a['precision']:.3f}, recall "
            f"{a['recall']:.3f}; target >= {r['targets']['span_overlap']})"
            f"{_pass(r['pass']['span_overlap'])}",
            f"worst case: a {worst['chars']:,}-character page located in "
            f"{worst['seconds']:.2f} s, peak {worst['peak_mb']:.0f} MB (its first "
            f"{worst['scanned_chars']:,} characters)"]


def _partials_quality(p: dict | None) -> list[str]:
    """bench_quality's SPEC §7 line: planted scrapes found, pairs explained, spans."""
    if not p:
        return []
    return [f"partial duplicates: recall of planted scrapes **{p['recall']:.3f}**, precision "
            f"of pairs {p['precision']:.3f} ({p['pairs']} pairs), span accuracy "
            f"**{p['span_accuracy']['mean']:.3f}** (target >= 0.95)"]


def _partials_headline(r: dict) -> list[str]:
    """What SPEC §7 costs: cutting, the engine's share, the state, the worst case."""
    f = r["figures"]
    return [f"{f['pages']:,} pages: cutting into sentences {f['cut_ms_per_page']:.2f} ms a page "
            f"({100 * f['cut_share_of_analysis']:.1f}% of the analysis); partial duplicates "
            f"**{100 * f['partials_share_of_engine']:.1f}%** of the engine's time "
            f"({f['engine_pages_per_s_with']:.0f} against {f['engine_pages_per_s_without']:.0f} "
            "pages/s, same batches)",
            f"state {f['state_bytes_per_page']:,.0f} B a page; {f['pairs']:,} pairs; dump "
            f"--partials {f['dump_ms_per_pair']:.2f} ms a pair; worst case "
            f"{f['worst_case_seconds']:.2f} s, peak {f['worst_case_peak_mb']:.0f} MB"]


def _near_headline(r: dict) -> list[str]:
    """SPEC §6: the near-duplicate path against MinHashLSH, its share of a page, what it
    finds, and a giant cluster."""
    f = r["figures"]
    s, t = f["streamdet"], f["lsh"]
    out = [f"{f['pages']:,} pages: the §6 path {s['pages_per_s']:.0f} pages/s (sketch "
           f"{s['sketch_ms_per_page']:.2f} ms, clusters {s['clusters_ms_per_page']:.2f} ms a "
           f"page), MinHashLSH (84, 6 × 14) {t['pages_per_s']:.0f} pages/s: ratio "
           f"**{f['ratio']:.2f}** (target >= 1.0){_pass(f['ratio'] >= 1.0)}",
           f"§6 share of a page in `streamdet run` **{f['near_share_of_run']:.3f}** (target "
           f"<= 0.15){_pass(f['near_share_of_run'] <= 0.15)}; planted mirrors found "
           f"**{f['mirror_recall']:.2f}** of {f['mirrors']} (LSH {f['lsh_mirror_recall']:.2f}); "
           f"quilts put with a donor {f['quilts_with_a_donor']} of {f['quilts']}"]
    if "giant" in f:
        g = f["giant"]
        out.append(f"giant cluster of {g['size']:,}: split {g['split_ms']:.0f} ms "
                   f"({g['split_searched']:,} searched), merge {g['merge_ms']:.0f} ms; a copy "
                   f"re-fetched {g['refetch_ms']:.2f} ms, {g['refetch_searched']} searched, "
                   f"{g['refetch_changed']} reported")
    return out


def _replication_headline(r: dict) -> list[str]:
    """SPEC §8: its share of the engine's time, its tables, `phrases` and `sites`, and
    the farms' hosts and the others flagged (monster candidates, bad neighbourhoods) by
    blind discovery, by a review's labels (informed), and by both."""
    f, qs = r["figures"], r["quality"]
    blind = qs["blind"]
    lines = [f"{f['pages']:,} pages: §8 (traps, popular phrases, site totals, chunks and "
             f"neighbourhoods) **{100 * f['section8_share_of_engine']:.1f}%** of the engine's "
             f"time (target <= 20%){_pass(f['section8_share_of_engine'] <= 0.2)}; tables "
             f"popular {f['popular_bytes_per_page']:.0f} B and sites "
             f"{f['sites_bytes_per_page']:.0f} B a page",
             f"`phrases --top 20` {f['phrases_seconds']:.3f} s, `sites` "
             f"{f['sites_seconds']:.3f} s ({f['sites']:,} hosts and domains)",
             f"monster candidates: {blind['farm_hosts_monster']} of the farms' "
             f"{blind['farm_hosts']} hosts (their pop sd "
             f"{min(blind['farm_pop_sd'], default=0):.0f}–"
             f"{max(blind['farm_pop_sd'], default=0):.0f}, against < 15), "
             f"{blind['real_hosts_monster']} of {blind['real_hosts']:,} other hosts "
             f"({100 * blind['real_monster_share']:.2f}%)",
             f"chunks: table chunks {f['chunk_bytes_per_page']:.0f} B a page, "
             f"neighbourhood records {f['neighbourhood_bytes_per_page']:.0f} B; cutting "
             f"them {_chunking(f['chunking_ms_per_page'])} in analysis"]
    rv = qs["review"]
    for kind, why in (("blind", "blind discovery (T = 10)"),
                      ("informed", f"informed discovery (T = 0; {rv['labelled']} farm pages "
                                   f"labelled among {rv['drawn']} quilts reviewed)"),
                      ("both", "both")):
        q = qs[kind]
        met = q["farm_hosts_flagged"] == q["farm_hosts"] and q["real_flagged_share"] <= 0.01
        lines.append(f"{why}: farm hosts flagged {q['farm_hosts_flagged']} of "
                     f"{q['farm_hosts']}, other hosts {q['real_hosts_flagged']} "
                     f"({100 * q['real_flagged_share']:.2f}%; target all farms, <= 1% of "
                     f"the others){_pass(met)}; bad neighbourhoods "
                     f"{q['farm_neighbourhoods_bad']} of the farms' "
                     f"{q['farm_neighbourhoods']}, {q['real_neighbourhoods_bad']} of "
                     f"{q['real_neighbourhoods']:,} others")
    return lines


def _chunking(ms: float) -> str:
    """Cutting chunks a page: a paired difference that noise can take below zero."""
    return f"{ms:.3f} ms a page" if ms > 0 else f"within noise ({ms:+.3f} ms a page, paired)"


def _hostile_headline(r: dict) -> list[str]:
    """The guard's cost on real pages (and against a checkout without guard or watchdog),
    and the slowest hostile page at the largest size, with the guard and without it."""
    c, sizes = r["cost"], r["config"]["sizes_mb"]
    largest, smallest = f"{max(sizes):g} MB", f"{min(sizes):g} MB"
    worst = max(r["hostile"], key=lambda x: x[largest]["seconds"] or float("inf"))
    stuck = [x["shape"] for x in r["hostile"] if x["no guard"]["seconds"] is None]
    slow = max((x for x in r["hostile"] if x["no guard"]["seconds"] is not None),
               key=lambda x: x["no guard"]["seconds"], default=None)
    d = c["page_by_page"]
    lines = [f"{c['pages']:,} real pages through `streamdet run`, markup guard on vs off in "
             f"{len(c['rounds'])} interleaved pairs: the guard costs **"
             f"{100 * c['guard_cost']:.1f}%** of the throughput (median pair; target <= 3%)"
             f"{_pass(r['pass']['guard_cost'])}",
             f"page by page on {d['pages']:,} of them: {d['guard_ms']:.3f} ms of analysis per "
             f"page, {100 * c['cpu_share']:.1f}% of the run's {c['run_cpu_ms_per_page']:.2f} CPU "
             "ms per page (analysis runs beside the engine: less of the wall time)"]
    if "baseline_ratio_median" in c:
        lines.append(f"against a checkout without guard or watchdog: ratio "
                     f"{c['baseline_ratio_median']:.3f} (guard, watchdog and what came with "
                     "them, together)")
    lines.append(f"{len(r['hostile'])} hostile shapes at {', '.join(f'{x:g}' for x in sizes)}"
                 f" MB: slowest at {largest} **{worst[largest]['seconds']:.2f} s** "
                 f"({worst['shape']}; target <= 2 s){_pass(r['pass']['hostile_seconds'])}; "
                 f"without the guard at {smallest}: "
                 + (f"{len(stuck)} still running at the timeout ({', '.join(stuck)})"
                    if stuck else "none past the timeout")
                 + (f", slowest finished {slow['no guard']['seconds']:.1f} s ({slow['shape']})"
                    if slow else ""))
    return lines


def _growth_headline(r: dict) -> list[str]:
    """Growth as the state grows, counted from the first window after the stream's
    warm-up (before it, an arrival re-scores fewer earlier pages: the stream's make-up
    changes, not the state), raw and per VM speed, beside the literal figure."""
    # judged as today, whatever wrote the result
    from loadtest.growth_verdict import judge, window_start

    f = r["figures"]
    st, target = f["stationary"], r["target"]["growth"]
    n = st["windows_averaged"]
    start = window_start(next(x for x in r["checkpoints"]
                              if x["documents"] == st["from_documents"]))
    per_speed = st.get("growth_of_means_per_vm_speed")
    return [f"{f['documents']:,} documents: engine {f['first_ms_per_page']:.2f} ms/page in "
            f"the first window (0 to {r['checkpoints'][0]['documents']:,}, with the stream's "
            f"warm-up), {f['last_ms_per_page']:.2f} in the last: {f['growth']:.2f}x",
            f"from {start:,} documents (the "
            f"stream's warm-up ends at {f['warmup_documents']:,}): mean of the last {n} "
            f"windows over the first {n} **{st['growth_of_means']:.2f}x**"
            + ("" if per_speed is None else f", per VM speed **{per_speed:.2f}x**")
            + f" (target <= {target}){_pass(judge(f, target)['growth'])}; its first window "
            f"alone to the last {st['growth']:.2f}x; disk "
            f"{f['disk_bytes'] / 1e9:.1f} GB, peak RSS {f['peak_rss_bytes'] / 2**30:.1f} GiB"
            + (f" under --memory {f['memory_budget_bytes'] / 2**30:.2f} GiB (target <= budget"
               f" + 200 MB){_pass(r['pass'].get('peak_rss'))}"
               if f.get("memory_budget_bytes") else ""),
            *_growth_sites(r)]


def _growth_sites(r: dict) -> list[str]:
    """`streamdet sites`' reading of the state at the last checkpoint (SPEC §8)."""
    last = r["checkpoints"][-1]
    if "sites_seconds" not in last:
        return []
    return [f"`sites` at {last['documents']:,} documents: {last['sites_seconds']:.2f} s to "
            f"read {last['sites_rows']:,} sites and {last['neighbourhood_rows']:,} "
            "neighbourhoods of 2 pages or more (target < 1 s)"
            f"{_pass(last['sites_seconds'] < 1)}"]


def _fmt(v) -> str:
    return f"{v:,.3f}" if isinstance(v, float) else str(v)


def _machine(host: dict) -> str:
    return (f"{host['cpu_model']}, {host['cpus']} CPUs, {host['memory_gb']} GB, "
            f"Python {host['python']}")


def _usual_machine(results: dict[str, tuple[Path, dict]], host: dict) -> str:
    """The machine most of the results were measured on (this one if none says)."""
    named = Counter(_machine(r["host"]) for _, r in results.values() if r.get("host"))
    return named.most_common(1)[0][0] if named else _machine(host)


def render(results: dict[str, tuple[Path, dict]], host: dict) -> str:
    """The Markdown page. A result measured on another machine than most says so: figures
    compare within one result, and across results of one machine only."""
    usual = _usual_machine(results, host)
    lines = ["# streamdet benchmark report", "",
             f"Machine: {usual}, unless a result names another.", "",
             "Regenerate: run the commands below, then `python -m loadtest.report`.", ""]
    for name in BENCHES:
        if name not in results:
            lines += [f"## {name}", "", "no result yet", ""]
            continue
        path, r = results[name]
        lines += [f"## {name}", "", f"`{command(name, r)}` — {path.name}, at {r.get('at', '?')}"
                  + (f", git {r['git']}" if r.get("git") else ""), ""]
        if r.get("host") and _machine(r["host"]) != usual:
            lines += [f"Measured on another machine: {_machine(r['host'])}.", ""]
        if int(_NAME.match(path.name).group(2)) < SMOKE_MAX:
            lines += ["**A smoke-size run: its figures say nothing; see the README's "
                      "figures or run the command above.**", ""]
        lines += [f"- {h}" for h in headline(name, r)]
        png = path.with_suffix(".png")
        if png.exists():
            lines += ["", f"![{name}]({png.name})"]
        lines.append("")
    return "\n".join(lines)


def build(out_dir: Path, publish: Path | None) -> Path:
    results: dict[str, tuple[Path, dict]] = {}
    for name, path in newest(out_dir).items():
        r = json.loads(path.read_text(encoding="utf-8"))
        png = path.with_suffix(".png")
        if name in PLOTTERS and not png.exists():
            PLOTTERS[name](r, png)
        results[name] = (path, r)
    report = out_dir / "REPORT.md"
    report.write_text(render(results, machine()), encoding="utf-8")
    if publish:
        publish.mkdir(parents=True, exist_ok=True)
        for path, _ in results.values():
            for f in (path, path.with_suffix(".png")):
                if f.exists():
                    shutil.copy2(f, publish / f.name)
        shutil.copy2(report, publish / "README.md")
        return publish / "README.md"
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default=str(OUT_DIR), help="where the benchmarks wrote")
    ap.add_argument("--publish", help="copy the report, its PNGs and JSONs to this directory")
    args = ap.parse_args(argv)
    out_dir = Path(args.out_dir)
    if not out_dir.is_dir():
        print(f"report: {out_dir} does not exist: run a benchmark first", file=sys.stderr)
        return 2
    path = build(out_dir, Path(args.publish) if args.publish else None)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
