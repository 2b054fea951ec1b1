"""A brute-force reference for SPEC §1, written straight from the definition.

Deliberately independent of the engine's code paths: no regex tokenizer, no hashing, no
postings, no deltas, no bitmasks, no selectolax. It recomputes everything from scratch
from the list of records, in arrival order:

- tokens by a per-character loop over `unicodedata.category` (L*, N*, M*); each token is
  casefolded after it is cut (SPEC: "maximal runs of ..., casefolded"). The only engine
  function used is `is_segmented_letter` (the Unicode Script property is not in
  `unicodedata`);
- visible text of `html` by the stdlib `html.parser`;
- grams as exact tuples of k tokens;
- docs(g) over the latest version of each URL;
- the sticky exception ("a gram that once had more than m documents may stay common") by a
  sequential replay of counts, one record at a time, a re-fetch withdrawing the old
  version before adding the new one;
- servers by `streamdet.engine.servers.server_of` (the brief allows it: the PSL lives there);
- the greedy cover with Python sets;
- spans (SPEC §5) by windows of tokens with their offsets, located in the visible text
  the engine keeps (for `html`, engine.text.visible_text: where block boundaries put
  spaces is the engine's to choose, and offsets count them).

`reference(records, params)` returns {url: row}, each row shaped like
`streamdet.reading.views.dump_rows`: {"url", "n_grams", "n_patch_grams",
"patch_fraction", "sources": [{"url", "grams"}, ...] in greedy order, "quilted", "pop"}:
pop(d) (SPEC §8) is the number of d's gram tuples on at least P live documents, counted
over the latest versions like docs(g), with no cap and no sticky exception.
`ref_phrases(records, params)` lists every gram tuple on two or more of them (SPEC §8's
`phrases`).

SPEC §7 (partial duplicates located by sentences, Zhang et al. 2010), the same way:

- sentences by a per-character loop that cuts the kept visible text (`RefDoc.shown`, where
  the engine puts block boundaries as line breaks) at every terminator of TERMINATORS and
  every line break of LINE_BREAKS (the characters `str.splitlines` splits at); each piece
  is tokenized with `ref_token_spans`, and only pieces of 5 tokens or more are sentences
  (the others do not count in positions);
- SPEC §9's bound on repeats (`ref_page_sentences`): each run of consecutive sentences with
  one token tuple is one sentence spanning the run, and a tuple on more than m of the
  page's positions then is common in that page (None: it keeps its position, matches
  nothing and is not held by the page);
- a sentence's key is its exact token tuple; common keys are those on more than m live
  documents, plus the same sticky exception as for grams (`ever_common` over a replay of
  the documents' key sets in arrival order);
- diagonals by a plain O(n·n′) match matrix per pair of live documents on different
  servers, each maximal run of matching non-common keys of length >= γ reported with its
  spans in both texts.

`ref_partials(records, params)` returns the rows of `streamdet dump --partials`:
[{"url", "other", "diagonals": [{"spans", "other_spans", "sentences"}, ...]}, ...] sorted by
(url, other), url < other.

SPEC §6 (near-duplicates and clusters) fixes its hashes, so its reference hashes too, with
Python integers and `mmh3` as the SPEC names it: H(g) per gram tuple, each min-hash a min
over the gram set, supershingles from the packed min-hashes; near-duplicates by comparing
the supershingles of every pair of live documents, clusters by union-find over those pairs
(`ref_clusters`: {url: {"cluster", "cluster_size", "exact_dups"}}).
"""

from __future__ import annotations

import functools
import re
import string
import struct
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlsplit

import mmh3

from streamdet.engine.servers import server_of
from streamdet.engine.text import visible_text
from streamdet.engine.tokens import is_segmented_letter

# ----------------------------------------------------------------------------- tokens


