"""The review desk over HTTP: HTML pages for a reviewer and a JSON API for scripts, both
behind a login (auth.py), as one Starlette app that `streamdet review` serves with
uvicorn (embedded) or beside its faust agents (Kafka).

Who may do what:
- every route but /login and /static needs a login: a browser's signed session cookie
  (SameSite=Strict, HttpOnly), or `Authorization: Bearer TOKEN` (token mode) or HTTP
  Basic (users mode) from a script;
- a write from a browser carries the session's CSRF token (a form field or the
  X-CSRF-Token header), and any write whose Origin or Sec-Fetch-Site says another site
  sent it is refused; a script's write must be JSON (a cross-site form cannot send it);
- secrets never appear in a URL (login is a POST) or a log line.
Pages are rendered by Jinja2 with autoescape on, under a Content-Security-Policy that
allows the desk's own script and style only: text a crawled page holds stays text."""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import re
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, urlencode, urlsplit

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, MutableHeaders
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import (
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .auth import Credentials
from .desk import Desk, DeskError
from .highlight import COLOURS, pieces
from .labels import VERDICTS, LabelError
from .lists import LABEL_STATES, ORDERS, PAGE_SIZE, QUILT_STATES, SPAM_STATES, QuiltFilter
from .projection import STATE_EVENT
from .sessions import LONGEST_S, Session, SessionStore
from .throttle import Throttle

HERE = Path(__file__).parent
_UNKNOWN = object()  # a request's session not looked up yet
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no page URL to other sites; Origin sent here
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def create_app(desk: Desk, credentials: Credentials, session_key: str,
               sessions: SessionStore | None = None, throttle: Throttle | None = None
               ) -> Starlette:
    """The desk's app; `session_key` signs the session cookies, which hold a session's id
    only; `sessions` keeps the sessions (review.sessions; kept in the desk directory so
    that a restart does not log everyone out, in memory when not given)."""
    templates = Jinja2Templates(env=jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(HERE / "templates")), autoescape=True))
    templates.env.globals.update(colours=COLOURS, verdicts=VERDICTS)
    h = _Handlers(desk, credentials, templates, sessions or SessionStore(),
                  throttle or Throttle())
    routes = [
        Route("/login", h.login_form, methods=["GET"]),
        Route("/login", h.login, methods=["POST"]),
        Route("/logout", h.logout, methods=["POST"]),
        Route("/", lambda r: RedirectResponse("/quilts", 303)),
        Route("/quilts", h.quilts_page),
        Route("/page", h.page_page),
        Route("/label", h.label_form_post, methods=["POST"]),
        Route("/sites", h.sites_page),
        Route("/clusters", h.clusters_page),
        Route("/precision", h.precision_page),
        Route("/draws", h.draws_page, methods=["GET"]),
        Route("/draws", h.draw_form_post, methods=["POST"]),
        Route("/draws/{name}", h.draw_page),
        Route("/labels.jsonl", h.export),
        Route("/api/quilts", h.api_quilts),
        Route("/api/page", h.api_page),
        Route("/api/labels", h.api_label, methods=["POST"]),
        Route("/api/labels.jsonl", h.export),
        Route("/api/sites", h.api_sites),
        Route("/api/clusters", h.api_clusters),
        Route("/api/precision", h.api_precision),
        Route("/api/draws", h.api_draw, methods=["POST"]),
        Route("/api/draws/{name}", h.api_draw_rows),
        Route("/api/status", h.api_status),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    middleware = [Middleware(_SecurityHeaders),
                  Middleware(SessionMiddleware, secret_key=session_key,
                                        session_cookie="streamdet_review", same_site="strict",
                                        max_age=int(LONGEST_S), https_only=False)]
    return Starlette(routes=routes, middleware=middleware)


class _SecurityHeaders:
    """HEADERS on every response (pure ASGI: streamed bodies stay streamed)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for k, v in HEADERS.items():
                    headers.setdefault(k, v)
            await send(message)

        await self.app(scope, receive, send_with_headers)


class Refused(Exception):
    def __init__(self, status: int, reason: str, retry_after: int = 0) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason
        self.headers = {"Retry-After": str(retry_after)} if retry_after else None


def _throttled(seconds: int) -> Refused:
    return Refused(429, f"too many failed logins from this address: try again in "
                        f"{seconds} s", seconds)


def _client(request: Request) -> str:
    return request.client.host if request.client else "unknown"


class _Handlers:
    """The routes' endpoints. Plain functions: Starlette runs them in its thread pool,
    so a page view's state reads do not hold up the event loop."""

    def __init__(self, desk: Desk, credentials: Credentials, templates: Jinja2Templates,
                 sessions: SessionStore, throttle: Throttle) -> None:
        self.desk, self.credentials, self.templates = desk, credentials, templates
        self.sessions, self.throttle = sessions, throttle

    # -- who is asking -------------------------------------------------------------------

    def _who(self, request: Request) -> tuple[str | None, bool]:
        """(the reviewer, whether by session cookie) or (None, False)."""
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        scheme = scheme.lower()
        if scheme in ("bearer", "basic") and value:
            client = _client(request)
            if wait := self.throttle.wait(client):
                raise _throttled(wait)
            who, name = self._credentials(scheme, value.strip())
            if who is None:
                self.throttle.failed(client, f"{scheme} login", name)
            return who, False
        session = self._session(request)
        return (session.who, True) if session is not None else (None, False)

    def _credentials(self, scheme: str, value: str) -> tuple[str | None, str]:
        """(the reviewer or None, the name tried) of an Authorization header's value."""
        if scheme == "bearer":
            return ("token" if self.credentials.bearer(value) else None), ""
        try:
            name, _, secret = base64.b64decode(value).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None, ""
        if self.credentials.mode != "users":
            return None, name
        return self.credentials.login(name, secret), name

    def _session(self, request: Request) -> Session | None:
        """The request's live session: its cookie names one that has not ended, opened
        with the credential its reviewer has now (a changed token or password ends it)."""
        known = getattr(request.state, "session", _UNKNOWN)
        if known is not _UNKNOWN:
            return known
        sid = request.session.get("sid")
        session = self.sessions.get(sid)
        if session is not None and self.credentials.tag(session.who) != session.credential:
            self.sessions.end(sid)
            session = None
        request.state.session = session
        return session

    def _reader(self, request: Request) -> str:
        who, _ = self._who(request)
        if who is None:
            raise Refused(401, "log in first")
        return who

    def _writer(self, request: Request, form_csrf: str | None = None) -> str:
        """The reviewer of a write, after the checks that keep other sites from making one."""
        who, by_session = self._who(request)
        if who is None:
            raise Refused(401, "log in first")
        _same_site(request)
        if by_session:
            session = self._session(request)
            want = session.csrf if session is not None else ""
            got = form_csrf if form_csrf is not None else request.headers.get("x-csrf-token", "")
            if not want or not hmac.compare_digest(str(got).encode(), want.encode()):
                raise Refused(403, "a write needs this session's CSRF token")
        elif request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            raise Refused(415, "an API write is JSON")
        return who

    def _html(self, request: Request, name: str, status: int = 200,
              headers: dict[str, str] | None = None, **context) -> Response:
        session = self._session(request)
        context |= {"who": session.who if session else None,
                    "csrf": session.csrf if session else ""}
        return self.templates.TemplateResponse(request, name, context, status_code=status,
                                               headers=headers)

    def _page(self, request: Request, render: Callable[[str], Response]) -> Response:
        """An HTML page for a reviewer: to the login form (and back) when not logged in."""
        try:
            return render(self._reader(request))
        except Refused as exc:
            if exc.status == 429:
                return PlainTextResponse(exc.reason, exc.status, exc.headers)
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse("/login?" + urlencode({"next": target}), 303)
        except (DeskError, ValueError) as exc:
            return self._html(request, "error.html", 400, message=str(exc))

    def _api(self, request: Request, answer: Callable[[str], object], write: bool = False
             ) -> Response:
        try:
            who = self._writer(request) if write else self._reader(request)
            return JSONResponse(answer(who))
        except Refused as exc:
            return JSONResponse({"error": exc.reason}, exc.status, exc.headers)
        except (DeskError, LabelError, ValueError) as exc:
            return JSONResponse({"error": str(exc)}, 400)

    async def _api_write(self, request: Request, shape: str,
                         act: Callable[[str, dict], object]) -> Response:
        """A JSON write: its body must be an object (`shape` says which); `act` runs in
        the thread pool, after the write's checks (_writer)."""
        body = await _json_object(request)

        def answer(who: str) -> object:
            if body is None:
                raise DeskError(shape)
            return act(who, body)
        return await run_in_threadpool(self._api, request, answer, True)

    # -- login ---------------------------------------------------------------------------

    def login_form(self, request: Request) -> Response:
        return self._html(request, "login.html", mode=self.credentials.mode,
                          next=_local(request.query_params.get("next", "/quilts")), failed=False)

    async def login(self, request: Request) -> Response:
        form = await request.form()
        target = _local(str(form.get("next", "/quilts")))
        try:
            _same_site(request)
        except Refused as exc:
            return PlainTextResponse(exc.reason, exc.status, exc.headers)
        client, name = _client(request), str(form.get("name", ""))
        if wait := self.throttle.wait(client):
            return self._html(request, "login.html", 429, {"Retry-After": str(wait)},
                              mode=self.credentials.mode, next=target, failed=False,
                              throttled=_throttled(wait).reason)
        who = self.credentials.login(name, str(form.get("secret", "")))
        if who is None:
            self.throttle.failed(client, "login", name)
            return self._html(request, "login.html", 401, mode=self.credentials.mode,
                              next=target, failed=True)
        self.sessions.end(request.session.get("sid"))
        request.session.clear()
        request.session["sid"] = self.sessions.begin(who, self.credentials.tag(who) or "").sid
        return RedirectResponse(target, 303)

    async def logout(self, request: Request) -> Response:
        form = await request.form()
        try:
            self._writer(request, str(form.get("csrf", "")))
        except Refused as exc:
            return PlainTextResponse(exc.reason, exc.status, exc.headers)
        self.sessions.end(request.session.get("sid"))  # a copy of the cookie ends with it
        request.session.clear()
        return RedirectResponse("/login", 303)

    # -- HTML ----------------------------------------------------------------------------

    def quilts_page(self, request: Request) -> Response:
        def render(who: str) -> Response:
            keep, offset = _filter(request)
            found = self.desk.quilts(keep, offset, PAGE_SIZE)
            return self._html(request, "quilts.html", keep=keep, found=found,
                              label_states=LABEL_STATES, quilt_states=QUILT_STATES,
                              spam_states=SPAM_STATES, orders=ORDERS,
                              more=_more(request, offset, found["total"]),
                              from_state=self.desk.status().get("events", 0) is None,
                              state_event=STATE_EVENT)
        return self._page(request, render)

    def page_page(self, request: Request) -> Response:
        def render(who: str) -> Response:
            url = request.query_params.get("url", "")
            found = self.desk.page(url) if url else None
            if found is None:
                return self._html(request, "error.html", 404,
                                  message=f"no page {url!r} in this state or its events")
            page = found["page"]
            spans = [s.get("spans") or [] for s in (page or {}).get("sources") or ()]
            return self._html(request, "page.html", found=found, page=page,
                              pieces=pieces(page["text"] or "", spans) if page else [],
                              draw=request.query_params.get("draw", ""),
                              saved=request.query_params.get("saved") == "1")
        return self._page(request, render)

    async def label_form_post(self, request: Request) -> Response:
        return await run_in_threadpool(self._label_form, request, await request.form())

    def _label_form(self, request: Request, form: FormData) -> Response:
        url, sample = str(form.get("url", "")), str(form.get("draw", ""))
        try:
            who = self._writer(request, str(form.get("csrf", "")))
            self.desk.judge(url, str(form.get("verdict", "")), who,
                            str(form.get("note", "")), sample)
        except Refused as exc:
            return PlainTextResponse(exc.reason, exc.status, exc.headers)
        except (DeskError, LabelError) as exc:
            return self._html(request, "error.html", 400, message=str(exc))
        if sample:  # on through the draw: its next page not judged yet, or the draw
            rows = self.desk.draw_rows(sample)["rows"]
            nxt = next((r["url"] for r in rows if r["label"] is None), None)
            if nxt is None:
                return RedirectResponse(f"/draws/{quote(sample)}", 303)
            url = nxt
        back = {"url": url, "saved": "1"} | ({"draw": sample} if sample else {})
        return RedirectResponse("/page?" + urlencode(back), 303)

    def sites_page(self, request: Request) -> Response:
        return self._page(request, lambda who: self._html(request, "sites.html",
                                                          found=self.desk.sites()))

    def clusters_page(self, request: Request) -> Response:
        return self._page(request, lambda who: self._html(request, "clusters.html",
                                                          rows=self.desk.clusters()))

    def precision_page(self, request: Request) -> Response:
        def render(who: str) -> Response:
            sampled = request.query_params.get("all") != "1"
            report = self.desk.precision(sampled)
            return self._html(request, "precision.html", report=report,
                              settings=_settings(report))
        return self._page(request, render)

    def draws_page(self, request: Request) -> Response:
        def render(who: str) -> Response:
            return self._html(request, "draws.html", draws=self.desk.draws())
        return self._page(request, render)

    async def draw_form_post(self, request: Request) -> Response:
        return await run_in_threadpool(self._draw_form, request, await request.form())

    def _draw_form(self, request: Request, form: FormData) -> Response:
        try:
            self._writer(request, str(form.get("csrf", "")))
            drawn = self.desk.sample(whole(form.get("n"), "n", 100, least=1),
                                     whole(form.get("seed"), "seed", 1))
        except Refused as exc:
            return PlainTextResponse(exc.reason, exc.status, exc.headers)
        except (DeskError, ValueError) as exc:
            return self._html(request, "error.html", 400, message=str(exc))
        return RedirectResponse(f"/draws/{drawn['name']}", 303)

    def draw_page(self, request: Request) -> Response:
        def render(who: str) -> Response:
            drawn = self.desk.draw_rows(request.path_params["name"])
            return self._html(request, "draw.html", drawn=drawn)
        return self._page(request, render)

    def export(self, request: Request) -> Response:
        try:
            self._reader(request)
        except Refused as exc:
            return PlainTextResponse(exc.reason, exc.status, exc.headers)
        return Response("".join(self.desk.export()), media_type="application/x-ndjson",
                        headers={"Content-Disposition":
                                 'attachment; filename="streamdet-labels.jsonl"'})

    # -- JSON ----------------------------------------------------------------------------

    def api_quilts(self, request: Request) -> Response:
        def answer(who: str) -> dict:
            keep, offset = _filter(request)
            limit = whole(request.query_params.get("limit"), "limit", PAGE_SIZE, least=1,
                          most=1000)
            return self.desk.quilts(keep, offset, limit)
        return self._api(request, answer)

    def api_page(self, request: Request) -> Response:
        def answer(who: str) -> dict:
            found = self.desk.page(request.query_params.get("url", ""))
            if found is None:
                raise DeskError("no such page in this state or its events")
            return found
        return self._api(request, answer)

    async def api_label(self, request: Request) -> Response:
        def act(who: str, body: dict) -> dict:
            lab = self.desk.judge(str(body.get("url", "")), str(body.get("verdict", "")),
                                  who, str(body.get("note", "")),
                                  str(body.get("sample", "")))
            return json.loads(lab.to_json())
        return await self._api_write(request, 'a label is {"url", "verdict", "note", "sample"}',
                                     act)

    def api_sites(self, request: Request) -> Response:
        return self._api(request, lambda who: self.desk.sites())

    def api_clusters(self, request: Request) -> Response:
        return self._api(request, lambda who: self.desk.clusters())

    def api_precision(self, request: Request) -> Response:
        def answer(who: str) -> dict:
            return self.desk.precision(request.query_params.get("all") != "1")
        return self._api(request, answer)

    async def api_draw(self, request: Request) -> Response:
        return await self._api_write(request, 'a draw is {"n", "seed"}', lambda who, body:
                                     self.desk.sample(whole(body.get("n"), "n", 100, least=1),
                                                      whole(body.get("seed"), "seed", 1)))

    def api_draw_rows(self, request: Request) -> Response:
        def answer(who: str) -> dict:
            return self.desk.draw_rows(request.path_params["name"])
        return self._api(request, answer)

    def api_status(self, request: Request) -> Response:
        def answer(who: str) -> dict:
            return {**self.desk.status(), "who": who}
        return self._api(request, answer)


async def _json_object(request: Request) -> dict | None:
    """A request's JSON body if it is an object (None: it is not)."""
    try:
        body = await request.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _same_site(request: Request) -> None:
    """Refuse a write another site's page made a browser send."""
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        raise Refused(403, "a cross-site write is refused")
    origin = request.headers.get("origin")
    if origin is not None:
        own = f"{request.url.scheme}://{request.url.netloc}"
        if origin != own:
            raise Refused(403, "a cross-site write is refused")


def _local(target: str) -> str:
    """A redirect target on this desk only (an open redirect is a phishing aid)."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return "/quilts"
    return target


def _filter(request: Request) -> tuple[QuiltFilter, int]:
    q = request.query_params
    keep = QuiltFilter(domain=q.get("domain", "").strip(), site=q.get("site", "").strip(),
                       cluster=q.get("cluster", "").strip(), label=q.get("label") or "any",
                       state=q.get("state") or "quilted", spam=q.get("spam") or "all",
                       order=q.get("order") or "score")
    return keep, whole(q.get("offset"), "offset", 0)


def whole(raw: object, name: str, default: int, least: int = 0, most: int | None = None
          ) -> int:
    """A whole-number parameter (a query's, a form's or a JSON body's), or DeskError with a
    sentence that names it: a reviewer who mistypes a link reads what to fix, not Python's
    message. Missing or empty: `default`."""
    if raw is None or raw == "":
        return default
    text = str(raw).strip()
    if isinstance(raw, bool) or not re.fullmatch(r"[+-]?\d{1,18}", text):
        raise DeskError(f"{name} must be a whole number, not {text[:40]!r}")
    value = int(text)
    if value < least or (most is not None and value > most):
        span = f"from {least} to {most}" if most is not None else f"{least} or more"
        raise DeskError(f"{name} must be {span}, not {value}")
    return value


def _more(request: Request, offset: int, total: int) -> dict:
    """Links to the previous and next pages of a list, with its filters."""
    q = dict(request.query_params)
    out = {}
    if offset > 0:
        out["prev"] = "?" + urlencode(q | {"offset": max(offset - PAGE_SIZE, 0)})
    if offset + PAGE_SIZE < total:
        out["next"] = "?" + urlencode(q | {"offset": offset + PAGE_SIZE})
    return out


def _settings(report: dict) -> list[tuple[str, list[dict]]]:
    """The precision rows grouped by parameter setting, for the table."""
    groups: dict[str, list[dict]] = {}
    for row in report["rows"]:
        groups.setdefault(json.dumps(row["params"], sort_keys=True), []).append(row)
    return list(groups.items())
