/* First smallest / first largest of a short float row, for the EPLB kernels (_eplb.pyx).
 *
 * The greedy steps ask, per item, for the first lightest pack (8 of them here) and, per extra
 * replica, for the first expert with the largest load per replica (64 here). As a scalar loop of
 * compares each answer costs a branch that mispredicts whenever the best changes; here the extreme is
 * found with SSE min/max (no branches) and its first position with one compare + movemask per 4
 * values. Same answer as the loop `if (w[i] < w[best]) best = i` (resp. `>`): the values are never
 * NaN (the callers' loads are checked finite; full packs are +inf), and for -0.0 and 0.0, which
 * compare equal, both give the first of them.
 *
 * The descending sort (libstdc++'s std::sort, see _eplb.pyx) gets two pieces here, both giving
 * exactly the order the plain loops give, ties included:
 * - eplb_partition: the unguarded Hoare partition. Its scans stop at the items that are not on
 *   their side of the pivot; which ones those are depends only on the items as they were when the
 *   partition began (a swap only touches the two positions the scans just stopped at). So the stops
 *   are read off two bit masks made in one pass (SSE compares), and the k-th swap pairs the k-th
 *   stop from the left with the k-th from the right until they cross: no branch per item.
 * - eplb_sort_small: the final insertion sort of each run of at most 16 items the partitions leave.
 *   Insertion sort is stable, and no item leaves its run (every item of an earlier run is >= every
 *   item of a later one, and an item only moves past strictly smaller ones), so each run is given
 *   its stable order directly: an item's place is the number of items greater than it plus the
 *   number of equal ones before it, counted for 4 items per SSE compare.
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
    /* Two accumulators halve the chain of dependent min/max ops (the extreme does not depend on the
     * order it is taken in: only -0.0 and 0.0 may swap, and eplb_first_equal treats them as equal). */
    __m128 acc = _mm_loadu_ps(w), acc2 = acc;
    for (; i + 8 <= n; i += 8) {
        acc = eplb_pick(acc, _mm_loadu_ps(w + i), largest);
        acc2 = eplb_pick(acc2, _mm_loadu_ps(w + i + 4), largest);
    }
    for (; i + 4 <= n; i += 4)
        acc = eplb_pick(acc, _mm_loadu_ps(w + i), largest);
    m = eplb_horizontal(eplb_pick(acc, acc2, largest), largest);
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
 * choices (see the top of this file); the new total is computed as there, in float32.
 * Each item waits for the one before it (~30 cycles here), so eplb_greedy8x2 runs two rows' loops
 * side by side: the CPU overlaps their two independent chains (232 rows of 72 items: 175 -> 96 us). */
#define EPLB_GREEDY_SIMD 1
typedef struct {
    __m128 lo, hi;  /* the totals of packs 0-3 and 4-7 */
    int64_t cnt[8];  /* items in each pack */
} eplb_packs8;

static inline void eplb_packs8_init(eplb_packs8 *s, Py_ssize_t num_packs) {
    float init[8];
    Py_ssize_t p;
    for (p = 0; p < 8; p++) {
        init[p] = p < num_packs ? 0.0f : INFINITY;
        s->cnt[p] = 0;
    }
    s->lo = _mm_loadu_ps(init);
    s->hi = _mm_loadu_ps(init + 4);
}

/* Places `item` (weight `w`, its sort key) into the first lightest open pack. */
static inline void eplb_packs8_place(eplb_packs8 *s, int item, float w, Py_ssize_t per, int64_t *pack, int64_t *rank) {
    const __m128i idx_lo = _mm_setr_epi32(0, 1, 2, 3), idx_hi = _mm_setr_epi32(4, 5, 6, 7);
    float m = eplb_horizontal(_mm_min_ps(s->lo, s->hi), 0);
    __m128 mv = _mm_set1_ps(m);
    int mask = _mm_movemask_ps(_mm_cmpeq_ps(s->lo, mv)) | (_mm_movemask_ps(_mm_cmpeq_ps(s->hi, mv)) << 4);
    int best = __builtin_ctz((unsigned)mask);
    pack[item] = best;
    rank[item] = s->cnt[best];
    s->cnt[best] += 1;
    __m128 nw = _mm_set1_ps(s->cnt[best] == per ? INFINITY : (float)(m + w));
    __m128i bv = _mm_set1_epi32(best);
    __m128 sel_lo = _mm_castsi128_ps(_mm_cmpeq_epi32(idx_lo, bv));
    __m128 sel_hi = _mm_castsi128_ps(_mm_cmpeq_epi32(idx_hi, bv));
    s->lo = _mm_or_ps(_mm_andnot_ps(sel_lo, s->lo), _mm_and_ps(sel_lo, nw));
    s->hi = _mm_or_ps(_mm_andnot_ps(sel_hi, s->hi), _mm_and_ps(sel_hi, nw));
}

