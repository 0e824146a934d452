"""Model calls against a run's budget: what the agent and the baseline methods reserve before calling.

A call is held in the store at its worst case (one model call; the prompt's estimated tokens plus the
reply's max tokens; those tokens at the model's price) before it is made, against the run's caps and
its fleet's, so that drivers and fleet members calling at once cannot overspend a cap that each of
them checked alone. Near a token or dollar cap the reply's limit is lowered to what is left, so the
call still fits; a call that cannot fit even a one-token reply is refused. Trusts only the store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from reasearch.models.base import ModelSpec, call_ceiling, fit_call
from reasearch.models.messages import ModelRequest
from reasearch.runs.ledger import Unit
from reasearch.runs.run import Run, refusal_text

__all__ = ["HARD_UNITS", "reserve_model_call", "spent_hard_cap"]

HARD_UNITS = (Unit.TOKENS, Unit.DOLLARS, Unit.MODEL_CALLS)  # spent: no further call, not even a wrap-up turn


def spent_hard_cap(remaining: Mapping[Unit, float | None]) -> str | None:
    """Why no further model call may be made (``"the tokens budget is spent"``): the first of
    :data:`HARD_UNITS` with nothing left in ``remaining`` (a run's :meth:`Run.remaining`); None when none is."""
    for unit in HARD_UNITS:
        left = remaining.get(unit)
        if left is not None and left <= 0:
            return f"the {unit.value} budget is spent"
    return None


def reserve_model_call(run: Run, request: ModelRequest, spec: ModelSpec | None, *, step: int = -1,
                       answer_kind: str = "") -> tuple[str | None, str | None, ModelRequest]:
    """Reserves one call of ``request`` on ``run`` (waiting, bounded, for what other drivers hold).

    ``step`` and ``answer_kind`` (the event kind the reply is journaled under at ``step``) let a resume
    charge the call at this reservation should the driver die with it in flight (:meth:`Run.reserve`).

    Returns:
        ``(token, None, request to send)`` when held (settle it with :meth:`Run.settle`), else
        ``(None, why, request)``: the cap that refused it, worded for the run's end.
    """
    left = run.remaining()
    tokens_left, dollars_left = left.get(Unit.TOKENS), left.get(Unit.DOLLARS)
    fitted = fit_call(request, spec, tokens_left=tokens_left, dollars_left=dollars_left)
    if fitted is None:
        tokens, dollars = call_ceiling(replace(request, max_tokens=1), spec)
        if tokens_left is not None and tokens > tokens_left:
            why = f"{tokens_left:g} tokens left, the prompt alone needs ~{tokens - 1}"
            return None, f"the {Unit.TOKENS.value} budget is spent for a model call: {why}", request
        why = f"${dollars_left or 0.0:.4g} left, the prompt alone costs ~${dollars:.4g}"
        return None, f"the {Unit.DOLLARS.value} budget is spent for a model call: {why}", request
    request, tokens, dollars = fitted
    token, refusal = run.reserve({Unit.MODEL_CALLS: 1.0, Unit.TOKENS: float(tokens), Unit.DOLLARS: dollars},
                                 wait=True, step=step, what="model call", answer_kind=answer_kind)
    if refusal is not None:
        return None, f"the {refusal[0].value} budget is spent for a model call: {refusal_text(refusal)}", request
    return token, None, request
