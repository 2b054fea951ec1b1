"""Hostile-input benchmark (SPEC §9): what the markup guard and the analysis watchdog
cost on real pages, and how long hostile pages take.

    python -m loadtest.bench_hostile                      # 3,000 pages, 3 pairs, 1 and 10 MB
    python -m loadtest.bench_hostile --pages 20000 --pairs 3
    python -m loadtest.bench_hostile --baseline /path/to/an/older/checkout
    python -m loadtest.bench_hostile --smoke              # CI size

1. Cost. The replayed stream of bench_embedded (real WCXB pages under new names) through
   `streamdet run`, guard on and guard off (STREAMDET_MARKUP_GUARD=off, the same code
   otherwise), in interleaved pairs; the ratio within each pair, the median pair the
   headline (this VM's speed drifts minute to minute). Beside it, the guard's own time,
   analysing the first 1,000 pages with and without it one right after the other, as a
   share of the run's CPU seconds per page. `--baseline DIR` adds a run of
   another checkout (its streamdet on PYTHONPATH) to each round: the cost of the guard
   and the watchdog together against a version without either.
2. Hostile pages. Each shape of tests/test_markup_guard.py, grown to each `--sizes` (MB, up to
   the 10 MB body limit), analysed in a fresh process (validate, guard, parse, tokenize,
   hash: what an analysis process does with a page), timed; the same with the guard off
   at the smallest size, stopped after `--no-guard-timeout` seconds.

Prints a table and writes loadtest/out/bench_hostile-*.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from loadtest.bench_embedded import (
    OUT_DIR,
    generate,
    git_revision,
    log,
    run_child,
    streamdet_command,
)
from loadtest.host import machine, module_command, module_env, vm_speed

TARGET_COST = 0.03  # the guard may cost at most 3% of the embedded throughput
TARGET_SECONDS = 2.0  # a hostile page up to the body limit is analysed within 2 s


def shapes() -> dict[str, tuple[str, str, str]]:
    """name -> (prefix, unit repeated, suffix): each grows linearly with the repeats."""
    return {
        "nested divs": ("", "<div>", "x"),
        "nested divs, closed": ("", "<div>x</div>", ""),  # flat, for contrast
        "unclosed divs with text": ("", "<div>x", ""),
        "formatting with attributes": ("", "<b id=1234567>", "x"),
        "re-created formatting (li)": ("", "<li><b id=1234567>x", ""),
        "formatting closed by a block": ("", "<div><b id=1234567></div>x", ""),
        "ignored end tags": ("", "<div><object></div></object>", "x"),
        "nested tables": ("", "<table><tr><td>", "x"),
        "cells straight in tables": ("", "<table><td>", "x"),
        "svg breakouts": ("<svg>", "<g><div>", ""),
        "attribute flood": ("<div ", "a1234=1 ", ">x"),
        "merged root attributes": ("", "<html a1234=1>", ""),
        "options": ("<select>", "<option>x", ""),
        "text in tables": ("<table>", "x<div>", ""),
    }


def page(shape: str, megabytes: float) -> bytes:
    prefix, unit, suffix = shapes()[shape]
    n = max(1, int(megabytes * 1e6 - len(prefix) - len(suffix)) // len(unit))
    html = prefix + unit * n + suffix
    return json.dumps({"url": "http://hostile.example/p", "html": html}).encode()


def child_analyse(path: str) -> int:
    """--_child-analyse: one page through analysis, timed (imports and the guard's
    compiled code loaded first, untimed)."""
    from streamdet.adapters.payloads import analyze_payloads, warm_up
    from streamdet.engine import markup_guard
    from streamdet.engine.params import Params
    from streamdet.engine.records import DEFAULT_MAX_BODY

    markup_guard.ENABLED = os.environ.get("STREAMDET_MARKUP_GUARD", "on") != "off"
    warm_up(Params(), DEFAULT_MAX_BODY)  # first-call costs, untimed
    payload = Path(path).read_bytes()
    t = time.perf_counter()
    (result,) = analyze_payloads([payload], Params(), DEFAULT_MAX_BODY)
    seconds = time.perf_counter() - t
    outcome = result[0] if isinstance(result, tuple) else f"{len(result.grams)} grams"
    print(json.dumps({"seconds": seconds, "outcome": outcome}))
    return 0


def time_page(shape: str, megabytes: float, guard: bool, timeout: float, work: Path) -> dict:
    path = work / "page.json"
    path.write_bytes(page(shape, megabytes))
    env = module_env(STREAMDET_MARKUP_GUARD="on" if guard else "off")
    cmd = module_command("bench_hostile", "--_child-analyse", str(path))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"seconds": None, "outcome": f"still running after {timeout:g} s (killed)"}
    if proc.returncode != 0:
        return {"seconds": None, "outcome": f"exit {proc.returncode}: {proc.stderr[-300:]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def page_by_page(stream: Path, pages: int) -> dict:
    """The analysis of each of the first `pages` records with the guard and without it,
    one right after the other (order alternating): the guard's own cost, free of the
    minute-to-minute drift of this VM's speed that the end-to-end pairs suffer."""
    from streamdet.adapters.payloads import analyze_payloads, warm_up
    from streamdet.engine import markup_guard
    from streamdet.engine.params import Params
    from streamdet.engine.records import DEFAULT_MAX_BODY

    warm_up(Params(), DEFAULT_MAX_BODY)
    params, spent = Params(), {True: 0.0, False: 0.0}
    with open(stream, "rb") as f:
        records = [line for _, line in zip(range(pages), f, strict=False)]
    for i, raw in enumerate(records):
        for guard in ((True, False) if i % 2 else (False, True)):
            markup_guard.ENABLED = guard
            t = time.perf_counter()
            analyze_payloads([raw], params, DEFAULT_MAX_BODY)
            spent[guard] += time.perf_counter() - t
    markup_guard.ENABLED = True
    n = len(records)
    return {"pages": n, "analysis_ms_guard_on": 1e3 * spent[True] / n,
            "analysis_ms_guard_off": 1e3 * spent[False] / n,
            "guard_ms": 1e3 * (spent[True] - spent[False]) / n}


