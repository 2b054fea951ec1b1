"""Where the CPU seconds of `streamdet run` go: py-spy samples every process of a run
(the analysis process included) and this groups the samples into a table.

    python -m loadtest.profile_run --stream STREAM.jsonl            # profile a run
    python -m loadtest.profile_run --raw PROFILE.txt                # table of a profile taken
    python -m loadtest.profile_run --raw PROFILE.txt --under Txn.commit --callers RocksKV.get_many

A stream comes from `python -m loadtest.bench_embedded --workdir DIR --keep`
(DIR/stream.jsonl). py-spy (`pip install -e .[bench]`) samples 50 times a second; idle
samples are not taken, so samples / rate are CPU seconds. Each sample is charged to a
*part*: the innermost frame of streamdet's own code names it (its module), except that
time in a library called from there goes to that library's part (RocksDB reads, html
parsing, JSON, pickling) where the library is one the part list below names. The table
(markdown) goes to stdout and, with --out, to a file; docs/benchmarks/profile.md holds
the published ones.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

RATE = 50  # samples a second

# (part, pattern on a frame "function (file:line)"), tried from the leaf up; first match
# wins. Library parts come first so that e.g. RocksDB reads inside engine code count as
# RocksDB, not as the engine module that asked.
LIBRARY_PARTS = [
    ("rocksdb (rocksdict calls)", re.compile(r"rocksdict|state/rocks\.py")),
    ("json decode / encode", re.compile(r"json/(decoder|encoder|__init__)\.py")),
    ("pickle / pipes (analysis IPC)", re.compile(r"multiprocessing/(connection|reduction|"
                                                  r"queues)\.py|pickle")),
    ("html parse (selectolax)", re.compile(r"selectolax")),
    ("gc", re.compile(r"<gc>|gc collect")),
]
OWN = re.compile(r"\((?:.*/)?(streamdet/[\w/]+)\.py:\d+\)")
PROCESS = re.compile(r"^process (\d+):\"?(.*?)\"?$")


def part_of(frames: list[str]) -> str:
    """The part a sample's stack (root first) is charged to."""
    for frame in reversed(frames):
        for name, pat in LIBRARY_PARTS:
            if pat.search(frame):
                return name
        m = OWN.search(frame)
        if m:
            return m.group(1).replace("/", ".")
    return "other (interpreter, libraries)"


