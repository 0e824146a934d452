# reasearch: jail (imported inside the sandbox: see reasearch/engine/_runtime.py)
"""Calling a candidate's entry point inside the sandbox, in the shapes people publish (all harnesses).

Published programs name their parameters differently (``construct_packing(num_circles)``,
``get_best_schedule(workload)`` without ``num_seqs``, ``heilbronn(num_points)``): every harness
describes what it can pass (an :class:`EntryArgs`) and :func:`bind_entry` inspects the candidate's
signature once, passing each parameter what it asks for by its published names. A signature that
asks for something the evaluator does not provide raises :class:`EntryCallError`, whose message
names the accepted forms (the sandbox reports it as ``CRASH`` with that text).

:func:`seed_everything` seeds ``random``, ``numpy.random`` and torch (when the candidate imported
it) from the evaluation seed, so one source and one seed give one result.

Stdlib only at import time (the ARC harness is import-light); NumPy is imported where it is used.
"""

from __future__ import annotations

import inspect
import numbers
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "EntryArgs",
    "EntryCallError",
    "as_float_array",
    "bind_entry",
    "call_entry",
    "native_in_image",
    "seed_everything",
]

_MAX_DEPTH = 4  # points and centers are 2-D; deeper nesting is not an answer worth passing on
_SEED_ALIASES = ("seed", "random_seed", "rng_seed")


class EntryCallError(TypeError):
    """The candidate's entry point asks for arguments the evaluator does not provide."""


@dataclass(frozen=True, slots=True)
class EntryArgs:
    """What a harness can pass to an entry point.

    Attributes:
        names: canonical name -> accepted parameter names (the canonical one first), e.g.
            ``{"n": ("n", "num_circles", "n_circles")}``; matching ignores case.
        positional: canonical names in the published positional order: ``*args`` receives those
            not bound by name, and a required parameter with an unknown name takes the next of them
            (``get_best_schedule(wl, k)`` gets the workload and ``num_seqs``).
        required: canonical names every call must pass (``get_best_schedule`` needs the workload);
            an entry point that cannot take them is refused.
        forms: the accepted forms, as shown in the error message.
    """

    names: Mapping[str, Sequence[str]]
    positional: Sequence[str] = ()
    required: Sequence[str] = ()
    forms: Sequence[str] = field(default_factory=tuple)

    def canonical(self, param: str) -> str | None:
        low = param.lower()
        for canon, aliases in self.names.items():
            if low == canon.lower() or low in (a.lower() for a in aliases):
                return canon
        return None

    def describe(self, entry_name: str) -> str:
        forms = "; ".join(f"{entry_name}{f}" for f in self.forms) if self.forms else f"{entry_name}()"
        known = ", ".join(
            "/".join(dict.fromkeys((canon, *aliases))) for canon, aliases in self.names.items()
        )
        return f"accepted forms: {forms} (parameters are matched by name: {known}; others need defaults)"


def seed_args(extra: Mapping[str, Sequence[str]] | None = None, **kw: Any) -> EntryArgs:
    """An :class:`EntryArgs` whose names include ``seed`` (and its aliases) besides ``extra``."""
    names = dict(extra or {})
    names.setdefault("seed", _SEED_ALIASES)
    return EntryArgs(names=names, **kw)


def _entry_name(entry: Callable[..., Any]) -> str:
    return str(getattr(entry, "__name__", "the entry point"))


