"""Deterministic test corpora built from the real pages in shared/data (WCXB, 1,867 pages).

Three generators, all seeded and reproducible (same seed -> same records, byte for byte):

- `load_pages(limit)`: the real records `{"url", "html"}`, in file order.
- `planted_corpus(seed, n_pages, n_quilts)`: a sample of real pages plus planted quilts,
  shuffled, with the planted truth `{quilt_url: [donor urls]}`. A quilt is a new page on a
  new registered domain whose `text` is stitched from passages (runs of 30-150 consecutive
  words of the donor's visible text, as `streamdet.engine.analysis.page_text` sees it) of
  4-12 donor pages, each on its own registered domain. Donors are drawn from a small pool
  so that each is reused by about three quilts, as content farms reuse their sources
  (now and then the very passage an earlier quilt took); quilts together take at most
  DONOR_BUDGET (30%) of a donor's words, so donors do not themselves look quilted.
- `replay_stream(seed, n, vary)`: the real pages replayed under rewritten URLs, each round
  on new registered domains, with words varied inside the HTML text nodes (see below).

The data directory is `../shared/data` from the repository root, or `$STREAMDET_DATA`.

Replay records are `{"url", "html"}`, not `{"url", "text"}`: the benchmark must include the
HTML parsing the pipeline does on real input (it is the largest single cost), so the html
is kept and only the words inside text nodes are changed, by a regex pass over the markup:

- markup is tags, comments, and the whole of `script`, `style`, `noscript`, `template` and
  `textarea` elements; everything between is a text node;
- a text node with at least `MIN_VARY_WORDS` (5) words is "content": in each replay it is
  varied with probability `vary`, by replacing every third word (seeded offset) with a
  synthetic word, so that every 5-gram inside it is new;
- shorter text nodes (menu items, buttons, labels, short headings: the site template) are
  never changed, so boilerplate stays shared across replays and across a site's pages,
  as on the real web. HTML entities (`&amp;`) are left alone.

Measured with `replay_stats` over 300 pages: vary 0.5 / 0.7 / 0.9 / 1.0 make 45% / 61% /
77% / ~87% of a replay's distinct 5-grams new; the rest (template text in short nodes,
and grams spanning them) stays shared with the page's other replays.

Round r replays every page once, in a seeded order, under host `<prefix>s<r>-<domain>`
(`www.rei.com` -> `www.s3-rei.com`, `foo.substack.com` -> `foo.s3-substack.com`): each
round puts each original site on a registered domain of its own, keeping its pages together.
"""

from __future__ import annotations

import functools
import gzip
import json
import math
import os
import random
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from streamdet.engine.analysis import page_text
from streamdet.engine.records import BadRecord, Page, page_from_object
from streamdet.engine.servers import host_of, registered_domain

PAGES_FILE = "wcxb-pages.jsonl.gz"
REPO_ROOT = Path(__file__).resolve().parent.parent

PASSAGE_WORDS = (30, 150)  # words per passage, inclusive
MIN_DONOR_WORDS = 200  # a donor needs at least this many words of visible text
DONOR_REUSE = 3.0  # mean number of quilts a donor feeds
DONOR_BUDGET = 0.3  # most of a donor's words that quilts take, all quilts together
PASSAGE_REUSE = 0.1  # chance a quilt takes a passage an earlier quilt took from that donor
MIN_VARY_WORDS = 5  # text nodes with fewer words are template, never varied
QUILT_TLDS = ("com", "net", "info", "xyz", "top", "site", "online", "biz")


def data_dir() -> Path:
    """Where the shared data lives: $STREAMDET_DATA, else ../shared/data from the repo."""
    env = os.environ.get("STREAMDET_DATA")
    return Path(env) if env else (REPO_ROOT.parent / "shared" / "data").resolve()


@functools.lru_cache(maxsize=2)
def _all_records(include_invalid: bool) -> tuple[tuple[str, str], ...]:
    path = data_dir() / PAGES_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} not found; set STREAMDET_DATA to the data directory")
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            obj = json.loads(line)
            rec = {"url": obj["url"], "html": obj["html"]}
            if not include_invalid:
                try:
                    page_from_object(rec)
                except BadRecord:
                    continue  # one record has the URL https:///wcxb-0551 (no host)
            out.append((rec["url"], rec["html"]))
    return tuple(out)


def load_pages(limit: int | None = None, include_invalid: bool = False) -> list[dict]:
    """The real pages as records {"url", "html"}, in file order.

    Records the pipeline would dead-letter (one URL without a host) are left out unless
    include_invalid. The file is read once per process and cached."""
    recs = _all_records(include_invalid)
    if limit is not None:
        recs = recs[:limit]
    return [{"url": u, "html": h} for u, h in recs]


# -- synthetic words and names -------------------------------------------------------------

