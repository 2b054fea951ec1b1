"""The load-test stream: a replayed crawl with near-duplicate mirrors, farm-made quilts and
single-source scrapes, with its ground truth, to a JSONL file or straight into Kafka at a
controlled rate.

    python -m loadtest.generator --pages 20000 --out stream.jsonl.gz --truth truth.json
    python -m loadtest.generator --pages 5000 --broker 127.0.0.1:9092 --prefix streamdet \\
        --rate 50 --truth truth.json
    python -m loadtest.generator --pages 2000 --stats        # gram popularity, no output

The model (each knob is a field of GeneratorConfig):

- **Crawl.** The 1,867 real pages of ../shared/data replayed round after round under new
  URLs on new registered domains (`corpus.replay_stream`: `www.s<r>-rei.com`), the words
  of each content text node varied with probability `vary` (default 0.9), so that ~3/4
  of a page's 5-grams are new, while short nodes (menus, labels: the site template) stay
  as they are. Gram popularity then looks like the web's: most 5-grams occur once, a few
  (boilerplate) on many pages (`--stats` measures it with streamdet's own tokenizer).
- **Mirrors** (`mirror_rate` of the records): a copy of a recent page on a new registered
  domain with `mirror_edits` (1) of its words replaced and `mirror_vary` (0) of its
  content nodes reworded: a near-duplicate (SPEC §6) of the page, as a mirror site that
  stamps its own name or date on a copy is.
- **Quilts** (`quilt_rate` of the records) come from `farms` slice-and-dice spam farms.
  A farm publishes on a few registered domains of its own and scrapes a bounded pool of
  `farm_pool` donor pages *that have already been crawled* (only pages with enough prose:
  corpus.MIN_DONOR_WORDS words), now and then swapping one for a newer page. Each quilt
  stitches one or two passages (30-150 consecutive words, as the pipeline sees the donor's
  visible text) from each of 4-12 donors (`donors`) on distinct registered domains, so
  donors are reused across many quilts of a farm, and passages now and then too;
  together a farm's quilts take at most corpus.DONOR_BUDGET of a donor's words, so donors
  do not look quilted themselves. A quilt is an html page: a title and one <p> per passage.
- **Scrapers** (`scrape_rate` of the records): SCRAPER_HOSTS sites, each on a registered
  domain of its own with a fixed boilerplate of its own (a header line, a menu, a footer
  of several sentences), republish one article each time: a run of 4-12 consecutive
  sentences (SCRAPE_SENTENCES; split as SPEC §7 splits them, at `. ! ? …` and the like
  and at line breaks, every one of at least 5 tokens) of the visible text of one recent
  crawled page with enough prose (corpus.MIN_DONOR_WORDS words), one <p> per sentence,
  the words unchanged. One source, so never a quilt, but a partial duplicate (SPEC §7)
  of its original. Whether a record is a scrape is drawn on a random stream of its own,
  and so is what it copies: the other records are exactly the stream that
  scrape_rate=0 gives, in the same order (quilt_rate and mirror_rate are shares of them).

Deterministic: the same config gives the same records and truth, byte for byte, and any
prefix of a longer stream equals the shorter stream. The truth (quilt -> farm and donor
URLs; mirror -> original URL; scrape -> original URL and the passage as inserted) is
filled in as records are drawn.
"""

from __future__ import annotations

import argparse
import asyncio
import html as htmllib
import json
import random
import re
import sys
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from loadtest.corpus import (
    MIN_DONOR_WORDS,
    ReplayTemplate,
    prose_word,
    quilt_url,
    replay_stream,
    stitch,
    synth_word,
    write_jsonl,
)
from streamdet.adapters.rate_limiter import RateLimiter
from streamdet.engine.analysis import page_text
from streamdet.engine.records import Page
from streamdet.engine.servers import host_of, registered_domain
from streamdet.engine.tokens import tokenize

RECENT = 500  # mirrors copy one of this many latest crawled pages
FARM_HOSTS = 3  # registered domains each farm publishes on
RESCRAPE = 0.02  # chance a crawled page replaces a donor in a full farm pool
SCRAPER_HOSTS = 4  # scraper sites, each on a registered domain of its own
SCRAPE_SENTENCES = (4, 12)  # consecutive sentences a scrape copies, inclusive
SENTENCE_TOKENS = 5  # SPEC §7: shorter sentences are skipped; a scrape copies none
SCRAPE_TRIES = 8  # recent pages a scrape looks at for one with a run of sentences

