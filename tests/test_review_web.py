"""The review desk's web app over a real `streamdet run` state and its events file (a real
RocksDB, SQLite labels), through Starlette's test client: nothing is read or written
without a login, a forged cross-site write is refused, HTML a page holds stays text, the
marks of the page's text are the event's spans, labels survive a restart and export, and
draws and precision work end to end (also from the command line)."""

from __future__ import annotations

import base64
import json
import re
from collections import defaultdict
from contextlib import closing
from html import unescape
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from streamdet.adapters.outputs import utc_now
from streamdet.review.auth import Credentials
from streamdet.review.desk import Desk
from streamdet.review.embedded import EmbeddedSource
from streamdet.review.label_store import LabelStore
from streamdet.review.sessions import IDLE_S, LONGEST_S, SessionStore
from streamdet.review.throttle import BURST, PER_MINUTE, Throttle
from streamdet.review.web import create_app
from streamdet.state.rocks import RocksKV
from streamdet.state.schema import decode_url_entry
from streamdet.state.txn import Store

from .built_once import built_once
from .cli_helpers import SAMPLE, build_crawl, streamdet, write_jsonl
from .review_helpers import QUILT, TOKEN, make_planted, planted_in

BASE = "http://desk.test"
GETS = ["/quilts", "/page?url=" + quote(QUILT, safe=""), "/sites", "/clusters", "/precision",
        "/draws", "/draws/s1"]
API_GETS = ["/api/quilts", "/api/page?url=" + quote(QUILT, safe=""), "/api/sites",
            "/api/clusters", "/api/precision", "/api/draws/s1", "/api/status",
            "/api/labels.jsonl", "/labels.jsonl"]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Built once a test run: its tests only read the state and the events file."""
    return planted_in(built_once(tmp_path_factory, "review-planted", make_planted))


class Desked:
    """A desk app over the planted state, with its own labels file."""

    def __init__(self, planted, labels_path, credentials=None, sessions=None,
                 throttle=None) -> None:
        state, events, self.quilt = planted
        source = EmbeddedSource(lambda: Store(RocksKV(str(state), read_only=True)),
                                str(events) if events else None)
        self.labels = LabelStore(str(labels_path))
        self.desk = Desk(source, self.labels, utc_now)
        self.sessions, self._own_sessions = sessions or SessionStore(), sessions is None
        self.app = create_app(self.desk, credentials or Credentials(token=TOKEN), "k" * 32,
                              self.sessions, throttle)
        self.client = self.browser()

    def browser(self, cookies: dict | None = None) -> TestClient:
        """Another browser on the same desk (holding `cookies`, say a copied one)."""
        return TestClient(self.app, base_url=BASE, follow_redirects=False, cookies=cookies)

    def login(self, name: str = "ann", secret: str = TOKEN) -> str:
        """Log in as a browser does; this session's CSRF token."""
        r = self.client.post("/login", data={"name": name, "secret": secret, "next": "/quilts"},
                             headers={"Origin": BASE})
        assert r.status_code == 303, r.text
        page = self.client.get("/page?url=" + quote(QUILT, safe=""))
        return re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)

    def close(self) -> None:
        self.client.close()
        self.desk.source.close()
        self.labels.close()
        if self._own_sessions:
            self.sessions.close()


@pytest.fixture
def desked(planted, tmp_path):
    d = Desked(planted, tmp_path / "labels.sqlite")
    yield d
    d.close()


def test_nothing_is_read_or_written_without_a_login(desked):
    c = desked.client
    for path in GETS:
        r = c.get(path)
        assert r.status_code == 303 and r.headers["location"].startswith("/login?next="), path
    for path in API_GETS:
        assert c.get(path).status_code == 401, path
    assert c.get("/api/quilts", headers={"Authorization": "Bearer wrong-token-wrong"}
                 ).status_code == 401
    assert c.post("/label", data={"url": QUILT, "verdict": "spam"}).status_code == 401
    assert c.post("/api/labels", json={"url": QUILT, "verdict": "spam"}).status_code == 401
    assert c.post("/draws", data={"n": "1"}).status_code == 401
    assert c.post("/api/draws", json={"n": 1}).status_code == 401
    r = c.post("/login", data={"name": "ann", "secret": "not-the-token-at-all"},
               headers={"Origin": BASE})
    assert r.status_code == 401 and "streamdet_review" not in r.headers.get("set-cookie", "")
    assert list(desked.labels.all()) == []
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert c.get("/api/quilts", headers=bearer).json()["total"] == 1


