"""``KEY=VALUE`` command-line pairs (``-p``, ``--cap``): values are JSON when they parse, else text.

A number must be finite and bounded: ``NaN``, ``Infinity``, ``1e400`` (a float overflow) and integers beyond
64 bits are refused with one line, also inside a JSON list or object (exit 2)."""

from __future__ import annotations

import json
from typing import Any

from reasearch.errors import ConfigError
from reasearch.evaluators.params import MAX_PARAM_INT, unbounded_number


def key_values(items: list[str], flag: str = "-p") -> dict[str, Any]:
    """``["n=26", "name=x"]`` -> ``{"n": 26, "name": "x"}``.

    A pair without ``=`` or a non-identifier key is an error.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise ConfigError(f"bad parameter {item!r}: write {flag} key=value")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value, bad = raw, None
        except ValueError:  # an integer of more digits than Python converts (not a JSONDecodeError)
            value, bad = None, f"{key} = an integer of over 4300 digits"
        else:
            bad = unbounded_number(value, key)
        if bad is not None:
            raise ConfigError(f"bad parameter {flag} {_short(item)}: {bad}; numbers must be finite (no NaN, Infinity "
                              f"or overflow such as 1e400) and integers within +-{MAX_PARAM_INT}")
        out[key] = value
    return out


def _short(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")