static inline void eplb_greedy8(const eplb_pair *order, Py_ssize_t n, Py_ssize_t num_packs, Py_ssize_t per,
                                int64_t *pack, int64_t *rank) {
    eplb_packs8 s;
    Py_ssize_t i;
    eplb_packs8_init(&s, num_packs);
    for (i = 0; i < n; i++)
        eplb_packs8_place(&s, order[i].v, order[i].k, per, pack, rank);
}

/* eplb_greedy8 on two rows of the same shape (a and b), side by side. */
static inline void eplb_greedy8x2(const eplb_pair *order_a, const eplb_pair *order_b, Py_ssize_t n,
                                  Py_ssize_t num_packs, Py_ssize_t per, int64_t *pack_a, int64_t *rank_a,
                                  int64_t *pack_b, int64_t *rank_b) {
    eplb_packs8 a, b;
    Py_ssize_t i;
    eplb_packs8_init(&a, num_packs);
    eplb_packs8_init(&b, num_packs);
    for (i = 0; i < n; i++) {
        eplb_packs8_place(&a, order_a[i].v, order_a[i].k, per, pack_a, rank_a);
        eplb_packs8_place(&b, order_b[i].v, order_b[i].k, per, pack_b, rank_b);
    }
}

/* Stable descending order of a[0..m), m <= 16 (see the top of this file). */
static inline void eplb_sort_small(eplb_pair *a, Py_ssize_t m) {
    float key[16] = {0};
    eplb_pair item[16];
    int place[16];
    Py_ssize_t i, j;
    for (i = 0; i < m; i++) {
        key[i] = a[i].k;
        item[i] = a[i];
    }
    const __m128 k0 = _mm_loadu_ps(key), k1 = _mm_loadu_ps(key + 4), k2 = _mm_loadu_ps(key + 8),
                 k3 = _mm_loadu_ps(key + 12);
    const __m128i i0 = _mm_setr_epi32(0, 1, 2, 3), i1 = _mm_setr_epi32(4, 5, 6, 7),
                  i2 = _mm_setr_epi32(8, 9, 10, 11), i3 = _mm_setr_epi32(12, 13, 14, 15);
    __m128i c0 = _mm_setzero_si128(), c1 = c0, c2 = c0, c3 = c0;
    for (j = 0; j < m; j++) { /* item j counts for each item i it is greater than, or equal to with j < i */
        const __m128 kj = _mm_set1_ps(key[j]);
        const __m128i jv = _mm_set1_epi32((int)j);
#define EPLB_COUNT(c, k, idx)                                                                              \
    c = _mm_sub_epi32(c, _mm_or_si128(_mm_castps_si128(_mm_cmpgt_ps(kj, k)),                              \
                                      _mm_and_si128(_mm_castps_si128(_mm_cmpeq_ps(kj, k)), _mm_cmpgt_epi32(idx, jv))))
        EPLB_COUNT(c0, k0, i0);
        EPLB_COUNT(c1, k1, i1);
        EPLB_COUNT(c2, k2, i2);
        EPLB_COUNT(c3, k3, i3);
#undef EPLB_COUNT
    }
    _mm_storeu_si128((__m128i *)place, c0);
    _mm_storeu_si128((__m128i *)(place + 4), c1);
    _mm_storeu_si128((__m128i *)(place + 8), c2);
    _mm_storeu_si128((__m128i *)(place + 12), c3);
    for (i = 0; i < m; i++)
        a[place[i]] = item[i];
}

#else /* no SSE2: the plain loops */

#define EPLB_GREEDY_SIMD 0
static inline void eplb_greedy8(const eplb_pair *order, Py_ssize_t n, Py_ssize_t num_packs, Py_ssize_t per,
                                int64_t *pack, int64_t *rank) {
    (void)order; (void)n; (void)num_packs; (void)per; (void)pack; (void)rank; /* never called */
}

