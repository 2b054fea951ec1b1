"""Review desk benchmark: how fast `streamdet review` answers a reviewer on a big state.

    python -m loadtest.bench_review --pages 100000          # builds the state first
    python -m loadtest.bench_review --state S --events E    # a state `streamdet run` made
    python -m loadtest.bench_review --smoke                 # 400 pages, for CI

1. State (not timed here): the load generator's stream (loadtest/generator.py) through
   `streamdet run --state S --events E`, or a state and events file given.
2. The desk: `streamdet review --state S --events E` as a subprocess on a free port; the
   seconds from its start until it answers (the events file folded into its view).
3. Requests over HTTP (httpx, a bearer token; one request at a time), each timed from
   send to last byte:
   - lists of 50 rows (`/quilts`, HTML, and `/api/quilts`): the first page, with a domain
     filter, with the label filter `unlabelled`, and a page deep in the list;
   - page views (`/page`, HTML with the marked text, and `/api/page`) of `--views`
     quilts drawn uniformly (seeded), each asked twice: cold (the first ask) and warm;
   - `/sites`, `/clusters`, `/precision`;
   - label writes (`POST /api/labels`, each committed to SQLite with synchronous=FULL).
   Median, p95 and max of each; the target (issue 19): a page view and a 50-row list
   answer in < 200 ms on a state of 100 k documents, judged on p95.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from loadtest.bench_embedded import git_revision
from loadtest.host import machine, write_result

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "loadtest" / "out"
TARGET_MS = 200.0
TOKEN = "bench-review-token-0123456789"
STREAMDET = [sys.executable, "-m", "streamdet"]


def log(msg: str) -> None:
    print(f"[bench-review {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build(pages: int, seed: int, where: Path) -> tuple[Path, Path, float]:
    """The generator's stream through `streamdet run`: (state, events, run seconds)."""
    from loadtest.corpus import write_jsonl
    from loadtest.generator import Generator, GeneratorConfig

    stream = where / "stream.jsonl"
    write_jsonl(Generator(GeneratorConfig(seed=seed, pages=pages)), stream)
    state, events = where / "state", where / "events.jsonl"
    t = time.perf_counter()
    subprocess.run([*STREAMDET, "run", "--input", str(stream), "--state", str(state),
                    "--events", str(events)], check=True, stderr=subprocess.DEVNULL)
    return state, events, time.perf_counter() - t


def serve(state: Path, events: Path, desk: Path) -> tuple[subprocess.Popen, str, float]:
    """`streamdet review` on a free port: (process, base URL, seconds until it answers)."""
    t = time.perf_counter()
    proc = subprocess.Popen([*STREAMDET, "review", "--state", str(state), "--events",
                             str(events), "--desk", str(desk), "--bind", "127.0.0.1:0"],
                            stderr=subprocess.PIPE,
                            env={**os.environ, "STREAMDET_REVIEW_TOKEN": TOKEN})
    for raw in proc.stderr:
        found = re.search(r"review desk on (http://127\.0\.0\.1:\d+)/", raw.decode())
        if found:
            return proc, found.group(1), time.perf_counter() - t
    raise RuntimeError(f"streamdet review did not start (exit {proc.wait()})")


def timed(client, method: str, path: str, **kw) -> float:
    t = time.perf_counter()
    r = client.request(method, path, **kw)
    ms = 1000 * (time.perf_counter() - t)
    if r.status_code != 200:
        raise RuntimeError(f"{method} {path}: {r.status_code} {r.text[:200]}")
    return ms


def stats(ms: list[float]) -> dict:
    ordered = sorted(ms)
    return {"n": len(ms), "median_ms": statistics.median(ordered),
            "p95_ms": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
            "max_ms": ordered[-1]}