COOKIE = "streamdet_review"


def test_a_session_ends_at_logout_and_a_copy_of_its_cookie_with_it(desked):
    csrf = desked.login()
    c = desked.client
    copied = {COOKIE: c.cookies[COOKIE]}  # as a thief (or a shared machine) keeps it
    thief = desked.browser(copied)
    assert thief.get("/api/status").json()["who"] == "ann"  # the same session, for now
    assert c.post("/logout", data={"csrf": csrf}).status_code == 303
    assert c.get("/api/status").status_code == 401
    assert thief.get("/api/status").status_code == 401
    assert thief.get("/quilts").headers["location"].startswith("/login")
    r = thief.post("/api/labels", json={"url": QUILT, "verdict": "spam"},
                   headers={"X-CSRF-Token": csrf})
    assert r.status_code == 401 and list(desked.labels.all()) == []


def test_a_session_ends_when_idle_and_after_a_working_day(planted, tmp_path):
    now = [1_000_000.0]
    d = Desked(planted, tmp_path / "labels.sqlite", sessions=SessionStore(clock=lambda: now[0]))
    try:
        d.login()
        for _ in range(3):  # used within the idle time, it goes on
            now[0] += IDLE_S - 60
            assert d.client.get("/api/status").status_code == 200
        now[0] += IDLE_S + 1
        assert d.client.get("/api/status").status_code == 401
        d.login()
        left = d.browser()  # logged in, then never used again
        left.post("/login", data={"name": "bo", "secret": TOKEN, "next": "/quilts"})
        began = now[0]
        while now[0] - began < LONGEST_S - IDLE_S:
            now[0] += IDLE_S / 2
            assert d.client.get("/api/status").status_code == 200
        now[0] = began + LONGEST_S + 1
        assert d.client.get("/api/status").status_code == 401
        assert d.sessions.sweep() == 1  # the one left open is removed too, not kept
        # and a login sweeps them itself: one left idle is gone when the next begins
        d.browser().post("/login", data={"name": "cy", "secret": TOKEN, "next": "/quilts"})
        now[0] += IDLE_S + 1
        d.login()
        assert d.sessions.db.execute("SELECT who FROM sessions").fetchall() == [("ann",)]
    finally:
        d.close()
        d.sessions.close()


def test_a_new_token_ends_the_sessions_opened_with_the_old_one(planted, tmp_path):
    store = SessionStore(str(tmp_path / "sessions.sqlite"))
    d = Desked(planted, tmp_path / "labels.sqlite", sessions=store)
    try:
        d.login()
        cookie = {COOKIE: d.client.cookies[COOKIE]}
        again = Desked(planted, tmp_path / "labels2.sqlite", sessions=store)  # a restart
        assert again.browser(cookie).get("/api/status").json()["who"] == "ann"
        again.close()
        other = Desked(planted, tmp_path / "labels3.sqlite", Credentials(token="t" * 32), store)
        assert other.browser(cookie).get("/api/status").status_code == 401
        other.close()
    finally:
        d.close()
        store.close()


