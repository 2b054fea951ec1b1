"""The spam score (SPEC §10): a logistic model over the named signals of
engine.spam_signals, small enough for a reviewer to read, and the records that carry a
trained model and the pages' own verdicts into a state, so that the engine scores events
as `streamdet rank` scores pages. Training on labels is engine.spam_training's: `streamdet
label` trains on a whole state and stores the model; a Kafka pipeline's doc shards train it
from the examples they send each other (engine.spam_labels).

Records (table `chunks`, beside the labelled set L of paragraph chunks: both are what
users labelled): `W` the trained model (absent: the blind one), `V<url>` the newest
verdict of a page judged spam or not spam (its own label decides its own score)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from .keyed import KeyedRecords, prefix_end
from .spam_signals import FEATURES

# A page is `spam` when its score reaches THRESHOLD, which is below one half: the blind
# weights are conservative where farms and natural reuse meet (a farm that scrapes
# replicated text, a reading plan), so a score of a third already speaks for a farm as
# often as not, and the spam team wants the farms found as much as it wants what it is
# shown to be farms. The labels do not move it: a uniform draw of a few dozen holds too few
# pages near it to place it (docs/ranking.md).
THRESHOLD = 0.35
SCORE_DIGITS = 6  # a score is rounded to this many decimals, in events and in `rank`

# The blind model: what each signal says of a farm, in log-odds per unit of the signal.
# A farm's page is mostly copied (patch), from several unrelated texts (spread, texts) on
# sites of their own (domains), and sits on a host of quilts (host_quilts); natural reuse
# quotes texts the web replicates (replicated), merges into one text in spirit (kin),
# has near-duplicates of its own (mirrored) and shares paragraphs with many pages
# (boilerplate: templates, scripture verses, legal notices).
BLIND_BIAS = -6.0
BLIND = {"spread": 6.0, "texts": 2.0, "replicated": -3.0, "kin": -3.0, "domains": 1.0,
         "patch": 2.0, "host_quilts": 1.5, "mirrored": -2.0, "boilerplate": -1.5}

VERDICTS = ("spam", "not_spam", "unsure")  # a reviewer's judgements (review.labels)
VERDICT_SCORE = {"spam": 1.0, "not_spam": 0.0}  # what a label makes of its own page
MODEL_KEY = b"W"
VERDICT_PREFIX = b"V"
_VERDICT_CODES = {"spam": b"s", "not_spam": b"n"}
_VERDICTS = {v: k for k, v in _VERDICT_CODES.items()}


@dataclass(frozen=True)
class Model:
    """Bias and one weight per signal (FEATURES order)."""

    bias: float
    weights: tuple[float, ...]

    def logit(self, values: Sequence[float]) -> float:
        return self.bias + sum(w * x for w, x in zip(self.weights, values, strict=True))

    def score(self, values: Sequence[float]) -> float:
        """The probability the page is a farm's, in [0, 1]."""
        z = self.logit(values)
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))

    def rounded(self, values: Sequence[float]) -> float:
        """The score as events and `rank` show it."""
        return round(self.score(values), SCORE_DIGITS)

    def contributions(self, values: Sequence[float]) -> dict[str, float]:
        """Each signal's share of the logit (weight times value)."""
        return {name: w * x for name, w, x in zip(FEATURES, self.weights, values, strict=True)}

    def encode(self) -> bytes:
        """JSON with the signals named: a record a reader can check, and that refuses a
        model of other signals (decode)."""
        return json.dumps({"bias": self.bias, "weights": dict(zip(
            FEATURES, self.weights, strict=True))}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Model:
        found = json.loads(raw)
        if tuple(found["weights"]) != FEATURES:
            raise ValueError(f"a spam model of other signals: {sorted(found['weights'])}")
        return cls(float(found["bias"]), tuple(float(found["weights"][n]) for n in FEATURES))


def blind() -> Model:
    return Model(BLIND_BIAS, tuple(BLIND[name] for name in FEATURES))


def verdict_key(url: str) -> bytes:
    return VERDICT_PREFIX + url.encode("utf-8")


def verdict_code(verdict: str) -> bytes | None:
    """A verdict's record (None: `unsure`, which decides nothing and keeps no record)."""
    return _VERDICT_CODES.get(verdict)


def stored_model(chunks: KeyedRecords) -> Model:
    """The model `streamdet label` last stored (the blind one before any)."""
    raw = chunks.get(MODEL_KEY)
    return blind() if raw is None else Model.decode(raw)


def stored_verdicts(chunks: KeyedRecords, urls: list[str]) -> list[str | None]:
    """The stored verdict of each URL (None: not judged spam or not spam)."""
    return [None if raw is None else _VERDICTS[raw]
            for raw in chunks.get_many([verdict_key(u) for u in urls])]


def judged(chunks: KeyedRecords) -> dict[str, str]:
    """Every stored verdict (URL -> spam or not_spam), in URL order."""
    return {key[len(VERDICT_PREFIX) :].decode("utf-8"): _VERDICTS[code]
            for key, code in chunks.scan(VERDICT_PREFIX, prefix_end(VERDICT_PREFIX))}


def store_labels(chunks: KeyedRecords, model: Model, verdicts: dict[str, str]) -> None:
    """Make the state's records say `model` and exactly these verdicts (URL -> spam or
    not_spam; others are dropped): the records of URLs no longer judged go."""
    store_model(chunks, model)
    want = {verdict_key(u): _VERDICT_CODES[v] for u, v in verdicts.items()
            if v in _VERDICT_CODES}
    for key, _ in chunks.scan(VERDICT_PREFIX, prefix_end(VERDICT_PREFIX)):
        if key not in want:
            chunks.put(key, None)
    for key, code in want.items():
        chunks.put(key, code)


def store_model(chunks: KeyedRecords, model: Model) -> None:
    """Make the state's model record say `model` (none for the blind one)."""
    chunks.put(MODEL_KEY, None if model == blind() else model.encode())
