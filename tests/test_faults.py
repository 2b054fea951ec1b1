"""Faults an operator meets (SPEC §9, issue "hostile input and faults"): a full disk, a
closed stdout, a read-only state, a slow stdin, a bad port. Each gets one clear line and
an exit status, loses nothing, and the next run continues exactly."""

from __future__ import annotations

import hashlib
import json
import random
import resource
import signal
import subprocess
import threading
import time
from pathlib import Path

from .cli_helpers import STREAMDET, build_crawl, dump, env, popen, real_pages, streamdet

PAGES = [p for p in real_pages(60) if len(p["html"]) < 200_000][:40]


def _jsonl(path: Path, records) -> Path:
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records))
    return path


def _limit_file_size(limit: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it fails (EFBIG)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_a_full_disk_is_one_line_and_the_next_run_continues(tmp_path):
    src = _jsonl(tmp_path / "pages.jsonl", PAGES)
    cmd = STREAMDET + ["run", "--input", str(src), "--state", str(tmp_path / "s"),
                       "--events", str(tmp_path / "events.jsonl"), "--batch", "8"]
    proc = subprocess.run(cmd, capture_output=True, env=env(), timeout=300,
                          preexec_fn=_limit_file_size(200_000))
    assert proc.returncode == 1, proc.stderr
    err = proc.stderr.decode()
    assert "Traceback" not in err
    assert "cannot write the state in" in err and str(tmp_path / "s") in err
    assert "run again with the same --state to continue" in err
    streamdet("run", "--input", src, "--state", tmp_path / "s", "--events",
              tmp_path / "events.jsonl")
    streamdet("run", "--input", src, "--state", tmp_path / "fresh", "--events", "-")
    assert dump(tmp_path / "s") == dump(tmp_path / "fresh")


def _first_line_then_close(args: list) -> subprocess.CompletedProcess:
    proc = popen(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read()
    proc.wait(timeout=300)
    return subprocess.CompletedProcess(args, proc.returncode, first, err)


def test_a_closed_stdout_stops_quietly(tmp_path):
    records = build_crawl(seed=3, n_pages=200, n_quilts=60)
    src = _jsonl(tmp_path / "crawl.jsonl", [r for r in records if isinstance(r, dict)])
    run = _first_line_then_close(["run", "--input", src, "--state", tmp_path / "s",
                                  "--events", "-", "--batch", "16"])
    assert run.stdout.startswith(b"{") and b"Traceback" not in run.stderr
    assert run.returncode == 1 and b"events output closed" in run.stderr
    streamdet("run", "--input", src, "--state", tmp_path / "s", "--events", "-")
    listing = _first_line_then_close(["dump", "--state", tmp_path / "s"])
    assert listing.stdout.startswith(b"{") and b"Traceback" not in listing.stderr
    assert listing.returncode == 0


def _tree_digest(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def test_readers_open_a_state_read_only(tmp_path):
    """dump and explain write nothing (a state on a read-only disk, or a backup, can be
    read), and they read a state a run holds open."""
    src = _jsonl(tmp_path / "pages.jsonl", PAGES[:10])
    streamdet("run", "--input", src, "--state", tmp_path / "s", "--events", "-")
    before = _tree_digest(tmp_path / "s")
    rows = dump(tmp_path / "s").splitlines()
    assert len(rows) == 10
    url = json.loads(rows[0])["url"]
    assert url.encode() in streamdet("explain", url, "--state", tmp_path / "s").stdout
    assert _tree_digest(tmp_path / "s") == before


def test_ports_out_of_range_are_refused():
    for args in (["worker", "--broker", "localhost:1", "--port", "99999"],
                 ["run", "--metrics-port", "-1"]):
        proc = streamdet(*args, check=False)
        assert proc.returncode == 2 and b"a port is 0 (any free one) to 65535" in proc.stderr


def test_a_record_trickling_in_on_stdin_is_processed_before_the_stream_ends(tmp_path):
    """Batches of a stream close on time, not only on size or at its end (SPEC §9): the
    quilt event of a page written to stdin comes while stdin stays open."""
    rng = random.Random(5)
    vocab = [f"word{i}" for i in range(3000)]
    texts = [" ".join(rng.choice(vocab) for _ in range(80)) for _ in range(4)]
    sources = [{"url": f"http://src{i}.example/p", "text": t} for i, t in enumerate(texts)]
    quilt = {"url": "http://quilt.example/p", "text": " ".join(texts)}
    proc = popen("run", "--input", "-", "--state", tmp_path / "s", "--events", "-",
                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    events: list[dict] = []
    reader = threading.Thread(target=lambda: events.extend(
        json.loads(line) for line in proc.stdout), daemon=True)
    reader.start()
    try:
        for rec in [*sources, quilt]:
            proc.stdin.write(json.dumps(rec).encode() + b"\n")
            proc.stdin.flush()
        deadline = time.monotonic() + 60
        while not any(e["url"] == quilt["url"] for e in events):
            assert time.monotonic() < deadline, "no event while stdin stayed open"
            assert proc.poll() is None
            time.sleep(0.1)
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert [e["event"] for e in events if e["url"] == quilt["url"]] == ["quilt"]


def test_kafka_security_comes_from_the_environment(monkeypatch, tmp_path):
    """Every Kafka client of a process connects as STREAMDET_KAFKA_* say (deploy/README.md
    "Security"); a wrong name or SASL without a user is one line, at start."""
    import pytest

    from streamdet.adapters.kafka import PipelineError, connection

    assert connection("b:9092") == {"bootstrap_servers": "b:9092",
                                    "security_protocol": "PLAINTEXT"}
    monkeypatch.setenv("STREAMDET_KAFKA_SECURITY_PROTOCOL", "sasl_ssl")
    with pytest.raises(PipelineError, match="STREAMDET_KAFKA_SASL_USERNAME"):
        connection("b:9092")
    monkeypatch.setenv("STREAMDET_KAFKA_SASL_USERNAME", "crawler")
    monkeypatch.setenv("STREAMDET_KAFKA_SASL_PASSWORD", "s3cret")
    got = connection("b:9092")
    assert (got["security_protocol"], got["sasl_mechanism"], got["sasl_plain_username"],
            got["sasl_plain_password"]) == ("SASL_SSL", "SCRAM-SHA-512", "crawler", "s3cret")
    assert got["ssl_context"].verify_mode.name == "CERT_REQUIRED"
    monkeypatch.setenv("STREAMDET_KAFKA_SASL_MECHANISM", "GSSAPI")
    with pytest.raises(PipelineError, match="SASL_MECHANISM must be one of"):
        connection("b:9092")
    monkeypatch.setenv("STREAMDET_KAFKA_SECURITY_PROTOCOL", "TLS")
    proc = streamdet("events", "--broker", "localhost:1", "--idle", "1", check=False)
    assert proc.returncode == 2 and b"SECURITY_PROTOCOL must be one of" in proc.stderr
    assert b"Traceback" not in proc.stderr


def test_record_batches_are_compressed_as_the_environment_says(monkeypatch):
    """Producers compress their batches with zstd unless STREAMDET_COMPRESSION names
    another codec, or `none`; any other word is a refusal naming the choices."""
    import pytest

    from streamdet.adapters.kafka import PipelineError, compression, producer

    assert compression() == "zstd"
    monkeypatch.setenv("STREAMDET_COMPRESSION", "None")
    assert compression() is None
    monkeypatch.setenv("STREAMDET_COMPRESSION", "lz4")
    assert compression() == "lz4"
    monkeypatch.setenv("STREAMDET_COMPRESSION", "snappy2")
    with pytest.raises(PipelineError, match="zstd, lz4, gzip, none"):
        producer("localhost:1")
