"""Hypothesis strategies: small random corpora whose grams are shared.

Everything is drawn from small pools so that coincidences are the rule: a vocabulary of a
dozen words in several scripts, a few shared passages, bodies reused verbatim as mirrors,
a handful of URLs per example (so re-fetches are frequent) on hosts chosen to exercise the
server rules (same registered domain on different hosts, *.blogspot.com / *.github.io
private-suffix sites, co.uk, an IP literal, an upper-case host), optional ip fields,
invalid records that must be dead-lettered, text or HTML bodies, and random batchings.
"""

from __future__ import annotations

from hypothesis import strategies as st

from streamdet.engine.params import FOREIGN_MODES, Params

WORDS = [
    "alpha", "beta", "gamma", "delta", "Straße", "STRASSE", "x1", "42",
    "e\u0301te\u0301",  # decomposed é: letters with combining marks inside a word
    "किताब", "हिंदी",  # Devanagari with vowel signs and anusvara (kept inside the word)
    "中文", "日本語", "ひらがな", "カタカナ",  # one token per letter
    "ภาษาไทย", "ที่",  # Thai: one token per letter, with its marks
    "한국어",  # Hangul syllables: one token per syllable
    "\u0301alpha",  # a leading combining mark (dropped) before a word
    "\u05e9\u05dc\u05d5\u05dd", "\u0645\u0631\u062d\u0628\u0627",  # Hebrew, Arabic (RTL)
]
SEPS = [" ", " ", " ", " ", "\n", ", ", ". ", "\t", " \u2014 ", "-", "", "\u3000", "!?",
        " \U0001f600 ", "\u200f"]  # an emoji (a symbol, not a token), a right-to-left mark

HOSTS = [
    "a.example.com", "b.example.com", "example.com", "A.Example.COM",
    "foo.blogspot.com", "bar.blogspot.com", "x.github.io", "y.github.io",
    "other.org", "www.other.org", "shop.co.uk", "b.shop.co.uk",
    "10.1.2.3", "bücher.de",
]
PATHS = ["/", "/p1", "/p2", "/ü", "/Z", "/a/p3", "/a/b/p4", "/a/b/"]  # SPEC §8: directories
IPS = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]

THETAS = [0.0, 0.1, 0.25, 1 / 3, 0.5, 2 / 3, 0.75, 0.9, 1.0]


@st.composite
def params_st(draw, small: bool | None = None) -> Params:
    """Random parameters; mostly small k and m so that grams overflow, sometimes defaults."""
    if small is None:
        small = draw(st.integers(0, 4)) > 0
    if small:
        k = draw(st.sampled_from([1, 1, 2, 2, 3, 3, 4]))
        m = draw(st.sampled_from([2, 2, 3, 3, 4, 5]))
    else:
        k = draw(st.sampled_from([2, 3, 5, 5]))
        m = draw(st.sampled_from([4, 50, 50]))
    c = draw(st.integers(0, 4))
    theta = draw(st.one_of(st.sampled_from(THETAS), st.floats(0.0, 1.0)))
    foreign = draw(st.sampled_from(FOREIGN_MODES))
    # phi (SPEC §5): mostly 0 (SPEC §1 exactly), else a share that drops small sources
    phi = draw(st.one_of(st.just(0.0), st.sampled_from([0.1, 0.25, 0.5]), st.floats(0.0, 1.0)))
    # P (SPEC §8): around m, so that grams cross it both with postings and as common grams
    popular = draw(st.sampled_from([2, 3, 3, 4, 5, 5, 7]))
    # the monster rule (SPEC §8) at the scale of small corpora, sometimes the defaults
    monster = draw(st.sampled_from([(10, 30.0, 15.0), (1, 0.0, 0.5), (2, 1.0, 1.0),
                                    (2, 2.0, 3.0), (3, 0.5, 15.0)]))
    # T (SPEC §8's blind discovery): small, so that chunks cross it; 0 turns it off
    chunk_threshold = draw(st.sampled_from([0, 2, 2, 3, 4, 10]))
    return Params(k=k, m=m, c=c, theta=theta, foreign=foreign, phi=phi, popular=popular,
                  monster_pages=monster[0], monster_pop=monster[1], monster_sd=monster[2],
                  chunk_threshold=chunk_threshold)


