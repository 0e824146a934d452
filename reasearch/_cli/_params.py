"""``KEY=VALUE`` command-line pairs (``-p``, ``--cap``): values are JSON when they parse, else text."""

from __future__ import annotations

import json
from typing import Any

from reasearch.errors import ConfigError


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
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out
