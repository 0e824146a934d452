"""The spec facts a registration declares for `reasearch tasks` are the built task's own, for every id.

Listing the registry imports no task module (Gymnasium-style lazy entry points), so the facts shown
are declared at registration; this holds them equal to what each task's spec says.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import reasearch
from reasearch.errors import ConfigError
from reasearch.evaluators.registry import LISTING_KEYS, register, registered_entry, unregister

CONCRETE = [i for i in reasearch.list_tasks(include_families=False, expand=False)]


@pytest.mark.parametrize("task_id", CONCRETE)
def test_declared_listing_equals_the_built_tasks_spec(task_id: str) -> None:
    entry, _ = registered_entry(task_id)
    assert set(entry.listing) == LISTING_KEYS, f"{task_id} declares no listing facts: `reasearch tasks` would import it"
    spec = reasearch.make(task_id).spec
    assert entry.listing == {k: getattr(spec, k) for k in LISTING_KEYS}


def test_a_listing_must_give_every_fact() -> None:
    with pytest.raises(ConfigError, match="listing of 'toy/listing-v1' must give exactly"):
        register("toy/listing-v1", "reasearch.evaluators.testing:ToyTask", listing={"direction": "maximize"})
    unregister("toy/listing-v1")


def test_reasearch_tasks_lists_every_id_without_importing_a_task_module() -> None:
    prog = (
        "import contextlib, io, json, sys\n"
        "from reasearch.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    code = main(['tasks', '--json'])\n"
        "print(json.dumps({'code': code, 'rows': json.loads(out.getvalue()), 'mods': sorted(sys.modules)}))\n"
    )
    got = json.loads(subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, check=True,
                                    timeout=120).stdout.strip().splitlines()[-1])
    assert got["code"] == 0
    rows = {r["id"]: r for r in got["rows"]}
    assert set(CONCRETE) <= set(rows) and rows["circle_packing/n26-v1"]["best_known"] == 2.635983084918
    heavy = [m for m in got["mods"] if m.endswith((".task", ".set_task", "._students")) or m.startswith("numpy")]
    assert not heavy, heavy
