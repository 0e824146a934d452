# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled EPLB kernels; the readable definitions (and their twins) are in :mod:`reasearch.native.eplb`.

Float32 throughout, like the published PyTorch code (it converts the loads with ``.float()``): every
comparison is made on the same float32 values, so ties break exactly as they do there.

The descending sort reproduces libstdc++'s ``std::sort`` (introsort: median-of-three quicksort down
to runs of 16, heapsort past the depth limit, then one insertion sort), which is what PyTorch's CPU
``sort(descending=True)`` runs. It is *not* stable: among equal loads (replicas of one expert always
are) it decides which replica rank lands on which GPU, i.e. the published ``log2phy``. Its partition
and its final insertion sort run as branch-free equivalents (``include/eplb_simd.h``); the twin tests
and a fuzz test hold them to the plain-Python transcription of the libstdc++ code.
"""

import numpy as np

cimport numpy as cnp
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.math cimport INFINITY
from libc.stdint cimport uint64_t

cnp.import_array()

ctypedef cnp.int64_t i64

cdef extern from "eplb_simd.h" nogil:
    ctypedef struct Pair "eplb_pair":  # (key, index) kept together: one 8-byte move per swap
        float k
        int v
    bint EPLB_GREEDY_SIMD  # eplb_greedy8(x2) are the SSE loops (else they must not be called)
    void eplb_greedy8(const Pair* order, Py_ssize_t n, Py_ssize_t num_packs, Py_ssize_t per, i64* pack, i64* rank)
    void eplb_greedy8x2(const Pair* order_a, const Pair* order_b, Py_ssize_t n, Py_ssize_t num_packs, Py_ssize_t per,
                        i64* pack_a, i64* rank_a, i64* pack_b, i64* rank_b)
    # the first smallest / largest of w[0..n): SSE, no branch per value (see the header)
    Py_ssize_t eplb_argmin_first(const float* w, Py_ssize_t n)
    Py_ssize_t eplb_argmax_first(const float* w, Py_ssize_t n)
    # the sort's partition and its final insertion sort of each short run, without a branch per item
    Py_ssize_t EPLB_MASK_WORDS(Py_ssize_t n)
    Py_ssize_t eplb_partition(Pair* a, Py_ssize_t first, Py_ssize_t last, uint64_t* masks)
    void eplb_sort_small(Pair* a, Py_ssize_t m)

cdef enum:
    _THRESHOLD = 16  # libstdc++ _S_threshold


# ------------------------------------------------------------------------------------------ the sort


cdef inline Py_ssize_t _lg(Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t r = -1
    while n > 0:
        n >>= 1
        r += 1
    return r


cdef void _adjust_heap(Pair* a, Py_ssize_t hole, Py_ssize_t length, Pair val) noexcept nogil:
    cdef Py_ssize_t top = hole
    cdef Py_ssize_t child = hole
    cdef Py_ssize_t parent
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if a[child].k > a[child - 1].k:
            child -= 1
        a[hole] = a[child]
        hole = child
    if (length & 1) == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        a[hole] = a[child - 1]
        hole = child - 1
    parent = (hole - 1) // 2
    while hole > top and a[parent].k > val.k:
        a[hole] = a[parent]
        hole = parent
        parent = (hole - 1) // 2
    a[hole] = val


cdef void _heap_sort(Pair* a, Py_ssize_t length) noexcept nogil:
    cdef Py_ssize_t parent, last
    cdef Pair val
    if length >= 2:
        parent = (length - 2) // 2
        while True:
            _adjust_heap(a, parent, length, a[parent])
            if parent == 0:
                break
            parent -= 1
    last = length
    while last > 1:
        last -= 1
        val = a[last]
        a[last] = a[0]
        _adjust_heap(a, 0, last, val)


cdef inline void _swap(Pair* a, Py_ssize_t i, Py_ssize_t j) noexcept nogil:
    cdef Pair t = a[i]
    a[i] = a[j]
    a[j] = t


cdef void _move_median_to_first(Pair* a, Py_ssize_t res, Py_ssize_t x, Py_ssize_t y, Py_ssize_t z) noexcept nogil:
    if a[x].k > a[y].k:
        if a[y].k > a[z].k:
            _swap(a, res, y)
        elif a[x].k > a[z].k:
            _swap(a, res, z)
        else:
            _swap(a, res, x)
    elif a[x].k > a[z].k:
        _swap(a, res, x)
    elif a[y].k > a[z].k:
        _swap(a, res, z)
    else:
        _swap(a, res, y)


cdef void _introsort_loop(Pair* a, Py_ssize_t first, Py_ssize_t last, Py_ssize_t depth,
                          uint64_t* masks) noexcept nogil:
    cdef Py_ssize_t cut
    while last - first > _THRESHOLD:
        if depth == 0:
            _heap_sort(a + first, last - first)  # sorted: the final insertion sort leaves it as it is
            return
        depth -= 1
        _move_median_to_first(a, first, first + 1, first + (last - first) // 2, last - 1)
        cut = eplb_partition(a, first + 1, last, masks)
        _introsort_loop(a, cut, last, depth, masks)
        last = cut
    # A run of <= 16 that no later step touches but the final insertion sort, which keeps every
    # item inside its run (include/eplb_simd.h): that sort is done here, run by run.
    eplb_sort_small(a + first, last - first)


cdef void _sort_desc(Pair* a, Py_ssize_t n, uint64_t* masks) noexcept nogil:
    """Sorts pairs by key, descending, exactly as libstdc++'s std::sort orders them.

    ``masks``: scratch of 2 * EPLB_MASK_WORDS(n) words (see :func:`_sort_buffer`)."""
    if n <= 1:
        return
    if n <= _THRESHOLD:
        eplb_sort_small(a, n)  # std::sort's insertion sort alone
        return
    _introsort_loop(a, 0, n, 2 * _lg(n), masks)


cdef Pair* _sort_buffer(Py_ssize_t cap) except NULL:
    """Room to sort ``cap`` items: ``cap`` pairs, then the partition's masks (:func:`_masks_of`)."""
    cdef Pair* buf = <Pair*>PyMem_Malloc(max(cap, 1) * sizeof(Pair) + 2 * EPLB_MASK_WORDS(cap) * sizeof(uint64_t))
    if buf == NULL:
        raise MemoryError()
    return buf