def samples(path: str | Path) -> Iterator[tuple[list[str], int]]:
    """(frames, samples) of each stack of a py-spy raw file (root first)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if count.isdigit():
                yield stack.split(";"), int(count)


def py_spy() -> str:
    """The py-spy of this environment (`pip install -e .[bench]`)."""
    return shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")


def read_raw(path: str) -> tuple[Counter, Counter]:
    """(samples by (process role, part), samples by process role) of a py-spy raw file."""
    by_part: Counter = Counter()
    by_role: Counter = Counter()
    for frames, n in samples(path):
        role, own = split_role(frames)
        by_part[(role, part_of(own))] += n
        by_role[role] += n
    return by_part, by_role


def split_role(frames: list[str]) -> tuple[str, list[str]]:
    """(the process a stack ran in, its frames below py-spy's process frames): the
    analysis process is the one multiprocessing spawned."""
    procs = [f for f in frames[:3] if f.startswith("process ")]
    role = "analysis process" if any("spawn_main" in p for p in procs) else "main process"
    return role, frames[len(procs):]


def table(by_part: Counter, by_role: Counter, rate: int, title: str, top: int = 25) -> str:
    total = sum(by_role.values())
    roles = ", ".join(f"{r} {n / rate:,.1f} s" for r, n in by_role.most_common())
    lines = [f"### {title}", "", f"{total / rate:,.1f} CPU s sampled ({roles})",
             "", "| process | part | CPU s | share |", "|---|---|---:|---:|"]
    for (role, part), n in by_part.most_common(top):
        lines.append(f"| {role} | {part} | {n / rate:,.1f} | {100 * n / total:.1f}% |")
    rest = sum(by_part.values()) - sum(n for _, n in by_part.most_common(top))
    if rest:
        lines.append(f"| | the rest | {rest / rate:,.1f} | {100 * rest / total:.1f}% |")
    return "\n".join(lines) + "\n"


def frame_name(frame: str) -> str:
    """"Class.method (module/file.py)" of a py-spy frame "Class.method (path:line)"."""
    name, _, where = frame.partition(" (")
    if not where:
        return frame
    path = where.rsplit(":", 1)[0]
    return f"{name} ({'/'.join(path.split('/')[-2:])})"


def _role_stacks(path: str, role: str) -> Iterator[tuple[list[str], int]]:
    """(frame names below the process frames, samples) of one process role's stacks."""
    for frames, n in samples(path):
        their_role, own = split_role(frames)
        if their_role == role:
            yield [frame_name(f) for f in own], n


def inclusive(path: str, under: str, role: str = "main process"
              ) -> tuple[Counter, int]:
    """(samples by function, inclusive, of the stacks that pass through a function whose
    name contains `under`, from there down; those stacks' samples): where the time of
    one step goes, e.g. `Txn.commit`."""
    by_function: Counter = Counter()
    total = 0
    for frames, n in _role_stacks(path, role):
        at = next((i for i, f in enumerate(frames) if under in f), None)
        if at is None:
            continue
        total += n
        for f in set(frames[at:]):
            by_function[f] += n
    return by_function, total


def callers(path: str, leaf: str, depth: int = 3, role: str = "main process") -> Counter:
    """Samples of the stacks whose innermost frame's name contains `leaf` (e.g.
    `RocksKV.get_many`), by the `depth` functions that called it, innermost first."""
    by_caller: Counter = Counter()
    for frames, n in _role_stacks(path, role):
        if frames and leaf in frames[-1]:
            chain = [f.split(" (")[0] for f in reversed(frames[-1 - depth:-1])]
            by_caller[" < ".join(chain)] += n
    return by_caller


def ranked(counts: Counter, rate: int, title: str, heading: str, top: int) -> str:
    """A markdown table of the largest counts as CPU seconds."""
    lines = [f"### {title}", "", f"| {heading} | CPU s |", "|---|---:|"]
    lines += [f"| `{k}` | {n / rate:,.1f} |" for k, n in counts.most_common(top)]
    return "\n".join(lines) + "\n"


def record(stream: str, out_raw: str, memory: str | None) -> float:
    """py-spy over `streamdet run` on the stream, in a fresh state; returns the wall time."""
    spy = py_spy()
    work = tempfile.mkdtemp(prefix="streamdet-profile-")
    cmd = [spy, "record", "--subprocesses", "--rate", str(RATE), "--format", "raw",
           "-o", out_raw, "--", sys.executable, "-m", "streamdet", "run", "--input", stream,
           "--state", os.path.join(work, "state"), "--events", os.path.join(work, "events"),
           "--dead-letter", os.path.join(work, "dead")] + (
               ["--memory", memory] if memory else [])
    t = time.perf_counter()
    try:
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--stream", help="JSONL stream to run streamdet on under py-spy")
    what.add_argument("--raw", help="a py-spy raw profile already taken")
    ap.add_argument("--memory", help="streamdet's --memory")
    ap.add_argument("--title", default="streamdet run")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--out", help="append the table to this file")
    ap.add_argument("--keep-raw", help="where the raw profile goes (with --stream)")
    ap.add_argument("--under", action="append", default=[], metavar="FUNCTION",
                    help="also a table of the functions below FUNCTION (e.g. Txn.commit), "
                    "inclusive, in the main process; repeatable")
    ap.add_argument("--callers", action="append", default=[], metavar="FUNCTION",
                    help="also a table of who calls FUNCTION (e.g. RocksKV.get_many) and "
                    "its time; repeatable")
    args = ap.parse_args(argv)
    raw = args.raw
    title = args.title
    if args.stream:
        raw = args.keep_raw or tempfile.mktemp(suffix=".txt", prefix="streamdet-profile-")
        wall = record(args.stream, raw, args.memory)
        title += f" ({wall:,.0f} s wall under py-spy)"
    by_part, by_role = read_raw(raw)
    emit(table(by_part, by_role, RATE, title, args.top), args.out)
    for under in args.under:
        counts, total = inclusive(raw, under)
        emit(ranked(counts, RATE, f"{title}: below {under} ({total / RATE:,.1f} CPU s)",
                    "function, inclusive", args.top), args.out)
    for leaf in args.callers:
        counts = callers(raw, leaf)
        emit(ranked(counts, RATE, f"{title}: {leaf} by caller "
                    f"({sum(counts.values()) / RATE:,.1f} CPU s)", "callers", args.top),
             args.out)
    return 0


def emit(text: str, out: str | None) -> None:
    """Print a table, and append it to `out` (e.g. docs/benchmarks/profile.md)."""
    print(text)
    if out:
        with open(out, "a", encoding="utf-8") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