_ONSETS = ("b c d f g h j k l m n p r s t v w z br cl dr fl gr pl st tr ch sh th qu "
           "sk sl sp kr bl").split()
_VOWELS = "a e i o u ai ea oo ou io".split()
_SYLLABLES = [c + v for c in _ONSETS for v in _VOWELS]  # 330


def synth_word(rng: random.Random) -> str:
    """A pronounceable nonsense word of 2-4 syllables (about 10^10 of them)."""
    n = 2 + rng.getrandbits(2) % 3
    return "".join(_SYLLABLES[rng.randrange(len(_SYLLABLES))] for _ in range(n))


def _words(text: str) -> list[str]:
    return text.split()


def prose_word(word: str) -> bool:
    """A word that reads like prose: has a letter, is not a URL or a code blob."""
    return len(word) <= 25 and any(ch.isalpha() for ch in word)


# -- planted quilts ------------------------------------------------------------------------


def quilt_url(rng: random.Random, taken_domains: set[str]) -> str:
    while True:
        name = f"{synth_word(rng)}-{synth_word(rng)}{rng.randrange(10, 100)}"
        host = f"www.{name}.{rng.choice(QUILT_TLDS)}"
        dom = registered_domain(host)
        if dom not in taken_domains:
            taken_domains.add(dom)
            slug = "-".join(synth_word(rng) for _ in range(rng.randint(3, 6)))
            return f"https://{host}/{rng.choice(('blog', 'news', 'guide', 'p'))}/{slug}.html"


def _pick_passage(rng: random.Random, words: list[str], taken: list[tuple[int, int]],
                  most: int = PASSAGE_WORDS[1]) -> tuple[int, int] | None:
    """A run of PASSAGE_WORDS words (at most `most`), mostly prose-like, not overlapping
    `taken`."""
    lo, hi = PASSAGE_WORDS[0], max(PASSAGE_WORDS[0], min(PASSAGE_WORDS[1], most))
    n = len(words)
    if n < lo:
        return None
    best = None
    for attempt in range(40):
        length = rng.randint(lo, min(hi, n))
        start = rng.randrange(0, n - length + 1)
        end = start + length
        if any(start < e and s < end for s, e in taken):
            continue
        good = sum(prose_word(w) for w in words[start:end]) / length
        if good >= 0.85:
            return start, end
        if best is None or good > best[0]:
            best = (good, start, end)
        if attempt == 39 and best is not None:
            return best[1], best[2]
    return None


def planted_corpus(seed: int, n_pages: int, n_quilts: int, donors: tuple[int, int] = (4, 12),
                   *, pool: list[dict] | None = None) -> tuple[list[dict], dict]:
    """n_pages real pages and n_quilts planted quilts, shuffled; and the truth.

    Real records are {"url", "html"}; quilts are {"url", "text"}: a short synthetic title,
    then the passages separated by blank lines. Each quilt takes one or two passages from
    each of its 4-12 donors (`donors`, inclusive), every donor on a different registered
    domain, none on the quilt's own (new) domain. Donors come from a pool of pages with
    at least MIN_DONOR_WORDS words, sized so that each donor feeds ~DONOR_REUSE quilts.
    `pool` restricts the real pages drawn from (default: all of load_pages()).

    Returns (records, truth) where truth = {quilt_url: sorted donor urls}."""
    lo, hi = donors
    if not 1 <= lo <= hi:
        raise ValueError(f"donors must be (lo, hi) with 1 <= lo <= hi, got {donors}")
    rng = random.Random(f"planted:{seed}")
    source = pool if pool is not None else load_pages()
    if n_pages > len(source):
        raise ValueError(f"n_pages={n_pages} but only {len(source)} pages are available")
    real = [{"url": r["url"], "html": r["html"]} for r in rng.sample(source, n_pages)]
    truth: dict[str, list[str]] = {}
    quilts: list[dict] = []
    if n_quilts:
        donor_pool = _donor_pool(rng, real, max(hi + 2, math.ceil(n_quilts * (lo + hi) / 2
                                                                     / DONOR_REUSE)))
        pool_domains = {d["domain"] for d in donor_pool}
        if len(pool_domains) < lo:
            raise ValueError(f"only {len(pool_domains)} donor domains among {n_pages} pages; "
                             f"a quilt needs {lo}")
        taken_domains = {registered_domain(host_of(r["url"])) for r in source}
        for _ in range(n_quilts):
            url = quilt_url(rng, taken_domains)
            text, used = stitch(rng, donor_pool, rng.randint(lo, min(hi, len(pool_domains))))
            quilts.append({"url": url, "text": text})
            truth[url] = sorted(used)
    records = real + quilts
    rng.shuffle(records)
    return records, truth