def cost(pages: int, pairs: int, baseline: str | None, work: Path) -> dict:
    stream = work / "stream.jsonl"
    log(f"generating {pages:,} replayed pages")
    gen = generate(stream, pages, seed=1, vary=0.9)
    rounds = []
    variants = [("guard on", {}), ("guard off", {"STREAMDET_MARKUP_GUARD": "off"})]
    if baseline:
        variants.append(("baseline", {"PYTHONPATH": baseline}))
    for r in range(pairs):
        row = {"vm_speed_s": vm_speed()}
        order = variants if r % 2 == 0 else variants[::-1]
        for name, extra in order:
            state = work / "state"
            shutil.rmtree(state, ignore_errors=True)
            cmd = streamdet_command("cli", stream, state, work / "events.jsonl",
                                    work / "dead.jsonl", None)
            if name == "baseline":
                cmd = [sys.executable, "-m", "streamdet", *cmd[cmd.index("run"):]]
            for p in (work / "events.jsonl", work / "dead.jsonl"):
                p.unlink(missing_ok=True)
            res = _run_with(cmd, work, extra)
            row[name] = {"pages_per_s": pages / res["wall_seconds"], **{
                k: res[k] for k in ("wall_seconds", "cpu_seconds", "peak_rss_bytes")}}
            log(f"round {r + 1}: {name}: {row[name]['pages_per_s']:.1f} pages/s")
        row["guard_ratio"] = row["guard on"]["pages_per_s"] / row["guard off"]["pages_per_s"]
        if baseline:
            row["baseline_ratio"] = (row["guard on"]["pages_per_s"]
                                     / row["baseline"]["pages_per_s"])
        rounds.append(row)
    shutil.rmtree(work / "state", ignore_errors=True)
    median = statistics.median(r["guard_ratio"] for r in rounds)
    direct = page_by_page(stream, min(pages, 1000))
    # the guard's CPU per page as a share of the whole run's CPU per page (guard off)
    run_ms = statistics.median(1e3 * r["guard off"]["cpu_seconds"] / pages for r in rounds)
    out = {"pages": pages, "stream_bytes": gen["bytes"], "rounds": rounds,
           "guard_ratio_median": median, "guard_cost": 1 - median, "page_by_page": direct,
           "run_cpu_ms_per_page": run_ms, "cpu_share": direct["guard_ms"] / run_ms}
    if baseline:
        out["baseline"] = baseline
        out["baseline_ratio_median"] = statistics.median(r["baseline_ratio"] for r in rounds)
    return out


