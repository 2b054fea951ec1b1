"""`streamdet explain` and `streamdet text`: one page of a state, for a person or a script.

`explain` says why the page is (not) quilted: its counts against θ and c, its sources
with their share of the patch grams (and whether they count toward c under φ), then the
page's visible text with each source's passages marked: a colour per source on a
terminal, `[n>` ... `<n]` markers otherwise (SPEC §5); the pages it is a partial
duplicate of (SPEC §7), with the span of each run of equal sentences in both; and its
near-duplicate cluster (SPEC §6) with its direct near-duplicates and their estimated
resemblance. `--json` gives the same as one object, spans as code-point offsets into
`text`. `text` prints the visible text as kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..console import escape_controls
from ..engine.badness import page_neighbourhoods
from ..engine.clusters import ClusterRole
from ..engine.doc_role import current
from ..engine.documents import DocResult, DocState
from ..engine.evidence import evidence
from ..engine.params import Params
from ..engine.sites import page_sites
from ..engine.text import unpack_text
from ..state.txn import Store
from .views import contains_figure, contains_of, pop_of

# ANSI colours for the sources, in cover order (then again from the first)
COLOURS = ("\x1b[1;31m", "\x1b[1;32m", "\x1b[1;34m", "\x1b[1;35m", "\x1b[1;36m",
           "\x1b[1;33m")
RESET = "\x1b[0m"
NEAR_SHOWN = 50  # direct near-duplicates listed (most alike first); the rest are counted
_SPACES = re.compile(r"\s+")


@dataclass
class Page:
    """A live document of a state, as these views read it."""

    url: str
    server: str
    seq: int
    doc: DocState
    result: DocResult
    sources: list[dict]  # with their evidence (engine.evidence)
    text: str | None  # None: not kept (a state written before texts were)
    params: Params
    docno: int = 0
    # SPEC §7: {"other", "diagonals"} with "spans" in this page (views.pairs_of)
    pairs: list[dict] = field(default_factory=list)
    # SPEC §6: {"cluster", "cluster_size", "exact_dups", "near": [{"url", "resemblance"}],
    # "near_total"} (near_of)
    cluster: dict = field(default_factory=dict)
    pop: int | None = None  # SPEC §8: its popular grams (None: not known)
    # SPEC §8: its host's and domain's figures (engine.sites; none: not kept, worker states)
    sites: list[dict] = field(default_factory=list)
    # SPEC §8: (occurrences in L, occurrences) of its chunks (None: not counted)
    contains: tuple[int, int] | None = None
    # SPEC §8: its neighbourhoods' figures (engine.badness; none: not kept, worker states)
    neighbourhoods: list[dict] = field(default_factory=list)

    @property
    def counted(self) -> int:
        """The sources that count toward c (all of them unless phi is set)."""
        return self.params.counted((s["grams"] for s in self.sources), self.doc.n_patch)


@dataclass
class Missing:
    """A URL the state does not hold, and the spellings of it that it does."""

    url: str
    near: list[str]

    @property
    def message(self) -> str:
        hint = f" Did you mean {' or '.join(self.near)}?" if self.near else ""
        return f"{self.url} is not in this state (never seen, or spelled differently).{hint}"


def _variants(url: str) -> list[str]:
    """Spellings of a URL a person may have meant: trailing slash, scheme, www."""
    out = []
    out.append(url[:-1] if url.endswith("/") else url + "/")
    if url.startswith("https://"):
        out.append("http://" + url[8:])
    elif url.startswith("http://"):
        out.append("https://" + url[7:])
    for scheme in ("https://", "http://"):
        if url.startswith(scheme + "www."):
            out.append(scheme + url[len(scheme) + 4:])
        elif url.startswith(scheme):
            out.append(scheme + "www." + url[len(scheme):])
    return out


def _known(txn, url: str) -> bool:
    try:
        return txn.url_entry(url) is not None
    except UnicodeError:
        return False


def holds(store: Store, url: str) -> bool:
    """Whether the state holds a live version of `url` (as given, not its variants)."""
    return _known(store.begin(), url.strip())


def look_up(store: Store, url: str) -> Page | Missing:
    """The page of `url`, or its absence (with the spellings that are known)."""
    txn = store.begin()
    url = url.strip()
    if not _known(txn, url):
        return Missing(url, [v for v in _variants(url) if _known(txn, v)])
    params = Params.from_fingerprint(store.meta("params"))
    docno, seq = txn.url_entry(url)
    doc = txn.doc(docno)
    server, _ = txn.name(docno)
    result = current(txn, doc)
    packed = txn.text(docno)
    return Page(url, server, seq, doc, result, evidence(result, doc, packed, params.k),
                unpack_text(packed), params, docno, cluster=cluster_of(txn, docno, url),
                pop=pop_of([store], docno), sites=page_sites(txn, url, params),
                contains=contains_of([store], docno),
                neighbourhoods=page_neighbourhoods(txn, url))


def near_rows(txn, near: list[tuple[int, float]]) -> list[dict]:
    """Near-duplicates as {"url", "resemblance"}, the first NEAR_SHOWN of them."""
    return [{"url": txn.url_of(d), "resemblance": round(r, 4)} for d, r in near[:NEAR_SHOWN]]


def cluster_of(txn, docno: int, url: str) -> dict:
    """The page's cluster and direct near-duplicates (SPEC §6)."""
    cluster, size, twins = ClusterRole.row(txn, docno, url)
    sk = ClusterRole.sketch_of(txn, docno)
    near = ClusterRole.near_of(txn, sk, exclude=docno) if sk is not None else []
    return {"cluster": cluster, "cluster_size": size, "exact_dups": twins,
            "near": near_rows(txn, near), "near_total": len(near)}


