"""The desk's page view: explain's page, and each source's own passages that the page
copied (a planted quilt: every source's passage is exactly the words taken from it)."""

from __future__ import annotations

from streamdet.review.page_view import page_view
from streamdet.state.rocks import RocksKV
from streamdet.state.txn import Store

from .cli_helpers import streamdet, write_jsonl


def test_a_quilt_beside_its_sources_passages(tmp_path):
    words = [[f"s{i}w{j}" for j in range(40)] for i in range(5)]
    records = [{"url": f"http://s{i}.example/p", "text": " ".join(w)}
               for i, w in enumerate(words)]
    taken = [" ".join(w[5 + i : 20 + i]) for i, w in enumerate(words)]
    records.append({"url": "http://q.example/quilt", "text": " <b> ".join(taken)})
    write_jsonl(tmp_path / "in.jsonl", records)
    streamdet("run", "--input", str(tmp_path / "in.jsonl"), "--state", str(tmp_path / "s"),
              "--events", str(tmp_path / "ev.jsonl"), "-k", "3")
    store = Store(RocksKV(str(tmp_path / "s"), read_only=True))
    try:
        view = page_view(store, "http://q.example/quilt")
        assert view["quilted"] and len(view["sources"]) == 5
        for src in view["sources"]:
            i = int(src["url"][len("http://s")])
            assert [p["text"] for p in src["passages"]] == [taken[i]]
            (a, b), = src["spans"]  # and where the quilt holds it
            assert view["text"][a:b] == taken[i]
        assert "<b>" in view["text"]  # the text as kept: escaping is the web page's job
        assert page_view(store, "http://nowhere.example/") is None
        plain = page_view(store, "http://s0.example/p")
        assert not plain["quilted"]  # its cover is the quilt, which holds its words
        assert [(x["url"], [p["text"] for p in x["passages"]]) for x in plain["sources"]] == [
            ("http://q.example/quilt", [taken[0]])]
    finally:
        store.close()