def _run_with(cmd: list[str], work: Path, extra: dict) -> dict:
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        return run_child(cmd, work, "streamdet")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=3000, help="pages of the cost runs")
    ap.add_argument("--pairs", type=int, default=3, help="guard on/off pairs (default 3)")
    ap.add_argument("--baseline", metavar="DIR", help="a checkout to run beside, for the cost "
                    "of guard and watchdog together")
    ap.add_argument("--sizes", default="1,10", help="hostile page sizes in MB (default 1,10)")
    ap.add_argument("--no-guard-timeout", type=float, default=60.0, metavar="S")
    ap.add_argument("--smoke", action="store_true", help="CI size: 100 pages, 1 pair, 0.1 MB")
    ap.add_argument("--out", help="result JSON (default loadtest/out/bench_hostile-*.json)")
    ap.add_argument("--_child-analyse", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._child_analyse:
        return child_analyse(args._child_analyse)
    pages, pairs = (100, 1) if args.smoke else (args.pages, args.pairs)
    sizes = [0.1] if args.smoke else [float(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="streamdet-hostile-"))
    try:
        result = {"benchmark": "bench_hostile",
                  "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                  "git": git_revision(), "host": machine(),
                  "config": {"pages": pages, "pairs": pairs, "sizes_mb": sizes},
                  "cost": cost(pages, pairs, args.baseline, work), "hostile": []}
        for shape in shapes():
            row = {"shape": shape}
            for mb in sizes:
                row[f"{mb:g} MB"] = time_page(shape, mb, True, 120, work)
            row["no guard"] = time_page(shape, min(sizes), False, args.no_guard_timeout, work)
            result["hostile"].append(row)
            log(f"{shape}: " + ", ".join(
                f"{k} {v['seconds'] if v['seconds'] is None else round(v['seconds'], 3)}"
                for k, v in row.items() if k != "shape"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    largest = f"{max(sizes):g} MB"
    worst = max((r[largest]["seconds"] or float("inf")) for r in result["hostile"])
    result["figures"] = {"guard_cost": result["cost"]["guard_cost"],
                         "worst_hostile_seconds": worst}
    result["pass"] = {"guard_cost": result["cost"]["guard_cost"] <= TARGET_COST,
                      "hostile_seconds": worst <= TARGET_SECONDS}
    out = Path(args.out) if args.out else OUT_DIR / (
        f"bench_hostile-{pages}p-{result['at'].replace(':', '').replace('-', '')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    report(result, out)
    return 0


def report(result: dict, out: Path) -> None:
    c = result["cost"]
    print(f"cost of the markup guard on {c['pages']:,} real pages ({c['stream_bytes'] / 1e6:,.0f} "
          "MB), streamdet run, pages/s:")
    for i, r in enumerate(c["rounds"], 1):
        base = (f", baseline {r['baseline']['pages_per_s']:.1f} (ratio "
                f"{r['baseline_ratio']:.3f})" if "baseline" in r else "")
        print(f"  round {i}: guard on {r['guard on']['pages_per_s']:.1f}, off "
              f"{r['guard off']['pages_per_s']:.1f} (ratio {r['guard_ratio']:.3f}){base}  "
              f"[vm speed {r['vm_speed_s']} s]")
    mark = "ok" if result["pass"]["guard_cost"] else "MISSED"
    d = c["page_by_page"]
    print(f"  median pair: the guard costs {100 * c['guard_cost']:.1f}% of the throughput "
          f"(target <= {100 * TARGET_COST:g}%)  {mark}")
    print(f"  page by page on {d['pages']:,} pages: analysis {d['analysis_ms_guard_off']:.2f} ms "
          f"without the guard, {d['analysis_ms_guard_on']:.2f} with it: the guard "
          f"{d['guard_ms']:.3f} ms of {c['run_cpu_ms_per_page']:.2f} CPU ms per page of the run "
          f"= {100 * c['cpu_share']:.1f}% of its CPU (the analysis process runs beside the "
          "engine, so less of the wall time)")
    if "baseline_ratio_median" in c:
        print(f"  against the baseline {c['baseline']}: ratio "
              f"{c['baseline_ratio_median']:.3f} (guard and watchdog together)")
    sizes = [k for k in result["hostile"][0] if k.endswith("MB")]
    print("hostile pages, analysis seconds (guard on" + ", ".join([""] + sizes) + "; no guard "
          f"at {sizes[0]}):")
    for r in result["hostile"]:
        cells = [_cell(r[s]) for s in sizes] + [_cell(r["no guard"])]
        print(f"  {r['shape']:30s} " + "  ".join(f"{c:>12s}" for c in cells))
    mark = "ok" if result["pass"]["hostile_seconds"] else "MISSED"
    print(f"  worst at {sizes[-1]}: {result['figures']['worst_hostile_seconds']:.2f} s "
          f"(target <= {TARGET_SECONDS:g} s)  {mark}")
    print(f"wrote {out}")


def _cell(v: dict) -> str:
    return f"{v['seconds']:.3f}" if v["seconds"] is not None else "> timeout"


if __name__ == "__main__":
    sys.exit(main())
