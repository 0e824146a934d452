"""Model clients behind one small protocol: Anthropic, OpenAI-compatible endpoints, scripted replays,
and the offline demo model (``--model demo``).

Used by the agent and by the baseline methods alike; this package imports none of the other layers
(only :mod:`reasearch.errors`), so every optimizer above it talks to models the same way.
"""

from __future__ import annotations

from typing import Any

from reasearch.models.anthropic import NO_KEY_MESSAGE, AnthropicModel
from reasearch.models.base import PRICES, Model, ModelSpec, Price, RetryPolicy, price_for
from reasearch.models.demo import DemoModel
from reasearch.models.openai_compat import OpenAICompatibleModel
from reasearch.models.scripted import ScriptedModel, call, say

__all__ = [
    "NO_KEY_MESSAGE",
    "PRICES",
    "AnthropicModel",
    "DemoModel",
    "Model",
    "ModelSpec",
    "OpenAICompatibleModel",
    "Price",
    "RetryPolicy",
    "ScriptedModel",
    "build_model",
    "call",
    "price_for",
    "say",
]


def build_model(spec: ModelSpec, *, seed: int = 0, **kwargs: Any) -> Model:
    """The client a spec describes (``scripted`` loads its script file); ``seed`` is the run's seed, which only
    the demo model uses (a real model's sampling is not seeded here).

    Raises:
        ModelError: e.g. no API key for an Anthropic model (the message says how to set one).
    """
    if spec.provider == "anthropic":
        return AnthropicModel(spec, **kwargs)
    if spec.provider == "openai":
        return OpenAICompatibleModel(spec, **kwargs)
    if spec.provider == "demo":
        return DemoModel(name=spec.name, seed=seed)
    return ScriptedModel.from_file(spec.name, price=spec.price)