def _donor_pool(rng: random.Random, real: list[dict], size: int) -> list[dict]:
    """Up to `size` donors (url, domain, words), preferring distinct domains."""
    order = list(range(len(real)))
    rng.shuffle(order)
    pool: list[dict] = []
    seen: set[str] = set()
    spare: list[dict] = []  # second pages of a domain already in the pool
    for i in order:
        if len(pool) >= size:
            break
        rec = real[i]
        dom = registered_domain(host_of(rec["url"]))
        if dom in seen and len(spare) >= size:
            continue
        words = _words(page_text(Page(url=rec["url"], html=rec["html"])))
        if len(words) < MIN_DONOR_WORDS or sum(map(prose_word, words)) < 0.6 * len(words):
            continue
        d = {"url": rec["url"], "domain": dom, "words": words, "spans": []}
        if dom in seen:
            spare.append(d)
        else:
            seen.add(dom)
            pool.append(d)
    pool.extend(spare[: max(0, size - len(pool))])
    return pool


def stitch(rng: random.Random, pool: list[dict], n_donors: int) -> tuple[str, set[str]]:
    chosen: list[dict] = []
    domains: set[str] = set()
    for d in rng.sample(pool, len(pool)):
        if d["domain"] not in domains:
            chosen.append(d)
            domains.add(d["domain"])
            if len(chosen) == n_donors:
                break
    passages: list[tuple[str, str]] = []
    for d in chosen:
        d.setdefault("spans", [])  # passages of this donor used by earlier quilts
        mine: list[tuple[int, int]] = []
        for _ in range(1 if rng.random() < 0.6 else 2):
            span = _donor_span(rng, d, mine)
            if span is None:
                break
            mine.append(span)
            passages.append((d["url"], " ".join(d["words"][span[0]:span[1]])))
    rng.shuffle(passages)
    title = " ".join(synth_word(rng) for _ in range(rng.randint(4, 8))).capitalize()
    text = "\n\n".join([title] + [p for _, p in passages])
    return text, {u for u, _ in passages}


def _donor_span(rng: random.Random, d: dict, mine: list[tuple[int, int]]
                ) -> tuple[int, int] | None:
    """A passage of donor d for one quilt: often one an earlier quilt already took (farms
    reuse what they scraped), else a new one while at most DONOR_BUDGET of the donor's
    words are used, so that donors keep most of their text to themselves."""
    spans = d["spans"]
    old = [s for s in spans if not any(s[0] < e and b < s[1] for b, e in mine)]
    used = sum(e - b for b, e in spans)
    if old and (rng.random() < PASSAGE_REUSE or used >= DONOR_BUDGET * len(d["words"])):
        return rng.choice(old)
    span = _pick_passage(rng, d["words"], spans + mine,
                         int(DONOR_BUDGET * len(d["words"])) - used)
    if span is None:
        return rng.choice(old) if old else None
    spans.append(span)
    return span


def quilt_passages(text: str) -> list[str]:
    """The passages of a planted quilt's text (its title left out)."""
    return text.split("\n\n")[1:]


# -- replay stream -------------------------------------------------------------------------

_MARKUP = re.compile(
    r"<!--.*?-->|<(script|style|noscript|template|textarea)\b[^>]*>.*?</\1\s*>|<[^>]*>",
    re.S | re.I,
)
_WORD = re.compile(r"&#?\w+;|\w+")


class ReplayTemplate:
    """A page's html cut into constant markup and content text nodes."""

    __slots__ = ("parts", "content", "scheme", "prefix", "domain", "rest")

    def __init__(self, url: str, html: str) -> None:
        parts: list[str] = []
        content: list[int] = []  # indexes in parts of text nodes that may be varied
        pos = 0
        buf: list[str] = []  # markup and template text since the last content node
        for m in _MARKUP.finditer(html):
            text = html[pos:m.start()]
            if len(text) >= 2 * MIN_VARY_WORDS - 1 and not text.isspace() and sum(
                    1 for w in _WORD.findall(text) if w[0] != "&") >= MIN_VARY_WORDS:
                parts.append("".join(buf))
                buf = []
                content.append(len(parts))
                parts.append(text)
            else:
                buf.append(text)
            buf.append(m.group())
            pos = m.end()
        buf.append(html[pos:])
        parts.append("".join(buf))
        self.parts = parts
        self.content = content
        s = urlsplit(url)
        host = host_of(url)
        dom = registered_domain(host)
        self.scheme = s.scheme
        self.prefix = host[: len(host) - len(dom)] if host.endswith(dom) else ""
        self.domain = dom if host.endswith(dom) else host
        port = f":{s.port}" if s.port else ""
        self.rest = (port, s.path, s.query, s.fragment)

    def url(self, r: int) -> str:
        port, path, query, frag = self.rest
        return urlunsplit((self.scheme, f"{self.prefix}s{r}-{self.domain}{port}", path, query,
                           frag))

    def html(self, rng: random.Random, vary: float, edits: int = 0) -> str:
        """The page with each content node reworded with probability `vary`, then
        `edits` single words replaced in content nodes (a mirror's small changes)."""
        parts = list(self.parts)
        for i in self.content:
            if rng.random() < vary:
                parts[i] = _vary_words(parts[i], rng)
        for _ in range(edits if self.content else 0):
            i = rng.choice(self.content)
            parts[i] = _edit_word(parts[i], rng)
        return "".join(parts)


