"""Embedded benchmark: `streamdet run` with RocksDB state vs. the unavoidable work alone.

    python -m loadtest.bench_embedded                 # 20,000 pages
    python -m loadtest.bench_embedded --pages 500
    python -m loadtest.bench_embedded --smoke         # ~200 pages, for CI

Steps (only 2 and 3 are timed):

1. Generate `--pages` records with `corpus.replay_stream` (real WCXB pages replayed under
   new domains, words varied in content text nodes, html kept) into a plain JSONL file.
2. Run the pipeline on it with a fresh durable RocksDB state, in a child process:
   `--mode cli` (default) runs `streamdet run --input FILE --state DIR ...` exactly as a
   user would; `--mode api` runs `EmbeddedRunner(Store(RocksKV(DIR)), ...)` in a child.
   Wall time of the child (interpreter start-up included) gives streamdet pages/s; its
   peak RSS is that child's own ru_maxrss (os.wait4). The parent stays small (stdlib
   only): Linux charges a child the RSS of its parent at fork time, so generation and the
   floor run in children of their own.
3. The floor, in one process: read the same file and for every line do what the pipeline
   cannot avoid doing: JSON decode, validate (`page_from_object`), parse html, tokenize,
   hash 5-grams (`analysis.analyze`). floor pages/s = pages / that time.

Then it counts distinct grams exactly (from the floor's gram sets; the engine keeps first
holders in segments, so no single column family has one key per gram; the `grams` overlay
column family's key count is recorded for information), measures the state's bytes on
disk (SST + WAL + the rest, before anything reopens it), and prints and writes to
loadtest/out/ a JSON with:
streamdet pages/s, floor pages/s, their ratio (target >= 0.5), peak RSS, state bytes,
distinct grams and bytes per distinct gram (target <= 30). `--enforce` exits 1 when a
target is missed (off by default: these machines are shared, so timings are noisy; the
load average at start and end is recorded to judge that; `--floor-runs 2` measures the
floor before and after streamdet and keeps the faster).

Disk and time: replayed records average ~260 KB of html, so 20,000 pages are ~5 GB of
JSONL in the work dir (a temp dir, deleted afterwards unless --keep); generating them
takes ~3 minutes (not timed).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from loadtest.host import MEMORY_SLACK, TreeRss, machine, module_command, module_env
from loadtest.report import plot_embedded

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "loadtest" / "out"
SMOKE_PAGES = 200
TARGET_RATIO = 0.8  # streamdet's pages/s over the floor's, by wall time
TARGET_RATIO_CPU = 0.5  # the floor's CPU seconds over streamdet's
DEFAULT_MEMORY = 1 << 30  # streamdet's own default budget (--memory)
TARGET_BYTES_PER_GRAM = 30.0


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- 1. stream ----------------------------------------------------------------------------


def generate(path: Path, pages: int, seed: int, vary: float) -> dict:
    from loadtest.corpus import replay_stream

    t = time.perf_counter()
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for rec in replay_stream(seed, pages, vary):
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            n += 1
            if n % 2000 == 0:
                log(f"generated {n:,}/{pages:,} records")
    return {"records": n, "bytes": path.stat().st_size, "seconds": time.perf_counter() - t}


# -- 2. streamdet -------------------------------------------------------------------------


def streamdet_command(mode: str, stream: Path, state: Path, events: Path, dead: Path,
                      batch: int | None, memory: str | None = None) -> list[str]:
    if mode == "cli":
        exe = Path(sys.executable).parent / "streamdet"
        base = [str(exe)] if exe.exists() else [sys.executable, "-m", "streamdet"]
        return base + ["run", "--input", str(stream), "--state", str(state),
                       "--events", str(events), "--dead-letter", str(dead)] + (
                           [] if batch is None else ["--batch", str(batch)]) + (
                           [] if memory is None else ["--memory", memory])
    return module_command("bench_embedded", "--_child-api", str(stream), str(state),
                          str(events), str(dead)) + (
                              [] if batch is None else ["--batch", str(batch)])


def child_api(stream: str, state: str, events: str, dead: str, batch: int | None) -> int:
    """--mode api: the in-process API, run in this (child) process."""
    from streamdet.adapters.analyzers import default_processes
    from streamdet.adapters.embedded import EmbeddedRunner
    from streamdet.adapters.inputs import DEFAULT_BATCH, open_source
    from streamdet.adapters.outputs import JsonlSink
    from streamdet.engine.params import Params
    from streamdet.state.rocks import RocksKV
    from streamdet.state.txn import Store

    store = Store(RocksKV(state))
    ev, dl = JsonlSink(events), JsonlSink(dead)
    try:
        s = EmbeddedRunner(store, Params(), ev, dl, batch_size=batch or DEFAULT_BATCH,
                           analyzers=default_processes()).run([open_source(stream)])
    finally:
        ev.close()
        dl.close()
        store.close()
    print(json.dumps({"pages": s.pages, "seconds": s.seconds, "events": dict(s.events),
                      "dead": dict(s.dead)}))
    return 0


def run_child(cmd: list[str], workdir: Path, name: str, heartbeat=None,
              env: dict[str, str] | None = None) -> dict:
    """Run cmd with stdout/stderr to files (in `env`, default this process's); wall time
    and the child's own rusage."""
    out_p, err_p = workdir / f"{name}.stdout", workdir / f"{name}.stderr"
    t = time.perf_counter()
    with open(out_p, "w") as out, open(err_p, "w") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                env=env)
        tree = TreeRss(proc.pid)
        last = t
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            time.sleep(0.05 if time.perf_counter() - t < 5 else 0.5)
            if heartbeat and time.perf_counter() - last >= 30:
                last = time.perf_counter()
                heartbeat(last - t)
    wall = time.perf_counter() - t
    rss = tree.stop()
    proc.returncode = os.waitstatus_to_exitcode(status)
    stdout, stderr = out_p.read_text(), err_p.read_text()
    out_p.unlink()
    err_p.unlink()
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed (exit {proc.returncode}): {' '.join(cmd)}\n"
                         f"{stderr[-4000:]}{stdout[-2000:]}")
    return {"wall_seconds": wall, "cpu_seconds": ru.ru_utime + ru.ru_stime,
            "peak_rss_bytes": ru.ru_maxrss * 1024,  # Linux: KiB; this process alone
            "rss_tree": rss,  # every process of the run together (analysis pool included)
            "stdout": stdout, "stderr": stderr}


