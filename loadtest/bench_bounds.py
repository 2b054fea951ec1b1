"""Bounded engine work (SPEC §9): each role's worst shapes, grown, and what a step costs.

    python -m loadtest.bench_bounds                 # sizes 2,500 to 20,000 (4 doublings)
    python -m loadtest.bench_bounds --sizes 5000 10000 20000 40000
    python -m loadtest.bench_bounds --smoke         # CI size

Each shape is a set of records built to make one role's work grow faster than the
records (repeats, alternations, many sources, a tally's holders, a cluster's id, deep
paths), at each size `n`. In a fresh child process per (shape, size) the records are
analysed first (untimed: the analysis is bounded by the watchdog, SPEC §9 "Bounded
analysis"), then applied in their batches by the embedded engine on a RocksDB state,
each batch timed with its commit: the engine's seconds in all, its slowest step, the
child's peak RSS, and the input's size. Per doubling of `n`, `growth` is the ratio of
engine seconds per input byte: ~1 is linear, ~2 quadratic.

Prints a table and writes loadtest/out/bench_bounds-*.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from loadtest.bench_embedded import git_revision
from loadtest.host import machine, module_command, module_env, write_result

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "loadtest" / "out"
SIZES = (2500, 5000, 10000, 20000)
SMOKE_SIZES = (100, 200)
TARGET_GROWTH = 1.5  # per doubling: engine seconds a byte may grow this much at most

Records = list[dict]
Shape = Callable[[int], tuple[Records, list[int]]]  # n -> records, batch sizes


def log(msg: str) -> None:
    print(f"[bench-bounds {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _sentence(i: int) -> str:
    return f"sentence number {i} of the hostile page here. "


def _words(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}x" for i in range(n)]


def _page(host: str, text: str, path: str = "p") -> dict:
    return {"url": f"http://{host}.example/{path}", "text": text}


def one_sentence_pair(n: int) -> tuple[Records, list[int]]:
    """Sentences: two pages on two domains, each one sentence repeated n times."""
    return [_page("a", _sentence(0) * n), _page("b", _sentence(0) * n)], [2]


def alternation_pair(n: int) -> tuple[Records, list[int]]:
    """Sentences: two pages alternating two sentences, n in all."""
    text = "".join(_sentence(i % 2) for i in range(n))
    return [_page("a", text), _page("b", text)], [2]


def blocks_pair(n: int) -> tuple[Records, list[int]]:
    """Sentences: (A B) repeated against ((A B)^3 C) repeated: copy against copy, a
    quadratic number of maximal diagonals."""
    a = "".join(_sentence(i % 2) for i in range(n))
    unit = "".join(_sentence(i % 2) for i in range(6)) + _sentence(2)
    return [_page("a", a), _page("b", unit * (n // 7))], [2]


def one_gram_pair(n: int) -> tuple[Records, list[int]]:
    """Grams: two pages of one word repeated n times (every window the same gram)."""
    return [_page("a", "spam " * n), _page("b", "spam " * n)], [2]


def one_paragraph_many(n: int) -> tuple[Records, list[int]]:
    """Chunks: 40 pages on 40 domains, each one paragraph repeated n / 10 times."""
    text = "\n".join(["the same paragraph of every one of these pages"] * (n // 10))
    return [_page(f"h{i}", text) for i in range(40)], [40]


def many_sources(n: int) -> tuple[Records, list[int]]:
    """Cover: a page of n distinct words, then n / 12 pages on their own domains each
    sharing a 10-word slice of it (every one a source of the first), 64 a batch."""
    words = _words("w", n)
    slices = [_page(f"s{j}", " ".join(words[o:o + 10]))
              for j, o in enumerate(range(0, n - 10, 12))]
    records = [_page("big", " ".join(words)), *slices]
    batches = [1] + [64] * (len(slices) // 64) + ([len(slices) % 64] if len(slices) % 64 else [])
    return records, batches


def pairwise_sources(n: int) -> tuple[Records, list[int]]:
    """Cover: N pages (N² / 2 ~ n / 20 blocks), and a last page holding a 20-word block
    for every pair of them, each block shared by its two: every greedy step lowers every
    other source's gain."""
    pages = max(4, int((n / 10) ** 0.5))
    blocks: dict[int, list[str]] = {i: [] for i in range(pages)}
    big = []
    for i in range(pages):
        for j in range(i + 1, pages):
            block = " ".join(f"b{i}y{j}z{t}" for t in range(20))
            blocks[i].append(block)
            blocks[j].append(block)
            big.append(block + " sep" + f"{i}q{j}")
    records = [_page(f"p{i}", " . ".join(blocks[i])) for i in range(pages)]
    records.append(_page("big", " ".join(big)))
    return records, [pages, 1]


def tally_withdrawal(n: int) -> tuple[Records, list[int]]:
    """Popular phrases: 55 copies of an n-word passage (every gram common), then 51 of
    them re-fetched with new text, one a batch: the last ones take every gram below P."""
    passage = " ".join(_words("t", n))
    records = [_page(f"c{i:03d}", passage) for i in range(55)]
    records += [_page(f"c{i:03d}", f"fresh page {i} with its own words") for i in range(51)]
    return records, [55] + [1] * 51