def verdict(page: Page) -> str:
    """Why the page is or is not quilted, in a sentence."""
    return verdict_sentence(page.result.quilted, page.doc.patch_fraction < page.params.theta,
                            page.counted < page.params.c)


def verdict_sentence(quilted: bool, low: bool, few: bool) -> str:
    """The sentence for a verdict: quilted, or which of the two tests failed (too `low` a
    patch fraction, too `few` sources counted)."""
    if quilted:
        return "QUILTED: enough of the page is shared, and it takes many foreign sources"
    if low and few:
        return "not quilted: too little shared text and too few sources"
    if low:
        return "not quilted: too little of the page is shared text"
    return "not quilted: the shared text comes from too few foreign sources"


def summary(page: Page) -> list[str]:
    """The counts against the parameters, and the sources with their shares."""
    p, doc = page.params, page.doc
    frac, n_pg = doc.patch_fraction, doc.n_patch
    foreign_pg = doc.foreign_patch_grams()
    counted = page.counted
    phi = f", {counted} with a share >= phi {p.phi}" if p.phi else ""
    lines = [
        f"{page.url}",
        f"  server ({p.foreign}): {page.server or '-'}",
        f"  {doc.n_grams} distinct {p.k}-grams; {n_pg} are patch grams "
        f"(shared by 2..{p.m} documents): patch fraction {frac:.3f} "
        f"{'>=' if frac >= p.theta else '<'} theta {p.theta}",
        f"  {foreign_pg} patch grams are also found on other servers; "
        f"{n_pg - foreign_pg} only on this server",
        f"  greedy cover: {len(page.sources)} source(s){phi} "
        f"{'>=' if counted >= p.c else '<'} c {p.c}",
    ]
    for i, s in enumerate(page.sources, 1):
        mark = "" if p.counts(s["grams"], n_pg) else "  (below phi: does not count)"
        lines.append(f"    [{i}] {s['grams']:6d} new grams ({100 * s['share']:5.1f}% of patch) "
                     f"from {s['url']}{mark}")
    lines.append(f"  {verdict(page)} (events so far: {page.seq})")
    if page.pop is not None:
        lines.append(f"  pop: {page.pop} of its grams are popular phrases (on {p.popular} or "
                     "more pages, `streamdet phrases`)")
    for s in page.sites:
        if s["pages"]:
            mark = ": a MONSTER candidate" if s["monster"] else ""
            lines.append(f"  {s['level']} {s['site']}: {s['pages']} pages, pop mean "
                         f"{s['pop_mean']:.1f} sd {s['pop_sd']:.1f}, patch mean "
                         f"{s['patch_mean']:.3f}, {s['quilted']} quilted{mark}")
    if page.contains is not None:
        inside, total = page.contains
        lines.append(f"  contains(L, f): {contains_figure(page.contains):.3f} ({inside} of its "
                     f"{total} paragraph chunks are in the labelled set)")
    for n in page.neighbourhoods:
        if n["docs"]:
            mark = ": a BAD neighbourhood" if n["bad"] else ""
            lines.append(f"  neighbourhood {n['neighbourhood']}: {n['docs']} pages, badness "
                         f"{n['badness']:.3f}{mark}")
    return lines


