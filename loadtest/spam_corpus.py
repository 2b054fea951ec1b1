"""A corpus that mixes content farms with natural reuse, for bench_spam (SPEC §10), built
from the human-checked main texts of the real pages in shared/data (wcxb-text), seeded and
reproducible (the same seed gives the same records and truth, byte for byte).

Records are `{"url", "text"}`, one paragraph a line (paragraphs are SPEC §8's chunks).

- **Crawl**: real texts under their own URLs; the farms' donors are among them.
- **Farms** (the truth's spam), Sizes.farm_pages pages each, donors drawn from the crawl, each
  donor giving at most DONOR_BUDGET of its sentences to all farms together:
  `stitch-one` stitches runs of 2-5 consecutive sentences of 4-10 donors, on one host;
  `stitch-many` the same with a filler sentence of made-up words after each run, every
  page on a host of its own over ten registered domains; `shuffle-one` takes one or two
  paragraphs of 4-8 donors in shuffled order, with the farm's two advertising paragraphs
  on every page, on one host; `shuffle-many` the same without filler over many
  registered domains, a third of its donors syndicated articles (below).
- **Natural reuse** (not spam):
  `edition`: long texts cut into chapters, published in two editions (the second
  respells about one word in fifty) on five sites of their own, each site with its own
  header and footer; `reading`: reading-plan pages quoting passages of 4-7 chapters with
  a sentence of comment of their own before each; `syndicated`: articles republished on
  3-5 of eight news sites, each with its boilerplate and byline; `aggregator`: portal
  pages of 5-8 teasers (an article's first paragraphs) with their headlines;
  `translation`: a manual in eight languages (made-up words, deterministic per language
  and word, as a translation keeps names, numbers and commands) whose command lines are
  the same in every language, the English original on two more sites; `mirror`: crawled
  pages copied verbatim onto two mirror sites; `template`: pages of many sites that share
  a template of four paragraphs (licence, cookies, about) around a text of their own.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from loadtest.corpus import data_dir, synth_word
from loadtest.generator import sentences

TEXT_FILE = "wcxb-text.jsonl.gz"
DONOR_BUDGET = 0.3  # most of a donor's sentences that farms take, all farms together
MIN_WORDS = 300  # a text used here has at least this many words
LANGUAGES = ("de", "fr", "es", "it", "nl", "pt", "pl", "sv")
NEWS_SITES = 8
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Sizes:
    """How many of each kind the corpus holds: FULL for the figures, SMOKE for a run of
    seconds on tests/data's slice of the texts that still holds every kind."""

    background: int = 500  # crawled texts, the farms' donors among them
    farm_pages: int = 40  # pages of each of the four farms
    mirrored: int = 40  # crawled texts copied onto two mirror sites
    articles: int = 30  # syndicated articles
    template_users: int = 40  # sites that share the template
    chapters: int = 8  # chapters of each book
    plan_days: int = 15  # pages of each reading plan
    portal_pages: int = 15  # pages of each portal of teasers
    manual_paragraphs: int = 24  # paragraphs of each manual that are translated


FULL = Sizes()
SMOKE = Sizes(background=60, farm_pages=6, mirrored=6, articles=8, template_users=6,
              chapters=3, plan_days=2, portal_pages=3, manual_paragraphs=8)


@dataclass
class SpamCorpus:
    records: list[dict] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)  # url -> generator name
    farm: set[str] = field(default_factory=set)  # URLs of farm pages: the spam

    def add(self, url: str, paragraphs: list[str], kind: str, spam: bool = False) -> None:
        self.records.append({"url": url, "text": "\n".join(p for p in paragraphs if p)})
        self.kinds[url] = kind
        if spam:
            self.farm.add(url)


def real_texts(data: Path | None = None) -> list[dict]:
    """The real main texts of at least MIN_WORDS words in `data` (default: the data
    directory of loadtest.corpus), as {"url", "paragraphs"}."""
    out = []
    with gzip.open((data or data_dir()) / TEXT_FILE, "rt", encoding="utf-8") as f:
        for line in f:
            obj = json.loads(line)
            paras = [" ".join(p.split()) for p in obj["text"].split("\n") if p.strip()]
            if sum(len(p.split()) for p in paras) >= MIN_WORDS and obj["url"].startswith("http"):
                out.append({"url": obj["url"], "paragraphs": paras})
    return out


class _Donors:
    """The crawl's texts as farm donors: sentences taken count against DONOR_BUDGET."""

    def __init__(self, texts: list[dict]) -> None:
        self.sentences = [sentences("\n".join(t["paragraphs"])) for t in texts]
        self.paragraphs = [t["paragraphs"] for t in texts]
        self.taken = [0] * len(texts)

    def run(self, rng: random.Random, i: int, lo: int, hi: int) -> list[str] | None:
        """A run of lo-hi consecutive sentences of donor i, within its budget."""
        sents = self.sentences[i]
        n = rng.randint(lo, hi)
        if len(sents) < n or self.taken[i] + n > DONOR_BUDGET * len(sents):
            return None
        start = rng.randrange(len(sents) - n + 1)
        self.taken[i] += n
        return sents[start : start + n]

    def paragraph(self, rng: random.Random, i: int) -> str | None:
        """One paragraph of donor i of at least 40 words, within its budget."""
        paras = [p for p in self.paragraphs[i] if len(p.split()) >= 40]
        if not paras:
            return None
        p = rng.choice(paras)
        n = len(sentences(p))
        if self.taken[i] + n > DONOR_BUDGET * len(self.sentences[i]):
            return None
        self.taken[i] += n
        return p