def ref_token_spans(text: str) -> list[tuple[str, int, int]]:
    """SPEC §1 tokens, one character at a time, each with its [start, end) offsets in
    code points of `text` (SPEC §5).

    A token is a maximal run of L*/N*/M* characters; a letter of a segmented script
    (Han, Hiragana, Katakana, Hangul syllables, Thai, Lao, Khmer, Myanmar) is a token of
    its own together with the marks that follow it; a mark with nothing before it in its
    run (start of a run) is dropped. Each token is casefolded once it is cut.
    """
    tokens: list[tuple[str, int, int]] = []
    cur: list[str] = []
    begin = 0
    kind: str | None = None  # None (between tokens), "word" or "seg"

    def flush(at: int) -> None:
        nonlocal cur, kind
        if cur:
            tokens.append(("".join(cur).casefold(), begin, at))
        cur = []
        kind = None

    for i, ch in enumerate(text):
        major = unicodedata.category(ch)[0]
        if major == "L" and is_segmented_letter(ch):
            flush(i)
            cur, kind, begin = [ch], "seg", i
        elif major in ("L", "N"):
            if kind != "word":
                flush(i)
                kind, begin = "word", i
            cur.append(ch)
        elif major == "M":
            if kind is not None:
                cur.append(ch)  # marks follow whatever token is open (word or seg letter)
            # else: a mark with no letter/number before it: dropped
        else:
            flush(i)
    flush(len(text))
    return tokens


def ref_tokenize(text: str) -> list[str]:
    """SPEC §1 tokens (ref_token_spans without the offsets)."""
    return [t for t, _, _ in ref_token_spans(text)]


# ----------------------------------------------------------------------------- html

HIDDEN_TAGS = frozenset({"script", "style", "noscript", "template", "head"})

# Elements that separate words (HTML block-level / flow-breaking elements, plus <br>).
BLOCK_TAGS = frozenset(
    """address article aside blockquote body br caption center dd details dialog dir div dl
    dt fieldset figcaption figure footer form frameset h1 h2 h3 h4 h5 h6 header hgroup hr
    html legend li main menu nav ol optgroup option p pre section summary table tbody td
    tfoot th thead title tr ul""".split()
)

VOID_TAGS = frozenset("area base br col embed hr img input link meta source track wbr".split())


class _Visible(HTMLParser):
    def __init__(self, boundary: str) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden = 0
        self.boundary = boundary

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in HIDDEN_TAGS:
            self.hidden += 1
        if tag in BLOCK_TAGS:
            self.parts.append(self.boundary)

    def handle_startendtag(self, tag: str, attrs: Any) -> None:
        # <br/> and friends: a separator, never an open hidden element
        if tag in BLOCK_TAGS:
            self.parts.append(self.boundary)

    def handle_endtag(self, tag: str) -> None:
        if tag in HIDDEN_TAGS and self.hidden:
            self.hidden -= 1
        if tag in BLOCK_TAGS:
            self.parts.append(self.boundary)

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.parts.append(data)


def ref_visible_text(html: str, boundary: str = " ") -> str:
    """Visible text of simple, well-formed HTML (what the equivalence tests generate), with
    `boundary` at every block element's start and end."""
    p = _Visible(boundary)
    p.feed(html)
    p.close()
    return "".join(p.parts)


# ----------------------------------------------------------------------------- records


@dataclass(frozen=True)
class RefDoc:
    url: str
    text: str
    ip: str | None
    # SPEC §5 counts offsets in the visible text the detector keeps and shows (`streamdet
    # text`); which spaces stand for block boundaries is its own, so for `html` the spans
    # are located in engine.text.visible_text (tokens and grams stay the reference's own)
    shown: str = ""
    lines: str = ""  # SPEC §8: the visible text with a line break at every block boundary


def ref_record(rec: Mapping[str, Any]) -> RefDoc | None:
    """SPEC §2 validity, independently: None for a record that goes to the dead letters,
    and for a crawler trap (SPEC §8: a `trap` event, and no state sees the page)."""
    url = rec.get("url")
    if not isinstance(url, str) or not url.strip():
        return None
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    if ref_is_trap(url):
        return None
    if any(ord(ch) < 0x21 or ord(ch) == 0x7F for ch in url):
        return None
    html, text = rec.get("html"), rec.get("text")
    # Reading of SPEC when both are present: html wins (the engine's choice too).
    if isinstance(html, str) and html:
        body, lines = ref_visible_text(html), ref_visible_text(html, "\n")
    elif isinstance(text, str) and text:
        body = lines = text
    else:
        return None
    ip = rec.get("ip")
    shown = visible_text(html) if isinstance(html, str) and html else body
    return RefDoc(url, body, ip if isinstance(ip, str) and ip else None, shown, lines)


