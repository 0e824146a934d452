# reasearch: jail (imported inside the sandbox: see reasearch/engine/_runtime.py)
"""``Workload``: the published simulator API, backed by the compiled cost model.

Candidates receive one of these per workload (inside the sandbox); the trusted side scores with the
same class. Published programs use ``num_txns``, ``txns[i]`` (a list of ``(op_type, key, pos,
txn_len)`` tuples), ``get_opt_seq_cost(seq)`` and ``debug``; the incremental calls (``new_state``,
``peek``, ``extend``, ``peek_all``) are this project's addition.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cache
from importlib import resources
from typing import Any

from reasearch.errors import TaskDefinitionError
from reasearch.native._txn import TxnSimulator, TxnState
from reasearch.native.txn import Op, compile_workload, parse_workload

__all__ = ["Workload", "TxnState", "WORKLOAD_NAMES", "workload_texts", "load_workloads"]

WORKLOAD_NAMES: tuple[str, ...] = ("workload_1", "workload_2", "workload_3")


class Workload:
    """A set of transactions and the compiled makespan simulator for it.

    Args:
        workload: the transactions: a JSON object text as published (``'{"txn0": "w-17 r-5 *", ...}'``),
            such a mapping, or a sequence of op strings. ``r-K``/``w-K`` read/write key ``K``;
            ``*`` is a no-op that only adds length.
        debug: kept for published programs that read ``workload.debug``; has no other effect.
        verify: accepted for compatibility with the published constructor; unused.
        name: a label for messages.

    Attributes:
        num_txns: number of transactions.
        txns: ``txns[i]`` is the list of ``(op_type, key, pos, txn_len)`` of transaction ``i``
            (``key`` a string, ``pos`` 1-based, ``*`` slots omitted), as in the published simulator.
        workload: the op string of each transaction.

    Methods (the compiled simulator's, bound on the instance):
        get_opt_seq_cost(seq): makespan of a schedule or prefix (the published call).
        new_state(): an empty prefix (:class:`TxnState`: ``copy()``, ``makespan``, ``sequence``, ``len``).
        peek(state, txn): makespan of the prefix extended by ``txn``; ``state`` is unchanged.
        extend(state, txn): appends ``txn`` to the prefix and returns the new makespan.
        peek_all(state): ``[peek(state, t) for t in range(num_txns)]``.
    """

    get_opt_seq_cost: Callable[[Iterable[int]], int]
    new_state: Callable[[], TxnState]
    peek: Callable[[TxnState, int], int]
    extend: Callable[[TxnState, int], int]
    peek_all: Callable[[TxnState], list[int]]

    def __init__(
        self,
        workload: str | Mapping[str, str] | Sequence[str],
        debug: bool = False,
        verify: bool = False,
        *,
        name: str = "",
    ) -> None:
        if isinstance(workload, str):
            workload = json.loads(workload)
        texts = list(workload.values()) if isinstance(workload, Mapping) else list(workload)
        self.workload: list[str] = texts
        self.txns: list[list[Op]] = parse_workload(texts)
        self.num_txns: int = len(self.txns)
        self.debug = debug
        self.verify = verify
        self.name = name
        c = compile_workload(self.txns)
        sim = TxnSimulator(c.txn_ptr, c.op_key, c.op_pos, c.op_write, c.txn_len, c.num_keys)
        self._sim = sim
        # Bound methods of the compiled simulator, stored on the instance: a call costs no Python frame.
        self.get_opt_seq_cost = sim.get_opt_seq_cost
        self.new_state = sim.new_state
        self.peek = sim.peek
        self.extend = sim.extend
        self.peek_all = sim.peek_all

    @property
    def num_keys(self) -> int:
        """Number of distinct keys."""
        return self._sim.num_keys

    def lower_bound(self) -> int:
        """Longest transaction: no schedule of all transactions has a smaller makespan."""
        return max((ops[0][3] for ops in self.txns if ops), default=0)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.workload, self.debug, self.verify, self.name))

    def __repr__(self) -> str:
        label = f"{self.name!r}, " if self.name else ""
        return f"Workload({label}num_txns={self.num_txns}, num_keys={self.num_keys})"


def _rebuild(texts: list[str], debug: bool, verify: bool, name: str) -> Workload:
    """Unpickling helper (the compiled simulator is rebuilt from the op strings)."""
    return Workload(texts, debug, verify, name=name)


@cache
def _shipped_text() -> str:
    """The package's ``data/workloads.json``, read once."""
    return resources.files(__package__).joinpath("data", "workloads.json").read_text(encoding="utf-8")


def workload_texts() -> dict[str, dict[str, str]]:
    """The shipped workloads: ``{name: {txn_name: op string}}`` (a fresh copy on every call)."""
    data = json.loads(_shipped_text())
    if tuple(data) != WORKLOAD_NAMES:
        raise TaskDefinitionError(
            f"the shipped workloads.json must hold {WORKLOAD_NAMES}, found {tuple(data)}; reinstall reasearch"
        )
    return data


def load_workloads() -> list[Workload]:
    """Fresh :class:`Workload` objects for the three shipped workloads, in order."""
    return [Workload(texts, name=name) for name, texts in workload_texts().items()]
