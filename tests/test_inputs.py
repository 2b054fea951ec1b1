"""Every kind of input `streamdet run` accepts (SPEC §4): JSONL, JSONL.gz, WARC.gz, stdin
(plain and gzipped), several files, the bundled sample; and re-runs on the same state."""

from __future__ import annotations

import gzip
import json
import random

import pytest

from .cli_helpers import (
    SAMPLE,
    WARCS,
    build_crawl,
    dump,
    dump_rows,
    parallel,
    read_jsonl,
    streamdet,
    summary,
    write_jsonl,
)


@pytest.fixture(scope="module")
def crawl():
    return build_crawl(seed=3, n_pages=40, n_quilts=12)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, crawl):
    """The crawl as one JSONL file, and the dump of a run on it."""
    d = tmp_path_factory.mktemp("inputs")
    path = write_jsonl(d / "crawl.jsonl", crawl)
    proc = streamdet("run", "--input", path, "--state", d / "state", "--events", d / "ev.jsonl")
    return d, path, dump(d / "state"), summary(proc.stderr)


def test_jsonl(reference, crawl):
    d, _, out, s = reference
    assert s["pages"] == len(crawl) and s["dead_total"] == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert {r["url"] for r in rows} == {r["url"] for r in crawl}
    assert any(r["quilted"] for r in rows)
    assert read_jsonl(d / "ev.jsonl"), "a crawl with planted quilts gives events"


def test_jsonl_gz_is_the_same(reference, crawl, tmp_path):
    gz = write_jsonl(tmp_path / "crawl.data", crawl, gz=True)  # by content, not by name
    streamdet("run", "--input", gz, "--state", tmp_path / "s", "--events", "-")
    assert dump(tmp_path / "s") == reference[2]


def test_stdin_plain_and_gzipped(reference, tmp_path):
    _, path, out, _ = reference
    data = path.read_bytes()
    parallel(
        lambda: streamdet("run", "--input", "-", "--state", tmp_path / "a", "--events",
                          tmp_path / "ea", input=data),
        lambda: streamdet("run", "--input", "-", "--state", tmp_path / "b", "--events",
                          tmp_path / "eb", input=gzip.compress(data)))
    assert dump(tmp_path / "a") == out
    assert dump(tmp_path / "b") == out


def test_several_inputs_are_one_stream(reference, crawl, tmp_path):
    cut1, cut2 = len(crawl) // 3, 2 * len(crawl) // 3
    a = write_jsonl(tmp_path / "a.jsonl", crawl[:cut1])
    b = write_jsonl(tmp_path / "b.jsonl.gz", crawl[cut1:cut2], gz=True)
    c = write_jsonl(tmp_path / "c.jsonl", crawl[cut2:])
    proc = streamdet("run", "--input", a, "--input", b, "--input", c,
                     "--state", tmp_path / "s", "--events", "-")
    assert summary(proc.stderr)["pages"] == len(crawl)
    assert dump(tmp_path / "s") == reference[2]


def _warc_pages(paths) -> dict[str, int]:
    """URL -> count of the HTML 2xx responses in WARC files."""
    from warcio.archiveiterator import ArchiveIterator

    out: dict[str, int] = {}
    for p in paths:
        with open(p, "rb") as f:
            for rec in ArchiveIterator(f):
                if rec.rec_type != "response" or rec.http_headers is None:
                    continue
                ctype = rec.http_headers.get_header("Content-Type") or ""
                if rec.http_headers.get_statuscode().startswith("2") and "html" in ctype:
                    url = rec.rec_headers.get_header("WARC-Target-URI")
                    out[url] = out.get(url, 0) + 1
    return out


def test_real_warc_files(tmp_path):
    want = _warc_pages(WARCS)
    assert len(want) > 20
    plain = tmp_path / "plain.warc"
    plain.write_bytes(gzip.decompress(WARCS[1].read_bytes()))

    def other_way():  # the same bytes through stdin, then a WARC not gzipped
        streamdet("run", "--input", "-", "--state", tmp_path / "s2", "--events", "-",
                  input=WARCS[0].read_bytes())
        streamdet("run", "--input", plain, "--state", tmp_path / "s2", "--events", "-")

    proc, _ = parallel(lambda: streamdet("run", "--input", WARCS[0], "--input", WARCS[1],
                                         "--state", tmp_path / "s", "--events", "-"),
                       other_way)
    s = summary(proc.stderr)
    assert s["pages"] == sum(want.values()) and s["dead_total"] == 0, s["line"]
    rows = dump_rows(tmp_path / "s")
    assert set(rows) == set(want)
    assert sum(r["n_grams"] > 0 for r in rows.values()) >= len(rows) - 2
    assert dump(tmp_path / "s2") == dump(tmp_path / "s")


