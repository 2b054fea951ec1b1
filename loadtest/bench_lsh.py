"""streamdet against what a user would otherwise reach for: datasketch MinHash LSH.

    python -m loadtest.bench_lsh --pages 5000
    python -m loadtest.bench_lsh --smoke            # ~150 records, for CI

On the same stream (loadtest/generator.py: a replayed crawl with planted quilts from spam
farms and near-duplicate mirrors), each in its own child process so that times and peak
memory do not mix:

- streamdet: `streamdet run` with durable RocksDB state, from html to final state (as
  bench_embedded measures it); it uses its analyser processes, so CPU seconds are given
  beside wall seconds;
- MinHash LSH, the usual near-duplicate tool (Broder's resemblance): per page the same
  parse and tokenization as streamdet (`analysis.page_text`, `tokens.tokenize`) and the
  same 5-gram shingles (streamdet's 64-bit gram hashes, cut to the 32 bits MinHash
  expects, with an identity hash: the fastest way to feed datasketch, better for it than
  its default SHA-1 of shingle strings), a `MinHash(num_perm=128)` with `update_batch`,
  then `MinHashLSH(threshold, num_perm=128)`: `query`, then `insert`. One process,
  single-threaded, as datasketch runs.

Beyond speed, what each finds on the planted truth: the share of quilts streamdet flags
vs the share whose LSH query returns at least one true donor, and the share of mirrors
whose original streamdet names as a source vs the share LSH returns, at several LSH
thresholds (the index is rebuilt from the same MinHashes, untimed). Also the mean
estimated Jaccard between a quilt and its donors: what LSH would need to see them.
Prints a table; writes loadtest/out/bench_lsh-<N>p-<UTC>.json and a PNG beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from loadtest.bench_embedded import (
    ceilings,
    git_revision,
    run_child,
    run_streamdet,
    streamdet_command,
)
from loadtest.corpus import write_jsonl
from loadtest.generator import Generator, GeneratorConfig, Truth
from loadtest.host import machine, module_command, module_env, pyplot

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "loadtest" / "out"
NUM_PERM = 128
THRESHOLD = 0.5  # the timed run's (datasketch's default)
THRESHOLDS = (0.1, 0.2, 0.3, 0.5, 0.8)
SMOKE_PAGES = 150


def log(msg: str) -> None:
    print(f"[bench-lsh {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- the LSH child ------------------------------------------------------------------------


def _identity(x: int) -> int:
    return x


def child_lsh(stream: str, out: str) -> int:
    """Parse, shingle, MinHash, query + insert every page, timed per step; then the
    MinHashes of the planted pages go to `out` for the quality pass."""
    import numpy as np
    from datasketch import MinHash, MinHashLSH

    from streamdet.engine.analysis import page_text
    from streamdet.engine.grams import gram_set
    from streamdet.engine.records import BadRecord, page_from_object
    from streamdet.engine.tokens import tokenize

    lsh = MinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM)
    split = {"parse_tokenize": 0.0, "minhash": 0.0, "lsh_query_insert": 0.0}
    hashes: dict[str, list[int]] = {}
    scheme = MinHash(num_perm=NUM_PERM).scheme
    found: dict[str, list[str]] = {}
    n = 0
    cpu0, t0 = time.process_time(), time.perf_counter()
    with open(stream, "rb") as f:
        for line in f:
            a = time.perf_counter()
            try:
                page = page_from_object(json.loads(line))
            except BadRecord:
                continue
            grams = gram_set(tokenize(page_text(page)), 5)
            b = time.perf_counter()
            m = MinHash(num_perm=NUM_PERM, hashfunc=_identity)
            m.update_batch((grams & np.uint64(0xFFFFFFFF)).tolist())
            c = time.perf_counter()
            found[page.url] = lsh.query(m)
            lsh.insert(page.url, m)
            d = time.perf_counter()
            split["parse_tokenize"] += b - a
            split["minhash"] += c - b
            split["lsh_query_insert"] += d - c
            hashes[page.url] = m.hashvalues.tolist()
            n += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    Path(out).write_text(json.dumps({"pages": n, "wall_seconds": wall, "cpu_seconds": cpu,
                                     "split": split, "found": found, "hashes": hashes,
                                     "scheme": scheme}))
    return 0


# -- quality ------------------------------------------------------------------------------


def lsh_quality(hashes: dict[str, list[int]], scheme: str, truth, mirrors: set[str],
                threshold: float) -> dict:
    """Replay the stream's MinHashes through a fresh index at `threshold` (query before
    insert, in stream order): quilts with a true donor returned, `mirrors` with their
    original returned."""
    import numpy as np
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(threshold=threshold, num_perm=NUM_PERM)
    q_hit = m_hit = returned = 0
    for url, hv in hashes.items():
        m = MinHash(num_perm=NUM_PERM, hashvalues=np.array(hv, dtype=np.uint64),
                    scheme=scheme)
        got = set(lsh.query(m))
        returned += len(got)
        if url in truth.quilts:
            q_hit += bool(got & set(truth.quilts[url]["donors"]))
        elif url in mirrors:
            m_hit += truth.mirrors[url] in got
        lsh.insert(url, m)
    return {"threshold": threshold, "quilts_with_a_donor": _share(q_hit, len(truth.quilts)),
            "mirrors_with_original": _share(m_hit, len(mirrors)),
            "candidates_per_page": returned / max(1, len(hashes))}


def donor_jaccard(hashes: dict[str, list[int]], truth) -> float | None:
    """Mean MinHash-estimated Jaccard between a quilt and each of its donors."""
    import numpy as np

    vals = [float(np.mean(np.array(hashes[q]) == np.array(hashes[d])))
            for q, t in truth.quilts.items() for d in t["donors"] if q in hashes and d in hashes]
    return sum(vals) / len(vals) if vals else None


def streamdet_quality(state: Path, workdir: Path, truth) -> tuple[dict, set[str]]:
    """From `streamdet dump`: quilts flagged, mirrors whose original is a named source;
    and the mirrors counted (those of pages with text: a page without grams has no
    source to name, and all such pages look alike to MinHash)."""
    cmd = streamdet_command("cli", Path(), state, Path(), Path(), None)
    dump = run_child([cmd[0], "dump", "--state", str(state)], workdir, "dump")["stdout"]
    rows = {r["url"]: r for r in map(json.loads, dump.splitlines())}
    flagged = sum(bool(rows.get(q, {}).get("quilted")) for q in truth.quilts)
    mirrors = {m for m, orig in truth.mirrors.items() if rows.get(orig, {}).get("n_grams")}
    named = sum(truth.mirrors[m] in {s["url"] for s in rows.get(m, {}).get("sources", [])}
                for m in mirrors)
    return {"quilts_flagged": _share(flagged, len(truth.quilts)),
            "mirrors_with_original": _share(named, len(mirrors)),
            "mirrors_counted": len(mirrors)}, mirrors


def _share(k: int, n: int) -> float | None:
    return k / n if n else None


# -- the run ------------------------------------------------------------------------------


def child_generate(stream: str, truth: str, pages: str, seed: str) -> int:
    """The stream and its truth, made in a child: the generator's page templates (~1 GB)
    would otherwise count in the peak RSS of every later child (Linux keeps a forked
    process's high-water mark across exec)."""
    gen = Generator(GeneratorConfig(seed=int(seed), pages=int(pages), quilt_rate=0.03,
                                    mirror_rate=0.03, farms=max(1, int(pages) // 1000)))
    write_jsonl(iter(gen), stream)
    Path(truth).write_text(json.dumps(gen.truth.to_json()))
    return 0


def measure(pages: int, seed: int, work: Path) -> dict:
    stream, truth_path = work / "stream.jsonl", work / "truth.json"
    run_child(module_command("bench_lsh", "--_child-gen", str(stream), str(truth_path),
                             str(pages), str(seed)), work, "generate", env=module_env())
    truth = Truth.from_json(json.loads(truth_path.read_text()))
    log(f"stream: {truth.summary()}")
    state = work / "state"
    cmd = streamdet_command("cli", stream, state, work / "events.jsonl",
                            work / "dead.jsonl", None)
    sd = run_streamdet(cmd, state, work)
    log(f"streamdet: {sd['wall_seconds']:.1f} s")
    lsh_out = work / "lsh.json"
    ls = run_child(module_command("bench_lsh", "--_child-lsh", str(stream), str(lsh_out)),
                   work, "lsh", env=module_env())
    inner = json.loads(lsh_out.read_text())
    log(f"lsh: {ls['wall_seconds']:.1f} s")
    hashes, scheme = inner.pop("hashes"), inner.pop("scheme")
    sd_quality, mirrors = streamdet_quality(state, work, truth)
    found = inner.pop("found")
    n = inner["pages"]
    return {
        "truth": truth.summary(),
        "streamdet": {"pages": n, "wall_seconds": sd["wall_seconds"],
                      "cpu_seconds": sd["cpu_seconds"], "peak_rss_bytes": sd["peak_rss_bytes"],
                      # all of the run's processes together (the analysis process too)
                      "peak_rss_all_bytes": sd["rss_tree"]["peak_total_bytes"],
                      "memory_budget_bytes": 1 << 30,  # streamdet's default --memory
                      # the engine's thread, RocksDB's, other threads, the analysis process
                      "cpu_parts_seconds": sd["rss_tree"]["cpu_parts_seconds"],
                      "pages_per_s": n / sd["wall_seconds"],
                      "quality": sd_quality},
        "lsh": {**inner, "process_wall_seconds": ls["wall_seconds"],
                "process_cpu_seconds": ls["cpu_seconds"], "peak_rss_bytes": ls["peak_rss_bytes"],
                "pages_per_s": n / ls["wall_seconds"], "threshold": THRESHOLD,
                "candidates_per_page": sum(map(len, found.values())) / max(1, n),
                "quality": [lsh_quality(hashes, scheme, truth, mirrors, t)
                            for t in THRESHOLDS],
                "quilt_donor_jaccard": donor_jaccard(hashes, truth)},
    }


def plot(result: dict, png: Path) -> None:
    plt = pyplot()
    sd, ls = result["streamdet"], result["lsh"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4.2))
    bars = a.bar(["streamdet\n(durable state)", f"MinHash LSH\n(num_perm {NUM_PERM})"],
                 [sd["pages_per_s"], ls["pages_per_s"]], color=["tab:blue", "tab:gray"])
    a.bar_label(bars, fmt="%.1f")
    a.set_ylabel("pages/s (wall)")
    a.set_title(f"{sd['pages']:,} pages: ratio {result['figures']['ratio']:.2f}", fontsize=10)
    qs = ls["quality"]
    labels = ["streamdet"] + [f"LSH t={q['threshold']}" for q in qs]
    x = range(len(labels))
    qv = [sd["quality"]["quilts_flagged"] or 0] + [q["quilts_with_a_donor"] or 0 for q in qs]
    mv = [sd["quality"]["mirrors_with_original"] or 0] + [q["mirrors_with_original"] or 0
                                                          for q in qs]
    b.bar([i - 0.2 for i in x], qv, 0.4, label="quilts: flagged / a donor returned")
    b.bar([i + 0.2 for i in x], mv, 0.4, label="mirrors: original named / returned")
    b.set_xticks(list(x), labels, fontsize=8)
    b.set_ylim(0, 1.05)
    b.set_ylabel("share of planted pages")
    b.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2)
    b.set_title("what each finds on the planted truth", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--_child-lsh":
        return child_lsh(*sys.argv[2:4])
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--_child-gen":
        return child_generate(*sys.argv[2:6])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--smoke", action="store_true", help=f"{SMOKE_PAGES} records (CI)")
    ap.add_argument("--out", help="result JSON (default loadtest/out/bench_lsh-*.json)")
    args = ap.parse_args(argv)
    pages = SMOKE_PAGES if args.smoke else args.pages
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="streamdet-bench-lsh-") as tmp:
        res = measure(pages, args.seed, Path(tmp))
    sd, ls = res["streamdet"], res["lsh"]
    at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = {"benchmark": "bench_lsh", "at": at, "git": git_revision(),
              "host": {**machine(), "loadavg_start": load_start,
                       "loadavg_end": os.getloadavg()},
              "config": {"pages": pages, "seed": args.seed, "num_perm": NUM_PERM,
                         "threshold": THRESHOLD},
              **res,
              "figures": {"pages": sd["pages"], "streamdet_pages_per_s": sd["pages_per_s"],
                          "lsh_pages_per_s": ls["pages_per_s"],
                          "ratio": sd["pages_per_s"] / ls["pages_per_s"],
                          "ratio_cpu": ls["process_cpu_seconds"] / sd["cpu_seconds"],
                          # the most the ratio could be at streamdet's CPU (bench_embedded)
                          **ceilings(ls["process_wall_seconds"], sd["cpu_seconds"],
                                     sd["cpu_parts_seconds"]["main thread"])}}
    out = Path(args.out) if args.out else OUT_DIR / (
        f"bench_lsh-{pages}p-{at.replace(':', '').replace('-', '')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    plot(result, out.with_suffix(".png"))
    print_table(result)
    print(f"wrote {out} and {out.with_suffix('.png').name}")
    return 0


def print_table(r: dict) -> None:
    sd, ls, f = r["streamdet"], r["lsh"], r["figures"]
    sp = ls["split"]
    print(f"pages                        {f['pages']:,}  ({r['truth']})")
    print(f"streamdet                    {sd['pages_per_s']:8.1f} pages/s  "
          f"({sd['wall_seconds']:.1f} s wall, {sd['cpu_seconds']:.1f} s CPU, peak RSS "
          f"{sd['peak_rss_all_bytes'] / 2**20:,.0f} MB of all processes under --memory "
          f"{sd['memory_budget_bytes'] >> 20} MiB; the main one "
          f"{sd['peak_rss_bytes'] / 2**20:,.0f} MB)")
    print(f"MinHash LSH (t={THRESHOLD})          {ls['pages_per_s']:8.1f} pages/s  "
          f"({ls['process_wall_seconds']:.1f} s wall, {ls['process_cpu_seconds']:.1f} s CPU, "
          f"peak RSS {ls['peak_rss_bytes'] / 2**20:,.0f} MB)")
    print(f"  of which                   parse+tokenize {sp['parse_tokenize']:.1f} s, minhash "
          f"{sp['minhash']:.1f} s, query+insert {sp['lsh_query_insert']:.1f} s; "
          f"{ls['candidates_per_page']:.2f} candidates/page")
    print(f"ratio streamdet / LSH        {f['ratio']:8.3f}   (by CPU seconds "
          f"{f['ratio_cpu']:.3f})")
    parts = sd["cpu_parts_seconds"]
    print(f"ratio at most                {f['ceiling_main_thread']:8.3f}   at the engine "
          f"thread's CPU ({parts['main thread']:.1f} s; {f['ceiling_cores']:.3f} at all of "
          f"streamdet's CPU over {r['host']['cpus']} cores; analysis "
          f"{parts['child processes']:.1f} s)")
    q = sd["quality"]
    print(f"streamdet finds              quilts {_pct(q['quilts_flagged'])}, mirrors' "
          f"originals {_pct(q['mirrors_with_original'])}")
    for x in ls["quality"]:
        print(f"LSH t={x['threshold']:<4} finds            quilts' donors "
              f"{_pct(x['quilts_with_a_donor'])}, mirrors' originals "
              f"{_pct(x['mirrors_with_original'])}; {x['candidates_per_page']:.2f} "
              "candidates/page")
    j = ls["quilt_donor_jaccard"]
    print(f"quilt-donor Jaccard          {j:.3f} (mean, MinHash estimate)" if j is not None
          else "quilt-donor Jaccard          -")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


if __name__ == "__main__":
    sys.exit(main())