# SPEC §7's sentence ends, and line breaks (what str.splitlines splits at; block
# boundaries are line breaks in page_text)
_ENDS, _BREAKS = ".!?…。！？؟।", "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
_SENTENCE = re.compile(f"[^{re.escape(_ENDS + _BREAKS)}]+[{re.escape(_ENDS)}]*")


def sentences(text: str) -> list[str]:
    """The sentences of a visible text, each with the marks that end it, stripped: split
    at `. ! ? … 。 ！ ？ ؟ ।` and at line breaks (SPEC §7), short ones kept."""
    return [s for s in (m.group().strip() for m in _SENTENCE.finditer(text)) if s]


@dataclass(frozen=True)
class GeneratorConfig:
    seed: int = 1
    pages: int = 10_000  # records in all: crawled pages, mirrors and quilts
    vary: float = 0.9  # share of a crawled page's content nodes reworded
    quilt_rate: float = 0.02
    mirror_rate: float = 0.02
    mirror_vary: float = 0.0  # share of a mirror's content nodes reworded
    mirror_edits: int = 1  # single words of a mirror replaced
    scrape_rate: float = 0.02  # single-source scrapes (partial duplicates, SPEC §7)
    farms: int = 8
    farm_pool: int = 40  # donors a farm holds at a time
    donors: tuple[int, int] = (4, 12)  # per quilt, inclusive

    def check(self) -> None:
        lo, hi = self.donors
        if not 1 <= lo <= hi:
            raise ValueError(f"donors must be (lo, hi) with 1 <= lo <= hi, got {self.donors}")
        rates = (self.quilt_rate, self.mirror_rate, self.scrape_rate)
        if min(rates) < 0 or sum(rates) > 1:
            raise ValueError("quilt_rate, mirror_rate and scrape_rate must be >= 0 and sum "
                             "to at most 1")
        if self.farms < 1 or self.farm_pool < hi:
            raise ValueError(f"need farms >= 1 and farm_pool >= {hi} (the most donors)")


@dataclass
class Truth:
    """What was planted, as the records were drawn."""

    quilts: dict[str, dict] = field(default_factory=dict)  # url -> {"farm", "donors"}
    mirrors: dict[str, str] = field(default_factory=dict)  # url -> original url
    crawled: int = 0
    # url -> {"original": the crawled page copied, "passage": its sentences as inserted,
    # one a line}
    scrapes: dict[str, dict] = field(default_factory=dict)

    def donor_uses(self) -> dict[str, int]:
        """How many quilts each donor feeds (a farm's reuse is what its donors share)."""
        uses: dict[str, int] = {}
        for q in self.quilts.values():
            for d in q["donors"]:
                uses[d] = uses.get(d, 0) + 1
        return uses

    def donor_reuse(self) -> float:
        """Mean number of quilts a donor feeds."""
        uses = self.donor_uses()
        return sum(uses.values()) / len(uses) if uses else 0.0

    def summary(self) -> dict:
        return {"records": self.crawled + len(self.quilts) + len(self.mirrors)
                + len(self.scrapes),
                "crawled": self.crawled, "quilts": len(self.quilts),
                "mirrors": len(self.mirrors), "scrapes": len(self.scrapes),
                "donors": len(self.donor_uses()),
                "donor_reuse": round(self.donor_reuse(), 2)}

    def to_json(self) -> dict:
        return {"summary": self.summary(), "quilts": self.quilts, "mirrors": self.mirrors,
                "scrapes": self.scrapes}

    @classmethod
    def from_json(cls, obj: dict) -> Truth:
        """A written truth; one written before scrapes existed reads with none."""
        s = obj.get("summary", {})
        return cls(obj["quilts"], obj["mirrors"], s.get("crawled", 0),
                   obj.get("scrapes", {}))


class _Farm:
    """A spam farm: its hosts and its pool of scraped donors (corpus.stitch's shape)."""

    def __init__(self, index: int, hosts: list[str]) -> None:
        self.index, self.hosts = index, hosts
        self.pool: list[dict] = []

    def domains(self) -> int:
        return len({d["domain"] for d in self.pool})