def cluster_id_refetch(n: int) -> tuple[Records, list[int]]:
    """Clusters: n / 50 exact duplicates on their own domains, then the one holding the
    cluster's id (the smallest URL) re-fetched 20 times with the same text."""
    text = " ".join(_words("d", 200))
    count = max(4, n // 50)
    records = [_page(f"m{i:06d}", text) for i in range(count)]
    records += [records[0]] * 20
    return records, [count] + [1] * 20


def deep_path(n: int) -> tuple[Records, list[int]]:
    """Neighbourhoods: two pages whose URLs have n / 10 directories."""
    path = "/".join(f"d{i}" for i in range(n // 10)) + "/p"
    return [_page("a", "page one of the deep site", path),
            _page("a", "page two of the deep site", path + "2")], [2]


SHAPES: dict[str, Shape] = {
    "sentences: one sentence, a pair": one_sentence_pair,
    "sentences: alternation, a pair": alternation_pair,
    "sentences: blocks of repeats, a pair": blocks_pair,
    "grams: one word repeated, a pair": one_gram_pair,
    "chunks: one paragraph repeated, 40 pages": one_paragraph_many,
    "cover: many sources of one page": many_sources,
    "cover: pairwise sources": pairwise_sources,
    "popular: a passage's tally below P": tally_withdrawal,
    "clusters: the id holder re-fetched": cluster_id_refetch,
    "neighbourhoods: a deep path": deep_path,
}


def child(shape: str, n: int, state: str) -> int:
    """One (shape, size) in this process: analyse, then apply and time the batches."""
    from streamdet.engine.analysis import analyze
    from streamdet.engine.core import Engine
    from streamdet.engine.params import Params
    from streamdet.engine.records import page_from_object
    from streamdet.state.rocks import RocksKV
    from streamdet.state.txn import Store

    records, batches = SHAPES[shape](n)
    params = Params()
    pages = [analyze(page_from_object(r), params) for r in records]
    store, engine = Store(RocksKV(state)), Engine(params)
    steps, at = [], 0
    cpu0 = time.process_time()
    for size in batches:
        t = time.process_time()
        txn = store.begin()
        engine.process(txn, pages[at:at + size])
        txn.commit({})
        steps.append(time.process_time() - t)
        at += size
    engine_cpu = time.process_time() - cpu0
    store.close()
    print(json.dumps({"engine_s": engine_cpu, "worst_step_s": max(steps), "steps": len(steps),
                      "input_bytes": sum(len(json.dumps(r)) for r in records),
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
    return 0


def measure(shape: str, n: int, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-bounds-") as tmp:
        cmd = module_command("bench_bounds", "--child", shape, str(n), str(Path(tmp) / "state"))
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  env=module_env())
        except subprocess.TimeoutExpired:
            return {"n": n, "timeout": timeout}
        if done.returncode != 0:
            return {"n": n, "error": done.stderr.strip().splitlines()[-1:]}
        return {"n": n, **json.loads(done.stdout.strip().splitlines()[-1])}


def growth(rows: list[dict]) -> None:
    """Per doubling: engine seconds a byte, against the size before."""
    for before, row in zip(rows, rows[1:], strict=False):
        if "engine_s" in before and "engine_s" in row and before["engine_s"] > 0:
            a = before["engine_s"] / before["input_bytes"]
            b = row["engine_s"] / row["input_bytes"]
            row["growth"] = round(b / a, 2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--smoke", action="store_true", help="CI size")
    ap.add_argument("--shape", action="append", choices=list(SHAPES),
                    help="only this shape (repeatable)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds a (shape, size)")
    ap.add_argument("--out", help="result JSON (default loadtest/out/bench_bounds-*.json)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        shape, n, state = args.child
        return child(shape, int(n), state)
    sizes = list(SMOKE_SIZES) if args.smoke else args.sizes
    result = {"benchmark": "bench_bounds", "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
              "command": " ".join(["python", "-m", "loadtest.bench_bounds",
                                   *(argv or sys.argv[1:])]),
              "git": git_revision(), "host": machine(), "sizes": sizes, "shapes": {}}
    for shape in args.shape or SHAPES:
        rows = []
        for n in sizes:
            log(f"{shape}, n = {n:,}")
            rows.append(measure(shape, n, args.timeout))
        growth(rows)
        result["shapes"][shape] = rows
    report(result)
    path = write_result(result, OUT_DIR, f"{sizes[-1]}n", args.out)
    print(f"wrote {path}")
    return 0


def report(result: dict) -> None:
    print(f"{'shape':44} {'n':>7} {'input MB':>9} {'engine s':>9} {'worst step':>10} "
          f"{'peak MB':>8} {'growth':>7}")
    for shape, rows in result["shapes"].items():
        for row in rows:
            if "engine_s" not in row:
                print(f"{shape:44} {row['n']:>7,} {row.get('timeout') or row.get('error')}")
                continue
            g = row.get("growth")
            print(f"{shape:44} {row['n']:>7,} {row['input_bytes'] / 1e6:>9.2f} "
                  f"{row['engine_s']:>9.3f} {row['worst_step_s']:>10.3f} "
                  f"{row['peak_rss_mb']:>8.0f} {'' if g is None else f'{g:>7.2f}'}")
    worst = max((r.get("growth", 0) for rows in result["shapes"].values() for r in rows),
                default=0)
    print(f"largest growth per doubling {worst:.2f} (target <= {TARGET_GROWTH}: linear "
          f"is 1, quadratic 2)")


if __name__ == "__main__":
    raise SystemExit(main())