static inline void eplb_greedy8x2(const eplb_pair *order_a, const eplb_pair *order_b, Py_ssize_t n,
                                  Py_ssize_t num_packs, Py_ssize_t per, int64_t *pack_a, int64_t *rank_a,
                                  int64_t *pack_b, int64_t *rank_b) {
    (void)order_a; (void)order_b; (void)n; (void)num_packs; (void)per; /* never called */
    (void)pack_a; (void)rank_a; (void)pack_b; (void)rank_b;
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


/* Stable descending order of a[0..m), m <= 16: the insertion sort itself. */
static inline void eplb_sort_small(eplb_pair *a, Py_ssize_t m) {
    Py_ssize_t i, j;
    for (i = 1; i < m; i++) {
        eplb_pair v = a[i];
        for (j = i; j > 0 && v.k > a[j - 1].k; j--)
            a[j] = a[j - 1];
        a[j] = v;
    }
}

#endif

/* Words of one of the two bit masks eplb_partition needs for n items (the caller provides 2x). */
#define EPLB_MASK_WORDS(n) (((n) + 63) >> 6)

/* first set bit at position >= p in w[0..words), or `none` */
static inline Py_ssize_t eplb_next_bit(const uint64_t *w, Py_ssize_t words, Py_ssize_t p, Py_ssize_t none) {
    Py_ssize_t wi = p >> 6;
    uint64_t x;
    if (wi >= words)
        return none;
    x = w[wi] & (~(uint64_t)0 << (p & 63));
    while (!x) {
        if (++wi >= words)
            return none;
        x = w[wi];
    }
    return (wi << 6) + __builtin_ctzll(x);
}

/* last set bit at position <= p, or -1 */
static inline Py_ssize_t eplb_prev_bit(const uint64_t *w, Py_ssize_t p) {
    Py_ssize_t wi;
    uint64_t x;
    if (p < 0)
        return -1;
    wi = p >> 6;
    x = w[wi] & (~(uint64_t)0 >> (63 - (p & 63)));
    while (!x) {
        if (--wi < 0)
            return -1;
        x = w[wi];
    }
    return (wi << 6) + 63 - __builtin_clzll(x);
}

/* libstdc++'s __unguarded_partition(first, last, pivot = first - 1) for the descending order: returns
 * the cut. `masks` holds 2 * EPLB_MASK_WORDS(last - first) words. The left scan stops at items that
 * are not > the pivot (mask `lo`), the right scan at items the pivot is not > (mask `hi`). */
static inline Py_ssize_t eplb_partition(eplb_pair *a, Py_ssize_t first, Py_ssize_t last, uint64_t *masks) {
    eplb_pair *b = a + first, t;
    const float pk = a[first - 1].k;
    const Py_ssize_t m = last - first, words = EPLB_MASK_WORDS(m);
    uint64_t *lo = masks, *hi = masks + words;
    Py_ssize_t i, f, l, lprev;
    for (i = 0; i < words; i++)
        lo[i] = hi[i] = 0;
    i = 0;
#if defined(__SSE2__)
    const __m128 pv = _mm_set1_ps(pk);
    for (; i + 4 <= m; i += 4) {
        __m128 k = _mm_shuffle_ps(_mm_loadu_ps(&b[i].k), _mm_loadu_ps(&b[i + 2].k), _MM_SHUFFLE(2, 0, 2, 0));
        uint64_t gt = (uint64_t)_mm_movemask_ps(_mm_cmpgt_ps(k, pv)), lt = (uint64_t)_mm_movemask_ps(_mm_cmplt_ps(k, pv));
        lo[i >> 6] |= (~gt & 15u) << (i & 63);
        hi[i >> 6] |= (~lt & 15u) << (i & 63);
    }
#endif
    for (; i < m; i++) {
        lo[i >> 6] |= (uint64_t)!(b[i].k > pk) << (i & 63);
        hi[i >> 6] |= (uint64_t)!(pk > b[i].k) << (i & 63);
    }
    /* Where the k-th stops have not crossed (f < l), both scans stopped there and the items swap.
     * Once they cross, the left scan has ended at f or at the previous right stop, whichever comes
     * first (that position holds a left-stop item since its swap); the median of three moved to the
     * pivot guarantees a left stop in the range, the pivot itself ends the right scan (-1). */
    f = eplb_next_bit(lo, words, 0, m);
    l = eplb_prev_bit(hi, m - 1);
    lprev = m;
    while (f < l) {
        t = b[f];
        b[f] = b[l];
        b[l] = t;
        lprev = l;
        f = eplb_next_bit(lo, words, f + 1, m);
        l = eplb_prev_bit(hi, l - 1);
    }
    return first + (f < lprev ? f : lprev);
}

#endif