def ceilings(floor_wall: float, cpu: float, main_thread_cpu: float) -> dict[str, float]:
    """Upper bounds of the wall-time ratio to the floor at a run's CPU cost. A run cannot
    take less wall time than its CPU over the machine's cores, nor less than its busiest
    serial thread's CPU: the engine's thread, which applies every page in order."""
    cores = os.cpu_count() or 1
    return {"ceiling_cores": cores * floor_wall / cpu if cpu else float("nan"),
            "ceiling_main_thread": floor_wall / main_thread_cpu if main_thread_cpu
            else float("nan")}


def run_streamdet(cmd: list[str], state: Path, workdir: Path,
                  env: dict[str, str] | None = None) -> dict:
    r = run_child(cmd, workdir, "streamdet", heartbeat=lambda s: log(
        f"streamdet running {s:,.0f} s, state {dir_bytes(state) / 1e6:,.0f} MB"), env=env)
    r["command"] = cmd
    r["internal"] = None
    m = re.search(r"(\d+) pages in ([\d.]+) s", r["stderr"])
    if m:  # the CLI's own summary: time inside the runner, start-up excluded
        r["internal"] = {"pages": int(m.group(1)), "seconds": float(m.group(2))}
    elif r["stdout"].strip().startswith("{"):
        r["internal"] = json.loads(r["stdout"].strip().splitlines()[-1])
    r["stderr"] = r["stderr"].strip()[-2000:]
    r["stdout"] = r["stdout"].strip()[-2000:]
    return r


# -- 3. floor ------------------------------------------------------------------------------


def floor(stream: Path) -> tuple[dict, list]:
    """parse + tokenize + hash every page of the stream, in this process, timed."""
    from streamdet.engine.analysis import analyze
    from streamdet.engine.params import Params
    from streamdet.engine.records import BadRecord, page_from_object

    params = Params()
    grams = []
    n = bad = 0
    cpu0 = time.process_time()
    t = time.perf_counter()
    with open(stream, "rb") as f:
        for line in f:
            try:
                a = analyze(page_from_object(json.loads(line)), params, keep_text=False)
            except BadRecord:
                bad += 1
                continue
            grams.append(a.grams)
            n += 1
    wall = time.perf_counter() - t
    return {"pages": n, "bad": bad, "wall_seconds": wall,
            "cpu_seconds": time.process_time() - cpu0}, grams