words_st = st.lists(st.sampled_from(WORDS), min_size=1, max_size=8)


@st.composite
def body_st(draw, passages: list[list[str]]) -> tuple[list[str], list[str]]:
    """(words, separators): a few pieces, mostly shared passages, some fresh words."""
    n = draw(st.integers(0, 4))
    pieces = [draw(st.sampled_from(passages)) if draw(st.integers(0, 3)) else draw(words_st)
              for _ in range(n)]
    words = [w for p in pieces for w in p]
    seps = [draw(st.sampled_from(SEPS)) for _ in words]
    return words, seps


def render_text(body: tuple[list[str], list[str]]) -> str:
    words, seps = body
    return "".join(w + s for w, s in zip(words, seps, strict=True))


HIDDEN = ["script", "style", "noscript", "template"]
BLOCKS = ["p", "div", "li", "h2", "section", "td"]
INLINE = ["b", "i", "span", "em", "a"]


@st.composite
def render_html(draw, body: tuple[list[str], list[str]]) -> str:
    """Simple well-formed HTML whose visible words come from the body (plus hidden ones)."""
    words, seps = body
    out: list[str] = []
    if draw(st.booleans()):
        hidden_words = " ".join(draw(words_st))
        out.append(f"<head><title>{hidden_words}</title><style>p {{color: red}}</style></head>")
    out.append("<body>")
    open_block: str | None = None
    for w, s in zip(words, seps, strict=True):
        action = draw(st.integers(0, 9))
        if action == 0:  # close / open a block element
            if open_block:
                out.append(f"</{open_block}>")
            open_block = draw(st.sampled_from(BLOCKS))
            if open_block == "td":  # keep tables well-formed
                open_block = "p"
            out.append(f"<{open_block}>")
        elif action == 1:
            out.append(draw(st.sampled_from(["<br>", "<br/>", "<hr>"])))
        elif action == 2:
            tag = draw(st.sampled_from(HIDDEN))
            out.append(f"<{tag}>{' '.join(draw(words_st))}</{tag}>")
        form = draw(st.integers(0, 5))
        if form == 0:  # the whole word in an inline element
            tag = draw(st.sampled_from(INLINE))
            out.append(f"<{tag}>{w}</{tag}>")
        elif form == 1 and len(w) > 1:  # a word split by inline markup: still one word
            tag = draw(st.sampled_from(INLINE))
            cut = draw(st.integers(1, len(w) - 1))
            out.append(f"<{tag}>{w[:cut]}</{tag}>{w[cut:]}")
        else:
            out.append(w)
        out.append(draw(st.sampled_from([s, s, "&nbsp;" if s else "", " &amp; " if s else ""])))
    if open_block:
        out.append(f"</{open_block}>")
    if draw(st.booleans()):
        out.append("<table><tr><td>" + " ".join(draw(words_st)) + "</td></tr></table>")
    out.append("</body>")
    return "".join(out)


url_st = st.builds(lambda s, h, p: f"{s}://{h}{p}",
                   st.sampled_from(["http", "https"]), st.sampled_from(HOSTS),
                   st.sampled_from(PATHS))


