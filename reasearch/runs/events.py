"""The kinds of a run's event log, shared by the writers (agent loop, tools, methods, runs) and the readers
(replay, reports, the console, the dashboard).

``EventKind`` is a ``StrEnum``: a member *is* its string, so stored runs read unchanged (``Event.kind``
stays the stored ``str`` and compares equal to the member) and new kinds written by an older or newer
version are still read as plain strings. A kind may carry a suffix after a dot (``model_reply.2`` is the
third attempt of a model reply, ``fallback.model_reply`` a fallback of one): :func:`base_kind` strips it.
Data only; nothing here reads a payload.
"""

from __future__ import annotations

import enum

__all__ = ["REPLY_KINDS", "EventKind", "attempt_kind", "base_kind"]


class EventKind(enum.StrEnum):
    """What an event records (the ``kind`` column of the event log)."""

    START = "start"  # the agent's first event: task, models, settings
    MODELS = "models"  # a resume that changed the models records the new ones
    COLLECTED = "collected"  # background results gathered before a turn
    SNAPSHOT = "snapshot"  # the state snapshot put into the prompt
    MODEL_REPLY = "model_reply"  # one model call of the agent (suffix: the attempt)
    EDIT_REPLY = "edit_reply"  # one call of the edit model
    SUMMARY = "summary"  # one call of the summarizing model at a compaction
    FALLBACK = "fallback"  # a role's model failed and another redoes it (suffix: the reply kind)
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    COMPACTION = "compaction"
    FINAL = "final"  # the chosen candidate and why the run stopped
    LESSONS_SHARED = "lessons_shared"  # lessons passed to the fleet's trace
    METHOD_REPLY = "method_reply"  # one model call of a baseline method
    TEST_RESULT = "test_result"  # the trusted side scored the final candidate on the test split
    EVALUATE = "evaluate"  # a sweep's evaluation request
    EXPERIMENT_START = "experiment_start"
    EXPERIMENT = "experiment"
    EXPERIMENT_INTERRUPTED = "experiment_interrupted"
    SUBMISSION = "submission"
    MCP_SESSION = "mcp_session"
    MCP_CALL = "mcp_call"
    MCP_RESULT = "mcp_result"
    STEER_REQUEST = "steer_request"  # a person's intervention as sent (at step -seq: no driver's step)
    STEER = "steer"  # the interventions a driver applied at this step (suffix: a later batch at the same step)


REPLY_KINDS = frozenset({EventKind.MODEL_REPLY, EventKind.EDIT_REPLY, EventKind.SUMMARY})


def base_kind(kind: str) -> str:
    """The kind without its suffix (``model_reply.2`` -> ``model_reply``)."""
    return kind.split(".", 1)[0]


def attempt_kind(kind: str, attempt: int) -> str:
    """The kind of the ``attempt``-th try (0: the kind itself, else ``kind.attempt``)."""
    return str(kind) if attempt == 0 else f"{kind}.{attempt}"