def distinct_grams(grams: list) -> dict:
    import numpy as np

    total = sum(len(g) for g in grams)
    allg = np.concatenate(grams) if grams else np.empty(0, dtype=np.uint64)
    distinct = int(len(np.unique(allg)))
    return {"gram_occurrences": total, "distinct_grams": distinct}


def child_floor(stream: str, state: str, count_keys: str) -> int:
    """--_child-floor: the floor, distinct grams, and the overlay key count, as JSON."""
    fl, grams = floor(Path(stream))
    res = {"floor": fl, "grams": distinct_grams(grams)}
    del grams
    if count_keys == "1":
        res["grams"].update(count_gram_keys(Path(state)))
        res["texts"] = kept_texts(Path(state))
        res["partials"] = partial_state(Path(state))
    print(json.dumps(res))
    return 0


def child_generate(stream: str, pages: str, seed: str, vary: str) -> int:
    print(json.dumps(generate(Path(stream), int(pages), int(seed), float(vary))))
    return 0


# -- state on disk --------------------------------------------------------------------------


def dir_bytes(path: Path) -> int:
    from streamdet.state.rocks import dir_bytes as walk

    return walk(str(path))


def state_breakdown(path: Path) -> dict:
    out = {"sst": 0, "wal": 0, "other": 0}
    for root, _dirs, files in os.walk(path):
        for name in files:
            size = os.path.getsize(os.path.join(root, name))
            key = "sst" if name.endswith(".sst") else "wal" if name.endswith(".log") else "other"
            out[key] += size
    out["total"] = sum(out.values())
    return out


def count_gram_keys(state: Path) -> dict:
    """Exact key count of the `grams` column family (total-order scan), and RocksDB's own
    estimate. Since the engine keeps first holders in segments (`segs`), this is the
    overlay only, not the distinct grams. Opening the state may replay its WAL, so disk
    size is measured before."""
    from rocksdict import ReadOptions

    from streamdet.state.rocks import RocksKV

    kv = RocksKV(str(state))
    try:
        cf = kv._cf["grams"]  # read-only use of the backend's handle
        est = cf.property_int_value("rocksdb.estimate-num-keys")
        ro = ReadOptions()
        ro.set_total_order_seek(True)
        t = time.perf_counter()
        n = sum(1 for _ in cf.keys(read_opt=ro))
        return {"grams_cf_keys": n, "grams_cf_estimate": est,
                "count_seconds": time.perf_counter() - t}
    finally:
        kv.close()


def kept_texts(state: Path) -> dict:
    """The documents' kept visible texts (SPEC §5): how many, their packed bytes (the
    values of table `texts`) and the visible text they hold."""
    from streamdet.engine.text import unpack_text
    from streamdet.state.rocks import RocksKV

    kv = RocksKV(str(state), read_only=True)
    try:
        n = packed = raw = 0
        for _key, value in kv.items("texts"):
            n += 1
            packed += len(value)
            raw += len(unpack_text(value).encode("utf-8"))
        return {"documents": n, "packed_bytes": packed, "text_bytes": raw}
    finally:
        kv.close()


def partial_state(state: Path) -> dict:
    """What SPEC §7 keeps (table `partials`): bytes of keys and values per kind of record
    (engine.partials: k postings, s sentences, p partners, u what pair events showed)."""
    from streamdet.state.rocks import RocksKV

    kv = RocksKV(str(state), read_only=True)
    try:
        kinds: dict[str, dict] = {}
        for key, value in kv.items("partials"):
            k = kinds.setdefault(key[:1].decode(), {"records": 0, "bytes": 0})
            k["records"] += 1
            k["bytes"] += len(key) + len(value)
        return {"bytes": sum(k["bytes"] for k in kinds.values()), "by_kind": kinds}
    finally:
        kv.close()


# -- main ----------------------------------------------------------------------------------


