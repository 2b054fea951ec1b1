"""Helpers for the command-line tests: run `streamdet` as a real subprocess, and build
input files from the slice of real pages in tests/data (planted quilts, re-fetches,
copies, boilerplate and bad records, so that runs have patch grams, events and dead
letters)."""

from __future__ import annotations

import functools
import gzip
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"  # the tests' own slice of the real data (tests/data/README.md)
PAGES = DATA / "wcxb-pages.jsonl.gz"
WARCS = [DATA / "dolma-sample-0000.warc.gz", DATA / "dolma-sample-0001.warc.gz"]
SAMPLE = REPO / "streamdet" / "sample" / "sample-crawl.jsonl.gz"

_SCRIPT = Path(sys.executable).with_name("streamdet")
STREAMDET = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "streamdet"]
SUMMARY = re.compile(r"^streamdet: (\d+) pages in [\d.]+ s \(\d+ pages/s\)(?:, (\d+) already "
                     r"applied)?; (.*?); (\d+) dead letters(?: \((.*?)\) -> \S+)?(?:; .*)?; "
                     r"state [\d.]+ MB in .*$")
DUMP_KEYS = ["url", "n_grams", "n_patch_grams", "patch_fraction", "sources", "quilted", "pop",
             "contains", "cluster", "cluster_size", "exact_dups"]


def env() -> dict:
    e = dict(os.environ)
    e.pop("PYTHONHASHSEED", None)  # runs must agree whatever their hash seeds
    e["PYTHONUNBUFFERED"] = "1"
    return e


def streamdet(*args, input: bytes | None = None, check: bool = True,
              timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `streamdet ARGS` to completion; bytes stdout/stderr."""
    proc = subprocess.run(STREAMDET + [str(a) for a in args], input=input,
                          capture_output=True, timeout=timeout, env=env())
    if check and proc.returncode != 0:
        raise AssertionError(f"streamdet {' '.join(map(str, args))} exited "
                             f"{proc.returncode}:\n{proc.stderr.decode(errors='replace')}")
    return proc


def parallel(*calls) -> list:
    """Run zero-argument callables (e.g. lambdas around `streamdet`) concurrently."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(calls)) as pool:
        return [f.result() for f in [pool.submit(c) for c in calls]]


def popen(*args, extra_env: dict | None = None, **kw) -> subprocess.Popen:
    return subprocess.Popen(STREAMDET + [str(a) for a in args], env={**env(), **(extra_env or {})},
                            **kw)


def summary(stderr: bytes) -> dict:
    """The final one-line summary of `streamdet run`, parsed."""
    lines = stderr.decode("utf-8", "replace").rstrip("\n").split("\n")
    last = lines[-1].split("\r")[-1].replace("\x1b[K", "")
    m = SUMMARY.match(last)
    assert m, f"no summary line at the end of stderr:\n{stderr.decode(errors='replace')}"
    dead = {}
    if m.group(5):
        for part in m.group(5).split(", "):
            n, reason = part.split(" ", 1)
            dead[reason] = int(n)
    events = {}
    if m.group(3) != "no events":
        for part in m.group(3).split(", "):
            n, kind = part.split(" ", 1)
            events[kind] = int(n)
    return {"pages": int(m.group(1)), "skipped": int(m.group(2) or 0), "events": events,
            "dead_total": int(m.group(4)), "dead": dead, "line": last}


def dump(state) -> bytes:
    return streamdet("dump", "--state", state).stdout


def dump_rows(state) -> dict[str, dict]:
    return {r["url"]: r for r in map(json.loads, dump(state).splitlines())}


def read_jsonl(path) -> list[dict]:
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_bytes().splitlines() if line.strip()]


def write_jsonl(path, records, gz: bool = False) -> Path:
    data = b"".join(r if isinstance(r, bytes) else
                    (json.dumps(r, ensure_ascii=False) + "\n").encode() for r in records)
    path = Path(path)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@functools.lru_cache(maxsize=4)
