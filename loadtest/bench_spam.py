"""Spam ranking benchmark (SPEC §10): how well `streamdet rank` tells farm pages from
natural reuse, blind and with reviewers' labels.

    python -m loadtest.bench_spam                       # seed 1, ~1,240 pages
    python -m loadtest.bench_spam --seed 2 --draws 10
    python -m loadtest.bench_spam --smoke               # ~240 pages from tests/data, for CI

1. Corpus (loadtest/spam_corpus.py): real texts of shared/data as a crawl, four farm
   generators (160 pages) and seven kinds of natural reuse, in a seeded arrival order.
   --smoke builds a small one (spam_corpus.SMOKE) from tests/data's slice of the texts,
   so that the benchmark runs end to end without shared/data; its figures say nothing.
2. `streamdet run` over it (a child process, timed: the engine's seconds).
3. The ranking read from the state (streamdet.ranking, timed: its cost against the
   engine's), then judged against the planted truth. Precision and recall are those of
   `spam` against every farm page of the corpus (a farm page the definition does not
   rank counts as missed); precision at 100 is the farm share of the 100 first pages.
4. Labels: a reviewer judges n ranked pages (n = 10, 20, 50, 200), truthfully, drawn
   three ways: `uniform` (a seeded uniform draw of the ranked pages, repeated --draws
   times with other seeds; the figures are the means), `top` (the n highest blind
   scores, what a desk ordered by score shows first) and `uncertain` (the n blind scores
   nearest the threshold, what a desk would show to learn fastest). Each is reported
   over all pages (what the spam team gets: a labelled page is decided by its label) and
   over the unlabelled pages only (what the labels taught the model).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from loadtest.bench_embedded import git_revision
from loadtest.corpus import write_jsonl
from loadtest.host import machine, module_command, module_env, write_result
from loadtest.spam_corpus import FULL, SMOKE, spam_corpus
from streamdet.ranking.model import THRESHOLD
from streamdet.ranking.rank import Ranked, ranking
from streamdet.ranking.reading import corpus_of
from streamdet.reading.states import open_store

REPO = Path(__file__).resolve().parents[1]
OUT_DIR = REPO / "loadtest" / "out"
SMOKE_DATA = REPO / "tests" / "data"  # the slice of the texts --smoke reads
SMOKE_DRAWS = 2
LABELS = (10, 20, 50, 200)
TOP = 100


def judged(rows: list[Ranked], farm: set[str], skip: set[str] = frozenset()) -> dict:
    """Precision and recall of `spam` against the farm pages not in `skip`."""
    rows = [r for r in rows if r.url not in skip]
    truth = farm - skip
    flagged = {r.url for r in rows if r.spam}
    hit = len(flagged & truth)
    return {"flagged": len(flagged), "farm": len(truth),
            "precision": hit / len(flagged) if flagged else None,
            "recall": hit / len(truth) if truth else None}


def precision_at(rows: list[Ranked], farm: set[str], n: int = TOP) -> float:
    return sum(r.url in farm for r in rows[:n]) / min(n, len(rows)) if rows else 0.0


def informed(corpus, farm: set[str], labelled: list[str]) -> dict:
    verdicts = {u: "spam" if u in farm else "not_spam" for u in labelled}
    rows = ranking(corpus, verdicts)
    return {"all": judged(rows, farm), "unlabelled": judged(rows, farm, set(labelled)),
            "precision_at_100": precision_at(rows, farm)}


def mean_of(runs: list[dict]) -> dict:
    """The mean of each figure over draws (None where some draw has none)."""
    out: dict = {}
    for key, value in runs[0].items():
        if isinstance(value, dict):
            out[key] = mean_of([r[key] for r in runs])
        else:
            vals = [r[key] for r in runs]
            out[key] = None if None in vals else statistics.fmean(vals)
    return out


def build_state(records: list[dict], work: Path) -> float:
    """The state of `streamdet run` over the records; the run's seconds."""
    path = work / "corpus.jsonl"
    write_jsonl(records, path)
    t0 = time.perf_counter()
    subprocess.run(module_command("bench_spam", "--_child-run", str(path), str(work / "state")),
                   check=True, env=module_env())
    return time.perf_counter() - t0


def child_run(path: str, state: str) -> int:
    """`streamdet run` over the corpus at `path` into `state`, in this (child) process."""
    from streamdet.cli import main as streamdet

    return streamdet(["run", "--input", path, "--state", state, "--events", os.devnull])


