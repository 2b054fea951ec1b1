"""The spam score's model for the ranking: the logistic model of engine.spam_model (its
blind weights are fixed there; the engine scores events with it too) and its training on
labels (engine.spam_training: a Kafka pipeline's doc shards train it as well)."""

from __future__ import annotations

from ..engine.spam_model import BLIND, BLIND_BIAS, THRESHOLD, Model, blind
from ..engine.spam_training import PRIOR_SD, model_from, trained

__all__ = ["BLIND", "BLIND_BIAS", "PRIOR_SD", "THRESHOLD", "Model", "blind", "model_from",
           "trained"]