def git_revision() -> str:
    try:
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "streamdet"],
                               capture_output=True, text=True).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=20_000, help="pages to replay (default 20000)")
    ap.add_argument("--smoke", action="store_true",
                    help=f"CI size: {SMOKE_PAGES} pages (overrides --pages)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--vary", type=float, default=0.9,
                    help="share of content text nodes varied per replay (default 0.9: ~77%% "
                    "of a replay's 5-grams are new, the rest is boilerplate shared across "
                    "replays; 0.7 gives 61%% new and ten-fold near-duplicates, a stress case)")
    ap.add_argument("--mode", choices=("cli", "api"), default="cli",
                    help="cli: the streamdet run command; api: EmbeddedRunner in a child")
    ap.add_argument("--batch", type=int, default=None,
                    help="records per batch (default: streamdet's own default)")
    ap.add_argument("--floor-runs", type=int, choices=(1, 2), default=1,
                    help="2: measure the floor before and after streamdet, keep the faster")
    ap.add_argument("--memory", help="streamdet's --memory (default: its own, 1GiB)")
    ap.add_argument("--stream", help="replay this JSONL stream (one an earlier run kept with "
                    "--keep) instead of generating one; --pages is then its length")
    ap.add_argument("--workdir", help="where the stream and state go (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the stream and state")
    ap.add_argument("--no-count-keys", action="store_true",
                    help="skip the exact key count of the grams column family")
    ap.add_argument("--out", help="result JSON (default loadtest/out/bench_embedded-*.json)")
    ap.add_argument("--enforce", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--_child-api", nargs=4, help=argparse.SUPPRESS)
    ap.add_argument("--_child-floor", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--_child-generate", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._child_api:
        return child_api(*args._child_api, batch=args.batch)
    if args._child_floor:
        return child_floor(*args._child_floor)
    if args._child_generate:
        return child_generate(*args._child_generate)
    pages = SMOKE_PAGES if args.smoke else args.pages

    work = Path(args.workdir or tempfile.mkdtemp(prefix="streamdet-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    stream, state = work / "stream.jsonl", work / "state"
    events, dead = work / "events.jsonl", work / "dead-letter.jsonl"
    given = Path(args.stream).resolve() if args.stream else None
    if given is not None:
        stream = given
    for p in (events, dead) if given else (stream, events, dead):
        p.unlink(missing_ok=True)
    shutil.rmtree(state, ignore_errors=True)
    load_start = os.getloadavg()
    me = module_command("bench_embedded")
    try:
        if given is not None:
            with open(stream, "rb") as f:
                records = sum(1 for _ in f)
            pages = records
            gen = {"records": records, "bytes": stream.stat().st_size, "seconds": None,
                   "given": str(stream)}
            log(f"replaying {records:,} records of {stream} (not generated)")
        else:
            log(f"generating {pages:,} replayed pages (seed {args.seed}, vary {args.vary})"
                f" -> {stream}")
            g = run_child(me + ["--_child-generate", str(stream), str(pages), str(args.seed),
                                str(args.vary)], work, "generate", env=module_env())
            gen = json.loads(g["stdout"].strip().splitlines()[-1])
            log(f"generated {gen['records']:,} records, {gen['bytes'] / 1e6:,.0f} MB "
                f"in {gen['seconds']:.0f} s (not timed)")

        floor_runs = []

        def run_floor(count_keys: bool) -> dict:
            log("floor: parse + tokenize + hash the same pages in one process")
            f = run_child(me + ["--_child-floor", str(stream), str(state),
                                "1" if count_keys else "0"], work, "floor", env=module_env())
            res = json.loads(f["stdout"].strip().splitlines()[-1])
            res["floor"]["peak_rss_bytes"] = f["peak_rss_bytes"]
            floor_runs.append(res["floor"])
            log(f"floor: {res['floor']['pages'] / res['floor']['wall_seconds']:.1f} pages/s")
            return res

        if args.floor_runs > 1:
            run_floor(False)  # before streamdet (brackets changes in machine load)
        cmd = streamdet_command(args.mode, stream, state, events, dead, args.batch, args.memory)
        log(f"streamdet ({args.mode}): {' '.join(cmd)}")
        # api: a child of this module; cli: streamdet itself, in this environment
        sd = run_streamdet(cmd, state, work, env=module_env() if args.mode == "api" else None)
        disk = state_breakdown(state)
        sd["events"] = count_lines_by(events, "event")
        sd["dead_letters"] = count_lines_by(dead, "reason")
        log(f"streamdet done in {sd['wall_seconds']:.1f} s: {sd['stderr'].splitlines()[-1:]}")

        fres = run_floor(not args.no_count_keys)
        fl = min(floor_runs, key=lambda r: r["wall_seconds"])  # the fastest floor run
        gcount = fres["grams"]
        texts = fres.get("texts")
        partials = fres.get("partials")
        keys = {k: v for k, v in gcount.items() if k.startswith("grams_cf")}
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
        elif not args.keep:
            for p in (events, dead) if given else (stream, events, dead):
                p.unlink(missing_ok=True)
            shutil.rmtree(state, ignore_errors=True)

    n = fl["pages"]
    sd_pps = n / sd["wall_seconds"]
    floor_pps = n / fl["wall_seconds"]
    ratio = sd_pps / floor_pps
    ratio_cpu = fl["cpu_seconds"] / sd["cpu_seconds"] if sd["cpu_seconds"] else float("nan")
    bpg = disk["total"] / gcount["distinct_grams"] if gcount["distinct_grams"] else float("nan")
    budget = parse_memory(args.memory) if args.memory else DEFAULT_MEMORY
    # the tree's sum is sampled every 0.2 s and can miss a short peak that the kernel's
    # own figure for the main process keeps: all processes together held at least that
    peak_all = max(sd["rss_tree"]["peak_total_bytes"], sd["peak_rss_bytes"])
    parts = sd["rss_tree"]["cpu_parts_seconds"]
    bounds = ceilings(fl["wall_seconds"], sd["cpu_seconds"], parts["main thread"])
    result = {
        "benchmark": "bench_embedded",
        "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git": git_revision(),
        "host": {**machine(), "loadavg_start": load_start, "loadavg_end": os.getloadavg()},
        "config": {"pages": pages, "seed": args.seed, "vary": args.vary, "mode": args.mode,
                   "batch": args.batch, "params": {"k": 5, "m": 50, "c": 4, "theta": 0.5,
                                                   "foreign": "domain"}},
        "stream": gen,
        "streamdet": sd,
        "floor": fl,
        "floor_runs": floor_runs,
        "state_bytes": disk,
        "grams": gcount,
        "kept_texts": texts,
        "partials": partials,
        "figures": {
            "pages": n,
            "streamdet_pages_per_s": sd_pps,
            "floor_pages_per_s": floor_pps,
            "ratio": ratio,
            "ratio_cpu": ratio_cpu,  # same, by CPU seconds (less sensitive to other load)
            **bounds,  # the most the ratio could be at this run's CPU (see ceilings)
            # ms of CPU a page by who spent it: the engine's thread (the main thread), the
            # RocksDB threads, the main process's other threads, the analysis processes
            "cpu_ms_per_page": {k: 1e3 * v / n for k, v in parts.items()},
            "floor_cpu_ms_per_page": 1e3 * fl["cpu_seconds"] / n,
            "peak_rss_mb": sd["peak_rss_bytes"] / 2**20,  # the main process alone
            "peak_rss_all_mb": peak_all / 2**20,  # all its processes together
            "memory_budget_mb": budget / 2**20,
            "state_mb": disk["total"] / 1e6,
            "distinct_grams": gcount["distinct_grams"],
            "bytes_per_distinct_gram": bpg,
            # SPEC §5: the kept texts, packed, per document (also in the state on disk)
            "text_bytes_per_page": texts["packed_bytes"] / texts["documents"]
            if texts and texts["documents"] else None,
            # SPEC §7: sentences, sentence postings, partners, pair records, per document
            "partial_bytes_per_page": partials["bytes"] / texts["documents"]
            if partials and texts and texts["documents"] else None,
        },
        "targets": {"ratio": TARGET_RATIO, "ratio_cpu": TARGET_RATIO_CPU,
                    "bytes_per_distinct_gram": TARGET_BYTES_PER_GRAM,
                    "peak_rss_all_mb": (budget + MEMORY_SLACK) / 2**20},
    }
    ok_ratio = ratio >= TARGET_RATIO
    ok_cpu = ratio_cpu >= TARGET_RATIO_CPU
    ok_bytes = bpg <= TARGET_BYTES_PER_GRAM
    ok_memory = peak_all <= budget + MEMORY_SLACK
    result["pass"] = {"ratio": ok_ratio, "ratio_cpu": ok_cpu, "bytes_per_distinct_gram": ok_bytes,
                      "peak_rss_all": ok_memory}

    out = Path(args.out) if args.out else OUT_DIR / (
        f"bench_embedded-{pages}p-{result['at'].replace(':', '').replace('-', '')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    plot_embedded(result, out.with_suffix(".png"))

    def mark(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    print(f"pages                      {n:,} ({gen['bytes'] / 1e6:,.0f} MB of JSONL html)")
    print(f"streamdet ({args.mode:3s})            {sd_pps:8.1f} pages/s  "
          f"({sd['wall_seconds']:.1f} s wall incl. start-up, {sd['cpu_seconds']:.1f} s CPU"
          + (f"; {sd['internal']['pages'] / sd['internal']['seconds']:.1f} pages/s inside the run"
             if sd.get("internal") and sd["internal"].get("seconds") else "") + ")")
    print(f"floor (parse+tok+hash)     {floor_pps:8.1f} pages/s  ({fl['wall_seconds']:.1f} s, "
          f"{fl['cpu_seconds']:.1f} s CPU)")
    print(f"ratio                      {ratio:8.3f}   target >= {TARGET_RATIO}  {mark(ok_ratio)}"
          f"  (by CPU seconds: {ratio_cpu:.3f}, target >= {TARGET_RATIO_CPU} {mark(ok_cpu)})")
    print(f"ratio at most              {bounds['ceiling_main_thread']:8.3f}   at the engine "
          f"thread's CPU ({parts['main thread']:.1f} s; {bounds['ceiling_cores']:.3f} at every "
          f"process's CPU on {os.cpu_count()} cores)")
    figs = result["figures"]
    print("CPU a page                 " + ", ".join(
        f"{k} {ms:.1f} ms" for k, ms in figs["cpu_ms_per_page"].items())
        + f" (floor {figs['floor_cpu_ms_per_page']:.1f} ms)")
    print(f"peak RSS, all processes    {peak_all / 2**20:8.1f} MiB  target <= budget "
          f"{budget / 2**20:,.0f} + {MEMORY_SLACK >> 20} MiB  {mark(ok_memory)}  (main process "
          f"alone {sd['peak_rss_bytes'] / 2**20:,.1f} MiB; {sd['rss_tree']['processes']} "
          "processes)")
    print(f"state on disk              {disk['total'] / 1e6:8.1f} MB  (sst {disk['sst'] / 1e6:.1f},"
          f" wal {disk['wal'] / 1e6:.1f}, other {disk['other'] / 1e6:.1f})")
    gk = f"; grams overlay CF keys {keys['grams_cf_keys']:,}" if keys else ""
    print(f"distinct grams             {gcount['distinct_grams']:,} "
          f"(of {gcount['gram_occurrences']:,} per-page grams{gk})")
    print(f"bytes per distinct gram    {bpg:8.1f}   target <= {TARGET_BYTES_PER_GRAM:g}  "
          f"{mark(ok_bytes)}")
    if texts and texts["documents"]:
        print(f"kept texts                 {texts['packed_bytes'] / texts['documents']:8.0f} B "
              f"a page packed ({texts['text_bytes'] / texts['documents']:,.0f} B of visible "
              f"text; {texts['packed_bytes'] / 1e6:.1f} MB, "
              f"{100 * texts['packed_bytes'] / disk['total']:.1f}% of the state)")
    if partials and texts and texts["documents"]:
        kinds = ", ".join(f"{k} {v['bytes'] / texts['documents']:,.0f}"
                          for k, v in sorted(partials["by_kind"].items()))
        print(f"partial-duplicate state    {partials['bytes'] / texts['documents']:8.0f} B "
              f"a page ({kinds}; {100 * partials['bytes'] / disk['total']:.1f}% of the state "
              "by logical bytes)")
    print(f"events                     {sd['events'] or '-'}; dead letters "
          f"{sd['dead_letters'] or 0}")
    print(f"load average start/end     {load_start[0]:.2f} / {os.getloadavg()[0]:.2f} "
          f"on {os.cpu_count()} CPUs")
    print(f"wrote {out}")
    if args.enforce and not (ok_ratio and ok_cpu and ok_bytes and ok_memory):
        return 1
    return 0


def parse_memory(text: str) -> int:
    """A --memory figure in bytes, as streamdet reads it."""
    from streamdet.state.budget import parse_bytes

    return parse_bytes(text)


def count_lines_by(path: Path, field: str) -> dict:
    counts: dict[str, int] = {}
    if not path.exists():
        return counts
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                v = json.loads(line).get(field, "?")
                counts[v] = counts.get(v, 0) + 1
    return counts


if __name__ == "__main__":
    sys.exit(main())
