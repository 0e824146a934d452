"""The agent's test doubles, gathered from the layers they double (importable from here as before).

Each double now lives next to what it doubles, as a shipped test kit of its own layer:

- model doubles (:class:`ScriptedModel`, :func:`say`, :func:`call`, :class:`FakeAnthropicServer`,
  :class:`FakeOpenAIServer`, :func:`messages_api_json`, :func:`chat_completion_json`):
  :mod:`reasearch.models.testing`;
- run doubles (:func:`memory_run`, :class:`InstanceExecutor`, :func:`ledger_map`, :func:`executed`):
  :mod:`reasearch.runs.testing`;
- engine doubles (:class:`StaticRunner`): :mod:`reasearch.engine.testing`.

New code imports them from there; this module only re-exports them. Nothing here runs candidate code.
"""

from __future__ import annotations

from reasearch.engine.testing import StaticRunner
from reasearch.models.testing import (
    FakeAnthropicServer,
    FakeOpenAIServer,
    ScriptedModel,
    call,
    chat_completion_json,
    messages_api_json,
    say,
)
from reasearch.runs.testing import InstanceExecutor, executed, ledger_map, memory_run

__all__ = [
    "FakeAnthropicServer",
    "FakeOpenAIServer",
    "InstanceExecutor",
    "executed",
    "ledger_map",
    "memory_run",
    "ScriptedModel",
    "StaticRunner",
    "call",
    "chat_completion_json",
    "messages_api_json",
    "say",
]
