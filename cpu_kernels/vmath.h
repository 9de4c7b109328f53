/* float32 math on VL lanes (common.h's vfloat) for the row kernels: e^x of x <= 0, partial loads and
 * stores, horizontal sums and maxima. */
#pragma once
#include "common.h"

/* a in every lane (not (vfloat){0} + a: that adds 0 to a, a scalar add before the broadcast) */
#if VL == 16
static inline vfloat vsplat(float a) { return (vfloat){a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a}; }
#else
_Static_assert(VL == 8, "vsplat's lanes are written for 8 or 16");
static inline vfloat vsplat(float a) { return (vfloat){a, a, a, a, a, a, a, a}; }
#endif

/* lanes of a where m is set, else of b */
static inline vfloat vselect(vint m, vfloat a, vfloat b) { return (vfloat)((m & (vint)a) | (~m & (vint)b)); }

#if defined(__AVX__)
#include <immintrin.h>
#endif

/* a * b + c, rounded once where the CPU has the instruction (the polynomials' steps; -std=c11 keeps gcc
 * from fusing a * b + c itself) */
static inline vfloat vfma(vfloat a, vfloat b, vfloat c) {
#if defined(__AVX512F__)
    return (vfloat)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif defined(__FMA__)
    return (vfloat)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
    return a * b + c;
#endif
}

#if defined(__AVX512F__)
/* The first n (< VL) floats at p, the other lanes `pad` (a masked load: nothing past them is read). */
static inline vfloat vload_part(const float* p, int64_t n, float pad) {
    return (vfloat)_mm512_mask_loadu_ps(_mm512_set1_ps(pad), (__mmask16)((1u << n) - 1), p);
}

/* Store the first n (< VL) lanes of v at p. */
static inline void vstore_part(float* p, vfloat v, int64_t n) {
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), (__m512)v);
}

/* 1 / a for a in [1, 2^126]: the 14-bit estimate and a Newton step (within an ulp; a divide takes longer) */
static inline vfloat vrcp(vfloat a) {
    const vfloat r = (vfloat)_mm512_rcp14_ps((__m512)a);
    return vfma(r, vfma(-a, r, vsplat(1.0f)), r);
}
#else
static inline vfloat vrcp(vfloat a) { return 1.0f / a; }

#if defined(__AVX2__)

/* Masked loads and stores. (Lane by lane, gcc built the vector in memory through a call to memcpy and
 * read it back whole, a failed store forwarding: a 55 x 55 MaxPool, a partial load per row, took 1.6x
 * as long.) */
