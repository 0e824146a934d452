/* First smallest / first largest of a short float row, for the EPLB kernels (_eplb.pyx).
 *
 * The greedy steps ask, per item, for the first lightest pack (8 of them here) and, per extra
 * replica, for the first expert with the largest load per replica (64 here). As a scalar loop of
 * compares each answer costs a branch that mispredicts whenever the best changes; here the extreme is
 * found with SSE min/max (no branches) and its first position with one compare + movemask per 4
 * values. Same answer as the loop `if (w[i] < w[best]) best = i` (resp. `>`): the values are never
 * NaN (the callers' loads are checked finite; full packs are +inf), and for -0.0 and 0.0, which
 * compare equal, both give the first of them.
 */
#ifndef REASEARCH_EPLB_SIMD_H
#define REASEARCH_EPLB_SIMD_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* An item's key and index, kept together (one 8-byte move per swap in the sort). */
typedef struct {
    float k;
    int v;
} eplb_pair;

#if defined(__SSE2__)
#include <emmintrin.h>

/* min (largest = 0) or max of two vectors, lane by lane; `largest` is a constant where inlined. */
static inline __m128 eplb_pick(__m128 a, __m128 b, int largest) {
    return largest ? _mm_max_ps(a, b) : _mm_min_ps(a, b);
}

static inline float eplb_horizontal(__m128 v, int largest) {
    v = eplb_pick(v, _mm_shuffle_ps(v, v, _MM_SHUFFLE(2, 3, 0, 1)), largest);
    v = eplb_pick(v, _mm_shuffle_ps(v, v, _MM_SHUFFLE(1, 0, 3, 2)), largest);
    return _mm_cvtss_f32(v);
}

/* The first i in [0, n) with w[i] == m (m is one of them). */
static inline Py_ssize_t eplb_first_equal(const float *w, Py_ssize_t n, float m) {
    Py_ssize_t i = 0;
    __m128 mv = _mm_set1_ps(m);
    for (; i + 4 <= n; i += 4) {
        int mask = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(w + i), mv));
        if (mask)
            return i + __builtin_ctz((unsigned)mask);
    }
    for (; i < n; i++)
        if (w[i] == m)
            return i;
    return 0; /* not reached: m is a value of w */
}

/* The first smallest (largest = 0) or first largest value's index. */
static inline Py_ssize_t eplb_arg_extreme(const float *w, Py_ssize_t n, int largest) {
    Py_ssize_t i = 4;
    float m;
    if (n < 4) {
        Py_ssize_t best = 0;
        for (i = 1; i < n; i++)
            if (largest ? w[i] > w[best] : w[i] < w[best])
                best = i;
        return best;
    }
    __m128 acc = _mm_loadu_ps(w);
    for (; i + 4 <= n; i += 4)
        acc = eplb_pick(acc, _mm_loadu_ps(w + i), largest);
    m = eplb_horizontal(acc, largest);
    for (; i < n; i++)
        if (largest ? w[i] > m : w[i] < m)
            m = w[i];
    return eplb_first_equal(w, n, m);
}

static inline Py_ssize_t eplb_argmin_first(const float *w, Py_ssize_t n) { return eplb_arg_extreme(w, n, 0); }

static inline Py_ssize_t eplb_argmax_first(const float *w, Py_ssize_t n) { return eplb_arg_extreme(w, n, 1); }


/* The greedy packing's assignment loop for at most 8 packs: items in the order given, each into
 * the first lightest pack that still has room; a pack's total becomes +inf once it holds `per`.
 * The totals stay in two registers (padding lanes hold +inf and are never chosen: an open pack is
 * always finite), so no item waits for the store of the previous one. Exactly the scalar loop's
 * choices (see the top of this file); the new total is computed as there, in float32. */
#define EPLB_GREEDY_SIMD 1
static inline void eplb_greedy8(const eplb_pair *order, Py_ssize_t n, Py_ssize_t num_packs, Py_ssize_t per,
                                const float *vals, int64_t *pack, int64_t *rank) {
    float init[8];
    int64_t cnt[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    Py_ssize_t i, p;
    for (p = 0; p < 8; p++)
        init[p] = p < num_packs ? 0.0f : INFINITY;
    __m128 lo = _mm_loadu_ps(init), hi = _mm_loadu_ps(init + 4);
    const __m128i idx_lo = _mm_setr_epi32(0, 1, 2, 3), idx_hi = _mm_setr_epi32(4, 5, 6, 7);
    for (i = 0; i < n; i++) {
        int item = order[i].v;
        float m = eplb_horizontal(_mm_min_ps(lo, hi), 0);
        __m128 mv = _mm_set1_ps(m);
        int mask = _mm_movemask_ps(_mm_cmpeq_ps(lo, mv)) | (_mm_movemask_ps(_mm_cmpeq_ps(hi, mv)) << 4);
        int best = __builtin_ctz((unsigned)mask);
        pack[item] = best;
        rank[item] = cnt[best];
        cnt[best] += 1;
        __m128 nw = _mm_set1_ps(cnt[best] == per ? INFINITY : (float)(m + vals[item]));
        __m128i bv = _mm_set1_epi32(best);
        __m128 sel_lo = _mm_castsi128_ps(_mm_cmpeq_epi32(idx_lo, bv));
        __m128 sel_hi = _mm_castsi128_ps(_mm_cmpeq_epi32(idx_hi, bv));
        lo = _mm_or_ps(_mm_andnot_ps(sel_lo, lo), _mm_and_ps(sel_lo, nw));
        hi = _mm_or_ps(_mm_andnot_ps(sel_hi, hi), _mm_and_ps(sel_hi, nw));
    }
}

#else /* no SSE2: the plain loops */

#define EPLB_GREEDY_SIMD 0
static inline void eplb_greedy8(const eplb_pair *order, Py_ssize_t n, Py_ssize_t num_packs, Py_ssize_t per,
                                const float *vals, int64_t *pack, int64_t *rank) {
    (void)order; (void)n; (void)num_packs; (void)per; (void)vals; (void)pack; (void)rank; /* never called */
}

static inline Py_ssize_t eplb_argmin_first(const float *w, Py_ssize_t n) {
    Py_ssize_t best = 0, i;
    for (i = 1; i < n; i++)
        if (w[i] < w[best])
            best = i;
    return best;
}

static inline Py_ssize_t eplb_argmax_first(const float *w, Py_ssize_t n) {
    Py_ssize_t best = 0, i;
    for (i = 1; i < n; i++)
        if (w[i] > w[best])
            best = i;
    return best;
}

#endif
#endif
