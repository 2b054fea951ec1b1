"""Bad input never stops `streamdet run` and is never silently dropped (SPEC §2): each bad
record lands in the dead-letter file with its reason and its original bytes, the good
records around it are all processed, and the summary line counts them."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import re

import pytest

from streamdet.adapters.inputs import PREFIX_KEPT

from .cli_helpers import dump_rows, read_jsonl, real_pages, streamdet, summary

MAX_BODY = 150_000


def _good_pages(n: int) -> list[dict]:
    return [p for p in real_pages(40) if len(p["html"].encode()) < MAX_BODY - 1000][:n]


def _line(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode() + b"\n"


def _original(entry: dict) -> bytes:
    """The original record bytes kept by a dead letter."""
    if "record_base64" in entry:
        return base64.b64decode(entry["record_base64"])
    return entry["record"].encode("utf-8")


def _assert_kept(entry: dict, original: bytes) -> None:
    """A dead letter keeps its record whole up to 64 KiB, else its first 64 KiB at most;
    always the record's size and SHA-256 (SPEC §9)."""
    assert entry["record_size"] == len(original)
    assert entry["record_sha256"] == hashlib.sha256(original).hexdigest()
    kept = _original(entry)
    if len(original) <= PREFIX_KEPT:
        assert kept == original and "record_truncated" not in entry
    else:
        assert entry["record_truncated"] and len(kept) <= PREFIX_KEPT
        assert original.startswith(kept) and len(kept) >= PREFIX_KEPT - 3