cdef inline uint64_t* _masks_of(Pair* buf, Py_ssize_t cap) noexcept nogil:
    return <uint64_t*>(buf + max(cap, 1))


def argsort_desc_rows(const float[:, ::1] keys):
    """Per row, the indices that sort ``keys`` descending in PyTorch's CPU tie order."""
    cdef Py_ssize_t rows = keys.shape[0], n = keys.shape[1], r, i
    if n >= 2**31:
        raise ValueError("rows longer than 2**31 - 1 items are not supported")
    out = np.empty((rows, n), dtype=np.int64)
    cdef i64[:, ::1] o = out
    cdef Pair* buf = _sort_buffer(n)
    try:
        with nogil:
            for r in range(rows):
                for i in range(n):
                    buf[i].k = keys[r, i]
                    buf[i].v = <int>i
                _sort_desc(buf, n, _masks_of(buf, n))
                for i in range(n):
                    o[r, i] = buf[i].v
    finally:
        PyMem_Free(buf)
    return out


# --------------------------------------------------------------------------------- the algorithm

cdef inline void _sorted_items(const float* vals, Py_ssize_t n, Pair* buf, uint64_t* masks) noexcept nogil:
    """``buf[0..n)``: the items ``(vals[i], i)`` in descending order (PyTorch's tie order)."""
    cdef Py_ssize_t i
    for i in range(n):
        buf[i].k = vals[i]
        buf[i].v = <int>i
    _sort_desc(buf, n, masks)


