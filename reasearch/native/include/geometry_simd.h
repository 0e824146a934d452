/* The smallest triangle area of a point set with AVX2, for _geometry.pyx's min_triangle_area.
 *
 * Per triangle the same IEEE operations in the same order as the plain-Python twin
 * (|x1 (y2 - y3) + x2 (y3 - y1) + x3 (y1 - y2)| * 0.5, with y1 - y2 computed once per pair, as the
 * Cython loop does), four triangles per instruction; the module is compiled with
 * -ffp-contract=off and this function enables AVX2 only (no FMA), so nothing is fused and each
 * area is bit-identical to the twin's. The minimum keeps the twin's rule that a NaN area never
 * wins: _mm256_min_pd(a, m) is `a < m ? a : m` lane by lane, and the accumulator starts from the
 * best so far, which is never NaN.
 *
 * geom_have_avx2() says whether this CPU runs it; elsewhere the Cython loop runs.
 */
#ifndef REASEARCH_GEOMETRY_SIMD_H
#define REASEARCH_GEOMETRY_SIMD_H

#include <math.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

static int geom_have_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

__attribute__((target("avx2"))) static double geom_min_area_avx2(const double *xs, const double *ys, Py_ssize_t n) {
    double best = INFINITY;
    const __m256d sign = _mm256_set1_pd(-0.0), half = _mm256_set1_pd(0.5);
    Py_ssize_t i, j, k;
    for (i = 0; i < n; i++) {
        const double x1 = xs[i], y1 = ys[i];
        const __m256d vx1 = _mm256_set1_pd(x1), vy1 = _mm256_set1_pd(y1);
        for (j = i + 1; j < n; j++) {
            const double x2 = xs[j], y2 = ys[j], d12 = y1 - y2;
            const __m256d vx2 = _mm256_set1_pd(x2), vy2 = _mm256_set1_pd(y2), vd = _mm256_set1_pd(d12);
            __m256d acc = _mm256_set1_pd(best);
            for (k = j + 1; k + 4 <= n; k += 4) {
                const __m256d yk = _mm256_loadu_pd(ys + k), xk = _mm256_loadu_pd(xs + k);
                const __m256d s = _mm256_add_pd(
                    _mm256_add_pd(_mm256_mul_pd(vx1, _mm256_sub_pd(vy2, yk)), _mm256_mul_pd(vx2, _mm256_sub_pd(yk, vy1))),
                    _mm256_mul_pd(xk, vd));
                acc = _mm256_min_pd(_mm256_mul_pd(_mm256_andnot_pd(sign, s), half), acc);
            }
            {
                __m128d m = _mm_min_pd(_mm256_castpd256_pd128(acc), _mm256_extractf128_pd(acc, 1));
                m = _mm_min_sd(m, _mm_unpackhi_pd(m, m));
                best = _mm_cvtsd_f64(m);
            }
            for (; k < n; k++) {
                const double a = fabs(x1 * (y2 - ys[k]) + x2 * (ys[k] - y1) + xs[k] * d12) * 0.5;
                if (a < best)
                    best = a;
            }
        }
    }
    return best;
}

#else

static int geom_have_avx2(void) { return 0; }

static double geom_min_area_avx2(const double *xs, const double *ys, Py_ssize_t n) {
    (void)xs; (void)ys; (void)n;
    return NAN; /* never called: geom_have_avx2() is 0 */
}

#endif
#endif
