"""What the student server received during a prompt run, checked against the splits (shared by the
methods' and the agent's seal tests)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from reasearch.runs import Run, Unit


def sealed_traffic_problems(hits: Counter[tuple[str, str]], run: Run, *, scores_validation_elsewhere: bool = False
                            ) -> list[str]:
    """Why the student traffic of ``run`` (``hits``: (system prompt, input) -> requests, as the fake
    student server counted them) breaks the seal; empty when it holds.

    The seal: a test input reaches the student only in the trusted side's one pass with the final
    prompt (each once, all of them, paid in that pass: nothing sent them before); a prompt the run
    validated was sent the whole validation split, and its stored result is a validation result; any
    other prompt was sent train inputs only (validation inputs too where the method scores validation
    by another path, ``scores_validation_elsewhere``: GEPA's own valset).
    """
    task: Any = run.task
    train = {ex.input for ex in task.examples("train")}
    val = {ex.input for ex in task.examples("validation")}
    test = {ex.input for ex in task.examples("test")}
    problems = []
    if train & val or train & test or val & test:
        problems.append("the splits overlap: the check below would prove nothing")
    events = run.events(kind="test_result")
    if len(events) != 1:
        problems.append(f"the run logged {len(events)} sealed test passes, not one")
    final = run.candidate_source(events[0].payload["candidate"]) if len(events) == 1 else None
    validated = {run.candidate_source(ev.candidate_id) for ev in run.store.evaluations(run.id)}
    by_prompt: dict[str, set[str]] = {}
    for (system, user), n in hits.items():
        by_prompt.setdefault(system, set()).add(user)
        if user not in train | val | test:
            problems.append(f"an input of no split reached the student: {user[:60]!r}")
        if user in test and system != final:
            problems.append(f"a test input reached the student with a prompt that is not the final one: "
                            f"{system[:60]!r} got {user[:60]!r}")
        if user in test and n != 1:
            problems.append(f"a test input reached the student {n} times: {user[:60]!r}")
    sent_test = {u for (s, u) in hits if u in test}
    if sent_test != test:
        problems.append(f"the sealed pass sent {len(sent_test)} of the {len(test)} test inputs")
    for system, users in by_prompt.items():
        if system in validated and not val <= users:
            problems.append(f"a validated prompt was not sent the validation split: {system[:60]!r} got "
                            f"{len(users & val)} of {len(val)}")
        if system not in validated and users & val and not scores_validation_elsewhere:
            problems.append(f"a prompt never validated was sent validation inputs: {system[:60]!r}")
    if not validated:
        problems.append("no prompt was validated: the check needs one")
    for ev in run.store.evaluations(run.id):
        m = ev.result.metrics
        if (m.get("split"), m.get("n")) != ("validation", len(val)):
            problems.append(f"step {ev.step} stored a result of split {m.get('split')!r} on {m.get('n')} examples")
    paid = sum(e.amount for e in run.store.ledger(run.id)
               if e.unit is Unit.STUDENT_CALLS and e.note.startswith("test:"))
    if paid != len(test):
        problems.append(f"the sealed pass paid {paid} student calls for {len(test)} test inputs (sent before it?)")
    return problems
