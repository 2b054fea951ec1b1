"""The command line a person meets: clear one-line errors with exit status 2, `explain`
and `dump` output, the progress display on a terminal and the final summary line."""

from __future__ import annotations

import json
import os
import pty
import subprocess

import pytest

from .cli_helpers import (
    DUMP_KEYS,
    STREAMDET,
    build_crawl,
    dump,
    env,
    streamdet,
    summary,
    write_jsonl,
)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A small crawl with planted quilts, and a state built from it."""
    d = tmp_path_factory.mktemp("cli")
    crawl = build_crawl(seed=5, n_pages=40, n_quilts=12)
    path = write_jsonl(d / "crawl.jsonl", crawl)
    proc = streamdet("run", "--input", path, "--state", d / "state", "--events", d / "ev.jsonl")
    return d, path, crawl, proc


def _error(*args, status: int = 2) -> str:
    proc = streamdet(*args, check=False)
    err = proc.stderr.decode()
    assert proc.returncode == status, (proc.returncode, err)
    assert "Traceback" not in err, err
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("streamdet: error: "), err
    assert proc.stdout == b""
    return lines[0]


# -- errors ------------------------------------------------------------------------------
def test_missing_input_file(tmp_path):
    msg = _error("run", "--input", tmp_path / "nope.jsonl", "--state", tmp_path / "s")
    assert "not found" in msg and "nope.jsonl" in msg
    assert not (tmp_path / "s").exists(), "no state is made for a run that cannot start"


def test_input_is_a_directory(tmp_path):
    msg = _error("run", "--input", tmp_path, "--state", tmp_path / "s")
    assert "directory" in msg


def test_unwritable_state_directory(tmp_path, small):
    _, path, _, _ = small
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    msg = _error("run", "--input", path, "--state", blocker / "state")
    assert str(blocker / "state") in msg
    msg = _error("run", "--input", path, "--state", "/proc/streamdet-cannot-be-here/state")
    assert "state" in msg
    msg = _error("run", "--input", path, "--state", blocker)  # the state is a file
    assert "not a directory" in msg


def test_unwritable_outputs(tmp_path, small):
    _, path, _, _ = small
    blocker = tmp_path / "a-file"
    blocker.write_text("x\n")
    msg = _error("run", "--input", path, "--state", tmp_path / "s", "--events",
                 blocker / "events.jsonl")
    assert "events" in msg
    msg = _error("run", "--input", path, "--state", tmp_path / "s", "--dead-letter", tmp_path)
    assert "dead-letter" in msg
    msg = _error("run", "--input", path, "--state", tmp_path / "s", "--events", path)
    assert "also an input" in msg


def test_state_built_with_other_parameters(tmp_path, small):
    _, path, crawl, _ = small
    part = write_jsonl(tmp_path / "part.jsonl", crawl[:10])
    streamdet("run", "--input", part, "--state", tmp_path / "s", "-k", "5", "--events", "-")
    before = dump(tmp_path / "s")
    msg = _error("run", "--input", path, "--state", tmp_path / "s", "-k", "4", "--events", "-")
    assert "k=5" in msg and "other parameters" in msg
    msg = _error("run", "--input", path, "--state", tmp_path / "s", "--foreign", "host",
                 "--events", "-")
    assert "foreign='domain'" in msg
    msg = _error("run", "--input", path, "--state", tmp_path / "s", "--phi", "0.1",
                 "--events", "-")
    assert "phi=0.0 (asked 0.1)" in msg
    assert dump(tmp_path / "s") == before


def test_dump_and_explain_without_state(tmp_path):
    for where in (tmp_path, tmp_path / "missing"):
        msg = _error("dump", "--state", where)
        assert "no streamdet state" in msg
        msg = _error("explain", "http://example.com/", "--state", where)
        assert "no streamdet state" in msg
        msg = _error("review", "--state", where, "--desk", tmp_path / "desk",
                     "--bind", "127.0.0.1:0")
        assert "no streamdet state" in msg


def test_bad_arguments(tmp_path, small):
    _, path, _, _ = small
    assert "batch" in _error("run", "--input", path, "--state", tmp_path / "s", "--batch", "0")
    assert "k must be" in _error("run", "--input", path, "--state", tmp_path / "s", "-k", "0")
    assert "theta" in _error("run", "--input", path, "--state", tmp_path / "s",
                             "--theta", "1.5")
    msg = _error("run", "--input", path, "--input", str(path), "--state", tmp_path / "s")
    assert "twice" in msg
    msg = _error("run", "--input", path, "--state", tmp_path / "s", "--memory", "lots")
    assert "--memory: not a size: 'lots'" in msg
    assert "too small" in _error("run", "--input", path, "--state", tmp_path / "s",
                                 "--memory", "100MB")


# -- dump and explain --------------------------------------------------------------------
def test_dump_rows_sorted_with_the_spec_keys(small):
    d, _, crawl, _ = small
    lines = dump(d / "state").decode("utf-8").splitlines()
    rows = [json.loads(line) for line in lines]
    urls = [r["url"] for r in rows]
    assert urls == sorted(urls) and len(set(urls)) == len(urls)
    assert set(urls) == {r["url"] for r in crawl}
    for r in rows:
        assert list(r) == DUMP_KEYS, r.keys()
        assert isinstance(r["quilted"], bool)
        assert isinstance(r["n_grams"], int) and isinstance(r["n_patch_grams"], int)
        assert r["patch_fraction"] == (r["n_patch_grams"] / r["n_grams"] if r["n_grams"] else 0)
        for s in r["sources"]:
            assert list(s) == ["url", "grams", "share", "spans"] and s["grams"] > 0
            assert s["share"] == s["grams"] / r["n_patch_grams"] and s["spans"]
            assert all(a < b for a, b in s["spans"])
    assert any(r["quilted"] for r in rows) and not all(r["quilted"] for r in rows)


def _explain(url, state) -> subprocess.CompletedProcess:
    return streamdet("explain", url, "--state", state, check=False)


def test_explain_known_urls(small):
    d, _, _, _ = small
    rows = {json.loads(x)["url"]: json.loads(x) for x in dump(d / "state").splitlines()}
    quilt = next(u for u, r in rows.items() if r["quilted"])
    proc = _explain(quilt, d / "state")
    out = proc.stdout.decode()
    assert proc.returncode == 0 and proc.stderr == b""
    assert out.startswith(quilt) and "QUILTED" in out and "patch fraction" in out
    for s in rows[quilt]["sources"]:
        assert s["url"] in out
    plain = next(u for u, r in rows.items() if not r["quilted"] and r["n_grams"])
    proc = _explain(plain, d / "state")
    assert proc.returncode == 0 and "not quilted" in proc.stdout.decode()


def test_explain_shows_each_sources_passages_and_text_prints_the_page(small):
    """`explain` marks each source's passages in the page's text ([n> ... <n] off a
    terminal, colours with --color always); `--json` gives spans into its `text`, which
    is what `streamdet text` prints."""
    d, _, _, _ = small
    rows = {json.loads(x)["url"]: json.loads(x) for x in dump(d / "state").splitlines()}
    quilt = next(u for u, r in rows.items() if r["quilted"])
    out = _explain(quilt, d / "state").stdout.decode()
    assert "[1>" in out and "<1]" in out and "\x1b[" not in out
    coloured = streamdet("explain", quilt, "--state", d / "state", "--color", "always")
    assert b"\x1b[1;31m" in coloured.stdout
    got = json.loads(streamdet("explain", quilt, "--state", d / "state", "--json").stdout)
    assert got["sources"] == rows[quilt]["sources"] and got["quilted"]
    text = streamdet("text", quilt, "--state", d / "state").stdout.decode()
    assert text.rstrip("\n") == got["text"].rstrip("\n")
    for s in got["sources"]:  # each span starts and ends on a word of the page
        for a, b in s["spans"]:
            assert got["text"][a].isalnum() and got["text"][b - 1].isalnum()
    missing = streamdet("text", "https://never-seen.example.com/", "--state", d / "state",
                        check=False)
    assert missing.returncode == 1 and b"is not in this state" in missing.stderr


def test_explain_unknown_url(small):
    d, _, _, _ = small
    proc = _explain("https://never-seen.example.com/page", d / "state")
    assert proc.returncode == 1
    out = proc.stdout.decode()
    assert "is not in this state" in out and "Traceback" not in proc.stderr.decode()
    known = next(json.loads(x)["url"] for x in dump(d / "state").splitlines()
                 if json.loads(x)["url"].endswith("/"))
    proc = _explain(known.rstrip("/"), d / "state")
    assert proc.returncode == 1 and f"Did you mean {known}" in proc.stdout.decode()


def test_clusters_in_dump_explain_and_events(tmp_path):
    """SPEC §6 on the command line: two exact copies and a near copy of one article on
    three sites make a cluster named by the smallest URL; `explain` names it and lists the
    direct near-duplicates with their resemblance (1.0 for the exact copy); the copies
    got `cluster` events, the page alone got none."""
    words = [f"word{i % 97}x{i % 13}" for i in range(400)]
    near = list(words)
    near[200] = "changed"
    recs = [{"url": "https://c.example/a", "text": " ".join(words)},
            {"url": "https://b.example/a", "text": " ".join(words)},
            {"url": "https://d.example/a", "text": " ".join(near)},
            {"url": "https://e.example/a", "text": "a page of its own with other words " * 9}]
    path = write_jsonl(tmp_path / "recs.jsonl", recs)
    streamdet("run", "--input", path, "--state", tmp_path / "s", "--events", tmp_path / "ev")
    rows = {json.loads(x)["url"]: json.loads(x) for x in dump(tmp_path / "s").splitlines()}
    assert rows["https://c.example/a"]["cluster"] == "https://b.example/a"
    assert [rows[u]["cluster_size"] for u in sorted(rows)] == [3, 3, 3, 1]
    assert [rows[u]["exact_dups"] for u in sorted(rows)] == [1, 1, 0, 0]
    assert rows["https://e.example/a"]["cluster"] == "https://e.example/a"
    got = json.loads(streamdet("explain", "https://c.example/a", "--state", tmp_path / "s",
                               "--json").stdout)
    assert (got["cluster"], got["cluster_size"], got["exact_dups"]) == \
        ("https://b.example/a", 3, 1)
    assert got["near"][0] == {"url": "https://b.example/a", "resemblance": 1.0}
    assert [n["url"] for n in got["near"]] == ["https://b.example/a", "https://d.example/a"]
    assert 0.8 < got["near"][1]["resemblance"] < 1.0
    out = _explain("https://c.example/a", tmp_path / "s").stdout.decode()
    assert "near-duplicate cluster https://b.example/a: 3 pages, 1 exact" in out
    assert "https://d.example/a" in out
    alone = _explain("https://e.example/a", tmp_path / "s").stdout.decode()
    assert "near-duplicates: none" in alone
    events = [json.loads(x) for x in (tmp_path / "ev").read_text().splitlines()]
    clustered = {e["url"]: e for e in events if e["event"] == "cluster"}
    assert set(clustered) == {"https://b.example/a", "https://c.example/a",
                              "https://d.example/a"}
    assert all(e["cluster"] == "https://b.example/a" for e in clustered.values())
    listed = [json.loads(x) for x in streamdet("dump", "--clusters", "--state",
                                                tmp_path / "s").stdout.splitlines()]
    assert listed == [{"cluster": "https://b.example/a", "size": 3, "members": [
        "https://b.example/a", "https://c.example/a", "https://d.example/a"]}]


# -- progress and summary -----------------------------------------------------------------
def _run_on_pty(*args) -> tuple[int, bytes]:
    """Run streamdet with stderr on a pseudo-terminal; return (status, terminal bytes)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(STREAMDET + [str(a) for a in args], stdout=subprocess.DEVNULL,
                            stderr=slave, env=env())
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return proc.wait(timeout=300), out