# ----------------------------------------------------------------------------- grams


def ref_grams(tokens: list[str], k: int) -> frozenset[tuple[str, ...]]:
    """The set of k-token windows (none when fewer than k tokens)."""
    return frozenset(tuple(tokens[i : i + k]) for i in range(len(tokens) - k + 1))


def _param(params: Any, name: str) -> Any:
    return params[name] if isinstance(params, Mapping) else getattr(params, name)


def _has(params: Any, name: str) -> bool:
    return name in params if isinstance(params, Mapping) else hasattr(params, name)


# ----------------------------------------------------------------------------- cover


def ref_cover_sets(
    patch: frozenset, candidates: Mapping[str, frozenset]
) -> list[tuple[str, frozenset]]:
    """Greedy cover of `patch` by candidate documents (url -> gram set).

    Repeatedly take the candidate holding most still-uncovered grams; ties: most grams of
    `patch` held overall, then the smallest URL (code-point order); stop when no candidate
    covers anything new. Returns (url, the grams it newly covered) in pick order."""
    held = {u: patch & g for u, g in candidates.items()}
    held = {u: h for u, h in held.items() if h}
    uncovered = set(patch)
    out: list[tuple[str, frozenset]] = []
    while uncovered and held:
        best = None
        best_key = None
        for u, h in held.items():
            gain = len(h & uncovered)
            if gain == 0:
                continue
            key = (-gain, -len(h), u)
            if best_key is None or key < best_key:
                best, best_key = u, key
        if best is None:
            break
        h = held.pop(best)
        out.append((best, frozenset(h & uncovered)))
        uncovered -= h
    return out


def ref_cover(patch: frozenset, candidates: Mapping[str, frozenset]) -> list[tuple[str, int]]:
    """(url, newly covered count) in pick order."""
    return [(u, len(new)) for u, new in ref_cover_sets(patch, candidates)]


def ref_spans(text: str, k: int, covered: frozenset) -> list[list[int]]:
    """SPEC §5: the union, over every occurrence in `text` of a window in `covered`, of
    [start of its first token, end of its last token), merged where ranges overlap or
    touch, sorted."""
    ranges = sorted((a, b) for gram, a, b in ref_windows(text, k) if gram in covered)
    out: list[list[int]] = []
    for a, b in ranges:
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


@functools.lru_cache(maxsize=8)
def ref_windows(text: str, k: int) -> tuple[tuple[tuple[str, ...], int, int], ...]:
    """Every window of k tokens of `text`, in order, with the start of its first token
    and the end of its last: cut once per text, as every source of a page asks for its
    spans (a page with many sources was tokenized once for each of them)."""
    toks = ref_token_spans(text)
    return tuple((tuple(t for t, _, _ in toks[i : i + k]), toks[i][1], toks[i + k - 1][2])
                 for i in range(len(toks) - k + 1))


# ----------------------------------------------------------------------------- reference


def ever_common(seq: Iterable[tuple[str, frozenset]], m: int) -> set:
    """Grams whose live document count ever exceeded m, replaying arrivals in order."""
    counts: dict = {}
    current: dict[str, frozenset] = {}
    common: set = set()
    for url, grams in seq:
        old = current.get(url)
        if old is not None:
            for g in old:
                counts[g] -= 1
        for g in grams:
            n = counts.get(g, 0) + 1
            counts[g] = n
            if n > m:
                common.add(g)
        current[url] = grams
    return common