@st.composite
def record_st(draw, urls: list[str], bodies: list, html_ok: bool = True) -> dict:
    url = draw(st.sampled_from(urls))
    kind = draw(st.sampled_from(
        ["text"] * 8 + (["html"] * 3 if html_ok else []) + ["blank", "bad"]))
    rec: dict = {"url": url}
    if kind == "text":
        rec["text"] = render_text(draw(st.sampled_from(bodies)))
        if not rec["text"]:
            rec["text"] = " "  # an empty body would be a dead letter; keep it a document
    elif kind == "html":
        rec["html"] = draw(render_html(draw(st.sampled_from(bodies))))
    elif kind == "blank":  # a document without tokens
        rec["text"] = draw(st.sampled_from([" ", "\n\t ", "...", " \u0301 ", "<p></p>"]))
    else:  # a record that goes to the dead letters
        bad = draw(st.integers(0, 4))
        if bad == 0:
            rec["text"] = ""
        elif bad == 1:
            pass  # no body
        elif bad == 2:
            rec = {"url": "ftp://a.example.com/x", "text": "alpha beta gamma"}
        elif bad == 3:
            rec = {"text": "alpha beta gamma"}
        else:
            rec["html"], rec["text"] = "", ""
    if "url" in rec and draw(st.integers(0, 9)) == 0:
        rec["url"] = f"  {rec['url']} "  # surrounding blanks: the same URL
    ipk = draw(st.integers(0, 5))
    if ipk <= 2:
        rec["ip"] = IPS[ipk]
    elif ipk == 3:
        rec["ip"] = draw(st.sampled_from([None, "", 7]))
    return rec


@st.composite
def corpus_st(draw, max_records: int = 12, small: bool | None = None,
              html_ok: bool = True) -> tuple[list[dict], Params, list[int]]:
    """(records in arrival order, params, batch sizes)."""
    params = draw(params_st(small))
    passages = [draw(st.lists(st.sampled_from(WORDS), min_size=2, max_size=10))
                for _ in range(draw(st.integers(1, 4)))]
    bodies = [draw(body_st(passages)) for _ in range(draw(st.integers(1, 5)))]
    if draw(st.booleans()):  # a planted quilt: several bodies stitched together
        parts = draw(st.lists(st.sampled_from(bodies), min_size=2, max_size=4))
        bodies.append(([w for p in parts for w in p[0]], [s for p in parts for s in p[1]]))
    n_urls = draw(st.integers(1, 7))
    urls = draw(st.lists(url_st, min_size=n_urls, max_size=n_urls, unique=True))
    n = draw(st.integers(1, max_records))
    records = [draw(record_st(urls, bodies, html_ok)) for _ in range(n)]
    batches = draw(batches_st(len(records)))
    return records, params, batches


@st.composite
def batches_st(draw, n: int) -> list[int]:
    """Random batch sizes adding up to n (occasionally an empty batch)."""
    sizes: list[int] = []
    left = n
    while left > 0:
        if draw(st.integers(0, 9)) == 0:
            sizes.append(0)  # an empty batch
        b = draw(st.integers(1, left))
        sizes.append(b)
        left -= b
    return sizes or [0]


@st.composite
def quilt_corpus_st(draw, max_sources: int = 6) -> tuple[list[dict], Params, list[int]]:
    """A corpus shaped like the problem: sources with their own passages, pages stitched
    from slices of several of them, mirrors, re-fetches and noise, in a random order."""
    params = draw(params_st())
    n_src = draw(st.integers(2, max_sources))
    n_urls = n_src + draw(st.integers(1, 4))
    urls = draw(st.lists(url_st, min_size=n_urls, max_size=n_urls, unique=True))
    passages = [draw(st.lists(st.sampled_from(WORDS), min_size=3, max_size=10))
                for _ in range(n_src)]

    def body(words: list[str]) -> tuple[list[str], list[str]]:
        return words, [draw(st.sampled_from(SEPS[:6])) for _ in words]

    bodies = [body(p) for p in passages]
    for _ in range(draw(st.integers(1, 3))):  # quilts: slices of several passages
        chosen = draw(st.lists(st.integers(0, n_src - 1), min_size=2, max_size=n_src))
        words: list[str] = []
        for i in chosen:
            p = passages[i]
            a = draw(st.integers(0, len(p) - 1))
            b = draw(st.integers(a + 1, len(p)))
            words += p[a:b]
        bodies.append(body(words))
    records = [{"url": urls[i], "text": render_text(bodies[i])} for i in range(n_src)]
    for b in bodies[n_src:]:
        records.append({"url": draw(st.sampled_from(urls[n_src:])), "text": render_text(b)})
    for _ in range(draw(st.integers(0, 4))):  # mirrors, re-fetches, noise
        records.append(draw(record_st(urls, bodies)))
    for rec in records:
        if draw(st.integers(0, 4)) == 0 and "text" in rec and rec["text"].strip():
            rec["html"] = draw(render_html(body(rec.pop("text").split())))
        if draw(st.integers(0, 3)) == 0:
            rec["ip"] = draw(st.sampled_from(IPS))
    records = draw(st.permutations(records))
    return records, params, draw(batches_st(len(records)))