def test_progress_on_a_terminal_and_summary_always(small, tmp_path):
    d, path, crawl, proc = small
    # not a terminal: no progress line, only the summary
    assert b"\r" not in proc.stderr and b"\x1b[" not in proc.stderr
    s = summary(proc.stderr)
    assert s["pages"] == len(crawl) and s["events"].get("quilt", 0) > 0
    assert len(proc.stderr.decode().strip().split("\n")) == 1

    status, tty = _run_on_pty("run", "--input", path, "--state", tmp_path / "s",
                              "--events", tmp_path / "ev.jsonl", "--batch", "8")
    assert status == 0
    text = tty.decode("utf-8", "replace")
    progress = [p for p in text.split("\r") if "pages/s" in p and "quilts" in p]
    assert progress, text
    assert "%" in progress[0] and "dead letters" in progress[0]
    assert summary(tty.replace(b"\r\n", b"\n"))["pages"] == len(crawl)


def test_summary_on_empty_input(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    proc = streamdet("run", "--input", empty, "--state", tmp_path / "s", "--events", "-")
    s = summary(proc.stderr)
    assert (s["pages"], s["dead_total"], s["events"]) == (0, 0, {})
    assert proc.stdout == b""


def test_dump_into_a_reader_that_stops_early_ends_quietly(small):
    """`streamdet dump | head -1`: the reader closes the pipe (here before dump writes,
    so that the write fails whatever the pipe's buffer); no traceback, status 0."""
    d, *_ = small
    r, w = os.pipe()
    os.close(r)
    proc = subprocess.Popen([*STREAMDET, "dump", "--state", d / "state"], env=env(),
                            stdout=w, stderr=subprocess.PIPE)
    os.close(w)
    err = proc.stderr.read().decode()
    assert proc.wait(60) == 0, err
    assert "Traceback" not in err and err == ""


def test_a_new_state_warns_before_appending_to_an_events_file(tmp_path):
    """`run` appends to its events file (a restarted run goes on where its state
    stopped); a new state writing to a file of events warns that seqs start again."""
    crawl = write_jsonl(tmp_path / "in.jsonl", build_crawl(seed=5, n_pages=40, n_quilts=12))
    events = tmp_path / "events.jsonl"
    first = streamdet("run", "--input", crawl, "--state", tmp_path / "a", "--events", events)
    assert b"warning" not in first.stderr
    held = events.read_bytes()
    assert held
    again = streamdet("run", "--input", crawl, "--state", tmp_path / "a", "--events", events)
    assert b"warning" not in again.stderr  # the same state goes on: nothing new
    fresh = streamdet("run", "--input", crawl, "--state", tmp_path / "b", "--events", events)
    assert b"already holds events and this state is new" in fresh.stderr
    after = events.read_bytes()
    assert after.startswith(held)  # appended to, as before
    assert after.count(b"\n") == 2 * held.count(b"\n")  # the same events once more