def owners(text: str, sources: list[dict]) -> list[int]:
    """Per code point of `text`: the first source (1-based, in cover order) whose spans
    hold it, 0 for none. Sources' spans may overlap (windows of different grams share
    tokens); the earlier source, which covered more, keeps the overlap."""
    owner = [0] * len(text)
    for i in range(len(sources), 0, -1):
        for a, b in sources[i - 1]["spans"] or ():
            owner[a:b] = [i] * (b - a)
    return owner


def _one_space(run: re.Match) -> str:
    """A run of white space as one: a line break where it holds one (a block boundary)."""
    return "\n" if "\n" in run.group() else " "


def marked(text: str, sources: list[dict], colour: bool) -> str:
    """The text with each source's passages marked; a run of white space shown as one
    space, or one line break where it holds one (the page's blocks stay lines)."""
    owner = owners(text, sources)
    out, i = [], 0
    while i < len(text):
        j = i
        while j < len(text) and owner[j] == owner[i]:
            j += 1
        part = escape_controls(_SPACES.sub(_one_space, text[i:j]))
        n = owner[i]
        if n == 0:
            out.append(part)
        elif colour:
            out.append(f"{COLOURS[(n - 1) % len(COLOURS)]}{part}{RESET}")
        else:
            out.append(f"[{n}>{part}<{n}]")
        i = j
    return "".join(out).strip()


def pair_lines(page: Page) -> list[str]:
    """The page's partial duplicates (SPEC §7), with what each run of sentences spans."""
    if not page.pairs:
        return [f"  partial duplicates: none (no run of {page.params.gamma} or more equal "
                "sentences with a page on another server)"]
    lines = [f"  partial duplicates: {len(page.pairs)} page(s) share runs of "
             f">= {page.params.gamma} equal sentences"]
    for pair in page.pairs:
        runs = ", ".join(f"{d['sentences']} sentences at {d['spans'][0]}-{d['spans'][1]} "
                         f"(there {d['other_spans'][0]}-{d['other_spans'][1]})"
                         for d in pair["diagonals"])
        lines.append(f"    {pair['other']}: {runs}")
    return lines


def cluster_lines(info: dict) -> list[str]:
    """A cluster and its direct near-duplicates (SPEC §6), for a person."""
    if not info:
        return []
    size, twins = info["cluster_size"], info["exact_dups"]
    if size == 1:
        head = "  near-duplicates: none (a cluster of one)"
    else:
        head = (f"  near-duplicate cluster {info['cluster']}: {size} pages, {twins} exact "
                f"duplicate(s) of this one; {info['near_total']} direct near-duplicate(s)")
    lines = [head]
    for n in info["near"]:
        lines.append(f"    {n['resemblance']:.3f} estimated resemblance  {n['url']}")
    if info["near_total"] > len(info["near"]):
        lines.append(f"    ... and {info['near_total'] - len(info['near'])} more")
    return lines


def explain_text(page: Page, colour: bool) -> str:
    """The page for a person; what it quotes of the page (text, URLs) has its control
    characters escaped, so only the colours' own escapes reach a terminal."""
    lines = [escape_controls(line)
             for line in summary(page) + pair_lines(page) + cluster_lines(page.cluster)]
    if page.text is None:
        lines.append("  (the page's text was not kept: it was stored before texts were)")
    else:
        legend = "colours" if colour else "[n> ... <n]"
        lines += ["", f"text, with each source's passages marked ({legend}):", "",
                  marked(page.text, page.sources, colour)]
    return "\n".join(lines)


def explain_json(page: Page) -> dict:
    p, doc = page.params, page.doc
    return {
        "url": page.url,
        "server": page.server,
        "n_grams": doc.n_grams,
        "n_patch_grams": doc.n_patch,
        "patch_fraction": doc.patch_fraction,
        "foreign_patch_grams": doc.foreign_patch_grams(),
        "sources": page.sources,
        "counted": page.counted,
        "quilted": page.result.quilted,
        "verdict": verdict(page),
        "seq": page.seq,
        "pop": page.pop,
        "sites": page.sites,
        "contains": contains_figure(page.contains),
        "chunks": None if page.contains is None else {"in_l": page.contains[0],
                                                      "counted": page.contains[1]},
        "neighbourhoods": page.neighbourhoods,
        "params": p.to_dict(),
        "partials": page.pairs,
        **page.cluster,
        "text": page.text,
    }