@st.composite
def away_and_back_st(draw, records: list[dict]) -> list[dict]:
    """Records to append to a corpus: a few of its pages re-fetched as another page (the
    body of another of its records) and then as themselves again, as a crawler finds a
    page changed and later changed back (a quilt turned original and quilted again)."""
    pages = [r for r in records if "url" in r]
    if not pages:
        return []
    out: list[dict] = []
    for rec in draw(st.lists(st.sampled_from(pages), max_size=3)):
        other = draw(st.sampled_from(pages))
        out.append({**{k: v for k, v in other.items() if k != "url"}, "url": rec["url"]})
        out.append(dict(rec))
    return out


def any_corpus_st(max_records: int = 12) -> st.SearchStrategy:
    return st.one_of(corpus_st(max_records=max_records), quilt_corpus_st())


@st.composite
def large_corpus_st(draw, min_docs: int = 20, max_docs: int = 40
                    ) -> tuple[list[dict], Params, list[int]]:
    """Tens of pages of hundreds of words (mostly unique grams, as on the web) with shared
    passages, quilts, mirrors and re-fetches, in batches of up to a dozen pages: enough
    fresh grams per batch for multi-chunk segments and for segment merges. Generated from
    one drawn seed (drawing thousands of words one by one would be slow)."""
    import random

    params = draw(params_st(small=False))
    rng = random.Random(draw(st.integers(0, 2**32 - 1), label="seed"))
    vocab = [f"w{i}" for i in range(3000)] + WORDS
    n_docs = rng.randint(min_docs, max_docs)
    hosts = [f"site{i}.com" for i in range(n_docs // 2)] + [
        f"b{i}.blogspot.com" for i in range(4)] + ["a.example.com", "b.example.com"]
    passages = [[rng.choice(vocab) for _ in range(rng.randint(10, 60))] for _ in range(8)]
    records: list[dict] = []
    urls: list[str] = []
    for _ in range(n_docs):
        if urls and rng.random() < 0.12:
            url = rng.choice(urls)  # a re-fetch
        else:
            url = f"http://{rng.choice(hosts)}/{rng.randint(0, 9)}"
            urls.append(url)
        if records and rng.random() < 0.1:  # a mirror of an earlier page
            text = rng.choice(records)["text"]
        else:
            words = [rng.choice(vocab) for _ in range(rng.randint(0, 400))]
            for _ in range(rng.randint(0, 4)):
                p = rng.choice(passages)
                a = rng.randint(0, len(p) - 1)
                at = rng.randint(0, len(words))
                words[at:at] = p[a:rng.randint(a + 1, len(p))]
            text = " ".join(words) or " "
        rec = {"url": url, "text": text}
        if rng.random() < 0.3:
            rec["ip"] = rng.choice(IPS)
        records.append(rec)
    batches, left = [], len(records)
    while left:
        b = rng.randint(1, min(left, 12))
        batches.append(b)
        left -= b
    return records, params, batches