cdef inline bint _greedy_in_registers(Py_ssize_t n, Py_ssize_t num_packs) noexcept nogil:
    """Whether packing ``n`` items into ``num_packs`` runs ``eplb_greedy8`` (the SSE loop; else the
    scalar one, or none at all with one item per pack)."""
    return EPLB_GREEDY_SIMD and num_packs <= 8 and n // num_packs > 1


cdef void _balanced_packing(const float* vals, Py_ssize_t n, Py_ssize_t num_packs, i64* pack, i64* rank,
                            Pair* buf, uint64_t* masks, float* pack_w, i64* pack_n) noexcept nogil:
    """Greedy: heaviest item first, into the lightest pack that still has room (first on ties).

    Up to 8 packs the assignment loop keeps the totals in SSE registers (``eplb_greedy8``); more
    packs find each lightest one with ``eplb_argmin_first``. Both make the scalar loop's choices
    (``include/eplb_simd.h``; the twin tests compare them on ties and signed zeros)."""
    cdef Py_ssize_t per = n // num_packs
    cdef Py_ssize_t i, p, item, best
    cdef float bw
    if per == 1:
        for i in range(n):
            pack[i] = i
            rank[i] = 0
        return
    _sorted_items(vals, n, buf, masks)
    if _greedy_in_registers(n, num_packs):
        eplb_greedy8(buf, n, num_packs, per, pack, rank)
        return
    for p in range(num_packs):
        pack_w[p] = 0.0
        pack_n[p] = 0
    for i in range(n):
        item = buf[i].v
        # a full pack weighs +inf; open packs are finite, so the first lightest is an open one
        best = eplb_argmin_first(pack_w, num_packs)
        bw = pack_w[best]
        pack[item] = best
        rank[item] = pack_n[best]
        pack_n[best] += 1
        pack_w[best] = INFINITY if pack_n[best] == per else <float>(bw + vals[item])


cdef void _rebalance_layers(const float[:, ::1] weight, Py_ssize_t G, Py_ssize_t N, Py_ssize_t R, Py_ssize_t gs,
                            Py_ssize_t gpn, Py_ssize_t spg, Py_ssize_t epn, Py_ssize_t rpn,
                            Py_ssize_t gpus_per_node, i64[:, ::1] phy2log, i64[:, ::1] phyrank,
                            i64[:, ::1] logcnt, float[::1] gload, i64[::1] gpack, i64[::1] grank,
                            i64[::1] mlog2log, float[::1] vals, float[::1] ratio, i64[::1] cnt, i64[::1] p2m,
                            i64[::1] prk, float[::1] slot_w, i64[::1] ppack, i64[::1] prank, Pair* buf,
                            uint64_t* masks, float[::1] pack_w, i64[::1] pack_n) noexcept nogil:
    """The per-layer loop of :func:`rebalance_kernel` (scratch passed in, nothing allocated)."""
    cdef Py_ssize_t L = weight.shape[0], E = weight.shape[1]
    cdef Py_ssize_t l, g, e, n, j, i, best, s, m
    cdef double acc
    for l in range(L):
        # Step 1: groups to nodes, by group load (summed in float64, then rounded to float32).
        for g in range(G):
            acc = 0.0
            for e in range(g * gs, (g + 1) * gs):
                acc += weight[l, e]
            gload[g] = <float>acc
        _balanced_packing(&gload[0], G, N, &gpack[0], &grank[0], buf, masks, &pack_w[0], &pack_n[0])
        for e in range(E):
            g = e // gs
            mlog2log[(gpack[g] * gpn + grank[g]) * gs + e % gs] = e
        for n in range(N):
            # Step 2: replicate within the node: each extra slot goes to the max load per replica.
            for j in range(epn):
                vals[j] = weight[l, mlog2log[n * epn + j]]
                cnt[j] = 1
                ratio[j] = vals[j]
                p2m[j] = j
                prk[j] = 0
            for i in range(epn, rpn):
                best = eplb_argmax_first(&ratio[0], epn)
                p2m[i] = best
                prk[i] = cnt[best]
                cnt[best] += 1
                ratio[best] = vals[best] / <float>cnt[best]
            # Step 3: the node's replicas to its GPUs, by load per replica.
            for i in range(rpn):
                m = p2m[i]
                slot_w[i] = vals[m] / <float>cnt[m]
            _balanced_packing(&slot_w[0], rpn, gpus_per_node, &ppack[0], &prank[0], buf, masks, &pack_w[0],
                              &pack_n[0])
            for i in range(rpn):
                s = n * rpn + ppack[i] * spg + prank[i]
                phy2log[l, s] = mlog2log[n * epn + p2m[i]]
                phyrank[l, s] = prk[i]
            for j in range(epn):
                logcnt[l, mlog2log[n * epn + j]] = cnt[j]


