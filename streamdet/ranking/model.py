"""The spam score: a logistic model over the named signals of features.py, small enough
for a reviewer to read. Blind, its weights are fixed in this file; informed, the labels
move them by maximum a posteriori logistic regression with the blind weights as the
mean of a Gaussian prior, so a few labels nudge the model and many labels can overrule
it. Training is Newton's method from the prior on the labels in a fixed order: the same
state and labels give the same weights, bit for bit, whatever order the labels came in."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .features import FEATURES

# A page is `spam` when its score reaches THRESHOLD, which is below one half: the blind
# weights are conservative where farms and natural reuse meet (a farm that scrapes
# replicated text, a reading plan), so a score of a third already speaks for a farm as
# often as not, and the spam team wants the farms found as much as it wants what it is
# shown to be farms. The labels do not move it: a uniform draw of a few dozen holds too few
# pages near it to place it (docs/ranking.md).
THRESHOLD = 0.35

# The blind model: what each signal says of a farm, in log-odds per unit of the signal.
# A farm's page is mostly copied (patch), from several unrelated texts (spread, texts) on
# sites of their own (domains), and sits on a host of quilts (host_quilts); natural reuse
# quotes texts the web replicates (replicated), merges into one text in spirit (kin),
# has near-duplicates of its own (mirrored) and shares paragraphs with many pages
# (boilerplate: templates, scripture verses, legal notices).
BLIND_BIAS = -6.0
BLIND = {"spread": 6.0, "texts": 2.0, "replicated": -3.0, "kin": -3.0, "domains": 1.0,
         "patch": 2.0, "host_quilts": 1.5, "mirrored": -2.0, "boilerplate": -1.5}
PRIOR_SD = 2.0  # how far labels may move a weight before the prior resists as hard
NEWTON_STEPS = 50
HALVINGS = 30


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

    def contributions(self, values: Sequence[float]) -> dict[str, float]:
        """Each signal's share of the logit (weight times value)."""
        return {name: w * x for name, w, x in zip(FEATURES, self.weights, values, strict=True)}


def blind() -> Model:
    return Model(BLIND_BIAS, tuple(BLIND[name] for name in FEATURES))


def trained(examples: Sequence[tuple[Sequence[float], bool]], prior: Model | None = None
            ) -> Model:
    """The prior (default: the blind model) moved by labelled examples (signals, is
    spam): the maximum of the posterior, by Newton's method with step halving (the
    log-posterior is strictly concave, so it has one maximum; a full Newton step can
    overshoot it when the labels disagree with the prior, and is halved until it
    gains)."""
    prior = prior or blind()
    if not examples:
        return prior
    mean = np.array((prior.bias, *prior.weights))
    x = np.array([(1.0, *v) for v, _ in examples])
    y = np.array([1.0 if spam else 0.0 for _, spam in examples])
    precision = 1.0 / PRIOR_SD**2

    def log_posterior(w: np.ndarray) -> float:
        z = x @ w
        return float(y @ z - np.logaddexp(0.0, z).sum()
                     - 0.5 * precision * ((w - mean) ** 2).sum())

    w, value = mean.copy(), log_posterior(mean)
    for _ in range(NEWTON_STEPS):
        p = np.exp(-np.logaddexp(0.0, -(x @ w)))  # the logistic, without overflow
        grad = x.T @ (y - p) - precision * (w - mean)
        hess = (x.T * (p * (1.0 - p))) @ x + precision * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        for _ in range(HALVINGS):
            if log_posterior(w + step) >= value:
                break
            step = step / 2
        else:
            break  # no step gains: the maximum, to float precision
        w = w + step
        value = log_posterior(w)
        if float(np.max(np.abs(step))) < 1e-10:
            break
    return Model(float(w[0]), tuple(float(v) for v in w[1:]))