# (reason, original line) for every way a record can be bad
BAD = [
    ("not_json", b"this is not json"),
    ("not_json", b'{"url": "http://example.com/a", "text": "unterminated'),
    ("not_json", b'{"url": "http://example.com/n", "text": "x", "n": 1' + b"0" * 5000 + b"}"),
    ("not_object", b"[1, 2, 3]"),
    ("not_object", b"42"),
    ("not_object", b'"a string"'),
    ("not_object", b"null"),
    ("no_url", b'{"html": "<p>a page without a url</p>"}'),
    ("no_url", b'{"url": null, "text": "a b c d e f"}'),
    ("no_url", b'{"url": 42, "text": "a b c d e f"}'),
    ("no_url", b'{"url": "", "text": "a b c d e f"}'),
    ("bad_url", b'{"url": "ftp://example.com/file.txt", "text": "a b c d e f"}'),
    ("bad_url", b'{"url": "/relative/page.html", "text": "a b c d e f"}'),
    ("bad_url", b'{"url": "mailto:someone@example.com", "text": "a b c d e f"}'),
    ("bad_url", b'{"url": "javascript:alert(1)", "text": "a b c d e f"}'),
    ("bad_url", b'{"url": "http://", "text": "a b c d e f"}'),
    ("bad_url", b'{"url": "http://[::1/broken", "text": "a b c d e f"}'),
    ("bad_url", b'{"url": "http://example.com/\\ud800", "text": "a lone surrogate"}'),
    ("no_body", b'{"url": "http://example.com/nobody"}'),
    ("no_body", b'{"url": "http://example.com/empty", "html": "", "text": ""}'),
    ("no_body", b'{"url": "http://example.com/null", "html": null}'),
    ("no_body", b'{"url": "http://example.com/number", "text": 12345}'),
    ("not_utf8", b'{"url": "http://example.com/latin1", "text": "caf\xe9 cr\xe8me"}'),
    ("not_utf8", b'\xff\xfe{\x00"\x00u\x00r\x00l\x00"\x00'),
    ("too_large", _line({"url": "http://example.com/big", "text": "word " * (MAX_BODY // 5 + 1)})
     .rstrip(b"\n")),
    ("too_large", _line({"url": "http://example.com/bightml",
                         "html": "<p>" + "é" * (MAX_BODY // 2) + "</p>"}).rstrip(b"\n")),
]


@pytest.fixture(scope="module")
def bad_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    good = _good_pages(8)
    good.append({"url": "http://text.example.net/plain", "text": "a plain text record " * 20})
    # optional fields of the wrong type are ignored, the page is good
    good.append({"url": "http://odd.example.net/ip", "text": "odd ip " * 30, "ip": 12345,
                 "fetched_at": {"not": "a time"}})
    good.append({"url": "http://odd.example.net/time", "text": "odd time " * 30,
                 "ip": ["1.2.3.4"], "fetched_at": "yesterday-ish"})
    good.append({"url": "http://odd.example.net/nul", "text": "nul \u0000 inside " * 20,
                 "ip": "\u0000", "fetched_at": 1e308, "extra": {"kept": "opaque"}})
    lines: list[tuple[str | None, bytes]] = []
    bad = list(BAD)
    for i, g in enumerate(good):
        lines.append((None, _line(g).rstrip(b"\n")))
        for _ in range(3):
            if bad:
                lines.append(bad.pop(0))
        if i % 3 == 0:
            lines.append(("blank", b"   "))  # blank lines are not records
    lines += [(r, b) for r, b in bad]
    path = d / "mixed.jsonl"
    path.write_bytes(b"".join(b + b"\n" for _, b in lines))
    state = d / "state"
    proc = streamdet("run", "--input", path, "--state", state, "--events", d / "events.jsonl",
                     "--max-body", MAX_BODY)
    records = [(r, b) for r, b in lines if r != "blank"]
    return proc, state, records, good


def test_run_finishes_and_counts(bad_run):
    proc, state, records, good = bad_run
    assert proc.returncode == 0
    s = summary(proc.stderr)
    want: dict[str, int] = {}
    for reason, _ in BAD:
        want[reason] = want.get(reason, 0) + 1
    assert s["dead_total"] == len(BAD), s["line"]
    assert s["dead"] == want, s["line"]
    assert s["pages"] == len(good), s["line"]
    assert b"Traceback" not in proc.stderr


def test_every_good_record_is_processed(bad_run):
    _, state, _, good = bad_run
    rows = dump_rows(state)
    assert set(rows) == {g["url"] for g in good}
    assert rows["http://text.example.net/plain"]["n_grams"] > 0


def test_every_bad_record_is_dead_lettered_with_its_bytes(bad_run):
    _, state, records, _ = bad_run
    dead = read_jsonl(state / "dead-letter.jsonl")
    by_index = {e["index"]: e for e in dead}
    assert len(by_index) == len(dead) == len(BAD)
    for index, (reason, original) in enumerate(records):
        if reason is None:
            assert index not in by_index
            continue
        e = by_index[index]
        assert e["reason"] == reason, (original[:80], e["error"])
        assert e["error"]
        _assert_kept(e, original)
        assert e["source"].endswith("mixed.jsonl")


def test_crlf_bom_and_blank_lines(tmp_path):
    a, b = _good_pages(2)
    data = (b"\xef\xbb\xbf" + _line(a).rstrip(b"\n") + b"\r\n\r\n  \r\n"
            + b"\xef\xbb\xbf" + _line(b).rstrip(b"\n") + b"\r\n")
    path = tmp_path / "crlf.jsonl"
    path.write_bytes(data)
    proc = streamdet("run", "--input", path, "--state", tmp_path / "s", "--events", "-")
    s = summary(proc.stderr)
    assert (s["pages"], s["dead_total"]) == (2, 0), s["line"]
    assert set(dump_rows(tmp_path / "s")) == {a["url"], b["url"]}


def test_huge_line_is_read_through_and_its_dead_letter_bounded(tmp_path):
    """A line far beyond the record limit is never held in memory, and its dead letter
    keeps its first 64 KiB, its size and SHA-256: a small gzip that inflates to one huge
    line writes no more than that (SPEC §9), and the records after it are read."""
    a = {"url": "http://small.example.com/a", "text": "small page one " * 50}
    b = {"url": "http://small.example.com/b", "text": "small page two " * 50}
    huge = json.dumps({"url": "http://example.com/huge", "text": "x" * (48 << 20)}).encode()
    path = tmp_path / "in" / "huge.jsonl.gz"
    path.parent.mkdir()
    path.write_bytes(gzip.compress(_line(a) + huge + b"\n" + _line(b)))
    assert path.stat().st_size < 200_000
    out = tmp_path / "out"
    out.mkdir()
    proc = streamdet("run", "--input", path, "--state", tmp_path / "s", "--events", "-",
                     "--max-body", 10_000, "--dead-letter", out / "dl.jsonl")
    s = summary(proc.stderr)
    assert (s["pages"], s["dead"]) == (2, {"too_large": 1}), s["line"]
    [e] = read_jsonl(out / "dl.jsonl")
    _assert_kept(e, huge)
    assert e["offset"] == len(_line(a))
    assert [f.name for f in out.iterdir()] == ["dl.jsonl"]  # nothing written beside it
    assert (out / "dl.jsonl").stat().st_size < PREFIX_KEPT + 2_000


def test_a_flood_of_tiny_bad_records_is_dead_lettered_in_runs(tmp_path):
    """A small gzip of 200,000 tiny bad lines: the first RUN_AFTER get a dead letter each,
    the rest one a run (a batch at most) holding their lines, count, size and SHA-256.
    Every record is counted and accounted for, and the dead letters take no more than
    about twice the bytes of the records they report (SPEC §9)."""
    from streamdet.adapters.dead_runs import RUN_AFTER

    n = 200_000
    good = _good_pages(1)[0]
    path = tmp_path / "flood.jsonl.gz"
    path.write_bytes(gzip.compress(b"1\n" * n + _line(good)))
    dl = tmp_path / "dl.jsonl"
    proc = streamdet("run", "--input", path, "--state", tmp_path / "s", "--events", "-",
                     "--dead-letter", dl)
    s = summary(proc.stderr)
    assert (s["pages"], s["dead"]) == (1, {"not_object": n}), s["line"]
    letters = read_jsonl(dl)
    single = [e for e in letters if "count" not in e]
    runs = [e for e in letters if "count" in e]
    assert [e["index"] for e in single] == list(range(RUN_AFTER))
    assert all(_original(e) == b"1" for e in single)
    at = RUN_AFTER
    for e in runs:  # contiguous, in order, each holding its lines whole
        assert e["index"] == at and e["reason"] == "not_object"
        lines = b"1\n" * e["count"]
        assert e["offset"] == 2 * at
        assert e["records"].encode() == lines[:PREFIX_KEPT]
        assert (e["record_size"], e["record_sha256"]) == (len(lines),
                                                          hashlib.sha256(lines).hexdigest())
        at += e["count"]
    assert at == n
    # twice the bytes they report at most (a newline escaped in JSON is two), not 150 times
    assert dl.stat().st_size < 2 * (2 * n)


def test_truncated_gzip_keeps_what_was_read(tmp_path):
    pages = _good_pages(6)
    blob = gzip.compress(b"".join(_line(p) for p in pages))
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(blob[: len(blob) * 2 // 3])
    proc = streamdet("run", "--input", path, "--state", tmp_path / "s", "--events", "-")
    s = summary(proc.stderr)
    assert s["dead"] == {"unreadable": 1}, s["line"]
    assert 1 <= s["pages"] < 6
    assert set(dump_rows(tmp_path / "s")) <= {p["url"] for p in pages}
    [e] = read_jsonl(tmp_path / "s" / "dead-letter.jsonl")
    assert "cannot be read" in e["error"]


def _warc(records, gz=True) -> bytes:
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    out = io.BytesIO()
    w = WARCWriter(out, gzip=gz)
    for url, status, ctype, body in records:
        headers = [("Content-Type", ctype)] if ctype else []
        http = StatusAndHeaders(status, headers, protocol="HTTP/1.1")
        w.write_record(w.create_warc_record(url, "response", payload=io.BytesIO(body),
                                            http_headers=http,
                                            warc_headers_dict={"WARC-IP-Address": "192.0.2.1"}))
    return out.getvalue()


def test_warc_bad_bodies(tmp_path):
    good = [dict(p, html=p["html"][:12_000]) for p in _good_pages(3)]
    assert all(len(p["html"].encode()) < 20_000 for p in good)
    bad_bytes = b"<html><body><p>caf\xe9 cr\xe8me br\xfbl\xe9e</p></body></html>"
    recs = [
        (good[0]["url"], "200 OK", "text/html; charset=utf-8", good[0]["html"].encode()),
        ("http://warc.example.com/bad", "200 OK", "text/html; charset=utf-8", bad_bytes),
        ("http://warc.example.com/latin", "200 OK", "text/html; charset=ISO-8859-1", bad_bytes),
        ("http://warc.example.com/meta", "200 OK", "text/html",
         b'<html><head><meta charset="windows-1252"></head><body><p>na\xefve</p></body></html>'),
        ("http://warc.example.com/bogus", "200 OK", "text/html; charset=no-such-charset",
         b"<p>plain ascii under a bogus charset label</p>"),
        ("http://warc.example.com/plain", "200 OK", "text/plain", b"just <some> text here"),
        ("http://warc.example.com/logo.png", "200 OK", "image/png", b"\x89PNG\r\n\x1a\n..."),
        ("http://warc.example.com/app.js", "200 OK", "text/javascript", b"var a = 1;"),
        ("http://warc.example.com/gone", "404 Not Found", "text/html", b"<p>not found</p>"),
        ("http://warc.example.com/moved", "301 Moved", "text/html", b"<p>moved</p>"),
        ("http://warc.example.com/huge", "200 OK", "text/html", b"<p>" + b"y" * 30_000),
        (good[1]["url"], "200 OK", "text/html; charset=utf-8", good[1]["html"].encode()),
    ]
    blob = _warc(recs)
    path = tmp_path / "mixed.warc.gz"
    path.write_bytes(blob)
    dl = tmp_path / "dl.jsonl"
    proc = streamdet("run", "--input", path, "--state", tmp_path / "s", "--events", "-",
                     "--max-body", 20_000,
                     "--dead-letter", dl)
    s = summary(proc.stderr)
    assert "WARC responses ignored" in s["line"] and " 4 WARC" in s["line"], s["line"]
    rows = dump_rows(tmp_path / "s")
    for url in ("http://warc.example.com/latin", "http://warc.example.com/meta",
                "http://warc.example.com/bogus", "http://warc.example.com/plain"):
        assert url in rows
    for url in ("http://warc.example.com/logo.png", "http://warc.example.com/gone",
                "http://warc.example.com/bad"):
        assert url not in rows
    dead = {e["record"]["url"]: e for e in read_jsonl(dl)}
    e = dead["http://warc.example.com/bad"]
    assert e["reason"] == "not_utf8"
    assert base64.b64decode(e["record"]["html_bytes"]) == bad_bytes
    assert isinstance(e["offset"], int)
    e = dead["http://warc.example.com/huge"]
    assert e["reason"] == "too_large"
    body = b"<p>" + b"y" * 30_000
    assert base64.b64decode(e["record"]["record_bytes"]) == body  # whole: under 64 KiB
    assert (e["record_size"], e["record_sha256"]) == (len(body), hashlib.sha256(body).hexdigest())
    assert "record_truncated" not in e
    assert s["dead"] == {"not_utf8": 1, "too_large": 1}, s["line"]
    assert s["pages"] == 6


def test_a_warc_body_that_inflates_leaves_a_bounded_dead_letter(tmp_path):
    """A response with `Content-Encoding: gzip` whose body inflates far past the limit:
    its dead letter keeps the first 64 KiB of the body as read, with the inflated size
    and SHA-256, and nothing else is written (SPEC §9); the next record is read."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    inflated = b"<p>" + b"z" * (40 << 20)
    good = _good_pages(1)[0]
    out = io.BytesIO()
    w = WARCWriter(out, gzip=True)
    for url, headers, body in [
        ("http://warc.example.com/bomb",
         [("Content-Type", "text/html"), ("Content-Encoding", "gzip")], gzip.compress(inflated)),
        (good["url"], [("Content-Type", "text/html; charset=utf-8")], good["html"].encode()),
    ]:
        http = StatusAndHeaders("200 OK", headers, protocol="HTTP/1.1")
        w.write_record(w.create_warc_record(url, "response", payload=io.BytesIO(body),
                                            http_headers=http))
    path = tmp_path / "in" / "bomb.warc.gz"
    path.parent.mkdir()
    path.write_bytes(out.getvalue())
    dead = tmp_path / "out"
    dead.mkdir()
    proc = streamdet("run", "--input", path, "--state", tmp_path / "s", "--events", "-",
                     "--dead-letter", dead / "dl.jsonl")
    s = summary(proc.stderr)
    assert (s["pages"], s["dead"]) == (1, {"too_large": 1}), s["line"]
    [e] = read_jsonl(dead / "dl.jsonl")
    assert e["record"]["url"] == "http://warc.example.com/bomb"
    kept = base64.b64decode(e["record"]["record_bytes"])
    assert len(kept) == PREFIX_KEPT and inflated.startswith(kept)
    assert e["record_size"] == len(inflated) and e["record_truncated"]
    assert e["record_sha256"] == hashlib.sha256(inflated).hexdigest()
    assert [f.name for f in dead.iterdir()] == ["dl.jsonl"]
    assert (dead / "dl.jsonl").stat().st_size < 2 * PREFIX_KEPT


def test_truncated_warc_keeps_what_was_read(tmp_path):
    good = _good_pages(4)
    blob = _warc([(p["url"], "200 OK", "text/html", p["html"].encode()) for p in good])
    path = tmp_path / "cut.warc.gz"
    path.write_bytes(blob[: len(blob) - 200])
    proc = streamdet("run", "--input", path, "--state", tmp_path / "s", "--events", "-")
    s = summary(proc.stderr)
    assert s["dead"] == {"unreadable": 1}, s["line"]
    assert s["pages"] == 3


def _raw_warc_record(url: bytes | None, body: bytes, length_delta: int = 0,
                     status: bytes = b"HTTP/1.1 200 OK\r\n", ctype: bytes = b"text/html"
                     ) -> bytes:
    """A response record written by hand, so its Content-Length can be wrong, its target
    URI missing and its HTTP status line too (warcio's writer makes none of these)."""
    http = status + b"Content-Type: " + ctype + b"\r\n\r\n" + body
    head = [b"WARC/1.0", b"WARC-Type: response",
            b"WARC-Record-ID: <urn:uuid:%s>" % hashlib.md5(body).hexdigest().encode(),
            b"WARC-Date: 2026-01-01T00:00:00Z",
            b"Content-Type: application/http; msgtype=response",
            b"Content-Length: %d" % (len(http) + length_delta)]
    if url is not None:
        head.insert(2, b"WARC-Target-URI: " + url)
    return b"\r\n".join(head) + b"\r\n\r\n" + http + b"\r\n\r\n"


@pytest.mark.parametrize("damage", ["no_url", "length_short", "length_long", "length_junk",
                                    "length_absurd", "length_past_end", "no_status",
                                    "junk_between", "header_without_end"])
@pytest.mark.parametrize("gz", [False, True])
def test_a_damaged_warc_record_costs_that_record_only(tmp_path, damage, gz):
    """SPEC §9: a response without WARC-Target-URI is a no_url dead letter; a wrong
    Content-Length costs that record (reading goes on at the next WARC/ header, so a
    record a too long length swallowed is kept); the rest of the file is read."""
    good = [_raw_warc_record(b"http://w%d.example/p" % i,
                             b"<p>page %d of the archive, five words at least</p>" % i)
            for i in range(4)]
    body = b"<p>the damaged record's own page, with enough words</p>"
    bad = {"no_url": _raw_warc_record(None, body),
           "length_short": _raw_warc_record(b"http://bad.example/", body, -30),
           "length_long": _raw_warc_record(b"http://bad.example/", body, 300),
           "length_junk": _raw_warc_record(b"http://bad.example/", body).replace(
               b"Content-Length: ", b"Content-Length: x"),
           "length_absurd": re.sub(rb"Content-Length: \d+", b"Content-Length: " + b"9" * 30,
                                   _raw_warc_record(b"http://bad.example/", body)),
           "length_past_end": _raw_warc_record(b"http://bad.example/", body, 100_000),
           "no_status": _raw_warc_record(b"http://bad.example/", body, status=b""),
           "junk_between": b"<html>a crawler's stray bytes between two records</html>\r\n",
           "header_without_end": b"WARC/1.0\r\nWARC-Type: response\r\n"
                                 b"WARC-Target-URI: http://bad.example/\r\n"
                                 b"Content-Length: 12\r\n"}[damage]
    records = [good[0], bad, *good[1:]]
    data = b"".join(gzip.compress(r) for r in records) if gz else b"".join(records)
    path = tmp_path / ("damaged.warc.gz" if gz else "damaged.warc")
    path.write_bytes(data)
    proc = streamdet("run", "--input", path, "--state", tmp_path / "s", "--events", "-")
    s = summary(proc.stderr)
    assert set(dump_rows(tmp_path / "s")) == {f"http://w{i}.example/p" for i in range(4)}
    want = "no_url" if damage == "no_url" else "unreadable"
    assert s["dead"] == {want: 1}, s["line"]
    [e] = read_jsonl(tmp_path / "s" / "dead-letter.jsonl")
    assert e["index"] == 1 and e["error"]
    if damage.startswith("length"):
        assert "Content-Length" in e["error"]
    if damage == "no_status":
        assert "not HTTP" in e["error"]
    if damage == "junk_between":
        assert "between WARC records" in e["error"]
    if damage == "header_without_end":
        assert "without its end" in e["error"]


def test_a_warc_charset_of_any_name_costs_that_record_at_most(tmp_path):
    """A charset label that names no web encoding (utf-7, idna, a codec that is no text
    encoding, a NUL) is read as absent; a declared utf-8 body with bad bytes is a
    not_utf8 dead letter; either way the rest of the file is read (SPEC §9)."""
    pages = {b"utf-7": b"<p>text +2AA- with a surrogate under utf-7, five words</p>",
             b"idna": b"<p>a page whose charset is idna, with several words</p>",
             b"rot13": b"<p>a page whose charset is rot13, with several words</p>",
             b"x\x00y": b"<p>a page whose charset holds a NUL, with several words</p>",
             b"utf-8": b"<p>declared utf-8 yet caf\xe9 in latin-1 bytes, several words</p>",
             b"koi8-r": b"<p>\xf0\xd2\xc9\xd7\xc5\xd4 a page in koi8-r, five more words</p>"}
    path = tmp_path / "charsets.warc"
    path.write_bytes(b"".join(
        _raw_warc_record(b"http://c%d.example/p" % i, body, ctype=b"text/html; charset=" + cs)
        for i, (cs, body) in enumerate(pages.items())))
    proc = streamdet("run", "--input", path, "--state", tmp_path / "s", "--events", "-")
    s = summary(proc.stderr)
    rows = dump_rows(tmp_path / "s")
    assert s["dead"] == {"not_utf8": 1}, s["line"]
    assert set(rows) == {f"http://c{i}.example/p" for i in range(6)} - {"http://c4.example/p"}
    text = streamdet("text", "--state", tmp_path / "s", "http://c0.example/p").stdout
    assert "+2AA-" in text.decode()  # utf-7 is no web encoding: read as UTF-8
    text = streamdet("text", "--state", tmp_path / "s", "http://c5.example/p").stdout
    assert "Привет" in text.decode()


@pytest.mark.parametrize("value", ["nan", "inf", -1e20, "1e999", 10 ** 400, "1970-01-01T00:00:01Z",
                                   "2999-01-01T00:00:00Z", 1e308])
def test_implausible_fetch_times_are_read_as_absent_and_counted(tmp_path, value):
    """SPEC §9: not finite, before 1990 or a day ahead: the page is kept, its time
    read as absent (never in a latency figure), and the run says how many."""
    record = json.dumps({"url": "http://time.example/p", "text": "a page with a bad fetch time",
                         "fetched_at": value}).replace("Infinity", '"inf"').encode()
    path = tmp_path / "t.jsonl"
    path.write_bytes(record + b"\n")
    proc = streamdet("run", "--input", path, "--state", tmp_path / "s", "--events", "-",
                     "--metrics-port", 0)
    s = summary(proc.stderr)
    assert s["pages"] == 1 and s["dead_total"] == 0, s["line"]
    assert b"1 records had a fetched_at that is not finite" in proc.stderr


def test_credentials_are_not_part_of_a_url_and_ports_are_checked(tmp_path):
    records = [{"url": "http://user:secret@cred.example/page", "text": "one two three four five"},
               {"url": "http://cred.example:99999/page", "text": "one two three four five"},
               {"url": "http://cred.example:0/page", "text": "one two three four five"}]
    path = tmp_path / "u.jsonl"
    path.write_bytes(b"".join(_line(r) for r in records))
    proc = streamdet("run", "--input", path, "--state", tmp_path / "s", "--events", "-")
    assert summary(proc.stderr)["dead"] == {"bad_url": 2}
    assert set(dump_rows(tmp_path / "s")) == {"http://cred.example/page"}
    assert b"secret" not in proc.stdout + proc.stderr


def test_urls_are_read_as_a_browser_reads_them(tmp_path):
    """SPEC §9: a backslash in an http(s) URL's authority or path is a `/` (WHATWG), so
    `attacker.example\\@victim.example.com` is on attacker.example and never replaces
    victim's page; a host with whitespace or format characters is bad_url; an error
    sentence never quotes what may be a password, even one holding `/` or `#`."""
    text = "one two three four five six"
    records = [{"url": "http://victim.example.com/news", "text": f"victim {text}"},
               {"url": "http://attacker.example\\@victim.example.com/news",
                "text": f"attacker {text}"},
               *({"url": f"http://a{ch}b.example/", "text": text}
                 for ch in ("\u00a0", "\u2028", "\u202e")),
               {"url": "http://user:pa/ss@host.example/", "text": text},
               {"url": "http://user:se#cret@host.example/", "text": text}]
    path = tmp_path / "u.jsonl"
    path.write_bytes(b"".join(_line(r) for r in records))
    dl = tmp_path / "dl.jsonl"
    proc = streamdet("run", "--input", path, "--state", tmp_path / "s", "--events", "-",
                     "--dead-letter", dl)
    assert summary(proc.stderr)["dead"] == {"bad_url": 5}
    rows = dump_rows(tmp_path / "s")
    assert set(rows) == {"http://victim.example.com/news",
                         "http://attacker.example/@victim.example.com/news"}
    victim = streamdet("text", "--state", tmp_path / "s", "http://victim.example.com/news")
    assert victim.stdout.decode().strip() == f"victim {text}"
    errors = " ".join(e["error"] for e in read_jsonl(dl))
    assert "pa/ss" not in errors and "se#cret" not in errors and "/ss@" not in errors


def test_blank_lines_between_warc_records_are_no_damage(tmp_path):
    records = [_raw_warc_record(b"http://w%d.example/p" % i,
                                b"<p>page %d of the archive, five words at least</p>" % i)
               for i in range(3)]
    path = tmp_path / "blank.warc"
    path.write_bytes(records[0] + b"\r\n\r\n" + records[1] + b"\n" + records[2] + b"\r\n")
    proc = streamdet("run", "--input", path, "--state", tmp_path / "s", "--events", "-")
    assert summary(proc.stderr)["dead"] == {}
    assert set(dump_rows(tmp_path / "s")) == {f"http://w{i}.example/p" for i in range(3)}


@pytest.mark.parametrize("blank", [b"\r\n", b"\r\n\r\n", b"\n" * 5, b"\n" * 9, b" \t\r\n"])
def test_blank_lines_cut_by_a_read_are_no_damage_either(monkeypatch, blank):
    """Reads of 4 bytes end inside the blank lines or inside the next `WARC/`: still no
    damage is reported."""
    from streamdet.adapters import warc

    monkeypatch.setattr(warc, "_READ", 4)
    records = [_raw_warc_record(b"http://w%d.example/p" % i, b"<p>page %d</p>" % i)
               for i in range(2)]
    got = list(warc.frames(io.BytesIO(records[0] + blank + records[1]).read, 1 << 20,
                           lambda headers, parts: None))
    assert [(f.problem, f.header("WARC-Target-URI")) for f in got] == [
        (None, "http://w0.example/p"), (None, "http://w1.example/p")]


def test_damage_is_read_once_and_never_held(monkeypatch):
    """A megabyte with no `WARC/` line before a good record: reading on to that record
    reads each byte once and holds at most a read's worth of the damage (SPEC §9)."""
    from streamdet.adapters import warc

    monkeypatch.setattr(warc, "_READ", 4096)
    junk = bytes(range(256)) * 4096  # 1 MiB, no "\nWARC/" in it
    good = _raw_warc_record(b"http://ok.example/", b"<p>the one good page after the damage</p>")
    stream = io.BytesIO(junk + b"\n" + good)
    read_sizes: list[int] = []
    peak = 0

    def read(n: int) -> bytes:
        chunk = stream.read(n)
        read_sizes.append(len(chunk))
        return chunk

    fill = warc._Window.fill

    def watched_fill(self, n: int) -> bool:
        nonlocal peak
        ok = fill(self, n)
        peak = max(peak, len(self.buf))
        return ok

    monkeypatch.setattr(warc._Window, "fill", watched_fill)
    got = list(warc.frames(read, 1 << 20, lambda headers, parts: None))
    assert [f.header("WARC-Target-URI") for f in got if f.problem is None] == [
        "http://ok.example/"]
    assert sum(read_sizes) == len(junk) + 1 + len(good)
    assert peak <= 3 * 4096 + len(good)


def test_a_lone_surrogate_reads_as_a_replacement_character_everywhere(tmp_path):
    """JSON can escape a lone surrogate, UTF-8 cannot hold one: in html or text it is read
    as U+FFFD (one rule for every input and both modes), in a URL it is `bad_url`; and
    every tool then reads the state (SPEC §9)."""
    words = "a page of several words around"
    records = [{"url": "http://s0.example/html", "html": f"<p>{words} \ud800 here</p>"},
               {"url": "http://s1.example/text", "text": f"{words} \udfff\ud800 too"},
               {"url": "http://s2.example/\ud800", "html": f"<p>{words}</p>"}]
    path = tmp_path / "surrogates.jsonl"
    path.write_bytes(b"".join(json.dumps(r).encode("ascii") + b"\n" for r in records))
    proc = streamdet("run", "--input", path, "--state", tmp_path / "s", "--events", "-")
    s = summary(proc.stderr)
    assert s["dead"] == {"bad_url": 1} and s["pages"] == 2, s["line"]
    text = streamdet("text", "--state", tmp_path / "s", "http://s0.example/html").stdout
    assert f"{words} \ufffd here" in text.decode("utf-8")
    text = streamdet("text", "--state", tmp_path / "s", "http://s1.example/text").stdout
    assert f"{words} \ufffd\ufffd too" in text.decode("utf-8")
    for args in (["explain", "http://s1.example/text"], ["dump"]):
        proc = streamdet(*args, "--state", tmp_path / "s")
        assert b"Traceback" not in proc.stderr
        proc.stdout.decode("utf-8")  # valid UTF-8


def test_produce_sends_an_object_holding_a_surrogate_as_run_reads_it():
    """`produce` never dies on an object (a WARC record's) holding a lone surrogate: it
    goes out as JSON that escapes it, and a worker validates the very page `run` does."""
    from streamdet.adapters.payloads import validate
    from streamdet.adapters.publish import payload_value
    from streamdet.engine.records import page_from_object

    obj = {"url": "http://p.example/", "html": "<p>caf\udce9 cr\u00e8me</p>"}
    value = payload_value(obj)
    assert json.loads(value) == obj
    sent, direct = validate(value, 1 << 20), page_from_object(obj, 1 << 20)
    assert (sent.url, sent.html) == (direct.url, direct.html) == (
        "http://p.example/", "<p>caf\ufffd cr\u00e8me</p>")
    assert payload_value({"url": "http://p.example/", "html": "<p>cr\u00e8me</p>"}) == (
        '{"url": "http://p.example/", "html": "<p>cr\u00e8me</p>"}'.encode())


def test_a_pages_escape_sequences_never_reach_a_terminal(tmp_path):
    """SPEC §9: `text`, `explain` (with colours too) and every plain-text output escape a
    crawled page's control characters: its ESC sequences would set the reader's terminal
    title and clear the screen."""
    words = "one two three four five six seven"
    records = [{"url": "http://esc.example/p",
                "html": f"<title>t</title><p>{words}\x1b]0;OWNED\x07 and \x1b[2J\x9b31m"
                        f" {words}</p>"}]
    path = tmp_path / "esc.jsonl"
    path.write_bytes(b"".join(_line(r) for r in records))
    streamdet("run", "--input", path, "--state", tmp_path / "s", "--events", "-")
    outputs = {"text": streamdet("text", "--state", tmp_path / "s", "http://esc.example/p"),
               "explain": streamdet("explain", "--state", tmp_path / "s",
                                    "http://esc.example/p"),
               "explain --color": streamdet("explain", "--color", "always", "--state",
                                            tmp_path / "s", "http://esc.example/p")}
    for name, proc in outputs.items():
        out = proc.stdout.decode("utf-8")
        assert "\\u001b]0;OWNED\\u0007" in out and "\\u001b[2J" in out, name
        assert "\x07" not in out and "\x9b" not in out and "\x1b]" not in out, name
        assert "\x1b[2J" not in out, name


def test_plain_stdout_escapes_controls_and_keeps_a_json_line_the_same_json():
    """console.PlainStdout escapes a control character as JSON does (`\\u00NN`): a JSON
    line written as text with DEL or C1 characters in its strings stays the same JSON."""
    from streamdet.console import PlainStdout, escape_controls

    obj = {"note": "del \x7f next-line \x85 csi \x9b31m", "tab": "a\tb"}
    out = io.StringIO()
    PlainStdout(out).write(json.dumps(obj, ensure_ascii=False) + "\n")
    assert json.loads(out.getvalue()) == obj
    assert not any(0x7F <= ord(ch) < 0xA0 for ch in out.getvalue())
    assert escape_controls("a\x1b[2J\tb\nc\rd") == "a\\u001b[2J\tb\nc\\u000dd"