def rebalance_kernel(const float[:, ::1] weight, Py_ssize_t num_replicas, Py_ssize_t num_groups,
                     Py_ssize_t num_nodes, Py_ssize_t num_gpus):
    """The hierarchical policy on float32 loads; the caller validated the configuration.

    Returns ``(phy2log, phyrank, logcnt)``: int64 arrays ``[L, R]``, ``[L, R]``, ``[L, E]``.
    """
    cdef Py_ssize_t L = weight.shape[0], E = weight.shape[1]
    cdef Py_ssize_t G = num_groups, N = num_nodes, R = num_replicas
    cdef Py_ssize_t gs = E // G, gpn = G // N, spg = R // num_gpus
    cdef Py_ssize_t epn = E // N, rpn = R // N, gpus_per_node = num_gpus // N
    cdef Py_ssize_t cap = max(max(G, R), E)

    phy2log_a = np.empty((L, R), dtype=np.int64)
    phyrank_a = np.empty((L, R), dtype=np.int64)
    logcnt_a = np.empty((L, E), dtype=np.int64)
    cdef i64[:, ::1] phy2log = phy2log_a
    cdef i64[:, ::1] phyrank = phyrank_a
    cdef i64[:, ::1] logcnt = logcnt_a

    # scratch, sized once
    cdef float[::1] gload = np.empty(cap, dtype=np.float32)
    cdef i64[::1] gpack = np.empty(cap, dtype=np.int64)
    cdef i64[::1] grank = np.empty(cap, dtype=np.int64)
    cdef i64[::1] mlog2log = np.empty(E, dtype=np.int64)
    cdef float[::1] vals = np.empty(cap, dtype=np.float32)
    cdef float[::1] ratio = np.empty(cap, dtype=np.float32)
    cdef i64[::1] cnt = np.empty(cap, dtype=np.int64)
    cdef i64[::1] p2m = np.empty(cap, dtype=np.int64)
    cdef i64[::1] prk = np.empty(cap, dtype=np.int64)
    cdef float[::1] slot_w = np.empty(cap, dtype=np.float32)
    cdef i64[::1] ppack = np.empty(cap, dtype=np.int64)
    cdef i64[::1] prank = np.empty(cap, dtype=np.int64)
    cdef float[::1] pack_w = np.empty(cap, dtype=np.float32)
    cdef i64[::1] pack_n = np.empty(cap, dtype=np.int64)
    cdef Pair* buf = _sort_buffer(cap)
    try:
        with nogil:
            _rebalance_layers(weight, G, N, R, gs, gpn, spg, epn, rpn, gpus_per_node, phy2log, phyrank, logcnt,
                              gload, gpack, grank, mlog2log, vals, ratio, cnt, p2m, prk, slot_w, ppack,
                              prank, buf, _masks_of(buf, cap), pack_w, pack_n)
    finally:
        PyMem_Free(buf)
    return phy2log_a, phyrank_a, logcnt_a


# ------------------------------------------------------------------- the steps, batched over rows

