"""The body POSTed for one alert: streamdet's JSON, or a Slack-compatible message."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from .grouping import Group

SLACK_PAGES = 20  # pages listed in a Slack message (Slack allows 50 blocks)
SLACK_SECTION = 2900  # characters of a section's text (Slack allows 3000)


def json_body(group: Group, window: float) -> dict:
    return {"type": "streamdet.quilt_alert", "id": group.alert_id(), "domain": group.domain,
            "count": len(group.pages),
            "window": {"start": group.start, "end": group.end, "seconds": window},
            "pages": list(group.pages.values())}


def _mrkdwn(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _link(url: Any) -> str:
    if not isinstance(url, str):
        return _mrkdwn(str(url))
    target = quote(url, safe=":/?#[]@!$&'()*+,;=%~")  # | and > cannot be in a Slack link
    return f"<{target}|{_mrkdwn(url)}>"


def _pct(x: Any) -> str:
    return f"{100 * x:.0f}%" if isinstance(x, int | float) else "?"


def _score(x: Any) -> str:
    return f", spam score {x:.2f}" if isinstance(x, int | float) else ""


def _section(p: dict) -> dict:
    srcs = ", ".join(f"{_link(s['url'])} {_pct(s['share'])}" for s in p["sources"])
    text = (f"*{_link(p['url'])}*\npatch fraction {_pct(p['patch_fraction'])} "
            f"({p['n_patch_grams']} of {p['n_grams']} grams), {p['event']} #{p['seq']}"
            f"{_score(p.get('spam_score'))}\n"
            f"sources: {srcs or '-'}")
    if len(text) > SLACK_SECTION:
        text = text[:SLACK_SECTION - 1] + "…"
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def slack_body(group: Group, window: float) -> dict:
    """A header, one section per page up to SLACK_PAGES, then "…and N more"; every crawled
    string escaped, so a page's URL cannot add a link or a mention."""
    pages = list(group.pages.values())
    n = len(pages)
    title = f"streamdet: {n} quilted page{'s' if n != 1 else ''} on {group.domain}"
    blocks: list[dict] = [{"type": "header",
                           "text": {"type": "plain_text", "text": title[:150]}}]
    blocks += [_section(p) for p in pages[:SLACK_PAGES]]
    more = f"…and {n - SLACK_PAGES} more pages. " if n > SLACK_PAGES else ""
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _mrkdwn(
        f"{more}window {group.start} – {group.end} ({window:g} s); alert {group.alert_id()}")}]})
    text = _mrkdwn(title + ": " + ", ".join(str(p["url"]) for p in pages[:SLACK_PAGES]))
    return {"text": text[:3000], "blocks": blocks}