def _edit_word(text: str, rng: random.Random) -> str:
    """One word of a text node replaced by a made-up one."""
    words = [m for m in _WORD.finditer(text) if m.group()[0] != "&"]
    if not words:
        return text
    m = rng.choice(words)
    return text[: m.start()] + synth_word(rng) + text[m.end() :]


def _vary_words(text: str, rng: random.Random) -> str:
    off = rng.randrange(3)
    out: list[str] = []
    pos = 0
    j = 0
    for m in _WORD.finditer(text):
        if m.group()[0] == "&":
            continue
        if j % 3 == off:
            out.append(text[pos:m.start()])
            out.append(synth_word(rng))
            pos = m.end()
        j += 1
    out.append(text[pos:])
    return "".join(out)


@functools.lru_cache(maxsize=1)
def _templates() -> list:
    return [None] * len(_all_records(False))


def _template(i: int) -> ReplayTemplate:
    cache = _templates()
    t = cache[i]
    if t is None:
        url, html = _all_records(False)[i]
        t = cache[i] = ReplayTemplate(url, html)
    return t


def replay_stream(seed: int, n: int, vary: float = 0.7, *,
                  pages: list[dict] | None = None) -> Iterator[dict]:
    """n records {"url", "html"}: the real pages replayed round after round.

    Round r (0, 1, ...) visits every page once in a seeded order, under URLs rewritten
    onto new registered domains (`www.s<r>-rei.com`), with content text nodes varied with
    probability `vary` each (vary=0: exact copies). Each record's variation depends only on
    (seed, round, page), so any prefix of the stream is the same for any n. `pages`
    replays those records (url, html) instead of all of load_pages()."""
    if not 0.0 <= vary <= 1.0:
        raise ValueError(f"vary must be within [0, 1], got {vary}")
    if pages is None:
        n_real, template = len(_all_records(False)), _template
    else:
        local = [ReplayTemplate(p["url"], p["html"]) for p in pages]
        n_real, template = len(local), local.__getitem__
    if n_real == 0:
        return
    emitted = 0
    r = 0
    while emitted < n:
        order = list(range(n_real))
        random.Random(f"replay-order:{seed}:{r}").shuffle(order)
        for i in order:
            if emitted >= n:
                return
            t = template(i)
            rng = random.Random(f"replay:{seed}:{r}:{i}")
            yield {"url": t.url(r), "html": t.html(rng, vary)}
            emitted += 1
        r += 1


def replay_original(url: str) -> str | None:
    """The original URL a replay URL was made from (None if it is not one)."""
    s = urlsplit(url)
    host = s.hostname or ""
    m = re.match(r"^(.*?)s(\d+)-(.+)$", host)
    if not m:
        return None
    port = f":{s.port}" if s.port else ""
    return urlunsplit((s.scheme, m.group(1) + m.group(3) + port, s.path, s.query, s.fragment))


def write_jsonl(records, path: str | os.PathLike) -> int:
    """Write records as JSONL (gzip when the name ends in .gz, reproducibly: mtime 0)."""
    path = str(path)
    n = 0
    if path.endswith(".gz"):
        with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                                   mtime=0, compresslevel=9) as gz:
            for rec in records:
                gz.write((json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8"))
                n += 1
    else:
        with open(path, "w", encoding="utf-8") as f:
            for rec in records:
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                n += 1
    return n


def replay_stats(seed: int, n: int, vary: float = 0.7) -> dict:
    """How different the first n replays are from their originals, by 5-gram sets.

    new_gram_share: over the n replays, the share of each replay's distinct 5-grams that
    are not in its original page's gram set (pooled over pages)."""
    import numpy as np

    from streamdet.engine.analysis import analyze
    from streamdet.engine.params import Params

    params = Params()
    originals = dict(_all_records(False))
    total = new = 0
    for rec in replay_stream(seed, n, vary):
        g = analyze(page_from_object(rec), params).grams
        orig = originals[replay_original(rec["url"])]
        g0 = analyze(Page(url="https://x.invalid/", html=orig), params).grams
        total += len(g)
        new += int(len(g) - np.isin(g, g0, assume_unique=True).sum())
    return {"pages": n, "vary": vary, "grams": total,
            "new_gram_share": new / total if total else 0.0}