def reference(records: Iterable[Mapping[str, Any]], params: Any, stop: Iterable[tuple] = (),
              labels: Iterable[tuple] = ()) -> dict[str, dict]:
    """{url: row} for every live document after all records, per SPEC §1; with SPEC §8's
    pop(d) and contains(L, f), for the stop chunks `stop` and the labelled chunks
    `labels` (token tuples)."""
    k, m = _param(params, "k"), _param(params, "m")
    c, theta, foreign = _param(params, "c"), _param(params, "theta"), _param(params, "foreign")
    phi = _param(params, "phi") if _has(params, "phi") else 0.0  # SPEC §5: counted sources
    popular = _param(params, "popular") if _has(params, "popular") else 5  # SPEC §8: P

    arrivals: list[tuple[str, frozenset]] = []
    latest: dict[str, tuple[frozenset, str]] = {}  # url -> (grams, server)
    texts: dict[str, str] = {}  # url -> visible text of its latest version
    paragraphs: dict[str, list[tuple]] = {}  # url -> chunks of its latest version
    for rec in records:
        doc = ref_record(rec)
        if doc is None:
            continue
        grams = ref_grams(ref_tokenize(doc.text), k)
        texts[doc.url] = doc.shown
        paragraphs[doc.url] = ref_chunks(doc.lines)
        arrivals.append((doc.url, grams))
        latest[doc.url] = (grams, server_of(doc.url, doc.ip, foreign))

    sticky = ever_common(arrivals, m)
    docs_of: dict = {}
    for url, (grams, _) in latest.items():
        for g in grams:
            docs_of.setdefault(g, set()).add(url)

    contains = ref_contains(paragraphs, params, stop, labels)
    rows: dict[str, dict] = {}
    for url in sorted(latest):
        grams, server = latest[url]
        patch = frozenset(
            g for g in grams if 2 <= len(docs_of[g]) <= m and g not in sticky
        )
        candidates = {
            u: latest[u][0]
            for u in latest
            if u != url and (foreign == "none" or latest[u][1] != server)
        }
        cover = ref_cover_sets(patch, candidates)
        n, p = len(grams), len(patch)
        frac = p / n if n else 0.0
        rows[url] = {
            "url": url,
            "n_grams": n,
            "n_patch_grams": p,
            "patch_fraction": frac,
            "sources": [{"url": u, "grams": len(new), "share": len(new) / p,
                         "spans": ref_spans(texts[url], k, new)} for u, new in cover],
            "quilted": frac >= theta and sum(len(new) >= phi * p for _, new in cover) >= c,
            "pop": sum(1 for g in grams if len(docs_of[g]) >= popular),  # SPEC §8
            "contains": float(contains[url]),  # SPEC §8
            "contains_exact": contains[url],
        }
    return rows


# ----------------------------------------------------------------------------- chunks

MIN_CHUNK_TOKENS = 3  # SPEC §8: a chunk of fewer tokens is a stop chunk


def ref_chunks(lines: str) -> list[tuple]:
    """SPEC §8's chunks of a visible text: every line (pieces between LINE_BREAKS
    characters) as its token tuple, in order, empty and short ones included."""
    pieces = re.split("[" + re.escape(LINE_BREAKS) + "]", lines)
    return [tuple(ref_tokenize(piece)) for piece in pieces]


def ref_contains(paragraphs: Mapping[str, list[tuple]], params: Any,
                 stop: Iterable[tuple] = (), labels: Iterable[tuple] = ()
                 ) -> dict[str, Fraction]:
    """contains(L, f) of every live document (its chunks `paragraphs[url]`), straight from
    SPEC §8: L = chunks on at least T live documents, plus the labelled ones, never a stop
    chunk; contains = occurrences in L / occurrences that are not stop chunks."""
    threshold = _param(params, "chunk_threshold") if _has(params, "chunk_threshold") else 10
    stop = set(stop)

    def is_stop(c: tuple) -> bool:
        return len(c) < MIN_CHUNK_TOKENS or c in stop

    docs_with: dict[tuple, int] = {}
    for chunks in paragraphs.values():
        for c in set(chunks):
            docs_with[c] = docs_with.get(c, 0) + 1
    labelled = set(labels)
    in_l = {c for c, n in docs_with.items()
            if (threshold > 0 and n >= threshold) or c in labelled}
    out = {}
    for url, chunks in paragraphs.items():
        kept = [c for c in chunks if not is_stop(c)]
        out[url] = Fraction(sum(c in in_l for c in kept), len(kept)) if kept else Fraction(0)
    return out


