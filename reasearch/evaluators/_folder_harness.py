# reasearch: jail (imported inside the sandbox: see reasearch/engine/_runtime.py)
"""The harness of a task folder (:class:`reasearch.evaluators.folder.FolderTask`); runs inside the sandbox.

It calls the candidate's entry point with the folder's parameters it asks for by name (and ``seed``), and
hands back what it returned as plain data. It scores nothing: the folder's ``score.py`` runs on the trusted
side over this value only.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from reasearch.evaluators._entry_call import seed_everything

__all__ = ["folder_harness"]


def folder_harness(entry: Callable[..., Any], payload: Mapping[str, Any]) -> Any:
    """Seeds the generators and calls ``entry(**the parameters its signature names)``."""
    seed = seed_everything(payload.get("seed"), import_numpy=False)  # numpy is seeded when the candidate loaded it
    given: dict[str, Any] = {**dict(payload.get("params") or {}), "seed": seed}
    kwargs: dict[str, Any] = {}
    for name, p in inspect.signature(entry).parameters.items():
        if p.kind is p.VAR_KEYWORD:
            kwargs.update({k: v for k, v in given.items() if k not in kwargs})
        elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name in given:
            kwargs[name] = given[name]
        elif p.default is p.empty and p.kind is not p.VAR_POSITIONAL:
            known = ", ".join(sorted(given))
            raise TypeError(f"{getattr(entry, '__name__', 'the entry point')}() asks for {name!r}; "
                            f"it may take only these by name: {known}")
    return entry(**kwargs)
