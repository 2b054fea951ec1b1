"""Read-only views of a state for people and scripts: `dump` and `explain`."""

from __future__ import annotations

from collections.abc import Iterator

from ..engine.docs import current
from ..engine.params import Params
from ..state.schema import decode_url_entry
from ..state.txn import Store


def dump_rows(store: Store) -> Iterator[dict]:
    """One row per live document, sorted by URL (code-point order = UTF-8 byte order)."""
    txn = store.begin()
    for key, raw in store.kv.items("urls"):
        docno, _seq = decode_url_entry(raw)
        doc = txn.doc(docno)
        r = current(txn, doc)
        yield {
            "url": key.decode("utf-8"),
            "n_grams": doc.n_grams,
            "n_patch_grams": doc.n_patch,
            "patch_fraction": doc.patch_fraction,
            "sources": [{"url": u, "grams": n} for u, n in r.sources],
            "quilted": r.quilted,
        }


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


def explain(store: Store, url: str) -> tuple[str, bool]:
    """Why a page is or is not quilted, in plain words; and whether the URL is known."""
    params = Params.from_fingerprint(store.meta("params"))
    txn = store.begin()
    url = url.strip()
    try:
        entry = txn.url_entry(url)
    except UnicodeError:
        entry = None
    if entry is None:
        near = []
        for v in _variants(url):
            try:
                if txn.url_entry(v) is not None:
                    near.append(v)
            except UnicodeError:
                pass
        hint = f" Did you mean {' or '.join(near)}?" if near else ""
        return (f"{url} is not in this state (never seen, or spelled differently).{hint}",
                False)
    docno, seq = entry
    doc = txn.doc(docno)
    server, _ = txn.name(docno)
    r = current(txn, doc)
    n_pg = doc.n_patch
    frac = doc.patch_fraction
    foreign_pg = doc.foreign_patch_grams()
    lines = [
        f"{url}",
        f"  server ({params.foreign}): {server or '-'}",
        f"  {doc.n_grams} distinct {params.k}-grams; {n_pg} are patch grams "
        f"(shared by 2..{params.m} documents): patch fraction {frac:.3f} "
        f"{'>=' if frac >= params.theta else '<'} theta {params.theta}",
        f"  {foreign_pg} patch grams are also found on other servers; "
        f"{n_pg - foreign_pg} only on this server",
        f"  greedy cover: {len(r.sources)} source(s) "
        f"{'>=' if len(r.sources) >= params.c else '<'} c {params.c}",
    ]
    covered = 0
    for u, n in r.sources:
        covered += n
        lines.append(f"    {n:6d} new grams ({100 * n / max(n_pg, 1):5.1f}% of patch) from {u}")
    if r.quilted:
        verdict = "QUILTED: enough of the page is shared, and it takes many foreign sources"
    elif frac < params.theta and len(r.sources) < params.c:
        verdict = "not quilted: too little shared text and too few sources"
    elif frac < params.theta:
        verdict = "not quilted: too little of the page is shared text"
    else:
        verdict = "not quilted: the shared text comes from too few foreign sources"
    lines.append(f"  {verdict} (events so far: {seq})")
    return "\n".join(lines), True


def shard_dirs(states: list[str]) -> tuple[list[str], list[int]] | None:
    """The doc-shard directories of worker states (STATE/doc-<s>), one per shard (where
    a shard moved between workers, the copy that has applied the most), and the doc
    shards of the pipeline that none of them holds. None when the directories are not
    worker states."""
    import os

    from ..state.rocks import RocksKV

    best: dict[int, tuple[int, str]] = {}
    shards = 0
    found = False
    for state in states:
        if not os.path.isdir(state):
            continue
        for name in sorted(os.listdir(state)):
            if not name.startswith("doc-") or not name[4:].isdigit():
                continue
            found = True
            path = os.path.join(state, name)
            store = Store(RocksKV(path, read_only=True))
            try:
                applied = sum(store.positions().values())
                shards = max(shards, int(store.meta("shards") or 0))
            finally:
                store.close()
            s = int(name[4:])
            if s not in best or applied > best[s][0]:
                best[s] = (applied, path)
    if not found:
        return None
    missing = [s for s in range(shards) if s not in best]
    return [p for _, p in (best[s] for s in sorted(best))], missing
