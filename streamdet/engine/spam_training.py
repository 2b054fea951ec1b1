"""The spam model's training (SPEC §10): the blind logistic model of engine.spam_model
moved by the labels, by maximum a posteriori logistic regression with the blind weights as
the mean of a Gaussian prior, so a few labels nudge the model and many labels can overrule
it. Training is Newton's method from the prior on the labelled pages in URL order: the same
pages and labels give the same weights, bit for bit, whatever order the labels came in.

It lives in the engine because two places train the same model from the same examples:
`streamdet rank` and `streamdet label` from a whole state (ranking.rank.model_of), and a
Kafka pipeline's doc shards from the examples every doc shard sends them
(engine.spam_labels); one implementation keeps their models equal to the bit."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from .spam_model import Model, blind

PRIOR_SD = 2.0  # how far labels may move a weight before the prior resists as hard
NEWTON_STEPS = 50
HALVINGS = 30


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


def model_from(examples: Iterable[tuple[str, Sequence[float], bool]]) -> Model:
    """The model labelled pages train: (URL, signal values, is spam) each, taken in URL
    order (UTF-8 bytes), so that whoever gathered them, in whatever order, trains the
    same weights."""
    ordered = sorted(examples, key=lambda e: e[0].encode("utf-8"))
    return trained([(values, spam) for _, values, spam in ordered])
