"""The ranking (SPEC §10): every live page that is quilted or a partial duplicate with its
spam score, highest first. A page's own label decides that page (score 1 or 0); labels
reach the other pages only through the model they train (model.trained)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..engine.spam_model import VERDICT_SCORE
from .features import Corpus, signals
from .model import THRESHOLD, Model, model_from
from .why import why


@dataclass(frozen=True)
class Ranked:
    url: str
    score: float
    spam: bool
    why: list[str]

    def to_dict(self) -> dict:
        return {"url": self.url, "score": self.score, "spam": self.spam, "why": self.why}


def model_of(corpus: Corpus, verdicts: Mapping[str, str]) -> Model:
    """The model the labels train: the blind one moved by every live page judged spam or
    not spam (`unsure` teaches nothing), taken in URL order (engine.spam_training)."""
    return model_from((u, signals(corpus, u).values, v == "spam") for u, v in verdicts.items()
                      if v in VERDICT_SCORE and u in corpus.rows)


def ranking(corpus: Corpus, verdicts: Mapping[str, str] | None = None) -> list[Ranked]:
    """The ranked pages, highest score first (then by URL), with `verdicts` (URL -> the
    newest verdict of its label) deciding their own pages and training the model."""
    verdicts = verdicts or {}
    model = model_of(corpus, verdicts)
    out = []
    for url in corpus.ranked():
        verdict = verdicts.get(url)
        if verdict in VERDICT_SCORE:
            score = VERDICT_SCORE[verdict]
            out.append(Ranked(url, score, score >= THRESHOLD, [f"labelled {verdict}"]))
            continue
        sig = signals(corpus, url)
        score = model.rounded(sig.values)
        spam = score >= THRESHOLD
        out.append(Ranked(url, score, spam, why(model, sig, spam)))
    out.sort(key=lambda r: (-r.score, r.url.encode("utf-8")))
    return out