static inline __m256i lanes_below(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline vfloat vload_part(const float* p, int64_t n, float pad) {
    const __m256i m = lanes_below(n);
    return (vfloat)_mm256_blendv_ps(_mm256_set1_ps(pad), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
}

static inline void vstore_part(float* p, vfloat v, int64_t n) { _mm256_maskstore_ps(p, lanes_below(n), (__m256)v); }
#else
static inline vfloat vload_part(const float* p, int64_t n, float pad) {
    vfloat v = vsplat(pad);
    for (int64_t j = 0; j < n; ++j) v[j] = p[j];
    return v;
}

static inline void vstore_part(float* p, vfloat v, int64_t n) {
    for (int64_t j = 0; j < n; ++j) p[j] = v[j];
}
#endif
#endif

/* e^r for |r| <= ln2 / 2 by Cephes' degree-7 polynomial (within 1 ulp of float32 there). */
static inline vfloat vexp_reduced(vfloat r) {
    vfloat p = vfma(vsplat(1.9875691500e-4f), r, vsplat(1.3981999507e-3f));
    p = vfma(p, r, vsplat(8.3334519073e-3f));
    p = vfma(p, r, vsplat(4.1665795894e-2f));
    p = vfma(p, r, vsplat(1.6666665459e-1f));
    p = vfma(p, r, vsplat(5.0000001201e-1f));
    return vfma(p, r * r, r) + 1.0f;
}

/* e^(x - d) for x - d <= 0 (and NaN, which stays NaN), as Cephes' expf: x - d = n ln2 + r with |r| <= ln2 / 2
 * (ln2 in two parts, so that x - n ln2 is exact where x is, d a small correction subtracted after it), e^r
 * by a degree-7 polynomial (within 1 ulp of float32 on that range, about 2 ulp in all), times 2^n built
 * from n's bits. 0 below -87.3365 (where e^x leaves the normal floats: the result is off by at most
 * 1.2e-38 there), computed from 0 in those lanes: subnormal intermediates cost a hundred cycles each
 * (masked keys' -1e4 scores in attention would take them). */
static inline vfloat vexp_neg_d(vfloat x, vfloat d) {
    const vfloat magic = vsplat(12582912.0f);  /* 1.5 * 2^23: adding it rounds to an integer */
    const vint under = x - d < -87.33654475f;
    x = vselect(under, (vfloat){0}, x);
    d = vselect(under, (vfloat){0}, d);
    const vfloat kd = (x - d) * 1.44269504088896341f + magic, n = kd - magic;
    const vfloat r = ((x - n * 0.693359375f) - n * -2.12194440e-4f) - d;
    const vfloat p = vexp_reduced(r);
    const vint scale = (((vint)kd - 0x4B400000) + 127) << 23;  /* kd's low bits hold n */
    return vselect(under, (vfloat){0}, p * (vfloat)scale);
}

/* e^x for x <= 0: vexp_neg_d without a correction (x - 0 is x: the same instructions as without it). */
static inline vfloat vexp_neg(vfloat x) { return vexp_neg_d(x, (vfloat){0}); }

/* e^x in every lane: vexp_neg_d's steps, which hold up to 88.72 (n up to 128: 2^n applied as two halves,
 * each a normal float), +inf above, 0 below -87.3365 (as vexp_neg), NaN kept. Within 2 ulp of float32. */
static inline vfloat vexp(vfloat x) {
    const vfloat magic = vsplat(12582912.0f);
    const vint under = x < -87.33654475f, over = x > 88.72283935546875f;
    const vfloat xs = vselect(under | over, (vfloat){0}, x);
    const vfloat kd = xs * 1.44269504088896341f + magic, n = kd - magic;
    const vfloat r = (xs - n * 0.693359375f) - n * -2.12194440e-4f;
    const vfloat p = vexp_reduced(r);
    const vint k = (vint)kd - 0x4B400000, h = k >> 1;  /* n = k = h + (k - h), each half in [-63, 64] */
    const vfloat e = p * (vfloat)((h + 127) << 23) * (vfloat)((k - h + 127) << 23);
    return vselect(over, vsplat(INFINITY), vselect(under, (vfloat){0}, e));
}

/* The erf of |x| < 0.921875 as x + x p(x^2) (p: degree 5, a minimax fit to erf(x) / x - 1 within 1.6e-8
 * relative); x2 = x * x. */
static inline vfloat verf_small(vfloat x, vfloat x2) {
    vfloat p = vfma(vsplat(-5.991083627e-4f), x2, vsplat(4.993228641e-3f));
    p = vfma(p, x2, vsplat(-2.676665170e-2f));
    p = vfma(p, x2, vsplat(1.128181722e-1f));
    p = vfma(p, x2, vsplat(-3.761249380e-1f));
    p = vfma(p, x2, vsplat(1.283791496e-1f));
    return vfma(x, p, x);
}

/* erfc(b) for b in [0, 10.25] as t e^(-b^2 + g(t)), t = 1 / (1 + b / 2) (Numerical Recipes' erfcc form;
 * g: degree 9 in t - 0.5816, a minimax fit within 5e-8), relative error a few ulp. b^2 = sq + sq_lo with sq
 * exact (the square of b's top 12 bits) and sq_lo the rest: e^-b^2 keeps its relative accuracy where b^2
 * is large (float32's own b * b would be off by up to 6e-6 near 10). */
static inline vfloat verfc_tail(vfloat b, vfloat sq, vfloat sq_lo) {
    const vfloat t = vrcp(1.0f + 0.5f * b), s = t - 0.5816326531f;
    vfloat g = vfma(vsplat(1.440217671e-1f), s, vsplat(7.781795670e-2f));
    g = vfma(g, s, vsplat(-2.457109628e-1f));
    g = vfma(g, s, vsplat(-4.027048013e-2f));
    g = vfma(g, s, vsplat(2.955737881e-1f));
    g = vfma(g, s, vsplat(-3.779015699e-2f));
    g = vfma(g, s, vsplat(-4.071459234e-1f));
    g = vfma(g, s, vsplat(9.278223470e-2f));
    g = vfma(g, s, vsplat(1.368424946f));
    g = vfma(g, s, vsplat(-5.609229168e-1f));
    return t * vexp_neg_d(-sq, sq_lo - g);
}

/* b's top 12 significant bits (b * b of them is exact in float32) */
static inline vfloat vhigh12(vfloat b) { return (vfloat)((vint)b & ((vint){0} + (int32_t)0xFFFFF000)); }

/* |x| (the sign bit cleared) */
static inline vfloat vabs(vfloat x) { return (vfloat)((vint)x & ((vint){0} + INT32_MAX)); }

/* erf(x) in float32 lanes, within 1.4 ulp of float32 (NaN stays NaN, +-inf gives +-1): verf_small below
 * 0.921875, else 1 - erfc(|x|) with the sign of x, |x| clamped to 4 (erfc(4) = 1.5e-8 rounds away). */
static inline vfloat verf(vfloat x) {
    const vfloat a = vabs(x), b = vselect(a < 4.0f, a, vsplat(4.0f)), bh = vhigh12(b);
    const vfloat e = verfc_tail(b, bh * bh, (b + bh) * (b - bh)), one = vsplat(1.0f);
    const vfloat tail = vselect(x < 0, e - one, one - e), r = vselect(a < 0.921875f, verf_small(x, x * x), tail);
    return vselect(x != x, x, r);
}

/* The sum of v's lanes: halves added in a tree. */
static inline float vsum(vfloat s) {
#if VL == 16
    s += SHUF(s, s, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
    s += SHUF(s, s, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
    s += SHUF(s, s, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
    s += SHUF(s, s, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
#else
    s += SHUF(s, s, 4, 5, 6, 7, 0, 1, 2, 3);
    s += SHUF(s, s, 2, 3, 0, 1, 6, 7, 4, 5);
    s += SHUF(s, s, 1, 0, 3, 2, 5, 4, 7, 6);
#endif
    return s[0];
}

/* max(a, b), a NaN in either winning (as NumPy's maximum). */
static inline vfloat vmax_nan(vfloat a, vfloat b) {
    const vint m = (b > a) | (b != b);
    return vselect(m, b, a);
}

/* The largest of v's lanes, NaN if one is. */
static inline float vmax_lanes(vfloat s) {
#if VL == 16
    s = vmax_nan(s, SHUF(s, s, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
    s = vmax_nan(s, SHUF(s, s, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
    s = vmax_nan(s, SHUF(s, s, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
    s = vmax_nan(s, SHUF(s, s, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));
#else
    s = vmax_nan(s, SHUF(s, s, 4, 5, 6, 7, 0, 1, 2, 3));
    s = vmax_nan(s, SHUF(s, s, 2, 3, 0, 1, 6, 7, 4, 5));
    s = vmax_nan(s, SHUF(s, s, 1, 0, 3, 2, 5, 4, 7, 6));
#endif
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