def plot(result: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [0, *LABELS]
    fig, ax = plt.subplots(figsize=(6, 4))
    for policy in ("uniform", "top", "uncertain"):
        for figure, style in (("precision", "-"), ("recall", "--")):
            ys = [result["blind"][figure]] + [
                result["labels"][policy][str(n)]["all"][figure] for n in LABELS]
            ax.plot(ns, ys, style, marker="o", label=f"{figure}, {policy} labels")
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlabel("labels")
    ax.set_ylim(0, 1.02)
    ax.set_title("spam: precision and recall of every farm page, by labels")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--draws", type=int, default=5, help="uniform label draws (default 5)")
    ap.add_argument("--out", help="result JSON (default loadtest/out/bench_spam-...json)")
    ap.add_argument("--smoke", action="store_true",
                    help=f"a small corpus from tests/data, {SMOKE_DRAWS} draws (CI)")
    ap.add_argument("--_child-run", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._child_run:
        return child_run(*args._child_run)
    if args.smoke:
        args.draws = min(args.draws, SMOKE_DRAWS)
    c = spam_corpus(args.seed, SMOKE if args.smoke else FULL,
                    SMOKE_DATA if args.smoke else None)
    with tempfile.TemporaryDirectory(prefix="bench-spam-") as tmp:
        engine_s = build_state(c.records, Path(tmp))
        t0 = time.perf_counter()
        store = open_store(str(Path(tmp) / "state"), must_exist=True, read_only=True)
        try:
            corpus = corpus_of(store)
        finally:
            store.close()
        read_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    blind_rows = ranking(corpus)
    score_s = time.perf_counter() - t0
    ranked = [r.url for r in blind_rows]
    labels: dict = {"uniform": {}, "top": {}, "uncertain": {}}
    doubt = [r.url for r in sorted(blind_rows, key=lambda r: (abs(r.score - THRESHOLD),
                                                               r.url))]
    for n in LABELS:
        draws = [informed(corpus, c.farm, random.Random(args.seed * 1000 + d).sample(
            ranked, min(n, len(ranked)))) for d in range(args.draws)]
        labels["uniform"][str(n)] = mean_of(draws)
        labels["top"][str(n)] = informed(corpus, c.farm, ranked[:n])
        labels["uncertain"][str(n)] = informed(corpus, c.farm, doubt[:n])
    kinds = sorted(set(c.kinds.values()))
    result = {
        "benchmark": "bench_spam",
        "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": machine(),
        "git": git_revision(),
        "config": {"seed": args.seed, "records": len(c.records), "farm_pages": len(c.farm),
                   "draws": args.draws, "smoke": args.smoke},
        "ranked": len(ranked),
        "farm_ranked": len(c.farm & set(ranked)),
        "ranked_by_kind": {k: sum(c.kinds[u] == k for u in ranked) for k in kinds},
        "flagged_by_kind": {k: sum(c.kinds[r.url] == k and r.spam for r in blind_rows)
                            for k in kinds},
        "blind": {**judged(blind_rows, c.farm),
                  "precision_at_100": precision_at(blind_rows, c.farm)},
        "labels": labels,
        "seconds": {"engine_run": engine_s, "rank_read_state": read_s, "rank_score": score_s,
                    "rank_share_of_engine": (read_s + score_s) / engine_s},
        "targets": {"blind": "precision >= 0.8 at recall >= 0.8",
                    "labels_20": "precision >= 0.9 and recall >= 0.9 on the unlabelled "
                                 "pages, uniform draws"},
    }
    twenty = labels["uniform"]["20"]["unlabelled"]
    result["pass"] = {"blind": _reaches(result["blind"], 0.8),
                      "labels_20": _reaches(twenty, 0.9)}
    out = write_result(result, OUT_DIR, f"{len(c.records)}p", args.out)
    plot(result, out.with_suffix(".png"))
    _print(result)
    print(f"result: {out}", file=sys.stderr)
    return 0


def _reaches(f: dict, bar: float) -> bool:
    return (f["precision"] or 0.0) >= bar and (f["recall"] or 0.0) >= bar


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _print(r: dict) -> None:
    b = r["blind"]
    print(f"corpus: {r['config']['records']} records, {r['config']['farm_pages']} farm "
          f"pages; {r['ranked']} ranked (quilted or partial duplicates), {r['farm_ranked']} "
          "of them farm pages (the most recall can be)")
    print(f"blind: precision {_fmt(b['precision'])} recall {_fmt(b['recall'])} "
          f"(flagged {b['flagged']}); precision@100 {_fmt(b['precision_at_100'])}")
    for policy, by_n in r["labels"].items():
        for n, f in by_n.items():
            a, u = f["all"], f["unlabelled"]
            print(f"{policy:9} {n:>3} labels: all pages P {_fmt(a['precision'])} "
                  f"R {_fmt(a['recall'])}; unlabelled P {_fmt(u['precision'])} "
                  f"R {_fmt(u['recall'])}; precision@100 {_fmt(f['precision_at_100'])}")
    s = r["seconds"]
    print(f"engine {s['engine_run']:.1f} s; ranking {s['rank_read_state']:.2f} s reading the "
          f"state + {s['rank_score']:.2f} s scoring = {s['rank_share_of_engine']:.1%} of "
          "the engine's run")
    print("flagged by kind:", json.dumps(r["flagged_by_kind"]))
    print(f"targets: blind {'met' if r['pass']['blind'] else 'NOT met'}, 20 labels "
          f"{'met' if r['pass']['labels_20'] else 'NOT met'}")


if __name__ == "__main__":
    sys.exit(main())
