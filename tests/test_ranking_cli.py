"""`streamdet label` and `streamdet rank` (SPEC §10) on a `streamdet run` state: the JSON
lines, the order, --top, labels that decide their page and are the review desk's labels,
and a URL the state does not hold (exit 2, one line)."""

from __future__ import annotations

import json

import pytest

from streamdet.ranking.features import Corpus
from streamdet.ranking.model import THRESHOLD
from streamdet.ranking.rank import ranking
from streamdet.state.rocks import RocksKV
from streamdet.state.txn import Store

from .cli_helpers import build_crawl, dump_rows, streamdet, write_jsonl


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    d = tmp_path_factory.mktemp("rank")
    path = write_jsonl(d / "crawl.jsonl", build_crawl(seed=5, n_pages=40, n_quilts=12))
    streamdet("run", "--input", path, "--state", d / "state", "--events", d / "ev.jsonl")
    return d


def rank(state_dir, *args) -> list[dict]:
    out = streamdet("rank", "--state", state_dir, "--json", *args).stdout
    return [json.loads(line) for line in out.splitlines()]


def _one_line_error(*args) -> str:
    proc = streamdet(*args, check=False)
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.decode().strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_rank_lists_quilts_and_partial_duplicates_by_score(state):
    rows = rank(state / "state")
    assert rows and all(set(r) == {"url", "score", "spam", "why"} for r in rows)
    assert [r["score"] for r in rows] == sorted((r["score"] for r in rows), reverse=True)
    assert all(0.0 <= r["score"] <= 1.0 and r["spam"] == (r["score"] >= THRESHOLD) for r in rows)
    dumped = dump_rows(state / "state")
    quilted = {u for u, r in dumped.items() if r["quilted"]}
    assert quilted <= {r["url"] for r in rows}
    assert any(r["spam"] for r in rows) and all(r["why"] for r in rows if r["spam"])
    assert rank(state / "state", "--top", "3") == rows[:3]
    text = streamdet("rank", "--state", state / "state", "--top", "2").stdout.decode()
    assert len(text.splitlines()) == 2 and rows[0]["url"] in text


def test_rank_equals_the_ranking_of_the_dumped_state(state):
    """The CLI's figures are the ranking of what `dump` and `dump --partials` print."""
    dumped = dump_rows(state / "state")
    pairs = [json.loads(line) for line in streamdet(
        "dump", "--partials", "--state", state / "state").stdout.splitlines()]
    want = [r.to_dict() for r in ranking(Corpus(dumped.values(), pairs))]
    assert rank(state / "state") == want


def test_dump_reads_documents_ahead_in_chunks_of_any_size(state, monkeypatch):
    """dump_rows reads READ_AHEAD documents at a time (one multi-get per table): the rows
    are the same whatever the chunks, one document each or all of them in one."""
    from streamdet.reading import views
    from streamdet.reading.states import open_store

    def rows() -> list[dict]:
        store = open_store(str(state / "state"), must_exist=True, read_only=True)
        try:
            return list(views.dump_rows(store))
        finally:
            store.close()

    whole = rows()
    assert len(whole) > 3
    for size in (1, 3):
        monkeypatch.setattr(views, "READ_AHEAD", size)
        assert rows() == whole


def test_label_decides_its_page_and_is_the_desks_label(state, tmp_path):
    desk = tmp_path / "desk"
    rows = rank(state / "state", "--desk", desk)
    top, last = rows[0]["url"], rows[-1]["url"]
    streamdet("label", top, "--not-spam", "--state", state / "state", "--desk", desk,
              "--who", "ana")
    streamdet("label", last, "--spam", "--state", state / "state", "--desk", desk)
    got = {r["url"]: r for r in rank(state / "state", "--desk", desk)}
    assert got[top]["score"] == 0.0 and not got[top]["spam"]
    assert got[top]["why"] == ["labelled not_spam"]
    assert got[last]["score"] == 1.0 and got[last]["spam"]
    exported = [json.loads(line) for line in streamdet(
        "review", "export", "--desk", desk).stdout.splitlines()]
    assert [(e["url"], e["verdict"], e["id"]) for e in exported] == [
        (top, "not_spam", 1), (last, "spam", 2)]
    assert exported[0]["who"] == "ana" and exported[0]["params"]["k"] == 5
    streamdet("label", top, "--spam", "--state", state / "state", "--desk", desk)
    assert {r["url"]: r for r in rank(state / "state", "--desk", desk)}[top]["score"] == 1.0
    # the default desk is the review desk's: DIR-review beside the state
    streamdet("label", top, "--spam", "--state", state / "state")
    assert (state / "state-review" / "labels.sqlite").exists()


def test_unknown_url_and_bad_arguments_exit_2_with_one_line(state, tmp_path):
    err = _one_line_error("label", "https://nowhere.example/", "--spam", "--state",
                          state / "state", "--desk", tmp_path / "desk")
    assert "https://nowhere.example/ is not in this state" in err
    assert not (tmp_path / "desk" / "labels.sqlite").exists()
    rank(state / "state", "--desk", tmp_path / "desk")
    assert not (tmp_path / "desk").exists(), "ranking makes no desk"
    assert "no streamdet state" in _one_line_error("rank", "--state", tmp_path / "none")
    assert "--top" in _one_line_error("rank", "--state", state / "state", "--top", "0")
    proc = streamdet("label", "https://x.example/", "--state", state / "state", check=False)
    assert proc.returncode == 2  # --spam or --not-spam is required
    (tmp_path / "workers").mkdir()
    Store(RocksKV(str(tmp_path / "workers" / "doc-0"))).close()  # a worker's layout
    assert "worker states" in _one_line_error("label", "https://x.example/", "--spam",
                                              "--state", tmp_path / "workers")
    # with --broker, label looks the page up in worker states before it writes anything
    kafka = ["--broker", "127.0.0.1:9"]
    assert "give the workers' states" in _one_line_error(
        "label", "https://x.example/", "--spam", *kafka, "--state", state / "state")
    assert "lack the doc shard of https://x.example/" in _one_line_error(
        "label", "https://x.example/", "--spam", *kafka, "--state", tmp_path / "workers")
    assert "lack the doc shard of https://x.example/" in _one_line_error(
        "label-chunks", "--url", "https://x.example/", *kafka, "--state", tmp_path / "workers")
    # rank reads worker states, all of a pipeline's shards
    assert "lack the cluster shard" in _one_line_error("rank", "--state", tmp_path / "workers")