class _Scraper:
    """A scraper site: one host on a registered domain of its own, and its boilerplate
    (a header line, a menu, a footer of several sentences), the same on all its pages."""

    def __init__(self, index: int, rng: random.Random, taken: set[str]) -> None:
        self.index = index
        self.host = host_of(quilt_url(rng, taken))
        name = " ".join(synth_word(rng).capitalize() for _ in range(rng.randint(1, 2)))
        tagline = _phrase(rng, 5, 9) + "."
        self.sections = [synth_word(rng) for _ in range(rng.randint(4, 7))]
        menu = "".join(f'<li><a href="/{s}/">{s.capitalize()}</a></li>'
                       for s in self.sections)
        footer = "".join(f"<p>{_phrase(rng, 6, 12)}.</p>" for _ in range(rng.randint(3, 5)))
        self.name = name
        self.header = f'<header><a href="/">{name}</a> | {tagline}</header>'
        self.nav = f"<nav><ul>{menu}</ul></nav>"
        self.footer = (f"<footer>{footer}<p>\u00a9 {name}. {_phrase(rng, 5, 8)}.</p>"
                       "</footer>")


def _phrase(rng: random.Random, lo: int, hi: int) -> str:
    """lo-hi synthetic words, the first capitalized."""
    return " ".join(synth_word(rng) for _ in range(rng.randint(lo, hi))).capitalize()


def scrape_passage(rng: random.Random, text: str) -> list[str] | None:
    """A run of SCRAPE_SENTENCES consecutive sentences of a visible text, each of at least
    SENTENCE_TOKENS tokens (SPEC §1) and prose-like (None if the text has no such run of
    the fewest)."""
    sents = sentences(text)
    ok = [len(tokenize(s)) >= SENTENCE_TOKENS
          and sum(map(prose_word, s.split())) >= 0.85 * len(s.split()) for s in sents]
    lo, hi = SCRAPE_SENTENCES
    runs: list[tuple[int, int]] = []  # maximal runs of good sentences: (start, length)
    i = 0
    while i < len(ok):
        if not ok[i]:
            i += 1
            continue
        j = i
        while j < len(ok) and ok[j]:
            j += 1
        if j - i >= lo:
            runs.append((i, j - i))
        i = j
    if not runs:
        return None
    # the run of a good sentence drawn at random: long runs (articles) more often
    start, length = rng.choices(runs, weights=[n for _, n in runs])[0]
    n = rng.randint(lo, min(hi, length))
    start += rng.randrange(length - n + 1)
    return sents[start:start + n]


