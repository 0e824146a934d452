# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled transaction-scheduling simulator (twin: :mod:`reasearch.native.txn`).

Per key the published lock list reduces to three numbers (see :mod:`reasearch.native.txn`): ``T``,
the latest lock time; whether the lock last in order at ``T`` is a write; ``W``, the latest write time.
A full schedule is then two passes over the ops of each transaction, with no allocation: each
simulator owns one scratch state. Python code that runs during a call (a generator being iterated,
an ``__index__``) may re-enter or let another thread in; such nested calls get a state of their own.
"""

from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

import numpy as np

ctypedef long long i64

cdef struct OpRec:
    int key
    int pos
    int write

cdef struct KeyRec:
    i64 last
    i64 write
    i64 last_write


cdef inline i64 _as_index(object x, Py_ssize_t n) except -1:
    """A schedule entry as a list index (``__index__`` semantics; negatives count from the end)."""
    cdef Py_ssize_t i = x  # Cython uses __index__: floats and strings raise TypeError, as list indexing does
    if i < 0:
        i += n
    if i < 0 or i >= n:
        raise IndexError(f"transaction index {x!r} out of range for a workload of {n} transactions")
    return i


cdef class TxnState:
    """A schedule prefix of one :class:`TxnSimulator`, ready to be extended or peeked.

    Made by ``TxnSimulator.new_state()``; ``copy()`` gives an independent one.
    """

    cdef Py_ssize_t num_keys
    cdef KeyRec* keys       # per key: T (-1: never locked), W (-1: never written), last-at-T-is-a-write
    cdef i64 _makespan
    cdef int* seq
    cdef Py_ssize_t length, capacity
    cdef object owner       # the TxnSimulator this prefix belongs to

    def __cinit__(self, Py_ssize_t num_keys, object owner):
        cdef Py_ssize_t k
        self.num_keys = num_keys
        self.owner = owner
        self.keys = <KeyRec*>malloc(max(num_keys, 1) * sizeof(KeyRec))
        self.capacity = 128
        self.seq = <int*>malloc(self.capacity * sizeof(int))
        if not self.keys or not self.seq:
            raise MemoryError()
        for k in range(num_keys):
            self.keys[k].last = -1
            self.keys[k].write = -1
            self.keys[k].last_write = 0
        self._makespan = 0
        self.length = 0

    def __dealloc__(self):
        free(self.keys)
        free(self.seq)

    cdef void _push(self, int t) except *:
        cdef int* grown
        if self.length == self.capacity:
            grown = <int*>malloc(2 * self.capacity * sizeof(int))
            if not grown:
                raise MemoryError()
            memcpy(grown, self.seq, self.length * sizeof(int))
            free(self.seq)
            self.seq = grown
            self.capacity *= 2
        self.seq[self.length] = t
        self.length += 1

    def copy(self):
        """An independent copy of this prefix (cost: a few hundred bytes of memcpy)."""
        cdef TxnState other = TxnState.__new__(TxnState, self.num_keys, self.owner)
        memcpy(other.keys, self.keys, self.num_keys * sizeof(KeyRec))
        other._makespan = self._makespan
        while other.capacity < self.length:
            other._push(0)
        memcpy(other.seq, self.seq, self.length * sizeof(int))
        other.length = self.length
        return other

    def __copy__(self):
        return self.copy()

    def __deepcopy__(self, memo):
        return self.copy()  # the state holds only numbers: a copy is already deep

    @property
    def makespan(self):
        """Makespan of the prefix so far (0 when empty)."""
        return self._makespan

    @property
    def sequence(self):
        """The prefix as a list of transaction indices."""
        return [self.seq[i] for i in range(self.length)]

    def __len__(self):
        return self.length

    def __repr__(self):
        return f"TxnState(len={self.length}, makespan={self._makespan})"


cdef class TxnSimulator:
    """The published cost model, compiled.

    Built from the flat arrays of :func:`reasearch.native.txn.compile_workload`. Methods:
    ``get_opt_seq_cost(seq)`` (makespan of a schedule or prefix), and the incremental
    ``new_state()``, ``peek(state, txn)``, ``extend(state, txn)``, ``peek_all(state)``.
    """

    cdef Py_ssize_t n, num_keys, num_ops
    cdef int* txn_ptr
    cdef OpRec* ops
    cdef int* txn_len
    cdef TxnState scratch
    cdef bint busy  # get_opt_seq_cost is running (Python code it calls may re-enter)

    def __cinit__(self, txn_ptr, op_key, op_pos, op_write, txn_len, Py_ssize_t num_keys):
        cdef Py_ssize_t i, n = len(txn_len), m = len(op_key)
        if len(txn_ptr) != n + 1 or len(op_pos) != m or len(op_write) != m:
            raise ValueError("inconsistent workload arrays (use reasearch.native.txn.compile_workload)")
        if txn_ptr[0] != 0 or txn_ptr[n] != m:
            raise ValueError("txn_ptr must run from 0 to the number of ops")
        self.n, self.num_keys, self.num_ops = n, num_keys, m
        self.txn_ptr = <int*>malloc((n + 1) * sizeof(int))
        self.txn_len = <int*>malloc(max(n, 1) * sizeof(int))
        self.ops = <OpRec*>malloc(max(m, 1) * sizeof(OpRec))
        if not (self.txn_ptr and self.txn_len and self.ops):
            raise MemoryError()
        for i in range(n + 1):
            self.txn_ptr[i] = txn_ptr[i]
            if i > 0 and self.txn_ptr[i] < self.txn_ptr[i - 1]:
                raise ValueError("txn_ptr must be non-decreasing")
        for i in range(n):
            self.txn_len[i] = txn_len[i]
        for i in range(m):
            self.ops[i].key = op_key[i]
            self.ops[i].pos = op_pos[i]
            self.ops[i].write = 1 if op_write[i] else 0
            if not 0 <= self.ops[i].key < num_keys:
                raise ValueError(f"op {i}: key id {self.ops[i].key} outside 0..{num_keys - 1}")
            if self.ops[i].pos < 1:
                raise ValueError(f"op {i}: positions are 1-based")
        self.scratch = TxnState.__new__(TxnState, num_keys, self)

    def __dealloc__(self):
        free(self.txn_ptr)
        free(self.txn_len)
        free(self.ops)

    @property
    def num_keys(self):
        """Number of distinct keys."""
        return self.num_keys

    cdef inline i64 _start(self, TxnState st, Py_ssize_t t) noexcept:
        """Earliest start of transaction ``t`` after the prefix ``st``."""
        cdef i64 start = 1, bound
        cdef int o
        cdef OpRec* op
        cdef KeyRec* key
        for o in range(self.txn_ptr[t], self.txn_ptr[t + 1]):
            op = &self.ops[o]
            key = &st.keys[op.key]
            if key.last < 0:
                continue
            if op.write or key.last_write:
                bound = key.last + 1
            else:
                bound = key.write + 1  # a read behind a read: after the latest write (or 0 if none)
            bound = bound - op.pos + 1
            if bound > start:
                start = bound
        return start

    cdef inline void _place(self, TxnState st, Py_ssize_t t, i64 start) noexcept:
        """Records the locks of transaction ``t`` started at ``start``."""
        cdef i64 when, end
        cdef int o
        cdef OpRec* op
        cdef KeyRec* key
        for o in range(self.txn_ptr[t], self.txn_ptr[t + 1]):
            op = &self.ops[o]
            key = &st.keys[op.key]
            when = start + op.pos - 1
            if when >= key.last:  # a lock at the current latest time goes last in order
                key.last = when
                key.last_write = op.write
            if op.write and when > key.write:
                key.write = when
        end = start + self.txn_len[t] - 1
        if end > st._makespan:
            st._makespan = end

    cdef void _reset(self, TxnState st) noexcept:
        cdef Py_ssize_t k
        for k in range(self.num_keys):
            st.keys[k].last = -1
            st.keys[k].write = -1
            st.keys[k].last_write = 0
        st._makespan = 0
        st.length = 0

    cdef TxnState _check_state(self, object state):
        if type(state) is not TxnState or (<TxnState>state).owner is not self:
            raise TypeError("state must come from this workload's new_state()")
        return <TxnState>state

    def get_opt_seq_cost(self, seq):
        """Makespan of a schedule or a prefix of one.

        Args:
            seq: transaction indices in schedule order (list, tuple, range, integer NumPy array, ...);
                repeated indices are simulated as given, negative ones count from the end.

        Returns:
            The makespan under the published cost model (0 for an empty sequence).
        """
        cdef TxnState st
        cdef bint reentered = self.busy
        if reentered:
            st = TxnState.__new__(TxnState, self.num_keys, self)
        else:
            st = self.scratch
            self._reset(st)
            self.busy = True
        try:
            self._run(st, seq)
        finally:
            if not reentered:
                self.busy = False
        return st._makespan

    cdef int _run(self, TxnState st, object seq) except -1:
        """Places every transaction of ``seq`` on ``st``."""
        cdef Py_ssize_t i, m, t
        cdef const long long[::1] arr
        if type(seq) is list:
            m = PyList_GET_SIZE(seq)
            for i in range(m):
                t = _as_index(<object>PyList_GET_ITEM(seq, i), self.n)
                self._place(st, t, self._start(st, t))
        elif isinstance(seq, np.ndarray) and seq.ndim == 1 and seq.dtype.kind in "iu":
            arr = np.ascontiguousarray(seq, dtype=np.int64)
            for i in range(arr.shape[0]):
                t = arr[i]
                if t < 0:
                    t += self.n
                if t < 0 or t >= self.n:
                    raise IndexError(f"transaction index {arr[i]} out of range for a workload of {self.n} transactions")
                self._place(st, t, self._start(st, t))
        else:
            for x in seq:
                t = _as_index(x, self.n)
                self._place(st, t, self._start(st, t))
        return 0

    def new_state(self):
        """The empty prefix of this workload (a :class:`TxnState`)."""
        return TxnState.__new__(TxnState, self.num_keys, self)

    def peek(self, state, txn):
        """Makespan of ``state``'s prefix extended by ``txn``; ``state`` is left unchanged."""
        cdef TxnState st = self._check_state(state)
        cdef Py_ssize_t t = _as_index(txn, self.n)
        cdef i64 end = self._start(st, t) + self.txn_len[t] - 1
        return end if end > st._makespan else st._makespan

    def extend(self, state, txn):
        """Appends ``txn`` to ``state``'s prefix; returns the new makespan."""
        cdef TxnState st = self._check_state(state)
        cdef Py_ssize_t t = _as_index(txn, self.n)
        self._place(st, t, self._start(st, t))
        st._push(<int>t)
        return st._makespan

    def peek_all(self, state):
        """``peek(state, t)`` for every transaction ``t`` (index order), as a list."""
        cdef TxnState st = self._check_state(state)
        cdef Py_ssize_t t
        cdef i64 end
        out = [0] * self.n
        for t in range(self.n):
            end = self._start(st, t) + self.txn_len[t] - 1
            out[t] = end if end > st._makespan else st._makespan
        return out
