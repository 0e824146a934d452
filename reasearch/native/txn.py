"""Transaction-scheduling cost model: parsing, compilation, and plain-Python twins of ``_txn``.

The model is the one of the published txn_scheduling simulator (ADRS), stated exactly:

* A transaction is a rigid block of ``txn_len`` unit slots; its op at 1-based position ``pos`` runs
  at ``start + pos - 1``. Transactions are placed one by one in schedule order.
* Every key keeps the lock times of all ops placed on it so far, in time order (a new lock goes
  after every lock at the same time or earlier).
* For an op of the transaction being placed, on a key that already holds locks: if the op is a
  write, or the *last* lock in that order is a write, the op must run after that last lock
  (``T + 1``). Otherwise (a read behind a read) it must run after the latest *write* on the key
  (``W + 1``), or anywhere (``0``) when the key was never written.
* ``start = max(1, max_op(bound - pos + 1))``; the transaction ends at ``start + txn_len - 1``.
  The ops of one transaction see only earlier transactions, never each other.
* The makespan of a schedule is the largest end so far (a prefix has its own makespan).

So a key's whole lock list reduces to three numbers: ``T`` (latest lock time), whether the lock last
in order at ``T`` is a write, and ``W`` (latest write time). :func:`lock_list_makespan` keeps the full
lock lists, as the published simulator does, and is the reference the compact models are tested
against; :class:`PyTxnSimulator` is the plain-Python twin of the Cython
:class:`reasearch.native._txn.TxnSimulator` (same methods, same results).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import SupportsIndex

__all__ = [
    "Op",
    "CompiledWorkload",
    "parse_workload",
    "compile_workload",
    "lock_list_makespan",
    "PyTxnSimulator",
    "PyTxnState",
]

Op = tuple[str, str, int, int]
"""One op as the published API shows it: ``(op_type, key, pos, txn_len)``; ``pos`` is 1-based."""


def parse_workload(workload: str | Mapping[str, str] | Sequence[str]) -> list[list[Op]]:
    """Parses a workload into per-transaction op lists, by the published rules.

    Args:
        workload: a JSON object text (``{"txn0": "r-5 w-3 *", ...}``, transactions in object order),
            such a mapping, or a sequence of op strings. Ops are separated by single spaces; ``r-K``
            reads and ``w-K`` writes key ``K`` (kept as the string ``K``); ``*`` only adds length.

    Returns:
        One list per transaction of ``(op_type, key, pos, txn_len)`` tuples (``*`` slots omitted).

    Raises:
        ValueError: an op that is neither ``*`` nor ``r-K``/``w-K``.
        TypeError: a transaction that is not a string.
    """
    if isinstance(workload, str):
        workload = json.loads(workload)
    texts = list(workload.values()) if isinstance(workload, Mapping) else list(workload)
    txns: list[list[Op]] = []
    for t, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"transaction {t} must be a string of ops, not {type(text).__name__}")
        ops = text.split(" ")
        n = len(ops)
        parsed: list[Op] = []
        for i, op in enumerate(ops):
            if op == "*":
                continue
            parts = op.split("-")
            if len(parts) != 2 or parts[0] not in ("r", "w") or not parts[1]:
                raise ValueError(f"transaction {t}, op {i + 1}: {op!r} is not 'r-KEY', 'w-KEY' or '*'")
            parsed.append((parts[0], parts[1], i + 1, n))
        txns.append(parsed)
    return txns


@dataclass(frozen=True, slots=True)
class CompiledWorkload:
    """Flat arrays of a parsed workload (what the Cython simulator is built from).

    Attributes:
        txn_ptr: ops of transaction ``t`` are ``txn_ptr[t]:txn_ptr[t + 1]``.
        op_key: dense key id of each op (ids in order of first appearance).
        op_pos: 1-based position of each op in its transaction.
        op_write: 1 for a write, 0 for a read.
        txn_len: the length that counts for each transaction (0 for one without ops, as published).
        num_keys: number of distinct keys.
    """

    txn_ptr: tuple[int, ...]
    op_key: tuple[int, ...]
    op_pos: tuple[int, ...]
    op_write: tuple[int, ...]
    txn_len: tuple[int, ...]
    num_keys: int

    @property
    def num_txns(self) -> int:
        return len(self.txn_len)


def compile_workload(txns: Sequence[Sequence[Op]]) -> CompiledWorkload:
    """Flattens parsed transactions; keys become dense integer ids (string-equal keys share one)."""
    key_ids: dict[str, int] = {}
    ptr, keys, pos, write, lens = [0], [], [], [], []
    for txn in txns:
        length = 0
        for op_type, key, p, n in txn:
            keys.append(key_ids.setdefault(key, len(key_ids)))
            pos.append(int(p))
            write.append(1 if op_type == "w" else 0)
            length = int(n)  # published: the length is read from the ops, so a txn of only '*' has 0
        ptr.append(len(keys))
        lens.append(length)
    return CompiledWorkload(tuple(ptr), tuple(keys), tuple(pos), tuple(write), tuple(lens), len(key_ids))


def _index(x: SupportsIndex, n: int) -> int:
    """A schedule entry as a list index (``__index__`` semantics, negatives from the end)."""
    i = operator.index(x)
    if i < 0:
        i += n
    if not 0 <= i < n:
        raise IndexError(f"transaction index {x} out of range for a workload of {n} transactions")
    return i


def lock_list_makespan(txns: Sequence[Sequence[Op]], seq: Iterable[SupportsIndex]) -> int:
    """Makespan of ``seq`` with full per-key lock lists (the published data structure), in plain Python.

    Slow on purpose: it is the model written the long way, used to test the compact twins and as
    the plain-Python reference in benchmarks.
    """
    n = len(txns)
    locks: dict[str, list[tuple[str, int]]] = {}  # key -> [(op_type, time)] in lock order
    makespan = 0
    for x in seq:
        txn = txns[_index(x, n)]
        start = 1
        length = 0
        for op_type, key, pos, txn_len in txn:
            held = locks.get(key)
            if held:
                if held[-1][0] == "w" or op_type == "w":
                    bound = held[-1][1] + 1
                else:  # a read behind a read: after the latest write in lock order, if any
                    bound = 0
                    for kind, when in reversed(held):
                        if kind == "w":
                            bound = when + 1
                            break
                start = max(start, bound - pos + 1)
            length = txn_len
        makespan = max(makespan, start + length - 1)
        for op_type, key, pos, _ in txn:
            when = start + pos - 1
            held = locks.setdefault(key, [])
            at = len(held)
            while at > 0 and held[at - 1][1] > when:  # after every lock at the same time or earlier
                at -= 1
            held.insert(at, (op_type, when))
    return makespan


class PyTxnState:
    """Plain-Python twin of :class:`reasearch.native._txn.TxnState`: a schedule prefix, ready to extend."""

    __slots__ = ("last", "last_write", "write", "makespan", "_seq")

    def __init__(self, num_keys: int) -> None:
        self.last = [-1] * num_keys  # T: latest lock time (-1: key never locked)
        self.last_write = [False] * num_keys  # is the lock last in order at T a write
        self.write = [-1] * num_keys  # W: latest write time (-1: never written)
        self.makespan = 0
        self._seq: list[int] = []

    def copy(self) -> PyTxnState:
        """An independent copy."""
        other = PyTxnState(0)
        other.last, other.last_write, other.write = self.last[:], self.last_write[:], self.write[:]
        other.makespan, other._seq = self.makespan, self._seq[:]
        return other

    @property
    def sequence(self) -> list[int]:
        return list(self._seq)

    def __len__(self) -> int:
        return len(self._seq)


class PyTxnSimulator:
    """Plain-Python twin of :class:`reasearch.native._txn.TxnSimulator` (same methods and results)."""

    def __init__(self, compiled: CompiledWorkload) -> None:
        self.c = compiled
        self.num_txns = compiled.num_txns

    def _start(self, st: PyTxnState, t: int) -> int:
        """Earliest start of transaction ``t`` after the prefix in ``st``."""
        c = self.c
        start = 1
        for o in range(c.txn_ptr[t], c.txn_ptr[t + 1]):
            k = c.op_key[o]
            last = st.last[k]
            if last < 0:
                continue
            bound = last + 1 if (c.op_write[o] or st.last_write[k]) else st.write[k] + 1
            start = max(start, bound - c.op_pos[o] + 1)
        return start

    def _place(self, st: PyTxnState, t: int, start: int) -> None:
        """Records the locks of transaction ``t`` started at ``start``."""
        c = self.c
        for o in range(c.txn_ptr[t], c.txn_ptr[t + 1]):
            k = c.op_key[o]
            when = start + c.op_pos[o] - 1
            w = bool(c.op_write[o])
            if when >= st.last[k]:  # a lock at the current latest time goes last in order
                st.last[k] = when
                st.last_write[k] = w
            if w and when > st.write[k]:
                st.write[k] = when
        st.makespan = max(st.makespan, start + c.txn_len[t] - 1)
        st._seq.append(t)

    def get_opt_seq_cost(self, seq: Iterable[int]) -> int:
        """Makespan of the schedule (or prefix) ``seq``."""
        st = self.new_state()
        for x in seq:
            t = _index(x, self.num_txns)
            self._place(st, t, self._start(st, t))
        return st.makespan

    def new_state(self) -> PyTxnState:
        """The empty prefix."""
        return PyTxnState(self.c.num_keys)

    def peek(self, st: PyTxnState, txn: int) -> int:
        """Makespan of the prefix extended by ``txn`` (the state is unchanged)."""
        t = _index(txn, self.num_txns)
        return max(st.makespan, self._start(st, t) + self.c.txn_len[t] - 1)

    def extend(self, st: PyTxnState, txn: int) -> int:
        """Appends ``txn`` to the prefix; returns the new makespan."""
        t = _index(txn, self.num_txns)
        self._place(st, t, self._start(st, t))
        return st.makespan

    def peek_all(self, st: PyTxnState) -> list[int]:
        """``peek(st, t)`` for every transaction ``t`` in index order."""
        return [self.peek(st, t) for t in range(self.num_txns)]

    def placements(self, seq: Iterable[int]) -> list[tuple[int, int]]:
        """``(start, end)`` slot of each transaction of ``seq``, in schedule order (for pictures and analysis)."""
        st = self.new_state()
        out = []
        for x in seq:
            t = _index(x, self.num_txns)
            start = self._start(st, t)
            self._place(st, t, start)
            out.append((start, start + self.c.txn_len[t] - 1))
        return out
