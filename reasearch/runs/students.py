"""Student-model calls of a run: stored, debited and capped one by one (prompt tasks).

:class:`StudentLedger` is the caller a prompt task uses inside a run. For each call, in order: a call
this run already paid (the same endpoint, model, prompt, input, sampling parameters and sample index) is
served from the store at no cost; a call that does not fit under the run's ``student_calls`` cap is
``REFUSED`` and not made; otherwise it is made, and its reply is stored together with its debits (one
``student_calls`` unit, its tokens in the ``student_tokens`` unit, and its dollars when the student is
priced) in one transaction. Student tokens are never the agent's ``tokens``: a student cannot spend the
agent's model budget, and a spent ``student_tokens`` cap (optional) refuses further calls. The tokens debited
are those the student reported, clamped to what the request could have used (``StudentClient.complete``):
a call the student answered is stored and debited whatever its usage says.
Reservations live in the store while calls are in flight, so concurrent calls (threads, or several
drivers of the run) cannot overspend the cap. A ``kill -9`` in the middle of a batch loses only calls in flight: every
answered call is already stored, and the resumed batch gets it for free. A call stored by another
run of the store is served without asking the student, but this run pays it once (as the run API
does for evaluations: equal budgets per run, whatever other runs did before).

A call that fails after its retries is recorded with its status and error, is not debited (no answer
was delivered) and is not served again: repeating it tries again.

Nothing here knows a split or a metric: the trusted side of a prompt run (``PromptSplits``,
``score_test``) is :mod:`reasearch.runs.prompt_splits`, which calls the student through this ledger.
The store methods these calls go through (:mod:`reasearch.runs.store.metered`) are a generic record of
metered calls: a key, a JSON reply with a status, and its ledger debits.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from reasearch.errors import ConfigError
from reasearch.evaluators.kinds import PromptKind, task_kind
from reasearch.evaluators.prompt import StudentClient, StudentReply, StudentRequest, map_concurrently
from reasearch.evaluators.result import Status
from reasearch.runs.ledger import LedgerEntry, Unit, refusal_message
from reasearch.runs.run import Run

__all__ = ["StudentLedger"]

# One call reserves one student call; a spent dollar or student-token cap (debited after the call) also stops it.
_ONE_CALL: dict[Unit | str, float] = {Unit.STUDENT_CALLS: 1.0, Unit.DOLLARS: 0.0, Unit.STUDENT_TOKENS: 0.0}
_NOTE_PREFIXES = ("student", "test", "shared")  # ledger notes of a run's student-call debits: PREFIX:KEY


def _student_client(run: Run) -> StudentClient:
    """The student client of the run's prompt task (the ledger's default caller)."""
    match task_kind(run.task):
        case PromptKind(task=task):
            return task.student_client()
        case kind:
            raise ConfigError(f"run {run.id} is on {run.task_id}, a {kind.name} task, not a prompt task")


class StudentLedger:
    """The stored, debited and capped student caller of one step of a run.

    Args:
        run: the run (its store holds the calls; its budget caps them).
        step: the step the calls belong to (ledger rows are keyed by it).
        client: the student's client (default: the run's task's).
        note: the ledger note prefix (``student``; the trusted test pass uses ``test``).
        enforce_cap: False for the trusted side's test pass (it is debited, not capped).
    """

    def __init__(self, run: Run, *, step: int, client: StudentClient | None = None, note: str = "student",
                 enforce_cap: bool = True) -> None:
        self.run = run
        self.step = int(step)
        self.client = client if client is not None else _student_client(run)
        self.note = note
        self.enforce_cap = enforce_cap

    def call_batch(self, requests: Sequence[StudentRequest]) -> list[StudentReply]:
        """Replies in request order; the same call twice in a batch is made (and paid) once."""
        endpoint = self.client.spec.endpoint  # the same model name on another server is another call
        keys = [r.key(endpoint) for r in requests]
        unique = dict(zip(keys, requests, strict=True))
        replies = dict(
            zip(unique, map_concurrently(self._one, list(unique.items()), self.client.spec.concurrency), strict=True)
        )
        out, seen = [], set()
        for key in keys:
            reply = replies[key]
            out.append(reply.with_(cached=True) if key in seen and reply.ok else reply)
            seen.add(key)
        return out

    def _one(self, item: tuple[str, StudentRequest]) -> StudentReply:
        key, request = item
        store, run = self.run.store, self.run
        hit = store.student_call_get(key)
        if hit is not None:
            stored = StudentReply.from_dict(hit)
            if store.student_call_paid(run.id, [f"{p}:{key[:40]}" for p in _NOTE_PREFIXES]):
                return stored.with_(cached=True)  # a repeat within this run: free
        # The trusted test pass is not capped, but it holds each call too: a call in flight when its driver dies
        # is then charged at its reservation like any other (the student may have answered it).
        token, refused = run.reserve(_ONE_CALL, wait=self.enforce_cap, step=self.step, what="student call",
                                     capped=self.enforce_cap)
        if refused is not None:
            unit, used, cap = refused
            return StudentReply(Status.REFUSED, error=refusal_message(unit, used, cap), attempts=0)
        answered = False
        keep = False  # answered but not recorded: the hold stays, charged at its reservation on resume
        try:
            if hit is not None:
                # This run's first use of a call another run paid: no request reaches the student, but
                # the run pays it as if it had made it (equal budgets per run, whatever other runs did).
                stored = stored.with_(cached=False, wall_s=0.0)
                store.debit_student_call(self._debits("shared", key, stored), release=token)
                return stored
            reply = self.client.complete(request)
            answered = reply.ok
            debits = self._debits(self.note, key, reply) if reply.ok else []
            recorded, fresh = store.record_student_call(run.id, self.step, key, request.model, reply.to_dict(), debits,
                                                        release=token)
            if fresh:
                return reply
            # another writer stored this call first (and did not charge this run): pay like a shared hit
            shared = StudentReply.from_dict(recorded).with_(cached=False, wall_s=reply.wall_s)
            store.debit_student_call(self._debits("shared", key, shared))
            return shared
        except BaseException:
            keep = answered  # answered, its record failed (a full disk): the hold stays, charged on resume
            raise
        finally:
            if not keep:
                run.release(token)

    def _debits(self, prefix: str, key: str, reply: StudentReply) -> list[LedgerEntry]:
        now, note = time.time(), f"{prefix}:{key[:40]}"
        out = [LedgerEntry(self.run.id, self.step, Unit.STUDENT_CALLS, 1.0, note, now)]
        tokens = float(reply.input_tokens + reply.output_tokens)  # bounded by the client (StudentRequest.token_bounds)
        if tokens:
            out.append(LedgerEntry(self.run.id, self.step, Unit.STUDENT_TOKENS, tokens, note, now))
        if reply.cost_usd:
            out.append(LedgerEntry(self.run.id, self.step, Unit.DOLLARS, float(reply.cost_usd), note, now))
        return out
