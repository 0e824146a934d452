"""The evaluation cache: a repeated evaluation of a deterministic task is served at zero cost.

Keyed by (task id and version, task parameters, evaluator code hash, candidate hash, seed). The
evaluator hash is part of the key so that editing a task's scoring code without bumping its ``-vN``
can never serve a stale score; a miss only costs an evaluation. Tasks whose spec says
``deterministic=False`` (timed scores) are never cached, and only outcomes that do not depend on the
machine's load (``OK`` and ``INVALID``) are stored: a ``TIMEOUT`` or ``CRASH`` may not repeat.
Entries live in the run store (table ``eval_cache``), written in the same transaction as the
evaluation that produced them, and are shared by every run in that store.
"""

from __future__ import annotations

import hashlib

from reasearch.evaluators.base import Task
from reasearch.evaluators.result import EvalResult, Status
from reasearch.runs.store import Store, dumps

__all__ = ["EvalCache", "cache_key", "CACHEABLE_STATUSES"]

CACHEABLE_STATUSES = frozenset({Status.OK, Status.INVALID})


def cache_key(task: Task, candidate_sha256: str, seed: int | None) -> str | None:
    """The cache key of evaluating a candidate on ``task`` under ``seed``; None when the task is not cacheable."""
    spec = task.spec
    if not spec.deterministic:
        return None
    material = dumps({
        "task_id": spec.id, "version": spec.version, "params": dict(spec.params),
        "evaluator": task.evaluator_hash(), "candidate": candidate_sha256, "seed": seed,
    })
    return hashlib.sha256(material.encode()).hexdigest()


class EvalCache:
    """Reads of the store's evaluation cache (writes happen inside ``Store.record_evaluation``)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def get(self, key: str | None) -> EvalResult | None:
        """The cached result, marked ``cached=True``, or None (also for a None key)."""
        if key is None:
            return None
        hit = self.store.cache_get(key)
        return None if hit is None else hit.with_(cached=True)

    @staticmethod
    def storable(result: EvalResult) -> bool:
        """True when ``result`` may be served again (its status does not depend on machine load)."""
        return result.status in CACHEABLE_STATUSES and not result.cached