def test_failed_logins_are_throttled_per_client_and_logged(planted, tmp_path, caplog):
    """A guesser gets BURST tries, then one every 60 / PER_MINUTE s, answered 429 with
    Retry-After, and not even the right secret works meanwhile; each failure is logged
    with the address and the name, never the secret; other clients go on."""
    now = [0.0]
    d = Desked(planted, tmp_path / "labels.sqlite", throttle=Throttle(clock=lambda: now[0]))
    try:
        c = d.client
        wrong = {"Authorization": "Bearer not-the-token-but-long"}
        with caplog.at_level("WARNING", logger="streamdet.review"):
            for i in range(BURST):
                assert c.get("/api/status", headers=wrong).status_code == 401, i
            r = c.get("/api/status", headers=wrong)
            assert r.status_code == 429 and r.json()["error"].startswith("too many failed")
            assert int(r.headers["Retry-After"]) == 60 // PER_MINUTE
            right = {"Authorization": f"Bearer {TOKEN}"}
            assert c.get("/api/status", headers=right).status_code == 429
            form = c.post("/login", data={"name": "eve", "secret": TOKEN},
                          headers={"Origin": BASE})
            assert form.status_code == 429 and "Retry-After" in form.headers
            assert "too many failed logins" in form.text.lower()
            assert c.get("/quilts", headers=wrong).status_code == 429
            other = TestClient(d.app, base_url=BASE, client=("10.0.0.9", 5000))
            assert other.get("/api/status", headers=right).status_code == 200
            now[0] += 60 / PER_MINUTE  # one more try is due: the right token works
            assert c.get("/api/status", headers=right).json()["who"] == "token"
            c.post("/login", data={"name": "mallory", "secret": "nope-nope-nope"},
                   headers={"Origin": BASE})
        failures = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
        assert len(failures) == BURST + 1
        assert failures[0] == "review: failed bearer login from testclient"
        assert failures[-1] == "review: failed login from testclient as 'mallory'"
        assert not any("not-the-token" in m or "nope-nope" in m for m in failures)
    finally:
        d.close()


def test_the_login_page_says_a_shared_token_takes_any_name(desked, planted, tmp_path):
    assert "anyone who holds\n  it may log in under any name" in desked.client.get("/login").text
    users = tmp_path / "users"
    streamdet("review", "passwd", "ann", "--users", users, input=b"correct horse\n")
    d = Desked(planted, tmp_path / "l.sqlite", Credentials.from_users_file(str(users)))
    try:
        assert 'id="token-mode"' not in d.client.get("/login").text
    finally:
        d.close()


@pytest.mark.parametrize("password, reason", [
    ("password1", "at least 12 characters"),
    ("aaaaaaaaaaaaaaaa", "more than a few different characters"),
    ("ann-is-the-best-1", "the user's name"),
    ("Password123456!", "a common word"),
    ("1234567890123", "a common word"),
])
def test_review_passwd_refuses_a_weak_password(tmp_path, password, reason):
    users = tmp_path / "users"
    out = streamdet("review", "passwd", "ann", "--users", users,
                    input=password.encode() + b"\n", check=False)
    assert out.returncode != 0 and reason in out.stderr.decode()
    assert not users.exists()