def _filler(rng: random.Random, words: int) -> str:
    return " ".join(synth_word(rng) for _ in range(words)).capitalize() + "."


def _farm_pages(c: SpamCorpus, rng: random.Random, donors: _Donors, kind: str,
                urls: list[str], pick, extra: list[str]) -> None:
    """A farm's pages: from each of 4-10 donors (drawn anew per page) what `pick` takes,
    shuffled for the paragraph farms, plus the farm's `extra` paragraphs."""
    for url in urls:
        parts: list[str] = []
        for i in rng.sample(range(len(donors.sentences)), rng.randint(4, 10)):
            got = pick(rng, i)
            if got:
                parts.append(got)
        if kind.startswith("shuffle"):
            rng.shuffle(parts)
        c.add(url, [f"{synth_word(rng).title()} {synth_word(rng)}", *parts, *extra], kind,
              spam=True)


def farms(c: SpamCorpus, rng: random.Random, donors: _Donors, syndicated: list[str],
          n: int) -> None:
    """Four farms of n pages each."""

    def stitched(filler: bool):
        def pick(r: random.Random, i: int) -> str | None:
            run = donors.run(r, i, 2, 5)
            if run is None:
                return None
            return " ".join(run + ([_filler(r, r.randint(8, 16))] if filler else []))
        return pick

    def paragraph(r: random.Random, i: int) -> str | None:
        return donors.paragraph(r, i)

    def mixed(r: random.Random, i: int) -> str | None:
        return r.choice(syndicated) if r.random() < 1 / 3 else donors.paragraph(r, i)

    ads = [_filler(rng, 30), _filler(rng, 25)]
    _farm_pages(c, rng, donors, "stitch-one",
                [f"https://www.best-answers-hub.com/a/{i}.html" for i in range(n)],
                stitched(False), [])
    _farm_pages(c, rng, donors, "stitch-many",
                [f"https://{synth_word(rng)}.guide-net{i % 10}.xyz/p/{i}" for i in range(n)],
                stitched(True), [])
    _farm_pages(c, rng, donors, "shuffle-one",
                [f"https://www.daily-tips-now.info/post-{i}.html" for i in range(n)],
                paragraph, ads)
    _farm_pages(c, rng, donors, "shuffle-many",
                [f"https://www.{synth_word(rng)}-{i}.top/read/{i}" for i in range(n)],
                mixed, [])


def _long_paragraphs(text: dict) -> list[str]:
    """The paragraphs of 30 words or more: a book's verses, a plan's quotes."""
    return [p for p in text["paragraphs"] if len(p.split()) >= 30]


def _respell(text: str) -> str:
    """The second edition: about one word in fifty respelt, the same words every time."""
    return _WORD.sub(lambda m: m.group() + "e" if len(m.group()) > 3 and
                     zlib.crc32(m.group().lower().encode()) % 50 == 0 else m.group(), text)


def _translate(text: str, lang: str) -> str:
    """A made-up language: each word to a word of its own (the same word every time),
    names and numbers kept as translations keep them."""
    def word(m: re.Match) -> str:
        w = m.group()
        if w[0].isupper() or w.isdigit():
            return w
        return synth_word(random.Random(zlib.crc32(f"{lang}:{w}".encode())))
    return _WORD.sub(word, text)


def _site_frame(rng: random.Random, name: str) -> tuple[list[str], list[str]]:
    """A site's own header and footer, the same on all its pages."""
    return ([f"{name} home news about contact"],
            [f"Copyright {name}. {_filler(rng, 14)} {_filler(rng, 12)}"])


def editions(c: SpamCorpus, rng: random.Random, books: list[dict], comments: list[str],
             sizes: Sizes) -> list[str]:
    """Chapters in two editions on five sites, reading plans on three more; the chapter
    texts (edition one) for the reading plans."""
    chapters = []
    for b in books:
        paras = _long_paragraphs(b)
        chapters += [paras[i : i + 4] for i in range(0, len(paras) - 3, 4)][:sizes.chapters]
    sites = [(f"https://www.scripture-{s}.org", s >= 3) for s in range(5)]
    for base, second in sites:
        head, foot = _site_frame(rng, base)
        for j, ch in enumerate(chapters):
            body = [_respell(p) for p in ch] if second else ch
            c.add(f"{base}/book/{j + 1}", [*head, f"Chapter {j + 1}", *body, *foot],
                  "edition")
    for s in range(3):
        base = f"https://www.readingplan-{s}.net"
        head, foot = _site_frame(rng, base)
        for i in range(sizes.plan_days):
            parts = []
            for j in rng.sample(range(len(chapters)), rng.randint(4, 7)):
                ch = chapters[j]
                quote = ch[rng.randrange(len(ch))]
                parts += [comments.pop(), _respell(quote) if rng.random() < 0.5 else quote]
            c.add(f"{base}/day/{i + 1}", [*head, *parts, *foot], "reading")
    return [p for ch in chapters for p in ch]