def balanced_packing_rows(const float[:, ::1] weight, Py_ssize_t num_packs):
    """Per row, the greedy balanced packing of its items into ``num_packs`` equal-size packs.

    Returns ``(pack, rank)``, int64 ``[M, n]``: the pack of each item and its position in the pack.
    """
    cdef Py_ssize_t rows = weight.shape[0], n = weight.shape[1], r
    pack_a = np.empty((rows, n), dtype=np.int64)
    rank_a = np.empty((rows, n), dtype=np.int64)
    cdef i64[:, ::1] pack = pack_a
    cdef i64[:, ::1] rank = rank_a
    cdef Py_ssize_t cap = max(n, num_packs)
    cdef float[::1] pack_w = np.empty(cap, dtype=np.float32)
    cdef i64[::1] pack_n = np.empty(cap, dtype=np.int64)
    if n == 0:
        return pack_a, rank_a
    cdef Pair* buf = _sort_buffer(2 * cap)  # two rows' items (see below), then the masks
    cdef Pair* buf2 = buf + cap
    cdef uint64_t* masks = _masks_of(buf, 2 * cap)
    try:
        with nogil:
            r = 0
            if _greedy_in_registers(n, num_packs):
                # Two rows at a time: their greedy loops run side by side (eplb_greedy8x2).
                while r + 1 < rows:
                    _sorted_items(&weight[r, 0], n, buf, masks)
                    _sorted_items(&weight[r + 1, 0], n, buf2, masks)
                    eplb_greedy8x2(buf, buf2, n, num_packs, n // num_packs, &pack[r, 0], &rank[r, 0],
                                   &pack[r + 1, 0], &rank[r + 1, 0])
                    r += 2
            while r < rows:
                _balanced_packing(&weight[r, 0], n, num_packs, &pack[r, 0], &rank[r, 0], buf, masks,
                                  &pack_w[0], &pack_n[0])
                r += 1
    finally:
        PyMem_Free(buf)
    return pack_a, rank_a


def replicate_rows(const float[:, ::1] weight, Py_ssize_t num_slots):
    """Per row, ``num_slots`` replicas of its ``n`` items: each extra one to the max load per replica.

    Returns ``(slot_item [M, S], slot_rank [M, S], count [M, n])``, int64; slot ``i < n`` is item ``i``.
    """
    cdef Py_ssize_t rows = weight.shape[0], n = weight.shape[1], r, i, j, best
    item_a = np.empty((rows, num_slots), dtype=np.int64)
    srank_a = np.empty((rows, num_slots), dtype=np.int64)
    count_a = np.empty((rows, n), dtype=np.int64)
    cdef i64[:, ::1] item = item_a
    cdef i64[:, ::1] srank = srank_a
    cdef i64[:, ::1] count = count_a
    cdef float[::1] ratio = np.empty(max(n, 1), dtype=np.float32)
    with nogil:
        for r in range(rows):
            for j in range(n):
                item[r, j] = j
                srank[r, j] = 0
                count[r, j] = 1
                ratio[j] = weight[r, j]
            for i in range(n, num_slots):
                best = eplb_argmax_first(&ratio[0], n)
                item[r, i] = best
                srank[r, i] = count[r, best]
                count[r, best] += 1
                ratio[best] = weight[r, best] / <float>count[r, best]
    return item_a, srank_a, count_a


def log2phy_rows(const i64[:, ::1] phy2log, const i64[:, ::1] phyrank, const i64[:, ::1] logcnt):
    """``log2phy[l, e, k]``: the slot of replica ``k`` of expert ``e`` in layer ``l``; -1 pads to the max count."""
    cdef Py_ssize_t L = phy2log.shape[0], R = phy2log.shape[1], E = logcnt.shape[1], l, e, s
    cdef i64 maxcnt = 0
    for l in range(L):
        for e in range(E):
            if logcnt[l, e] > maxcnt:
                maxcnt = logcnt[l, e]
    out_a = np.empty((L, E, maxcnt), dtype=np.int64)
    cdef i64[:, :, ::1] out = out_a
    with nogil:
        for l in range(L):
            for e in range(E):
                for s in range(maxcnt):
                    out[l, e, s] = -1
            for s in range(R):
                out[l, phy2log[l, s], phyrank[l, s]] = s
    return out_a