def bind_entry(entry: Callable[..., Any], spec: EntryArgs) -> Callable[[Mapping[str, Any]], Any]:
    """A caller ``values -> entry(...)`` for ``entry``'s signature (inspected once, here).

    ``values`` maps canonical names to what the harness passes this time. Named parameters get
    their value by name (or alias); parameters the evaluator does not know keep their defaults;
    ``*args`` receives the :attr:`EntryArgs.positional` values not bound by name; ``**kwargs``
    receives the seed only (as published programs that take ``**kwargs`` do not expect more).

    Raises:
        EntryCallError: a required parameter cannot be given, or a required value has no parameter.
    """
    name = _entry_name(entry)
    try:
        params = list(inspect.signature(entry).parameters.values())
    except (TypeError, ValueError):  # builtins without a signature: the published positional call
        return lambda values: entry(*(values[k] for k in spec.required))
    kinds = inspect.Parameter
    named = [p for p in params if p.kind not in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)]
    has_varargs = any(p.kind is kinds.VAR_POSITIONAL for p in params)
    has_varkw = any(p.kind is kinds.VAR_KEYWORD for p in params)
    plan: dict[str, str] = {}  # parameter name -> canonical value name
    for p in named:
        canon = spec.canonical(p.name)
        if canon is not None and canon not in plan.values():
            plan[p.name] = canon
    leftover = [k for k in spec.positional if k not in plan.values()]
    for p in named:  # required parameters with unknown names take the published positional order
        if p.name in plan or p.default is not kinds.empty:
            continue
        if p.kind is not kinds.KEYWORD_ONLY and leftover:
            plan[p.name] = leftover.pop(0)
            continue
        raise EntryCallError(
            f"cannot call {name}{inspect.signature(entry)}: nothing is passed for its parameter {p.name!r}; "
            + spec.describe(name))
    star = leftover if has_varargs else []
    missing = [k for k in spec.required if k not in plan.values() and k not in star]
    if missing:
        raise EntryCallError(
            f"cannot call {name}{inspect.signature(entry)}: it takes no parameter for {', '.join(missing)}; "
            + spec.describe(name))
    # Positional parameters up to the last one bound go positionally (skipped ones get their defaults),
    # which also serves positional-only parameters and anything before *args.
    positional_params = [p for p in named if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)]
    last = max((i for i, p in enumerate(positional_params) if p.name in plan), default=-1)
    if star:  # *args follows every positional parameter: all of them must be passed positionally
        last = len(positional_params) - 1
    head = positional_params[: last + 1]
    keyword = [p.name for p in named if p.kind is kinds.KEYWORD_ONLY and p.name in plan]
    seed_kw = has_varkw and "seed" in spec.names and "seed" not in plan.values()

    def call(values: Mapping[str, Any]) -> Any:
        args = [values[plan[p.name]] if p.name in plan else p.default for p in head]
        args.extend(values[k] for k in star)
        kwargs = {k: values[plan[k]] for k in keyword}
        if seed_kw:
            kwargs["seed"] = values.get("seed")
        return entry(*args, **kwargs)

    return call


def call_entry(entry: Callable[..., Any], values: Mapping[str, Any], spec: EntryArgs) -> Any:
    """``bind_entry(entry, spec)(values)``: one call, for harnesses that call the entry once."""
    return bind_entry(entry, spec)(values)


def seed_everything(seed: int | None, *, import_numpy: bool = True) -> int:
    """Seeds ``random``, ``numpy.random`` and, when the candidate imported it, torch; returns the seed used.

    Call it after the candidate module is loaded (harnesses run then), so that a torch the candidate
    imported is seen. NumPy is imported here unless ``import_numpy`` is False (the import-light ARC
    harness), in which case it is seeded only when already loaded (the sandbox preloads it). torch
    is never imported here: a candidate that does not use it never pays for its import.
    """
    value = 0 if seed is None else int(seed)
    random.seed(value)
    np_mod = sys.modules.get("numpy")
    if np_mod is None and import_numpy:
        try:
            import numpy as np_mod
        except ImportError:  # pragma: no cover - NumPy is a dependency
            np_mod = None
    if np_mod is not None:
        np_mod.random.seed(value % 2**32)  # the legacy global generator needs 32 bits
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "manual_seed"):
        torch.manual_seed(value)
    return value


def as_float_array(value: Any, what: str) -> np.ndarray | list[Any]:
    """A plain float64 ndarray of ``value``; shapes are left for the trusted scorer to judge.

    Torch tensors are detached and copied to NumPy. Ragged nested sequences of numbers cannot form an
    array: they are handed over as plain lists of floats, so the scorer rejects them as ``INVALID``
    (a wrong answer), not as a crash.

    Raises:
        TypeError: ``value`` holds something other than numbers (strings, objects, booleans).
    """
    import numpy as np

    if hasattr(value, "detach") and hasattr(value, "cpu") and hasattr(value, "numpy"):  # a torch tensor
        value = value.detach().cpu().numpy()
    try:
        arr = np.asarray(value)
    except ValueError:
        return _plain_lists(value, what, 0)
    if arr.dtype.kind == "O":
        return _plain_lists(value, what, 0)
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{what} must be numbers, got an array of dtype {arr.dtype}")
    return np.array(arr, dtype=np.float64, copy=True, order="C")


def _plain_lists(value: Any, what: str, depth: int) -> Any:
    """Nested lists of floats (for ragged answers); anything that is not a number is refused."""
    import numpy as np

    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    if depth < _MAX_DEPTH and isinstance(value, (list, tuple, np.ndarray)):
        return [_plain_lists(v, what, depth + 1) for v in value]
    raise TypeError(f"{what} must be numbers (nested at most {_MAX_DEPTH} deep), found {type(value).__name__}")


def native_in_image() -> bool:
    """A harness ``warmup()``'s first step: loads ``numpy.random`` in this worker and says whether its
    warm image holds ``reasearch.native`` (only then are the kernels worth warming).

    The sandbox pool fits each image to what its candidates import, so a worker serving candidates
    that do not import the kernels stays small and its forks stay cheap. ``numpy.random`` (which every
    evaluation seeds) is loaded in every worker: NumPy imports it lazily, and each child would import
    it again.
    """
    seed_everything(0)  # loads numpy.random here; each evaluation seeds again with its own seed
    return "reasearch.native" in sys.modules