class Generator:
    """Iterate to draw the records; `truth` grows as they are drawn."""

    def __init__(self, config: GeneratorConfig) -> None:
        config.check()
        self.cfg = config
        self.truth = Truth()
        self._rng = random.Random(f"generator:{config.seed}")
        taken: set[str] = set()
        self._farms = [_Farm(f, [host_of(quilt_url(self._rng, taken))
                                 for _ in range(FARM_HOSTS)]) for f in range(config.farms)]
        self._recent: deque[dict] = deque(maxlen=RECENT)
        # scrapes draw on streams of their own (which records, and what they are), so the
        # other records are the same, in the same order, whatever scrape_rate is
        self._scrape_slots = random.Random(f"scrape-slots:{config.seed}")
        self._srng = random.Random(f"scrapers:{config.seed}")
        self._scrapers = [_Scraper(i, self._srng, taken) for i in range(SCRAPER_HOSTS)]

    def __iter__(self) -> Iterator[dict]:
        cfg, rng = self.cfg, self._rng
        crawl = replay_stream(cfg.seed, cfg.pages, cfg.vary)
        for _ in range(cfg.pages):
            if self._scrape_slots.random() < cfg.scrape_rate:
                rec = self._scrape()
                if rec is not None:
                    yield rec
                    continue
            u = rng.random()
            rec = None
            if u < cfg.quilt_rate:
                rec = self._quilt(self._farms[rng.randrange(len(self._farms))])
            elif u < cfg.quilt_rate + cfg.mirror_rate and self._recent:
                rec = self._mirror()
            if rec is None:
                rec = next(crawl)
                self.truth.crawled += 1
                self._recent.append(rec)
                self._offer(rec)
            yield rec

    def _offer(self, rec: dict) -> None:
        """A crawled page a farm may scrape: to fill a farm's pool, or now and then to
        replace one of its donors."""
        rng = self._rng
        farm = self._farms[rng.randrange(len(self._farms))]
        full = len(farm.pool) >= self.cfg.farm_pool
        if full and rng.random() >= RESCRAPE:
            return
        words = page_text(Page(url=rec["url"], html=rec["html"])).split()
        if len(words) < MIN_DONOR_WORDS or sum(map(prose_word, words)) < 0.6 * len(words):
            return
        donor = {"url": rec["url"], "domain": registered_domain(host_of(rec["url"])),
                 "words": words, "spans": []}
        if full:
            farm.pool[rng.randrange(len(farm.pool))] = donor
        else:
            farm.pool.append(donor)

    def _quilt(self, farm: _Farm) -> dict | None:
        """A page of `farm` stitched from its donors (None while its pool is too small)."""
        lo, hi = self.cfg.donors
        if farm.domains() < lo:
            return None
        rng = self._rng
        text, used = stitch(rng, farm.pool, rng.randint(lo, min(hi, farm.domains())))
        slug = "-".join(synth_word(rng) for _ in range(rng.randint(3, 6)))
        url = f"https://{rng.choice(farm.hosts)}/{rng.choice(('blog', 'news', 'p'))}/{slug}.html"
        if url in self.truth.quilts:
            return None
        title, *passages = text.split("\n\n")
        body = "\n".join(f"<p>{htmllib.escape(p)}</p>" for p in passages)
        self.truth.quilts[url] = {"farm": farm.index, "donors": sorted(used)}
        return {"url": url, "html": f"<html><head><title>{htmllib.escape(title)}</title>"
                                    f"</head><body><h1>{htmllib.escape(title)}</h1>\n{body}"
                                    "</body></html>"}

    def _mirror(self) -> dict:
        """A near-duplicate of a recent page on a registered domain of its own."""
        rng = self._rng
        orig = rng.choice(self._recent)
        n = len(self.truth.mirrors)
        t = ReplayTemplate(orig["url"], orig["html"])
        url = t.url(n)  # www.s<n>-s<r>-rei.com: a registered domain of its own
        page = t.html(rng, self.cfg.mirror_vary, self.cfg.mirror_edits)
        self.truth.mirrors[url] = orig["url"]
        return {"url": url, "html": page}

    def _scrape(self) -> dict | None:
        """One article of a recent crawled page republished by a scraper site (None when
        none of the recent pages it looks at has a run of long enough sentences)."""
        if not self._recent:
            return None
        rng = self._srng
        site = self._scrapers[rng.randrange(len(self._scrapers))]
        for _ in range(SCRAPE_TRIES):
            orig = rng.choice(self._recent)
            text = page_text(Page(url=orig["url"], html=orig["html"]))
            words = text.split()
            if len(words) < MIN_DONOR_WORDS or sum(map(prose_word, words)) < 0.6 * len(words):
                continue
            passage = scrape_passage(rng, text)
            if passage is not None:
                break
        else:
            return None
        title = _phrase(rng, 4, 8)
        slug = "-".join(synth_word(rng) for _ in range(rng.randint(3, 6)))
        url = f"https://{site.host}/{rng.choice(site.sections)}/{slug}.html"
        if url in self.truth.scrapes:
            return None
        body = "\n".join(f"<p>{htmllib.escape(s)}</p>" for s in passage)
        t = htmllib.escape(title)
        self.truth.scrapes[url] = {"original": orig["url"], "passage": "\n".join(passage)}
        return {"url": url, "html": f"<html><head><title>{t} | {site.name}</title></head>"
                                    f"<body>{site.header}\n{site.nav}\n<main><article>"
                                    f"<h1>{t}</h1>\n{body}\n</article></main>\n"
                                    f"{site.footer}</body></html>"}


# -- pacing -------------------------------------------------------------------------------


# -- sinks --------------------------------------------------------------------------------