def real_pages(n: int, max_html: int = 120_000) -> tuple[dict, ...]:
    """The first n pages of the real crawl with at most max_html characters of HTML,
    each {"url", "html"}; the record whose URL has no host (a dead letter) is left out."""
    out = []
    with gzip.open(PAGES, "rt", encoding="utf-8") as f:
        for line in f:
            obj = json.loads(line)
            if len(obj["html"]) <= max_html and _host(obj["url"]):
                out.append({"url": obj["url"], "html": obj["html"]})
                if len(out) == n:
                    break
    return tuple(out)


def _words(html: str) -> list[str]:
    from streamdet.engine.text import visible_text

    return visible_text(html).split()


def _host(url: str) -> str:
    return urlsplit(url).hostname or ""


def _nonsense(rng: random.Random, n: int) -> str:
    return " ".join(f"w{rng.randrange(10**7):07d}" for _ in range(n))


def build_crawl(seed: int = 7, n_pages: int = 200, n_quilts: int = 30) -> list[dict]:
    """A crawl in arrival order: real pages, planted quilts stitched from passages of pages
    on other servers, boilerplate shared by a dozen pages, then re-fetches (changed and
    identical), copies of quilts on new domains and more pages."""
    rng = random.Random(seed)
    pages = [dict(p) for p in real_pages(n_pages + 20)]
    extra, pages = pages[n_pages:], pages[:n_pages]
    words = {p["url"]: _words(p["html"]) for p in pages}
    usable = [p for p in pages if len(words[p["url"]]) >= 200]
    passages: dict[str, list[str]] = {}
    quilts = []
    for i in range(n_quilts):
        srcs, hosts = [], set()
        for p in rng.sample(usable, len(usable)):
            if _host(p["url"]) not in hosts:
                srcs.append(p)
                hosts.add(_host(p["url"]))
            if len(srcs) == 5:
                break
        parts = []
        for p in srcs:
            w = words[p["url"]]
            at = rng.randrange(20, len(w) - 60)
            parts.append(" ".join(w[at:at + 40]))
            passages.setdefault(p["url"], []).append(parts[-1])
        body = "".join(f"<p>{x}</p>" for x in parts)
        quilts.append({"url": f"https://www.quiltfarm{i:02d}.com/story/{i}",
                       "html": f"<html><body><h1>Story {i}</h1>{body}</body></html>",
                       "ip": f"10.0.{i}.1", "fetched_at": 1_700_000_000 + i})
    boiler = _nonsense(rng, 30)
    for p in pages[:12]:  # one passage on 12 documents: common once m < 12
        p["html"] = p["html"].replace("<body", f"<div>{boiler}</div><body", 1) \
            if "<body" in p["html"] else p["html"] + f"<p>{boiler}</p>"
    base = pages + quilts
    rng.shuffle(base)
    later = []
    for q in quilts[:4]:  # quilt re-fetched as an original page: unquilt
        later.append({"url": q["url"], "text": _nonsense(rng, 300)})
    for q in quilts[4:7]:  # copied to another domain: its cover collapses to the copy
        later.append({"url": q["url"].replace("quiltfarm", "mirrorfarm"), "html": q["html"]})
    changed = [u for u in passages if len(passages[u]) >= 1][:8]
    for u in changed:  # a source loses its passage: rescore or unquilt of its quilts
        later.append({"url": u, "html": "<p>" + _nonsense(rng, 250) + "</p>"})
    for p in pages[20:26]:  # identical re-fetches
        later.append(dict(p))
    for q in quilts[10:12]:  # re-fetched twice: back to the quilt
        later.append({"url": q["url"], "text": _nonsense(rng, 200)})
        later.append(dict(q))
    later += extra
    rng.shuffle(later)
    return base + later


def bad_lines() -> list[bytes]:
    """One bad JSONL line per dead-letter reason (SPEC §2)."""
    return [
        b"this is not json\n",
        b"[1, 2, 3]\n",
        b'{"html": "<p>no url here</p>"}\n',
        b'{"url": "ftp://example.com/file", "text": "a b c d e f"}\n',
        b'{"url": "http://example.com/\xff\xfe", "text": "not utf-8"}\n',
        b'{"url": "https://example.org/empty", "html": "", "text": ""}\n',
    ]


def with_bad(records: list, rng: random.Random) -> list:
    out = list(records)
    for line in bad_lines():
        out.insert(rng.randrange(len(out) + 1), line)
    return out
