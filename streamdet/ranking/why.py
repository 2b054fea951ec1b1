"""`why`: the few signals that decided a page's score, in words a reviewer can check
against the page (SPEC §10). A signal is named when it pushed the score the way it went
(towards spam for a page called spam, away from it otherwise), strongest first. Pushed is
measured from the middle of the signal's range: a page with one source text is called
not spam *because* its copied text is not spread, though that signal adds nothing to
its logit."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .features import FEATURES, Signals
from .model import Model

WHY_MAX = 3  # signals named per page
NEUTRAL = 0.5  # the middle of every signal's range
WHY_MIN = 0.25  # log-odds below which a signal did not decide anything

_WORDS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "spread": lambda f: f"{f['patch_fraction'] * (1 - f['top_share']):.0%} of its text is "
                        "copied from beyond its largest source text",
    "replicated": lambda f: f"{f['replicated']:.0%} of the copied text comes from texts "
                            "found on other pages too",
    "texts": lambda f: f"{f['texts']} distinct source text(s)",
    "kin": lambda f: f"its {f['sources']} sources hold {f['texts']} distinct text(s)",
    "domains": lambda f: f"sources on {f['domains']} registered domains",
    "patch": lambda f: f"{f['patch_fraction']:.0%} of its text is copied",
    "host_quilts": lambda f: f"{f['host_quilts']} of the {f['host_pages']} pages of "
                             f"{f['host']} are quilts",
    "mirrored": lambda f: f"{f['cluster_size']} page(s) in its near-duplicate cluster",
    "boilerplate": lambda f: f"{f['contains']:.0%} of its paragraphs are on many pages",
}


_SAME = {"kin": "texts"}  # signals that speak of one figure: the stronger one is named


def why(model: Model, sig: Signals, spam: bool) -> list[str]:
    """The signals that moved the score towards its verdict, strongest first."""
    parts = model.contributions([x - NEUTRAL for x in sig.values])
    sign = 1.0 if spam else -1.0
    decided = sorted((name for name in FEATURES if sign * parts[name] >= WHY_MIN),
                     key=lambda name: (-sign * parts[name], name))
    said: dict[str, str] = {}
    for name in decided:
        said.setdefault(_SAME.get(name, name), _WORDS[name](sig.figures))
    return list(said.values())[:WHY_MAX]
