"""A reviewer's judgement of a quilt (Najork's judging tool, seed 000 Figure 4): spam, not
spam or unsure, with a note, who gave it and when, and what the verdict judged (the
parameters of the event and the kind of page), so that precision can be reported per
parameter setting and per kind of page (precision.py)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from urllib.parse import urlsplit

from ..engine.spam_model import VERDICTS

__all__ = ["VERDICTS", "Label", "LabelError", "page_kind"]

NOTE_LIMIT = 4000  # characters: a note is a sentence or two, not a document
WHO_LIMIT = 200


class LabelError(ValueError):
    """A judgement that cannot be recorded (unknown verdict, no URL, a note too long)."""


@dataclass(frozen=True)
class Label:
    """One judgement. `id` is given by the store that recorded it (0: not recorded yet);
    a later judgement of the same URL supersedes, never erases, an earlier one."""

    url: str
    verdict: str
    who: str
    at: str  # RFC 3339, UTC: when it was given
    note: str = ""
    params: dict = field(default_factory=dict)  # the judged event's (SPEC §3 "params")
    kind: str = ""  # page_kind(url) when judged
    sample: str = ""  # the uniform draw (sampling.py) it was judged from, if any
    id: int = 0

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise LabelError(f"verdict must be one of {', '.join(VERDICTS)}, not "
                             f"{self.verdict!r}")
        if not self.url:
            raise LabelError("a label needs the URL it judges")
        if len(self.note) > NOTE_LIMIT:
            raise LabelError(f"a note has at most {NOTE_LIMIT} characters")
        if not self.who or len(self.who) > WHO_LIMIT:
            raise LabelError("a label needs who gave it")

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Label:
        try:
            raw = json.loads(text)
            return cls(**{k: raw[k] for k in raw if k in cls.__dataclass_fields__})
        except (TypeError, ValueError, KeyError) as exc:
            raise LabelError(f"not a label: {exc}") from None


def page_kind(url: str) -> str:
    """The kind of page, for precision per kind: Najork found blog home pages quilted
    from their own posts to be the commonest false positive, so a site's front page, a
    listing (a path ending in /) and an article are told apart."""
    path = urlsplit(url).path
    if path in ("", "/") or path.rsplit("/", 1)[-1].split(".")[0] in ("index", "default"):
        return "home" if path.count("/") <= 1 else "listing"
    return "listing" if path.endswith("/") else "article"