def test_a_forged_cross_site_write_is_refused(desked):
    csrf = desked.login()
    c = desked.client
    form = {"url": QUILT, "verdict": "spam", "csrf": csrf, "note": "", "draw": ""}
    for headers in ({"Origin": "http://evil.example"}, {"Origin": "null"},
                    {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"}):
        assert c.post("/label", data=form, headers=headers).status_code == 403, headers
    assert c.post("/label", data=form | {"csrf": "forged"}).status_code == 403
    assert c.post("/label", data={k: v for k, v in form.items() if k != "csrf"}
                  ).status_code == 403
    assert c.post("/api/labels", json={"url": QUILT, "verdict": "spam"}).status_code == 403
    assert c.post("/login", data={"name": "eve", "secret": TOKEN},
                  headers={"Origin": "http://evil.example"}).status_code == 403
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert c.post("/api/labels", content=json.dumps({"url": QUILT, "verdict": "spam"}),
                  headers=bearer | {"Content-Type": "text/plain"}).status_code == 415
    assert list(desked.labels.all()) == []
    r = c.post("/label", data=form, headers={"Origin": BASE, "Sec-Fetch-Site": "same-origin"})
    assert r.status_code == 303
    r = c.post("/api/labels", json={"url": QUILT, "verdict": "unsure"},
               headers={"X-CSRF-Token": csrf})
    assert r.status_code == 200 and r.json()["who"] == "ann"
    assert [lab.verdict for lab in desked.labels.all()] == ["spam", "unsure"]


def test_html_in_page_text_and_urls_stays_text(desked):
    desked.login()
    for path in ("/quilts", "/page?url=" + quote(QUILT, safe="")):
        r = desked.client.get(path)
        assert r.status_code == 200
        assert "<script>alert" not in r.text, path
        assert "&lt;script&gt;alert(&#34;u&#34;)&lt;/script&gt;" in r.text, path
        assert "script-src 'self'" in r.headers["content-security-policy"]
        assert r.headers["x-content-type-options"] == "nosniff"
    page = desked.client.get("/page?url=" + quote(QUILT, safe="")).text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_marks_of_the_text_are_the_events_spans_per_source(desked):
    desked.login()
    html = desked.client.get("/page?url=" + quote(QUILT, safe="")).text
    text = re.search(r'<div class="pagetext" id="pagetext">(.*?)</div>', html, re.S).group(1)
    spans = defaultdict(set)
    for names in re.findall(r'data-spans="([^"]*)"', text):
        for name in names.split():
            source, span = name.split(":")
            spans[int(source)].add(int(span))
    event = desked.quilt
    assert {s: len(v) for s, v in spans.items()} == {
        i: len(src["spans"]) for i, src in enumerate(event["sources"])}
    legend = re.findall(r'data-source="(\d+)" data-span-count="(\d+)"', html)
    assert [(int(s), int(n)) for s, n in legend] == [
        (i, len(src["spans"])) for i, src in enumerate(event["sources"])]
    api = desked.client.get("/api/page?url=" + quote(QUILT, safe="")).json()
    assert [s["spans"] for s in api["page"]["sources"]] == [
        s["spans"] for s in event["sources"]]
    assert [h["event"] for h in api["history"]] == ["quilt"]


def test_labels_survive_a_restart_and_export(planted, tmp_path):
    first = Desked(planted, tmp_path / "labels.sqlite")
    csrf = first.login()
    r = first.client.post("/label", data={"url": QUILT, "verdict": "spam", "note": "a farm",
                                          "csrf": csrf, "draw": ""})
    assert r.status_code == 303 and "saved=1" in r.headers["location"]
    first.close()
    again = Desked(planted, tmp_path / "labels.sqlite")
    try:
        again.login("bob")
        page = again.client.get("/page?url=" + quote(QUILT, safe="")).text
        assert re.search(r'id="current-label">Now: <span class="verdict spam">spam</span>\s+by '
                         r'ann', page)
        listed = again.client.get("/api/quilts?label=spam").json()
        assert [r["url"] for r in listed["rows"]] == [QUILT]
        assert again.client.get("/api/quilts?label=unlabelled").json()["total"] == 0
        lines = again.client.get("/labels.jsonl").text.splitlines()
        assert [(x["url"], x["verdict"], x["who"], x["note"], x["kind"]) for x in
                map(json.loads, lines)] == [(QUILT, "spam", "ann", "a farm", "article")]
        assert json.loads(lines[0])["params"]["k"] == 3
    finally:
        again.close()
    out = streamdet("review", "export", "--desk", tmp_path).stdout.decode().splitlines()
    assert out == lines


def test_users_log_in_with_their_passwords(planted, tmp_path):
    users = tmp_path / "users"
    streamdet("review", "passwd", "ann", "--users", users, input=b"correct horse\n")
    streamdet("review", "passwd", "bob", "--users", users, input=b"battery staple\n")
    assert (users.stat().st_mode & 0o777) == 0o600
    d = Desked(planted, tmp_path / "labels.sqlite", Credentials.from_users_file(str(users)))
    try:
        c = d.client
        assert c.post("/login", data={"name": "ann", "secret": "battery staple"}
                      ).status_code == 401
        assert c.get("/api/quilts", headers={"Authorization": f"Bearer {TOKEN}"}
                     ).status_code == 401
        basic = base64.b64encode(b"bob:battery staple").decode()
        r = c.get("/api/status", headers={"Authorization": f"Basic {basic}"})
        assert r.status_code == 200 and r.json()["who"] == "bob"
        d.login("ann", "correct horse")
        assert c.get("/api/status").json()["who"] == "ann"
        bob = d.browser()
        bob.post("/login", data={"name": "bob", "secret": "battery staple"})
        assert bob.get("/api/status").json()["who"] == "bob"
        # a new password for ann, on the running desk: her sessions end, bob's go on,
        # and only the new password logs her in
        streamdet("review", "passwd", "ann", "--users", users, input=b"a different horse\n")
        assert c.get("/api/status").status_code == 401
        assert bob.get("/api/status").json()["who"] == "bob"
        assert c.post("/login", data={"name": "ann", "secret": "correct horse"}
                      ).status_code == 401
        d.login("ann", "a different horse")
        assert c.get("/api/status").json()["who"] == "ann"
    finally:
        d.close()


def test_a_draw_judged_gives_the_precision_report(desked, tmp_path):
    csrf = desked.login()
    c = desked.client
    drawn = c.post("/api/draws", json={"n": 5, "seed": 7}, headers={"X-CSRF-Token": csrf}
                   ).json()
    assert drawn["urls"] == [QUILT] and drawn["name"] == "s1"
    r = c.post("/label", data={"url": QUILT, "verdict": "spam", "csrf": csrf, "draw": "s1"})
    assert r.status_code == 303 and r.headers["location"] == "/draws/s1"  # all judged
    assert c.post("/label", data={"url": "http://plain.example/", "verdict": "spam",
                                  "csrf": csrf, "draw": "s1"}).status_code == 400
    c.post("/api/labels", json={"url": "http://plain.example/", "verdict": "not_spam"},
           headers={"X-CSRF-Token": csrf})
    report = c.get("/api/precision").json()
    assert report["left_out"] == 1
    [total, kind] = report["rows"]
    assert (total["kind"], total["spam"], total["judged"], total["spam_share"]) == (
        "all", 1, 1, 1.0)
    assert kind["kind"] == "article" and total["params"]["k"] == 3
    every = c.get("/api/precision?all=1").json()
    assert every["left_out"] == 0 and every["rows"][0]["judged"] == 2
    html = c.get("/precision").text
    assert "100.0%" in html and "1 judgements of pages not drawn are left out" in html
    assert "spam" in c.get("/draws/s1").text
    desked.labels.close()
    cli = json.loads(streamdet("review", "precision", "--json", "--desk", tmp_path).stdout)
    assert cli == report


def test_quilts_show_their_spam_score_and_filter_by_it(desked):
    """The real run's quilt event carries spam_score: the list shows it and the spam
    filter keeps the quilt on its side of the threshold only."""
    desked.login()
    c = desked.client
    score = desked.quilt["spam_score"]
    (row,) = c.get("/api/quilts").json()["rows"]
    assert row["spam_score"] == score
    side, other = ("spam", "not_spam") if score >= 0.5 else ("not_spam", "spam")
    assert c.get(f"/api/quilts?spam={side}").json()["total"] == 1
    assert c.get(f"/api/quilts?spam={other}").json()["total"] == 0
    page = c.get("/quilts")
    assert f"{score:.3f}" in page.text and "highest spam score first" in page.text


@pytest.mark.parametrize("query, sentence", [
    ("offset=abc", "offset must be a whole number, not 'abc'"),
    ("offset=-3", "offset must be 0 or more, not -3"),
    ("offset=1e3", "offset must be a whole number, not '1e3'"),
    ("offset=99999999999999999999999", "offset must be a whole number"),
    ("label=maybe", "label must be one of any, unlabelled, labelled, spam, not_spam"),
    ("state=gone", "state must be one of quilted, unquilted, all"),
    ("spam=maybe", "spam must be one of all, spam, not_spam"),
    ("order=oldest", "order must be one of score, newest"),
])
def test_a_bad_parameter_is_one_plain_sentence_in_html_and_json(desked, query, sentence):
    csrf = desked.login()
    c = desked.client
    api = c.get("/api/quilts?" + query)
    assert api.status_code == 400 and api.json()["error"].startswith(sentence)
    page = c.get("/quilts?" + query)
    assert page.status_code == 400 and sentence in unescape(page.text)
    assert "invalid literal" not in page.text + api.text and "Traceback" not in page.text
    if query.startswith("offset"):
        return
    bad = c.get("/api/quilts?limit=0")
    assert bad.status_code == 400 and bad.json()["error"] == "limit must be from 1 to 1000, not 0"
    for body in ({"n": "ten"}, {"n": 5, "seed": 1.5}, {"n": True}):
        r = c.post("/api/draws", json=body, headers={"X-CSRF-Token": csrf})
        assert r.status_code == 400 and " must be " in r.json()["error"], body
    form = c.post("/draws", data={"n": "x", "csrf": csrf})
    assert form.status_code == 400 and "n must be a whole number, not 'x'" in unescape(form.text)


def test_a_label_for_a_page_the_desk_does_not_hold_is_refused(desked):
    """It would count in the precision of pages nobody reviewed: one sentence, 400, and
    nothing written; a page the state holds, quilted or not, is labelled."""
    csrf = desked.login()
    c = desked.client
    stranger = "http://nowhere.example/never-fetched"
    api = c.post("/api/labels", json={"url": stranger, "verdict": "spam"},
                 headers={"X-CSRF-Token": csrf})
    assert api.status_code == 400
    assert api.json() == {"error": f"no page {stranger!r} in this state or its events: only "
                                   "a page the desk holds can be labelled"}
    form = c.post("/label", data={"url": stranger, "verdict": "spam", "csrf": csrf})
    assert form.status_code == 400 and "only a page the desk holds" in unescape(form.text)
    assert c.get("/api/precision?all=1").json()["rows"] == []
    assert list(desked.labels.all()) == []
    for url in (QUILT, "http://plain.example/"):
        ok = c.post("/api/labels", json={"url": url, "verdict": "not_spam"},
                    headers={"X-CSRF-Token": csrf})
        assert ok.status_code == 200 and ok.json()["url"] == url
    assert [lab.url for lab in desked.labels.all()] == [QUILT, "http://plain.example/"]


def test_review_sample_draws_from_the_command_line(planted, tmp_path):
    state, events, _ = planted
    out = streamdet("review", "sample", "3", "--state", state, "--events", events,
                    "--desk", tmp_path / "desk")
    assert out.stdout.decode().splitlines() == [QUILT]
    assert b"draw s1: 1 pages" in out.stderr
    labels = LabelStore(str(tmp_path / "desk" / "labels.sqlite"))
    try:
        assert labels.draw("s1")["urls"] == [QUILT]
    finally:
        labels.close()


def test_a_page_shows_every_kind_of_event_in_its_history(planted, tmp_path):
    """Events of other kinds (partial, cluster, a later rescore) are listed with what
    they carry; the list and the cluster view follow the newest ones."""
    state, events, quilt = planted
    more = tmp_path / "events.jsonl"
    later = [{"event": "partial", "url": QUILT, "seq": 2, "other": "http://s0.example/p",
              "at": "2026-11-27T10:00:01Z"},
             {"event": "cluster", "url": QUILT, "seq": 3, "cluster": "http://a.example/",
              "cluster_size": 2, "exact_dups": 0, "at": "2026-11-27T10:00:02Z"},
             {"event": "cluster", "url": "http://a.example/", "seq": 1,
              "cluster": "http://a.example/", "cluster_size": 2, "exact_dups": 0},
             quilt | {"event": "rescore", "seq": 4, "patch_fraction": 0.75}]
    more.write_text(events.read_text() + "".join(json.dumps(e) + "\n" for e in later))
    d = Desked((state, more, quilt), tmp_path / "labels.sqlite")
    try:
        d.login()
        r = d.client.get("/page?url=" + quote(QUILT, safe=""))
        assert r.status_code == 200
        rows = re.findall(r"<tr><td>(\d+)</td><td>(\w+)</td>", r.text)
        assert rows == [("4", "rescore"), ("3", "cluster"), ("2", "partial"), ("1", "quilt")]
        assert "0.750" in r.text and "http://s0.example/p" in r.text
        listed = d.client.get("/api/quilts?cluster=http://a.example/").json()["rows"]
        assert [(x["url"], x["event"], x["patch_fraction"]) for x in listed] == [
            (QUILT, "rescore", 0.75)]
        assert d.client.get("/api/clusters").json() == [
            {"cluster": "http://a.example/", "size": 2, "urls": ["http://a.example/", QUILT]}]
        assert "http://a.example/" in d.client.get("/clusters").text
    finally:
        d.close()


def test_requests_in_parallel_while_the_run_goes_on(planted, tmp_path, monkeypatch):
    """Lists and page views from several threads while events keep arriving (polled and
    the state reopened at every request): every answer is whole, none fails."""
    from concurrent.futures import ThreadPoolExecutor

    from streamdet.review import embedded

    monkeypatch.setattr(embedded, "POLL", 0.0)
    monkeypatch.setattr(embedded, "REOPEN", 0.0)
    state, events, quilt = planted
    feed = tmp_path / "events.jsonl"
    feed.write_text(events.read_text())
    d = Desked((state, feed, quilt), tmp_path / "labels.sqlite")
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    page = "/api/page?url=" + quote(QUILT, safe="")

    def grow() -> None:
        for i in range(1000):
            with open(feed, "a") as f:
                f.write(json.dumps(quilt | {"url": f"http://more.example/{i}", "seq": 1})
                        + "\n")

    def ask(i: int) -> int:
        r = d.client.get("/api/quilts?limit=1000" if i % 2 else page, headers=bearer)
        return r.status_code

    try:
        with ThreadPoolExecutor(6) as pool:
            grower = pool.submit(grow)
            codes = list(pool.map(ask, range(200)))
            grower.result()
        assert codes == [200] * 200
        assert d.client.get("/api/quilts", headers=bearer).json()["total"] == 1001
    finally:
        d.close()


def test_without_an_events_file_the_quilts_come_from_the_state(planted, tmp_path):
    """No --events: the view holds each page quilted now, with the state's parameters
    and its sources' spans, and no history before it."""
    state, _, quilt = planted
    d = Desked((state, None, quilt), tmp_path / "labels.sqlite")
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    try:
        [row] = d.client.get("/api/quilts", headers=bearer).json()["rows"]
        assert (row["url"], row["params"]) == (QUILT, quilt["params"])
        assert [s["url"] for s in row["sources"]] == [s["url"] for s in quilt["sources"]]
        assert d.client.get("/api/status", headers=bearer).json()["events"] is None
    finally:
        d.close()


def test_the_demo_of_the_readme_fills_the_desks_lists(tmp_path):
    """The README's main job (the bundled sample, with its events): the desk a new user
    opens on it lists the planted quilts, three of them on one farm host, and the
    mirrors' near-duplicate clusters."""
    state, events = tmp_path / "demo", tmp_path / "demo-events.jsonl"
    streamdet("run", "--state", state, "--events", events)
    d = Desked((state, events, None), tmp_path / "labels.sqlite")
    try:
        d.login()
        quilts = d.client.get("/api/quilts").json()
        truth = json.loads((SAMPLE.with_name("sample-truth.json")).read_text())
        assert {r["url"] for r in quilts["rows"]} == set(truth)
        farm = {u.split("/")[2] for u in truth}
        assert max(sum(u.split("/")[2] == h for u in truth) for h in farm) == 3
        clusters = d.client.get("/api/clusters").json()
        assert len(clusters) >= 4 and any("mirror.readinglist.example" in json.dumps(c)
                                          for c in clusters)
        assert "No quilt matches" not in d.client.get("/quilts").text
        # the farm shows among the state's sites before it is a monster candidate
        sites = d.client.get("/api/sites").json()
        host = max(farm, key=lambda h: sum(u.split("/")[2] == h for u in truth))
        [row] = [r for r in sites["state"] if (r["site"], r["level"]) == (host, "host")]
        assert (row["pages"], row["quilted"]) == (3, 3) and sites["sites"] == []
        assert all(r["pages"] >= 2 for r in sites["state"])
        page = d.client.get("/sites").text
        assert 'id="state-sites"' in page and host in page
    finally:
        d.close()


def test_without_events_the_list_is_newest_arrival_first_and_says_what_it_lacks(tmp_path):
    """Rows in the order their versions arrived, newest first, each shown by its arrival
    (no event, time or cause: the page says so), not as 'quilt #0' in URL order."""
    crawl = build_crawl(seed=5, n_pages=40, n_quilts=12)
    state = tmp_path / "state"
    streamdet("run", "--input", write_jsonl(tmp_path / "in.jsonl", crawl), "--state", state,
              "-k", "3")
    arrived = {}
    with closing(Store(RocksKV(str(state), read_only=True))) as store:
        for key, raw in store.kv.items("urls"):
            arrived[key.decode()] = decode_url_entry(raw)[0]  # docnos: in arrival order
    d = Desked((state, None, None), tmp_path / "labels.sqlite")
    try:
        d.login()
        rows = d.client.get("/api/quilts").json()["rows"]
        assert len(rows) >= 3 and {r["event"] for r in rows} == {"state"}
        order = [arrived[r["url"]] for r in rows]
        assert order == sorted(order, reverse=True) and len(set(order)) == len(rows)
        page = d.client.get("/quilts").text
        assert 'id="from-state"' in page and " #0" not in page
        assert f"version {rows[0]['seq']}" in page
    finally:
        d.close()


def test_events_of_the_wrong_shape_change_nothing(planted, tmp_path):
    """An events file holding lines of the wrong shape (SPEC §9): each is passed over,
    and every list and page still answers, as from the good events alone."""
    state, events, quilt = planted
    feed = tmp_path / "events.jsonl"
    bad = [quilt | {"url": "http://x.example/1", "sources": "junk"},
           quilt | {"url": "http://x.example/2", "at": 5},
           quilt | {"url": "http://x.example/3", "seq": "7"},
           quilt | {"url": "http://x.example/4", "seq": True},
           quilt | {"url": "http://x.example/5", "patch_fraction": "0.9"},
           quilt | {"url": "http://x.example/6", "sources": [1, 2]},
           {"event": "site", "level": "host", "site": "x.example", "seq": 1,
            "pop_mean": "high", "monster": True},
           {"event": "site", "level": "host", "seq": 1, "monster": True},
           {"event": "cluster", "url": QUILT, "seq": 9, "cluster": "c", "cluster_size": []},
           {"event": "quilt", "url": ["not", "a", "url"], "seq": 1},
           quilt | {"url": "http://x.example/7", "event": 5}, [], "text", 7]
    deep = "[" * 100_000 + "]" * 100_000  # JSON too deeply nested to read
    feed.write_text(events.read_text() + "".join(json.dumps(e) + "\n" for e in bad)
                    + deep + "\n")
    d = Desked((state, feed, quilt), tmp_path / "labels.sqlite")
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    try:
        listed = d.client.get("/api/quilts?state=all", headers=bearer).json()
        assert [r["url"] for r in listed["rows"]] == [QUILT]
        assert d.client.get("/api/sites", headers=bearer).json() == {
            "sites": [], "neighbourhoods": [], "state": []}  # (the planted state's sites)
        assert d.client.get("/api/clusters", headers=bearer).json() == []
        d.login()
        for path in ("/quilts", "/sites", "/clusters", "/page?url=" + quote(QUILT, safe="")):
            assert d.client.get(path).status_code == 200, path
        assert d.desk.source.feed.skipped == len(bad) + 1  # every bad line, and the deep one
    finally:
        d.close()