def syndication(c: SpamCorpus, rng: random.Random, articles: list[dict], portal_pages: int
                ) -> list[str]:
    """Articles on 3-5 news sites each and portal pages of teasers; the articles' first
    paragraphs (what farms scrape of them)."""
    frames = [_site_frame(rng, _news(s)) for s in range(NEWS_SITES)]
    leads = []
    for a, art in enumerate(articles):
        title = f"{synth_word(rng).title()} {synth_word(rng)} {synth_word(rng)}"
        art["title"] = title
        leads.append(art["paragraphs"][0])
        for s in rng.sample(range(NEWS_SITES), rng.randint(3, 5)):
            head, foot = frames[s]
            c.add(f"{_news(s)}/{a}/{title.replace(' ', '-').lower()}",
                  [*head, title, f"By staff of news{s}", *art["paragraphs"], *foot],
                  "syndicated")
    for p in range(3):
        head, foot = _site_frame(rng, f"https://www.portal{p}-hub.net")
        for i in range(portal_pages):
            parts = []
            for art in rng.sample(articles, rng.randint(5, 8)):
                parts += [art["title"], *art["paragraphs"][: rng.randint(1, 2)]]
            c.add(f"https://www.portal{p}-hub.net/front/{i}", [*head, *parts, *foot],
                  "aggregator")
    return leads


def _news(s: int) -> str:
    """News site s, on a registered domain of its own."""
    return f"https://www.news{s}-press.com"


def translations(c: SpamCorpus, rng: random.Random, manuals: list[dict], paragraphs: int
                 ) -> None:
    """A manual's sections (of its first `paragraphs`) in eight made-up languages and the
    English original on three sites; the command lines are the same in every one."""
    for m, man in enumerate(manuals):
        paras = man["paragraphs"]
        for s in range(0, min(len(paras), paragraphs), 4):
            commands = [f"quiltctl {synth_word(rng)} --{synth_word(rng)} {rng.randint(1, 99)} "
                        f"--{synth_word(rng)} {synth_word(rng)}" for _ in range(3)]
            section = paras[s : s + 4]
            for lang in LANGUAGES:
                c.add(f"https://docs.quiltsoft.{lang}/{m}/section-{s}",
                      [*(_translate(p, lang) for p in section), *commands], "translation")
            for host in ("docs.quiltsoft.com", "mirror.quiltsoft-docs.org",
                         "manuals.example-archive.org"):
                c.add(f"https://{host}/{m}/section-{s}", [*section, *commands],
                      "translation")


def mirrors(c: SpamCorpus, crawl: list[dict]) -> None:
    for t in crawl:
        path = t["url"].split("://", 1)[1]
        for host in ("mirror-one.example-copy.net", "archive.example-mirror.org"):
            c.add(f"https://{host}/{path}", t["paragraphs"], "mirror")


def templates(c: SpamCorpus, rng: random.Random, template: list[str], own: list[dict]
              ) -> None:
    for i, t in enumerate(own):
        c.add(f"https://www.{synth_word(rng)}-{i}.org/about/{i}",
              [*t["paragraphs"][:6], *template], "template")


def spam_corpus(seed: int, sizes: Sizes = FULL, data: Path | None = None) -> SpamCorpus:
    """The corpus of `sizes` from the texts in `data` (default: loadtest.corpus's data
    directory), its records in a seeded arrival order."""
    rng = random.Random(seed)
    texts = real_texts(data)
    rng.shuffle(texts)
    longest = sorted(texts[sizes.background:], key=lambda t: -len(_long_paragraphs(t)))
    books, manuals = longest[:3], longest[3:5]
    rest = longest[5:]
    rng.shuffle(rest)
    used = sizes.articles + sizes.template_users  # the articles, then the template's users
    articles, template_users = rest[:sizes.articles], rest[sizes.articles:used]
    mirrored = texts[:sizes.mirrored]
    template = rest[used]["paragraphs"][:4]
    comments = [sentences(" ".join(t["paragraphs"]))[0] for t in rest[used + 1:]][::-1]
    comments = [s for s in comments if len(s.split()) >= 6]
    c = SpamCorpus()
    crawl = texts[:sizes.background]
    for t in crawl:
        c.add(t["url"], t["paragraphs"], "crawl")
    mirrors(c, mirrored)
    editions(c, rng, books, comments, sizes)
    leads = syndication(c, rng, articles, sizes.portal_pages)
    translations(c, rng, manuals, sizes.manual_paragraphs)
    templates(c, rng, template, template_users)
    farms(c, rng, _Donors(crawl[sizes.mirrored:]), leads, sizes.farm_pages)
    rng.shuffle(c.records)
    return c
