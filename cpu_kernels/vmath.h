/* float32 math on VL lanes (common.h's vfloat) for the row kernels: e^x of x <= 0, partial loads and
 * stores, horizontal sums and maxima. */
#pragma once
#include "common.h"

/* a in every lane (not (vfloat){0} + a: that adds 0 to a, a scalar add before the broadcast) */
static inline vfloat vsplat(float a) { return (vfloat){a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a}; }
_Static_assert(VL == 16, "vsplat's lanes are written for 16");

/* lanes of a where m is set, else of b */
static inline vfloat vselect(vint m, vfloat a, vfloat b) { return (vfloat)((m & (vint)a) | (~m & (vint)b)); }

#if defined(__AVX512F__)
#include <immintrin.h>

/* a * b + c, rounded once where the CPU has the instruction (the polynomials' steps) */
static inline vfloat vfma(vfloat a, vfloat b, vfloat c) {
    return (vfloat)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
}

/* The first n (< VL) floats at p, the other lanes `pad` (a masked load: nothing past them is read). */
static inline vfloat vload_part(const float* p, int64_t n, float pad) {
    return (vfloat)_mm512_mask_loadu_ps(_mm512_set1_ps(pad), (__mmask16)((1u << n) - 1), p);
}

/* Store the first n (< VL) lanes of v at p. */
static inline void vstore_part(float* p, vfloat v, int64_t n) {
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), (__m512)v);
}
#else
static inline vfloat vfma(vfloat a, vfloat b, vfloat c) { return a * b + c; }

static inline vfloat vload_part(const float* p, int64_t n, float pad) {
    vfloat v = vsplat(pad);
    for (int64_t j = 0; j < n; ++j) v[j] = p[j];
    return v;
}

static inline void vstore_part(float* p, vfloat v, int64_t n) {
    for (int64_t j = 0; j < n; ++j) p[j] = v[j];
}
#endif

/* e^x for x <= 0 (and NaN, which stays NaN), as Cephes' expf: x = n ln2 + r with |r| <= ln2 / 2 (ln2
 * in two parts, so that r is exact), e^r by a degree-7 polynomial (within 1 ulp of float32 on that
 * range, about 2 ulp in all), times 2^n built from n's bits. 0 below -87.3365 (where e^x leaves the
 * normal floats: the result is off by at most 1.2e-38 there), computed from 0 in those lanes: subnormal
 * intermediates cost a hundred cycles each (masked keys' -1e4 scores in attention would take them). */
static inline vfloat vexp_neg(vfloat x) {
    const vfloat magic = vsplat(12582912.0f);  /* 1.5 * 2^23: adding it rounds to an integer */
    const vint under = x < -87.33654475f;
    x = vselect(under, (vfloat){0}, x);
    const vfloat kd = x * 1.44269504088896341f + magic, n = kd - magic;
    const vfloat r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
    vfloat p = vfma(vsplat(1.9875691500e-4f), r, vsplat(1.3981999507e-3f));
    p = vfma(p, r, vsplat(8.3334519073e-3f));
    p = vfma(p, r, vsplat(4.1665795894e-2f));
    p = vfma(p, r, vsplat(1.6666665459e-1f));
    p = vfma(p, r, vsplat(5.0000001201e-1f));
    p = vfma(p, r * r, r) + 1.0f;
    const vint scale = (((vint)kd - 0x4B400000) + 127) << 23;  /* kd's low bits hold n */
    return vselect(under, (vfloat){0}, p * (vfloat)scale);
}

/* The sum of v's lanes: halves added in a tree. */
static inline float vsum(vfloat s) {
    s += SHUF(s, s, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
    s += SHUF(s, s, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
    s += SHUF(s, s, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
    s += SHUF(s, s, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
    return s[0];
}

/* max(a, b), a NaN in either winning (as NumPy's maximum). */
static inline vfloat vmax_nan(vfloat a, vfloat b) {
    const vint m = (b > a) | (b != b);
    return vselect(m, b, a);
}

/* The largest of v's lanes, NaN if one is. */
static inline float vmax_lanes(vfloat s) {
    s = vmax_nan(s, SHUF(s, s, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
    s = vmax_nan(s, SHUF(s, s, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
    s = vmax_nan(s, SHUF(s, s, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
    s = vmax_nan(s, SHUF(s, s, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));
    return s[0];
}

/* A softmax row's first passes over x (n floats): its max m (NaN if an element is), and e^(x - m) for
 * every element, written to y when store is set (y may be x); returns the sum of those exponentials. */
static inline float vexp_row(const float* x, float* y, int64_t n, int store, float* max) {
    const int64_t full = n / VL * VL, rest = n - full;
    vfloat mv = vsplat(-INFINITY);
    for (int64_t i = 0; i < full; i += VL) mv = vmax_nan(mv, vload(x + i));
    if (rest) mv = vmax_nan(mv, vload_part(x + full, rest, -INFINITY));
    const float m = *max = vmax_lanes(mv);
    vfloat sv = {0};
    for (int64_t i = 0; i < full; i += VL) {
        const vfloat e = vexp_neg(vload(x + i) - m);
        sv += e;
        if (store) memcpy(y + i, &e, sizeof e);
    }
    if (rest) {
        const vfloat e = vexp_neg(vload_part(x + full, rest, -INFINITY) - m);  /* padding: e^-inf = 0 */
        sv += e;
        if (store) vstore_part(y + full, e, rest);
    }
    return vsum(sv);
}

/* y[i] *= s for n floats (a softmax row divided by its sum as a multiply by 1 / sum: within an ulp of
 * the quotient, where a divide takes ten times as long). */
static inline void vscale_row(float* y, int64_t n, float s) {
    const int64_t full = n / VL * VL, rest = n - full;
    for (int64_t i = 0; i < full; i += VL) {
        const vfloat v = vload(y + i) * s;
        memcpy(y + i, &v, sizeof v);
    }
    if (rest) vstore_part(y + full, vload_part(y + full, rest, 0.0f) * s, rest);
}