def ref_badness(rows: Mapping[str, Mapping]) -> dict[str, dict]:
    """SPEC §8's neighbourhoods of the live documents (`rows`: reference rows) with their
    figures {"docs", "badness", "bad"}: badness the mean of contains(L, f) over the
    neighbourhood, bad when above μ + σ of the badness of the neighbourhoods of 2
    documents or more (and itself of 2 or more). Figures in the engine's fixed point
    (docs/replication.md): contains and badness in units of 2^-32, rounded down; badness
    shown to 6 places."""
    one = 1 << 32
    members: dict[str, list[int]] = {}
    for url, row in rows.items():
        value = int(row["contains_exact"] * one)  # floor: a Fraction >= 0
        for n in ref_neighbourhoods(url, 16):
            members.setdefault(n, []).append(value)
    badness = {n: sum(vs) // len(vs) for n, vs in members.items()}
    population = [Fraction(b) for n, b in badness.items() if len(members[n]) >= 2]
    out = {}
    for n, b in badness.items():
        bad = False
        if population and len(members[n]) >= 2:
            mu = sum(population) / len(population)
            variance = sum((x - mu) ** 2 for x in population) / len(population)
            bad = b > mu and (b - mu) ** 2 > variance
        out[n] = {"docs": len(members[n]), "badness": round(b / one, 6), "bad": bad}
    return out


def ref_phrases(records: Iterable[Mapping[str, Any]], params: Any) -> list[dict]:
    """SPEC §8's `phrases`: every gram on two or more live documents as {"phrase", "docs"},
    most documents first, then by phrase (code-point order); phrase = its k tokens joined
    by spaces."""
    k = _param(params, "k")
    latest: dict[str, frozenset] = {}
    for rec in records:
        doc = ref_record(rec)
        if doc is not None:
            latest[doc.url] = ref_grams(ref_tokenize(doc.text), k)
    docs_of: dict = {}
    for grams in latest.values():
        for g in grams:
            docs_of[g] = docs_of.get(g, 0) + 1
    rows = [(-n, " ".join(g)) for g, n in docs_of.items() if n >= 2]
    rows.sort(key=lambda r: (r[0], r[1].encode("utf-8")))
    return [{"phrase": phrase, "docs": -neg} for neg, phrase in rows]


def ref_sites(rows: Mapping[str, Mapping], params: Any) -> dict[tuple[str, str], dict]:
    """SPEC §8's site figures from the reference's rows (pop, patch fraction, quilted per
    live URL): {(site, level): {"pages", "pop_mean", "pop_sd", "patch_mean", "quilted",
    "monster"}} per host and per registered domain, σ the population one, straight from
    the lists."""
    from streamdet.engine.servers import registered_domain

    members: dict[tuple[str, str], list[Mapping]] = {}
    for url, row in rows.items():
        host = (urlsplit(url).hostname or "").rstrip(".").lower()
        members.setdefault((host, "host"), []).append(row)
        members.setdefault((registered_domain(host), "domain"), []).append(row)
    out = {}
    for site, rs in members.items():
        pops = [r["pop"] for r in rs]
        mean = Fraction(sum(pops), len(pops))
        variance = sum((p - mean) ** 2 for p in pops) / len(pops)
        out[site] = {
            "pages": len(rs),
            "pop_mean": float(mean),
            "pop_sd": float(variance) ** 0.5,
            "patch_mean": sum(r["patch_fraction"] for r in rs) / len(rs),
            "quilted": sum(bool(r["quilted"]) for r in rs),
            "monster": (len(rs) >= _param(params, "monster_pages")
                        and mean >= Fraction(_param(params, "monster_pop"))
                        and variance < Fraction(_param(params, "monster_sd")) ** 2),
        }
    return out


# ----------------------------------------------------------------------------- sentences

# SPEC §7: sentence terminators, and the line breaks (those `str.splitlines` splits at;
# "\r\n" is two of them in a row, which makes an empty piece between them, never a sentence)
TERMINATORS = ".!?…。！？؟।"
LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"

MIN_SENTENCE_TOKENS = 5


def ref_sentences(text: str) -> list[tuple[tuple[str, ...], int, int]]:
    """SPEC §7 sentences of `text`: (token tuple, start of its first token, end of its last
    token), offsets in code points of the whole `text`.

    `text` is cut at every character of TERMINATORS or LINE_BREAKS, one character at a
    time; each piece is tokenized (SPEC §1); pieces of fewer than 5 tokens are skipped and
    take no position, so the index in the returned list is the sentence's position."""
    pieces: list[tuple[int, int]] = []  # [begin, end) of each piece between cuts
    begin = 0
    for i, ch in enumerate(text):
        if ch in TERMINATORS or ch in LINE_BREAKS:
            pieces.append((begin, i))
            begin = i + 1
    pieces.append((begin, len(text)))

    out: list[tuple[tuple[str, ...], int, int]] = []
    for a, b in pieces:
        toks = ref_token_spans(text[a:b])
        if len(toks) < MIN_SENTENCE_TOKENS:
            continue
        out.append((tuple(t for t, _, _ in toks), a + toks[0][1], a + toks[-1][2]))
    return out


def ref_page_sentences(text: str, m: int) -> list[tuple[tuple[str, ...] | None, int, int]]:
    """`ref_sentences` with SPEC §9's bound on repeats: a run of consecutive sentences with
    equal token tuples is one sentence from the first's start to the last's end; a tuple on
    more than m of the positions left is common in the page, its key None."""
    runs: list[tuple[tuple[str, ...], int, int]] = []
    for key, start, end in ref_sentences(text):
        if runs and runs[-1][0] == key:
            runs[-1] = (key, runs[-1][1], end)
        else:
            runs.append((key, start, end))
    count: dict[tuple[str, ...], int] = {}
    for key, _, _ in runs:
        count[key] = count.get(key, 0) + 1
    return [(key if count[key] <= m else None, start, end) for key, start, end in runs]


def ref_diagonals(
    keys_u: list[tuple[str, ...] | None], keys_v: list[tuple[str, ...] | None], common: set,
    gamma: int
) -> list[tuple[int, int, int]]:
    """Maximal diagonals (i, j, n) of the match matrix M[i][j] = (keys_u[i] == keys_v[j],
    not None, and that key is not common) with n >= gamma, sorted by (i, j)."""
    nu, nv = len(keys_u), len(keys_v)

    def match(i: int, j: int) -> bool:
        return (0 <= i < nu and 0 <= j < nv and keys_u[i] is not None
                and keys_u[i] == keys_v[j] and keys_u[i] not in common)

    out: list[tuple[int, int, int]] = []
    for i in range(nu):
        for j in range(nv):
            if not match(i, j) or match(i - 1, j - 1):
                continue  # not a true cell, or not the first cell of its run
            n = 1
            while match(i + n, j + n):
                n += 1
            if n >= gamma:
                out.append((i, j, n))
    return out


def ref_partials(records: Iterable[Mapping[str, Any]], params: Any) -> list[dict]:
    """SPEC §7 partial duplicates among the live documents after all records: one row per
    pair (url < other, code-point order) with at least one diagonal of >= γ sentences,
    sorted by (url, other)."""
    m, foreign = _param(params, "m"), _param(params, "foreign")
    gamma = _param(params, "gamma") if _has(params, "gamma") else 3

    arrivals: list[tuple[str, frozenset]] = []
    latest: dict[str, tuple[list[tuple[tuple[str, ...] | None, int, int]], str]] = {}
    for rec in records:
        doc = ref_record(rec)
        if doc is None:
            continue
        sentences = ref_page_sentences(doc.shown, m)
        held = frozenset(key for key, _, _ in sentences if key is not None)
        arrivals.append((doc.url, held))
        latest[doc.url] = (sentences, server_of(doc.url, doc.ip, foreign))

    docs_of: dict[tuple[str, ...], set[str]] = {}
    for url, (sentences, _) in latest.items():
        for key, _, _ in sentences:
            if key is not None:
                docs_of.setdefault(key, set()).add(url)
    common = {key for key, holders in docs_of.items() if len(holders) > m}
    common |= ever_common(arrivals, m)

    rows: list[dict] = []
    urls = sorted(latest)
    for a, u in enumerate(urls):
        sent_u, server_u = latest[u]
        for v in urls[a + 1 :]:
            sent_v, server_v = latest[v]
            if foreign != "none" and server_u == server_v:
                continue
            diagonals = [
                {
                    "spans": [sent_u[i][1], sent_u[i + n - 1][2]],
                    "other_spans": [sent_v[j][1], sent_v[j + n - 1][2]],
                    "sentences": n,
                }
                for i, j, n in ref_diagonals(
                    [key for key, _, _ in sent_u], [key for key, _, _ in sent_v], common, gamma
                )
            ]
            if diagonals:
                rows.append({"url": u, "other": v, "diagonals": diagonals})
    return rows


# ----------------------------------------------------------------------------- SPEC §6
# Near-duplicates and clusters (Broder 1997; Fetterly 2005), straight from SPEC §6 with
# Python integers: every gram's hash H(g) from its k tokens, every min-hash as a min over
# the gram set, supershingles from the packed min-hashes, near-duplicates by comparing the
# 6 supershingles of every pair of live documents (O(n²)), clusters by a plain union-find
# over those pairs, exact duplicates by equal token tuples.

_M64 = (1 << 64) - 1
_B = 0x9E3779B97F4A7C15


def ref_mix(x: int) -> int:
    """The splitmix64 finaliser on a Python int."""
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def ref_gram_hash(window: tuple[str, ...]) -> int:
    """H(g): mix(Σⱼ tⱼ·B^(k−1−j) mod 2⁶⁴), tⱼ the low 64 bits of MurmurHash3 x64_128."""
    k = len(window)
    total = 0
    for j, tok in enumerate(window):
        t = mmh3.hash64(tok.encode("utf-8"), seed=0, signed=False)[0]
        total = (total + t * pow(_B, k - 1 - j, 1 << 64)) & _M64
    return ref_mix(total)


def ref_sketch(tokens: list[str], k: int) -> list[int]:
    """The 84 min-hashes of a token sequence's gram set ([] when it has no grams)."""
    hashes = {ref_gram_hash(g) for g in ref_grams(tokens, k)}
    if not hashes:
        return []
    seeds = [ref_mix(((i + 1) * _B) & _M64) for i in range(84)]
    return [min(ref_mix(h ^ s) for h in hashes) for s in seeds]


def ref_supershingles(mins: list[int]) -> list[int]:
    """Supershingle j: MurmurHash3 x64_128 (seed 0, low 64 bits) of h₁₄ⱼ…h₁₄ⱼ₊₁₃ packed as
    112 little-endian bytes ([] without min-hashes)."""
    if not mins:
        return []
    return [mmh3.hash64(struct.pack("<14Q", *mins[14 * j : 14 * j + 14]), seed=0,
                        signed=False)[0] for j in range(6)]


def ref_near(a: list[int], b: list[int]) -> bool:
    """Near-duplicates: equal supershingle j for at least 2 of the 6 values of j."""
    return bool(a) and bool(b) and sum(x == y for x, y in zip(a, b, strict=True)) >= 2


def ref_resemblance(a: list[int], b: list[int]) -> float:
    if not a or not b:
        return 0.0
    return sum(x == y for x, y in zip(a, b, strict=True)) / 84


def ref_clusters(records: Iterable[Mapping[str, Any]], params: Any) -> dict[str, dict]:
    """{url: {"cluster", "cluster_size", "exact_dups"}} for every live document after all
    records: clusters are the connected components of the near-duplicate graph, named by
    their smallest URL; exact_dups counts the other live documents with the same token
    sequence."""
    k = _param(params, "k")
    latest: dict[str, list[str]] = {}
    for rec in records:
        doc = ref_record(rec)
        if doc is not None:
            latest[doc.url] = ref_tokenize(doc.text)
    supers = {u: ref_supershingles(ref_sketch(tokens, k)) for u, tokens in latest.items()}
    return ref_cluster_rows(supers, {u: tuple(tokens) for u, tokens in latest.items()})


def ref_cluster_rows(supers: Mapping[str, list[int]], tokens: Mapping[str, tuple]
                     ) -> dict[str, dict]:
    """The rows of `ref_clusters` from every live document's supershingles and tokens."""
    urls = sorted(supers)
    parent = {u: u for u in urls}

    def find(u: str) -> str:
        while parent[u] != u:
            parent[u] = parent[parent[u]]
            u = parent[u]
        return u

    for a, u in enumerate(urls):
        for v in urls[a + 1 :]:
            if ref_near(supers[u], supers[v]):
                ru, rv = find(u), find(v)
                if ru != rv:
                    parent[max(ru, rv)] = min(ru, rv)
    members: dict[str, list[str]] = {}
    for u in urls:
        members.setdefault(find(u), []).append(u)
    same: dict[tuple, int] = {}
    for u in urls:
        same[tokens[u]] = same.get(tokens[u], 0) + 1
    return {u: {"cluster": min(members[find(u)]), "cluster_size": len(members[find(u)]),
                "exact_dups": same[tokens[u]] - 1} for u in urls}


# ----------------------------------------------------------------------------- SPEC §8 URLs


def _ref_remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4, as written there (on a path whose slashes are single)."""
    inp, out = path, ""
    while inp:
        if inp.startswith("../"):
            inp = inp[3:]
        elif inp.startswith("./"):
            inp = inp[2:]
        elif inp.startswith("/./"):
            inp = "/" + inp[3:]
        elif inp == "/.":
            inp = "/"
        elif inp.startswith("/../") or inp == "/..":
            inp = "/" + inp[4:] if inp.startswith("/../") else "/"
            out = out[: out.rfind("/")] if "/" in out else ""
        elif inp in (".", ".."):
            inp = ""
        else:
            start = 1 if inp.startswith("/") else 0
            cut = inp.find("/", start)
            cut = len(inp) if cut < 0 else cut
            out, inp = out + inp[:cut], inp[cut:]
    return out


def ref_path(url: str) -> tuple[list[str], bool]:
    """SPEC §8's path of a URL as docs read it: the path alone, runs of `/` as one,
    escapes of unreserved characters decoded (the others upper-cased), dot segments
    removed; its non-empty segments, and whether it ends as a directory."""
    path = urlsplit(url).path
    path = re.sub(r"/+", "/", path)
    unreserved = set(string.ascii_letters + string.digits + "-._~")

    def one(m: re.Match) -> str:
        ch = chr(int(m.group(1), 16))
        return ch if ch in unreserved else "%" + m.group(1).upper()

    path = re.sub(r"%([0-9A-Fa-f]{2})", one, path)
    out = _ref_remove_dot_segments(path)
    return [s for s in out.split("/") if s], out == "" or out.endswith("/")


def ref_neighbourhoods(url: str, depth: int) -> list[str]:
    """`host/` and one neighbourhood per directory of the page, the first `depth`."""
    segments, directory = ref_path(url)
    dirs = segments if directory else segments[:-1]
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    return [host + "/" + "".join(d + "/" for d in dirs[:n]) for n in range(min(len(dirs),
                                                                              depth) + 1)]


def ref_is_trap(url: str) -> bool:
    """One segment three times or more in the path (a crawler's recursion error)."""
    segments, _ = ref_path(url)
    return any(segments.count(s) >= 3 for s in segments)