def test_bundled_sample_without_input(tmp_path):
    assert SAMPLE.exists(), "streamdet/sample/sample-crawl.jsonl.gz is not there yet"
    n = sum(1 for line in gzip.open(SAMPLE) if line.strip())
    proc = streamdet("run", "--state", tmp_path / "s", "--events", tmp_path / "ev.jsonl")
    s = summary(proc.stderr)
    assert s["pages"] + s["dead_total"] == n and s["pages"] > 0, s["line"]
    rows = dump_rows(tmp_path / "s")
    truth_path = SAMPLE.with_name("sample-truth.json")
    if truth_path.exists():  # planted quilt -> its sources
        truth = json.loads(truth_path.read_text())
        assert truth and all(rows[u]["quilted"] for u in truth), "planted quilts not found"
    # a second run on the same state applies nothing again
    proc = streamdet("run", "--state", tmp_path / "s", "--events", tmp_path / "ev.jsonl")
    s = summary(proc.stderr)
    assert (s["pages"], s["skipped"]) == (0, n), s["line"]


def test_rerun_skips_applied_records_and_reads_new_files(reference, crawl, tmp_path):
    first, rest = crawl[: len(crawl) // 2], crawl[len(crawl) // 2:]
    a = write_jsonl(tmp_path / "a.jsonl", first)
    b = write_jsonl(tmp_path / "b.jsonl.gz", rest, gz=True)
    state, ev = tmp_path / "s", tmp_path / "ev.jsonl"
    streamdet("run", "--input", a, "--state", state, "--events", ev)
    before, n_events = dump(state), len(read_jsonl(ev))

    proc = streamdet("run", "--input", a, "--state", state, "--events", ev)
    s = summary(proc.stderr)
    assert (s["pages"], s["skipped"], s["events"]) == (0, len(first), {}), s["line"]
    assert "already applied" in s["line"]
    assert dump(state) == before and len(read_jsonl(ev)) == n_events

    proc = streamdet("run", "--input", a, "--input", b, "--state", state, "--events", ev)
    s = summary(proc.stderr)
    assert (s["pages"], s["skipped"]) == (len(rest), len(first)), s["line"]
    assert dump(state) == reference[2]


def test_grown_file_continues_and_rewritten_file_is_read_again(crawl, tmp_path):
    state = tmp_path / "s"
    path = write_jsonl(tmp_path / "grows.jsonl", crawl[:20])
    streamdet("run", "--input", path, "--state", state, "--events", "-")
    with open(path, "ab") as f:  # the crawler appended to it
        f.write(b"".join(json.dumps(r).encode() + b"\n" for r in crawl[20:30]))
    s = summary(streamdet("run", "--input", path, "--state", state, "--events", "-").stderr)
    assert (s["pages"], s["skipped"]) == (10, 20), s["line"]

    # rewritten in place with other records: nothing of it may be skipped
    other = [dict(r, url=r["url"] + "?v=2") for r in crawl[30:60]]
    write_jsonl(path, other)
    proc = streamdet("run", "--input", path, "--state", state, "--events", "-")
    s = summary(proc.stderr)
    assert (s["pages"], s["skipped"]) == (30, 0), s["line"]
    assert b"read from its start" in proc.stderr
    assert {r["url"] for r in other} <= set(dump_rows(state))


def test_stdin_twice_with_other_records_loses_nothing(crawl, tmp_path):
    """stdin has no identity: a second stream on the same state must not be skipped just
    because the first one had as many records; the same stream again is."""
    rng = random.Random(5)
    one, two = crawl[:8], [dict(r, url=r["url"] + "#two") for r in rng.sample(crawl[:40], 12)]
    one_b = b"".join(json.dumps(r).encode() + b"\n" for r in one)
    two_b = b"".join(json.dumps(r).encode() + b"\n" for r in two)
    state = tmp_path / "s"
    streamdet("run", "--input", "-", "--state", state, "--events", "-", input=one_b)
    s = summary(streamdet("run", "--input", "-", "--state", state, "--events", "-",
                          input=two_b).stderr)
    assert (s["pages"], s["skipped"]) == (12, 0), s["line"]
    s = summary(streamdet("run", "--input", "-", "--state", state, "--events", "-",
                          input=two_b).stderr)
    assert (s["pages"], s["skipped"]) == (0, 12), s["line"]
    # a stream that starts like the last one and goes on: only the new part is applied
    s = summary(streamdet("run", "--input", "-", "--state", state, "--events", "-",
                          input=two_b + one_b).stderr)
    assert (s["pages"], s["skipped"]) == (8, 12), s["line"]
    # a stream whose first record matches but whose later ones differ: all of it is read
    three_b = two_b.split(b"\n", 1)[0] + b"\n" + one_b
    s = summary(streamdet("run", "--input", "-", "--state", state, "--events", "-",
                          input=three_b).stderr)
    assert (s["pages"], s["skipped"]) == (9, 0), s["line"]
    assert set(dump_rows(state)) == {r["url"] for r in one + two}
