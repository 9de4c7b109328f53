/* Special functions, elementwise, where NumPy has none. Return 0.
 *
 * erf_f32: vmath.h's verf in float32 lanes (within 1.4 ulp of float32).
 * gelu_f32: x * (1 + erf(x / sqrt(2))) / 2 in float32 lanes (gelu_of below: within 8 ulp, without the
 *   formula's cancellation where x < 0).
 * erf_f64: the C library's erf, one call per element (within an ulp).
 * sigmoid_f32: 1 / (1 + e^-x) in double with the same exp (within an ulp of float32).
 * quick_gelu_f32: x * sigmoid(alpha x) in float32 lanes, e^-|alpha x| by vmath.h's vexp_neg (a few ulp:
 *   the float32 arithmetic of the NumPy code, whose exp is within an ulp).
 * bias_gelu_f32: gelu_f32 of x + bias (the sum rounded to float32 first, as an Add before it).
 * fast_gelu_f32: the tanh form, x (1 + tanh z) / 2 with z = sqrt(2 / pi) (x + 0.044715 x^3) in float32
 *   (the NumPy code's operations), as x * sigmoid(2 z), the same function without 1 + tanh's cancellation
 *   where z < 0: within a few ulp of it. */

/* Floating-point exceptions are not observed (NumPy clears the flags before its own loops): without
 * this the compiler keeps sigmoid_f32's selects as branches, and the loop scalar. Before the includes: gcc
 * inlines no function into one whose optimize options differ, and vmath.h's helpers were left as calls
 * (QuickGelu took 1.3-1.4x as long, Gelu 1.4x, Erf 1.1x: AMD EPYC, Zen 3). */
#if defined(__clang__)
#pragma clang fp exceptions(ignore)
#elif defined(__GNUC__)
#pragma GCC optimize("no-trapping-math")
#endif

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "pool_threads.h"
#include "vmath.h"

/* e^y for y in [-104, 0]: y = k ln2 + r, e^r by its Taylor polynomial (|r| <= 0.35: error below 1e-14),
 * 2^k from k's bits as 1.5 * 2^52 + k holds them (plain integer lane arithmetic, which AVX2 has too). */
