"""Analysis under the watchdog (adapters.watchdog, SPEC §9): a page past --page-timeout
is dead-lettered too_slow and the rest goes on; a crash in analysis costs one page; a
page that allocates without bound hits the process's memory limit; a stop does not wait
for a page in hand. The stalls and crashes are real (a failpoint in the child stalls or
kills it at a chosen page), and so is the memory limit (a real page too big for it)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdet.adapters import watchdog
from streamdet.adapters.payloads import analyze_payloads
from streamdet.adapters.watchdog import Aborted, AnalysisPool
from streamdet.engine.analysis import Analyzed
from streamdet.engine.params import Params
from streamdet.engine.records import REASONS

from .cli_helpers import dump_rows, popen, read_jsonl, streamdet, summary

MAX_BODY = 10 << 20


def page(i: int) -> bytes:
    return json.dumps({"url": f"http://site{i}.example/p", "html":
                       f"<p>page number {i} has five words or more</p>"}).encode()


def urls(results) -> list:
    return [r.url if isinstance(r, Analyzed) else r[0] for r in results]


@given(st.lists(st.one_of(
    st.none(), st.binary(max_size=300), st.text(max_size=200).map(str.encode),
    st.dictionaries(st.sampled_from(["url", "html", "text", "ip", "fetched_at"]),
                    st.one_of(st.none(), st.integers(), st.floats(), st.text(max_size=50),
                              st.binary(max_size=20)), max_size=5),
    st.builds(lambda u, b: json.dumps({"url": u, "html": b}).encode(),
              st.text(max_size=40), st.text(max_size=200)),
), max_size=20))
@settings(max_examples=300, deadline=None)
def test_analysis_is_total_over_any_payload(payloads):
    """Any payload gives a page or a dead letter with a known reason, never an error."""
    out = analyze_payloads(payloads, Params(), 1000)
    assert len(out) == len(payloads)
    for r in out:
        assert isinstance(r, Analyzed) or (r[0] in REASONS and isinstance(r[1], str))


def test_tombstones_and_empty_records_are_dead_letters():
    out = analyze_payloads([None, b"", b"null", b"[]"], Params(), 1000)
    assert out == [("not_json", "a message with no value (a tombstone)"),
                   ("not_json", "an empty record"),
                   ("not_object", REASONS["not_object"]),
                   ("not_object", REASONS["not_object"])]


@pytest.fixture
def stall_fourth(monkeypatch, tmp_path) -> Path:
    """Each analysis process stalls on the 4th page it is given (its replacement too),
    and creates the file returned once it stalls."""
    monkeypatch.setenv("STREAMDET_FAILPOINT", "analysis-page:4:stall")
    monkeypatch.setenv("STREAMDET_FAILPOINT_STALLED", str(tmp_path / "stalled"))
    return tmp_path / "stalled"


def until_stalled(marker: Path, alive: Callable[[], bool], timeout: float = 120) -> None:
    """Until an analysis process has stalled at its failpoint (it created `marker`), the
    run or pool that started it still alive."""
    deadline = time.monotonic() + timeout
    while not marker.exists():
        assert alive() and time.monotonic() < deadline, "no analysis process stalled"
        time.sleep(0.05)


def two_jobs(pool: AnalysisPool, first: int, total: int) -> list:
    """Pages 0..first-1 and first..total-1 submitted as two jobs; their results, in order."""
    try:
        jobs = [pool.submit([page(i) for i in range(first)]),
                pool.submit([page(i) for i in range(first, total)])]
        return jobs[0].result(timeout=60) + jobs[1].result(timeout=60)
    finally:
        pool.close()


def test_a_page_past_the_timeout_is_too_slow_and_the_rest_goes_on(stall_fourth):
    pool = AnalysisPool(1, Params(), MAX_BODY, page_timeout=1.0)
    got = two_jobs(pool, 6, 9)
    # The 1st process stalls on page 3, its 4th; each replacement on its own 4th page
    # (which one depends on whether the last chunk of results had left: pages not sent
    # back are analysed again).
    assert urls(got)[3] == "too_slow"
    assert all(u in ("too_slow", f"http://site{i}.example/p") for i, u in enumerate(urls(got)))
    assert urls(got).count("too_slow") == pool.replaced >= 2


def test_a_crash_in_analysis_costs_the_page_in_hand(monkeypatch):
    monkeypatch.setenv("STREAMDET_FAILPOINT", "analysis-page:2")  # exit 137 on the 2nd
    pool = AnalysisPool(1, Params(), MAX_BODY, page_timeout=30)
    try:
        got = pool.analyze([page(i) for i in range(3)])
    finally:
        pool.close()
    assert got[1] == ("unparsable", "the analysis process died on this page (exit 137)")
    assert urls(got)[0] == "http://site0.example/p"
    assert urls(got)[2] in ("http://site2.example/p", "unparsable")  # its 2nd page, or not
    assert urls(got).count("unparsable") == pool.replaced


def test_a_replacement_that_cannot_start_fails_the_pool_with_its_error(monkeypatch):
    """The process dies on the 2nd page and its replacement cannot be started (here the
    spawn raises, as it does when the system is out of processes or memory): the job
    fails with that error, the pool takes no more jobs, and a stop still works."""
    monkeypatch.setenv("STREAMDET_FAILPOINT", "analysis-page:2")  # exit 137 on the 2nd
    pool = AnalysisPool(1, Params(), MAX_BODY, page_timeout=30)
    try:
        def cannot_start(self):
            raise OSError("Resource temporarily unavailable")

        monkeypatch.setattr(type(pool._all[0].proc), "start", cannot_start)
        with pytest.raises(OSError, match="temporarily unavailable"):
            pool.analyze([page(i) for i in range(3)])
        with pytest.raises(Aborted):
            pool.submit([page(3)])
    finally:
        pool.abort()  # the dead process is still the one to stop
        pool.close()


def test_a_job_sent_in_pieces_comes_back_whole_and_in_order(monkeypatch):
    """A batch goes to the child a few pages at a time (PIECE_BYTES), so neither process
    holds it twice; a crash on the 5th page costs that page and the pieces after it are
    sent to the replacement."""
    monkeypatch.setattr(watchdog, "PIECE_BYTES", 2 * len(page(0)))  # two pages a piece
    monkeypatch.setenv("STREAMDET_FAILPOINT", "analysis-page:5")  # exit 137 on the 5th
    pool = AnalysisPool(1, Params(), MAX_BODY, page_timeout=30)
    got = two_jobs(pool, 9, 12)
    assert got[4] == ("unparsable", "the analysis process died on this page (exit 137)")
    assert pool.replaced >= 1 and len(got) == 12
    assert all(u in ("unparsable", f"http://site{i}.example/p") for i, u in enumerate(urls(got)))
    assert sum(isinstance(r, Analyzed) for r in got) >= 12 - pool.replaced


def test_a_page_too_big_for_the_memory_limit_is_a_dead_letter():
    """One character a token: 6 M CJK characters need ~1 GB of arrays to hash."""
    huge = json.dumps({"url": "http://big.example/", "text": "漢字" * 3_000_000},
                      ensure_ascii=False).encode()
    pool = AnalysisPool(1, Params(), 64 << 20, page_timeout=60, memory=600 << 20)
    try:
        got = pool.analyze([page(1), huge, page(2)])
    finally:
        pool.close()
    assert got[1][0] == "unparsable" and "MemoryError" in got[1][1]
    assert urls(got)[::2] == ["http://site1.example/p", "http://site2.example/p"]


def test_abort_does_not_wait_for_the_page_in_hand(stall_fourth):
    pool = AnalysisPool(1, Params(), MAX_BODY, page_timeout=600)
    try:
        fut = pool.submit([page(i) for i in range(6)])
        until_stalled(stall_fourth, lambda: not fut.done())  # on its 4th page
        began = time.monotonic()
        pool.abort()
        with pytest.raises(Aborted):
            fut.result(timeout=10)
        assert time.monotonic() - began < 10
    finally:
        pool.close()


def _pages_file(path, n: int) -> None:
    path.write_bytes(b"\n".join(page(i) for i in range(n)) + b"\n")


def test_run_dead_letters_too_slow_pages_and_finishes(tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMDET_FAILPOINT", "analysis-page:4:stall")
    src = tmp_path / "pages.jsonl"
    _pages_file(src, 6)
    proc = streamdet("run", "--input", src, "--state", tmp_path / "s", "--events", "-",
                     "--page-timeout", "1")
    s = summary(proc.stderr)
    assert set(s["dead"]) == {"too_slow"} and s["pages"] + s["dead_total"] == 6, s["line"]
    dead = read_jsonl(tmp_path / "s" / "dead-letter.jsonl")
    assert 3 in {e["index"] for e in dead} and len(dead) == s["dead_total"]
    assert set(dump_rows(tmp_path / "s")) == {
        f"http://site{i}.example/p" for i in range(6)} - {
        f"http://site{e['index']}.example/p" for e in dead}
    assert all(json.loads(e["record"])["url"] == f"http://site{e['index']}.example/p"
               for e in dead)  # the original record, to replay it later


def test_sigterm_stops_a_run_whatever_page_is_in_hand(tmp_path, monkeypatch, stall_fourth):
    """A page the analysis never finishes, a timeout far away: SIGTERM still stops the
    run within 10 s, and the next run continues exactly where the state stands."""
    src = tmp_path / "pages.jsonl"
    _pages_file(src, 40)
    proc = popen("run", "--input", src, "--state", tmp_path / "s", "--events",
                 tmp_path / "events.jsonl", "--page-timeout", "600", "--batch", "10",
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        until_stalled(stall_fourth, lambda: proc.poll() is None)  # in the first batch
    except AssertionError:
        proc.kill()  # (it would stay stalled)
        proc.wait()
        raise
    assert proc.poll() is None
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=15)
    assert time.monotonic() - began < 10
    assert proc.returncode == 130
    assert b"interrupted" in proc.stderr.read()
    monkeypatch.delenv("STREAMDET_FAILPOINT")
    streamdet("run", "--input", src, "--state", tmp_path / "s", "--events",
              tmp_path / "events.jsonl")
    streamdet("run", "--input", src, "--state", tmp_path / "fresh", "--events", "-")
    assert dump_rows(tmp_path / "s") == dump_rows(tmp_path / "fresh")
    assert len(dump_rows(tmp_path / "s")) == 40
