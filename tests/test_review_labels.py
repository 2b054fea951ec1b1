"""The review desk's judgements: labels, their SQLite store (durable through a kill -9),
uniform draws, precision per setting and kind (Najork's Table 2), and credentials."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections import Counter

import pytest

from streamdet.review.auth import AuthError, Credentials, hash_password, verify_password
from streamdet.review.label_store import LabelStore, LabelStoreError
from streamdet.review.labels import Label, LabelError, page_kind
from streamdet.review.precision import Z95, precision_report, wilson
from streamdet.review.sampling import draw

PARAMS = {"k": 5, "m": 50, "c": 4, "theta": 0.5, "foreign": "domain"}


def lab(url: str, verdict: str, **kw) -> Label:
    return Label(url, verdict, kw.pop("who", "ana"), kw.pop("at", "2026-11-27T10:00:00Z"),
                 **kw)


def test_a_label_refuses_what_it_cannot_record():
    for bad in [dict(verdict="maybe"), dict(url=""), dict(note="x" * 4001), dict(who="")]:
        args = {"url": "http://a.example/p", "verdict": "spam", "who": "ana",
                "at": "2026-11-27T10:00:00Z"} | bad
        with pytest.raises(LabelError):
            Label(**args)
    one = lab("http://a.example/p", "not_spam", note="a song's lyrics <b>", params=PARAMS)
    assert Label.from_json(one.to_json()) == one
    with pytest.raises(LabelError):
        Label.from_json('{"url": "x"}')


def test_kinds_of_page():
    assert [page_kind(u) for u in (
        "http://a.example", "http://a.example/", "http://a.example/index.html",
        "http://a.example/blog/", "http://a.example/blog/index.php",
        "http://a.example/blog/post-1.html", "http://a.example/p?q=1")] == [
        "home", "home", "home", "listing", "listing", "article", "article"]


def test_the_store_keeps_every_judgement_and_answers_with_the_newest(tmp_path):
    path = str(tmp_path / "labels.sqlite")
    store = LabelStore(path)
    first = store.add(lab("http://a.example/p", "spam", params=PARAMS, kind="article"))
    store.add(lab("http://b.example/", "unsure", kind="home"))
    newer = store.add(lab("http://a.example/p", "not_spam", who="bo", note="lyrics"))
    assert first.id < newer.id
    store.close()
    store = LabelStore(path)  # reopened: nothing lost
    latest = store.latest(["http://a.example/p", "http://b.example/", "http://c.example/"])
    assert set(latest) == {"http://a.example/p", "http://b.example/"}
    assert latest["http://a.example/p"] == newer
    assert [x.verdict for x in store.history("http://a.example/p")] == ["spam", "not_spam"]
    assert [x.url for x in store.current()] == ["http://b.example/", "http://a.example/p"]
    assert [x.id for x in store.all()] == [1, 2, 3]
    many = [f"http://h{i}.example/" for i in range(1200)]  # past SQLite's parameter bound
    for u in many[::7]:
        store.add(lab(u, "spam"))
    assert set(store.latest(many)) == set(many[::7])
    store.close()


def test_a_label_acknowledged_survives_a_kill_9(tmp_path):
    path = str(tmp_path / "labels.sqlite")
    code = (
        "import os, signal, sys\n"
        "from streamdet.review.label_store import LabelStore\n"
        "from streamdet.review.labels import Label\n"
        "s = LabelStore(sys.argv[1])\n"
        "for i in range(20):\n"
        "    s.add(Label(f'http://x{i}.example/', 'spam', 'ana', '2026-11-27T10:00:00Z'))\n"
        "print('acknowledged', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n")
    done = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True)
    assert done.returncode == -9 and "acknowledged" in done.stdout
    store = LabelStore(path)
    assert len(list(store.all())) == 20
    store.close()


def test_draws_are_uniform_kept_and_named(tmp_path):
    quilts = [f"http://q{i}.example/" for i in range(10)]
    assert draw(quilts, 3, 7) == draw(list(reversed(quilts)), 3, 7)
    assert sorted(draw(quilts, 50, 1)) == sorted(quilts)
    with pytest.raises(ValueError):
        draw(quilts, 0, 1)
    hits = Counter(u for seed in range(3000) for u in draw(quilts, 2, seed))
    assert all(abs(hits[u] / 3000 - 0.2) < 0.03 for u in quilts), hits  # n/N each
    store = LabelStore(str(tmp_path / "labels.sqlite"))
    name = store.add_draw(draw(quilts, 4, 3), 3, PARAMS, "2026-11-27T10:00:00Z")
    kept = store.draw(name)
    assert kept["urls"] == draw(quilts, 4, 3) and kept["params"] == PARAMS
    assert store.draws() == [name] and store.draw("s999") is None and store.draw("x") is None
    store.close()


def test_wilson_endpoints_solve_the_score_equation():
    for s, n in [(34, 100), (0, 10), (10, 10), (1, 3), (27, 100)]:
        lo, hi = wilson(s, n)
        p = s / n
        for p0 in (lo, hi):  # (p - p0)^2 = z^2 p0 (1 - p0) / n at both ends
            assert (p - p0) ** 2 == pytest.approx(Z95**2 * p0 * (1 - p0) / n, abs=1e-12)
        assert 0 <= lo <= p <= hi <= 1
    assert wilson(0, 0) is None
    assert [round(x, 4) for x in wilson(34, 100)] == [0.2546, 0.4372]


def test_precision_per_setting_and_kind_counts_draws_only_by_default():
    other = PARAMS | {"m": 10}
    labels = [lab("http://a.example/1", "spam", params=PARAMS, kind="article", sample="s1"),
              lab("http://a.example/2", "not_spam", params=PARAMS, kind="article", sample="s1"),
              lab("http://a.example/", "not_spam", params=PARAMS, kind="home", sample="s1"),
              lab("http://a.example/3", "unsure", params=PARAMS, kind="article", sample="s1"),
              lab("http://b.example/1", "spam", params=other, kind="article", sample="s2"),
              lab("http://c.example/1", "spam", params=PARAMS, kind="article")]  # browsing
    report = precision_report(labels)
    assert report["left_out"] == 1 and report["sampled_only"]
    rows = {(json.dumps(r["params"], sort_keys=True), r["kind"]): r for r in report["rows"]}
    pivot = rows[json.dumps(PARAMS, sort_keys=True), "all"]
    assert (pivot["judged"], pivot["spam"], pivot["not_spam"], pivot["unsure"]) == (4, 1, 2, 1)
    assert pivot["spam_share"] == pytest.approx(1 / 3)
    assert pivot["interval95"] == pytest.approx(list(wilson(1, 3)))
    assert rows[json.dumps(PARAMS, sort_keys=True), "home"]["spam_share"] == 0
    assert rows[json.dumps(other, sort_keys=True), "all"]["spam_share"] == 1
    order = [r["kind"] for r in report["rows"] if r["params"] == PARAMS]
    assert order == ["all", "article", "home"]  # all kinds first, then each
    everything = precision_report(labels, sampled=False)
    assert everything["left_out"] == 0
    pivot_all = [r for r in everything["rows"] if r["params"] == PARAMS and r["kind"] == "all"]
    assert pivot_all[0]["judged"] == 5 and pivot_all[0]["spam"] == 2


def test_passwords_and_tokens(tmp_path):
    stored = hash_password("correct horse")
    assert verify_password("correct horse", stored)
    assert not verify_password("wrong horse", stored)
    assert not verify_password("x", "md5$abc") and not verify_password("x", "garbage")
    users = tmp_path / "users"
    users.write_text(f"# reviewers\nana:{stored}\n\nbo:{hash_password('b' * 12)}\n")
    cred = Credentials.from_users_file(str(users))
    assert cred.mode == "users"
    assert cred.login("ana", "correct horse") == "ana"
    assert cred.login("ana", "wrong") is None and cred.login("eve", "correct horse") is None
    assert not cred.bearer("anything")
    (tmp_path / "bad").write_text("ana:plaintext\n")
    with pytest.raises(AuthError, match="line 1"):
        Credentials.from_users_file(str(tmp_path / "bad"))
    with pytest.raises(AuthError):
        Credentials(token="short")
    with pytest.raises(AuthError):
        Credentials()
    made = tmp_path / "token"
    cred = Credentials.made_in(str(made))
    assert stat.S_IMODE(os.stat(made).st_mode) == 0o600
    assert Credentials.made_in(str(made)).token == cred.token  # kept, not made again
    assert cred.login("ana", cred.token) == "ana" and cred.login("ana", "x" * 40) is None
    assert cred.bearer(cred.token) and not cred.bearer(cred.token[:-1])


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_labels_and_their_directory_are_private(tmp_path):
    """Labels name reviewers and what they judged: the desk directory is 0700, the
    labels file and SQLite's -wal and -shm beside it 0600, also when an older desk left
    them readable to every local user."""
    desk = tmp_path / "desk"
    store = LabelStore(str(desk / "labels.sqlite"))
    try:
        store.add(lab("http://x.example/", "spam"))
        files = [desk / n for n in ("labels.sqlite", "labels.sqlite-wal", "labels.sqlite-shm")]
        assert _mode(desk) == 0o700 and [_mode(f) for f in files] == [0o600] * 3
    finally:
        store.close()
    old = tmp_path / "old"
    old.mkdir(mode=0o755)
    (old / "labels.sqlite").touch(mode=0o644)
    os.chmod(old, 0o755)
    os.chmod(old / "labels.sqlite", 0o644)
    LabelStore(str(old / "labels.sqlite")).close()
    assert _mode(old) == 0o700 and _mode(old / "labels.sqlite") == 0o600


def test_a_file_that_is_not_a_labels_file_is_refused(tmp_path):
    bad = tmp_path / "x.sqlite"
    bad.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(LabelStoreError):
        LabelStore(str(bad))


def test_a_desk_reads_the_token_another_desk_is_still_writing(tmp_path):
    """Two desks starting at once: the one that did not create the token file may find it
    still empty; it reads again until the other has written the token."""
    import threading

    path = tmp_path / "token"
    path.write_text("")  # created (O_EXCL) by the other desk, not yet written
    token = "x" * 43
    writer = threading.Timer(0.2, lambda: path.write_text(token + "\n"))
    writer.start()
    try:
        assert Credentials.made_in(str(path)).token == token
    finally:
        writer.join()
    made = [Credentials.made_in(str(tmp_path / "new")).token for _ in range(2)]
    assert made[0] == made[1] == (tmp_path / "new").read_text().strip()