static inline double exp_nonpositive(double y) {
    const double magic = 6755399441055744.0, kd = y * 1.4426950408889634 + magic, k = kd - magic;
    uint64_t bits;
    memcpy(&bits, &kd, sizeof bits);
    bits = (bits + 1023) << 52;
    const double r = (y - k * 6.93147180369123816490e-01) - k * 1.90821492927058770002e-10;
    double p = 1.0 / 39916800;
    static const double inv[] = {1.0 / 3628800, 1.0 / 362880, 1.0 / 40320, 1.0 / 5040, 1.0 / 720, 1.0 / 120,
                                 1.0 / 24, 1.0 / 6, 0.5, 1.0, 1.0};
#pragma GCC unroll 16
    for (int i = 0; i < 11; ++i) p = p * r + inv[i];
    double scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* 1 / (1 + e^-v) of a float32 value v, in double: e^-|v| (|v| clamped to 104, past which the float32
 * result is 0 or 1 either way), then 1 / (1 + e) or e / (1 + e) by v's sign. */
static inline double sigmoid_of(double v) {
    const double a = fabs(v), e = exp_nonpositive(-(a < 104.0 ? a : 104.0)), r = (v >= 0 ? 1.0 : e) / (1.0 + e);
    return v != v ? v : r;
}

typedef struct {
    const void* x;
    void* y;
    int64_t n, kind;  /* 2: erf_f64, 3: sigmoid_f32 */
} SpecialArgs;

static void special_part(void* ctx, int64_t part, int64_t parts) {
    const SpecialArgs* a = ctx;
    int64_t lo, hi;
    pool_range(a->n, 64, part, parts, &lo, &hi);  /* whole vectors: each element computed as in one part */
    if (a->kind == 3) {
        const float* restrict x = a->x;
        float* restrict y = a->y;
        for (int64_t i = lo; i < hi; ++i) y[i] = (float)sigmoid_of(x[i]);
    } else {
        const double* restrict x = a->x;
        double* restrict y = a->y;
        for (int64_t i = lo; i < hi; ++i) y[i] = erf(x[i]);
    }
}

/* Elements split across the pool's threads (pool_threads.h) from 16k per part. */
static int special(const void* x, void* y, int64_t n, int64_t kind) {
    SpecialArgs a = {x, y, n, kind};
    pool_run(special_part, &a, pool_parts(n, 16384));
    return 0;
}

int erf_f64(const double* restrict x, double* restrict y, int64_t n) { return special(x, y, n, 2); }

/* Sigmoid, 1 / (1 + e^-x), in one pass (where NumPy makes five, each with an array of its own). */
int sigmoid_f32(const float* restrict x, float* restrict y, int64_t n) { return special(x, y, n, 3); }

/* x * sigmoid(alpha x) on VL lanes: z = alpha x, e = e^-|z|, sigmoid = 1 / (1 + e) for z >= 0, else
 * e / (1 + e) (the NumPy code's branches). */
static inline vfloat quick_gelu_of(vfloat x, float alpha) {
    const vfloat z = x * alpha;
    const vfloat e = vexp_neg((vfloat)((vint)z | ((vint){0} + INT32_MIN)));  /* -|z|: the sign bit set */
    const vfloat one = vsplat(1.0f);
    return x * (vselect(z >= 0, one, e) / (one + e));
}

typedef struct {
    const float* x;
    float* y;
    int64_t n;
    float alpha;
} QuickGeluArgs;

/* y = EXPR of v over n floats, v = x a vector at a time (EXPR: a vfloat expression of v, as the conv
 * epilogues' CONV_EPILOGUE). */
#define VECTOR_ROW(EXPR, x, y, n)                                                                  \
    do {                                                                                           \
        int64_t i_ = 0;                                                                            \
        for (; i_ + VL <= (n); i_ += VL) {                                                         \
            const vfloat v = vload((x) + i_);                                                      \
            const vfloat e_ = (EXPR);                                                              \
            memcpy((y) + i_, &e_, sizeof e_);                                                      \
        }                                                                                          \
        if (i_ < (n)) {                                                                            \
            const vfloat v = vload_part((x) + i_, (n) - i_, 0.0f);                                 \
            vstore_part((y) + i_, (EXPR), (n) - i_);                                               \
        }                                                                                          \
    } while (0)

static void quick_gelu_part(void* ctx, int64_t part, int64_t parts) {
    const QuickGeluArgs* a = ctx;
    int64_t lo, hi;
    pool_range(a->n, VL, part, parts, &lo, &hi);
    VECTOR_ROW(quick_gelu_of(v, a->alpha), a->x + lo, a->y + lo, hi - lo);
}

/* QuickGelu (com.microsoft; SiLU / Swish with alpha 1), x * sigmoid(alpha x), in one pass. */
int quick_gelu_f32(const float* x, float* y, int64_t n, float alpha) {
    QuickGeluArgs a = {x, y, n, alpha};
    pool_run(quick_gelu_part, &a, pool_parts(n, 16384));
    return 0;
}

/* Rows of n: elements [lo, hi) of x (+ bias[i % n]) in contiguous segments within a row. */
typedef struct {
    const float* x;
    const float* bias;
    float* y;
    int64_t size, n, kind;  /* 0: bias_gelu_f32, 1: fast_gelu_f32, 2: erf_f32 */
} BiasArgs;

static inline vfloat fast_gelu_of(vfloat x) {
    const vfloat z = (x + x * 0.044715f * x * x) * 0.7978845608028654f;
    const vfloat e = vexp_neg((vfloat)((vint)(z + z) | ((vint){0} + INT32_MIN)));  /* e^-|2z| */
    const vfloat one = vsplat(1.0f);
    return x * (vselect(z >= 0, one, e) / (one + e));
}

/* x (1 + erf(x / sqrt(2))) / 2 as x erfc(|z|) / 2 where x < 0, else x (1 - erfc(|z|) / 2), z = x / sqrt(2),
 * by vmath.h's verfc_tail (neither form cancels), with |z|^2 = x^2 / 2 split from x's top 12 bits (|x|
 * clamped to 14.5, past which the result is x or 0 in float32). Within 8 ulp of float32 over the whole
 * range; NaN stays NaN, +inf gives +inf, -inf NaN (the formula's -inf * 0). */
static inline vfloat gelu_of(vfloat x) {
    const vfloat a = vabs(x), c = vselect(a < 14.5f, a, vsplat(14.5f)), ch = vhigh12(c);
    const vfloat h = 0.5f * verfc_tail(c * 0.70710678118654752f, 0.5f * (ch * ch), 0.5f * ((c + ch) * (c - ch)));
    return x * vselect(x < 0, h, 1.0f - h);
}

static inline vfloat lanes_of(int64_t kind, vfloat v) {
    return kind == 0 ? gelu_of(v) : kind == 1 ? fast_gelu_of(v) : verf(v);
}

static void bias_segment(const BiasArgs* a, int64_t i, int64_t m, const float* b) {
    const float* restrict x = a->x + i;
    float* restrict y = a->y + i;
    int64_t j = 0;
    for (; j + VL <= m; j += VL) {
        const vfloat v = b ? vload(x + j) + vload(b + j) : vload(x + j);
        const vfloat g = lanes_of(a->kind, v);
        memcpy(y + j, &g, sizeof g);
    }
    if (j < m) {
        const vfloat v = vload_part(x + j, m - j, 0.0f) + (b ? vload_part(b + j, m - j, 0.0f) : (vfloat){0});
        vstore_part(y + j, lanes_of(a->kind, v), m - j);
    }
}

static void bias_part(void* ctx, int64_t part, int64_t parts) {
    const BiasArgs* a = ctx;
    int64_t lo, hi;
    pool_range(a->size, VL, part, parts, &lo, &hi);
    while (lo < hi) {
        const int64_t j = a->bias ? lo % a->n : 0, end = a->bias && hi - lo > a->n - j ? lo + a->n - j : hi;
        bias_segment(a, lo, end - lo, a->bias ? a->bias + j : NULL);
        lo = end;
    }
}

static int biased(const float* x, const float* bias, float* y, int64_t size, int64_t n, int64_t kind) {
    BiasArgs a = {x, bias, y, size, n, kind};
    pool_run(bias_part, &a, pool_parts(size, 16384));
    return 0;
}

/* Gelu of x + bias[i % n] (bias NULL: of x), x and y of `size` floats (com.microsoft BiasGelu). */
int bias_gelu_f32(const float* x, const float* bias, float* y, int64_t size, int64_t n) {
    return biased(x, bias, y, size, n, 0);
}

int erf_f32(const float* x, float* y, int64_t n) { return biased(x, NULL, y, n, n, 2); }

/* Gelu, x * (1 + erf(x / sqrt(2))) / 2, in one pass (ai.onnx Gelu, com.microsoft Gelu). */
int gelu_f32(const float* x, float* y, int64_t n) { return biased(x, NULL, y, n, n, 0); }

/* FastGelu (com.microsoft; ai.onnx Gelu's tanh form) of x + bias[i % n] (bias NULL: of x). */
int fast_gelu_f32(const float* x, const float* bias, float* y, int64_t size, int64_t n) {
    return biased(x, bias, y, size, n, 1);
}

int special_bind_threads(const void* run, const void* get) { return pool_bind(run, get); }

/* The element-wise activations of native programs (gpuops/onnx/programs.py), one rounding per
 * operation as the NumPy ops make them: NaN stays NaN (NumPy's maximum and minimum return it). */
enum { UNARY_RELU, UNARY_SIGMOID, UNARY_HARD_SWISH, UNARY_HARD_SIGMOID, UNARY_SQRT, UNARY_RECIPROCAL, UNARY_NEG,
       UNARY_ABS, UNARY_TANH, UNARY_EXP, UNARY_LOG, UNARY_SQUARE, UNARY_CLIP, UNARY_ERF, UNARY_FLOOR, UNARY_CEIL };

/* tanh in float32 lanes, as Cephes' tanhf: below 0.625 in magnitude x + x^3 p(x^2) (p: degree 4), above
 * (1 - e) / (1 + e) with e = e^-2|x| by vmath.h's vexp_neg (no cancellation there: e < 0.29), the sign
 * put back (within 2 ulp of float32, 1.5 measured; NaN stays, +-inf give +-1). */
static inline vfloat vtanh(vfloat x) {
    const vfloat ax = vabs(x), z = x * x;
    vfloat p = vfma(vsplat(-5.70498872745e-3f), z, vsplat(2.06390887954e-2f));
    p = vfma(p, z, vsplat(-5.37397155531e-2f));
    p = vfma(p, z, vsplat(1.33314422036e-1f));
    p = vfma(p, z, vsplat(-3.33332819422e-1f));
    const vfloat e = vexp_neg(-2.0f * ax);
    const vfloat t = vselect(ax < 0.625f, vfma(p * z, ax, ax), (1.0f - e) / (1.0f + e));  /* tanh |x| */
    return (vfloat)((vint)t | ((vint)x & (vint)vsplat(-0.0f)));
}

static inline float max_nan(float x, float lo) { return (x >= lo || x != x) ? x : lo; }
static inline float min_nan(float x, float hi) { return (x <= hi || x != x) ? x : hi; }

/* p = {kind, n, alpha, beta (param_float)}: y = kind(a) over n floats (HardSigmoid: alpha and beta; Clip:
 * [alpha, beta]). Sqrt, the reciprocal, negation, absolute value, square, floor, ceiling and the clamps
 * round as NumPy's ufuncs (once, correctly); log is libm's, within an ulp or two of NumPy's own loops,
 * exp vexp's and tanh vtanh's (libm's expf and tanhf, one element at a time, took 5 ns an element: a
 * third of a GELU-heavy model's time); sigmoid and erf are the CPU ops' kernels. */
int unary_planned_f32(const int64_t* p, const float* a, const void* unused, float* y) {
    (void)unused;
    const int64_t kind = p[0], n = p[1];
    const float alpha = param_float(p, 2), beta = param_float(p, 3);
    switch (kind) {
        case UNARY_SIGMOID: return sigmoid_f32(a, y, n);
        case UNARY_ERF: return erf_f32(a, y, n);
        case UNARY_RELU: for (int64_t i = 0; i < n; ++i) y[i] = max_nan(a[i], 0.0f); break;
        case UNARY_HARD_SWISH: {
            const float sixth = (float)(1.0 / 6.0);
            for (int64_t i = 0; i < n; ++i) y[i] = a[i] * min_nan(max_nan(a[i] * sixth + 0.5f, 0.0f), 1.0f);
            break;
        }
        case UNARY_HARD_SIGMOID:
            for (int64_t i = 0; i < n; ++i) y[i] = min_nan(max_nan(a[i] * alpha + beta, 0.0f), 1.0f);
            break;
        case UNARY_SQRT: for (int64_t i = 0; i < n; ++i) y[i] = sqrtf(a[i]); break;
        case UNARY_RECIPROCAL: for (int64_t i = 0; i < n; ++i) y[i] = 1.0f / a[i]; break;
        case UNARY_NEG: for (int64_t i = 0; i < n; ++i) y[i] = -a[i]; break;
        case UNARY_ABS: for (int64_t i = 0; i < n; ++i) y[i] = fabsf(a[i]); break;
        case UNARY_FLOOR: for (int64_t i = 0; i < n; ++i) y[i] = floorf(a[i]); break;
        case UNARY_CEIL: for (int64_t i = 0; i < n; ++i) y[i] = ceilf(a[i]); break;
        case UNARY_TANH: VECTOR_ROW(vtanh(v), a, y, n); break;
        case UNARY_EXP: VECTOR_ROW(vexp(v), a, y, n); break;
        case UNARY_LOG: for (int64_t i = 0; i < n; ++i) y[i] = logf(a[i]); break;
        case UNARY_SQUARE: for (int64_t i = 0; i < n; ++i) y[i] = a[i] * a[i]; break;
        default: for (int64_t i = 0; i < n; ++i) y[i] = min_nan(max_nan(a[i], alpha), beta);
    }
    return 0;
}

/* The GELU family as a program step: p = {kind, size, n, bias (address or 0), alpha (param_float)}:
 * gelu_f32 (0), bias_gelu_f32 (1), fast_gelu_f32 (2), quick_gelu_f32 (3), as the ops call them. */
int gelu_planned_f32(const int64_t* p, const float* x, const void* unused, float* y) {
    (void)unused;
    const float* bias = (const float*)(intptr_t)p[3];
    switch (p[0]) {
        case 0: return gelu_f32(x, y, p[1]);
        case 1: return bias_gelu_f32(x, bias, y, p[1], p[2]);
        case 2: return fast_gelu_f32(x, bias, y, p[1], p[2]);
        default: return quick_gelu_f32(x, y, p[1], param_float(p, 4));
    }
}