async def to_kafka(records: Iterator[dict], broker: str, prefix: str, rate: float | None,
                   stamp: bool = True, shards: int = 4, partitions: int = 4) -> dict:
    """Send the records to `<prefix>-pages` as `streamdet produce` does (value = JSON
    record, key = URL), paced to `rate` pages/s; `fetched_at` is set to the send time
    (fetch->event latency is measured from it) unless stamp is False."""
    from streamdet.adapters.kafka import Topics, ensure_topics, producer

    topics = Topics.named(prefix)
    await ensure_topics(broker, topics, shards, partitions)
    p = producer(broker)
    await p.start()
    limiter = RateLimiter(rate, burst=2) if rate else None  # a lag under an interval is made up
    pending, n, began = [], 0, time.monotonic()
    try:
        for rec in records:
            if limiter:
                await limiter.wait_async()
            if stamp:
                rec = {**rec, "fetched_at": time.time()}
            value = json.dumps(rec, ensure_ascii=False).encode("utf-8")
            pending.append(await p.send(topics.pages, value=value, key=rec["url"].encode()))
            n += 1
            if len(pending) >= 200:
                await asyncio.gather(*pending)
                pending = []
        await asyncio.gather(*pending)
    finally:
        await p.stop()
    seconds = time.monotonic() - began
    return {"sent": n, "seconds": round(seconds, 3),
            "rate": round(n / seconds, 2) if seconds else None}


def gram_popularity(records: Iterator[dict], k: int = 5) -> dict:
    """How many pages each distinct k-gram occurs on (streamdet's own analysis): the share
    seen on one page, and on >= 10 pages (boilerplate)."""
    import numpy as np

    from streamdet.engine.analysis import analyze
    from streamdet.engine.params import Params
    from streamdet.engine.records import page_from_object

    params = Params(k=k)
    grams = [analyze(page_from_object(r), params).grams for r in records]
    if not grams:
        return {"pages": 0}
    _, df = np.unique(np.concatenate(grams), return_counts=True)
    return {"pages": len(grams), "distinct_grams": int(len(df)),
            "once": round(float((df == 1).mean()), 4),
            "on_10_or_more": round(float((df >= 10).mean()), 5),
            "max_pages": int(df.max())}


# -- command line -------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    d = GeneratorConfig()
    ap.add_argument("--pages", type=int, default=d.pages)
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--vary", type=float, default=d.vary)
    ap.add_argument("--quilt-rate", type=float, default=d.quilt_rate)
    ap.add_argument("--mirror-rate", type=float, default=d.mirror_rate)
    ap.add_argument("--scrape-rate", type=float, default=d.scrape_rate)
    ap.add_argument("--farms", type=int, default=d.farms)
    ap.add_argument("--farm-pool", type=int, default=d.farm_pool)
    ap.add_argument("--out", help="JSONL file (.gz: gzipped)")
    ap.add_argument("--broker", help="host:port: send to Kafka instead")
    ap.add_argument("--prefix", default="streamdet", help="topic prefix (as the workers')")
    ap.add_argument("--rate", type=float, help="pages/s to Kafka (default: as fast as it can)")
    ap.add_argument("--truth", help="write the planted truth here (JSON)")
    ap.add_argument("--stats", action="store_true", help="print gram popularity only")
    args = ap.parse_args(argv)
    cfg = GeneratorConfig(seed=args.seed, pages=args.pages, vary=args.vary,
                          quilt_rate=args.quilt_rate, mirror_rate=args.mirror_rate,
                          scrape_rate=args.scrape_rate, farms=args.farms, farm_pool=args.farm_pool)
    try:
        gen = Generator(cfg)
    except ValueError as exc:
        ap.error(str(exc))
    if args.stats:
        print(json.dumps(gram_popularity(iter(gen))))
        return 0
    if bool(args.out) == bool(args.broker):
        ap.error("give one of --out FILE or --broker HOST:PORT")
    if args.out:
        write_jsonl(iter(gen), args.out)
        sent = {}
    else:
        sent = asyncio.run(to_kafka(iter(gen), args.broker, args.prefix, args.rate))
    if args.truth:
        Path(args.truth).write_text(json.dumps(
            {"config": asdict(cfg), **gen.truth.to_json()}, indent=1), encoding="utf-8")
    print(json.dumps({**gen.truth.summary(), **sent}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