def measure(client, views: int, repeats: int, seed: int) -> dict:
    """Every request kind, timed; the lists asked `repeats` times each."""
    first = client.get("/api/quilts", params={"limit": 1000}).json()
    quilts = [r["url"] for r in first["rows"]]
    total = first["total"]
    if not quilts:
        raise RuntimeError("the desk lists no quilt: nothing to view")
    domain = client.get("/api/page", params={"url": quilts[0]}).json()["page"]["sites"][-1][
        "site"]
    deep = max(total - 50, 0)
    lists = {
        "first": {}, "domain": {"domain": domain}, "unlabelled": {"label": "unlabelled"},
        "deep": {"offset": deep}}
    out: dict[str, dict] = {}
    for name, params in lists.items():
        for kind, path in (("html", "/quilts"), ("api", "/api/quilts")):
            out[f"list_{name}_{kind}"] = stats([timed(client, "GET", path, params=params)
                                                for _ in range(repeats)])
    chosen = random.Random(seed).sample(quilts, min(views, len(quilts)))
    for kind, path in (("html", "/page"), ("api", "/api/page")):
        cold, warm = [], []
        for url in chosen:
            cold.append(timed(client, "GET", f"{path}?url={quote(url, safe='')}"))
            warm.append(timed(client, "GET", f"{path}?url={quote(url, safe='')}"))
        out[f"page_{kind}_first"], out[f"page_{kind}_again"] = stats(cold), stats(warm)
    for name in ("sites", "clusters", "precision"):
        out[name] = stats([timed(client, "GET", f"/{name}") for _ in range(repeats)])
    out["label_write"] = stats([timed(client, "POST", "/api/labels", json={
        "url": url, "verdict": "spam", "note": "bench"}) for url in chosen])
    return {"requests": out, "quilts": total}


def main(argv: list[str] | None = None) -> int:
    import httpx

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=100_000, help="pages to build (default 100000)")
    ap.add_argument("--state", help="a state `streamdet run` made (with --events): no build")
    ap.add_argument("--events", help="that run's events file")
    ap.add_argument("--views", type=int, default=100, help="quilts viewed (default 100)")
    ap.add_argument("--repeats", type=int, default=20, help="asks of each list (default 20)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--smoke", action="store_true", help="400 pages, few requests (CI)")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if args.smoke:
        args.pages, args.views, args.repeats = 400, 5, 3
    if (args.state is None) != (args.events is None):
        ap.error("give --state and --events together")
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="streamdet-review-bench-") as tmp:
        run_s = None
        if args.state:
            state, events = Path(args.state), Path(args.events)
        else:
            log(f"building a state of {args.pages:,} pages (generator, streamdet run)")
            state, events, run_s = build(args.pages, args.seed, Path(tmp))
        with open(events, "rb") as f:
            n_events = sum(1 for _ in f)
        proc, base, start_s = serve(state, events, Path(tmp) / "desk")
        log(f"desk answering after {start_s:.1f} s at {base}")
        try:
            with httpx.Client(base_url=base, timeout=120,
                              headers={"Authorization": f"Bearer {TOKEN}"}) as client:
                found = measure(client, args.views, args.repeats, args.seed)
                status = client.get("/api/status").json()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        documents = _documents(state)
    req = found["requests"]
    worst_page = max(req["page_html_first"]["p95_ms"], req["page_api_first"]["p95_ms"])
    worst_list = max(v["p95_ms"] for k, v in req.items() if k.startswith("list_"))
    result = {
        "benchmark": "bench_review",
        "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git": git_revision(),
        "host": machine() | {"loadavg_start": load_start, "loadavg_end": os.getloadavg()},
        "config": {"pages": args.pages if run_s is not None else None, "views": args.views,
                   "repeats": args.repeats, "seed": args.seed, "state": str(state)},
        "build_seconds": run_s,
        "desk_start_seconds": start_s,
        "events": n_events,
        "status": status,
        "requests": req,
        "figures": {"documents": documents, "quilts": found["quilts"],
                    "desk_start_seconds": start_s,
                    "page_view_p95_ms": worst_page, "list_p95_ms": worst_list,
                    "label_write_p95_ms": req["label_write"]["p95_ms"]},
        "target": {"ms": TARGET_MS, "documents": 100_000},
        "pass": worst_page < TARGET_MS and worst_list < TARGET_MS,
    }
    path = write_result(result, OUT_DIR, f"{documents}d", args.out)
    for name, s in req.items():
        print(f"{name:24s} median {s['median_ms']:7.1f} ms  p95 {s['p95_ms']:7.1f} ms  "
              f"max {s['max_ms']:7.1f} ms  (n={s['n']})")
    print(f"documents {documents:,}, quilts {found['quilts']:,}, desk start {start_s:.1f} s; "
          f"page view p95 {worst_page:.1f} ms, list p95 {worst_list:.1f} ms (target < "
          f"{TARGET_MS:.0f} ms): {'PASS' if result['pass'] else 'MISS'}")
    print(f"load average start/end {load_start[0]:.2f} / {os.getloadavg()[0]:.2f}")
    print(f"result: {path}")
    return 0


def _documents(state: Path) -> int:
    """The live documents of the state (its URL table)."""
    from streamdet.state.rocks import RocksKV

    kv = RocksKV(str(state), read_only=True, tables=("urls",))
    try:
        return sum(1 for _ in kv.items("urls"))
    finally:
        kv.close()


if __name__ == "__main__":
    sys.exit(main())
